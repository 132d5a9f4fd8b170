"""Classical real-time hybrid testing (RTHT) in the time domain (SPEC §4): the baseline the
iterative Fourier-domain test is compared with, and a design tool for delay compensation.

The loop
--------
A hybrid structure is a numerical substructure (NS, a :class:`~hbtest.substructure.Substructure`
with ``n`` DOFs) and a physical substructure (PS) sharing ``n_ch`` interface channels (one
actuator each; the NS and PS interface lists correspond entry by entry). Every real-time step
``dt`` (1 ms .. 0.2 ms is typical) the controller

1. reads the measured PS interface force ``r`` and actuator displacement ``x`` (samples),
2. advances the NS ``M q'' + C q' + K q = f_ext(t) - E r`` one step and takes its interface
   demand ``z = E^T q`` (with ``z'``, ``z''`` from the NS's own velocity and acceleration),
3. passes the demand through a compensator (:class:`NoCompensation`,
   :class:`PolynomialPredictor`, :class:`AdaptiveForwardPredictor`,
   :class:`InverseModelCompensator`, :class:`MinimalControlSynthesis`) to the command ``u``,
4. sends ``u`` to the transfer system (:class:`TransferSystem`: pure delay, first- or
   second-order lag, each with a delay), which moves the PS.

Time integration (exact, unconditionally stable)
-----------------------------------------------
Every continuous part is a linear state space discretised *exactly* for a first-order hold
(inputs linear between samples; block matrix exponential, :func:`discretize_foh`):

- the NS, states ``[q; q']``, inputs the measured force and the harmonic external force;
- the "plant" = transfer system in series with the PS, states ``[actuator; PS bulk q_b, q_b']``,
  inputs the delayed command ``(u, u', u'')``, outputs the interface force ``r`` and the
  actuator motion ``(x, x', x'')``. The PS is driven by prescribed interface motion:
  ``M_bb q_b'' + C_bb q_b' + K_bb q_b = -(M_bi x'' + C_bi x' + K_bi x)`` and
  ``r = M_ii x'' + C_ii x' + K_ii x + M_ib q_b'' + C_ib q_b' + K_ib q_b``; its transfer
  function is the condensed ``D_P(s)``. A PS with inertia at the interface needs ``x''``
  (the neutral delay equation of continuous structures): the pure-delay actuator delivers
  the delayed NS acceleration, a second-order lag its own acceleration.

The command samples reach the actuator as a piecewise-linear signal delayed by ``tau`` (a
fractional number of steps is allowed). Because the force sample at ``t_{k+1}`` depends only
on commands up to ``t_{k+1} - tau``, a delay of at least one step (``tau >= dt``, the
unavoidable computation latency of a digital loop) makes the first-order hold causal, and
the loop approximates the continuous delay equation of :mod:`hbtest.stability` to
``O(dt^2)``: ``(D_N(s) + D_P(s) G(s) C(s)) U = F`` with ``G`` the transfer system and ``C``
the compensator. (A zero-order hold in the loop would add an effective ``dt/2`` of delay.)

Accuracy measures: synchronisation error ``e2 = z - x``; global error against the emulated
(monolithic, delay-free) structure simulated with the same integrator; subspace plot
(``x`` against ``z``, :func:`subspace_figure`); growth rate from the log-envelope of the
response (:func:`growth_rate`); delay and amplification of each PS interface signal against
its NS counterpart at a periodic point (:func:`delay_and_amplification`).

Units: SI throughout (m, N, s); frequencies in Hz where named ``_hz``.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.optimize

from .structures import Structure
from .substructure import Substructure

__all__ = [
    "discretize_foh",
    "TransferSystem",
    "Compensator",
    "NoCompensation",
    "PolynomialPredictor",
    "AdaptiveForwardPredictor",
    "InverseModelCompensator",
    "MinimalControlSynthesis",
    "LagModel",
    "identify_lag",
    "HybridSystem",
    "sdof_benchmark",
    "three_mass_benchmark",
    "cantilever_benchmark",
    "Excitation",
    "ClassicalResult",
    "GrowthRate",
    "growth_rate",
    "simulate",
    "simulate_emulated",
    "harmonic_fit",
    "delay_and_amplification",
    "predicted_equation",
    "predicted_rightmost",
    "critical_delay_simulated",
    "critical_delay_predicted",
    "subspace_figure",
]

_TWO_PI = 2.0 * np.pi


# ---------------------------------------------------------------------------------------
# exact discretisation


def discretize_foh(A: np.ndarray, B: np.ndarray, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Exact discretisation of ``x' = A x + B u`` for an input linear between samples:
    ``x[k+1] = Phi x[k] + Ga u[k] + Gb u[k+1]``. From one block matrix exponential
    ``expm([[A dt, B dt, 0], [0, 0, I], [0, 0, 0]]) = [[Phi, G0, G1], ...]`` with
    ``G0 = int_0^dt e^{A s} ds B`` and ``G1 = int_0^dt e^{A (dt - s)} (s/dt) ds B``;
    ``Ga = G0 - G1``, ``Gb = G1``. Returns (Phi, Ga, Gb)."""
    A = np.asarray(A, dtype=float)
    B = np.asarray(B, dtype=float)
    n = A.shape[0] if A.ndim == 2 else 0
    if n == 0:
        m = B.shape[1] if B.ndim == 2 else 0
        return np.zeros((0, 0)), np.zeros((0, m)), np.zeros((0, m))
    B = B.reshape(n, -1)
    m = B.shape[1]
    Z = np.zeros((n + 2 * m, n + 2 * m))
    Z[:n, :n] = A * dt
    Z[:n, n : n + m] = B * dt
    Z[n : n + m, n + m :] = np.eye(m)
    E = scipy.linalg.expm(Z)
    Phi, G0, G1 = E[:n, :n], E[:n, n : n + m], E[:n, n + m :]
    return Phi, G0 - G1, G1


# ---------------------------------------------------------------------------------------
# transfer systems


@dataclass(frozen=True)
class TransferSystem:
    """The actuators between command and PS (same model on every channel).

    ``kind``: ``"delay"`` (``x = u(t - tau)``), ``"lag1"`` (``T x' + x = u(t - tau)``),
    ``"lag2"`` (``x'' + 2 zeta w x' + w^2 x = w^2 u(t - tau)``, ``w = 2 pi f``).
    ``delay`` [s], ``time_constant`` [s] (lag1), ``natural_frequency_hz``, ``damping_ratio``
    (lag2), ``gain`` (static gain of the lags; 1 = ideal)."""

    kind: str = "delay"
    delay: float = 0.0
    time_constant: float = 0.0
    natural_frequency_hz: float = 0.0
    damping_ratio: float = 0.7
    gain: float = 1.0

    def __post_init__(self):
        if self.kind not in ("delay", "lag1", "lag2"):
            raise ValueError(f"unknown transfer system {self.kind!r}; use delay, lag1 or lag2")
        if not (math.isfinite(self.delay) and self.delay >= 0):
            raise ValueError(f"delay must be non-negative, got {self.delay}")
        if self.kind == "lag1" and not self.time_constant > 0:
            raise ValueError("a first-order lag needs a positive time_constant")
        if self.kind == "lag2" and not (self.natural_frequency_hz > 0 and self.damping_ratio > 0):
            raise ValueError("a second-order lag needs positive natural_frequency_hz and damping_ratio")

    def frequency_response(self, s) -> np.ndarray:
        """``G(s)`` including the delay (scalar per channel)."""
        s = np.asarray(s, dtype=complex)
        e = np.exp(-s * self.delay)
        if self.kind == "delay":
            return e
        if self.kind == "lag1":
            return self.gain * e / (1 + s * self.time_constant)
        w = _TWO_PI * self.natural_frequency_hz
        return self.gain * e * w * w / (s * s + 2 * self.damping_ratio * w * s + w * w)

    def state_space(self, n_ch: int):
        """(A, B, C, D) of the delay-free part; input ``[u; u'; u'']`` (3 n_ch, blocks of
        n_ch), output ``[x; x'; x'']`` (3 n_ch)."""
        I, Zr = np.eye(n_ch), np.zeros((n_ch, n_ch))
        g = self.gain
        if self.kind == "delay":
            return np.zeros((0, 0)), np.zeros((0, 3 * n_ch)), np.zeros((3 * n_ch, 0)), np.eye(3 * n_ch)
        if self.kind == "lag1":
            T = self.time_constant
            A = -I / T
            B = np.hstack([g * I / T, Zr, Zr])
            C = np.vstack([I, -I / T, I / T**2])
            D = np.block([[Zr, Zr, Zr], [g * I / T, Zr, Zr], [-g * I / T**2, g * I / T, Zr]])
            return A, B, C, D
        w = _TWO_PI * self.natural_frequency_hz
        z = self.damping_ratio
        A = np.block([[Zr, I], [-w * w * I, -2 * z * w * I]])
        B = np.vstack([np.hstack([Zr, Zr, Zr]), np.hstack([g * w * w * I, Zr, Zr])])
        C = np.block([[I, Zr], [Zr, I], [-w * w * I, -2 * z * w * I]])
        D = np.vstack([np.zeros((2 * n_ch, 3 * n_ch)), np.hstack([g * w * w * I, Zr, Zr])])
        return A, B, C, D

    def respond(self, u: np.ndarray, dt: float, n_ch: int = 1) -> np.ndarray:
        """Open-loop actuator displacement for command samples ``u`` (n_steps,) or
        (n_steps, n_ch), starting at rest (command history zero). Any delay >= 0 (the whole
        command is known in advance). Used to identify the transfer system."""
        u = np.asarray(u, dtype=float)
        one = u.ndim == 1
        U = u.reshape(u.shape[0], -1)
        n_ch = U.shape[1]
        t = dt * np.arange(U.shape[0])
        Ud = np.gradient(U, dt, axis=0)
        Udd = np.gradient(Ud, dt, axis=0)
        W = np.concatenate([U, Ud, Udd], axis=1)
        Wd = np.stack([np.interp(t - self.delay, t, W[:, j], left=0.0) for j in range(W.shape[1])], axis=1)
        A, B, C, D = self.state_space(n_ch)
        Phi, Ga, Gb = discretize_foh(A, B, dt)
        xs = np.zeros(A.shape[0])
        out = np.zeros_like(U)
        for k in range(U.shape[0]):
            out[k] = (C @ xs + D @ Wd[k])[:n_ch]
            if k + 1 < U.shape[0]:
                xs = Phi @ xs + Ga @ Wd[k] + Gb @ Wd[k + 1]
        return out[:, 0] if one else out


# ---------------------------------------------------------------------------------------
# compensators


class Compensator(abc.ABC):
    """Turns the demand history into the command. ``start`` is called once before a run;
    ``command(k, Z, X)`` returns the command ``(3, n_ch)`` = ``(u, u', u'')`` at step ``k``
    from the demand history ``Z[j] = (z, z', z'')`` (``j <= k``; negative indices hold the
    initial value, see :class:`_History`) and the measured actuator displacement ``X[j]``
    (``j <= k``). ``trace`` returns adapted parameters over time (may be empty)."""

    name = "none"

    def start(self, dt: float, n_ch: int, n_steps: int) -> None:
        self.dt, self.n_ch = dt, n_ch

    @abc.abstractmethod
    def command(self, k: int, Z: "_History", X: "_History") -> np.ndarray:
        """The command (3, n_ch) at step k."""

    def trace(self) -> dict:
        return {}

    @property
    def lti(self) -> bool:
        """True when the compensator is linear time-invariant (a stability prediction exists)."""
        return False


class NoCompensation(Compensator):
    """``u = z`` (with the NS's velocity and acceleration as ``u'``, ``u''``)."""

    name = "none"

    def command(self, k, Z, X):
        return Z[k]

    @property
    def lti(self):
        return True


class PolynomialPredictor(Compensator):
    """Forward prediction by a least-squares polynomial of ``order`` through the last
    ``n_samples`` demand samples, evaluated ``horizon`` [s] ahead (weights from
    :func:`hbtest.stability.polynomial_predictor_weights`; the one-step order-2 rule
    ``(3, -3, 1)`` is ``order=2, n_samples=3, horizon=dt``). The same weights predict
    ``z'`` and ``z''``."""

    name = "poly"

    def __init__(self, order: int = 2, n_samples: int = 3, horizon: float | None = None):
        if n_samples < order + 1:
            raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
        self.order, self.n_samples, self.horizon = int(order), int(n_samples), horizon

    def start(self, dt, n_ch, n_steps):
        from .stability import polynomial_predictor_weights

        super().start(dt, n_ch, n_steps)
        if self.horizon is None:
            raise ValueError("PolynomialPredictor needs a horizon [s] (usually the transfer delay)")
        self.weights = polynomial_predictor_weights(self.order, self.n_samples, self.horizon / dt)

    def command(self, k, Z, X):
        return np.tensordot(self.weights, Z.window(k, self.n_samples), axes=1)

    @property
    def lti(self):
        return True


class AdaptiveForwardPredictor(Compensator):
    """Adaptive forward prediction (after Wallace et al. 2005): ``u = sigma P_rho(z)`` with a
    polynomial predictor of horizon ``rho`` and an amplitude gain ``sigma``, per channel.

    Both adapt from the synchronisation error ``e2 = z - x``: at each zero crossing of the
    demand, ``rho <- rho + alpha sign(e)|e|^gamma`` with ``e = sign(z') e2 / A`` (a lagging
    actuator gives ``e > 0``: predict further); at each extremum,
    ``sigma <- sigma + beta sign(e)|e|^gamma`` with ``e = sign(z) e2 / A`` (undershoot gives
    ``e > 0``: amplify). ``A`` is the magnitude of the channel's last demand extremum, so
    ``e`` is a phase error [rad] at zero crossings and a relative amplitude error at extrema
    and the gains are scale-free: ``alpha`` [s per unit e], ``beta`` [-]. No adaptation
    before the first extremum. ``rho`` is kept in ``[0, rho_max]``, ``sigma`` in
    ``[0.2, 5]``."""

    name = "afp"

    def __init__(self, order: int = 2, n_samples: int = 3, rho0: float = 0.0, sigma0: float = 1.0,
                 alpha: float = 2e-3, beta: float = 0.5, gamma: float = 1.0, rho_max: float = 0.05):
        if n_samples < order + 1:
            raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
        self.order, self.n_samples = int(order), int(n_samples)
        self.rho0, self.sigma0 = float(rho0), float(sigma0)
        self.alpha, self.beta, self.gamma, self.rho_max = float(alpha), float(beta), float(gamma), float(rho_max)

    def start(self, dt, n_ch, n_steps):
        from .stability import polynomial_predictor_weights

        super().start(dt, n_ch, n_steps)
        self._pw = polynomial_predictor_weights
        self.rho = np.full(n_ch, self.rho0)
        self.sigma = np.full(n_ch, self.sigma0)
        self.amp = np.full(n_ch, np.nan)
        self.weights = np.stack([self._pw(self.order, self.n_samples, r / dt) for r in self.rho])  # (n_ch, n)
        self._rho_t = np.zeros((n_steps + 1, n_ch))
        self._sigma_t = np.zeros((n_steps + 1, n_ch))
        self.events = 0

    def _law(self, e):
        return np.sign(e) * np.abs(e) ** self.gamma

    def command(self, k, Z, X):
        if k >= 1:
            z0, z1 = Z[k - 1], Z[k]
            e2 = z1[0] - X[k]
            for c in range(self.n_ch):
                if z1[1, c] * z0[1, c] < 0 or (z1[1, c] == 0 and z0[1, c] != 0):  # extremum of z
                    self.amp[c] = abs(z1[0, c])
                    if self.amp[c] > 0:
                        e = np.sign(z1[0, c]) * e2[c] / self.amp[c]
                        self.sigma[c] = float(np.clip(self.sigma[c] + self.beta * self._law(e), 0.2, 5.0))
                        self.events += 1
                if z1[0, c] * z0[0, c] < 0 and np.isfinite(self.amp[c]) and self.amp[c] > 0:  # zero crossing
                    e = np.sign(z1[1, c]) * e2[c] / self.amp[c]
                    self.rho[c] = float(np.clip(self.rho[c] + self.alpha * self._law(e), 0.0, self.rho_max))
                    self.weights[c] = self._pw(self.order, self.n_samples, self.rho[c] / self.dt)
                    self.events += 1
        self._rho_t[k], self._sigma_t[k] = self.rho, self.sigma
        win = Z.window(k, self.n_samples)  # (n, 3, n_ch)
        return self.sigma * np.einsum("cj,jdc->dc", self.weights, win)

    def trace(self):
        return {"rho_s": self._rho_t, "sigma": self._sigma_t}


@dataclass(frozen=True)
class LagModel:
    """An identified transfer-system model ``G_n(s) = g exp(-s tau) / (1 + s T)``; ``T`` [s],
    ``tau`` [s]; ``rms_misfit`` relative rms misfit of the fit over the excited lines."""

    gain: float
    time_constant: float
    delay: float
    rms_misfit: float = 0.0

    def frequency_response(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=complex)
        return self.gain * np.exp(-s * self.delay) / (1 + s * self.time_constant)

    def to_dict(self) -> dict:
        return dict(gain=self.gain, time_constant_s=self.time_constant, delay_s=self.delay, rms_misfit=self.rms_misfit)


def identify_lag(transfer: TransferSystem | Callable, dt: float, band_hz: tuple[float, float] = (1.0, 50.0),
                 period_s: float = 1.0, amplitude: float = 1e-3, noise_rms: float = 0.0, seed: int = 0) -> LagModel:
    """Identify ``G_n(s) = g exp(-s tau)/(1 + s T)`` from a test signal.

    Test signal: a multisine (lines ``1/period_s`` apart over ``band_hz``, Schroeder-like
    random phases from ``seed``, peak ``amplitude`` [m]) played for two periods through
    ``transfer`` (a :class:`TransferSystem` or a callable ``u -> x`` on samples); the second
    period gives the FRF ``X/U`` at the excited lines (optional white measurement noise of
    ``noise_rms`` [m]). Fit: ``T`` from the magnitude and ``tau`` from the phase slope as a
    start, then nonlinear least squares on the complex misfit over all lines."""
    rng = np.random.default_rng(seed)
    n = int(round(period_s / dt))
    f0 = 1.0 / (n * dt)
    lines = np.arange(max(1, int(math.ceil(band_hz[0] / f0))), int(band_hz[1] / f0) + 1)
    if lines.size < 3:
        raise ValueError("the identification band holds fewer than 3 lines")
    ph = rng.uniform(0, _TWO_PI, lines.size)
    t = dt * np.arange(2 * n)
    u = np.cos(_TWO_PI * f0 * np.outer(t, lines) + ph).sum(axis=1)
    u *= amplitude / np.abs(u).max()
    x = transfer.respond(u, dt) if isinstance(transfer, TransferSystem) else np.asarray(transfer(u), dtype=float)
    if noise_rms > 0:
        x = x + rng.normal(0.0, noise_rms, x.shape)
    U = np.fft.rfft(u[n:])[lines]
    Xf = np.fft.rfft(x[n:])[lines]
    H = Xf / U
    w = _TWO_PI * f0 * lines
    mag = np.abs(H)
    # |H|^-2 = (1 + w^2 T^2)/g^2: linear in w^2
    a, b = np.polyfit(w * w, 1.0 / np.maximum(mag, 1e-300) ** 2, 1)
    g0 = float(1.0 / np.sqrt(max(b, 1e-300)))
    T0 = float(np.sqrt(max(a, 0.0)) * g0)
    phase = np.unwrap(np.angle(H)) + np.arctan(w * T0)
    tau0 = float(max(0.0, -np.polyfit(w, phase, 1)[0]))

    def res(p):
        g, T, tau = p
        m = g * np.exp(-1j * w * tau) / (1 + 1j * w * T)
        r = (m - H) / np.maximum(np.abs(H), 1e-12)
        return np.concatenate([r.real, r.imag])

    sol = scipy.optimize.least_squares(res, [g0, T0, tau0], bounds=([0, 0, 0], [np.inf, np.inf, np.inf]), x_scale=[1.0, dt, dt])
    g, T, tau = (float(v) for v in sol.x)
    misfit = float(np.sqrt(np.mean(res(sol.x) ** 2) * 2))
    return LagModel(g, T, tau, misfit)


class InverseModelCompensator(Compensator):
    """Send ``G_n^-1(s) z`` for an identified ``G_n = g exp(-s tau)/(1 + s T)``:
    ``u = (P_tau(z) + T P_tau(z'))/g`` — the delay is inverted by polynomial forward
    prediction of horizon ``tau`` (``order``, ``n_samples``; exact interpolation when
    ``n_samples = order + 1``) and the lag by the NS's own velocity state ``z'`` (so the
    improper inverse is made proper without differentiating a measured signal);
    ``u' = (P(z') + T P(z''))/g``, and ``u''`` uses a backward difference of ``P(z'')``."""

    name = "inverse"

    def __init__(self, model: LagModel, order: int = 2, n_samples: int = 3):
        if n_samples < order + 1:
            raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
        self.model, self.order, self.n_samples = model, int(order), int(n_samples)

    def start(self, dt, n_ch, n_steps):
        from .stability import polynomial_predictor_weights

        super().start(dt, n_ch, n_steps)
        self.weights = polynomial_predictor_weights(self.order, self.n_samples, self.model.delay / dt)
        self._prev_acc = None

    def command(self, k, Z, X):
        P = np.tensordot(self.weights, Z.window(k, self.n_samples), axes=1)  # (3, n_ch)
        T, g = self.model.time_constant, self.model.gain
        jerk = np.zeros(self.n_ch) if self._prev_acc is None else (P[2] - self._prev_acc) / self.dt
        self._prev_acc = P[2].copy()
        return np.stack([P[0] + T * P[1], P[1] + T * P[2], P[2] + T * jerk]) / g

    @property
    def lti(self):
        return True


class MinimalControlSynthesis(Compensator):
    """Minimal control synthesis (model-reference adaptive control, Stoten & Benchoubane),
    per channel: ``u = K x + K_r r`` with the plant state ``x`` = measured actuator
    displacement, the reference ``r`` = demand ``z``, the reference-model state ``x_m``
    (``T_m x_m' + x_m = r``; ``x_m = r`` when ``reference_time_constant`` is 0) and
    ``y_e = C_e (x_m - x)`` (``C_e = 1``):

        K = alpha int y_e x dt + beta y_e x,      K_r = alpha int y_e r dt + beta y_e r
                                                   (+ kr0, the initial K_r).

    Signals in the adaptation are divided by the running peak of ``|z|`` so ``alpha`` [1/s]
    and ``beta`` [-] are scale-free. ``u'``, ``u''`` are backward differences of ``u``."""

    name = "mcs"

    def __init__(self, alpha: float = 50.0, beta: float = 0.5, reference_time_constant: float = 0.0, kr0: float = 1.0):
        self.alpha, self.beta, self.Tm, self.kr0 = float(alpha), float(beta), float(reference_time_constant), float(kr0)

    def start(self, dt, n_ch, n_steps):
        super().start(dt, n_ch, n_steps)
        self.KI = np.zeros(n_ch)
        self.KrI = np.full(n_ch, self.kr0)
        self.xm = None
        self.peak = np.zeros(n_ch)
        self._u = np.zeros((2, n_ch))
        self._K_t = np.zeros((n_steps + 1, n_ch))
        self._Kr_t = np.zeros((n_steps + 1, n_ch))
        self.am = math.exp(-dt / self.Tm) if self.Tm > 0 else 0.0

    def command(self, k, Z, X):
        r = Z[k][0]
        x = X[k]
        if self.xm is None:
            self.xm = r.copy()
        elif self.Tm > 0:
            self.xm = self.am * self.xm + (1 - self.am) * r
        else:
            self.xm = r.copy()
        self.peak = np.maximum(self.peak, np.abs(r))
        sc = np.where(self.peak > 0, self.peak, 1.0)
        ye, xs, rs = (self.xm - x) / sc, x / sc, r / sc
        self.KI += self.alpha * ye * xs * self.dt
        self.KrI += self.alpha * ye * rs * self.dt
        K = self.KI + self.beta * ye * xs
        Kr = self.KrI + self.beta * ye * rs
        u = K * x + Kr * r
        self._K_t[k], self._Kr_t[k] = K, Kr
        ud = (u - self._u[0]) / self.dt if k > 0 else np.zeros(self.n_ch)
        udd = (ud - self._u[1]) / self.dt if k > 1 else np.zeros(self.n_ch)
        self._u = np.stack([u, ud])
        return np.stack([u, ud, udd])

    def trace(self):
        return {"K": self._K_t, "Kr": self._Kr_t}


# ---------------------------------------------------------------------------------------
# hybrid systems


@dataclass(frozen=True, eq=False)
class HybridSystem:
    """A numerical and a physical substructure with corresponding interface lists (one
    actuator per entry). ``force`` is the complex amplitude vector [N] of the external force
    on the NS DOFs (``f(t) = Re(force e^{i w t})``) used when an excitation frequency is
    given. ``label`` names the benchmark."""

    ns: Substructure
    ps: Substructure
    force: np.ndarray | None = None
    label: str = ""

    def __post_init__(self):
        if len(self.ns.interface) != len(self.ps.interface):
            raise ValueError("the NS and PS interfaces differ in size")
        n = self.ns.structure.n_dof
        f = np.zeros(n, complex) if self.force is None else np.asarray(self.force, dtype=complex).reshape(-1)
        if f.shape != (n,):
            raise ValueError(f"force must have {n} entries (NS DOFs), got {f.shape}")
        object.__setattr__(self, "force", f)

    @property
    def n_ch(self) -> int:
        return len(self.ns.interface)

    def stability_system(self):
        """The :class:`hbtest.stability.SingleDelaySystem` of this split (one delay)."""
        from .stability import hybrid_system

        return hybrid_system(self.ns, self.ps, label=self.label)

    def emulated(self) -> Structure:
        """The monolithic structure: NS DOFs, then PS bulk DOFs, PS interface tied to the NS
        interface."""
        from .substructure import join

        return join(self.ns, self.ps)

    def interface_response(self, frequency_hz, amplitude_scale: float = 1.0) -> np.ndarray:
        """Emulated interface displacement amplitudes ``(D_N + D_P)^-1 F_cond`` at
        ``frequency_hz`` (scalar or array), shape (*f.shape, n_ch), complex [m | rad]."""
        f = np.asarray(frequency_hz, dtype=float)
        s = _TWO_PI * 1j * f
        D = self.ns.dynamic_stiffness(s) + self.ps.dynamic_stiffness(s)
        Fc = self.ns.condensed_force(self.force * amplitude_scale, s)
        return np.linalg.solve(D, Fc[..., None])[..., 0]


def sdof_benchmark(m: float = 1.0, c: float = 6.3, k: float = 4000.0, ks: float = 4000.0) -> HybridSystem:
    """Single oscillator split at its spring: ``m z'' + c z' + k z + k_s z(t - tau) = f``.
    NS = mass, damper and spring ``k`` [kg, N s/m, N/m]; PS = the pure spring ``k_s`` behind
    the actuator. External force on the mass (unit amplitude)."""
    for name, v in (("m", m), ("k", k)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if c < 0 or ks < 0:
        raise ValueError("c and ks must not be negative")
    ns = Substructure(Structure(M=[[m]], C=[[c]], K=[[k]], dof_names=("z",)), ("z",))
    ps = Substructure(Structure(M=[[0.0]], C=[[0.0]], K=[[ks]], dof_names=("z",)), ("z",))
    return HybridSystem(ns, ps, np.array([1.0 + 0j]), label="sdof")


def three_mass_benchmark(masses=(1.0, 0.5, 1.0), springs=(1000.0, 2000.0, 2000.0, 1000.0),
                         dampers=(1.0, 0.5, 0.5, 1.0), force_on: int = 0) -> HybridSystem:
    """The symmetric three-mass chain between two walls with two actuators, split as in
    Wallace et al. (2005, multi-actuator substructuring) and ``sweeps/three-mass-chain.toml``:

        wall --k0-- m0 --k1-- m1 --k2-- m2 --k3-- wall

    NS = the outer masses ``m0``, ``m2`` with their wall springs/dashpots ``k0``, ``k3``;
    PS = the middle mass ``m1`` with the coupling springs/dashpots ``k1``, ``k2``; actuator 1
    imposes ``x0`` on the free end of ``k1``, actuator 2 imposes ``x2`` on ``k2``; the
    measured spring forces are fed back. External force (unit amplitude) on mass
    ``force_on`` (0 or 2)."""
    m0, m1, m2 = (float(v) for v in masses)
    k0, k1, k2, k3 = (float(v) for v in springs)
    c0, c1, c2, c3 = (float(v) for v in dampers)
    ns_s = Structure(M=np.diag([m0, m2]), C=np.diag([c0, c3]), K=np.diag([k0, k3]), dof_names=("x0", "x2"))
    # PS DOFs: (a1 = end of k1 at x0, a2 = end of k2 at x2, x1)
    K = np.array([[k1, 0, -k1], [0, k2, -k2], [-k1, -k2, k1 + k2]])
    C = np.array([[c1, 0, -c1], [0, c2, -c2], [-c1, -c2, c1 + c2]])
    ps_s = Structure(M=np.diag([0.0, 0.0, m1]), C=C, K=K, dof_names=("x0", "x2", "x1"))
    if force_on not in (0, 2):
        raise ValueError("force_on must be 0 or 2 (a numerical mass)")
    F = np.zeros(2, complex)
    F[0 if force_on == 0 else 1] = 1.0
    return HybridSystem(Substructure(ns_s, ("x0", "x2")), Substructure(ps_s, ("x0", "x2")), F, label="three-mass")


def cantilever_benchmark(cfg) -> HybridSystem:
    """The cantilever of a sweep file: NS = the root beam of ``[numerical]``
    (``cfg.numerical.substructure()``), PS = the tip beam (free at the interface, the twin's
    free tip) from the sweep's ``[design.physical]`` or else the rig file's ``[physical]``
    beam (same damping model ``C = zeta_M M + zeta_K K``), interface (u, theta). External
    force: ``cfg.excitation`` (amplitude [N] at its node)."""
    from .design import physical_beam_for_design

    ns = cfg.numerical.substructure()
    spec, _ = physical_beam_for_design(cfg)
    pb = spec.build(left="free", right="free", x_offset=cfg.numerical.beam.length)
    ps = Substructure(pb, ("u0", "theta0"))
    return HybridSystem(ns, ps, cfg.excitation.force_vector(ns), label=f"cantilever {cfg.name}")


# ---------------------------------------------------------------------------------------
# state-space parts


def _ns_state_space(ns: Substructure, force: np.ndarray):
    """NS: states [q; q'], inputs [r (n_ch); cos wt; sin wt]: ``M q'' + C q' + K q =
    Re(F) cos - Im(F) sin - E r``. Returns A, B, and output maps for z, z', z''."""
    S = ns.structure
    n = S.n_dof
    try:
        Minv = np.linalg.inv(S.M)
    except np.linalg.LinAlgError:
        raise ValueError("the numerical substructure needs a non-singular mass matrix") from None
    ii = ns.interface_index
    E = np.zeros((n, len(ii)))
    E[ii, range(len(ii))] = 1.0
    Fin = np.column_stack([-E, force.real, -force.imag])
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ S.K, -Minv @ S.C]])
    B = np.vstack([np.zeros((n, Fin.shape[1])), Minv @ Fin])
    Cz = np.hstack([E.T, np.zeros((len(ii), n))])
    Czd = np.hstack([np.zeros((len(ii), n)), E.T])
    Czdd = E.T @ A[n:]  # acceleration rows
    Dzdd = E.T @ B[n:]
    return A, B, Cz, Czd, Czdd, Dzdd


def _ps_state_space(ps: Substructure):
    """PS under prescribed interface motion: states [q_b; q_b'], input [x; x'; x''] (3 n_ch),
    output the interface force r (n_ch). Transfer function = condensed ``D_P(s)``."""
    S = ps.structure
    i, b = ps.interface_index, ps.bulk_index
    ix = np.ix_
    Mii, Cii, Kii = (getattr(S, m)[ix(i, i)] for m in ("M", "C", "K"))
    nc = len(i)
    if not b:
        return np.zeros((0, 0)), np.zeros((0, 3 * nc)), np.zeros((nc, 0)), np.hstack([Kii, Cii, Mii])
    Mbb, Cbb, Kbb = (getattr(S, m)[ix(b, b)] for m in ("M", "C", "K"))
    Mbi, Cbi, Kbi = (getattr(S, m)[ix(b, i)] for m in ("M", "C", "K"))
    Mib, Cib, Kib = (getattr(S, m)[ix(i, b)] for m in ("M", "C", "K"))
    try:
        Mbb_inv = np.linalg.inv(Mbb)
    except np.linalg.LinAlgError:
        raise ValueError("the physical substructure's bulk DOFs need a non-singular mass matrix") from None
    nb = len(b)
    A = np.block([[np.zeros((nb, nb)), np.eye(nb)], [-Mbb_inv @ Kbb, -Mbb_inv @ Cbb]])
    B = np.vstack([np.zeros((nb, 3 * nc)), -Mbb_inv @ np.hstack([Kbi, Cbi, Mbi])])
    C = np.hstack([Kib - Mib @ Mbb_inv @ Kbb, Cib - Mib @ Mbb_inv @ Cbb])
    D = np.hstack([Kii - Mib @ Mbb_inv @ Kbi, Cii - Mib @ Mbb_inv @ Cbi, Mii - Mib @ Mbb_inv @ Mbi])
    return A, B, C, D


def _plant(transfer: TransferSystem, ps: Substructure):
    """Transfer system in series with the PS. Input: delayed command (3 n_ch); outputs:
    r (n_ch) and actuator displacement x (n_ch)."""
    nc = len(ps.interface)
    Aa, Ba, Ca, Da = transfer.state_space(nc)
    Ap, Bp, Cp, Dp = _ps_state_space(ps)
    na, npp = Aa.shape[0], Ap.shape[0]
    A = np.zeros((na + npp, na + npp))
    A[:na, :na] = Aa
    A[na:, :na] = Bp @ Ca
    A[na:, na:] = Ap
    B = np.vstack([Ba, Bp @ Da])
    Cr = np.hstack([Dp @ Ca, Cp])
    Dr = Dp @ Da
    Cx = np.hstack([Ca[:nc], np.zeros((nc, npp))])
    Dx = Da[:nc]
    return A, B, Cr, Dr, Cx, Dx


class _History:
    """Samples indexed from ``-pad`` (initial value repeated) to ``n_steps``."""

    def __init__(self, n_steps: int, shape: tuple, pad: int = 64, initial=None):
        self.pad = pad
        self.a = np.zeros((n_steps + 1 + pad,) + shape)
        if initial is not None:
            self.a[: pad + 1] = initial

    def __getitem__(self, k):
        return self.a[k + self.pad]

    def __setitem__(self, k, v):
        self.a[k + self.pad] = v

    def window(self, k: int, n: int) -> np.ndarray:
        """Samples k, k-1, ..., k-n+1 (newest first)."""
        j = k + self.pad
        if j - n + 1 < 0:
            raise IndexError("history too short for this predictor")
        return self.a[j - n + 1 : j + 1][::-1]

    def at(self, pos: float) -> np.ndarray:
        """Linear interpolation at fractional index ``pos`` (before the record: the first
        stored value)."""
        p = pos + self.pad
        if p <= 0:
            return self.a[0]
        j = int(math.floor(p))
        f = p - j
        if f < 1e-12:
            return self.a[j]
        return (1 - f) * self.a[j] + f * self.a[j + 1]

    def values(self, upto: int) -> np.ndarray:
        return self.a[self.pad : self.pad + upto + 1]


# ---------------------------------------------------------------------------------------
# simulation


@dataclass(frozen=True)
class Excitation:
    """Harmonic external force ``amplitude * Re(F e^{i 2 pi f t})`` with ``F`` the
    system's force vector; ``frequency_hz = 0`` or ``amplitude = 0``: none."""

    frequency_hz: float = 0.0
    amplitude: float = 1.0

    @property
    def active(self) -> bool:
        return self.frequency_hz > 0 and self.amplitude != 0


@dataclass(frozen=True)
class GrowthRate:
    """Exponential growth rate [1/s] of a response envelope: ``rate`` (least-squares slope
    of ``ln(envelope)``), ``stderr`` its standard error, ``window_s`` the fitted time span,
    ``unstable`` when ``rate > max(3 stderr, ln(1.5)/window_s)`` (the envelope grows by more
    than half over the fit, beyond its scatter), ``frequency_hz`` the dominant frequency."""

    rate: float
    stderr: float
    window_s: float
    frequency_hz: float
    unstable: bool

    def to_dict(self) -> dict:
        return dict(growth_rate_per_s=_jf(self.rate), stderr_per_s=_jf(self.stderr), window_s=_jf(self.window_s),
                    frequency_hz=_jf(self.frequency_hz), unstable=bool(self.unstable))


def _jf(x):
    x = float(x)
    return x if math.isfinite(x) else None


def harmonic_fit(t: np.ndarray, y: np.ndarray, frequency_hz: float) -> np.ndarray:
    """Least-squares ``y ~ a0 + Re(Y e^{i w t})`` per column; returns (a0, Y) stacked as a
    complex array of shape (2, *y.shape[1:]) (SPEC §0 convention ``Y = a - i b``)."""
    w = _TWO_PI * frequency_hz
    X = np.column_stack([np.ones_like(t), np.cos(w * t), np.sin(w * t)])
    coef, *_ = np.linalg.lstsq(X, y.reshape(y.shape[0], -1), rcond=None)
    out = np.stack([coef[0].astype(complex), coef[1] - 1j * coef[2]])
    return out.reshape((2,) + y.shape[1:])


def _blowing_up(t: np.ndarray, Y: np.ndarray, skip_fraction: float) -> bool:
    """True when the raw response grows by more than 1e3 from its smallest level after
    ``skip_fraction`` to the end (the forced part is then negligible where it is fitted)."""
    a = np.abs(Y).max(axis=1)
    n = a.size
    i0 = int(skip_fraction * n)
    m = max(1, n // 20)
    start = a[i0 : i0 + m].max() if i0 + m <= n else a[i0:].max()
    end = a[n - m :].max()
    return bool(start > 0 and end > 1e3 * start)


def _envelope_fit(t: np.ndarray, Y: np.ndarray, skip_fraction: float) -> GrowthRate:
    """Log-envelope fit of (n, n_ch) samples (see :func:`growth_rate`)."""
    nan = GrowthRate(float("nan"), float("nan"), 0.0, float("nan"), False)
    dt = t[1] - t[0]
    scale = np.abs(Y).max(axis=0)
    scale[scale == 0] = 1.0
    a = (np.abs(Y) / scale).max(axis=1)
    if not np.any(a > 0):
        return nan
    half = Y[Y.shape[0] // 2 :]
    spec = np.abs(np.fft.rfft(half - half.mean(axis=0), axis=0)).sum(axis=1)
    spec[0] = 0.0
    fr = np.fft.rfftfreq(half.shape[0], dt)
    f_dom = float(fr[np.argmax(spec)]) if spec.size > 1 and spec.max() > 0 else 0.0
    win = max(4, int(round(1.0 / f_dom / dt))) if f_dom > 0 else max(8, t.size // 50)
    nw = t.size // win
    if nw < 4:
        win = max(2, t.size // 8)
        nw = t.size // win
    # only true local maxima of |y| count (a window edge on a rising flank is no envelope point)
    peak = np.zeros_like(a)
    lm = (a[1:-1] >= a[:-2]) & (a[1:-1] >= a[2:])
    peak[1:-1][lm] = a[1:-1][lm]
    blocks = peak[: nw * win].reshape(nw, win)
    imax = blocks.argmax(axis=1)
    env = blocks[np.arange(nw), imax]
    tc = t[: nw * win].reshape(nw, win)[np.arange(nw), imax]  # time of each window's peak
    keep = (tc >= t[0] + skip_fraction * (t[-1] - t[0])) & (env > 1e-12 * env.max())
    le = np.log(np.where(env > 0, env, np.nan))
    if keep.sum() >= 3:
        lk = le[keep]
        if lk[-1] - lk.min() > math.log(1e3):
            lo = lk.min() + 0.5 * (lk[-1] - lk.min())
            upper = keep & (le >= lo) & (tc >= tc[keep][np.argmin(lk)])
            keep = upper if upper.sum() >= 4 else keep & (tc >= tc[keep][np.argmin(lk)])
    if keep.sum() < 3:
        return nan
    X = np.column_stack([np.ones(keep.sum()), tc[keep]])
    coef, *_ = np.linalg.lstsq(X, le[keep], rcond=None)
    r = le[keep] - X @ coef
    dof = max(keep.sum() - 2, 1)
    cov = np.linalg.inv(X.T @ X) * float(r @ r) / dof
    rate, se = float(coef[1]), float(np.sqrt(max(cov[1, 1], 0.0)))
    span = float(tc[keep][-1] - tc[keep][0])
    unstable = bool(rate > max(3 * se, math.log(1.5) / max(span, dt)))
    # refine the frequency over the fitted span (the FFT of a short, growing record is
    # coarse): peaks of |y| of the channel with the largest normalised late amplitude are half
    # a period apart; parabolic interpolation places each peak between samples
    inside = np.flatnonzero((t >= tc[keep][0]) & (t <= tc[keep][-1]))
    if inside.size > 8:
        ch = int(np.argmax(np.abs(Y[inside][-max(4, win) :]).max(axis=0) / scale))
        yy = np.abs(Y[inside, ch])
        j = 1 + np.flatnonzero((yy[1:-1] > yy[:-2]) & (yy[1:-1] >= yy[2:]))
        if j.size >= 3:
            den = yy[j - 1] - 2 * yy[j] + yy[j + 1]
            off = np.where(den != 0, 0.5 * (yy[j - 1] - yy[j + 1]) / np.where(den != 0, den, 1.0), 0.0)
            tp = t[inside][j] + np.clip(off, -0.5, 0.5) * dt
            f_dom = float(0.5 * (j.size - 1) / (tp[-1] - tp[0]))
    return GrowthRate(rate, se, span, f_dom, unstable)


def growth_rate(t: np.ndarray, y: np.ndarray, forcing_hz: float = 0.0, skip_fraction: float = 0.2, iterations: int = 4) -> GrowthRate:
    """Growth rate of a response from the log of its envelope.

    ``y`` (n,) or (n, n_ch) (channels combined by the max of ``|y|`` after each is
    normalised). Envelope: the largest local maximum of ``|y|`` in each window of one period
    of the dominant frequency (FFT peak of the second half), placed at its time (the peaks of
    one exponential sinusoid lie on its envelope; a window edge on a rising flank does not). Fit: least squares of
    ``ln(envelope)`` against those times over the windows after ``skip_fraction`` of the
    record and above 1e-12 of the largest envelope (round-off floor); when the envelope grew
    by more than 1e3, only its upper half in log scale, where the fastest root dominates.

    With a harmonic forcing at ``forcing_hz`` the steady part is removed first, so what is
    fitted is the homogeneous (transient or growing) response: a least-squares fit of
    ``a0 + a cos + b sin`` (after ``skip_fraction``), repeated ``iterations`` times with the
    current estimate of the homogeneous part ``e^{sigma t}(c cos + d sin)(2 pi f_d t)`` fitted
    alongside so that the two do not leak into each other. Not done when the raw response
    grows by more than 1e3 (the forced part is then negligible where it is fitted). A root
    within about one over the record length of the forcing frequency cannot be separated
    from the steady part: use a free response (no forcing) for precise rates."""
    t = np.asarray(t, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(t.size, -1)
    ok = np.all(np.isfinite(Y), axis=1)
    t, Y = t[ok], Y[ok]
    if t.size < 16:
        return GrowthRate(float("nan"), float("nan"), 0.0, float("nan"), False)
    if not (forcing_hz > 0) or _blowing_up(t, Y, skip_fraction):
        return _envelope_fit(t, Y, skip_fraction)
    i0 = int(skip_fraction * t.size)
    wf = _TWO_PI * forcing_hz
    tt = t - t[0]
    base = [np.ones_like(t), np.cos(wf * t), np.sin(wf * t)]
    est = None
    for _ in range(max(1, iterations)):
        cols = list(base)
        if est is not None and np.isfinite(est.rate) and est.frequency_hz > 0 and abs(est.frequency_hz - forcing_hz) > 0.5 / (t[-1] - t[0]):
            e = np.exp(np.clip(est.rate * (tt - tt[-1]), -700, 0))
            wd = _TWO_PI * est.frequency_hz
            cols += [e * np.cos(wd * t), e * np.sin(wd * t)]
        X = np.column_stack(cols)
        coef, *_ = np.linalg.lstsq(X[i0:], Y[i0:], rcond=None)
        R = Y - X[:, :3] @ coef[:3]
        new = _envelope_fit(t, R, skip_fraction)
        if est is not None and np.isfinite(new.rate) and abs(new.rate - est.rate) <= 1e-3 * (1 + abs(new.rate)):
            return new
        est = new
    return est


@dataclass
class ClassicalResult:
    """One classical hybrid-test run. Arrays over time (rows) and interface channels
    (columns), SI units: ``t`` [s], ``z`` demand (NS interface displacement), ``x`` actuator
    (PS interface) displacement, ``u`` command, ``r`` measured PS interface force,
    ``z_emulated`` the emulated structure's interface displacement (or None).
    ``blew_up``: the run stopped early at ``t[-1]`` because ``|z|`` exceeded the blow-up
    limit. ``trace``: adapted compensator parameters over time."""

    t: np.ndarray
    z: np.ndarray
    x: np.ndarray
    u: np.ndarray
    r: np.ndarray
    z_emulated: np.ndarray | None
    dt: float
    delay: float
    excitation: Excitation
    compensator: str
    blew_up: bool = False
    trace: dict = field(default_factory=dict)

    @property
    def sync_error(self) -> np.ndarray:
        """``e2 = z - x``."""
        return self.z - self.x

    @property
    def global_error(self) -> np.ndarray | None:
        """``z - z_emulated``."""
        return None if self.z_emulated is None else self.z - self.z_emulated

    def _tail(self, a: np.ndarray, fraction: float) -> np.ndarray:
        n = a.shape[0]
        return a[int(n * (1 - fraction)) :]

    def rms_sync_error(self, fraction: float = 0.5) -> float:
        """RMS of ``e2`` over the last ``fraction`` of the record (all channels)."""
        return float(np.sqrt(np.mean(self._tail(self.sync_error, fraction) ** 2)))

    def rms_global_error(self, fraction: float = 0.5) -> float:
        g = self.global_error
        return float("nan") if g is None else float(np.sqrt(np.mean(self._tail(g, fraction) ** 2)))

    @property
    def stable(self) -> bool:
        """Neither blown up nor growing (:attr:`GrowthRate.unstable`)."""
        return not self.blew_up and not self.growth().unstable

    def growth(self, skip_fraction: float = 0.2) -> GrowthRate:
        """Growth rate of the demand and the actuator displacement together
        (:func:`growth_rate`, harmonic steady part removed): a loop instability shows in both,
        an instability of the compensator-actuator loop (e.g. adaptive gains) first in ``x``."""
        f = self.excitation.frequency_hz if self.excitation.active else 0.0
        return growth_rate(self.t, np.hstack([self.z, self.x]), f, skip_fraction)

    def steady_amplitude(self, periods: int = 10) -> np.ndarray:
        """Complex amplitude of ``z`` at the forcing frequency from the last ``periods``
        whole periods (per channel)."""
        f = self.excitation.frequency_hz
        n = int(round(periods / f / self.dt))
        n = min(n, self.t.size)
        return harmonic_fit(self.t[-n:], self.z[-n:], f)[1]


def simulate(system: HybridSystem, transfer: TransferSystem, compensator: Compensator | None = None,
             dt: float = 2e-4, duration: float = 2.0, excitation: Excitation = Excitation(),
             initial_displacement=None, emulated: bool = True, blowup: float = 1e6) -> ClassicalResult:
    """Run a classical real-time hybrid test (see the module docstring for the loop and the
    integrator). ``transfer.delay`` must be at least ``dt``. ``initial_displacement``: NS
    DOF displacements at ``t = 0`` [m | rad] (history: at rest, command zero before 0).
    ``emulated``: also simulate the emulated structure for the global error. The run stops
    early (``blew_up``) when the demand or the actuator displacement of a channel exceeds
    ``blowup`` times that channel's largest emulated (or initial) displacement."""
    if not dt > 0:
        raise ValueError("dt must be positive")
    if transfer.delay < dt * (1 - 1e-9):
        raise ValueError(f"the transfer delay ({transfer.delay:g} s) must be at least one time step ({dt:g} s): a digital loop has one step of latency")
    comp = NoCompensation() if compensator is None else compensator
    n_steps = int(round(duration / dt))
    nc = system.n_ch
    An, Bn, Cz, Czd, Czdd, Dzdd = _ns_state_space(system.ns, system.force * excitation.amplitude)
    Phin, Gan, Gbn = discretize_foh(An, Bn, dt)
    Ap, Bp, Cr, Dr, Cx, Dx = _plant(transfer, system.ps)
    Php, Gap, Gbp = discretize_foh(Ap, Bp, dt)
    w = _TWO_PI * excitation.frequency_hz if excitation.active else 0.0
    t = dt * np.arange(n_steps + 1)
    harm = np.column_stack([np.cos(w * t), np.sin(w * t)]) if excitation.active else np.zeros((n_steps + 1, 2))
    nn = system.ns.structure.n_dof
    xn = np.zeros(2 * nn)
    if initial_displacement is not None:
        xn[:nn] = np.asarray(initial_displacement, dtype=float)
    xp = np.zeros(Ap.shape[0])

    zem = None
    ref = np.zeros(nc)
    if emulated:
        zem = simulate_emulated(system, dt, duration, excitation, initial_displacement)
        ref = np.abs(zem).max(axis=0)
    if initial_displacement is not None:
        ref = np.maximum(ref, np.abs(np.asarray(initial_displacement, dtype=float)[system.ns.interface_index]))
    limit = np.where(ref > 0, blowup * ref, np.inf)

    # split the NS input matrices into the feedback part (r) and the harmonic drive
    Gan_r, Gbn_r = Gan[:, :nc], Gbn[:, :nc]
    drive = harm[:-1] @ Gan[:, nc:].T + harm[1:] @ Gbn[:, nc:].T  # (n_steps, 2 nn)
    Cz3 = np.vstack([Cz, Czd, Czdd])  # (3 nc, 2 nn)
    Dz3_r = np.vstack([np.zeros((2 * nc, nc)), Dzdd[:, :nc]])
    acc_h = harm @ Dzdd[:, nc:].T  # (n_steps + 1, nc)
    Cpl = np.vstack([Cr, Cx])
    Dpl = np.vstack([Dr, Dx])
    # the delayed command at step k: linear interpolation at k - dpos
    dpos = max(transfer.delay / dt, 1.0)
    jd = int(math.floor(dpos + 1e-12))
    fd = dpos - jd  # u(k - dpos) = (1 - fd) u[k - jd] + fd u[k - jd - 1]

    pad = max(64, jd + 2, int(getattr(comp, "n_samples", 0)) + 1)
    Z = _History(n_steps, (3, nc), pad)
    U = _History(n_steps, (3, nc), pad)
    X = _History(n_steps, (nc,), pad)
    R = np.zeros((n_steps + 1, nc))
    Ua = U.a
    Ua_flat = Ua.reshape(Ua.shape[0], -1)

    def delayed(k):
        i = k - jd + pad
        if i <= 0:
            return Ua_flat[0]
        return (1 - fd) * Ua_flat[i] + fd * Ua_flat[i - 1] if fd > 1e-12 else Ua_flat[i]

    # step 0
    w0 = delayed(0)
    y0 = Cpl @ xp + Dpl @ w0
    r0 = y0[:nc]
    z3 = Cz3 @ xn + Dz3_r @ r0
    z3[2 * nc :] += acc_h[0]
    Z[0] = z3.reshape(3, nc)
    Z.a[: Z.pad] = Z[0] * np.array([1.0, 0.0, 0.0])[:, None]
    X[0], R[0] = y0[nc:], r0
    comp.start(dt, nc, n_steps)
    U[0] = comp.command(0, Z, X)
    last = n_steps
    blew = False
    Za, Xa, zp = Z.a, X.a, Z.pad
    for k in range(n_steps):
        w1 = delayed(k + 1)
        xp = Php @ xp + Gap @ w0 + Gbp @ w1
        y1 = Cpl @ xp + Dpl @ w1
        r1 = y1[:nc]
        xn = Phin @ xn + drive[k] + Gan_r @ r0 + Gbn_r @ r1
        z3 = Cz3 @ xn + Dz3_r @ r1
        z3[2 * nc :] += acc_h[k + 1]
        Za[k + 1 + zp] = z3.reshape(3, nc)
        Xa[k + 1 + zp] = y1[nc:]
        R[k + 1] = r1
        Ua[k + 1 + pad] = comp.command(k + 1, Z, X)
        w0, r0 = w1, r1
        if np.any(np.abs(z3[:nc]) > limit) or np.any(np.abs(y1[nc:]) > limit) or not np.all(np.isfinite(z3[:nc])):
            last, blew = k + 1, True
            break
    sl = slice(0, last + 1)
    tr = {key: v[sl] for key, v in comp.trace().items()}
    return ClassicalResult(
        t=t[sl], z=Z.values(last)[:, 0].copy(), x=X.values(last).copy(), u=U.values(last)[:, 0].copy(), r=R[sl],
        z_emulated=None if zem is None else zem[sl], dt=dt, delay=transfer.delay, excitation=excitation,
        compensator=comp.name, blew_up=blew, trace=tr,
    )


def simulate_emulated(system: HybridSystem, dt: float, duration: float, excitation: Excitation = Excitation(),
                      initial_displacement=None) -> np.ndarray:
    """Interface displacement (n_steps + 1, n_ch) of the emulated (monolithic, delay-free)
    structure with the same exact first-order-hold integrator, forcing and initial NS
    displacement (PS bulk at rest)."""
    S = system.emulated()
    n = S.n_dof
    nn = system.ns.structure.n_dof
    nb = len(system.ns.bulk_index)
    nc = system.n_ch
    # join() orders DOFs as (NS bulk, interface, PS bulk); map NS DOFs into it
    ns_order = system.ns.bulk_index + system.ns.interface_index
    P = np.zeros((n, nn))
    P[np.arange(nn), ns_order] = 1.0
    F = P @ (system.force * excitation.amplitude)
    Minv = np.linalg.inv(S.M)
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ S.K, -Minv @ S.C]])
    B = np.vstack([np.zeros((n, 2)), Minv @ np.column_stack([F.real, -F.imag])])
    Phi, Ga, Gb = discretize_foh(A, B, dt)
    n_steps = int(round(duration / dt))
    t = dt * np.arange(n_steps + 1)
    w = _TWO_PI * excitation.frequency_hz if excitation.active else 0.0
    H = np.column_stack([np.cos(w * t), np.sin(w * t)]) if excitation.active else np.zeros((n_steps + 1, 2))
    drive = H[:-1] @ Ga.T + H[1:] @ Gb.T
    x = np.zeros(2 * n)
    if initial_displacement is not None:
        x[:n] = P @ np.asarray(initial_displacement, dtype=float)
    out = np.zeros((n_steps + 1, nc))
    sel = slice(nb, nb + nc)
    out[0] = x[sel]
    for k in range(n_steps):
        x = Phi @ x + drive[k]
        out[k + 1] = x[sel]
    return out


def delay_and_amplification(t: np.ndarray, z: np.ndarray, x: np.ndarray, frequency_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Delay [s] and relative amplification ``|X|/|Z| - 1`` of each PS interface signal
    ``x`` against its NS counterpart ``z`` at ``frequency_hz`` (harmonic fits over the given
    samples, which should be whole periods of a periodic point)."""
    Zc = harmonic_fit(t, np.asarray(z).reshape(t.size, -1), frequency_hz)[1]
    Xc = harmonic_fit(t, np.asarray(x).reshape(t.size, -1), frequency_hz)[1]
    phase = np.angle(Xc / Zc)
    return -phase / (_TWO_PI * frequency_hz), np.abs(Xc) / np.abs(Zc) - 1.0


# ---------------------------------------------------------------------------------------
# predictions (hbtest.stability) and critical delays


def predicted_equation(system: HybridSystem, transfer: TransferSystem, compensator: Compensator | None, dt: float):
    """The characteristic delay equation of the compensated loop (a
    :class:`hbtest.stability.DelayEquation`) for a pure-delay transfer system and an LTI
    compensator, in the continuous-time idealisation the simulation approximates:

    - none: ``A(s) + e^{-s tau} B(s)``;
    - poly (and AFP frozen at its current ``rho``, ``sigma``): ``A + sum_j w_j
      e^{-s (tau + j dt)} B`` (:func:`hbtest.stability.predictor_equation`);
    - inverse: ``A + sum_j w_j e^{-s (tau + j dt)} (1 + s T) B / g`` (needs a PS without
      inertia or damping at the interface, i.e. a spring-like ``B(s)``).

    Raises ValueError for other transfer systems or MCS."""
    from .stability import DelayTerm

    sysd = system.stability_system()
    if transfer.kind != "delay":
        raise ValueError("a stability prediction is available for a pure-delay transfer system only")
    tau = transfer.delay
    c = compensator or NoCompensation()
    if isinstance(c, NoCompensation):
        return sysd.equation(tau)
    if isinstance(c, (PolynomialPredictor, AdaptiveForwardPredictor)):
        from .stability import polynomial_predictor_weights

        if isinstance(c, PolynomialPredictor):
            w = polynomial_predictor_weights(c.order, c.n_samples, c.horizon / dt)
            sigma = 1.0
        else:
            rho = float(np.mean(c.rho)) if hasattr(c, "rho") else c.rho0
            sigma = float(np.mean(c.sigma)) if hasattr(c, "sigma") else c.sigma0
            w = polynomial_predictor_weights(c.order, c.n_samples, rho / dt)
        return sysd.equation_multi(tau + dt * np.arange(w.size), sigma * w)
    if isinstance(c, InverseModelCompensator):
        from .stability import DelayEquation, polynomial_predictor_weights

        MB, CB, KB = sysd.B
        T, g = c.model.time_constant, c.model.gain
        if T != 0 and (np.any(MB != 0) or np.any(CB != 0)):
            raise ValueError("the inverse-model prediction needs a spring-like physical substructure")
        w = polynomial_predictor_weights(c.order, c.n_samples, c.model.delay / dt)
        terms = [DelayTerm(0.0, *sysd.A)]
        for j, wj in enumerate(w):
            terms.append(DelayTerm(tau + j * dt, wj * MB / g, (wj * CB + T * wj * KB) / g, wj * KB / g))
        return DelayEquation(terms)
    raise ValueError(f"no linear stability prediction for the {c.name!r} compensator")


def predicted_rightmost(system: HybridSystem, transfer: TransferSystem, compensator: Compensator | None, dt: float,
                        cutoff_hz: float = 500.0) -> complex:
    """Rightmost characteristic root [rad/s] of :func:`predicted_equation` below the cut-off."""
    return predicted_equation(system, transfer, compensator, dt).rightmost(cutoff_hz)


def _bisect(stable_at: Callable[[float], bool], lo: float, hi: float, rtol: float) -> float:
    """Boundary between a stable ``lo`` and an unstable ``hi``."""
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if stable_at(mid):
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _bracket(stable_at: Callable[[float], bool], tau0: float, tau_max: float, factor: float = 1.5):
    lo, tau = None, tau0
    while tau <= tau_max:
        if stable_at(tau):
            lo = tau
            tau *= factor
        else:
            return lo, tau
    return lo, None


def critical_delay_predicted(system: HybridSystem, make_compensator: Callable[[float], Compensator | None], dt: float,
                             tau_min: float | None = None, tau_max: float = 0.2, rtol: float = 2e-3,
                             cutoff_hz: float = 500.0) -> float:
    """Smallest pure delay [s] (>= ``tau_min``, default ``dt``) at which the compensated loop
    of :func:`predicted_equation` has a root with positive real part below the cut-off;
    ``make_compensator(tau)`` builds the compensator for a delay (e.g. a predictor with
    horizon ``tau``). Scan by factors of 1.5, then bisection. ``nan`` if unstable at
    ``tau_min``, ``inf`` if stable up to ``tau_max``."""
    tau_min = dt if tau_min is None else tau_min

    def stable(tau):
        eq = predicted_equation(system, TransferSystem("delay", tau), make_compensator(tau), dt)
        return eq.rightmost(cutoff_hz).real <= 0

    lo, hi = _bracket(stable, tau_min, tau_max)
    if hi is None:
        return float("inf")
    if lo is None:
        return float("nan")
    return _bisect(stable, lo, hi, rtol)


def critical_delay_simulated(system: HybridSystem, make_compensator: Callable[[float], Compensator | None], dt: float,
                             duration: float = 3.0, excitation: Excitation | None = None, tau_min: float | None = None,
                             tau_max: float = 0.2, rtol: float = 0.01, transfer_kind: str = "delay",
                             make_transfer: Callable[[float], TransferSystem] | None = None) -> float:
    """Smallest delay [s] at which the simulated loop grows: the growth rate of the response
    over the second half of the run (:func:`growth_rate`) is positive or the run blew up.
    A free response from 1 mm on the first NS interface DOF when ``excitation`` is None.
    Scan by factors of 1.5 from ``tau_min`` (default ``dt``), bisection to ``rtol``, then the
    zero of the growth rate interpolated linearly between the bracketing delays.
    ``make_transfer(tau)`` defaults to a pure delay. ``nan`` when already unstable at
    ``tau_min``, ``inf`` when stable up to ``tau_max``."""
    tau_min = dt if tau_min is None else tau_min
    mk = make_transfer or (lambda tau: TransferSystem(transfer_kind, tau))
    q0 = None
    if excitation is None or not excitation.active:
        q0 = np.zeros(system.ns.structure.n_dof)
        q0[system.ns.interface_index[0]] = 1e-3  # one DOF: a symmetric start would miss antisymmetric roots
    rates: dict[float, float] = {}

    def stable(tau):
        res = simulate(system, mk(tau), make_compensator(tau), dt, duration, excitation or Excitation(), q0, emulated=True)
        g = res.growth(skip_fraction=0.5)
        rates[tau] = float("nan") if res.blew_up else g.rate
        return not res.blew_up and np.isfinite(g.rate) and g.rate < 0

    lo, hi = _bracket(stable, tau_min, tau_max)
    if hi is None:
        return float("inf")
    if lo is None:
        return float("nan")
    mid = _bisect(stable, lo, hi, rtol)
    lo = max((t for t in rates if t < mid and np.isfinite(rates[t]) and rates[t] < 0), default=None)
    hi = min((t for t in rates if t > mid and np.isfinite(rates[t]) and rates[t] >= 0), default=None)
    if lo is not None and hi is not None and rates[hi] > rates[lo]:
        return float(lo + (hi - lo) * (-rates[lo]) / (rates[hi] - rates[lo]))
    return mid


# ---------------------------------------------------------------------------------------
# plots


def subspace_figure(result: ClassicalResult, channel: int = 0, ax=None):
    """Subspace plot: actuator displacement ``x`` against demand ``z`` (a perfect test lies
    on the diagonal; delay opens an ellipse). Returns the matplotlib figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if ax is None:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
    else:
        fig = ax.figure
    z, x = result.z[:, channel], result.x[:, channel]
    ax.plot(z, x, lw=0.6)
    lim = np.nanmax(np.abs(np.concatenate([z, x]))) if z.size else 1.0
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.5)
    ax.set_xlabel("demand z")
    ax.set_ylabel("actuator x")
    ax.set_title(f"subspace ({result.compensator}, delay {result.delay * 1e3:.3g} ms)")
    ax.set_aspect("equal", adjustable="datalim")
    return fig

"""Delay compensators of a classical real-time hybrid test: each turns the history of the
numerical substructure's interface demand into the actuator command, once per real-time step.

- :class:`History` — the sample history a compensator reads (demand ``Z[j] = (z, z', z'')``,
  measured actuator displacement ``X[j]``), indexed from before the run;
- :class:`Compensator` — the abstract interface (``start``, ``command``, ``trace``, ``lti``);
- :class:`NoCompensation`, :class:`PolynomialPredictor`, :class:`AdaptiveForwardPredictor`,
  :class:`InverseModelCompensator`, :class:`MinimalControlSynthesis` — docs/method.md §4.

Units: SI (m, s); the command has the demand's units. Arrays of one step are ``(3, n_ch)``:
displacement, velocity, acceleration rows, one column per interface channel (actuator).
Sign convention: the synchronisation error is ``e2 = z - x`` (positive when the actuator
lags behind a rising demand).
"""

from __future__ import annotations

import abc
import math

import numpy as np

from ..stability import polynomial_predictor_weights
from .transfer import LagModel

__all__ = [
    "History",
    "Compensator",
    "NoCompensation",
    "PolynomialPredictor",
    "AdaptiveForwardPredictor",
    "InverseModelCompensator",
    "MinimalControlSynthesis",
]


class History:
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


class Compensator(abc.ABC):
    """Turns the demand history into the command. ``start`` is called once before a run;
    ``command(k, Z, X)`` returns the command ``(3, n_ch)`` = ``(u, u', u'')`` at step ``k``
    from the demand history ``Z[j] = (z, z', z'')`` (``j <= k``; negative indices hold the
    initial value, see :class:`History`) and the measured actuator displacement ``X[j]``
    (``j <= k``). ``trace`` returns adapted parameters over time (may be empty)."""

    name = "none"

    def start(self, dt: float, n_ch: int, n_steps: int) -> None:
        self.dt, self.n_ch = dt, n_ch

    @abc.abstractmethod
    def command(self, k: int, Z: "History", X: "History") -> np.ndarray:
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
    :func:`hbtest.realtime.stability.polynomial_predictor_weights`; the one-step order-2 rule
    ``(3, -3, 1)`` is ``order=2, n_samples=3, horizon=dt``). The same weights predict
    ``z'`` and ``z''``."""

    name = "poly"

    def __init__(self, order: int = 2, n_samples: int = 3, horizon: float | None = None):
        if n_samples < order + 1:
            raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
        self.order, self.n_samples, self.horizon = int(order), int(n_samples), horizon

    def start(self, dt, n_ch, n_steps):
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
    ``[sigma_min, sigma_max]``."""

    name = "afp"

    def __init__(self, order: int = 2, n_samples: int = 3, rho0: float = 0.0, sigma0: float = 1.0,
                 alpha: float = 2e-3, beta: float = 0.5, gamma: float = 1.0, rho_max: float = 0.05,
                 sigma_min: float = 0.2, sigma_max: float = 5.0):
        if n_samples < order + 1:
            raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
        self.order, self.n_samples = int(order), int(n_samples)
        self.rho0, self.sigma0 = float(rho0), float(sigma0)
        self.alpha, self.beta, self.gamma, self.rho_max = float(alpha), float(beta), float(gamma), float(rho_max)
        if not 0 < sigma_min <= sigma_max:
            raise ValueError(f"need 0 < sigma_min <= sigma_max, got {sigma_min}, {sigma_max}")
        self.sigma_min, self.sigma_max = float(sigma_min), float(sigma_max)
        #: adapted lead [s] and gain per channel: None until :meth:`start` (then rho0, sigma0)
        self.rho: np.ndarray | None = None
        self.sigma: np.ndarray | None = None

    def start(self, dt, n_ch, n_steps):
        super().start(dt, n_ch, n_steps)
        self.rho = np.full(n_ch, self.rho0)
        self.sigma = np.full(n_ch, self.sigma0)
        self.amp = np.full(n_ch, np.nan)
        self.weights = np.stack([polynomial_predictor_weights(self.order, self.n_samples, r / dt) for r in self.rho])  # (n_ch, n)
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
                        self.sigma[c] = float(np.clip(self.sigma[c] + self.beta * self._law(e), self.sigma_min, self.sigma_max))
                        self.events += 1
                if z1[0, c] * z0[0, c] < 0 and np.isfinite(self.amp[c]) and self.amp[c] > 0:  # zero crossing
                    e = np.sign(z1[1, c]) * e2[c] / self.amp[c]
                    self.rho[c] = float(np.clip(self.rho[c] + self.alpha * self._law(e), 0.0, self.rho_max))
                    self.weights[c] = polynomial_predictor_weights(self.order, self.n_samples, self.rho[c] / self.dt)
                    self.events += 1
        self._rho_t[k], self._sigma_t[k] = self.rho, self.sigma
        win = Z.window(k, self.n_samples)  # (n, 3, n_ch)
        return self.sigma * np.einsum("cj,jdc->dc", self.weights, win)

    def trace(self):
        return {"rho_s": self._rho_t, "sigma": self._sigma_t}


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

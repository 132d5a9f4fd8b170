"""Transfer systems of a classical real-time hybrid test: the actuators between the command
``u`` and the physical substructure, their exact discretisation and their identification.

- :func:`discretize_foh` — exact first-order-hold discretisation of a linear state space
  (inputs linear between samples), used for every continuous part of the loop;
- :class:`TransferSystem` — pure delay, first- or second-order lag, each with a delay;
- :class:`LagModel`, :func:`identify_lag` — an identified ``g exp(-s tau) / (1 + s T)``.

Units: SI (m, s); frequencies in Hz where named ``_hz``, angular frequencies in rad/s.
Sign convention: ``x(t) = Re(X e^{i w t})``; a frequency response ``G(s)`` is ``X/U`` at
``s = i w``, so a delay ``tau`` contributes ``exp(-s tau)`` (a phase lag).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import scipy.linalg
import scipy.optimize

__all__ = ["discretize_foh", "TransferSystem", "LagModel", "identify_lag"]

_TWO_PI = 2.0 * np.pi


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

    @property
    def low_frequency_delay(self) -> float:
        """Delay [s] of the transfer system at low frequency (slope of its phase at 0):
        ``tau`` (delay), ``tau + T`` (lag1), ``tau + 2 zeta / w`` (lag2)."""
        if self.kind == "lag1":
            return self.delay + self.time_constant
        if self.kind == "lag2":
            return self.delay + 2 * self.damping_ratio / (_TWO_PI * self.natural_frequency_hz)
        return self.delay

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

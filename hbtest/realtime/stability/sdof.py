"""The single oscillator split at its spring (docs/method.md §4): ``m z'' + c z' + k z + k_s z(t - tau) = 0``.

NS: mass m [kg], damper c [N s/m], spring k [N/m]; PS: spring k_s [N/m] behind the actuator
with delay tau [s]. Nondimensional form ``lam^2 + 2 zeta lam + 1 + p e^{-lam tau_hat}`` with
``w_n = sqrt(k/m)``, ``zeta = c / (2 sqrt(k m))``, ``p = k_s / k``, ``tau_hat = w_n tau``.
Closed forms: critical delay, phase margin, Hopf curves, the stable-for-all-delays region and
the small-delay estimate ``c / k_s``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .crossings import CriticalDelay
from .equation import TWO_PI
from .systems import SingleDelaySystem

__all__ = [
    "sdof_system", "sdof_critical_delay", "sdof_phase_margin", "PhaseMargin", "sdof_hopf_curve_p",
    "sdof_hopf_curve_zeta", "sdof_stable_for_all_delays", "small_delay_estimate",
]


def sdof_system(m: float, c: float, k: float, ks: float) -> SingleDelaySystem:
    """Single oscillator split at its spring: ``m z'' + c z' + k z + k_s z(t - tau) = 0``
    (NS: mass m [kg], damper c [N s/m], spring k [N/m]; PS: spring k_s [N/m] behind the
    actuator)."""
    for name, v in (("m", m), ("k", k)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if c < 0:
        raise ValueError(f"c must be non-negative, got {c}")
    return SingleDelaySystem(([[m]], [[c]], [[k]]), ([[0.0]], [[0.0]], [[ks]]), dof_names=("z",), label="sdof")


def sdof_critical_delay(m: float, c: float, k: float, ks: float) -> CriticalDelay:
    """Closed-form critical delay [s] of ``m z'' + c z' + k z + k_s z(t - tau) = 0``.

    From ``s = i w``: the crossing frequencies solve ``|k - m w^2 + i c w| = |k_s|``, i.e.
    ``m^2 w^4 + (c^2 - 2 k m) w^2 + k^2 - k_s^2 = 0``; at each, ``exp(-i w tau) = z`` with
    ``z = -(k - m w^2 + i c w)/k_s`` gives ``tau = ((-arg z) mod 2 pi) / w`` (+ multiples of
    ``2 pi / w``). The critical delay is the smallest such tau (the first crossing from a
    stable start is destabilising); ``frequency_hz = w / 2 pi``. No cut-off applies
    (``cutoff_hz = inf``). Undamped or ``k + k_s <= 0``: 0 ("at-zero"); no crossing:
    ``inf`` ("none", stable for all delays)."""
    if not (m > 0 and k > 0 and c >= 0):
        raise ValueError("need m > 0, k > 0, c >= 0")
    if k + ks <= 0 or c == 0:
        return CriticalDelay(0.0, float("nan"), "at-zero", float("inf"), float("inf"), (), 1)
    if ks == 0:
        return CriticalDelay(float("inf"), float("nan"), "none", float("inf"), float("inf"), (), 0)
    w = _sdof_crossing_omegas(m, c, k, ks)
    best = (float("inf"), float("nan"))
    for wi in w:
        z = -(k - m * wi * wi + 1j * c * wi) / ks
        tau = float(np.mod(-np.angle(z), TWO_PI) / wi)
        best = min(best, (tau, wi / TWO_PI))
    if not math.isfinite(best[0]):
        return CriticalDelay(float("inf"), float("nan"), "none", float("inf"), float("inf"), (), 0)
    return CriticalDelay(best[0], best[1], "imaginary-axis", float("inf"), float("inf"), (), 0)


def _sdof_crossing_omegas(m, c, k, ks) -> np.ndarray:
    a, b, cc = m * m, c * c - 2 * k * m, k * k - ks * ks
    disc = b * b - 4 * a * cc
    if disc < 0:
        return np.array([])
    r = np.sqrt(disc)
    W = np.array([(-b + r) / (2 * a), (-b - r) / (2 * a)])
    W = W[W > 0]
    return np.sqrt(np.unique(W))


@dataclass(frozen=True)
class PhaseMargin:
    """Phase-margin estimate of the critical delay: loop ``L(s) = k_s/(m s^2 + c s + k)``,
    crossover ``|L(i w_c)| = 1``, margin ``phi_m = pi + arg L(i w_c)`` (in [0, 2 pi)),
    ``tau_c = phi_m / w_c``. With two crossovers the one giving the smaller delay is
    reported."""

    phase_margin_rad: float
    crossover_hz: float
    critical_delay_s: float

    @property
    def phase_margin_deg(self) -> float:
        return float(np.degrees(self.phase_margin_rad))


def sdof_phase_margin(m: float, c: float, k: float, ks: float) -> PhaseMargin:
    """The phase-margin method for the split oscillator (see :class:`PhaseMargin`). No
    crossover (loop gain never 1): infinite delay margin, NaN margin."""
    if not (m > 0 and k > 0 and c >= 0):
        raise ValueError("need m > 0, k > 0, c >= 0")
    best = PhaseMargin(float("nan"), float("nan"), float("inf"))
    if ks == 0:
        return best
    for w in _sdof_crossing_omegas(m, c, k, ks):
        L = ks / (k - m * w * w + 1j * c * w)
        pm = float(np.mod(np.pi + np.angle(L), TWO_PI))
        tau = pm / w
        if tau < best.critical_delay_s:
            best = PhaseMargin(pm, float(w / TWO_PI), float(tau))
    return best


def sdof_hopf_curve_p(zeta: float, omega_hat, branch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Hopf curve in the (tau_hat, p) plane of ``lam^2 + 2 zeta lam + 1 + p e^{-lam tau_hat}``
    at fixed ``zeta``, parameterised by the crossing frequency ``omega_hat`` (> 0, in units of
    w_n): ``p = sqrt((1 - w^2)^2 + 4 zeta^2 w^2)``,
    ``tau_hat = (atan2(2 zeta w, w^2 - 1) + 2 pi branch) / w``. Returns (tau_hat, p)."""
    w = np.asarray(omega_hat, dtype=float)
    p = np.sqrt((1 - w * w) ** 2 + 4 * zeta * zeta * w * w)
    tau = (np.arctan2(2 * zeta * w, w * w - 1) + TWO_PI * branch) / w
    return tau, p


def sdof_hopf_curve_zeta(p: float, omega_hat, branch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Hopf curve in the (tau_hat, zeta) plane at fixed ``p > 0``: for
    ``|w^2 - 1| <= p``, ``tau_hat = (arccos((w^2 - 1)/p) + 2 pi branch)/w`` and
    ``zeta = sqrt(p^2 - (w^2 - 1)^2) / (2 w)``. Frequencies outside the range give NaN.
    Returns (tau_hat, zeta)."""
    w = np.asarray(omega_hat, dtype=float)
    x = (w * w - 1) / p
    ok = np.abs(x) <= 1
    xc = np.clip(x, -1, 1)
    tau = np.where(ok, (np.arccos(xc) + TWO_PI * branch) / w, np.nan)
    zeta = np.where(ok, np.sqrt(np.clip(p * p - (w * w - 1) ** 2, 0, None)) / (2 * w), np.nan)
    return tau, zeta


def sdof_stable_for_all_delays(zeta, p) -> np.ndarray:
    """True where ``lam^2 + 2 zeta lam + 1 + p e^{-lam tau}`` is stable for every delay:
    stable without delay (``zeta > 0``, ``p > -1``) and no crossing frequency, i.e. no
    positive root ``W = w^2`` of ``W^2 - (2 - 4 zeta^2) W + 1 - p^2 = 0`` (for ``p >= 0``:
    ``p < 1`` and either ``zeta^2 >= 1/2`` or ``(1 - 2 zeta^2)^2 < 1 - p^2``)."""
    zeta = np.asarray(zeta, dtype=float)
    p = np.asarray(p, dtype=float)
    h = 1 - 2 * zeta * zeta
    disc = h * h - (1 - p * p)
    with np.errstate(invalid="ignore"):
        wplus = h + np.sqrt(np.clip(disc, 0, None))
    crossing = (disc >= 0) & (wplus > 0) & (p != 0)
    return (zeta > 0) & (p > -1) & ~crossing


def small_delay_estimate(c: float, ks: float) -> float:
    """First-order estimate of the critical delay [s]: ``exp(-s tau) ~ 1 - s tau`` turns the
    delayed spring into a negative damper ``-k_s tau``; instability when ``c - k_s tau < 0``,
    so ``tau_c ~ c / k_s`` (accurate for light damping)."""
    return float(c / ks)

"""Broyden quasi-Newton iteration on real-packed actuator voltages (docs/method.md §2). No I/O: the
point loop (:mod:`hbtest.point`) measures, this module decides the next voltages.

Vectors are real and packed with :func:`hbtest.method.harmonics.pack` (per actuator
``[a0?, a1, b1, ...]``, actuators concatenated); residuals likewise per interface DOF.

Two ways of carrying the Jacobian:
- the *inverse* Jacobian ``H ~ (dR/dV)^-1`` with Broyden's second ("bad") update
  ``H += (dV - H dR) dR^T / |dR|^2`` — the published method;
- the *rig* Jacobian ``G = d[U_P; F_P]/dV`` (what the rig does to the interface), updated with
  Broyden's first ("good") update from the measured changes of U_P and F_P, from which the
  residual Jacobian follows exactly for any frequency: ``dR/dV = [I, D_N^-1] G``
  (the physically informed split: only the rig part is unknown).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "bad_broyden_inverse_update",
    "good_broyden_update",
    "limit_step",
    "clip_voltage",
    "newton_step",
    "informative",
    "finite_difference_columns",
]


def bad_broyden_inverse_update(H: np.ndarray, dV: np.ndarray, dR: np.ndarray) -> np.ndarray:
    """Broyden's second update of the inverse Jacobian: ``H + (dV - H dR) dR^T / dR^T dR``.
    Satisfies the secant condition ``H_new dR = dV``."""
    nrm = float(dR @ dR)
    if nrm == 0.0:
        return H
    return H + np.outer(dV - H @ dR, dR) / nrm


def good_broyden_update(J: np.ndarray, dV: np.ndarray, dY: np.ndarray) -> np.ndarray:
    """Broyden's first update of a direct Jacobian ``J ~ dY/dV``: ``J + (dY - J dV) dV^T /
    dV^T dV``. Satisfies ``J_new dV = dY`` with the smallest change of J."""
    nrm = float(dV @ dV)
    if nrm == 0.0:
        return J
    return J + np.outer(dY - J @ dV, dV) / nrm


def limit_step(dV: np.ndarray, max_step: float) -> np.ndarray:
    """Scale the whole step down (direction kept) so that no entry changes by more than
    ``max_step`` volts."""
    m = float(np.max(np.abs(dV))) if dV.size else 0.0
    return dV if m <= max_step else dV * (max_step / m)


def clip_voltage(V: np.ndarray, n_actuators: int, limit_v: float, orders) -> tuple[np.ndarray, bool]:
    """Scale each actuator's coefficients so that its peak bound ``|a0| + sum_k |V_k|`` (the
    bound :func:`hbtest.rig.check_voltage` enforces) stays within ``limit_v``.
    Returns (V, clipped?)."""
    from .harmonics import unpack

    V = np.asarray(V, dtype=float).copy()
    per = V.reshape(n_actuators, -1)
    clipped = False
    peaks = np.abs(unpack(per, orders)).sum(axis=-1)
    for a in range(n_actuators):
        if peaks[a] > limit_v:
            per[a] *= limit_v / peaks[a] * (1 - 1e-12)
            clipped = True
    return per.reshape(-1), clipped


def newton_step(J: np.ndarray, R: np.ndarray, rcond: float = 1e-10) -> np.ndarray:
    """``-J^+ R`` (least squares; minimum norm when J is rank deficient)."""
    return -np.linalg.lstsq(J, R, rcond=rcond)[0]


def informative(dR: np.ndarray, noise_std: np.ndarray | float, factor: float = 3.0) -> bool:
    """True when a residual change stands out of the measurement noise: ``|dR| > factor *
    sqrt(2) * |noise|`` (two independent measurements). Updates from changes within the
    noise would teach the Jacobian noise."""
    noise = float(np.linalg.norm(np.broadcast_to(noise_std, dR.shape)))
    return float(np.linalg.norm(dR)) > factor * np.sqrt(2.0) * noise


def finite_difference_columns(n: int, delta: float | np.ndarray) -> np.ndarray:
    """Perturbation vectors (columns) of a forward finite-difference Jacobian estimate."""
    return np.diag(np.broadcast_to(np.asarray(delta, dtype=float), (n,)))

"""Stability of a compensated classical loop: the characteristic delay equation it
approximates (:func:`predicted_equation`, :func:`predicted_rightmost`, via
:mod:`hbtest.realtime.stability`) and the critical delay — the smallest actuator delay at which it
grows — predicted from that equation (:func:`critical_delay_predicted`) or found by
simulating the loop (:func:`critical_delay_simulated`).

Units: delays and time steps in s, roots in rad/s (``s = sigma + i w``: ``sigma > 0`` grows),
cut-off frequencies in Hz.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..stability import DelayEquation, DelayTerm, polynomial_predictor_weights
from .compensators import (
    AdaptiveForwardPredictor,
    Compensator,
    InverseModelCompensator,
    NoCompensation,
    PolynomialPredictor,
)
from .loop import Excitation, simulate
from .systems import HybridSystem
from .transfer import TransferSystem

__all__ = [
    "FREE_RESPONSE_DISPLACEMENT",
    "predicted_equation",
    "predicted_rightmost",
    "critical_delay_predicted",
    "critical_delay_simulated",
]

FREE_RESPONSE_DISPLACEMENT = 1e-3
"""Initial displacement [m | rad] of one NS interface DOF that starts a free response (one DOF
only: a symmetric start would miss antisymmetric roots)."""

BRACKET_FACTOR = 1.5
"""Ratio of successive trial delays while bracketing a critical delay."""


def predicted_equation(system: HybridSystem, transfer: TransferSystem, compensator: Compensator | None, dt: float):
    """The characteristic delay equation of the compensated loop (a
    :class:`hbtest.realtime.stability.DelayEquation`) for a pure-delay transfer system and an LTI
    compensator, in the continuous-time idealisation the simulation approximates:

    - none: ``A(s) + e^{-s tau} B(s)``;
    - poly (and AFP frozen at its current ``rho``, ``sigma``): ``A + sum_j w_j
      e^{-s (tau + j dt)} B`` (:func:`hbtest.realtime.stability.predictor_equation`);
    - inverse: ``A + sum_j w_j e^{-s (tau + j dt)} (1 + s T) B / g`` (needs a PS without
      inertia or damping at the interface, i.e. a spring-like ``B(s)``).

    Raises ValueError for other transfer systems or MCS."""
    sysd = system.stability_system()
    if transfer.kind != "delay":
        raise ValueError("a stability prediction is available for a pure-delay transfer system only")
    tau = transfer.delay
    c = compensator or NoCompensation()
    if isinstance(c, NoCompensation):
        return sysd.equation(tau)
    if isinstance(c, (PolynomialPredictor, AdaptiveForwardPredictor)):
        if isinstance(c, PolynomialPredictor):
            w = polynomial_predictor_weights(c.order, c.n_samples, c.horizon / dt)
            sigma = 1.0
        else:
            rho = float(np.mean(c.rho)) if c.rho is not None else c.rho0
            sigma = float(np.mean(c.sigma)) if c.sigma is not None else c.sigma0
            w = polynomial_predictor_weights(c.order, c.n_samples, rho / dt)
        return sysd.equation_multi(tau + dt * np.arange(w.size), sigma * w)
    if isinstance(c, InverseModelCompensator):
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


def _bracket(stable_at: Callable[[float], bool], tau0: float, tau_max: float, factor: float = BRACKET_FACTOR):
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
    horizon ``tau``). Scan by factors of :data:`BRACKET_FACTOR`, then bisection. ``nan`` if unstable at
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
    A free response from :data:`FREE_RESPONSE_DISPLACEMENT` on the first NS interface DOF when ``excitation`` is None.
    Scan by factors of :data:`BRACKET_FACTOR` from ``tau_min`` (default ``dt``), bisection to ``rtol``, then the
    zero of the growth rate interpolated linearly between the bracketing delays.
    ``make_transfer(tau)`` defaults to a pure delay. ``nan`` when already unstable at
    ``tau_min``, ``inf`` when stable up to ``tau_max``."""
    tau_min = dt if tau_min is None else tau_min
    mk = make_transfer or (lambda tau: TransferSystem(transfer_kind, tau))
    q0 = None
    if excitation is None or not excitation.active:
        q0 = np.zeros(system.ns.structure.n_dof)
        q0[system.ns.interface_index[0]] = FREE_RESPONSE_DISPLACEMENT  # one DOF: see the constant
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

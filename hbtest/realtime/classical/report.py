"""One classical real-time hybrid test with its verdict: simulate the loop from a free or
forced start, measure the growth of the response and the synchronisation and global errors,
and, for a pure delay with a linear compensator, predict the rightmost characteristic root of
the compensated delay equation (what ``hbtest classical`` reports).

Units: SI (m, N, s); growth rates and root real parts in 1/s, frequencies in Hz.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .compensators import Compensator
from .loop import ClassicalResult, Excitation, simulate
from .prediction import FREE_RESPONSE_DISPLACEMENT, predicted_rightmost
from .response import GrowthRate, finite_or_none
from .systems import HybridSystem
from .transfer import TransferSystem

__all__ = ["LoopReport", "run_loop"]


@dataclass
class LoopReport:
    """A classical test run: the time histories (``result``), the growth of its response
    (``growth``), and the predicted rightmost root [rad/s] of the compensated delay equation
    (``predicted_root``; None when no linear prediction exists: lag transfer systems,
    adaptive compensators, or a prediction that does not apply)."""

    result: ClassicalResult
    growth: GrowthRate
    predicted_root: complex | None

    def summary(self) -> dict:
        """JSON-ready measures: stability verdict, growth rate (± stderr) and dominant
        frequency, blow-up, simulated time, rms synchronisation and global errors (second
        half), the adapted compensator parameters at the end, and the prediction."""
        res, g = self.result, self.growth
        out = dict(
            stable=bool(res.stable),
            growth_rate_per_s=finite_or_none(g.rate), growth_rate_stderr_per_s=finite_or_none(g.stderr),
            dominant_frequency_hz=finite_or_none(g.frequency_hz),
            blew_up=bool(res.blew_up), simulated_s=float(res.t[-1]),
            rms_sync_error=finite_or_none(res.rms_sync_error()), rms_global_error=finite_or_none(res.rms_global_error()),
        )
        for key, v in res.trace.items():
            out.setdefault("adapted", {})[key] = [float(a) for a in np.atleast_1d(v[-1])]
        root = self.predicted_root
        out["prediction"] = None if root is None else dict(
            rightmost_root_real_per_s=finite_or_none(root.real),
            rightmost_root_hz=finite_or_none(root.imag / (2 * math.pi)),
        )
        return out


def run_loop(system: HybridSystem, transfer: TransferSystem, compensator: Compensator, dt: float, duration: float,
             excitation: Excitation = Excitation(), interface_displacement: float | None = None) -> LoopReport:
    """Simulate the classical loop (:func:`~hbtest.realtime.classical.simulate`) for ``duration`` [s]
    at step ``dt`` [s]. ``interface_displacement`` [m | rad]: initial displacement of the
    first NS interface DOF (one DOF only: a symmetric start would miss antisymmetric roots);
    default :data:`~hbtest.realtime.classical.prediction.FREE_RESPONSE_DISPLACEMENT` for a free
    response, 0 when forced. ValueError when nothing would move (no excitation, zero
    displacement) or the run is out of bounds."""
    x0 = interface_displacement
    if x0 is None:
        x0 = 0.0 if excitation.active else FREE_RESPONSE_DISPLACEMENT
    if not math.isfinite(x0):
        raise ValueError(f"the initial displacement must be finite, got {x0}")
    if not excitation.active and x0 == 0:
        raise ValueError("nothing moves: give an excitation or a non-zero initial displacement")
    q0 = None
    if x0:
        q0 = np.zeros(system.ns.structure.n_dof)
        q0[system.ns.interface_index[0]] = x0
    res = simulate(system, transfer, compensator, dt, duration, excitation, q0)
    root = None
    if transfer.kind == "delay" and compensator.lti:
        try:
            root = complex(predicted_rightmost(system, transfer, compensator, dt))
        except ValueError:  # e.g. the inverse-model prediction needs a spring-like PS
            root = None
    return LoopReport(res, res.growth(), root)

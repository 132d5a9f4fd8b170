"""How a Broyden iteration went, from its record: the statistics that hold the twin's
``published`` runs beside the authors' lab runs (``scripts/lab_iteration_stats.py`` for the lab,
``benchmarks/twin_vs_lab.py`` for both).

A point's record is ``(X, R)``: the demand coefficients [V] and the residual [N] of every
evaluation in order, one row each (row 0: the start, the previous point's solution measured at
the new frequency), and the tolerance [N] its ``‖R‖₂`` had to fall below. Finite-difference
trials are not part of the record (the lab stored none).

- :func:`step_statistics`: evaluations per point (steps + 1, as the paper counts), the start
  residual over the tolerance, the ratio ``‖R_{k+1}‖ / ‖R_k‖`` of a step taken well above the
  tolerance (where the read scatter does not decide it), how often such a step raised ``‖R‖``,
  the first step's ratio and the share of steps at the step limit (the point's first step).
- :func:`affine_misfit`: at one frequency a linear, stationary rig gives a residual affine in
  the demand, ``R = J X + b``; the rms of a least-squares fit's residual per component
  (degrees of freedom counted) estimates the scatter of one evaluation about that, the read
  scatter on a linear rig. More means the rig did not give the same residual for the same
  demand: drift, a nonlinearity, a history dependence.
"""

from __future__ import annotations

import numpy as np

__all__ = ["step_statistics", "affine_misfit", "affine_misfit_components", "MIN_AFFINE_EVALUATIONS"]

#: an affine fit of 4 outputs over 4 demand coefficients has 5 unknowns per output: at least
#: this many evaluations (9 degrees of freedom per output) before its misfit is judged
MIN_AFFINE_EVALUATIONS = 14


def step_statistics(records, above: float = 3.0) -> dict:
    """Medians over ``records`` (each ``(X (n, m), R (n, 4), tol)``; ``n >= 1``) of the
    iteration statistics in the module docstring; ``above``: a step counts for the ratio when
    it starts from ``‖R‖ > above × tol``."""
    evaluations, start, ratios, first, limited = [], [], [], [], []
    for X, R, tol in records:
        X, R = np.asarray(X, dtype=float), np.asarray(R, dtype=float)
        e = np.linalg.norm(R, axis=1)
        evaluations.append(e.size)
        start.append(e[0] / tol)
        if e.size < 2:
            continue
        r = e[1:] / e[:-1]
        ratios += list(r[e[:-1] > above * tol])
        first.append(r[0])
        dx = np.linalg.norm(np.diff(X, axis=0), axis=1)
        limited += list(np.abs(dx[1:] / dx[0] - 1.0) < 1e-6)
    ratios_a = np.asarray(ratios)
    return {
        "points": len(evaluations),
        "evaluations_median": float(np.median(evaluations)),
        "start_over_tolerance_median": float(np.median(start)),
        "step_ratio_median": float(np.median(ratios_a)),
        "step_raised_fraction": float(np.mean(ratios_a > 1.0)),
        "steps_above": int(ratios_a.size),
        "first_step_ratio_median": float(np.median(first)),
        "steps_at_limit_fraction": float(np.mean(limited)) if limited else float("nan"),
    }


def affine_misfit_components(X, R) -> np.ndarray:
    """rms per residual component [units of R] of the residual of the least-squares fit
    ``R = J X + b`` over one point's evaluations, per degree of freedom; NaN below
    :data:`MIN_AFFINE_EVALUATIONS` evaluations."""
    X, R = np.asarray(X, dtype=float), np.asarray(R, dtype=float)
    n = X.shape[0]
    if n < MIN_AFFINE_EVALUATIONS:
        return np.full(R.shape[1], np.nan)
    A = np.c_[X, np.ones(n)]
    res = R - A @ np.linalg.lstsq(A, R, rcond=None)[0]
    return np.sqrt(np.sum(res**2, axis=0) / (n - A.shape[1]))


def affine_misfit(X, R) -> float:
    """The rms over components of :func:`affine_misfit_components` (NaN below
    :data:`MIN_AFFINE_EVALUATIONS` evaluations)."""
    return float(np.sqrt(np.mean(affine_misfit_components(X, R) ** 2)))

"""Synchronisation metrics per interface variable (u, θ, T, M) and harmonic, as in the
published paper's table (docs/method.md §4: "for a converged periodic point, the delay and relative
amplification of each PS interface signal against its NS counterpart").

Definitions (per variable v and harmonic k, complex coefficients ``X_k = a_k - i b_k``):

- PS signal: the interface quantity measured on the physical substructure —
  ``u, θ`` (``interface_displacement`` [m, rad]) and ``T, M`` (``interface_force`` [N, N m]);
- NS counterpart: what the numerical substructure demands for the same state —
  ``u, θ``: ``U_N`` (``numerical_displacement``, the NS displacement under the measured force);
  ``T, M``: ``F_N = F_P*(U_P)`` (``numerical_force``, the interface force under which the NS
  moves by the measured ``U_P``; ``F_e - D_N U_P`` for a linear NS);
- amplitude ratio ``|PS_k| / |NS_k|`` [1] (the paper's relative amplification is ratio − 1);
- phase difference ``arg(PS_k / NS_k)`` [deg] in (−180, 180]; positive: the PS leads. The
  paper's delay is ``−phase / (360 k f)`` [s] (positive: the PS lags), as
  :func:`hbtest.analysis.frf.sync_metrics`.

Two states are judged: the one reported (``sync_amplitude_ratio``, ``sync_phase_deg``) and the
last measured one (``measured_sync_*``: the last demand as the rig measured it, before any
pooling; what the paper's table measures). They differ where a profile reports an estimate
next to the last measurement (the hbtest profile's pooled-fit solution, ``solution_offset``
away), at which PS and NS agree by construction.

At an exact solution both sides agree: ratio 1, phase 0. The bounds tie them to the residual:
``|ratio − 1| <= |PS − NS| / |NS|`` and ``|sin(phase)| <= |PS − NS| / |NS|``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["VARIABLES", "VARIABLE_UNITS", "sync_ratio_phase", "point_sync", "sync_summary", "format_sync_summary", "SYNC_RATIO_TOLERANCE",
           "SYNC_PHASE_TOLERANCE_DEG"]

#: the interface variables of the sync metrics, in store order
VARIABLES = ("u", "theta", "T", "M")
VARIABLE_UNITS = {"u": "m", "theta": "rad", "T": "N", "M": "N m"}
#: the published result (paper table): PS and NS within 1 % in amplitude ...
SYNC_RATIO_TOLERANCE = 0.01
#: ... and within a 0.2 ms delay, about 1.3 degrees at 18 Hz (the summary reports against these)
SYNC_PHASE_TOLERANCE_DEG = 1.3


def sync_ratio_phase(ps, ns) -> tuple[np.ndarray, np.ndarray]:
    """(amplitude ratio ``|ps|/|ns|``, phase ``arg(ps/ns)`` [deg]) of complex coefficients
    (broadcast; NaN where ``ns`` is 0 or NaN)."""
    ps = np.asarray(ps, dtype=complex)
    ns = np.asarray(ns, dtype=complex)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(np.abs(ns) > 0, ps / np.where(np.abs(ns) > 0, ns, 1.0), complex(np.nan, np.nan))
    return np.abs(q), np.degrees(np.angle(q))


def point_sync(U_P, F_P, U_N, F_N) -> tuple[np.ndarray, np.ndarray]:
    """Sync metrics of one point: arrays (4, n_orders) over :data:`VARIABLES` from the PS
    displacement/force and their NS counterparts (each (2, n_orders) complex)."""
    ps = np.concatenate([np.asarray(U_P, dtype=complex), np.asarray(F_P, dtype=complex)])
    ns = np.concatenate([np.asarray(U_N, dtype=complex), np.asarray(F_N, dtype=complex)])
    return sync_ratio_phase(ps, ns)


def _stats(ratio: np.ndarray, phase: np.ndarray, f: np.ndarray) -> dict:
    """Largest and median ``|ratio − 1|`` and ``|phase|`` [deg] over points with both finite,
    their count and the frequency of the worst ratio (NaN when there is none)."""
    dr, dp = np.abs(ratio - 1.0), np.abs(phase)
    fin = np.isfinite(dr) & np.isfinite(dp)
    n = int(fin.sum())
    if not n:
        return dict(points=0, max_ratio_error=np.nan, median_ratio_error=np.nan, max_phase_deg=np.nan,
                    median_phase_deg=np.nan, worst_frequency_hz=np.nan)
    return dict(points=n, max_ratio_error=float(dr[fin].max()), median_ratio_error=float(np.median(dr[fin])),
                max_phase_deg=float(dp[fin].max()), median_phase_deg=float(np.median(dp[fin])),
                worst_frequency_hz=float(f[fin][int(np.argmax(dr[fin]))]))


def _median_max(x: np.ndarray) -> tuple[float, float]:
    x = x[np.isfinite(x)]
    return (float(np.median(x)), float(x.max())) if x.size else (np.nan, np.nan)


def sync_summary(ds) -> dict:
    """Summary over the converged points of a run dataset holding ``sync_amplitude_ratio`` and
    ``sync_phase_deg``: per variable and harmonic, the number of points, the largest
    ``|ratio − 1|`` and ``|phase|`` [deg], their medians and the frequency of the worst ratio,
    of the reported state (keys as named) and of the last measured state (the same keys with
    ``measured_``; NaN in a store written before ``measured_sync_amplitude_ratio``). The
    reported state may be an estimate next to the last measured one (the hbtest profile's
    pooled-fit solution, where PS and NS agree by construction); ``solution_offset`` [m] gives
    the median and largest distance between them. Returns ``{"variables": [...],
    "harmonics": [...], "converged_points": n, "rows": [dict, ...], "solution_offset": [median, max],
    "ratio_tolerance": ..., "phase_tolerance_deg": ...}``."""
    from ..errors import UserError

    if "sync_amplitude_ratio" not in ds:
        raise UserError("this store has no sync metrics (written by an hbtest before the sync_amplitude_ratio variable)")
    ok = np.asarray(ds["done"].values, dtype=bool) & np.asarray(ds["converged"].values, dtype=bool)
    f = np.asarray(ds["frequency"].values, dtype=float)[ok]

    def values(name):
        if name not in ds:  # a store written before the measured_* variables
            return np.full((int(ok.sum()), len(VARIABLES), ds.sizes["harmonic"]), np.nan)
        return np.asarray(ds[name].values, dtype=float)[ok]

    r, p = values("sync_amplitude_ratio"), values("sync_phase_deg")
    mr, mp = values("measured_sync_amplitude_ratio"), values("measured_sync_phase_deg")
    names = [str(v) for v in ds["variable"].values]
    orders = [int(k) for k in ds["harmonic"].values]
    rows = []
    for iv, v in enumerate(names):
        for ik, k in enumerate(orders):
            row = dict(variable=v, harmonic=k, **_stats(r[:, iv, ik], p[:, iv, ik], f))
            row.update({f"measured_{key}": x for key, x in _stats(mr[:, iv, ik], mp[:, iv, ik], f).items()})
            rows.append(row)
    offset = np.asarray(ds["solution_offset"].values, dtype=float)[ok] if "solution_offset" in ds else np.array([])
    return {"variables": names, "harmonics": orders, "converged_points": int(ok.sum()), "rows": rows,
            "solution_offset": list(_median_max(offset)),
            "ratio_tolerance": SYNC_RATIO_TOLERANCE, "phase_tolerance_deg": SYNC_PHASE_TOLERANCE_DEG}


def format_sync_summary(summary: dict) -> str:
    """A fixed-width text table of :func:`sync_summary`: per variable and harmonic, the last
    measured state's metrics (largest, median, worst frequency) beside the reported state's
    largest, and a line with the ``solution_offset`` between them."""
    med, top = summary.get("solution_offset", [np.nan, np.nan])
    lines = [f"sync metrics over {summary['converged_points']} converged points (PS vs NS; paper: within "
             f"{100 * summary['ratio_tolerance']:g} % and {summary['phase_tolerance_deg']:g} deg): the last measured "
             "state, and the reported one",
             f"reported state from the last measured one (solution_offset): median {med:.3g} m, max {top:.3g} m",
             f"{'':15}{' last measured state ':-^77} {' reported state ':-^32}",
             f"{'var':>5} {'k':>2} {'points':>6} {'max|r-1| [%]':>13} {'med|r-1| [%]':>13} {'max|phase| [deg]':>17} "
             f"{'med|phase| [deg]':>17} {'worst f [Hz]':>12} {'max|r-1| [%]':>13} {'max|phase| [deg]':>17}"]
    for r in summary["rows"]:
        lines.append(f"{r['variable']:>5} {r['harmonic']:>2d} {r['points']:>6d} "
                     f"{100 * r['measured_max_ratio_error']:>13.4f} "
                     f"{100 * r['measured_median_ratio_error']:>13.4f} {r['measured_max_phase_deg']:>17.4f} "
                     f"{r['measured_median_phase_deg']:>17.4f} {r['measured_worst_frequency_hz']:>12.4f} "
                     f"{100 * r['max_ratio_error']:>13.4f} {r['max_phase_deg']:>17.4f}")
    return "\n".join(lines)

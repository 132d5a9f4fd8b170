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
  :func:`hbtest.frf.sync_metrics`.

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


def sync_summary(ds) -> dict:
    """Summary over the converged points of a run dataset holding ``sync_amplitude_ratio`` and
    ``sync_phase_deg``: per variable and harmonic, the number of points, the largest
    ``|ratio − 1|`` and ``|phase|`` [deg], their medians, and the frequency of the worst
    ratio. Returns ``{"variables": [...], "harmonics": [...], "rows": [dict, ...],
    "ratio_tolerance": ..., "phase_tolerance_deg": ...}``."""
    from .errors import UserError

    if "sync_amplitude_ratio" not in ds:
        raise UserError("this store has no sync metrics (written by an hbtest before the sync_amplitude_ratio variable)")
    ok = np.asarray(ds["done"].values, dtype=bool) & np.asarray(ds["converged"].values, dtype=bool)
    f = np.asarray(ds["frequency"].values, dtype=float)
    r = np.asarray(ds["sync_amplitude_ratio"].values, dtype=float)
    p = np.asarray(ds["sync_phase_deg"].values, dtype=float)
    names = [str(v) for v in ds["variable"].values]
    orders = [int(k) for k in ds["harmonic"].values]
    rows = []
    for iv, v in enumerate(names):
        for ik, k in enumerate(orders):
            dr = np.abs(r[ok, iv, ik] - 1.0)
            dp = np.abs(p[ok, iv, ik])
            fin = np.isfinite(dr) & np.isfinite(dp)
            n = int(fin.sum())
            row = dict(variable=v, harmonic=k, points=n, max_ratio_error=np.nan, median_ratio_error=np.nan,
                       max_phase_deg=np.nan, median_phase_deg=np.nan, worst_frequency_hz=np.nan)
            if n:
                j = int(np.argmax(dr[fin]))
                row.update(max_ratio_error=float(dr[fin].max()), median_ratio_error=float(np.median(dr[fin])),
                           max_phase_deg=float(dp[fin].max()), median_phase_deg=float(np.median(dp[fin])),
                           worst_frequency_hz=float(f[ok][fin][j]))
            rows.append(row)
    return {"variables": names, "harmonics": orders, "converged_points": int(ok.sum()), "rows": rows,
            "ratio_tolerance": SYNC_RATIO_TOLERANCE, "phase_tolerance_deg": SYNC_PHASE_TOLERANCE_DEG}


def format_sync_summary(summary: dict) -> str:
    """A fixed-width text table of :func:`sync_summary`."""
    lines = [f"sync metrics over {summary['converged_points']} converged points (PS vs NS; paper: within "
             f"{100 * summary['ratio_tolerance']:g} % and {summary['phase_tolerance_deg']:g} deg)",
             f"{'var':>5} {'k':>2} {'points':>6} {'max|r-1| [%]':>13} {'med|r-1| [%]':>13} {'max|phase| [deg]':>17} {'med|phase| [deg]':>17} {'worst f [Hz]':>12}"]
    for r in summary["rows"]:
        lines.append(f"{r['variable']:>5} {r['harmonic']:>2d} {r['points']:>6d} {100 * r['max_ratio_error']:>13.4f} {100 * r['median_ratio_error']:>13.4f} "
                     f"{r['max_phase_deg']:>17.4f} {r['median_phase_deg']:>17.4f} {r['worst_frequency_hz']:>12.4f}")
    return "\n".join(lines)

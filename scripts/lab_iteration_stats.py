"""How the authors' lab iteration went, point by point, and write the table the twin is held to.

Usage: ``python scripts/lab_iteration_stats.py [--lab DIR] [--out tests/data/lab_iteration_stats.json]``
(``DIR`` as in ``scripts/fit_lab_noise.py``: ``$HBTEST_LAB_DIR`` or ``../shared/lab``; it holds
``lab_records.npz``, decoded from the MIT-licensed release of A. Vizzaccaro et al.,
github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing; licence in
``tests/data/LICENSE-av3116-Iterative-method-for-RTHT.txt``). A few seconds.

From each complete point's record (``record_xsol``, ``record_residual``: demand [V] and residual
[N] of every evaluation, column 0 the start; ``tol`` [N]):

- the evaluations per point over all complete points (the acceptance's figure, steps + 1);
- :func:`hbtest.rig.virtual.iteration_stats.step_statistics` over the points after the first of
  each file (a file's first point starts from zero volts, as the twin's first point does, and is
  left out on both sides);
- :func:`~hbtest.rig.virtual.iteration_stats.affine_misfit` over the points with enough
  evaluations, per residual component ``[f1 sin, f1 cos, f2 sin, f2 cos]`` and over the
  tolerance, the lag-1 correlation of its residuals (a slow drift correlates consecutive
  evaluations; white scatter does not), their correlation with the distance from the point's
  last demand (a nonlinearity grows with it) and their kurtosis;
- the spread of the demands about the point's last one [V rms per coefficient], for the
  twin's own affine-misfit design (``benchmarks/twin_vs_lab.py``);
- :func:`misfit_memory`: whether the misfit scales with the response (a gain drift would) and
  how much of it a repeated demand or the next evaluation shares;
- the condition number of the Jacobian the lab iterated with, ``inv(invJ)`` at the point's end;
- a replay check: the lab's stored steps are ``-invJ R`` (limited to the point's first step)
  with Broyden's second update from the previous point's ``invJ``, exactly (share of steps
  reproduced to 1e-6), until a finite-difference re-measurement replaces it;
- :func:`remeasure_rules`: at which step each file re-measured, and on which condition;
- :func:`solution_jumps`: how far the solution ``Xsol`` moved between neighbouring points of a
  file, and the finest frequency step each file took (the lab refined its grid at the
  resonance).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fit_lab_noise import LAB_SOURCE, open_lab  # noqa: E402

from hbtest.rig.virtual.iteration_stats import (  # noqa: E402
    MIN_AFFINE_EVALUATIONS,
    affine_misfit,
    affine_misfit_components,
    step_statistics,
)
from hbtest.method.broyden import bad_broyden_inverse_update  # noqa: E402

#: evaluation-count bins of the misfit's breakdown (it grows with the count: the points that took
#: longest scattered most)
BINS = ((14, 20), (20, 30), (30, 50), (50, 1000))


def records(d):
    """``[(p, X (n, 4), R (n, 4), tol)]`` of the complete points, ``n`` = evaluations."""
    out = []
    for p in range(d["frequency"].size):
        if not d["complete"][p]:
            continue
        n = int(d["err_len"][p])
        out.append((p, d["record_xsol"][p, :, :n].T, d["record_residual"][p, :, :n].T, float(d["tol"][p])))
    return out


def later_points(d, recs):
    """The records of points after the first of their file (the previous point also complete)."""
    f = d["file"]
    return [r for r in recs if r[0] > 0 and f[r[0]] == f[r[0] - 1] and d["complete"][r[0] - 1]]


def misfit_structure(recs) -> dict:
    """Affine misfit [N] per point (enough evaluations), per residual component and over the
    tolerance, with its residuals' lag-1 correlation, their correlation with the distance from
    the last demand and their kurtosis (3: Gaussian); demand spread [V]."""
    mis, comps, over, lag, dist, kurt, spread, count = [], [], [], [], [], [], [], []
    for _, X, R, tol in recs:
        m = affine_misfit(X, R)
        if not np.isfinite(m):
            continue
        A = np.c_[X, np.ones(len(X))]
        res = R - A @ np.linalg.lstsq(A, R, rcond=None)[0]
        mis.append(m)
        count.append(len(X))
        comps.append(affine_misfit_components(X, R))
        over.append(m / tol)
        kurt.append(float(np.mean(res**4) / np.mean(res**2) ** 2))
        lag.append(float(np.sum(res[1:] * res[:-1]) / np.sum(res * res)))
        dist.append(float(np.corrcoef(np.linalg.norm(X - X[-1], axis=1), np.linalg.norm(res, axis=1))[0, 1]))
        spread.append(float(np.sqrt(np.mean((X - X[-1]) ** 2))))

    def q(x):
        return [float(v) for v in np.percentile(x, [50, 10, 90])]

    return {"points": len(mis), "misfit_n_median_p10_p90": q(mis),
            "misfit_components_n_median": [float(v) for v in np.median(comps, axis=0)],
            "misfit_over_tolerance_median_p10_p90": q(over), "kurtosis_median": float(np.median(kurt)),
            "lag1_correlation_median_p10_p90": q(lag), "distance_correlation_median_p10_p90": q(dist),
            "demand_spread_v_median": float(np.median(spread)),
            "misfit_n_median_by_evaluations": {f"{lo}-{hi - 1}": float(np.median(np.asarray(mis)[sel]))
                                               for lo, hi in BINS
                                               if (sel := (np.asarray(count) >= lo) & (np.asarray(count) < hi)).any()}}


def misfit_memory(d, recs) -> dict:
    """What the misfit is like (points with enough evaluations): its back components' correlation
    over points with the size of the numerical side's back force (``Zglobal`` times the laser
    coefficients the box read at the point's end: a gain drift would scale with it), and the mean
    product of two evaluations' standardised fit residuals for pairs close in demand (|dX| under
    0.1 of the point's demand spread) but 5 or more evaluations apart, and for consecutive
    evaluations far apart in demand (over 0.8 spreads): memory of the demand, memory of time."""
    back, force, close, far = [], [], [], []
    for p, X, R, _ in recs:
        n = len(X)
        if n < MIN_AFFINE_EVALUATIONS:
            continue
        A = np.c_[X, np.ones(n)]
        res = R - A @ np.linalg.lstsq(A, R, rcond=None)[0]
        z = res / np.sqrt(np.sum(res**2, axis=0) / (n - A.shape[1]))
        back.append(float(np.sqrt(np.mean(np.sum(res[:, 2:] ** 2, axis=0) / (n - A.shape[1])))))
        H = d["record_sensors_harm"][p]  # rows sin, cos; columns in1..in6
        force.append(float(np.linalg.norm((d["Zglobal"][p] @ np.r_[H[:, 4], H[:, 5]])[2:])))
        sx = np.sqrt(np.mean(np.var(X, axis=0)))
        for i in range(n):
            for j in range(i + 1, n):
                dx, prod = np.linalg.norm(X[i] - X[j]) / sx, float(np.mean(z[i] * z[j]))
                if dx < 0.1 and j - i >= 5:
                    close.append(prod)
                elif dx > 0.8 and j - i == 1:
                    far.append(prod)
    return {"back_misfit_vs_numerical_back_force_correlation": float(np.corrcoef(back, force)[0, 1]),
            "pairs_close_demand_5_or_more_apart": {"pairs": len(close), "correlation": float(np.mean(close))},
            "pairs_consecutive_far_demand": {"pairs": len(far), "correlation": float(np.mean(far))}}


def _first_departure(d, p, X, R):
    """The 0-based index ``k`` of the first step of point ``p`` (``X[k] -> X[k+1]``) that the
    replay of the released rule does not reproduce to 1e-6 (a finite-difference re-measurement
    replaced the update before it), or None; and the number of steps replayed."""
    H = d["invJ"][p - 1].copy()
    dX0 = -H @ R[0]
    for k in range(len(X) - 1):
        step = -H @ R[k]
        rate = np.linalg.norm(step) / np.linalg.norm(dX0)
        step = step / rate if rate > 1 else step
        if np.linalg.norm(X[k + 1] - X[k] - step) > 1e-6 * np.linalg.norm(X[k + 1] - X[k]):
            return k, k
        H = bad_broyden_inverse_update(H, X[k + 1] - X[k], R[k + 1] - R[k])
    return None, len(X) - 1


def replay_share(d, recs) -> float:
    """Share of the later points' steps the replay of their rule reproduces to 1e-6 (up to the
    first step it does not: a finite-difference re-measurement, not recorded)."""
    ok = total = 0
    for p, X, R, _ in later_points(d, recs):
        k, replayed = _first_departure(d, p, X, R)
        ok += replayed
        total += len(X) - 1
    return ok / total


def remeasure_rules(d, recs) -> dict:
    """When each lab file re-measured the Jacobian by finite differences, from where the replay
    of its later points first departs: the step count (``it`` of ``BroydenMethod.m``, l.154-169:
    the re-measure follows the ``it``-th evaluation, so it departs at 0-based step ``it - 1``)
    most departures share, how many points reached that step, how many departed there, and how
    many of those without the released condition (residual above 2 x tolerance and risen):
    a file whose points depart there whether or not it rose re-measured unconditionally.
    ``majority``: the rule of the files holding most later points."""
    files: dict = {}
    for p, X, R, tol in later_points(d, recs):
        f = files.setdefault(str(d["file"][p]), {"points": 0, "departures": []})
        f["points"] += 1
        k, _ = _first_departure(d, p, X, R)
        n = np.linalg.norm(R, axis=1)
        f["departures"].append((k, len(X) - 1, None if k is None or k < 1 else bool(n[k] > 2 * tol and n[k] > n[k - 1])))
    out = {}
    for name, f in sorted(files.items()):
        ks = [k for k, _, _ in f["departures"] if k is not None and k > 0]
        if not ks:
            out[name] = {"points": f["points"], "every": None}
            continue
        k = max(set(ks), key=ks.count)
        reached = sum(1 for kd, steps, _ in f["departures"] if steps > k and (kd is None or kd >= k))
        there = [c for kd, _, c in f["departures"] if kd == k]
        out[name] = {"points": f["points"], "every": k + 1, "reached": reached, "departed": len(there),
                     "departed_without_the_released_condition": sum(1 for c in there if not c)}
    votes: dict = {}
    for v in out.values():
        if v["every"] is not None:
            key = (v["every"], v["departed_without_the_released_condition"] == 0)
            votes[key] = votes.get(key, 0) + v["points"]
    (every, if_rose), points = max(votes.items(), key=lambda kv: kv[1])
    return {"files": out, "majority": {"every": every, "if_rose": if_rose, "points": points,
                                       "later_points": sum(v["points"] for v in out.values())}}


def solution_jumps(d) -> dict:
    """Change of the solution demand ``Xsol`` between neighbouring complete points of each file
    [V, 2-norm over the four coefficients], absolute and over the larger of the two solutions,
    and each file's smallest frequency step [Hz]: ``max_v``, ``max_relative``,
    ``relative_p90`` over all files, ``files``."""
    f, fr, X, ok = d["file"], d["frequency"], d["Xsol"], d["complete"]
    files: dict = {}
    for p in range(1, fr.size):
        if f[p] != f[p - 1] or not (ok[p] and ok[p - 1]) or not np.all(np.isfinite(X[[p - 1, p]])):
            continue
        jump = float(np.linalg.norm(X[p] - X[p - 1]))
        size = max(float(np.linalg.norm(X[p])), float(np.linalg.norm(X[p - 1])))
        files.setdefault(str(f[p]), []).append((jump, jump / size, abs(float(fr[p] - fr[p - 1]))))
    rel = [r for v in files.values() for _, r, _ in v]
    return {"max_v": max(j for v in files.values() for j, _, _ in v), "max_relative": max(rel),
            "relative_p90": float(np.percentile(rel, 90)),
            "files": {k: {"max_v": max(j for j, _, _ in v), "finest_step_hz": round(min(s for _, _, s in v), 6)}
                      for k, v in sorted(files.items())}}


def main(argv=None) -> int:
    out = ROOT / "tests" / "data" / "lab_iteration_stats.json"
    a, d = open_lab("lab_iteration_stats", __doc__.splitlines()[0], out, argv)
    if d is None:
        return 2
    recs = records(d)
    later = later_points(d, recs)
    cond = [float(np.linalg.cond(d["invJ"][p])) for p, *_ in recs]
    doc = {
        "provenance": {
            "source": LAB_SOURCE,
            "script": "scripts/lab_iteration_stats.py",
            "units": "residual N, demand V; ratios 1",
        },
        "evaluations_median_all_points": float(np.median([len(X) for _, X, _, _ in recs])),
        "complete_points": len(recs),
        "later_points": step_statistics([(X, R, tol) for _, X, R, tol in later]),
        "affine": {**misfit_structure(recs), "min_evaluations": MIN_AFFINE_EVALUATIONS,
                   "memory": misfit_memory(d, recs)},
        "iterated_jacobian_condition_median": float(np.median(cond)),
        "replayed_step_share": replay_share(d, recs),
        "remeasure": remeasure_rules(d, recs),
        "solution_jumps": solution_jumps(d),
    }
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``hbtest report STORE [--json]``: a text summary of a run store — points, convergence, the
sync metrics per interface variable and harmonic (:func:`hbtest.method.ps_ns_sync.sync_summary`: PS vs NS
amplitude ratio and phase, as in the published paper's table) and, for a stepped-force
family, the backbone (:func:`hbtest.analysis.backbone.backbone`). ``--json`` prints one JSON object."""

from __future__ import annotations

import json
import math


def register(sub) -> None:
    p = sub.add_parser("report", help="summary of a run store: convergence, sync metrics (u, θ, T, M), backbone of a force family")
    p.add_argument("store", metavar="STORE", help="run store (.zarr directory)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=run)


def _clean(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x


def report(store) -> dict:
    """The report of a run store as a JSON-able dict."""
    import numpy as np

    from ..analysis.backbone import backbone, has_levels
    from ..analysis.export import check_intact
    from ..method.ps_ns_sync import sync_summary
    from ..store import open_run

    check_intact(store)  # UserError for a missing, foreign or damaged store
    ds = open_run(store)
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    out = {"store": str(store), "status": ds.attrs.get("status"), "points": int(done.size), "done": int(done.sum()),
           "converged": int(conv.sum()), "harmonics": [int(k) for k in ds["harmonic"].values]}
    if "harmonic_active" in ds:
        act = np.asarray(ds["harmonic_active"].values, dtype=bool)[done]
        out["harmonic_active_points"] = {int(k): int(act[:, j].sum()) for j, k in enumerate(ds["harmonic"].values)}
    out["sync"] = sync_summary(ds) if "sync_amplitude_ratio" in ds else None
    out["backbone"] = backbone(ds).to_dict() if has_levels(ds) else None
    return _clean(out)


def format_report(rep: dict) -> str:
    from ..method.ps_ns_sync import format_sync_summary

    lines = [f"{rep['store']}: {rep['status']}, {rep['done']}/{rep['points']} points done, {rep['converged']} converged, harmonics {rep['harmonics']}"]
    if rep.get("harmonic_active_points"):
        lines.append("points balancing each harmonic: " + ", ".join(f"k={k}: {n}" for k, n in rep["harmonic_active_points"].items()))
    if rep["sync"] is not None:
        nan = float("nan")
        rows = [{k: (nan if v is None else v) for k, v in r.items()} for r in rep["sync"]["rows"]]
        offset = [nan if v is None else v for v in rep["sync"].get("solution_offset", [None, None])]
        lines.append(format_sync_summary({**rep["sync"], "rows": rows, "solution_offset": offset}))
    else:
        lines.append("no sync metrics in this store")
    bb = rep.get("backbone")
    if bb:
        lines.append("backbone (peak |u_1| per force level; parabola through the three highest points):")
        lines.append(f"{'F [N]':>9} {'f_peak [Hz]':>12} {'|u_1| [m]':>11} {'interior':>8} {'points':>6}")
        for F, f, a, inner, n in zip(bb["force_n"], bb["frequency_hz"], bb["amplitude"], bb["interior"], bb["n_points"]):
            fs = f"{f:12.5f}" if f is not None else f"{'nan':>12}"
            as_ = f"{a:11.4e}" if a is not None else f"{'nan':>11}"
            lines.append(f"{F:9.4g} {fs} {as_} {str(bool(inner)):>8} {n:>6d}")
    return "\n".join(lines)


def run(args) -> int:
    rep = report(args.store)
    print(json.dumps(rep) if args.json else format_report(rep))
    return 0

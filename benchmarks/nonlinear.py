"""Rig time of the two solver profiles on the nonlinear sweep (sweeps/cubic-interface.toml:
a hardening cubic spring at the interface on the numerical side, harmonics 1 and 3, stepped
up in frequency) on the twin, through the whole sweep path (:func:`hbtest.sweep.runner.run` into a
temporary store).

Prints ``key=value`` lines per profile: ``<profile>_points``, ``<profile>_converged``,
``<profile>_periods`` (rig time of all points, forcing periods, settling included),
``<profile>_median_iterations``, ``<profile>_wall_s`` and
``<profile>_periods_per_point`` (all rig time over all points) and
``<profile>_periods_per_converged_point`` (all rig time, non-converged points included, over
the converged points: what one useful point costs), then ``periods_per_point_ratio`` and, last,
``periods_per_converged_point_ratio=<published/hbtest>`` (``inf`` when the published profile
converges no point). Seed 1, the full file (41 points, 16-20 Hz): about 25 min on a shared
2-core machine.

A stepped sweep up follows the upper branch to the fold (19.53 Hz at 0.05 N) and jumps
down; points after the jump may not converge — their rig time counts against the profile.

    python benchmarks/nonlinear.py [--sweep FILE] [--seed 1] [--profiles published hbtest] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_sweep  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402


def measure(sweep_file: Path, profile: str, seed: int, extra) -> dict:
    # the stepped grid (the file traces by arclength): the same points for both profiles
    overrides = ["sweep.continuation=stepped", f"solver.profile={profile}", *extra]
    cfg = load_sweep(sweep_file, overrides)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        ds = run(cfg, Path(tmp) / "nl.zarr", seed=seed, plot=False, overrides=overrides).load()
        wall = time.monotonic() - t0
    done = np.asarray(ds.done.values, dtype=bool)
    conv = np.asarray(ds.converged.values, dtype=bool) & done
    periods = float(np.nansum(ds.rig_periods.values[done]))
    return dict(points=int(done.sum()), converged=int(conv.sum()), periods=periods,
                median_iterations=float(np.median(ds.iterations.values[done])), wall_s=wall,
                periods_per_point=periods / max(1, int(done.sum())),
                periods_per_converged_point=periods / conv.sum() if conv.any() else float("inf"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "cubic-interface.toml")
    ap.add_argument("--seed", type=int, default=1, help="noise seed of the twin")
    ap.add_argument("--profiles", nargs="+", default=["published", "hbtest"])
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help="override a sweep-file key")
    args = ap.parse_args(argv)
    res = {}
    for prof in args.profiles:
        r = measure(args.sweep, prof, args.seed, args.overrides)
        res[prof] = r
        for key in ("points", "converged", "periods", "median_iterations", "wall_s", "periods_per_point", "periods_per_converged_point"):
            v = r[key]
            print(f"{prof}_{key}={v:.1f}" if isinstance(v, float) else f"{prof}_{key}={v}", flush=True)
    if "published" in res and "hbtest" in res:
        print(f"periods_per_point_ratio={res['published']['periods_per_point'] / res['hbtest']['periods_per_point']:.2f}")
        print(f"periods_per_converged_point_ratio={res['published']['periods_per_converged_point'] / res['hbtest']['periods_per_converged_point']:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

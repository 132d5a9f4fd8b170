"""Speed-up of a campaign on a dask LocalCluster over the same campaign run serially in this
process (``workers=0``, what a user compares against), on the same short virtual sweeps
(default 64 cases: 8 actuation delays x 8 noise realisations of a 2-point sweep of the paper
cantilever below its resonance), and a check that the result stores equal the serial run's to
the seed, except the provenance variables ``wall_seconds``, ``worker``, ``finished_utc``.

Run: ``python benchmarks/campaign_scaling.py [--cases 64] [--workers N]`` (imports the
repository's ``hbtest``; needs the ``campaign`` extra; default N: the core count). Runs serial,
1 worker and N workers; prints one line per run (wall time including the cluster's start-up),
the machine's core count, ``store_identical=...``, ``campaign_speedup=<x>`` (1 worker over N
workers), ``campaign_task_overhead_s=<s>`` (what a task costs beyond the same case in-process:
(wall of 1 worker - serial wall) / cases, the cluster's start-up, scheduling, the worker's
imports and the results' trip back included) and, as its LAST line,
``campaign_speedup_vs_serial=<x>`` (serial wall / wall of N workers). The speed-up is bounded
by the cores: on a 2-core machine at most 2x. Exit 1 if a store differs from the serial run.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.campaign import run_campaign  # noqa: E402
from hbtest.config import load_campaign  # noqa: E402

PROVENANCE = ("wall_seconds", "worker", "finished_utc")
SHORT = ["sweep.start_hz=12.0", "sweep.stop_hz=13.0", "sweep.points=2", "test.averaging_periods=10"]
DELAYS = 8  # grid of actuation delays; the cases are DELAYS x draws


def campaign_text(cases: int) -> str:
    draws = max(1, cases // DELAYS)
    delays = ", ".join(f"{0.25 * (i + 1):g}" for i in range(DELAYS))
    sets = ", ".join(f'"{s}"' for s in SHORT)
    return (f'name = "scaling"\nbase = "{ROOT / "sweeps" / "paper-cantilever.toml"}"\nset = [{sets}]\nseed = 11\n'
            f'draws = {draws}\nfigures = ["frf_error_max", "frf_error_rms", "converged_fraction", "rig_periods", "iterations_mean"]\n'
            f'[[grid]]\nkey = "rig:virtual.actuation_delay_ms"\nvalues = [{delays}]\n')


def same(a, b) -> list[str]:
    """Names of the variables (other than provenance) that differ."""
    names = sorted(set(a.variables) | set(b.variables))
    return [v for v in names if v not in PROVENANCE and (v not in a or v not in b or not a[v].equals(b[v]))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=64, help="cases (rounded down to a multiple of 8; default %(default)s)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="workers of the parallel run (default: the cores, %(default)s)")
    args = ap.parse_args(argv)
    if args.workers < 2:
        ap.error("--workers: the parallel run needs 2 or more (1 worker is always run)")
    with tempfile.TemporaryDirectory(prefix="hbtest-campaign-bench-") as tmp:
        f = Path(tmp) / "scaling.toml"
        f.write_text(campaign_text(args.cases))
        cfg = load_campaign(f)
        walls, stores = {}, {}
        for label, workers in (("serial", 0), ("1 worker", 1), (f"{args.workers} workers", args.workers)):
            t0 = time.perf_counter()
            stores[label] = run_campaign(cfg, Path(tmp) / f"{workers}.zarr", workers=workers).load()
            walls[label] = time.perf_counter() - t0
            done = int((stores[label]["status"] == "done").sum())
            print(f"{label:>10}: {cfg.n_cases} cases ({done} done) in {walls[label]:.1f} s (load {os.getloadavg()[0]:.1f})", flush=True)
        diffs = {label: same(stores["serial"], ds) for label, ds in stores.items() if label != "serial"}
        identical = not any(diffs.values())
        for label, d in diffs.items():
            if d:
                print(f"store of {label} differs from the serial run in: {', '.join(d)}")
        print(f"cores={os.cpu_count()}")
        print(f"cases={cfg.n_cases}")
        print(f"store_identical={identical}")
        parallel = walls[f"{args.workers} workers"]
        print(f"campaign_speedup={walls['1 worker'] / parallel:.2f}")
        print(f"campaign_task_overhead_s={(walls['1 worker'] - walls['serial']) / cfg.n_cases:.3f}")
        print(f"campaign_speedup_vs_serial={walls['serial'] / parallel:.2f}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())

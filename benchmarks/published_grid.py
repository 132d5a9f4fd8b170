"""The published profile on the paper sweep's band with a lab-like frequency grid.

Usage: ``python benchmarks/published_grid.py [--seeds 1 2] [--step 0.025]`` (about 40 s a seed).

The paper sweep steps 0.1 Hz through its resonance; every lab file refined its grid there to
0.01-0.02 Hz (``tests/data/lab_iteration_stats.json``, ``solution_jumps``), so the lab's loop
never had to move its solution far between neighbouring points (0.69 V at most, against up to
1.78 V on the paper sweep: ``benchmarks/twin_vs_lab.py``). This runs the published profile on
the reference twin (``rig_time.REFERENCE_RIG``, scatter included) over 16-19 Hz at 0.1 Hz, with
``--step`` Hz over 18.2-18.9 Hz, the paper structure's resonance, and prints per seed the points
converged and those that clipped a sensor, then ``lab_grid_converged=<n>/<points>`` and
``lab_grid_overrange=<n>`` over all seeds. Compare ``python benchmarks/rig_time.py --profiles
published``, which runs the paper grid.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rig_time import ROOT, run_profile  # noqa: E402

PAPER = ROOT / "sweeps" / "paper-cantilever.toml"


def lab_grid(step_hz: float) -> np.ndarray:
    """16-19 Hz: 0.1 Hz steps, ``step_hz`` over 18.2-18.9 Hz."""
    return np.round(np.concatenate([np.arange(16.0, 18.2, 0.1), np.arange(18.2, 18.9, step_hz),
                                    np.arange(18.9, 19.01, 0.1)]), 6)


def run(seed: int, grid: np.ndarray) -> list:
    """The published profile's outcomes over ``grid`` on the reference twin, seeded."""
    _, rig, outs, _, _, _ = run_profile(PAPER, "published", None, seed, frequencies=grid)
    rig.close()
    return outs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--step", type=float, default=0.025, help="grid step over 18.2-18.9 Hz [Hz]")
    a = ap.parse_args(argv)
    grid = lab_grid(a.step)
    converged = overrange = 0
    for seed in a.seeds:
        outs = run(seed, grid)
        ok = sum(o.reason == "converged" for o in outs)
        over = [o.frequency_hz for o in outs if o.reason == "overrange" or any(h.overrange for h in o.history)]
        converged, overrange = converged + ok, overrange + len(over)
        other = [(round(o.frequency_hz, 3), o.reason) for o in outs if o.reason != "converged"]
        print(f"seed {seed}: converged {ok}/{len(outs)}, median evaluations {np.median([o.iterations for o in outs]):g}, "
              f"points with a clipped record {len(over)}; not converged {other}", flush=True)
    print(f"lab_grid_converged={converged}/{len(grid) * len(a.seeds)}")
    print(f"lab_grid_overrange={overrange}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Virtual work at machine speed: how many seconds of rig time a virtual sweep simulates per
second of wall time, end to end in one process (the point loop, the twin, the store writes).

Runs, in this process after the imports (a warm-up sweep first: imports, the twin's model cache),
the paper sweep (``sweeps/paper-cantilever.toml``, 31 points 16-19 Hz) and the bare beam
(``sweeps/bare-beam.toml``) through :func:`hbtest.sweep.runner.run` into temporary stores, each
``--repeats`` times. Simulated rig time: the sum over the points of ``rig_periods / frequency``
(every ramp, settling and acquisition period of the point). Wall: the ``run`` call (store
creation, the sweep, the store writes), median over the repeats.

    python benchmarks/virtual_speed.py [--repeats 3]

Prints per sweep the walls of the repeats with the load average beside, ``<name>_cpu_s=`` (the
process's CPU time, all threads, median: on a shared machine what the wall would be unloaded),
``<name>_wall_s=``, ``<name>_rig_s=``, ``<name>_cpu_realtime_factor=`` (simulated rig s / CPU s)
and ``<name>_realtime_factor=`` (by wall), then ``virtual_realtime_factor_cpu=<x>`` of the paper
sweep (the figure that means something on a loaded machine) and, as its LAST line,
``virtual_realtime_factor=<x>`` (simulated rig s / wall s; the target is >= 100, on a quiet
machine). One BLAS thread, as the command runs.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_sweep  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

SWEEPS = {"paper": "paper-cantilever.toml", "bare": "bare-beam.toml"}
WARM_UP = ["sweep.start_hz=18.2", "sweep.stop_hz=18.3", "sweep.points=2"]


def rig_seconds(ds) -> float:
    """Simulated rig time of a store's finished points [s]."""
    done = np.asarray(ds["done"].values, dtype=bool)
    periods = np.asarray(ds["rig_periods"].values, dtype=float)[done]
    return float(np.sum(periods / np.asarray(ds["frequency"].values, dtype=float)[done]))


def timed(cfg, store: Path) -> tuple[float, float, float]:
    """(wall [s], simulated rig time [s], CPU time of this process [s]) of one sweep into ``store``."""
    t0, c0 = time.perf_counter(), time.process_time()
    ds = run(cfg, store, overwrite=True, plot=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, rig_seconds(ds), cpu


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="runs of each sweep (median wall; default %(default)s)")
    args = ap.parse_args(argv)
    factors, cpu_factors = {}, {}
    with tempfile.TemporaryDirectory(prefix="hbtest-virtual-speed-") as tmp:
        timed(load_sweep(ROOT / "sweeps" / SWEEPS["paper"], WARM_UP), Path(tmp) / "warm.zarr")
        for name, file in SWEEPS.items():
            cfg = load_sweep(ROOT / "sweeps" / file)
            runs = [timed(cfg, Path(tmp) / f"{name}.zarr") for _ in range(max(1, args.repeats))]
            wall = statistics.median(w for w, _, _ in runs)
            cpu = statistics.median(c for _, _, c in runs)
            rig_s = runs[0][1]
            factors[name], cpu_factors[name] = rig_s / wall, rig_s / cpu
            print(f"{name}_walls_s={','.join(f'{w:.2f}' for w, _, _ in runs)} (load {os.getloadavg()[0]:.1f})")
            print(f"{name}_cpu_s={cpu:.2f}")
            print(f"{name}_wall_s={wall:.2f}")
            print(f"{name}_rig_s={rig_s:.1f}")
            print(f"{name}_cpu_realtime_factor={cpu_factors[name]:.1f}")
            print(f"{name}_realtime_factor={factors[name]:.1f}", flush=True)
    print(f"virtual_realtime_factor_cpu={cpu_factors['paper']:.1f}")
    print(f"virtual_realtime_factor={factors['paper']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

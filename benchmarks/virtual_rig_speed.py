"""Speed of the virtual twin: simulated seconds per wall-clock second.

Workload (the shape of a real test, one process, 5 kHz, all sensors, noise, mains and ADC on):
a sweep over 16-19 Hz; at each point a few solver-like iterations, each a demand change ramped
over 2 periods, a wait of 5 periods and two 30-period acquisitions (the settling check),
plus one 30-period acquisition with the per-sample friction path and one with the
nonlinear-element path (a contact stop engaged at resonance) for comparison.

    PYTHONPATH=. python benchmarks/virtual_rig_speed.py [--points 31] [--iterations 4]

The last line is ``realtime_factor=<x>`` (target >= 1000).
"""

from __future__ import annotations

import os

# one process, one thread: a threaded BLAS only loses time on these small problems (and much
# more on a busy 2-core machine); set before numpy is imported
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
import time
from pathlib import Path

import numpy as np  # noqa: E402

from hbtest.config import load_rig
from hbtest.rig.virtual import VirtualRig

RIG = Path(__file__).resolve().parents[1] / "instruments" / "virtual-cantilever.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=31)
    ap.add_argument("--iterations", type=int, default=4)
    args = ap.parse_args()

    t0 = time.perf_counter()
    cfg = load_rig(RIG)
    rig = VirtualRig(cfg)
    build = time.perf_counter() - t0
    d = rig.describe().details
    print(f"model: {d['fe_nodes']} FE nodes, {d['modal_states']} modal states, built in {build:.2f} s")

    rng = np.random.default_rng(1)
    base = np.array([[0.3 + 0.1j], [0.15 - 0.05j]])
    sim0 = rig.elapsed_s
    t0 = time.perf_counter()
    n_acq = 0
    for f in np.linspace(16.0, 19.0, args.points):
        for _ in range(args.iterations):
            V = base * (1 + 0.05 * (rng.standard_normal((2, 1)) + 1j * rng.standard_normal((2, 1))))
            rig.set_demand(f, V, [1], ramp_periods=2.0)
            rig.wait(5)
            for _ in range(2):
                acq = rig.acquire(30)
                n_acq += 1
    wall = time.perf_counter() - t0
    sim = rig.elapsed_s - sim0
    samples = int(round(sim * rig.fs))
    print(f"linear path: {sim:.1f} s simulated ({samples} samples, {n_acq} acquisitions of {len(acq.t)}+ samples x 4 channels) in {wall:.3f} s wall")

    # the per-sample path (used when friction is on), for reference
    fr = load_rig(RIG, ["virtual.friction.slider_coulomb_n=0.2"])
    slow = VirtualRig(fr)
    slow.set_demand(18.0, base, [1], ramp_periods=2.0)
    t1 = time.perf_counter()
    s1 = slow.elapsed_s
    slow.acquire(30)
    print(f"friction (per-sample) path: realtime factor {(slow.elapsed_s - s1) / (time.perf_counter() - t1):.1f}")

    # the nonlinear-element path (the contact stop of virtual-cantilever-contact.toml, engaged
    # about a quarter of the time at the hybrid test's demand at 18.75 Hz: explicit sub-steps
    # while in contact, closed-form free flight otherwise)
    nl = VirtualRig(load_rig(RIG.with_name("virtual-cantilever-contact.toml")))
    nl.set_demand(18.75, np.array([[0.92 + 2.33j], [1.45 + 0.62j]]), [1], ramp_periods=2.0)
    nl.wait(10)
    t2 = time.perf_counter()
    s2 = nl.elapsed_s
    nl.acquire(30)
    print(f"contact (nonlinear-element) path: realtime factor {(nl.elapsed_s - s2) / (time.perf_counter() - t2):.1f}")
    print(f"realtime_factor={sim / wall:.0f}")


if __name__ == "__main__":
    main()

"""What the simulated SCPI bench adds to a record against the in-process twin (issue 40: why the
scpi kind costs more rig time than the others).

The same twin and seed, in-process (``instruments/virtual-cantilever.toml``) and behind the
served 33500B + InfiniiVision (``hbtest serve --protocol scpi``, ``instruments/scpi-loopback.toml``
without ``[identify]``), at one fixed demand (``--frequency``, ``--volts`` on the vertical
actuator, 0 = zero demand): ``--records`` records of ``--periods`` periods each, then demand
changes. Printed per sensor channel (key=value): the residual rms of a least-squares fit of DC,
the fundamental and the five mains multiples (50.07 Hz, the twin's) [mV], both paths, their
variance ratio, and the ratio the scope's steps predict alone (a step of ``range / 4096`` on
the channel's range, 12-bit HRESolution, adds ``step^2 / 12`` to the in-process variance; the
range is the last record's: the loopback file's ``autorange_headroom`` narrows each channel to
its signal after the first record of a demand, ``--fixed-ranges`` keeps the file's 24 V); per
path the samples and sample rate of a record (a decimated record would show fewer samples or a
lower rate) and the rig periods a record and a demand change (``ramp_periods`` 2) cost beyond
the periods asked (a demand change: amplitude and phase, so the generator restarts a new
waveform, as at every iteration); last line ``scpi_noise_variance_ratio_max``, the largest
channel's variance ratio.

    python benchmarks/scpi_noise.py [--frequency 17] [--volts 0.8] [--periods 20] [--records 16] [--fixed-ranges]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from served import TWIN, serve, without_identify  # noqa: E402

from hbtest.config import load_rig  # noqa: E402
from hbtest.rig import open_rig  # noqa: E402

CHANNELS = ("l1", "l2", "g1", "g2")
MAINS_HZ, MAINS_MULTIPLES = 50.07, 5
DEMAND_CHANGES = 6


def residual_rms(t: np.ndarray, y: np.ndarray, f: float) -> float:
    """Rms [V] of ``y`` less its least-squares DC, fundamental and mains lines."""
    lines = [f] + [MAINS_HZ * m for m in range(1, MAINS_MULTIPLES + 1)]
    A = np.stack([np.ones_like(t)] + [g(2 * np.pi * h * t) for h in lines for g in (np.cos, np.sin)], axis=1)
    c, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(np.std(y - A @ c))


def measure(rig, f: float, volts: float, periods: int, records: int) -> dict:
    V = np.array([[volts], [0.0]], dtype=complex)
    rig.set_demand(f, V, [1], ramp_periods=2.0)
    rig.wait(20)
    rms = {c: [] for c in CHANNELS}
    cost = []
    for _ in range(records):
        e0 = rig.elapsed_s
        a = rig.acquire(periods)
        cost.append((rig.elapsed_s - e0) * f - periods)
        for c in CHANNELS:
            rms[c].append(residual_rms(a.t, a.data[c], f))
    ramps = []
    for j in range(1, DEMAND_CHANGES + 1):
        e0 = rig.elapsed_s
        rig.set_demand(f, V * (1 + 0.01 * j) * np.exp(0.05j * j), [1], ramp_periods=2.0)  # a new waveform: a restart
        ramps.append((rig.elapsed_s - e0) * f - 2.0)
    return {"rms": {c: float(np.sqrt(np.mean(np.square(v)))) for c, v in rms.items()}, "samples": a.t.size,
            "rate": a.sample_rate_hz, "record_extra": float(np.mean(cost)), "ramp_extra": float(np.mean(ramps))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frequency", type=float, default=17.0)
    ap.add_argument("--volts", type=float, default=0.8)
    ap.add_argument("--periods", type=int, default=20)
    ap.add_argument("--records", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--fixed-ranges", action="store_true", help="the rig file's ranges throughout (autorange_headroom = 0)")
    a = ap.parse_args()
    with open_rig(load_rig(TWIN), a.seed) as rig:
        base = measure(rig, a.frequency, a.volts, a.periods, a.records)
    served = serve("scpi", None, "--seed", str(a.seed))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            cfg = load_rig(served.rig_file(Path(tmp), without_identify), ["digitiser.autorange_headroom=0"] if a.fixed_ranges else [])
            with open_rig(cfg) as rig:
                bench = measure(rig, a.frequency, a.volts, a.periods, a.records)
                ranges = rig.channel_ranges_v  # those of the last record at the fixed demand (see measure)
    finally:
        served.stop()
    worst = 0.0
    for c in CHANNELS:
        r0, r1 = base["rms"][c], bench["rms"][c]
        worst = max(worst, (r1 / r0) ** 2)
        step = ranges[c] / 4096
        print(f"{c}: inprocess_rms_mv={r0 * 1e3:.3f} scpi_rms_mv={r1 * 1e3:.3f} variance_ratio={(r1 / r0) ** 2:.3f} "
              f"scope_steps_predict={(r0 ** 2 + step ** 2 / 12) / r0 ** 2:.3f}")
    for name, m in (("inprocess", base), ("scpi", bench)):
        print(f"{name}: samples_per_record={m['samples']} sample_rate_hz={m['rate']:.1f} "
              f"periods_per_record_beyond_asked={m['record_extra']:.2f} periods_per_demand_change_beyond_ramp={m['ramp_extra']:.2f}")
    print(f"scpi_noise_variance_ratio_max={worst:.3f}")


if __name__ == "__main__":
    main()

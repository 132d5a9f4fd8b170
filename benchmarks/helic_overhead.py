"""Wall-time overhead of the helic path per sweep point.

Runs the same short sweep (``sweeps/paper-cantilever.toml``, same seed) in-process on the
virtual twin and through ``hbtest serve --protocol helic`` (a separate process: the twin as a
HELIC-DAQ v3 device) with the ``helic`` kind over loopback TCP + UDP
(``instruments/helic-loopback.toml`` pointed at the served ports). The two do not run the same
iterations: in-process the hbtest profile fits through the transient with the twin's modes,
the helic rig (like any hardware rig) has no modes and settles instead, and the helic wire
carries f32. So ``helic_overhead_per_point`` (wall per point, helic / in-process - 1) mixes
the protocol's cost with the settle path's extra rig time (``rig_time_ratio``); the wall per
simulated rig second of each path is printed as well. It is not a like-for-like protocol
overhead and must not be read as one (docs/helic.md). Each variant runs ``--repeat`` times;
the fastest counts (the machine is shared).

    python benchmarks/helic_overhead.py [--points N] [--repeat R]

Prints key=value lines: inprocess_s_per_point, helic_s_per_point, inprocess_wall_per_rig_s,
helic_wall_per_rig_s, rig_time_ratio, helic_overhead_per_point.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_sweep
from hbtest.events import PointFinished, RunStarted
from hbtest.sweep import run

PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
HELIC = ROOT / "instruments" / "helic-loopback.toml"


def timed_sweep(overrides, store: Path):
    """(per-point wall seconds, per-point rig seconds) of one sweep."""
    stamps = []

    def progress(event):
        if isinstance(event, (RunStarted, PointFinished)):
            stamps.append(time.perf_counter())

    cfg = load_sweep(PAPER, overrides)
    ds = run(cfg, store, progress=progress, plot=False, overrides=overrides)
    return np.diff(stamps), ds.rig_periods.values / ds.frequency.values


def serve():
    cmd = [sys.executable, "-m", "hbtest.cli", "serve", "--protocol", "helic", "--rig", str(TWIN), "--port", "0"]
    p = subprocess.Popen(cmd,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit("hbtest serve --protocol helic did not start")
    return p, int(m.group(1))


def helic_rig_file(tmp: Path, port: int) -> Path:
    text = HELIC.read_text().replace("control_port = 2350", f"control_port = {port}")
    path = tmp / "helic.toml"
    path.write_text(text.replace("stream_port = 2351", f"stream_port = {port + 1}"))
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    base = [f"sweep.points={a.points}"]
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(a.repeat):
            best.setdefault("in", []).append(timed_sweep(base, tmp / f"twin{r}.zarr"))
            p, port = serve()
            try:
                rig = helic_rig_file(tmp, port)
                best.setdefault("helic", []).append(timed_sweep(base + [f"rig='{rig}'"], tmp / f"h{r}.zarr"))
            finally:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)
    (w_in, s_in), (w_h, s_h) = (min(best[k], key=lambda x: x[0].sum()) for k in ("in", "helic"))
    print(f"{'point':>5} {'in-process [s]':>15} {'rig [s]':>8} {'helic [s]':>10} {'rig [s]':>8}")
    for i in range(len(w_in)):
        print(f"{i + 1:>5} {w_in[i]:>15.3f} {s_in[i]:>8.2f} {w_h[i]:>10.3f} {s_h[i]:>8.2f}")
    rate_in, rate_h = w_in.sum() / s_in.sum(), w_h.sum() / s_h.sum()
    print(f"inprocess_s_per_point={w_in.mean():.4f}")
    print(f"helic_s_per_point={w_h.mean():.4f}")
    print(f"inprocess_wall_per_rig_s={rate_in:.5f}")
    print(f"helic_wall_per_rig_s={rate_h:.5f}")
    print(f"rig_time_ratio={s_h.sum() / s_in.sum():.3f}")
    print(f"helic_overhead_per_point={w_h.sum() / w_in.sum() - 1:.4f}")


if __name__ == "__main__":
    main()

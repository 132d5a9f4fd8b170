"""Wall-time overhead of the acquisition-box path per sweep point.

Runs the same short sweep (``sweeps/paper-cantilever.toml``, same seed) twice: in-process on
the virtual twin, and through ``hbtest serve`` (a separate process) over a loopback TCP socket
with pyvisa (``instruments/box-loopback.toml`` pointed at the served port). The twin's records
are bit-identical, but they do not run the same iterations: the box fits its records on the device
at the nominal mains, while the in-process loop tracks the lab-calibrated twin's mains (50.07 Hz,
wandering) in its own fits, so near the 18.5 Hz resonance the box path chases a rotating mains bias
(5 points, measured: 15, 3, 13, 13, 6 iterations against 2, 3, 2, 4, 5; 4.3x the rig time). The
figure below is therefore that and the protocol (text commands, float64 blocks, pyvisa, process
switches) together; a mains tracker on the device is the fix, not yet built. Per-point wall time = time between the sweep's progress lines.
Each variant runs ``--repeat`` times; per point the fastest run counts (the machine is shared).

Prints per point both wall times, then the totals. Then the device-averaging path the point
loop will take when it uses ``acquire_coefficients`` (box-side ``harmonics.fit``): per window
length, in-process ``twin.acquire + harmonics.fit`` against one ``MEAS:COEF?`` round trip, and
``coefficient_extra_ms_per_request=<mean extra wall time of a round trip>`` (a point makes about
25 requests). Last ``box_overhead=<(socket - inprocess) / inprocess>`` of the
sweep over all points (goal: under 0.10).

    python benchmarks/box_overhead.py [--points N] [--repeat R]
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

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_sweep  # noqa: E402
from hbtest.events import PointFinished, RunStarted  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"


def timed_sweep(overrides, store: Path) -> tuple[np.ndarray, np.ndarray]:
    """(per-point wall seconds, per-point iterations) of one sweep."""
    stamps = []

    def progress(event):
        if isinstance(event, (RunStarted, PointFinished)):
            stamps.append(time.perf_counter())

    cfg = load_sweep(PAPER, overrides)
    ds = run(cfg, store, progress=progress, plot=False, overrides=overrides)
    return np.diff(stamps), ds.iterations.values


def serve():
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "serve", "--rig", str(TWIN), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit("hbtest serve did not start")
    return p, int(m.group(1))


def coefficient_path(windows=(3, 10, 30, 120), repeat=20) -> float:
    """Per-window wall time: in-process acquire + fit vs one MEAS:COEF? through hbtest serve;
    returns the mean extra seconds per request."""
    from hbtest.method import harmonics
    from hbtest.config import load_rig
    from hbtest.rig import open_rig
    from hbtest.rig.virtual import VirtualRig

    V = np.array([[1.0 - 0.5j], [0.4]])
    twin = VirtualRig(load_rig(TWIN))
    mains = twin.describe().sensors.mains_frequencies
    p, port = serve()
    ratios = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            rig_file = Path(tmp) / "box.toml"
            rig_file.write_text(BOX.read_text().replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET"))
            with open_rig(load_rig(rig_file)) as box:
                for r in (twin, box):
                    r.set_demand(17.5, V, [1])
                print(f"{'periods':>7} {'in-process [ms]':>16} {'MEAS:COEF? [ms]':>16}")
                for n in windows:
                    t = time.perf_counter()
                    for _ in range(repeat):
                        a = twin.acquire(n)
                        harmonics.fit(a.t, np.stack(list(a.data.values())), 17.5, [1], n_periods=n, nuisance_hz=mains)
                    t_in = (time.perf_counter() - t) / repeat
                    t = time.perf_counter()
                    for _ in range(repeat):
                        box.acquire_coefficients(n, [1], nuisance_hz=mains)
                    t_box = (time.perf_counter() - t) / repeat
                    ratios.append(t_box - t_in)
                    print(f"{n:>7} {t_in * 1e3:>16.3f} {t_box * 1e3:>16.3f}")
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)
    return float(np.mean(ratios))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=2)
    a = ap.parse_args()
    base = [f"sweep.points={a.points}"]
    inproc, socket_, iters = [], [], None
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(a.repeat):
            w, it = timed_sweep(base, tmp / f"twin{r}.zarr")
            inproc.append(w)
            p, port = serve()
            try:
                rig = tmp / "box.toml"
                rig.write_text(BOX.read_text().replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET"))
                w2, it2 = timed_sweep(base + [f"rig='{rig}'"], tmp / f"box{r}.zarr")
                socket_.append(w2)
            finally:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)
            if not np.array_equal(it, it2):
                print(f"warning: iterations differ (in-process {it.tolist()}, socket {it2.tolist()})")
            iters = it
    t_in = np.min(inproc, axis=0)
    t_so = np.min(socket_, axis=0)
    print(f"{'point':>5} {'iter':>5} {'in-process [s]':>15} {'socket [s]':>11} {'overhead':>9}")
    for i, (x, y) in enumerate(zip(t_in, t_so)):
        print(f"{i + 1:>5} {int(iters[i]):>5} {x:>15.3f} {y:>11.3f} {(y - x) / x:>9.3f}")
    coef = coefficient_path()
    print(f"coefficient_extra_ms_per_request={coef * 1e3:.3f}")
    print(f"inprocess_s_per_point={t_in.mean():.4f}")
    print(f"socket_s_per_point={t_so.mean():.4f}")
    print(f"box_overhead={(t_so.sum() - t_in.sum()) / t_in.sum():.4f}")


if __name__ == "__main__":
    main()

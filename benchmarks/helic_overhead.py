"""Wall-time overhead of the helic path per sweep point.

Runs the same short sweep (``sweeps/paper-cantilever.toml``, same seed) in-process on the
virtual twin and through ``hbtest serve --protocol helic`` (a separate process: the twin as a
HELIC-DAQ v3 device) with the ``helic`` kind over loopback TCP + UDP
(``instruments/helic-loopback.toml`` pointed at the served ports).

Like with like: the helic rig (as any hardware rig) offers no modes, so the hbtest profile
settles instead of fitting through the transient; the in-process reference therefore runs with
the transient fit off (the hbtest window rule with ``fit_transient=False``), and both then run the same
iterations and rig time (checked; printed as a warning otherwise). ``helic_overhead`` is
``helic wall / in-process wall - 1`` over all points; ``helic_cpu_overhead`` the same for
CPU time (host process + served process against the in-process run), which the load of a
shared machine moves less than wall time (still by up to ~30 % on a shared 2-core machine:
docs/helic.md). For information, the in-process run with
the profile's default (transient fit) is timed too (``inprocess_default_s_per_point``).
Each variant runs ``--repeat`` times; the fastest counts (the machine is shared).
``helic_overhead_per_repeat``: the same ratio within each repeat (an in-process run and
the helic run right after it), to show how much the machine's load moved it.
``helic_counters``: the helic rig's counters of that run (records retaken, datagrams lost, ...);
a warning is printed when any helic run retook a record or lost a datagram.

    python benchmarks/helic_overhead.py [--points N] [--repeat R]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
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
TABLES = ("interface_displacement", "interface_force", "voltage")  # per-point tables compared in-process vs helic


def cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (Linux /proc), 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_sweep(overrides, store: Path, fit_transient: bool = True, server: int | None = None):
    """(per-point wall seconds, per-point rig seconds, iterations, tables, CPU seconds of this
    process and of the ``server`` process over the points, the rig's counters) of one sweep."""
    from hbtest.point.profiles import HbtestProfile

    stamps, cpu = [], []

    def progress(event):
        if isinstance(event, (RunStarted, PointFinished)):
            stamps.append(time.perf_counter())
            cpu.append((time.process_time(), cpu_s(server)))

    cfg = load_sweep(PAPER, overrides)
    saved = HbtestProfile.window_rule
    if not fit_transient:
        HbtestProfile.window_rule = lambda self, s: dataclasses.replace(saved(self, s), fit_transient=False)
    try:
        ds = run(cfg, store, progress=progress, plot=False, overrides=overrides)
    finally:
        HbtestProfile.window_rule = saved
    tables = {name: ds[name].values for name in TABLES}
    used = np.array(cpu[-1]) - np.array(cpu[0])
    counters = json.loads(ds.attrs.get("rig_counters", "{}"))
    return np.diff(stamps), ds.rig_periods.values / ds.frequency.values, ds.iterations.values, tables, used, counters


def serve(protocol: str = "helic", *options: str):
    """``hbtest serve --protocol <protocol>`` of the twin (free ports): (process, ports)."""
    cmd = [sys.executable, "-m", "hbtest.cli", "serve", "--protocol", protocol, "--rig", str(TWIN), "--port", "0",
           *options]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    ports = [int(x) for x in re.findall(r"listening on 127\.0\.0\.1:(\d+)", p.stdout.readline())]
    if not ports:
        p.kill()
        raise SystemExit(f"hbtest serve --protocol {protocol} did not start")
    return p, ports


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
    runs: dict[str, list] = {"default": [], "in": [], "helic": []}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for r in range(a.repeat):
            runs["default"].append(timed_sweep(base, tmp / f"d{r}.zarr"))
            runs["in"].append(timed_sweep(base, tmp / f"i{r}.zarr", fit_transient=False))
            p, (port,) = serve()
            try:
                rig = helic_rig_file(tmp, port)
                runs["helic"].append(timed_sweep(base + [f"rig='{rig}'"], tmp / f"h{r}.zarr", server=p.pid))
            finally:
                p.send_signal(signal.SIGTERM)
                p.communicate(timeout=30)
    best = {k: min(v, key=lambda x: x[0].sum()) for k, v in runs.items()}  # fastest repeat
    (w_in, s_in, it_in, tab_in, cpu_in, _), (w_h, s_h, it_h, tab_h, cpu_h, counts) = best["in"], best["helic"]
    if not (np.array_equal(it_in, it_h) and np.allclose(s_in, s_h, rtol=1e-9)):
        print(f"warning: runs differ (iterations {it_in.tolist()} vs {it_h.tolist()})")
    lossy = [r[5] for r in runs["helic"] if r[5].get("retaken") or r[5].get("lost_datagrams")]
    if lossy:
        print(f"warning: records retaken or datagrams lost in {len(lossy)} of {len(runs['helic'])} helic runs: {lossy}")
    print(f"{'point':>5} {'iter':>5} {'rig [s]':>8} {'in-process [s]':>15} {'helic [s]':>10} {'overhead':>9}")
    for i in range(len(w_in)):
        ratio = w_h[i] / w_in[i] - 1
        print(f"{i + 1:>5} {int(it_in[i]):>5} {s_in[i]:>8.2f} {w_in[i]:>15.3f} {w_h[i]:>10.3f} {ratio:>9.3f}")
    print(f"inprocess_default_s_per_point={best['default'][0].mean():.4f}")
    print(f"inprocess_default_rig_s_per_point={best['default'][1].mean():.3f}")
    print(f"inprocess_s_per_point={w_in.mean():.4f}")
    print(f"helic_s_per_point={w_h.mean():.4f}")
    print(f"rig_s_per_point={s_in.mean():.3f}")
    print(f"helic_overhead={w_h.sum() / w_in.sum() - 1:.4f}")
    paired = [h[0].sum() / i[0].sum() - 1 for i, h in zip(runs["in"], runs["helic"])]  # load moves between repeats
    print("helic_overhead_per_repeat=" + ",".join(f"{x:.4f}" for x in paired))
    print(f"inprocess_cpu_s={cpu_in[0]:.3f}")
    print(f"helic_cpu_s_host={cpu_h[0]:.3f}")
    print(f"helic_cpu_s_served={cpu_h[1]:.3f}")
    print(f"helic_cpu_overhead={cpu_h.sum() / cpu_in[0] - 1:.4f}")
    print("helic_counters=" + ",".join(f"{k}:{v}" for k, v in counts.items()))
    for name in TABLES:  # largest difference relative to the table's largest magnitude, per harmonic/DOF
        a, b = tab_in[name], tab_h[name]
        scale = np.max(np.abs(a), axis=0, keepdims=True)
        print(f"table_rel_diff_{name}={np.max(np.abs(b - a) / np.where(scale > 0, scale, 1)):.3g}")


if __name__ == "__main__":
    main()

"""Wall-time overhead of the helic path per sweep point, paired and interleaved.

Runs the same short sweep (``sweeps/paper-cantilever.toml``, same seed) in-process on the
virtual twin (A) and through ``hbtest serve --protocol helic`` (a separate process, started
afresh for every run: the twin as a HELIC-DAQ v3 device) with the ``helic`` kind over loopback
TCP + UDP (``instruments/helic-loopback.toml`` pointed at the served ports) (B).

Like with like: the helic rig (as any hardware rig) offers no modes, so the hbtest profile
settles instead of fitting through the transient; the in-process run therefore runs with the
transient fit off (the hbtest window rule with ``fit_transient=False``). Both runs store the
final window's raw record of every point (``output.raw_records=true``: the default for a
hardware rig, off by default for the twin; it is the store's work, not the path's). Both then
take the same iterations and rig time and give the same per-point tables within f32 rounding
(checked for every run; a warning is printed otherwise).

Timing: wall time [s] from the run's start event to its last point's end (store writes
included), per point. Each of ``--repeat`` repeats is one pair, run in the order A B B A, so a
load on the shared machine that drifts linearly over the repeat weighs A and B alike. Per pair
``ratio = (B1 + B2) / (A1 + A2) - 1`` over all points (B1, B2, A1, A2 each a run's total wall).
Printed:

- ``helic_overhead``: the median of the pairs' ratios; ``helic_overhead_pairs``: their number;
  ``helic_overhead_iqr``: their 25th and 75th percentiles (linear interpolation);
  ``helic_overhead_ci`` / ``helic_overhead_ci_level``: the distribution-free interval for the
  median, the pairs' k-th smallest and k-th largest ratio with k the largest for which
  ``1 - 2 P(Binomial(pairs, 1/2) < k) >= 0.9`` (k = 1 when none is), and that coverage;
  ``helic_overhead_per_pair``: every pair's ratio, in run order.
- ``helic_cpu_overhead``: the same median for CPU time (user + system of the host process and
  the served process over the points, against the in-process run's); per pair in
  ``helic_cpu_overhead_per_pair``; the medians over runs of ``inprocess_cpu_s``,
  ``helic_cpu_s_host`` and ``helic_cpu_s_served``.
- ``inprocess_s_per_point`` / ``helic_s_per_point``: the median over runs of the mean wall per
  point; the table above them: per point, the median over runs.
- ``helic_counters``: the helic rig's counters summed over all helic runs (records retaken,
  datagrams lost, ...); a warning is printed when a helic run retook a record or lost a datagram.
- ``table_rel_diff_*``: the largest per-point table difference of any run against the first
  in-process run, over the table's largest magnitude per harmonic/DOF.
- ``load_average_start`` / ``load_average_end``: the 1-minute load average (os.getloadavg).
- For information, one in-process run with the profile's default (transient fit) before the
  pairs (also warming up): ``inprocess_default_s_per_point``, ``inprocess_default_rig_s_per_point``.

    python benchmarks/helic_overhead.py [--points N] [--repeat R]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
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
from hbtest.sweep.runner import run

PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
HELIC = ROOT / "instruments" / "helic-loopback.toml"
TABLES = ("interface_displacement", "interface_force", "voltage")  # per-point tables compared in-process vs helic
ORDER = ("in", "helic", "helic", "in")  # one pair: A B B A
CI_LEVEL = 0.9  # least coverage asked of the interval for the median


@dataclasses.dataclass
class Timed:
    """One sweep: per-point wall and rig seconds, iterations, tables, CPU seconds of this
    process and of the served process over the points, the rig's counters."""

    wall: np.ndarray
    rig_s: np.ndarray
    iterations: np.ndarray
    tables: dict
    cpu: np.ndarray
    counters: dict


def cpu_s(pid: int | None) -> float:
    """CPU seconds (user + system) of process ``pid`` so far (Linux /proc), 0 without one."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_sweep(overrides, store: Path, fit_transient: bool = True, server: int | None = None) -> Timed:
    """Run one sweep of the paper file with ``overrides`` into ``store`` and time it."""
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
    return Timed(np.diff(stamps), ds.rig_periods.values / ds.frequency.values, ds.iterations.values, tables, used,
                 counters)


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


def helic_sweep(base, tmp: Path, store: Path) -> Timed:
    """One sweep through a freshly started ``hbtest serve --protocol helic``."""
    p, (port,) = serve()
    try:
        return timed_sweep(base + [f"rig='{helic_rig_file(tmp, port)}'"], store, server=p.pid)
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)


def median_interval(x) -> tuple[float, float, float]:
    """(lower, upper, coverage): the distribution-free interval for the median of ``x``, its
    k-th smallest and k-th largest value with k the largest for which the coverage
    ``1 - 2 P(Binomial(n, 1/2) < k)`` is at least CI_LEVEL (k = 1 when none is)."""
    s, n = np.sort(np.asarray(x, float)), len(x)
    cover = lambda k: 1 - 2 * sum(math.comb(n, j) for j in range(k)) / 2**n  # noqa: E731
    k = max([k for k in range(1, n // 2 + 1) if cover(k) >= CI_LEVEL] or [1])
    return float(s[k - 1]), float(s[n - k]), cover(k)


def check(runs: dict[str, list[Timed]]) -> None:
    """Warn when the runs do not take the same iterations and rig time, or a helic run retook
    a record or lost a datagram."""
    ref = runs["in"][0]
    for r in runs["in"] + runs["helic"]:
        if not (np.array_equal(ref.iterations, r.iterations) and np.allclose(ref.rig_s, r.rig_s, rtol=1e-9)):
            print(f"warning: runs differ (iterations {ref.iterations.tolist()} vs {r.iterations.tolist()})")
    lossy = [r.counters for r in runs["helic"] if r.counters.get("retaken") or r.counters.get("lost_datagrams")]
    if lossy:
        print(f"warning: records retaken or datagrams lost in {len(lossy)} of {len(runs['helic'])} helic runs: {lossy}")


def report(runs: dict[str, list[Timed]], pairs: list[tuple[float, float]], default: Timed) -> None:
    ratio = np.array([p[0] for p in pairs])
    cpu_ratio = np.array([p[1] for p in pairs])
    w_in = np.median([r.wall for r in runs["in"]], axis=0)
    w_h = np.median([r.wall for r in runs["helic"]], axis=0)
    ref = runs["in"][0]
    print(f"{'point':>5} {'iter':>5} {'rig [s]':>8} {'in-process [s]':>15} {'helic [s]':>10} {'overhead':>9}")
    for i in range(len(w_in)):
        print(f"{i + 1:>5} {int(ref.iterations[i]):>5} {ref.rig_s[i]:>8.2f} {w_in[i]:>15.3f} {w_h[i]:>10.3f}"
              f" {w_h[i] / w_in[i] - 1:>9.3f}")
    print(f"inprocess_default_s_per_point={default.wall.mean():.4f}")
    print(f"inprocess_default_rig_s_per_point={default.rig_s.mean():.3f}")
    print(f"inprocess_s_per_point={np.median([r.wall.mean() for r in runs['in']]):.4f}")
    print(f"helic_s_per_point={np.median([r.wall.mean() for r in runs['helic']]):.4f}")
    print(f"rig_s_per_point={ref.rig_s.mean():.3f}")
    lo, hi, level = median_interval(ratio)
    print(f"helic_overhead={np.median(ratio):.4f}")
    print(f"helic_overhead_pairs={len(ratio)}")
    print(f"helic_overhead_iqr={np.percentile(ratio, 25):.4f},{np.percentile(ratio, 75):.4f}")
    print(f"helic_overhead_ci={lo:.4f},{hi:.4f}")
    print(f"helic_overhead_ci_level={level:.3f}")
    print("helic_overhead_per_pair=" + ",".join(f"{x:.4f}" for x in ratio))
    print(f"helic_cpu_overhead={np.median(cpu_ratio):.4f}")
    print("helic_cpu_overhead_per_pair=" + ",".join(f"{x:.4f}" for x in cpu_ratio))
    print(f"inprocess_cpu_s={np.median([r.cpu[0] for r in runs['in']]):.3f}")
    print(f"helic_cpu_s_host={np.median([r.cpu[0] for r in runs['helic']]):.3f}")
    print(f"helic_cpu_s_served={np.median([r.cpu[1] for r in runs['helic']]):.3f}")
    counts = {k: sum(r.counters.get(k, 0) for r in runs["helic"]) for k in runs["helic"][0].counters}
    print("helic_counters=" + ",".join(f"{k}:{v}" for k, v in counts.items()))
    for name in TABLES:  # largest difference relative to the table's largest magnitude, per harmonic/DOF
        a = ref.tables[name]
        scale = np.where(np.max(np.abs(a), axis=0, keepdims=True) > 0, np.max(np.abs(a), axis=0, keepdims=True), 1)
        worst = max(np.max(np.abs(r.tables[name] - a) / scale) for r in runs["in"] + runs["helic"])
        print(f"table_rel_diff_{name}={worst:.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=1, help="pairs (each runs in-process, helic, helic, in-process)")
    a = ap.parse_args()
    base = [f"sweep.points={a.points}", "output.raw_records=true"]
    load_start = os.getloadavg()[0]
    runs: dict[str, list[Timed]] = {"in": [], "helic": []}
    pairs = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        default = timed_sweep(base, tmp / "default.zarr")
        for r in range(a.repeat):
            block = []
            for k, kind in enumerate(ORDER):
                store = tmp / f"{kind}{r}_{k}.zarr"
                t = timed_sweep(base, store, fit_transient=False) if kind == "in" else helic_sweep(base, tmp, store)
                runs[kind].append(t)
                block.append((kind, t))
            wall = {kind: sum(t.wall.sum() for k_, t in block if k_ == kind) for kind in ("in", "helic")}
            cpu = {kind: sum(t.cpu.sum() for k_, t in block if k_ == kind) for kind in ("in", "helic")}
            pairs.append((wall["helic"] / wall["in"] - 1, cpu["helic"] / cpu["in"] - 1))
    check(runs)
    report(runs, pairs, default)
    print(f"load_average_start={load_start:.2f}")
    print(f"load_average_end={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

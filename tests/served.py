"""Helpers of the served-peer tests (not a test module): the twin served by ``hbtest serve``
as a separate process for each protocol (``box``, ``helic``, ``scpi``), rig files pointed at
its ports, the exact emulated structure to compare with, and the kill / resume scenario the
three peers share (server killed mid-sweep -> exit 3, one error line, store interrupted;
served again on the same ports -> ``hbtest resume`` completes, earlier points bit-identical)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import xarray as xr

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.rig.virtual import VirtualRig
from hbtest.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
# the pre-calibration noise (4x lower laser noise): for tests whose point is the protocol, not the noise
QUIET = ROOT / "instruments" / "virtual-cantilever-harsh-mains.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
INSTRUMENTS = ROOT / "instruments"
_ONE_PORT = re.compile(r"listening on 127\.0\.0\.1:(\d+) ")
_SCPI = re.compile(r"generator listening on 127\.0\.0\.1:(\d+), scope listening on 127\.0\.0\.1:(\d+)")
_REDPITAYA = re.compile(r"board 1 listening on 127\.0\.0\.1:(\d+), board 2 listening on 127\.0\.0\.1:(\d+)")
# protocol -> (rig file of the loopback peer, port options of `hbtest serve`, its first line)
PROTOCOLS = {
    "box": (INSTRUMENTS / "box-loopback.toml", ("--port",), _ONE_PORT),
    "helic": (INSTRUMENTS / "helic-loopback.toml", ("--port",), _ONE_PORT),
    "scpi": (INSTRUMENTS / "scpi-loopback.toml", ("--port", "--scope-port"), _SCPI),
    "redpitaya": (INSTRUMENTS / "redpitaya-loopback.toml", ("--port", "--scope-port"), _REDPITAYA),  # board 2: --scope-port
}
RESUMED = ("interface_displacement", "interface_force", "voltage", "residual_norm")


def rig_text(protocol: str, ports) -> str:
    """The loopback rig file of ``protocol`` pointed at the served ``ports``."""
    text = PROTOCOLS[protocol][0].read_text()
    if protocol == "helic":
        return (text.replace("control_port = 2350", f"control_port = {ports[0]}")
                .replace("stream_port = 2351", f"stream_port = {ports[0] + 1}"))
    defaults = (5000, 5001) if protocol == "redpitaya" else (5025, 5026)
    for default, port in zip(defaults, ports):
        text = text.replace(f"TCPIP0::127.0.0.1::{default}::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET")
    return text


def without_identify(text: str) -> str:
    """A rig file's text without its ``[identify]`` table (up to the blank line after it): a
    hardware kind then offers no modes and the point loop settles window by window."""
    head, sep, rest = text.partition("\n[identify]\n")
    return head + "\n" + rest.split("\n\n", 1)[1] if sep else text


@dataclass
class Served:
    """``hbtest serve --protocol <protocol>`` of the twin, a separate process."""

    protocol: str
    process: subprocess.Popen
    ports: tuple[int, ...]

    @property
    def port(self) -> int:
        return self.ports[0]

    def rig_file(self, tmp_path: Path, edit: Callable[[str], str] = lambda t: t, name: str = "") -> Path:
        """A rig file of this peer's ports (``edit``: changes to its text)."""
        path = tmp_path / (name or f"{self.protocol}.toml")
        path.write_text(edit(rig_text(self.protocol, self.ports)))
        return path

    def stop(self, sig=signal.SIGTERM):
        """Stop by ``sig`` (killed after 20 s): the exit code."""
        p = self.process
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
        return p.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def serve(protocol: str, ports=None, *extra: str, twin: Path = TWIN) -> Served:
    """Serve ``twin`` over ``protocol`` on ``ports`` (default: free ports); ``extra``: more
    options of ``hbtest serve``."""
    _, options, line = PROTOCOLS[protocol]
    ports = ports or (0,) * len(options)
    args = [sys.executable, "-m", "hbtest.cli", "serve", "--protocol", protocol, "--rig", str(twin), *extra]
    for option, port in zip(options, ports):
        args += [option, str(port)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    assert p.stdout is not None
    first = p.stdout.readline()
    m = line.search(first)
    if not m:
        p.kill()
        p.wait()
        raise AssertionError(first + p.stdout.read())
    return Served(protocol, p, tuple(int(x) for x in m.groups()))


def exact_interface(sets, frequencies, twin: Path = TWIN) -> np.ndarray:
    """Exact interface displacement (points, [u, theta]) of the paper sweep under ``sets``."""
    cfg = load_sweep(PAPER, sets)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    rig = VirtualRig(load_rig(twin))
    return np.stack([rig.emulated_interface_response(ns, F, f, [1])[:, 0] for f in frequencies])


def frf_error(ds, sets, twin: Path = TWIN) -> np.ndarray:
    """Relative error of the measured fundamental against :func:`exact_interface`."""
    exact = exact_interface(sets, ds.frequency.values, twin)
    measured = ds.interface_displacement.values[:, :, list(ds.harmonic.values).index(1)]
    return np.abs(measured - exact) / np.abs(exact)


def sweep(rig: Path, store: Path, sets, sweep_file: Path = PAPER):
    """``hbtest sweep`` (in this process) on ``rig``: must exit 0; the store, loaded."""
    args = ["sweep", str(sweep_file), "--store", str(store), "--no-plot", "--quiet", "--set", f"rig='{rig}'"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return xr.open_zarr(store, consolidated=False).load()


def served_sweep(tmp_path: Path, protocol: str, sets, twin: Path = TWIN, serve_sets=()):
    """The paper sweep under ``sets`` through a freshly served peer (stopped cleanly after);
    ``serve_sets``: ``--set`` overrides of the served twin."""
    served = serve(protocol, None, *[a for s in serve_sets for a in ("--set", s)], twin=twin)
    try:
        ds = sweep(served.rig_file(tmp_path), tmp_path / f"{protocol}.zarr", sets)
    finally:
        assert served.stop() == 0
    return ds


def _wait_for_points(sweep_process, store: Path, points: int, deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        time.sleep(0.1)
        if store.exists():
            try:
                if RunStore.open(store).done().sum() >= points:
                    return
            except Exception:  # store still being created
                pass
        assert sweep_process.poll() is None, sweep_process.communicate()
    raise AssertionError(f"{points} points not finished within {deadline_s} s")


def kill_then_resume(tmp_path: Path, protocol: str, sets, *, points: int, kill_after: int, error: str,
                     edit: Callable[[str], str] = lambda t: t, deadline_s: float = 120, twin: Path = TWIN) -> None:
    """Serve, sweep ``points`` points (a separate process), SIGKILL the server once
    ``kill_after`` points are done: the sweep exits 3 with one line matching ``error`` (a
    regex; ``{port}`` is the first served port), the store is ``interrupted``; served again on
    the same ports, ``hbtest resume`` completes it and the finished points are bit-identical."""
    served = serve(protocol, twin=twin)
    store = tmp_path / "killed.zarr"
    rig = served.rig_file(tmp_path, edit)
    args = [sys.executable, "-m", "hbtest.cli", "sweep", str(PAPER), "--store", str(store), "--no-plot",
            "--set", f"sweep.points={points}", "--set", f"rig='{rig}'"]
    for s in sets:
        args += ["--set", s]
    run = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _wait_for_points(run, store, kill_after, deadline_s)
        served.kill()
        out, err = run.communicate(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        served.kill()
    assert run.returncode == 3, (out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(error.format(port=served.port), lines[0]), lines[0]
    before = xr.open_zarr(store, consolidated=False).load()
    assert before.attrs["status"] == "interrupted"
    finished = np.flatnonzero(before.done.values)
    assert kill_after <= finished.size < points and bool(before.converged.values[finished].all())
    again = serve(protocol, served.ports, twin=twin)
    try:
        assert again.ports == served.ports
        assert main(["resume", str(store), "--no-plot", "--quiet"]) == 0
    finally:
        assert again.stop(signal.SIGINT) == 0
    after = xr.open_zarr(store, consolidated=False).load()
    assert bool(after.done.all()) and bool(after.converged.all()) and after.attrs["status"] == "completed"
    for name in RESUMED:
        np.testing.assert_array_equal(after[name].values[finished], before[name].values[finished])

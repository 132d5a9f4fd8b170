"""The acceptance of the real-rig path: the reference sweep through `hbtest serve` over a
loopback socket and pyvisa converges at every point and matches the twin's exact emulated
structure within 1 %; a server killed mid-sweep fails the run cleanly (one line naming the
box, non-zero exit, finished points kept) and `hbtest resume` completes it once the box is
back, the earlier points untouched."""

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.store import RunStore
from hbtest.rig.virtual import VirtualRig

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"


def _serve(port=0):
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "serve", "--rig", str(TWIN), "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = p.stdout.readline()
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", first)
    if not m:
        p.kill()
        p.wait()
        raise AssertionError(first + p.stdout.read())
    return p, int(m.group(1))


def _stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    return p.returncode


def _rig_copy(tmp_path, port, *extra):
    text = BOX.read_text().replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET")
    for line in extra:
        text = text.replace("[box.channel_limits]", f"{line}\n\n[box.channel_limits]")
    path = tmp_path / "box.toml"
    path.write_text(text)
    return path


def _exact_interface(sweep_overrides, frequencies):
    cfg = load_sweep(PAPER, sweep_overrides)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    twin = VirtualRig(load_rig(TWIN))
    return np.stack([twin.emulated_interface_response(ns, F, f, [1])[:, 0] for f in frequencies])


def test_reference_sweep_through_hbtest_serve_matches_the_exact_structure(tmp_path):
    server, port = _serve()
    try:
        rig = _rig_copy(tmp_path, port)
        store = tmp_path / "box.zarr"
        sets = ["sweep.points=5"]
        args = ["sweep", str(PAPER), "--store", str(store), "--no-plot", "--quiet", "--set", f"rig='{rig}'"]
        for s in sets:
            args += ["--set", s]
        assert main(args) == 0
    finally:
        assert _stop(server) == 0
    ds = xr.open_zarr(store, consolidated=False).load()
    assert ds.attrs["status"] == "completed" and bool(ds.done.all()) and bool(ds.converged.all())
    assert ds.attrs["rig_identity"].startswith("box-loopback")
    f = ds.frequency.values
    exact = _exact_interface(sets, f)  # (points, [u, theta])
    measured = ds.interface_displacement.values[:, :, list(ds.harmonic.values).index(1)]
    err = np.abs(measured - exact) / np.abs(exact)
    assert err.max() < 0.01, err


def test_server_killed_mid_sweep_fails_cleanly_and_resume_completes(tmp_path):
    server, port = _serve()
    store = tmp_path / "killed.zarr"
    rig = _rig_copy(tmp_path, port)
    box_lines = rig.read_text().replace("timeout_s = 5.0", "timeout_s = 1.0").replace("retries = 2 ", "retries = 1 ")
    rig.write_text(box_lines)
    args = [sys.executable, "-m", "hbtest.cli", "sweep", str(PAPER), "--store", str(store), "--no-plot",
            "--set", "sweep.points=5", "--set", f"rig='{rig}'"]
    sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if store.exists():
                try:
                    if RunStore.open(store).done().sum() >= 2:
                        break
                except Exception:  # store still being created
                    pass
            assert sweep.poll() is None, sweep.communicate()
        server.send_signal(signal.SIGKILL)
        server.wait()
        out, err = sweep.communicate(timeout=60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        if server.poll() is None:
            server.kill()
            server.wait()
    assert sweep.returncode != 0
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("hbtest: error: box 'box-loopback") and f"TCPIP0::127.0.0.1::{port}::SOCKET" in lines[0]
    before = xr.open_zarr(store, consolidated=False).load()
    finished = np.flatnonzero(before.done.values)
    assert 2 <= finished.size < 5 and bool(before.converged.values[finished].all())
    # the box is back on the same port (the store keeps the rig file); resume finishes the run
    server, port2 = _serve(port)
    try:
        assert port2 == port
        assert main(["resume", str(store), "--no-plot", "--quiet"]) == 0
    finally:
        assert _stop(server, signal.SIGINT) == 0
    after = xr.open_zarr(store, consolidated=False).load()
    assert bool(after.done.all()) and bool(after.converged.all()) and after.attrs["status"] == "completed"
    for name in ("interface_displacement", "interface_force", "voltage", "residual_norm", "history_residual_norm"):
        np.testing.assert_array_equal(after[name].values[finished], before[name].values[finished])


def test_an_instrument_error_marks_the_store_interrupted_with_the_reason(tmp_path):
    from hbtest.errors import InstrumentError
    from hbtest.rig.box.server import BoxServer
    from hbtest.sweep import run

    # the box answers the opening and the first point, then goes away
    srv = BoxServer(load_rig(TWIN), port=0)
    srv.start()
    rig = _rig_copy(tmp_path, srv.port)
    rig.write_text(rig.read_text().replace("timeout_s = 5.0", "timeout_s = 0.5").replace("retries = 2 ", "retries = 0 "))
    cfg = load_sweep(PAPER, ["sweep.points=3", f"rig='{rig}'"])
    def progress(event):
        from hbtest.events import PointFinished

        if isinstance(event, PointFinished) and event.n == 1:
            srv.stop()

    with pytest.raises(InstrumentError):
        run(cfg, tmp_path / "s.zarr", progress=progress, plot=False)
    srv.stop()
    attrs = RunStore.open(tmp_path / "s.zarr").attrs
    assert attrs["status"] == "interrupted"
    assert attrs["stop_cause"] == "rig"
    assert "TCPIP0::127.0.0.1" in str(attrs.get("stop_message", ""))


@pytest.mark.parametrize("on_trip, exit_code, status", [("stop", 3, "interrupted"), ("continue", 1, "completed")])
def test_a_trip_on_the_box_ends_the_point_and_is_in_the_store(tmp_path, capsys, on_trip, exit_code, status):
    """A strain window far below the response trips the box at the first point: outputs are
    zeroed by the box, the point is recorded with stop_reason 'trip', and the sweep stops
    (exit 3, store interrupted and resumable) or clears the trip and goes on (exit 1), as
    sweep.on_trip says."""
    server, port = _serve()
    try:
        text = _rig_copy(tmp_path, port).read_text().replace("g1_microstrain = 190.0", "g1_microstrain = 2.0")
        rig = tmp_path / "tripping.toml"
        rig.write_text(text)
        store = tmp_path / "t.zarr"
        args = ["sweep", str(PAPER), "--set", f"rig='{rig}'", "--set", "sweep.start_hz=18.0", "--set", "sweep.stop_hz=18.4",
                "--set", "sweep.points=2", "--set", f"sweep.on_trip={on_trip}", "--store", str(store), "--no-plot"]
        rc = main(args)
        out = capsys.readouterr().out
    finally:
        _stop(server)
    assert rc == exit_code, out
    ds = xr.open_zarr(store, consolidated=False).load()
    assert ds.attrs["status"] == status
    done = ds.done.values
    assert done[0] and ds.stop_reason.values[0] == "trip" and not ds.converged.values[0]
    assert "trip" in str(ds.message.values[0])
    if on_trip == "stop":
        assert not done[1] and ds.attrs["stop_cause"] == "rig" and "on_trip" in ds.attrs["stop_message"]
    else:
        assert done.all() and list(ds.stop_reason.values) == ["trip", "trip"]
    assert "trip" in out.splitlines()[-1]

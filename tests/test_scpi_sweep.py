"""Whole sweeps through the ``scpi`` kind: the simulated 33500B + InfiniiVision
(``hbtest serve --protocol scpi``, a separate process, the twin as the plant on the wall clock)
over loopback sockets, driven by ``instruments/scpi-loopback.toml``. As tests/test_box_sweep.py
does for the box: the reference sweep converges at every point and matches the exact emulated
structure within 1 %; instruments killed mid-sweep fail the run cleanly (exit 3, store
interrupted) and ``hbtest resume`` completes it, the earlier points untouched.

The bench runs in real time (a record of n periods takes n periods), so these sweeps take
minutes: the full ones are ``slow``; the default run keeps a two-point sweep."""

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
from hbtest.rig.virtual import VirtualRig
from hbtest.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
LOOPBACK = ROOT / "instruments" / "scpi-loopback.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
LINE = re.compile(r"generator listening on 127\.0\.0\.1:(\d+), scope listening on 127\.0\.0\.1:(\d+)")


def _serve(gen_port=0, scope_port=0):
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "serve", "--protocol", "scpi", "--rig", str(TWIN),
                          "--port", str(gen_port), "--scope-port", str(scope_port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = p.stdout.readline()
    m = LINE.search(first)
    if not m:
        p.kill()
        p.wait()
        raise AssertionError(first + p.stdout.read())
    return p, int(m.group(1)), int(m.group(2))


def _stop(p, sig=signal.SIGTERM):
    if p.poll() is None:
        p.send_signal(sig)
        try:
            p.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
    return p.returncode


def _rig_copy(tmp_path, gen_port, scope_port):
    text = (LOOPBACK.read_text()
            .replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{gen_port}::SOCKET")
            .replace("TCPIP0::127.0.0.1::5026::SOCKET", f"TCPIP0::127.0.0.1::{scope_port}::SOCKET"))
    path = tmp_path / "scpi.toml"
    path.write_text(text)
    return path


def _exact_interface(sets, frequencies):
    cfg = load_sweep(PAPER, sets)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    twin = VirtualRig(load_rig(TWIN))
    return np.stack([twin.emulated_interface_response(ns, F, f, [1])[:, 0] for f in frequencies])


def _sweep(tmp_path, sets):
    server, gp, sp = _serve()
    try:
        rig = _rig_copy(tmp_path, gp, sp)
        store = tmp_path / "scpi.zarr"
        args = ["sweep", str(PAPER), "--store", str(store), "--no-plot", "--quiet", "--set", f"rig='{rig}'"]
        for s in sets:
            args += ["--set", s]
        assert main(args) == 0
    finally:
        assert _stop(server) == 0
    return xr.open_zarr(store, consolidated=False).load()


def _frf_error(ds, sets):
    f = ds.frequency.values
    exact = _exact_interface(sets, f)
    measured = ds.interface_displacement.values[:, :, list(ds.harmonic.values).index(1)]
    return np.abs(measured - exact) / np.abs(exact)


# looser settling (0.05 mm) and shorter averaging than the paper's, to keep the default run ~1 min
TWO_POINTS = ["sweep.points=2", "sweep.start_hz=16.0", "sweep.stop_hz=16.5", "test.transient_tolerance_mm=0.05",
              "test.averaging_periods=10"]


def test_two_points_through_the_simulated_instruments_match_the_exact_structure(tmp_path):
    ds = _sweep(tmp_path, TWO_POINTS)
    assert ds.attrs["status"] == "completed" and bool(ds.done.all()) and bool(ds.converged.all())
    assert ds.attrs["rig_identity"].startswith("scpi-loopback")
    err = _frf_error(ds, TWO_POINTS)
    assert err.max() < 0.01, err


@pytest.mark.slow
def test_paper_sweep_through_the_simulated_instruments_matches_the_exact_structure(tmp_path, monkeypatch):
    """5 points: converged, FRF within 1 % of the exact structure, and rig periods per point
    within 1.5x of the in-process run of the same algorithm. The scpi kind offers no modes()
    (nothing tells a lab's rig its eigenvalues), so the point loop settles window by window
    instead of fitting through the transient: the in-process baseline runs the twin the same
    way (its modes() hidden). Against the in-process run *with* the twin's exact modes the scpi
    path needs 10-30x the rig periods."""
    sets = ["sweep.points=5"]
    ds = _sweep(tmp_path, sets)
    assert bool(ds.done.all()) and bool(ds.converged.all())
    err = _frf_error(ds, sets)
    assert err.max() < 0.01, err
    monkeypatch.delattr(VirtualRig, "modes")
    ref = tmp_path / "inprocess.zarr"
    assert main(["sweep", str(PAPER), "--store", str(ref), "--no-plot", "--quiet", "--set", "sweep.points=5"]) == 0
    base = xr.open_zarr(ref, consolidated=False).load()
    ratio = ds.rig_periods.values / base.rig_periods.values
    # measured: 1.21-1.57 per point, 1.28 over the sweep (scope dead time ~0.1 s a record)
    assert ds.rig_periods.values.sum() <= 1.5 * base.rig_periods.values.sum() and ratio.max() <= 2.0, ratio


@pytest.mark.slow
def test_instruments_killed_mid_sweep_fail_cleanly_and_resume_completes(tmp_path):
    server, gp, sp = _serve()
    store = tmp_path / "killed.zarr"
    rig = _rig_copy(tmp_path, gp, sp)
    args = [sys.executable, "-m", "hbtest.cli", "sweep", str(PAPER), "--store", str(store), "--no-plot",
            "--set", "sweep.points=3", "--set", "sweep.start_hz=16.0", "--set", "sweep.stop_hz=16.6", "--set", f"rig='{rig}'"]
    sweep = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 900
        while time.monotonic() < deadline:
            time.sleep(0.2)
            if store.exists():
                try:
                    if RunStore.open(store).done().sum() >= 1:
                        break
                except Exception:  # store still being created
                    pass
            assert sweep.poll() is None, sweep.communicate()
        server.send_signal(signal.SIGKILL)
        server.wait()
        out, err = sweep.communicate(timeout=120)
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()
        if server.poll() is None:
            server.kill()
            server.wait()
    assert sweep.returncode == 3, (out, err)
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert re.match(r"hbtest: error: (generator|digitiser) TCPIP0::127\.0\.0\.1::\d+::SOCKET", lines[0]), lines[0]
    before = xr.open_zarr(store, consolidated=False).load()
    assert before.attrs["status"] == "interrupted"
    finished = np.flatnonzero(before.done.values)
    assert 1 <= finished.size < 3 and bool(before.converged.values[finished].all())
    server, gp2, sp2 = _serve(gp, sp)  # the bench is back on the same ports (the store keeps the rig file)
    try:
        assert main(["resume", str(store), "--no-plot", "--quiet"]) == 0
    finally:
        assert _stop(server, signal.SIGINT) == 0
    after = xr.open_zarr(store, consolidated=False).load()
    assert bool(after.done.all()) and bool(after.converged.all()) and after.attrs["status"] == "completed"
    for name in ("interface_displacement", "interface_force", "voltage", "residual_norm"):
        np.testing.assert_array_equal(after[name].values[finished], before[name].values[finished])

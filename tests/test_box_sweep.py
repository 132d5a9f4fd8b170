"""The acceptance of the real-rig path: the reference sweep through `hbtest serve` over a
loopback socket and pyvisa converges at every point and matches the twin's exact emulated
structure within 1 %; a server killed mid-sweep fails the run cleanly (one line naming the
box, exit 3, finished points kept) and `hbtest resume` completes it once the box is
back, the earlier points untouched (tests/served.py)."""

import pytest
import xarray as xr
from served import PAPER, QUIET, TWIN, frf_error, kill_then_resume, rig_text, serve, served_sweep

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.store import RunStore


def _rig_copy(tmp_path, port, *extra):
    text = rig_text("box", (port,))
    for line in extra:
        text = text.replace("[box.channel_limits]", f"{line}\n\n[box.channel_limits]")
    path = tmp_path / "box.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("twin, points", [(QUIET, 3), pytest.param(TWIN, 5, marks=pytest.mark.slow)])
def test_reference_sweep_through_hbtest_serve_matches_the_exact_structure(tmp_path, twin, points):
    """The protocol end to end: on the quiet (harsh-mains) twin in the default run, the
    lab-calibrated one in the slow run."""
    sets = [f"sweep.points={points}"]
    ds = served_sweep(tmp_path, "box", sets, twin)
    assert ds.attrs["status"] == "completed" and bool(ds.done.all()) and bool(ds.converged.all())
    assert ds.attrs["rig_identity"].startswith("box-loopback")
    err = frf_error(ds, sets, twin)
    assert err.max() < 0.01, err


@pytest.mark.slow
def test_server_killed_mid_sweep_fails_cleanly_and_resume_completes(tmp_path):
    kill_then_resume(tmp_path, "box", [], points=5, kill_after=2,
                     error=r"hbtest: error: box 'box-loopback.*TCPIP0::127\.0\.0\.1::{port}::SOCKET",
                     edit=lambda t: t.replace("timeout_s = 5.0", "timeout_s = 1.0").replace("retries = 2 ", "retries = 1 "))


def test_an_instrument_error_marks_the_store_interrupted_with_the_reason(tmp_path):
    from hbtest.errors import InstrumentError
    from hbtest.serve.box import BoxServer
    from hbtest.sweep.runner import run

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
    served = serve("box")
    try:
        text = _rig_copy(tmp_path, served.port).read_text().replace("g1_microstrain = 190.0", "g1_microstrain = 2.0")
        rig = tmp_path / "tripping.toml"
        rig.write_text(text)
        store = tmp_path / "t.zarr"
        args = ["sweep", str(PAPER), "--set", f"rig='{rig}'", "--set", "sweep.start_hz=18.0", "--set", "sweep.stop_hz=18.4",
                "--set", "sweep.points=2", "--set", f"sweep.on_trip={on_trip}", "--store", str(store), "--no-plot"]
        rc = main(args)
        out = capsys.readouterr().out
    finally:
        served.stop()
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

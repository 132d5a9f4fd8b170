"""The helic path end to end over real loopback sockets: the paper sweep through
`hbtest serve --protocol helic` (the twin as a HELIC-DAQ v3 device) and the `helic` rig kind
converges at every point within 1 % of the exact structure; a server killed mid-sweep fails
the run cleanly (exit 3, store interrupted) and `hbtest resume` completes it with the earlier
points untouched (tests/served.py); a lost datagram or a device drop inside a record makes the record be taken
again (counted); a trip of the device's gate ends the point with stop_reason trip."""

import dataclasses

import numpy as np
import pytest
import xarray as xr
from served import (
    INSTRUMENTS,
    PAPER,
    QUIET,
    TWIN,
    frf_error,
    kill_then_resume,
    rig_text,
    served_sweep,
    without_identify,
)

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.rig import open_rig
from hbtest.serve.helic import HelicDevice, HelicServer
from hbtest.store import RunStore


def _rig_copy(tmp_path, port, name="helic.toml", edit=lambda t: t):
    path = tmp_path / name
    path.write_text(edit(rig_text("helic", (port,))))
    return path


@pytest.mark.parametrize("twin, points", [(QUIET, 3), pytest.param(TWIN, 7, marks=pytest.mark.slow)])
def test_paper_sweep_through_hbtest_serve_helic_matches_the_exact_structure(tmp_path, twin, points):
    """The protocol end to end: on the quiet (harsh-mains) twin in the default run, the
    lab-calibrated one over the acceptance's 7 points in the slow run."""
    sets = [f"sweep.points={points}"]
    ds = served_sweep(tmp_path, "helic", sets, twin)
    assert ds.attrs["status"] == "completed" and bool(ds.done.all()) and bool(ds.converged.all())
    assert ds.attrs["rig_identity"].startswith("helic-loopback")
    err = frf_error(ds, sets, twin)
    assert err.max() < 0.01, err


@pytest.mark.slow
def test_server_killed_mid_sweep_fails_cleanly_and_resume_completes(tmp_path):
    kill_then_resume(tmp_path, "helic", [], points=5, kill_after=2,
                     error=r"hbtest: error: helic 'helic-loopback.*127\.0\.0\.1:{port}",
                     edit=lambda t: t.replace("timeout_s = 5.0", "timeout_s = 1.0"))


def test_a_lost_datagram_or_a_device_drop_makes_the_record_be_taken_again(tmp_path):
    with HelicServer(load_rig(TWIN), port=0) as srv:
        with open_rig(load_rig(_rig_copy(tmp_path, srv.port))) as rig:
            rig.set_demand(17.0, np.array([[0.5], [0.2j]]), [1])
            clean = rig.acquire(10)
            srv.device.faults.lose_packet = 3
            a = rig.acquire(10)
            assert rig.counters == dict(retaken=1, lost_datagrams=1, dropped_records=0, stale_records=0)
            srv.device.faults.ring_drops = 5
            b = rig.acquire(10)
            assert rig.counters == dict(retaken=2, lost_datagrams=1, dropped_records=5, stale_records=0)
    for x in (a, b):  # whole, contiguous records of the asked length
        assert x.t.size == clean.t.size and np.allclose(np.diff(x.t), 1 / 5000.0, rtol=1e-4)


def test_a_trip_of_the_device_gate_ends_the_point_with_stop_reason_trip(tmp_path, capsys):
    """A strain level far below the response trips the device's gate at the first point:
    stop_reason trip, the sweep stops (exit 3, store interrupted, resumable); a record that
    also lost a datagram is not retaken (the trip ends the point first) but the loss is counted."""
    import json

    with HelicServer(load_rig(TWIN), port=0) as srv:
        srv.device.faults.lose_packet = 2  # in the first record of the run
        rig = _rig_copy(tmp_path, srv.port)
        rig.write_text(rig.read_text() + "\n[helic.channel_limits]\ng1_microstrain = 0.5\n")  # below the calibrated gauge noise peaks: the first record trips
        store = tmp_path / "t.zarr"
        rc = main(["sweep", str(PAPER), "--set", f"rig='{rig}'", "--set", "sweep.start_hz=18.0",
                   "--set", "sweep.stop_hz=18.4",
                   "--set", "sweep.points=2", "--set", "sweep.on_trip=stop", "--store", str(store), "--no-plot"])
        capsys.readouterr()
        assert srv.device.gate.tripped and not srv.device.gate.armed
    assert rc == 3
    ds = xr.open_zarr(store, consolidated=False).load()
    assert ds.attrs["status"] == "interrupted"
    assert ds.done.values[0] and ds.stop_reason.values[0] == "trip" and not ds.converged.values[0]
    assert "tripped" in str(ds.message.values[0])
    counters = json.loads(ds.attrs["rig_counters"])
    assert counters["retaken"] == 0 and counters["lost_datagrams"] == 1


def test_retaken_records_are_counted_in_the_store(tmp_path):
    import json

    with HelicServer(load_rig(TWIN), port=0) as srv:
        srv.device.faults.lose_packet = 2  # in the first record of the run
        srv.device.faults.ring_drops = 3
        rig = _rig_copy(tmp_path, srv.port)
        store = tmp_path / "c.zarr"
        assert main(["sweep", str(PAPER), "--set", f"rig='{rig}'", "--set", "sweep.points=2",
                     "--set", "sweep.stop_hz=16.5",
                     "--store", str(store), "--no-plot", "--quiet"]) == 0
    counters = json.loads(RunStore.open(store).attrs["rig_counters"])
    assert counters == {"retaken": 1, "lost_datagrams": 1, "dropped_records": 3, "stale_records": 0}


def test_the_loopback_rig_file_rejects_the_served_twins_mains_and_the_loop_fits_raw_records():
    """The helic rig hands the point loop raw records (not DeviceAveraging), so the loop tracks
    the measured mains as on the twin, and the loopback rig file rejects as many mains multiples
    as the served twin carries (the default 3 leaves its 200/250 Hz lines in every fit)."""
    from hbtest.rig.capabilities import DeviceAveraging
    from hbtest.rig.helic.client import HelicRig

    twin, helic = load_rig(TWIN).sensors, load_rig(INSTRUMENTS / "helic-loopback.toml").sensors
    assert (helic.mains_hz, helic.mains_multiples) == (twin.mains_hz, twin.mains_multiples) == (50.0, 5)
    assert not issubclass(HelicRig, DeviceAveraging)


@pytest.mark.parametrize("points", [2, pytest.param(7, marks=pytest.mark.slow)])
def test_per_point_tables_equal_the_in_process_run_on_the_same_measurement_path(tmp_path, monkeypatch, points):
    """The same seed in-process (the hbtest profile without the transient fit, which needs the
    twin's modes no hardware rig offers) and through the helic path: the same iterations, stop
    reasons and rig periods at every point; the values agree to the f32 wire (the coefficients
    the device holds are f32, which moves some samples by one ADC step). The served twin's
    records simulated ahead change nothing: without them the tables are the same bit for bit.
    Two points in the
    default run (16 and 19 Hz: a fit at the nominal mains took 15 iterations at 16 Hz, 2 here)."""
    from hbtest.point.profiles import HbtestProfile
    from hbtest.sweep.runner import run

    rule = HbtestProfile.window_rule
    monkeypatch.setattr(HbtestProfile, "window_rule", lambda self, s: dataclasses.replace(rule(self, s), fit_transient=False))
    sets = [f"sweep.points={points}"]
    a = run(load_sweep(PAPER, sets), tmp_path / "in.zarr", plot=False)
    with HelicServer(load_rig(TWIN), port=0) as srv:
        rig = _rig_copy(tmp_path, srv.port, edit=without_identify)  # no modes: it settles, as the in-process run here
        b = run(load_sweep(PAPER, sets + [f"rig='{rig}'"]), tmp_path / "helic.zarr", plot=False)
    assert srv.device.ahead_counts["taken"] > 0  # records simulated ahead were served
    monkeypatch.setattr(HelicDevice, "look_ahead", lambda self: None)
    with HelicServer(load_rig(TWIN), port=0) as srv:  # nothing simulated ahead: the same tables, bit for bit
        rig = _rig_copy(tmp_path, srv.port, "helic-plain.toml", edit=without_identify)
        c = run(load_sweep(PAPER, sets + [f"rig='{rig}'"]), tmp_path / "plain.zarr", plot=False)
    assert srv.device.ahead_counts == dict(taken=0, discarded=0)
    for name in ("interface_displacement", "interface_force", "voltage", "rig_periods"):
        np.testing.assert_array_equal(b[name].values, c[name].values)
    np.testing.assert_array_equal(a.iterations.values, b.iterations.values)
    np.testing.assert_array_equal(a.stop_reason.values, b.stop_reason.values)
    np.testing.assert_allclose(b.rig_periods.values, a.rig_periods.values, rtol=1e-12)
    for name in ("interface_displacement", "interface_force", "voltage"):
        np.testing.assert_allclose(b[name].values, a[name].values, rtol=5e-4)

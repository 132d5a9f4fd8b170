"""The start of a point on a rig whose channel limits trip: a start demand the rig model
predicts near a channel window is not sent (:mod:`hbtest.point.start_guard`). End to end
through ``hbtest serve`` over loopback: the paper sweep up to 19 Hz, where the start
extrapolated from 18.5 Hz drove l1 to 9.2-9.35 V against the 9 V window (a trip that ended
the sweep), converges at every point with no trip."""

import signal
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from box_hosts import serve

from hbtest.cli import main
from hbtest.point.start_guard import predicted_channel_peaks

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"


def _sweep_through_box(tmp_path, sets):
    server, port = serve()
    try:
        rig = tmp_path / "box.toml"
        rig.write_text(BOX.read_text().replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET"))
        store = tmp_path / "s.zarr"
        args = ["sweep", str(PAPER), "--store", str(store), "--no-plot", "--quiet", "--set", f"rig='{rig}'"]
        for s in sets:
            args += ["--set", s]
        code = main(args)
    finally:
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=20)
    return code, xr.open_zarr(store, consolidated=False).load()


def _check(code, ds):
    assert code == 0, ds.attrs.get("stop_message")
    assert ds.attrs["status"] == "completed" and bool(ds.converged.all())
    assert not any("trip" in str(r) for r in ds.stop_reason.values)
    assert "started from the previous point's demand" in str(ds.message.values[-1])


def test_a_start_predicted_beyond_a_channel_window_is_not_sent(tmp_path):
    _check(*_sweep_through_box(tmp_path, ["sweep.points=3", "sweep.start_hz=18", "sweep.stop_hz=19"]))


@pytest.mark.slow
def test_the_seven_point_paper_sweep_through_the_box_converges_with_no_trip(tmp_path):
    _check(*_sweep_through_box(tmp_path, ["sweep.points=7"]))


def test_predicted_channel_peaks_follow_the_layout():
    from hbtest.config import load_rig

    layout = load_rig(BOX).sensors
    U = np.array([[1e-3 + 1e-3j], [0.01]])  # u [m], theta [rad]
    F = np.array([[0.0], [0.0]])
    peaks = predicted_channel_peaks(layout, U, F, 17.0, [1])
    l2 = next(c for c in layout.channels if c.name == "l2")
    want = abs(1e-3 + 1e-3j + l2.position * 0.01) / l2.scale  # laser: u + p theta, raw = physical / scale
    assert peaks["l2"] == pytest.approx((-want, want), rel=1e-12)
    assert peaks["g1"] == (0.0, 0.0)

"""The helic rig against the served twin over loopback, request by request: the records are
the in-process twin's (bit for bit, for the f32 demand the device holds); discovery and error
frames give one line naming the device; limits are enforced before anything is written; the
device disarms when the host goes away."""

import re
import struct

import numpy as np
import pytest
from served import TWIN
from test_helic_sweep import _rig_copy

from hbtest.config import load_rig
from hbtest.errors import ConfigError, InstrumentError, LimitExceeded
from hbtest.rig import open_rig
from hbtest.rig.helic import codec as c
from hbtest.rig.helic.client import StreamReceiver, _sample_indices
from hbtest.rig.virtual import VirtualRig
from hbtest.serve.helic import HelicServer, burst_datagrams


@pytest.fixture
def served(tmp_path):
    with HelicServer(load_rig(TWIN), port=0) as srv:
        yield srv, _rig_copy(tmp_path, srv.port)


def test_records_are_the_in_process_twins_for_the_f32_demand(served):
    srv, path = served
    V = np.array([[1.0 - 0.5j], [0.4 + 0.1j]])
    V32 = V.real.astype(np.float32) + 1j * V.imag.astype(np.float32)
    twin = VirtualRig(load_rig(TWIN))
    with open_rig(load_rig(path)) as rig:
        rig.set_demand(16.5, V, [1])
        twin.set_demand(16.5, V32, [1])
        rig.wait(3)
        twin.wait(3)
        a, b = rig.acquire(30), twin.acquire(30)
        assert rig.elapsed_s == pytest.approx(twin.elapsed_s, abs=1e-12)
    for k in a.data:
        np.testing.assert_array_equal(a.data[k], b.data[k].astype(np.float32))
    np.testing.assert_allclose(a.t, b.t, rtol=0, atol=1e-10)


def test_records_simulated_ahead_are_the_in_process_twins_whether_taken_or_discarded(served):
    """After the first record at a new demand the served twin simulates the next record of the
    stream ahead, on a copy of its twin: a StreamStart of the same stream with nothing queued
    takes it (twice here); another count, a wait, or a demand written in between discards it
    (three times). Every record is the in-process twin's, bit for bit (f32), either way."""
    srv, path = served
    V = np.array([[1.0 - 0.5j], [0.4 + 0.1j]], np.complex64)
    W = V + np.array([[0], [0.25j]], np.complex64)
    twin = VirtualRig(load_rig(TWIN))
    steps = [("demand", V), ("acquire", 10), ("acquire", 10),  # taken
             ("demand", W), ("acquire", 10), ("acquire", 7),  # another count: discarded
             ("demand", V), ("acquire", 7), ("wait", 3), ("acquire", 7),  # a wait: discarded
             ("demand", W), ("acquire", 7), ("demand", V), ("acquire", 7), ("acquire", 7)]  # a demand: discarded; taken
    with open_rig(load_rig(path)) as rig:
        for what, x in steps:
            if what == "demand":
                rig.set_demand(16.5, x, [1])
                twin.set_demand(16.5, x, [1])
            elif what == "wait":
                rig.wait(x)
                twin.wait(x)
            else:
                a, b = rig.acquire(x), twin.acquire(x)
                for k in a.data:
                    np.testing.assert_array_equal(a.data[k], b.data[k].astype(np.float32))
                np.testing.assert_allclose(a.t, b.t, rtol=0, atol=1e-10)
            assert rig.elapsed_s == pytest.approx(twin.elapsed_s, abs=1e-12)
    assert srv.device.ahead_counts == dict(taken=2, discarded=3)


def test_a_coefficient_set_the_device_holds_is_not_written_again(served):
    """Per set_demand the SetPar transcript: everything at first; then only the changed set;
    for an unchanged demand one set (a demand write always reaches the device and ramps, as
    the in-process twin's does): the records stay the in-process twin's."""
    srv, path = served
    names = [p.d.name for p in srv.device.params]
    log: list[str] = []
    handle = srv.device.handle

    def logged(msg_type, payload):
        if msg_type == c.MsgType.SET_PAR:
            log.append(names[struct.unpack_from("<H", payload)[0]])
        return handle(msg_type, payload)

    srv.device.handle = logged
    V = np.array([[1.0 - 0.5j], [0.4 + 0.1j]], np.complex64)
    W = V + np.array([[0], [0.25j]], np.complex64)
    twin = VirtualRig(load_rig(TWIN))
    transcripts = []
    with open_rig(load_rig(path)) as rig:
        for U in (V, W, W):
            log.clear()
            rig.set_demand(16.5, U, [1])
            twin.set_demand(16.5, U, [1])
            transcripts.append(list(log))
            a, b = rig.acquire(3), twin.acquire(3)
            assert rig.elapsed_s == pytest.approx(twin.elapsed_s, abs=1e-12)
            for k in a.data:
                np.testing.assert_array_equal(a.data[k], b.data[k].astype(np.float32))
    assert transcripts == [["arm", "diag_reset", "ramp_periods", "freq", "forcing_coeffs", "forcing2_coeffs"],
                           ["forcing2_coeffs"], ["forcing_coeffs"]]


def test_a_whole_burst_reaches_a_host_that_is_not_reading_without_loss(served):
    """The served twin sends burst_datagrams back to back (here while the host is not reading
    at all: the same thread sends, then collects) over a real loopback socket: the host's
    receive buffer holds them all, none lost."""
    srv, path = served
    burst = burst_datagrams("127.0.0.1")
    m = 6
    count = burst * c.records_per_packet(m)
    dev = srv.device
    dev.stream_cfg = type(dev.stream_cfg)(1, count, (0, 1, 2, 3, 4, 5), True)
    rx = StreamReceiver("test host", "127.0.0.1", srv.stream_port, 5.0)
    try:
        srv._send_stream(("127.0.0.1", rx.port))
        rec = rx.collect(count, m)
    finally:
        rx.close()
    assert rec.complete and rec.values.shape == (count, m) and rec.lost == 0
    assert np.array_equal(rec.indices, rec.indices[0] + np.arange(count))


def test_sample_indices_follow_each_datagrams_first_index_and_decimation():
    def idx(*cols):
        return _sample_indices(*(np.array(x, np.int64) for x in cols)).tolist()

    assert idx([10, 16], [2, 2], [3, 5]) == list(range(10, 26, 2))  # one progression
    assert idx([10, 16, 30], [2, 2, 1], [3, 4, 2]) == [10, 12, 14, 16, 18, 20, 22, 30, 31]  # a gap, a new decimation
    assert idx([7, 10], [1, 1], [2, 1]) == [7, 8, 10]


def test_an_error_frame_is_one_line_naming_the_device_and_the_error(served):
    srv, path = served
    with open_rig(load_rig(path)) as rig:
        with pytest.raises(InstrumentError) as e:
            rig._set("sample_freq", 1.0)
        assert str(e.value) == f"{rig.name}: SetPar sample_freq refused: error 5 (read-only)"
        with pytest.raises(InstrumentError, match="SetPar freq refused: error 6 \\(bad value\\)"):
            rig._set("freq", 1e6)


def test_a_missing_parameter_names_it(tmp_path, served):
    srv, path = served
    path.write_text(path.read_text().replace('rotational = "forcing2_coeffs"', 'rotational = "forcing3_coeffs"'))
    with pytest.raises(ConfigError, match=r"helic\.toml: helic\.actuators\.rotational: .* has no parameter"
                                          r" 'forcing3_coeffs' \(it has firmware, "):
        open_rig(load_rig(path))


def test_no_coefficient_set_beyond_the_limit_is_written(served):
    srv, path = served
    with open_rig(load_rig(path)) as rig:
        before = srv.device.value("forcing_coeffs").copy()
        with pytest.raises(LimitExceeded):
            rig.set_demand(17.0, np.array([[3.0 + 4.1j], [0.0]]), [1])
        np.testing.assert_array_equal(srv.device.value("forcing_coeffs"), before)
        assert srv.device.pending == 0 and not srv.device.gate.armed


def test_the_device_disarms_and_quiets_when_the_host_goes_away(served):
    srv, path = served
    rig = open_rig(load_rig(path))
    rig.set_demand(17.0, np.array([[0.5], [0.2]]), [1])
    rig.acquire(2)
    assert srv.device.gate.armed and np.any(srv.device.twin.demand.voltage != 0)
    rig.link.sock.close()  # the host vanishes without a word
    rig.stream.close()
    for _ in range(100):
        if not srv.device.gate.armed:
            break
        import time

        time.sleep(0.02)
    assert not srv.device.gate.armed and not np.any(srv.device.twin.demand.voltage != 0)


def test_discovery_pages_match_status(served):
    srv, path = served
    with open_rig(load_rig(path)) as rig:
        assert len(rig.params) == rig.status.n_params and len(rig.sources) == rig.status.n_sources
        assert rig.K == 16 and rig.status.version == c.VERSION
        assert list(rig.sources) == ["l1", "l2", "g1", "g2", "target", "forcing", "table", "phase", "out", "out2",
                                     "cmd_epoch"]  # inputs, programme signals, outputs after the gate, cmd_epoch


def test_rig_check_identifies_the_device_and_leaves_it_disarmed(served, capsys):
    from hbtest.cli import main

    srv, path = served
    assert main(["rig", "check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "instrument: HELIC-DAQ v3 hbtest-twin" in out and "kind helic" in out
    assert "forcing_coeffs" in out and "sources: l1, l2, g1, g2, target, forcing, table, phase, out, out2, cmd_epoch" in out
    for ch in ("l1", "l2", "g1", "g2"):
        assert re.search(rf"^\s+{ch}\s", out, re.M)
    assert not srv.device.gate.armed and srv.device.value("arm") == 0

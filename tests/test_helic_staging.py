"""The helic host as HELIC-DAQ's own code stages and gates (issue 44; docs/helic.md "Verified
against the peer"): ``arm`` and ``diag_reset`` are local to the device (no ``cmd_epoch`` step),
so arming after a first record costs no retake; every name the rig file gives is resolved at
connection; a device without a safety gate is refused unless the rig file says
``ungated = true``; a UDP primer goes out before every ``StreamStart``; a busy refusal is
retried. Over a real loopback socket to the served twin (or a wire-level fake for busy)."""

import socket
import struct
import threading
import time

import numpy as np
import pytest
from test_helic_client import served  # noqa: F401 - the fixture

from hbtest.cli import main
from hbtest.config import load_rig
from hbtest.errors import InstrumentError
from hbtest.rig import open_rig
from hbtest.rig.helic import client
from hbtest.rig.helic import codec as c
from hbtest.rig.helic.codec import MsgType


def test_arming_after_a_first_record_costs_no_retake(served):  # noqa: F811
    """A zero-demand record, then a drive (the host arms: local, no cmd_epoch step), then its
    record with retakes = 0: nothing stale, nothing retaken, and the host's count of queued
    commands is the device's at every step."""
    srv, path = served
    with open_rig(load_rig(path, ["helic.retakes=0"])) as rig:
        rig.set_demand(17.0, np.zeros((2, 1)), [1], ramp_periods=0.0)
        assert rig._queued == srv.device.pending
        rig.acquire(3)
        rig.set_demand(17.0, np.array([[0.3 - 0.1j], [0.1j]]), [1], ramp_periods=0.0)
        assert rig._queued == srv.device.pending == 2 and srv.device.gate.armed
        rig.acquire(3)
        assert rig.counters == dict(retaken=0, lost_datagrams=0, dropped_records=0, stale_records=0)


def test_only_queued_writes_count_as_commands():
    assert not client.queues_command("arm", 1) and not client.queues_command("arm", 0)
    assert not client.queues_command("diag_reset", 1) and not client.queues_command("mcu_reboot", 0x52454254)
    assert not client.queues_command("table_trigger", 0) and client.queues_command("table_trigger", 1)
    for name in ("freq", "forcing_coeffs", "target_coeffs", "table_mode", "table_phase", "ramp_periods"):
        assert client.queues_command(name, 0.0)


def test_a_ramp_parameter_the_device_lacks_is_one_line_naming_file_key_and_names(served, capsys):  # noqa: F811
    srv, path = served
    path.write_text(path.read_text().replace('ramp_parameter = "ramp_periods"', 'ramp_parameter = "ramp_time"'))
    assert main(["rig", "check", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"hbtest: error: {path}: helic.ramp_parameter: ")
    assert "has no parameter 'ramp_time' (it has firmware, experiment, " in err[0]
    assert not srv.device.gate.armed and srv.device.pending == 0


@pytest.mark.parametrize("key, old, new", [
    ("helic.input_limit_parameter", 'input_limit_parameter = "input_limit"', 'input_limit_parameter = "trip"'),
    ("helic.channels.g2.source", 'source = "g2"', 'source = "g9"'),
    ("helic.phase_source", 'phase_source = "phase"', 'phase_source = "theta"')])
def test_every_name_of_the_rig_file_is_resolved_at_connection(served, key, old, new):  # noqa: F811
    from hbtest.errors import ConfigError

    srv, path = served
    path.write_text(path.read_text().replace(old, new))
    with pytest.raises(ConfigError) as e:
        open_rig(load_rig(path))
    assert e.value.key == key and str(e.value.source) == str(path)


def _ungated(srv):
    srv.device.gate.gated = False
    srv.device.gate.quieted = False


def test_a_device_without_a_safety_gate_is_refused_by_default(served):  # noqa: F811
    """The firmware arms on any rig (bit0 reads 1 after arm = 1), so a gate is told apart by
    its quiet while disarmed. Refused before anything is written to the outputs."""
    srv, path = served
    _ungated(srv)
    with open_rig(load_rig(path)) as rig:
        with pytest.raises(InstrumentError) as e:
            rig.set_demand(17.0, np.array([[0.3], [0.0]]), [1])
        msg = str(e.value)
        assert "\n" not in msg and "has no safety gate" in msg and f"ungated = true in {path}" in msg
        assert not srv.device.gate.armed and srv.device.pending == 0
        assert not np.any(srv.device.value("forcing_coeffs"))


def test_an_ungated_device_is_driven_when_the_rig_file_says_so_and_it_is_said(served, capsys):  # noqa: F811
    srv, path = served
    _ungated(srv)
    with open_rig(load_rig(path, ["helic.ungated=true"])) as rig:
        rig.set_demand(17.0, np.array([[0.3], [0.0]]), [1])
        rig.acquire(2)
        assert srv.device.twin.demand.voltage[0, 0] == pytest.approx(0.3)
    err = capsys.readouterr().err
    assert f"ungated = true ({path}): the outputs are driven without the device's safety gate" in err
    assert "limits (5, 5 V) are enforced by hbtest alone" in err


def test_a_gated_device_is_driven_without_the_key(served, capsys):  # noqa: F811
    srv, path = served
    with open_rig(load_rig(path)) as rig:
        rig.set_demand(17.0, np.array([[0.3], [0.0]]), [1])
        rig.acquire(2)
    assert "ungated" not in capsys.readouterr().err


def test_a_udp_primer_goes_out_before_every_stream_start(served):  # noqa: F811
    """The rig file's stream_port names where primers go: here a socket of the test's."""
    srv, path = served
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    probe.bind(("127.0.0.1", 0))
    probe.settimeout(0.5)
    text = path.read_text()
    path.write_text(text.replace(f"stream_port = {srv.port + 1}", f"stream_port = {probe.getsockname()[1]}"))
    try:
        with open_rig(load_rig(path)) as rig:
            rig.set_demand(17.0, np.array([[0.3], [0.0]]), [1])
            rig.wait(1)
            rig.acquire(2)
            rig.acquire(2)
        got = []
        while True:
            try:
                got.append(probe.recvfrom(64))
            except TimeoutError:
                break
    finally:
        probe.close()
    assert len(got) == 3 and all(data == b"hbtest primer" for data, _ in got)


class _BusyDevice:
    """A wire-level fake: answers ``busy`` errors ``busy`` times, then an empty SetPar reply."""

    def __init__(self, busy: int):
        self.busy, self.requests = busy, 0
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        conn, _ = self.srv.accept()
        reader = c.FrameReader()
        with conn:
            while True:
                frame = reader.next()
                if frame is None:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    reader.feed(chunk)
                    continue
                msg_type, seq, _ = frame
                self.requests += 1
                busy = self.requests <= self.busy
                reply = (MsgType.ERROR, c.encode_error(c.ErrorCode.BUSY, msg_type)) if busy else (msg_type, b"")
                conn.sendall(c.encode_frame(reply[0], seq, reply[1]))


@pytest.mark.parametrize("busy", [3, 10**6])
def test_a_busy_refusal_is_retried_for_a_bounded_time(busy, monkeypatch):
    monkeypatch.setattr(client, "BUSY_RETRY_S", 0.3)
    dev = _BusyDevice(busy)
    link = client.ControlLink("fake", "127.0.0.1", dev.port, 2.0)
    t0 = time.monotonic()
    try:
        if busy == 3:
            assert link.request(MsgType.SET_PAR, struct.pack("<Hf", 0, 1.0)) == b"" and dev.requests == 4
        else:
            with pytest.raises(InstrumentError, match=r"^fake: SET_PAR refused: error 7 \(busy\)$"):
                link.request(MsgType.SET_PAR, struct.pack("<Hf", 0, 1.0))
            assert 0.3 <= time.monotonic() - t0 < 1.5
    finally:
        link.close()
        dev.srv.close()

"""The box server under an adversarial host, over real loopback sockets: every command's work
is bounded with a documented error reply (frequency range, samples per ramp/record/wait),
an unexpected fault in a command is an error reply (the host is served on), a slow reader
gets its whole reply, staging state never leaks across hosts or past a refused line, and
``hbtest serve`` stops within a second of SIGTERM even in the middle of a command."""

import signal
import socket
import time
from pathlib import Path

import numpy as np
import pytest
from box_hosts import Host, serve

from hbtest.config import load_rig
from hbtest.rig.box.protocol import (
    Record,
    decode_array,
    parse_error_reply,
)
from hbtest.serve.box import MAX_COMMAND_SAMPLES, MAX_PERIOD_SAMPLES, BoxServer

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
FS = 5000.0


class Raw(Host):
    def __init__(self, address, timeout=5.0):
        super().__init__(address, timeout)


@pytest.fixture(scope="module")
def twin_cfg():
    return load_rig(TWIN)


@pytest.fixture(scope="module")
def server(twin_cfg):
    with BoxServer(twin_cfg, port=0, seed=5, watchdog_s=10.0, busy_wait_s=0.3) as srv:
        yield srv


@pytest.fixture
def host(server):
    c = Raw(server.address)
    c.send("*RST", "*CLS", "OUTP:PROT:CLE")
    assert c.ask("*OPC?") == "1"
    yield c
    c.close()
    time.sleep(0.1)


def _healthy(c: Raw) -> None:
    """A valid demand is applied and measured (the box was not damaged by what came before)."""
    c.send("*RST", "*CLS", "OUTP:PROT:CLE", "OUTP ON", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0.1,0", "SOUR:COEF 2,0,0")
    st = c.ask("SOUR:APPL? 2")
    assert not st.startswith("!"), st
    c.send("MEAS:RAW? 1")
    _, payload = Record.split(c.reply())
    data = decode_array(payload, (4, -1))
    assert np.all(np.isfinite(data)) and data.shape[1] == round(FS / 17)
    c.send("OUTP OFF")


@pytest.mark.parametrize("freq", ["1e308", "5e-324", "0.001", "2500", "1e-300"])
def test_a_frequency_outside_the_documented_range_is_refused_at_staging(host, freq):
    """DC-only demands included: the range holds whatever the orders (rate / 65536 up to the
    Nyquist frequency), so no later command can compute a NaN phase or an infinite ramp."""
    host.send(f"SOUR:FREQ {freq}", "SOUR:HARM 0", "SOUR:COEF 1,0,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 1") == -221  # the failed staging blocks the apply
    assert parse_error_reply(host.ask("SYST:ERR?"))[0] == -222
    _healthy(host)


def test_rst_leaves_the_box_measuring_after_extreme_frequencies(host):
    host.send("SOUR:FREQ 1e308", "SOUR:HARM 0", "SOUR:COEF 1,0,0", "SOUR:COEF 2,0,0")
    host.ask("SOUR:APPL? 1")
    host.ask("MEAS:RAW? 1")
    host.send("*RST")
    _healthy(host)


def test_records_ramps_and_waits_are_bounded_in_samples(host):
    f_low = FS / MAX_PERIOD_SAMPLES * 1.0001
    host.send("SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 0") == 0
    n_max = int(MAX_COMMAND_SAMPLES * 17 / FS)
    assert host.code(f"MEAS:RAW? {n_max + 1}") == -222
    assert host.code(f"MEAS:COEF? {n_max + 1},1") == -222
    assert host.code(f"WAIT? {n_max + 1}") == -222
    host.send(f"SOUR:FREQ {f_low!r}", "SOUR:HARM 0", "SOUR:COEF 1,0,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 1000") == -222  # 1000 periods of 65530 samples
    assert "at most 2097152 per command" in host.ask("SYST:ERR?")
    assert host.code("SOUR:APPL? 2") == 0  # a short ramp to the same staged demand is fine
    _healthy(host)


def test_an_unexpected_fault_in_a_command_is_an_error_reply_and_the_host_is_served_on(server, host):
    twin = server.device.twin
    real = twin.acquire

    def broken(n):  # a fault of the box's own firmware (injected into the served device)
        raise IndexError("index 0 is out of bounds")

    host.send("OUTP ON", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0.1,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 2") == 0
    twin.acquire = broken
    try:
        r = host.ask("MEAS:RAW? 1")
        code, msg = parse_error_reply(r)
        assert code == -300 and "IndexError" in msg
        host.send("*CLS", "WAIT? 0.5")  # a command after the fault still gets its reply
        assert not host.reply().startswith(b"!")
    finally:
        twin.acquire = real
    assert host.ask("OUTP?") == "0"  # the fault ramped down and disarmed
    assert np.allclose([float(x) for x in host.ask("SOUR:DEM?").split(",")[4:]], 0)
    _healthy(host)


def test_a_slow_reader_gets_its_whole_reply(server, host):
    """A 28 MB record read by a host that pauses 0.5 s is delivered whole (no trip 304)."""
    host.send("OUTP ON", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0.1,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 2") == 0
    host.send("MEAS:RAW? 3000")
    time.sleep(0.5)
    rec, payload = Record.split(host.reply())
    assert rec.n_periods == 3000 and len(payload) == 4 * 8 * round(3000 * FS / 17)
    assert host.ask("OUTP:PROT:TRIP?") == '0,""'
    host.send("OUTP OFF")


def test_a_new_host_starts_from_a_clean_staging_state(server):
    a = Raw(server.address)
    a.send("*RST", "*CLS", "SOUR:FREQ -1")  # a failed staging line, then the host leaves
    a.ask("*OPC?")
    a.close()
    time.sleep(0.2)
    b = Raw(server.address)
    try:
        b.send("*CLS", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0,0", "SOUR:COEF 2,0,0")
        assert b.code("SOUR:APPL? 0") == 0
    finally:
        b.close()
        time.sleep(0.1)


def test_a_staging_line_refused_for_its_bytes_blocks_the_next_apply(host):
    host.send("OUTP ON", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0.2,0", "SOUR:COEF 2,0,0")
    assert host.code("SOUR:APPL? 0") == 0
    host.send(b"SOUR:COEF 1,0.1\xff,0")  # -102: the host meant 0.1 V
    assert host.code("SOUR:APPL? 0") == -221  # not the previous 0.2 V
    host.send("SOUR:COEF 1,0.1\x7f,0")  # DEL is a control byte too
    assert host.code("SOUR:APPL? 0") == -221
    errs = [parse_error_reply(host.ask("SYST:ERR?"))[0] for _ in range(4)]
    assert errs == [-102, -221, -102, -221]
    host.send("OUTP OFF")


def test_a_refused_host_reads_the_busy_line_even_after_sending_and_the_controller_queue_is_untouched(server, host):
    others = []
    for _ in range(3):
        o = Raw(server.address)
        o.send("*IDN?", "SOUR:FREQ 3" + "0" * 2000)
        others.append(o)
    for o in others:
        assert parse_error_reply(o.reply().decode()) == (310, "Box busy; another host is in control")
        o.close()
    assert host.ask("SYST:ERR:COUN?") == "0"


def test_a_burst_of_connections_is_answered_quickly(server, host):
    t0 = time.monotonic()
    socks = [socket.create_connection(server.address, timeout=5.0) for _ in range(50)]
    dt = time.monotonic() - t0
    for s in socks:
        s.close()
    assert dt < 1.0, dt


def test_a_disarmed_idle_host_is_disconnected_by_the_idle_policy(twin_cfg):
    events = []
    with BoxServer(twin_cfg, port=0, idle_s=0.3, on_event=events.append) as srv:
        a = Raw(srv.address)
        assert a.ask("*IDN?").startswith("HBTEST")
        time.sleep(0.6)
        with pytest.raises((ConnectionError, OSError)):
            a.ask("*IDN?")
        a.close()
        b = Raw(srv.address)
        assert b.ask("*IDN?").startswith("HBTEST")
        b.close()
    assert any(e.kind == "idle" for e in events)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_stops_within_a_second_in_the_middle_of_a_command(sig):
    p, port = serve()
    try:
        c = Raw(("127.0.0.1", port))
        c.send("OUTP ON", "SOUR:FREQ 17", "SOUR:HARM 1", "SOUR:COEF 1,0.1,0", "SOUR:COEF 2,0,0")
        assert not c.ask("SOUR:APPL? 2").startswith("!")
        c.send("DIAG:DEL 60", "MEAS:RAW? 1")  # the reply is held for 60 s
        time.sleep(0.3)
        t0 = time.monotonic()
        p.send_signal(sig)
        out, _ = p.communicate(timeout=10)
        assert time.monotonic() - t0 < 1.5
        assert p.returncode == 0 and "Traceback" not in out, out
        c.close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_boxrig_acquires_a_28_mb_record(twin_cfg):
    """The client side of the slow-reader case: ``BoxRig.acquire(3000)`` (28 MB over pyvisa's
    chunked reads) is delivered whole, no link trip."""
    from hbtest.rig import open_rig

    box = ROOT / "instruments" / "box-loopback.toml"
    with BoxServer(twin_cfg, port=0) as srv:
        with open_rig(load_rig(box, [f"box.resource='{srv.resource}'", "box.timeout_s=20"])) as rig:
            rig.set_demand(17.0, np.array([[0.1], [0.0]]), [1])
            acq = rig.acquire(3000)
            assert acq.t.size == round(3000 * FS / 17) and rig.reconnects == 0 and rig.resyncs == 0
        assert srv.device.trip.code == 0

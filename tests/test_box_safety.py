"""Hardware safety of the box path: nothing beyond a limit is ever sent (the client refuses
before sending; the box refuses too, and trips), ramps stay within the limits at every sample,
a trip latches, zeroes the outputs and is reported until cleared, and the watchdog ramps the
outputs down when the host falls silent or vanishes."""

import socket
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.config import load_rig
from hbtest.errors import InstrumentError, LimitExceeded
from hbtest.rig import open_rig, safety
from hbtest.rig.box.protocol import parse_error_reply, reply_length
from hbtest.serve.box import BoxServer

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"


@pytest.fixture(scope="module")
def twin_cfg():
    return load_rig(TWIN)


def _box_cfg(server, *extra):
    return load_rig(BOX, [f"box.resource='{server.resource}'", "box.timeout_s=3.0", *extra])


class Raw:
    def __init__(self, address):
        self.s = socket.create_connection(address, timeout=5.0)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, *lines):
        self.s.sendall("".join(x + "\n" for x in lines).encode())

    def ask(self, *lines) -> str:
        self.send(*lines)
        while True:
            n = reply_length(self.buf)
            if n is not None and len(self.buf) >= n:
                r, self.buf = self.buf[:n], self.buf[n:]
                return r.decode("latin-1").rstrip("\n")
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk

    def close(self):
        self.s.close()


def _demand_lines(f, V, orders):
    lines = [f"SOUR:FREQ {float(f)!r}", "SOUR:HARM " + ",".join(str(k) for k in orders)]
    for j, row in enumerate(V):
        lines.append(f"SOUR:COEF {j + 1}," + ",".join(f"{float(c.real)!r},{float(c.imag)!r}" for c in row))
    return lines


def _peak_in_force(raw: Raw, n_act=2) -> np.ndarray:
    """Peak bound of the demand in force, from SOUR:DEM?."""
    f = raw.ask("SOUR:DEM?").split(",")
    n = int(f[2])
    if n == 0:
        return np.zeros(n_act)
    x = np.array([float(v) for v in f[3 + n :]]).reshape(n_act, n, 2)
    return np.abs(x[..., 0] + 1j * x[..., 1]).sum(axis=-1)


orders_st = st.lists(st.integers(0, 6), min_size=1, max_size=4, unique=True).map(sorted)


@st.composite
def demands(draw):
    orders = np.array(draw(orders_st))
    mag = draw(st.lists(st.floats(0.0, 4.0), min_size=2 * orders.size, max_size=2 * orders.size))
    ph = draw(st.lists(st.floats(-np.pi, np.pi), min_size=2 * orders.size, max_size=2 * orders.size))
    V = (np.array(mag) * np.exp(1j * np.array(ph))).reshape(2, orders.size)
    V[:, orders == 0] = V[:, orders == 0].real
    return orders, V


@settings(max_examples=150, deadline=None)
@given(d1=demands(), d2=demands(), lim=st.floats(0.5, 6.0), n_ramp=st.integers(0, 40), f1=st.floats(5, 30), f2=st.floats(5, 30))
def test_a_ramp_between_admissible_demands_never_exceeds_the_limit(d1, d2, lim, n_ramp, f1, f2):
    """Generate the waveform sample by sample along the raised-cosine ramp (frequency ramping
    too, phase continuous) and check |v| <= limit everywhere, whenever both ends pass the check."""
    limits = safety.Limits((lim, lim))
    allo = np.union1d(d1[0], d2[0])
    Va = np.zeros((2, allo.size), complex)
    Vb = np.zeros((2, allo.size), complex)
    Va[:, np.searchsorted(allo, d1[0])] = d1[1]
    Vb[:, np.searchsorted(allo, d2[0])] = d2[1]
    ok = []
    for V, o in ((d1[1], d1[0]), (d2[1], d2[0])):
        try:
            safety.check_demand(V, o, limits, "test")
            ok.append(True)
        except LimitExceeded:
            assert safety.peak_bound(V).max() > lim
            ok.append(False)
    if not all(ok):
        return
    w = safety.ramp_weights(n_ramp)
    assert w[0] == (0.0 if n_ramp else 1.0) and w[-1] == 1.0 and np.all(np.diff(w) >= 0)
    coef = safety.ramp_coefficients(Va, Vb, w)  # (n, 2, orders)
    fk = f1 + w * (f2 - f1)
    phase = np.concatenate([[0.0], np.cumsum(2 * np.pi * fk[:-1] / 5000)])
    for p in (0.0, 0.3, 1.7):  # any phase offset
        v = np.real(np.einsum("nao,no->na", coef, np.exp(1j * np.multiply.outer(phase + p, allo))))
        assert np.abs(v).max() <= lim * (1 + 1e-12)


@pytest.fixture(scope="module")
def server(twin_cfg):
    with BoxServer(twin_cfg, port=0, seed=5, busy_wait_s=2.0) as srv:
        yield srv


@settings(max_examples=40, deadline=None)
@given(d=demands(), f=st.floats(5.0, 40.0), ramp=st.floats(0.0, 3.0))
def test_the_client_refuses_before_sending_and_the_box_refuses_and_trips(server, d, f, ramp):
    orders, V = d
    over = bool(safety.peak_bound(V).max() > 4.0 * (1 + 1e-12))
    # the client, with a 4 V limit: refuses an over-limit demand before a byte leaves
    cfg = _box_cfg(server, "box.voltage_limits_v=[4.0, 4.0]")
    with open_rig(cfg) as rig:
        epoch, t0 = server.device.epoch, server.device.twin.elapsed_s
        if over:
            with pytest.raises(LimitExceeded, match="exceeds its voltage limit of 4 V"):
                rig.set_demand(f, V, orders, ramp)
            assert server.device.epoch == epoch and server.device.twin.elapsed_s == t0  # nothing reached the box
            assert not server.device.trip.active
        else:
            rig.set_demand(f, V, orders, ramp)
            assert server.device.epoch == epoch + 1 and rig.epoch == server.device.epoch
        if server.device.demand is not None:
            assert safety.peak_bound(server.device.demand[2]).max() <= 4.0 * (1 + 1e-12)
    # the box, sent the same demand raw with a 4 V limit: refuses, trips, outputs at zero
    raw = Raw(server.address)
    try:
        raw.send("*CLS", "OUTP:PROT:CLE", "SOUR:VOLT:LIM 4", "OUTP ON")
        reply = raw.ask(*_demand_lines(f, V, orders), f"SOUR:APPL? {ramp!r}")
        if over:
            assert parse_error_reply(reply)[0] == -222
            assert parse_error_reply(raw.ask("OUTP:PROT:TRIP?"))[0] == safety.TRIP_VOLTAGE
            assert raw.ask("OUTP?") == "0"
            assert np.all(_peak_in_force(raw) == 0)
        else:
            assert reply.split(",")[1] == "0"
            assert _peak_in_force(raw).max() <= 4.0 * (1 + 1e-12)
        raw.send("OUTP OFF", "OUTP:PROT:CLE", "*CLS")
        assert raw.ask("*OPC?") == "1"
    finally:
        raw.close()
        time.sleep(0.06)


def test_a_channel_trip_latches_zeroes_the_outputs_and_is_reported_until_cleared(twin_cfg):
    with BoxServer(twin_cfg, port=0, seed=3) as srv:
        # 0.05 mm on the slider laser: a 1 V demand at 17 Hz moves it far more
        cfg = _box_cfg(srv, "box.channel_limits.l1_mm=0.05")
        with open_rig(cfg) as rig:
            rig.set_demand(17.0, np.array([[1.0], [0.0]]), [1])
            with pytest.raises(LimitExceeded, match=r"tripped .*302.*channel l1"):
                rig.acquire(5)
            dev = srv.device
            assert dev.trip.code == safety.TRIP_CHANNEL and not dev.armed
            assert np.all(dev.demand[2] == 0)  # ramped to zero
            # latched: reported in every reply and refused until cleared
            with pytest.raises(LimitExceeded, match="refused.*Tripped"):
                rig.set_demand(17.0, np.array([[0.01], [0.0]]), [1])
            with pytest.raises(LimitExceeded):
                rig.wait(1)
            assert dev.trip.active
            rig.clear_trip()
            assert not dev.trip.active
            rig.set_demand(17.0, np.array([[1e-4], [0.0]]), [1])
            rig.acquire(3)
            assert dev.armed and not dev.trip.active
        # close: ramped to zero and disarmed, no trip for a clean close
        assert not srv.device.armed and np.all(srv.device.demand[2] == 0) and not srv.device.trip.active


def test_watchdog_ramps_down_when_the_host_falls_silent(twin_cfg):
    events = []
    with BoxServer(twin_cfg, port=0, seed=3, on_event=events.append) as srv:
        raw = Raw(srv.address)
        try:
            raw.send("OUTP:PROT:WDOG 0.2", "OUTP ON", *_demand_lines(17.0, np.array([[1.0], [0.5]]), [1]))
            assert raw.ask("SOUR:APPL? 2").split(",")[:2] == ["1", "0"]
            time.sleep(0.6)  # silent for three watchdog times
            status = raw.ask("WAIT? 1").split(",")
            assert int(status[1]) == safety.TRIP_WATCHDOG and int(status[0]) == 2  # ramp-down advanced the epoch
            assert raw.ask("OUTP?") == "0" and np.all(_peak_in_force(raw) == 0)
            code, msg = parse_error_reply(raw.ask("OUTP:PROT:TRIP?"))
            assert code == safety.TRIP_WATCHDOG and "watchdog 0.2 s" in msg
            assert parse_error_reply(raw.ask("SYST:ERR?"))[0] == safety.TRIP_WATCHDOG
        finally:
            raw.close()
    assert any(e.kind == "watchdog" for e in events)


def test_watchdog_ramps_down_when_the_host_vanishes(twin_cfg):
    """A host arms, drives, and closes its socket without a word; the next host sees the
    outputs at zero and the connection-loss trip; BoxRig records it and clears it at open."""
    with BoxServer(twin_cfg, port=0, seed=3) as srv:
        raw = Raw(srv.address)
        raw.send("OUTP ON", *_demand_lines(17.0, np.array([[1.5], [0.5]]), [1]))
        assert raw.ask("SOUR:APPL? 2").split(",")[1] == "0"
        t_before = float(raw.ask("SYST:TIME?"))
        raw.close()  # vanish
        time.sleep(0.2)
        raw = Raw(srv.address)
        try:
            assert raw.ask("OUTP?") == "0"
            assert np.all(_peak_in_force(raw) == 0)
            code, msg = parse_error_reply(raw.ask("OUTP:PROT:TRIP?"))
            assert code == safety.TRIP_LINK and "connection lost" in msg
            assert float(raw.ask("SYST:TIME?")) == pytest.approx(t_before + round(2 * 5000 / 17) / 5000)  # the 2-period ramp-down
        finally:
            raw.close()
        time.sleep(0.1)
        with open_rig(_box_cfg(srv)) as rig:
            assert rig.describe().details["trip_at_open"].startswith("304")
            assert not srv.device.trip.active


def test_an_unreachable_box_is_one_error_naming_it_quickly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    cfg = load_rig(BOX, [f"box.resource='TCPIP0::127.0.0.1::{port}::SOCKET'", "box.timeout_s=1.0"])
    t = time.monotonic()
    with pytest.raises(InstrumentError, match=rf"box-loopback.*TCPIP0::127.0.0.1::{port}::SOCKET.*cannot connect"):
        open_rig(cfg)
    assert time.monotonic() - t < 3.0

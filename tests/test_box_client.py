"""BoxRig, the pyvisa client of the box, against real loopback servers: records identical to
the twin's, device averaging equal to harmonics.fit of the same record, stale replies after a
timeout discarded by epoch, reconnect after a server restart, malformed replies and garbage
bytes as one InstrumentError naming the box (never a hang), and `hbtest rig check`."""

import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from hbtest.method import harmonics
from hbtest.cli import main
from hbtest.config import load_rig
from hbtest.errors import InstrumentError
from hbtest.rig import ChannelCoefficients, Rig, open_rig
from hbtest.rig.box import BoxSpec
from hbtest.serve.box import BoxDevice, BoxServer
from hbtest.rig.virtual import VirtualRig

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"
V = np.array([[1.2 - 0.4j, 0.05], [0.6, -0.02j]])
ORDERS = [1, 3]


@pytest.fixture(scope="module")
def twin_cfg():
    return load_rig(TWIN)


def _box_cfg(resource, *extra):
    return load_rig(BOX, [f"box.resource='{resource}'", *extra])


def test_the_rig_file_parses_into_a_box_spec():
    cfg = load_rig(BOX)
    assert cfg.kind == "box" and isinstance(cfg.spec, BoxSpec)
    assert cfg.spec.resource == "TCPIP0::127.0.0.1::5025::SOCKET"
    assert cfg.spec.voltage_limits_v == (5.0, 5.0)
    lim = dict(cfg.spec.channel_limits)
    assert lim["l1"] == pytest.approx(4.5e-3) and lim["g1"] == pytest.approx(190e-6)
    # raw-volt windows through the calibration: 4.5 mm / 0.5 mm per V = 9 V
    assert cfg.spec.limits(cfg.sensors).channels["l1"] == pytest.approx((-9.0, 9.0))
    # the reduction's calibration is the twin's
    # the same sensors as the twin it serves; the twin's own fits reject 5 mains multiples, the box
    # file keeps the default 3 (what its device averaging is asked to remove)
    assert replace(cfg.sensors, mains_multiples=5) == load_rig(TWIN).sensors


@pytest.mark.parametrize("override, key", [
    ("box.resource='GPIB0::5::INSTR'", "box.resource"),
    ("box.voltage_limits_v=[6.0, 1.0]", "box.voltage_limits_v"),
    ("box.retries=-1", "box.retries"),
    ("box.channel_limits.l3_mm=1.0", "box.channel_limits.l3_mm"),
    ("box.speed=3", "box.speed"),
])
def test_rig_file_errors_name_the_key(override, key):
    from hbtest.errors import ConfigError

    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_rig(BOX, [override])


def test_records_through_the_box_are_the_twins_bit_for_bit(twin_cfg):
    with BoxServer(twin_cfg, port=0) as srv, open_rig(_box_cfg(srv.resource)) as rig:
        assert isinstance(rig, Rig)
        d = rig.describe()
        assert d.kind == "box" and d.details["idn"].startswith("HBTEST,BOX-TWIN,") and d.input_range_v == 10.0
        twin = VirtualRig(twin_cfg)
        for r in (rig, twin):
            r.set_demand(17.3, V, ORDERS, ramp_periods=2.0)
            r.wait(0.5)  # (whole periods of WAIT? are recorded for the limit check: noise draws differ)
        a, b = rig.acquire(7), twin.acquire(7)
        for c in ("l1", "l2", "g1", "g2"):
            np.testing.assert_array_equal(a.data[c], b.data[c])
        np.testing.assert_allclose(a.t, b.t, rtol=0, atol=1e-15)
        assert a.elapsed_s == b.elapsed_s == rig.elapsed_s and a.n_periods == 7
        # frequency change: ramped, phase continuous on both
        for r in (rig, twin):
            r.set_demand(17.6, 0.5 * V, ORDERS, ramp_periods=1.5)
        np.testing.assert_array_equal(rig.acquire(3).data["g2"], twin.acquire(3).data["g2"])


@pytest.mark.parametrize("nuisance", [(), (50.0, 100.0, 150.0)])
def test_device_averaging_equals_the_fit_of_the_raw_record(twin_cfg, nuisance):
    """Two boxes with the same seed and the same commands: one returns the raw record, the
    other the coefficients averaged on the box; they agree to 1e-12 V."""
    orders = [0, 1, 2, 3]
    with BoxServer(twin_cfg, port=0, seed=11) as s1, BoxServer(twin_cfg, port=0, seed=11) as s2, \
            open_rig(_box_cfg(s1.resource)) as raw_rig, open_rig(_box_cfg(s2.resource)) as avg_rig:
        for r in (raw_rig, avg_rig):
            r.set_demand(18.1, V, ORDERS)
        acq = raw_rig.acquire(12)
        cc = avg_rig.acquire_coefficients(12, orders, nuisance_hz=nuisance)
        assert isinstance(cc, ChannelCoefficients)
        assert cc.epoch == avg_rig.epoch and cc.n_periods == 12 and cc.frequency_hz == 18.1
        assert cc.elapsed_s == acq.elapsed_s and cc.overrange == ()
        names = ("l1", "l2", "g1", "g2")
        fit = harmonics.fit(acq.t, np.stack([acq.data[c] for c in names]), 18.1, orders, n_periods=12, nuisance_hz=nuisance)
        for i, c in enumerate(names):
            np.testing.assert_allclose(cc.coefficients[c], fit.coefficients[i], rtol=0, atol=1e-12)
            np.testing.assert_allclose(cc.variance[c], fit.variance[i], rtol=1e-12, atol=1e-24)
            assert cc.coefficients[c][0].imag == 0.0
        # and the coefficients are the demand's response: the fundamental dominates l1
        assert abs(cc.coefficients["l1"][1]) > 100 * abs(cc.coefficients["l1"][2])


def test_a_stale_reply_after_a_timeout_is_discarded_by_epoch(twin_cfg):
    """The box answers the first measurement 0.9 s late (DIAG:DEL), after the client's 0.5 s
    timeout: the client resyncs under a new epoch, drops the late reply, returns the fresh one."""
    with BoxServer(twin_cfg, port=0) as srv, \
            open_rig(_box_cfg(srv.resource, "box.timeout_s=0.5", "box.retries=2")) as rig:
        rig.set_demand(17.0, V, ORDERS)
        e0 = rig.epoch
        srv.device.execute(b"DIAG:DEL 0.9")  # the documented test hook, as a line to the box
        t = time.monotonic()
        cc = rig.acquire_coefficients(5, [1])
        assert time.monotonic() - t < 3.0
        assert rig.resyncs == 1 and rig.stale_replies == 1 and rig.reconnects == 0
        assert cc.epoch == rig.epoch == e0 + 1 == srv.device.epoch  # the re-applied demand's epoch
        # the fresh record is the box's latest: it ends at the box clock, after the stale one
        assert cc.elapsed_s == pytest.approx(srv.device.twin.elapsed_s)
        assert cc.elapsed_s > 2 * 5 / 17.0
        # same for raw records
        srv.device.execute(b"DIAG:DEL 0.9")
        acq = rig.acquire(4)
        assert rig.stale_replies == 2 and acq.elapsed_s == pytest.approx(srv.device.twin.elapsed_s)
        assert acq.data["l1"].size == round(4 * 5000 / 17)


def test_reconnect_after_the_box_restarts(twin_cfg):
    srv = BoxServer(twin_cfg, port=0)
    host, port = srv.start()
    rig = open_rig(_box_cfg(srv.resource, "box.timeout_s=1.0", "box.retries=3"))
    try:
        rig.set_demand(17.0, V, ORDERS)
        rig.acquire(3)
        srv.stop()
        srv = BoxServer(twin_cfg, port=port)
        srv.start()
        acq = rig.acquire(3)  # timeout -> reconnect -> demand re-applied (ramp) -> repeated
        assert rig.reconnects == 1 and acq.n_periods == 3
        assert srv.device.armed and srv.device.epoch == rig.epoch
        np.testing.assert_array_equal(srv.device.demand[2], V)
    finally:
        rig.close()
        srv.stop()
    assert not srv.device.armed


class _FakeBox:
    """A TCP box whose replies are produced by ``reply(line, device)``: garbage, silence or
    a mangled real reply. Stopped by ``close``."""

    def __init__(self, twin_cfg, reply):
        self.device = BoxDevice(twin_cfg)
        self.reply = reply
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.sock.settimeout(0.05)
        self.port = self.sock.getsockname()[1]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def resource(self):
        return f"TCPIP0::127.0.0.1::{self.port}::SOCKET"

    def _run(self):
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            conn.settimeout(0.05)
            buf = b""
            with conn:
                while not self.stop.is_set():
                    try:
                        chunk = conn.recv(65536)
                    except socket.timeout:
                        continue
                    if not chunk:
                        break
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        out = self.reply(line, self.device)
                        if out:
                            conn.sendall(out)

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _real(line, dev):
    return dev.execute(line)


@pytest.mark.parametrize("name, reply", [
    ("non-ASCII garbage", lambda line, dev: b"\xff\xfe\x00garbage\xc3\n" if line.endswith(b"?") else None),
    ("garbled error", lambda line, dev: b"!what is this\n" if line.endswith(b"?") else None),
    ("absurd block", lambda line, dev: b"1,0,#9999999999\n" if line.endswith(b"?") else None),
])
def test_garbage_while_identifying_is_one_error_naming_the_box(twin_cfg, name, reply):
    fake = _FakeBox(twin_cfg, reply)
    try:
        t = time.monotonic()
        with pytest.raises(InstrumentError, match=rf"box-loopback.*{fake.port}::SOCKET"):
            open_rig(_box_cfg(fake.resource, "box.timeout_s=0.5"))
        assert time.monotonic() - t < 3.0
    finally:
        fake.close()


def _mangle(kind):
    def reply(line, dev):
        out = dev.execute(line)
        if line.startswith(b"MEAS:RAW?") and out:
            head, _, rest = out.partition(b"#")
            if kind == "short block":
                return head + b"#3100" + b"\x01" * 20  # announces 100 bytes, sends 20, then silence
            if kind == "garbage header":
                return b"\x00\x81zz," + b"#" + rest
            if kind == "wrong shape":
                return head + b"#216" + b"\x00" * 16 + b"\n"
            if kind == "future epoch":
                return b"99" + out[out.index(b","):]
        return out
    return reply


@pytest.mark.parametrize("kind", ["short block", "garbage header", "wrong shape", "future epoch"])
def test_malformed_measurement_replies_are_one_error_naming_the_box(twin_cfg, kind):
    fake = _FakeBox(twin_cfg, _mangle(kind))
    try:
        rig = open_rig(_box_cfg(fake.resource, "box.timeout_s=0.3", "box.retries=1"))
        try:
            rig.set_demand(17.0, V, ORDERS)
            t = time.monotonic()
            with pytest.raises(InstrumentError, match=rf"box-loopback.*{fake.port}::SOCKET.*MEAS:RAW\?") as ei:
                rig.acquire(3)
            assert "\n" not in str(ei.value)
            assert time.monotonic() - t < 3.0
        finally:
            try:
                rig.close()
            except InstrumentError:
                pass  # a box that garbles replies may garble the close too; bounded either way
    finally:
        fake.close()


def test_a_silent_box_is_an_error_after_bounded_retries(twin_cfg):
    def silent_after_open(line, dev):
        return None if line.startswith(b"WAIT?") else dev.execute(line)

    fake = _FakeBox(twin_cfg, silent_after_open)
    try:
        rig = open_rig(_box_cfg(fake.resource, "box.timeout_s=0.3", "box.retries=2"))
        rig.set_demand(17.0, V, ORDERS)
        t = time.monotonic()
        with pytest.raises(InstrumentError, match=r"WAIT\?: no valid reply after 3 attempt\(s\)"):
            rig.wait(2)
        assert time.monotonic() - t < 5.0
        assert rig.resyncs == 2
        rig.close()  # the link is marked dead: close releases without talking
    finally:
        fake.close()


def test_a_second_host_gets_a_busy_error(twin_cfg):
    with BoxServer(twin_cfg, port=0, busy_wait_s=0.2) as srv, open_rig(_box_cfg(srv.resource)) as rig:
        rig.set_demand(17.0, V, ORDERS)
        with pytest.raises(InstrumentError, match="another host is in control"):
            open_rig(_box_cfg(srv.resource))
        rig.acquire(2)  # the first host is undisturbed


def test_rig_check_through_the_box(twin_cfg, capsys):
    with BoxServer(twin_cfg, port=0) as srv:
        assert main(["rig", "check", str(BOX), "--set", f"box.resource='{srv.resource}'"]) == 0
        out = capsys.readouterr().out
        assert "instrument: HBTEST,BOX-TWIN," in out and srv.resource in out
        rows = {line.split()[0]: line.split() for line in out.splitlines() if line.split() and line.split()[0] in ("l1", "l2", "g1", "g2")}
        assert set(rows) == {"l1", "l2", "g1", "g2"}
        # outputs at zero, the lab-calibrated twin (instruments/virtual-cantilever.toml): laser
        # levels are noise (2.15 um rms = 4.3 mV at 2 mV/um), the gauges carry broadband noise and
        # the lab's mains pickup (g1 0.47, g2 1.2 microstrain rms in one read)
        assert abs(float(rows["l1"][1])) < 1e-3 and 3e-3 < float(rows["l1"][2]) < 6e-3
        assert 0.2 < float(rows["g1"][4]) < 1.0 and 0.6 < float(rows["g2"][4]) < 2.5
        assert not srv.device.armed and srv.device.epoch >= 1


def test_rig_check_of_an_unreachable_box_is_one_line_exit_2(capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t = time.monotonic()
    assert main(["rig", "check", str(BOX), "--set", f"box.resource='TCPIP0::127.0.0.1::{port}::SOCKET'"]) == 2
    assert time.monotonic() - t < 5
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"TCPIP0::127.0.0.1::{port}::SOCKET" in err and "box-loopback" in err

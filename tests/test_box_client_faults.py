"""``BoxRig`` against a box that misbehaves on the wire (a real socket, the real box device
behind it, its replies delayed, doubled, cut or refused): one error line naming the box, the
rig ramped down where the link allows, never a stale value taken for a new one; and the
host-side safe stop: signals during the ramp-down never leave outputs on; an unexpected
exception leaves the store ``interrupted`` with the reason and one line."""

import os
import signal
import socket
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from hbtest.config import load_rig
from hbtest.errors import InstrumentError
from hbtest.rig import open_rig
from hbtest.serve.box import BoxDevice, BoxServer
from hbtest.store import RunStore

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
BOX = ROOT / "instruments" / "box-loopback.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
V = np.array([[0.3 - 0.1j], [0.2]])
ORDERS = [1]


@pytest.fixture(scope="module")
def twin_cfg():
    return load_rig(TWIN)


def _box_cfg(resource, *extra):
    return load_rig(BOX, [f"box.resource='{resource}'", *extra])


class FaultyBox:
    """A TCP box: each line goes to a real :class:`BoxDevice`; ``fault(line, reply, conn)``
    returns the bytes actually sent (or None: nothing), and may close ``conn``."""

    def __init__(self, twin_cfg, fault):
        self.device = BoxDevice(twin_cfg, seed=3)
        self.fault = fault
        self.sock = socket.create_server(("127.0.0.1", 0))
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
            except TimeoutError:
                continue
            self._serve(conn)

    def _serve(self, conn):
        conn.settimeout(0.05)
        buf = b""
        with conn:
            while not self.stop.is_set():
                try:
                    chunk = conn.recv(65536)
                except TimeoutError:
                    continue
                except OSError:
                    break
                if not chunk:
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    out = self.fault(line, self.device.execute(line), conn)
                    if out == "closed":
                        self.device.disconnected()
                        return
                    if out:
                        conn.sendall(out)
        self.device.disconnected()

    def close(self):
        self.stop.set()
        self.thread.join(5)
        self.sock.close()


def _double_first_measurement():
    doubled = []

    def fault(line, reply, conn):
        if line.startswith(b"MEAS:RAW?") and not doubled:
            doubled.append(line)
            return reply * 2
        return reply
    return fault


def test_a_doubled_measurement_reply_is_never_taken_for_the_next_record(twin_cfg):
    fake = FaultyBox(twin_cfg, _double_first_measurement())
    try:
        with open_rig(_box_cfg(fake.resource, "box.timeout_s=1.0")) as rig:
            rig.set_demand(17.0, V, ORDERS)
            a = rig.acquire(2)
            b = rig.acquire(2)  # the copy of a's reply arrives first: dropped as stale
            assert b.elapsed_s > a.elapsed_s
            assert not np.array_equal(a.data["l1"], b.data["l1"])
            assert rig.stale_replies >= 1
    finally:
        fake.close()


def _close_mid_block(line, reply, conn):
    if line.startswith(b"MEAS:RAW?"):
        conn.sendall(reply[: len(reply) // 2])
        conn.shutdown(socket.SHUT_RDWR)
        return "closed"
    return reply


def test_a_box_closing_mid_reply_is_one_error_naming_it_after_bounded_reconnects(twin_cfg):
    fake = FaultyBox(twin_cfg, _close_mid_block)
    try:
        rig = open_rig(_box_cfg(fake.resource, "box.timeout_s=0.5", "box.retries=1"))
        rig.set_demand(17.0, V, ORDERS)
        t = time.monotonic()
        with pytest.raises(InstrumentError, match=rf"box-loopback.*{fake.port}::SOCKET.*MEAS:RAW\?") as ei:
            rig.acquire(3)
        assert "\n" not in str(ei.value) and time.monotonic() - t < 5.0
        rig.close()
        assert not fake.device.armed and not fake.device._output_nonzero()  # the link loss ramped it down
    finally:
        fake.close()


def _late(delay):
    def fault(line, reply, conn):
        if line.startswith(b"MEAS:RAW?"):
            time.sleep(delay)
        return reply
    return fault


def test_a_late_measurement_reply_is_dropped_and_the_fresh_one_used(twin_cfg):
    fake = FaultyBox(twin_cfg, _late(0.6))
    try:
        with open_rig(_box_cfg(fake.resource, "box.timeout_s=0.4", "box.retries=2")) as rig:
            rig.set_demand(17.0, V, ORDERS)
            with pytest.raises(InstrumentError, match=r"MEAS:RAW\?: no valid reply after 3 attempt"):
                rig.acquire(2)  # every reply is late: bounded, never a stale record
    finally:
        fake.close()


def _refuse_limits(line, reply, conn):
    if line.startswith(b"SOUR:VOLT:LIM "):
        return None
    return reply


def test_an_error_in_syst_err_after_the_setup_is_one_error_naming_the_box(twin_cfg):
    def fault(line, reply, conn):
        if line.startswith(b"OUTP:PROT:WDOG "):
            fake.device.push_error(-222, "watchdog time refused")
        return reply

    fake = FaultyBox(twin_cfg, fault)
    try:
        with pytest.raises(InstrumentError, match=r"box-loopback.*refused the set-up: -222") as ei:
            open_rig(_box_cfg(fake.resource, "box.timeout_s=0.5"))
        assert "\n" not in str(ei.value)
    finally:
        fake.close()


def _interrupting_ramps(device, flag):
    """The box's SOUR:APPL? (the ramp-down of the close) lands three Ctrl+C on the host while
    the host waits for its reply, as a user hammering Ctrl+C would."""
    real = device.execute_parts

    def execute(line):
        if flag.is_set() and b"SOUR:APPL?" in line:
            for _ in range(3):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.05)
        return real(line)

    return execute


def test_ctrl_c_during_the_ramp_down_never_leaves_the_outputs_on(twin_cfg):
    from hbtest.sweep.runner import _close

    flag = threading.Event()
    with BoxServer(twin_cfg, port=0) as srv:
        srv.device.execute_parts = _interrupting_ramps(srv.device, flag)
        rig = open_rig(_box_cfg(srv.resource))
        rig.set_demand(17.0, V, ORDERS)
        assert srv.device.armed and srv.device._output_nonzero()
        flag.set()
        note = _close(rig)
        assert "3 signal(s) (SIGINT, SIGINT, SIGINT) held until the outputs were off" in note
        time.sleep(0.1)
        assert not srv.device.armed and not srv.device._output_nonzero()


def test_an_unexpected_exception_marks_the_store_interrupted_with_one_line(tmp_path, monkeypatch, capsys):
    from hbtest.sweep import stepped
    from hbtest.cli import main

    calls = []
    real = stepped.FamilyRunner.run

    def run_then_fail(self, i, carry):
        calls.append(i)
        if len(calls) == 2:
            raise ZeroDivisionError("float division by zero")  # a bug of hbtest at the second point
        return real(self, i, carry)

    monkeypatch.setattr(stepped.FamilyRunner, "run", run_then_fail)
    store = tmp_path / "s.zarr"
    code = main(["sweep", str(PAPER), "--set", "sweep.points=3", "--store", str(store), "--no-plot"])
    err = capsys.readouterr().err
    assert code == 3
    assert "Traceback" not in err and err.strip().count("\n") == 0, err
    assert "ZeroDivisionError" in err and "hbtest resume" in err
    attrs = RunStore.open(store).attrs
    assert attrs["status"] == "interrupted" and attrs["stop_cause"] == "error"
    assert "ZeroDivisionError: float division by zero" in attrs["stop_message"]
    assert RunStore.open(store).done().tolist() == [True, False, False]
    monkeypatch.setattr(stepped.FamilyRunner, "run", real)
    assert main(["resume", str(store), "--no-plot", "--quiet"]) == 0  # resumable
    assert RunStore.open(store).attrs["status"] == "completed" and all(RunStore.open(store).done())


def test_a_nuisance_list_the_box_refuses_is_one_error_not_a_stale_fit(twin_cfg):
    def fault(line, reply, conn):
        if line.startswith(b"SENS:NUIS 5"):  # the box refuses it (its queue says why)
            fake.device.nuisance = ()
            fake.device.push_error(-222, "nuisance frequencies refused")
        return reply

    fake = FaultyBox(twin_cfg, fault)
    try:
        with open_rig(_box_cfg(fake.resource, "box.timeout_s=1.0")) as rig:
            rig.set_demand(17.0, V, ORDERS)
            rig.acquire_coefficients(2, [1], nuisance_hz=())
            with pytest.raises(InstrumentError, match=r"box-loopback.*did not take SENS:NUIS 50.0.*-222") as ei:
                rig.acquire_coefficients(2, [1], nuisance_hz=(50.0,))
            assert "\n" not in str(ei.value)
    finally:
        fake.close()

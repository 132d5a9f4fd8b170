"""Stateful protocol fuzzing of the served HELIC device over a loopback socket (issue 44).

A hypothesis :class:`RuleBasedStateMachine` plays a hostile v3 host written apart from
hbtest's codec (helic_hosts): SetPar of any parameter with random bytes (right length or
not), with plausible and extreme values (NaN patterns, freq 0 and 1e-30, ramps of 1000
periods), SetBlock and Commit anywhere, StreamSetup of any decimation and count up to
2^32 - 1 started and cut short by the next request, unknown types, garbage bytes, a
confirmed ``mcu_reboot``, and hosts vanishing. After every step: each request got exactly
one reply with its sequence number, its own type or an error frame with a specified code
(1..7); the control thread is alive; each request was answered within REPLY_S.

Seeded: ``derandomize=True``. The default suite runs 25 examples of 20 steps (~5 s); ``-m slow`` 150 of 40 (~30 s).
"""

import socket
import struct
import time

import pytest
from helic_hosts import (
    COMMIT,
    ERROR,
    GET_PAR,
    SET_BLOCK,
    SET_PAR,
    SIZES,
    STATUS,
    STREAM_SETUP,
    STREAM_START,
    STREAM_STOP,
    RawHost,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from served import TWIN

from hbtest.config import load_rig
from hbtest.serve.helic import HelicServer

REPLY_S = 10.0  # s: the longest any request may wait for its reply (a stream cut short, a 10 s ramp simulated)
F32_SPECIAL = [0x7FC00000, 0x7FA00000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0x00000001, 0x80000000]


@pytest.fixture(scope="module")
def server():
    with HelicServer(load_rig(TWIN), port=0, seed=9) as srv:
        yield srv


class HelicFuzz(RuleBasedStateMachine):
    srv: HelicServer

    def __init__(self):
        super().__init__()
        self.host: RawHost | None = None
        self.rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.bind(("127.0.0.1", 0))
        self.rx.setblocking(False)
        self._connect()

    def _connect(self):
        if self.host is not None:
            self.host.close()
        self.host = RawHost(self.srv.port, timeout=REPLY_S)
        self.params = list(self.host.params().items())

    def teardown(self):
        if self.host is not None:
            self.host.close()
        self.rx.close()

    def _ask(self, msg_type: int, payload: bytes) -> None:
        """One request, exactly one well-formed reply; a connection the device closed (after a
        reboot) is opened again."""
        assert self.host is not None
        try:
            seq = self.host.send(msg_type, payload)
            rtype, rseq, body = self.host.reply()
        except (ConnectionError, BrokenPipeError, ConnectionResetError):
            self._connect()
            return
        assert rseq == seq
        assert rtype == msg_type or (rtype == ERROR and len(body) == 2 and 1 <= body[0] <= 7 and body[1] == msg_type)

    @rule(i=st.integers(0, 40), data=st.data())
    def setpar_random_bytes(self, i, data):
        name, (index, t, count, _) = self.params[i % len(self.params)]
        size = SIZES[t] * count
        n = data.draw(st.one_of(st.just(size), st.integers(0, 40)))
        self._ask(SET_PAR, struct.pack("<H", index) + data.draw(st.binary(min_size=n, max_size=n)))

    @rule(name=st.sampled_from(["freq", "table_freq", "ramp_periods", "output_limit", "table_gain", "table_phase"]),
          value=st.one_of(st.sampled_from([0.0, 1e-30, 1000.0, 2499.9, 17.0, 0.5]), st.floats(-1e6, 1e6)))
    def setpar_float(self, name, value):
        index = dict(self.params)[name][0]
        self._ask(SET_PAR, struct.pack("<Hf", index, value))

    @rule(name=st.sampled_from(["forcing_coeffs", "target_coeffs", "forcing2_coeffs"]), k=st.integers(0, 32),
          bits=st.sampled_from(F32_SPECIAL), v=st.floats(-6, 6))
    def setpar_coeffs(self, name, k, bits, v):
        values = [0.0] * 33
        values[k] = v
        raw = bytearray(struct.pack("<33f", *values))
        if k % 3 == 0:
            raw[4 * k:4 * k + 4] = struct.pack("<I", bits)
        self._ask(SET_PAR, struct.pack("<H", dict(self.params)[name][0]) + bytes(raw))

    @rule(name=st.sampled_from(["arm", "diag_reset", "table_mode", "table_interp", "table_mult", "table_trigger"]),
          value=st.integers(0, 2**32 - 1) | st.integers(0, 5))
    def setpar_int(self, name, value):
        self._ask(SET_PAR, struct.pack("<HI", dict(self.params)[name][0], value))

    @rule(offset=st.integers(0, 5000), n=st.integers(0, 300), commit=st.integers(0, 5000))
    def table(self, offset, n, commit):
        index = dict(self.params)["table"][0]
        self._ask(SET_BLOCK, struct.pack("<HI", index, offset) + b"\x00\x00\xc0\x7f" * n)
        self._ask(COMMIT, struct.pack("<HI", index, commit))

    @rule(dec=st.sampled_from([1, 3, 65535]), count=st.sampled_from([1, 50, 2000, 2**32 - 1]),
          ids=st.lists(st.integers(0, 12), min_size=0, max_size=6), stop=st.booleans())
    def stream(self, dec, count, ids, stop):
        self._ask(STREAM_SETUP, struct.pack("<HIB", dec, count, len(ids)) + bytes(ids))
        self._ask(STREAM_START, struct.pack("<H", self.rx.getsockname()[1]))
        self._ask(STREAM_STOP if stop else STATUS, b"")
        try:
            while self.rx.recv(65536):
                pass
        except BlockingIOError:
            pass

    @rule(msg_type=st.integers(0, 254), payload=st.binary(max_size=64))
    def any_type(self, msg_type, payload):
        if msg_type != STREAM_START:
            self._ask(msg_type, payload)

    @rule(junk=st.binary(min_size=1, max_size=64))
    def garbage_then_vanish(self, junk):
        assert self.host is not None
        self.host.sock.sendall(junk)
        self._connect()

    @precondition(lambda self: self.host is not None)
    @rule(now=st.integers(0, 7))
    def reboot(self, now):
        if now:  # one in eight draws: a reboot builds a new twin (about 0.1 s)
            return
        self._ask(SET_PAR, struct.pack("<HI", dict(self.params)["mcu_reboot"][0], 0x52454254))
        self._connect()

    @invariant()
    def serving(self):
        assert self.srv._thread is not None and self.srv._thread.is_alive()
        t0 = time.monotonic()
        self._ask(GET_PAR, struct.pack("<H", dict(self.params)["safety"][0]))
        assert time.monotonic() - t0 < REPLY_S


def _run(server, examples: int, steps: int):
    HelicFuzz.srv = server
    HelicFuzz.TestCase.settings = settings(max_examples=examples, stateful_step_count=steps, deadline=None,
                                           derandomize=True, suppress_health_check=list(HealthCheck))
    HelicFuzz.TestCase().runTest()


def test_a_hostile_host_never_stops_the_served_device(server):
    _run(server, 25, 20)


@pytest.mark.slow
def test_a_hostile_host_never_stops_the_served_device_long(server):
    _run(server, 150, 40)

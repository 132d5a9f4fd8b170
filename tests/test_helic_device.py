"""The served twin as a HELIC-DAQ protocol v3 device (issue 44), over a real loopback socket
with a host written apart from hbtest's codec (helic_hosts): the base registry and source
order of the specification, every refusal's error code, which writes advance ``cmd_epoch``
(as the firmware stages them), ``target_coeffs`` on the output, the table in each mode, and
``mcu_reboot`` restarting the device."""

import math
import struct
import time

import numpy as np
import pytest
from helic_hosts import COMMIT, SET_BLOCK, SET_PAR, STATUS, RawHost, capture, setpar
from served import TWIN

from hbtest.config import load_rig
from hbtest.serve.helic import HelicServer

# the specification's base registry ("Parameter discovery"), in order: name, type, count, writable
BASE = [("firmware", "c", 16, 0), ("experiment", "c", 16, 0), ("sample_freq", "f", 1, 0), ("ticks", "I", 1, 0),
        ("loop_time_last", "I", 1, 0), ("loop_time_max", "I", 1, 0), ("clock_jitter", "I", 1, 0),
        ("overruns", "I", 1, 0), ("tick_timeouts", "I", 1, 0), ("records_dropped", "I", 1, 0), ("freq", "f", 1, 1),
        ("target_coeffs", "f", 33, 1), ("forcing_coeffs", "f", 33, 1), ("table", "f", 4096, 1),
        ("table_len", "H", 1, 0), ("table_freq", "f", 1, 1), ("table_gain", "f", 1, 1), ("table_interp", "I", 1, 1),
        ("table_mode", "I", 1, 1), ("table_mult", "I", 1, 1), ("table_phase", "f", 1, 1),
        ("table_trigger", "I", 1, 1), ("wake_phase_min", "I", 1, 0), ("wake_phase_max", "I", 1, 0),
        ("t_measure_max", "I", 1, 0), ("t_actuate_max", "I", 1, 0), ("t_rest_max", "I", 1, 0),
        ("diag_reset", "I", 1, 1), ("cmd_backlog_max", "I", 1, 0), ("arm", "I", 1, 1), ("safety", "I", 1, 0),
        ("mcu_reboot", "I", 1, 1)]
FS = 5000.0
NAN_BITS = [0x7FC00000, 0x7FA00000, 0x7F800000, 0xFF800000]  # quiet NaN, signalling NaN, +inf, -inf


@pytest.fixture
def host():
    with HelicServer(load_rig(TWIN), port=0, seed=3) as srv:
        h = RawHost(srv.port)
        yield srv, h, h.params()
        h.close()


def test_the_base_registry_and_the_source_order_are_the_specifications(host):
    srv, h, P = host
    assert [(n, t, c, int(w)) for n, (_, t, c, w) in list(P.items())[:32]] == BASE
    assert list(P)[32:] == ["forcing2_coeffs", "ramp_periods", "input_limit", "output_limit"]
    assert h.sources() == ["l1", "l2", "g1", "g2", "target", "forcing", "table", "phase", "out", "out2", "cmd_epoch"]


def _epoch_steps(srv, h, P):
    """(write, cmd_epoch step it causes) for every kind of write."""
    zeros33 = [0.0] * 33
    writes = [("arm 1", SET_PAR, setpar(P, "arm", "I", 1)), ("arm 0", SET_PAR, setpar(P, "arm", "I", 0)),
              ("diag_reset", SET_PAR, setpar(P, "diag_reset", "I", 1)),
              ("table_trigger 0", SET_PAR, setpar(P, "table_trigger", "I", 0)),
              ("SetBlock", SET_BLOCK, struct.pack("<HI2f", P["table"][0], 0, 1.0, 2.0)),
              ("freq", SET_PAR, setpar(P, "freq", "f", 12.0)),
              ("target_coeffs", SET_PAR, setpar(P, "target_coeffs", "33f", *zeros33)),
              ("forcing_coeffs", SET_PAR, setpar(P, "forcing_coeffs", "33f", *zeros33)),
              ("forcing2_coeffs", SET_PAR, setpar(P, "forcing2_coeffs", "33f", *zeros33)),
              ("table_gain", SET_PAR, setpar(P, "table_gain", "f", 0.5)),
              ("table_mode", SET_PAR, setpar(P, "table_mode", "I", 1)),
              ("table_trigger 1", SET_PAR, setpar(P, "table_trigger", "I", 1)),
              ("Commit", COMMIT, struct.pack("<HI", P["table"][0], 2)),
              ("ramp_periods", SET_PAR, setpar(P, "ramp_periods", "f", 0.0))]
    eid = h.sources().index("cmd_epoch")
    last = capture(h, [eid], 2)[1][-1, 0]
    steps = []
    for label, t, payload in writes:
        assert h.code(t, payload) == 0, label
        now = capture(h, [eid], 2)[1][-1, 0]
        steps.append((label, int(now - last)))
        last = now
    return steps


def test_only_queued_writes_advance_cmd_epoch(host):
    """As helic-rt/src/params/groups.rs stages them: arm, diag_reset, table_trigger 0 and
    SetBlock are local; every other write (and a table Commit) is one RtCommand."""
    steps = dict(_epoch_steps(*host))
    assert {w for w, step in steps.items() if step == 0} == {"arm 1", "arm 0", "diag_reset", "table_trigger 0", "SetBlock"}
    assert {w for w, step in steps.items() if step != 1} == {w for w, step in steps.items() if step == 0}


def test_every_refusal_has_the_specified_code(host):
    srv, h, P = host
    t = P["table"][0]
    cases = [(SET_PAR, setpar(P, "freq", "f", FS / 2), 6), (SET_PAR, setpar(P, "freq", "f", -1.0), 6),
             (SET_PAR, setpar(P, "table_freq", "f", FS / 2), 6), (SET_PAR, setpar(P, "table_mode", "I", 5), 6),
             (SET_PAR, setpar(P, "table_interp", "I", 2), 6), (SET_PAR, setpar(P, "table_mult", "I", 0), 6),
             (SET_PAR, setpar(P, "table_phase", "f", 1.0), 6), (SET_PAR, setpar(P, "mcu_reboot", "I", 1), 6),
             (SET_PAR, setpar(P, "mcu_reboot", "I", 0), 6), (SET_PAR, setpar(P, "output_limit", "f", 5.5), 6),
             (SET_PAR, setpar(P, "sample_freq", "f", 1.0), 5), (SET_PAR, struct.pack("<Hf", len(P), 1.0), 3),
             (SET_PAR, struct.pack("<HH", P["freq"][0], 1), 4), (SET_BLOCK, struct.pack("<HIf", t, 4096, 0.0), 4),
             (SET_BLOCK, struct.pack("<HIf", P["freq"][0], 0, 0.0), 3), (COMMIT, struct.pack("<HI", t, 1), 6),
             (11, b"", 2), (128, b"", 2)]
    for bits in NAN_BITS:  # "SetPar rejects non-finite f32", in every f32 parameter
        for name in ("freq", "table_gain", "table_freq", "ramp_periods", "output_limit"):
            cases.append((SET_PAR, struct.pack("<HI", P[name][0], bits), 6))
        for name, n in (("forcing_coeffs", 33), ("target_coeffs", 33), ("forcing2_coeffs", 33), ("input_limit", 4)):
            cases.append((SET_PAR, struct.pack("<H", P[name][0]) + struct.pack(f"<{n - 1}fI", *[0.0] * (n - 1), bits), 6))
    got = [h.code(m, p) for m, p, _ in cases]
    assert got == [want for _, _, want in cases]
    # accepted: freq 0 and 1e-30 (0 <= f < fs / 2), any non-zero arm, a payload on Status, a NaN staged
    assert [h.code(SET_PAR, setpar(P, "freq", "f", f)) for f in (0.0, 1e-30)] == [0, 0]
    assert h.code(SET_PAR, setpar(P, "arm", "I", 2)) == 0 and srv.device.gate.armed
    assert h.code(STATUS, b"xyz") == 0
    assert h.code(SET_BLOCK, struct.pack("<HI2f", t, 0, math.nan, 0.0)) == 0
    assert h.code(COMMIT, struct.pack("<HI", t, 2)) == 6 and h.code(COMMIT, struct.pack("<HI", t, 3)) == 6


def _drive(h, P, **settings):
    for name, (fmt, *v) in settings.items():
        assert h.code(SET_PAR, setpar(P, name, fmt, *v)) == 0, name


def test_target_coeffs_add_to_the_output_after_the_gate(host):
    srv, h, P = host
    tc, fc = [0.0] * 33, [0.0] * 33
    tc[1], fc[16 + 3] = 0.5, 0.25  # a_1 of target: 0.5 cos(theta); b_3 of forcing (index K + 3): 0.25 sin(3 theta)
    _drive(h, P, arm=("I", 1), ramp_periods=("f", 0.0), freq=("f", 20.0), target_coeffs=("33f", *tc),
           forcing_coeffs=("33f", *fc))
    src = h.sources()
    _, v = capture(h, [src.index(n) for n in ("target", "forcing", "table", "phase", "out")], 1000)
    th = 2 * np.pi * v[:, 3]
    np.testing.assert_allclose(v[:, 0], 0.5 * np.cos(th), atol=2e-6)
    np.testing.assert_allclose(v[:, 1], 0.25 * np.sin(3 * th), atol=2e-6)
    np.testing.assert_allclose(v[:, 4], v[:, 0] + v[:, 1] + v[:, 2], atol=2e-6)
    _drive(h, P, arm=("I", 0))
    _, v = capture(h, [src.index("out"), src.index("target")], 200)
    assert not np.any(v[:, 0]) and np.any(v[:, 1])  # disarmed: the programme runs, the output is quiet


def _upload(h, P, table, **settings):
    t = P["table"][0]
    assert h.code(SET_BLOCK, struct.pack("<HI", t, 0) + table.astype("<f4").tobytes()) == 0
    assert h.code(COMMIT, struct.pack("<HI", t, table.size)) == 0
    _drive(h, P, **settings)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
def test_the_table_plays_as_specified_in_each_mode(host, mode):
    """Each mode against the specification's formula over the streamed sample indices and
    master phase: loop at table_freq from sample 0; one-shot one table period from its
    trigger; locked at mult x phase + table_phase; locked one-shot one 1/mult turn from the
    next master wrap. A positive table: non-zero exactly where it plays."""
    srv, h, P = host
    N, g, f = 64, 0.8, 10.0
    table = 1.0 + 0.5 * np.sin(2 * np.pi * np.arange(N) / N)
    _upload(h, P, table, ramp_periods=("f", 0.0), freq=("f", f), table_gain=("f", g), table_freq=("f", 25.0),
            table_interp=("I", 0 if mode == 1 else 1), table_mult=("I", 2), table_phase=("f", 0.25),
            table_mode=("I", mode))
    if mode in (2, 4):
        _drive(h, P, table_trigger=("I", 1))
    src = h.sources()
    idx, v = capture(h, [src.index("table"), src.index("phase")], int(2 * FS / f))
    y, ph = v[:, 0], v[:, 1]
    T = table.astype(np.float32).astype(float)

    def lin(p):
        pos = np.mod(p, 1.0) * N
        i = np.floor(pos).astype(int) % N
        return T[i] + (pos - np.floor(pos)) * (T[(i + 1) % N] - T[i])

    if mode == 0:
        want = np.zeros_like(y)
    elif mode == 1:
        want = g * T[(np.floor(np.mod(idx / FS * 25.0, 1.0) * N).astype(int)) % N]
    elif mode == 2:
        el = (idx - idx[0]) / FS * 25.0
        want = g * lin(el) * (el < 1)
    else:
        want = g * lin(2 * ph + 0.25)
        if mode == 4:
            wrap = int(np.flatnonzero(np.diff(ph) < -0.5)[0]) + 1
            want = want * ((np.arange(y.size) >= wrap) & (np.arange(y.size) < wrap + FS / (2 * f)))
    np.testing.assert_allclose(y, want, atol=2e-5)
    assert np.count_nonzero(y) == {0: 0, 1: y.size, 2: FS / 25.0, 3: y.size, 4: FS / (2 * f)}[mode]


def test_mcu_reboot_with_its_confirmation_restarts_the_device(host):
    srv, h, P = host
    t = P["table"][0]
    _upload(h, P, np.ones(8), freq=("f", 7.0), arm=("I", 1))
    old = srv.device
    assert h.code(SET_PAR, setpar(P, "mcu_reboot", "I", 0x52454254)) == 0
    with pytest.raises((ConnectionError, OSError)):
        h.ask(STATUS)
    deadline = time.monotonic() + 30
    while srv.device is old and time.monotonic() < deadline:
        time.sleep(0.05)
    h2 = RawHost(srv.port)
    try:
        _, st = h2.ask(STATUS)
        uptime_ms = struct.unpack_from("<I", st, 8)[0]
        got = {n: struct.unpack("<" + fmt, h2.ask(3, struct.pack("<H", P[n][0]))[1])[0]
               for n, fmt in (("freq", "f"), ("arm", "I"), ("table_len", "H"), ("safety", "I"))}
        assert got == dict(freq=10.0, arm=0, table_len=0, safety=8) and uptime_ms < 5000
        assert capture(h2, [h2.sources().index("cmd_epoch")], 2)[1][-1, 0] == 0
        assert h2.code(SET_BLOCK, struct.pack("<HI", t, 0) + np.ones(2, "<f4").tobytes()) == 0
    finally:
        h2.close()

"""Keysight 33500B driver against the scripted fake, over a real loopback socket
(hbtest.rig.scpi.link.SocketResource): exact command transcripts (arming order, arbitrary-waveform block, safe ramp-down), bounded
timeouts and malformed replies."""

import time

import numpy as np
import pytest

from hbtest.errors import InstrumentError
from hbtest.rig.scpi import Keysight33500B, ScpiLink, synthesise
from hbtest.rig.scpi.link import open_resource
from hbtest.serve.scripted import Block, ScriptedInstrument, Silent, Step

IDN = "Keysight Technologies,33522B,MY00000001,4.03-1.19-2.00-52-00"


def generator(fake, timeout_ms=300):
    name = "generator (fake)"
    return Keysight33500B(ScpiLink(open_resource(fake.resource_name, name, timeout_ms=timeout_ms), name))


def test_arming_order_is_load_limits_waveform_then_output_on():
    codes = (np.arange(16, dtype=np.int16) - 8) * 4000
    seen = []
    script = [
        "OUTP1:LOAD INF",
        "SOUR1:VOLT:UNIT VPP",
        "SOUR1:VOLT:LIM:HIGH 5.000000",
        "SOUR1:VOLT:LIM:LOW -5.000000",
        "SOUR1:VOLT:LIM:STAT ON",
        Block("SOUR1:DATA:ARB:DAC HB1_0,", lambda b: seen.append(np.frombuffer(b, "<i2").copy())),
        "SOUR1:FUNC:ARB HB1_0",
        "SOUR1:FUNC:ARB:SRAT 16000",
        "SOUR1:FUNC ARB",
        "SOUR1:VOLT:OFFS 0.500000",  # offset first: |0.5| + 0.002/2 < 0 + 2/2
        "SOUR1:VOLT 2.000000",
        "OUTP1 ON",
    ]
    with ScriptedInstrument(script, "33500B") as fake:
        g = generator(fake)
        g.arm_channel(1, 5.0, codes, 16000.0, 2.0, 0.5)
        g.output_on(1)
    np.testing.assert_array_equal(seen[0], codes)


def test_output_on_refused_before_limits():
    with ScriptedInstrument([], "33500B") as fake:
        g = generator(fake)
        with pytest.raises(RuntimeError, match="limits"):
            g.output_on(2)


def test_multisine_block_decodes_to_the_demand():
    """Orders (0, 1, 3): a0 = 0.3 V, X1 = 1 - 0.5i, X3 = 0.2i -> w = cos + 0.5 sin - 0.2 sin 3."""
    N = 64
    orders = (0, 1, 3)
    X = np.array([0.3, 1.0 - 0.5j, 0.2j])
    codes, amplitude, offset = synthesise(X, orders, N)
    th = 2 * np.pi * np.arange(N) / N
    expected = 1.0 * np.cos(th) + 0.5 * np.sin(th) - 0.2 * np.sin(3 * th)  # a_k cos + b_k sin
    assert offset == pytest.approx(0.3, abs=1e-15)
    assert amplitude / 2 == pytest.approx(np.abs(expected).max(), rel=1e-12)
    payload = []
    script = [
        Block("SOUR2:DATA:ARB:DAC HB2_0,", lambda b: payload.append(np.frombuffer(b, "<i2").copy())),
        "SOUR2:FUNC:ARB HB2_0",
        "SOUR2:FUNC:ARB:SRAT 1088",
        "SOUR2:FUNC ARB",
        "SOUR1:FUNC:ARB:SYNC",
    ]
    with ScriptedInstrument(script, "33500B") as fake:
        g = generator(fake)
        g.upload_arb(2, codes, 17.0 * N)
        g.sync_arbs()
    decoded = payload[0] / 32767 * amplitude / 2 + offset
    assert np.abs(decoded - (0.3 + expected)).max() <= 0.5 * (amplitude / 2) / 32767 + 1e-15
    assert np.abs(payload[0]).max() == 32767


def test_safe_ramp_down_sequence():
    script = [
        "OUTP1:LOAD INF", "SOUR1:VOLT:UNIT VPP", "SOUR1:VOLT:LIM:HIGH 5.000000", "SOUR1:VOLT:LIM:LOW -5.000000",
        "SOUR1:VOLT:LIM:STAT ON", Block("SOUR1:DATA:ARB:DAC HB1_0,"), "SOUR1:FUNC:ARB HB1_0",
        "SOUR1:FUNC:ARB:SRAT 1000", "SOUR1:FUNC ARB", "SOUR1:VOLT:OFFS 0.500000", "SOUR1:VOLT 2.000000", "OUTP1 ON",
        # ramp-down over 4 steps: amplitude 2 -> 0.002 Vpp, offset 0.5 -> 0, amplitude first
        "SOUR1:VOLT 1.500500", "SOUR1:VOLT:OFFS 0.375000",
        "SOUR1:VOLT 1.001000", "SOUR1:VOLT:OFFS 0.250000",
        "SOUR1:VOLT 0.501500", "SOUR1:VOLT:OFFS 0.125000",
        "SOUR1:VOLT 0.002000", "SOUR1:VOLT:OFFS 0.000000",
        "OUTP1 OFF", "OUTP2 OFF",
    ]
    sleeps = []
    with ScriptedInstrument(script, "33500B") as fake:
        g = generator(fake)
        g.arm_channel(1, 5.0, np.full(8, 1000, dtype=np.int16), 1000.0, 2.0, 0.5)
        g.output_on(1)
        g.ramp_down((1, 2), duration_s=1.0, steps=4, sleep=sleeps.append)
    assert sleeps == [0.25] * 4


def test_a_query_timeout_is_not_retried_and_names_the_instrument():
    """A query is never sent twice (a late reply to the first would answer the second)."""
    with ScriptedInstrument([Step("*IDN?", Silent)], "33500B") as fake:
        g = generator(fake, timeout_ms=200)
        t0 = time.monotonic()
        with pytest.raises(InstrumentError, match=r"^generator \(fake\): '\*IDN\?' failed: no reply \(timeout\)$"):
            g.identify()
        assert time.monotonic() - t0 < 3.0
        with pytest.raises(InstrumentError, match="out of step since"):
            g.identify()  # the link refuses further queries; nothing is sent


@pytest.mark.parametrize("reply", [b"\xff\xfe\x00garbage\n", b"hello\n", b"1,2\n"])
def test_garbage_reply_is_one_clear_error(reply):
    with ScriptedInstrument([Step("*IDN?", reply)], "33500B") as fake:
        with pytest.raises(InstrumentError, match=r"generator \(fake\)"):
            generator(fake).identify()


def test_error_queue_drained():
    script = [Step("SYST:ERR?", '-222,"Data out of range"'), Step("SYST:ERR?", '+0,"No error"')]
    with ScriptedInstrument(script, "33500B") as fake:
        assert generator(fake).errors() == ['-222,"Data out of range"']

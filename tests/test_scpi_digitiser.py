"""InfiniiVision digitiser driver against the scripted fake over a real loopback socket: preamble +
WORD block -> volts (exact), clipping -> over-range, malformed replies -> one clear error."""

import numpy as np
import pytest

from hbtest.errors import InstrumentError
from hbtest.rig.scpi import InfiniiVision, ScpiLink
from hbtest.rig.scpi.link import open_resource
from hbtest.serve.scripted import ScriptedInstrument, Step

PRE = "+1,+0,+8,+1,+1.00000000E-03,-2.00000000E-03,+0,+3.00000000E-04,+5.00000000E-01,+32768"


def block(codes) -> bytes:
    payload = np.asarray(codes, dtype="<u2").tobytes()
    n = str(len(payload))
    return b"#" + str(len(n)).encode() + n.encode() + payload + b"\n"


def scope(fake, timeout_ms=300):
    name = "digitiser (fake)"
    return InfiniiVision(ScpiLink(open_resource(fake.resource_name, name, timeout_ms=timeout_ms), name), timeout_ms=timeout_ms)


def test_preamble_and_word_data_to_volts_exactly():
    codes = np.array([32768, 32769, 32767, 40000, 20000, 65534, 2, 32768])
    c2 = codes[::-1].copy()
    script = [
        ":WAV:SOUR CHAN1", Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block(codes)),
        ":WAV:SOUR CHAN3", Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block(c2)),
    ]
    with ScriptedInstrument(script, "scope") as fake:
        rec = scope(fake).read([1, 3])
    # v = (code - 32768) * 3e-4 + 0.5 ; t = (i - 0) * 1e-3 - 2e-3
    np.testing.assert_array_equal(rec.volts[1], (codes - 32768) * 3e-4 + 0.5)
    np.testing.assert_array_equal(rec.volts[3], (c2 - 32768) * 3e-4 + 0.5)
    np.testing.assert_array_equal(rec.t, np.arange(8) * 1e-3 - 2e-3)
    assert rec.overrange == frozenset()


@pytest.mark.parametrize("clip", [0x0001, 0xFFFF])
def test_clipped_sample_is_overrange(clip):
    codes = np.full(8, 33000)
    codes[5] = clip
    script = [":WAV:SOUR CHAN2", Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block(codes))]
    with ScriptedInstrument(script, "scope") as fake:
        rec = scope(fake).read([2])
    assert rec.overrange == frozenset({2})


def test_setup_and_digitize_transcript():
    script = [
        "*CLS", ":STOP", ":ACQ:TYPE HRES", ":WAV:FORM WORD", ":WAV:BYT LSBF", ":WAV:UNS ON", ":WAV:POIN:MODE RAW",
        ":TRIG:MODE EDGE", ":TRIG:SWE NORM", ":TRIG:SOUR EXT", ":TRIG:SLOP POS", ":TRIG:LEV 1", ":TIM:REF LEFT",
        Step(":SYST:ERR?", '+0,"No error"'),
        ":CHAN4:DISP ON", ":CHAN4:COUP DC", ":CHAN4:IMP ONEM", ":CHAN4:RANG 24", ":CHAN4:OFFS -1.5",
        ":TIM:RANG 0.25", ":TIM:POS 0.025", ":WAV:POIN 1250", Step(":SYST:ERR?", '+0,"No error"'),
        ":DIG CHAN1,CHAN4", Step("*OPC?", "1"),
    ]
    with ScriptedInstrument(script, "scope") as fake:
        s = scope(fake)
        s.setup(1.0)
        s.configure_channel(4, 24.0, -1.5)
        s.set_record(0.25, 1250)
        s.digitize([1, 4], wait_s=0.3)


@pytest.mark.parametrize(
    "steps, match",
    [
        ([Step(":WAV:PRE?", "1,0,8,1,1e-3")], "expected 10 fields"),
        ([Step(":WAV:PRE?", "0,0,8,1,1e-3,0,0,3e-4,0,128")], "WORD"),
        ([Step(":WAV:PRE?", "1,0,8,1,abc,0,0,3e-4,0,32768")], "non-numeric"),
        ([Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", b"garbage-no-block\n")], "digitiser"),
        ([Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block([1000] * 5))], "5 samples"),
        ([Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block([0] + [1000] * 7))], "holes"),
    ],
)
def test_malformed_replies_raise_instrument_error(steps, match):
    with ScriptedInstrument([":WAV:SOUR CHAN1", *steps], "scope") as fake:
        with pytest.raises(InstrumentError, match=match) as e:
            scope(fake).read([1])
    assert str(e.value).startswith("digitiser (fake)")

"""ScpiRig (kind "scpi"): the example rig file parses; a demand and an acquisition through two
scripted fakes over real pyvisa give the exact command transcripts and exact samples; and, as a
hypothesis property, nothing the driver ever writes can put an output beyond its limit."""

import math
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from hbtest.config import load_rig
from hbtest.errors import ConfigError, LimitExceeded
from hbtest.rig import Rig
from hbtest.rig.scpi import KIND, InfiniiVision, Keysight33500B, ScpiLink, ScpiRig, open as open_scpi
from hbtest.rig.scpi.link import open_resource
from hbtest.rig.scpi.rig import ScpiAcquisition
from hbtest.serve.scripted import Block, Recorder, ScriptedInstrument, Step

RIG = "instruments/lab-33500b-scope.toml"
IDN_GEN = "Keysight Technologies,33522B,MY00000001,4.03"
IDN_DIG = "KEYSIGHT TECHNOLOGIES,DSOX3024T,MY00000002,07.50"
NO_ERROR = '+0,"No error"'


def test_example_rig_file_parses():
    cfg = load_rig(RIG)
    assert cfg.kind == "scpi" and KIND.tables == ("generator", "digitiser")  # [identify] is every kind's
    # the lab template turns the identification on, its record beside the rig file (issue 40)
    assert cfg.identify is not None and cfg.identify.record.name == "lab-33500b-scope.modes.json"
    assert (cfg.identify.voltage_v, cfg.identify.band_hz, cfg.identify.decay_s, cfg.identify.orders) == (2.5, 150.0, 1.5, 24)
    g, d = cfg.spec.generator, cfg.spec.digitiser
    assert g.resource == "TCPIP0::192.0.2.10::5025::SOCKET" and g.output_load == "INF"
    assert [(c.actuator, c.channel, c.voltage_limit_v) for c in g.channels] == [("vertical", 1, 5.0), ("rotational", 2, 4.0)]
    assert [(c.sensor, c.channel, c.range_v) for c in d.channels] == [("l1", 1, 24.0), ("l2", 2, 24.0), ("g1", 3, 24.0), ("g2", 4, 24.0)]
    assert d.trigger == "external" and d.trigger_delay_s == 0.0
    assert d.autorange_headroom == 1.5  # the template's ranges follow the signal (issue 40)


@pytest.mark.parametrize(
    "override, key",
    [
        ("generator.channels[1].voltage_limit_v=6.0", "generator.channels[1].voltage_limit_v"),
        ("generator.channels[1].actuator=vertical", "generator.channels[1].actuator"),
        ("digitiser.channels[3].sensor=l1", "digitiser.channels[3].sensor"),
        ("generator.output_load=50", "generator.output_load"),
        ("digitiser.bogus=1", "digitiser.bogus"),
        ("digitiser.autorange_headroom=1.05", "digitiser.autorange_headroom"),  # would clip on noise alone
        ("identify.voltage_v=6.0", "identify.voltage_v"),  # beyond [rig].voltage_limit_v
        ("identify.band_hz=2000.0", "identify.band_hz"),  # beyond a fifth of the sample rate
        ("identify.bogus=1", "identify.bogus"),
    ],
)
def test_rig_file_mistakes_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_rig(RIG, [override])
    assert e.value.key == key


# -- end to end through two scripted fakes ------------------------------------------------

N = 16  # arb points (overridden for a short transcript)


def codes_of(values):
    return lambda b: np.testing.assert_array_equal(np.frombuffer(b, "<i2"), values)


def block(codes) -> bytes:
    payload = np.asarray(codes, dtype="<u2").tobytes()
    n = str(len(payload))
    return b"#" + str(len(n)).encode() + n.encode() + payload + b"\n"


def arm(ch, lim):
    return [
        f"OUTP{ch}:LOAD INF", f"SOUR{ch}:VOLT:UNIT VPP", f"SOUR{ch}:VOLT:LIM:HIGH {lim}", f"SOUR{ch}:VOLT:LIM:LOW -{lim}",
        f"SOUR{ch}:VOLT:LIM:STAT ON", Block(f"SOUR{ch}:DATA:ARB:DAC HB{ch}_0,", codes_of(np.zeros(N))),
        f"SOUR{ch}:FUNC:ARB HB{ch}_0", f"SOUR{ch}:FUNC:ARB:SRAT 160", f"SOUR{ch}:FUNC ARB",
        f"SOUR{ch}:VOLT 0.002000", f"SOUR{ch}:VOLT:OFFS 0.000000",
    ]


def generator_script():
    """The generator's side of one demand (vertical 0.5 + cos, rotational -0.5 sin, one step)
    between arming and the close's ramp-down."""
    th = 2 * np.pi * np.arange(N) / N
    cos_codes = np.rint(np.cos(th) * 32767)
    msin_codes = np.rint(-np.sin(th) * 32767)
    return [
        Step("*IDN?", IDN_GEN), "*CLS", "FORM:BORD SWAP", "OUTP1 OFF", "OUTP2 OFF",
        "SOUR1:DATA:VOL:CLE", "SOUR2:DATA:VOL:CLE",  # outputs off: a clean volatile memory, names restart
        # arming: load, limits, (zero) waveform on both channels, sync, error queue, outputs on
        *arm(1, "5.000000"), *arm(2, "4.000000"),
        "OUTP:SYNC:SOUR CH1", "OUTP:SYNC ON", "SOUR1:FUNC:ARB:SYNC", Step("SYST:ERR?", NO_ERROR), "OUTP1 ON", "OUTP2 ON",
        # the demand (one step: ramp_periods = 0): vertical 0.5 + cos, rotational -0.5 sin; both
        # waveforms stored first (the reply: taken), then selections and restart back to back, then levels
        Block("SOUR1:DATA:ARB:DAC HB1_1,", codes_of(cos_codes)), Block("SOUR2:DATA:ARB:DAC HB2_1,", codes_of(msin_codes)),
        Step("SYST:ERR?", NO_ERROR), "SOUR1:FUNC:ARB HB1_1", "SOUR2:FUNC:ARB HB2_1", "SOUR1:FUNC:ARB:SYNC",
        "SOUR1:VOLT:OFFS 0.500000", "SOUR1:VOLT 2.000000", "SOUR2:VOLT:OFFS 0.000000", "SOUR2:VOLT 1.000000",
        Step("SYST:ERR?", NO_ERROR),
        # close: safe ramp-down in 2 steps, then outputs off
        "SOUR1:VOLT 1.001000", "SOUR1:VOLT:OFFS 0.250000", "SOUR2:VOLT 0.501000", "SOUR2:VOLT:OFFS 0.000000",
        "SOUR1:VOLT 0.002000", "SOUR1:VOLT:OFFS 0.000000", "SOUR2:VOLT 0.002000", "SOUR2:VOLT:OFFS 0.000000",
        "OUTP1 OFF", "OUTP2 OFF",
    ]


# digitiser: 21 points at 10 ms from the trigger: the two periods asked for and the first sample after them
PRE = "+1,+0,+21,+1,+1.0E-02,+0.0E+00,+0,+1.0E-03,+0.0E+00,+32768"
T_REL = np.arange(21) * 0.01
#: channel c reads c V peak (a cosine at 10 Hz, 1 mV per code)
RAW = {ch: 32768 + np.rint(1000 * ch * np.cos(2 * np.pi * 10 * T_REL)) for ch in (1, 2, 3, 4)}
DIG_SETUP = [
    Step("*IDN?", IDN_DIG), "*CLS", ":STOP", ":ACQ:TYPE HRES", ":WAV:FORM WORD", ":WAV:BYT LSBF", ":WAV:UNS ON",
    ":WAV:POIN:MODE RAW", ":TRIG:MODE EDGE", ":TRIG:SWE NORM", ":TRIG:SOUR EXT", ":TRIG:SLOP POS", ":TRIG:LEV 1",
    ":TIM:REF LEFT", Step(":SYST:ERR?", NO_ERROR),
    *[f":CHAN{c}:{cmd}" for c in (1, 2, 3, 4) for cmd in ("DISP ON", "COUP DC", "IMP ONEM", "RANG 24", "OFFS 0")],
    ":TIM:RANG 0.24", ":TIM:POS 0.024", ":WAV:POIN 24", Step(":SYST:ERR?", NO_ERROR),
]


def record_script(raw):
    """One record's commands and replies: digitise, wait, read four channels."""
    return [":DIG CHAN1,CHAN2,CHAN3,CHAN4", Step("*OPC?", "1"),
            *[s for c in (1, 2, 3, 4) for s in (f":WAV:SOUR CHAN{c}", Step(":WAV:PRE?", PRE), Step(":WAV:DATA?", block(raw[c])))]]


def scripted_rig(gen, dig, *overrides):
    cfg = load_rig(RIG, [f"generator.resource={gen.resource_name}", f"digitiser.resource={dig.resource_name}",
                         f"generator.arb_points={N}", "generator.ramp_down_s=0.0", "generator.ramp_down_steps=2",
                         "generator.timeout_ms=500", "digitiser.timeout_ms=500", "rig.sample_rate_hz=100.0",
                         "identify.band_hz=20.0", *overrides])  # the template's [identify] band must fit the 100 Hz rate
    gl = ScpiLink(open_resource(gen.resource_name, "gen", timeout_ms=500), "gen")
    dl = ScpiLink(open_resource(dig.resource_name, "dig", timeout_ms=500), "dig")
    # a frozen clock: the restart lands at demand phase 0 (no rotation of the waveforms)
    rig = ScpiRig(cfg, Keysight33500B(gl), InfiniiVision(dl, timeout_ms=500), clock=lambda: 0.0, sleep=lambda s: None)
    rig._restart_latency_s = 0.0
    return rig


def test_demand_and_acquisition_end_to_end_exact():
    raw = {c: r.copy() for c, r in RAW.items()}
    raw[4][7] = 0xFFFF  # g2 clipped
    dig_script = [*DIG_SETUP, *record_script(raw)]
    with ScriptedInstrument(generator_script(), "33500B") as gen, ScriptedInstrument(dig_script, "scope") as dig:
        with scripted_rig(gen, dig) as rig:
            assert isinstance(rig, Rig)
            assert rig.describe().details["generator"] == IDN_GEN
            rig.set_demand(10.0, np.array([[0.5, 1.0], [0.0, 0.5j]]), (0, 1), ramp_periods=0)
            acq = rig.acquire(2)
    assert isinstance(acq, ScpiAcquisition)
    assert acq.overrange == ("g2",)
    assert acq.n_periods == 2 and acq.frequency_hz == 10.0
    m = acq.t[0] * 10.0
    assert m == pytest.approx(round(m), abs=1e-6)  # a whole number of periods: phase 0 at the trigger
    np.testing.assert_allclose(acq.t - acq.t[0], T_REL, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(acq.data["l2"], (raw[2] - 32768) * 1e-3)
    assert acq.sample_rate_hz == pytest.approx(100.0)


def test_ranges_follow_the_signal_and_a_clip_on_a_narrowed_channel_is_taken_again():
    """autorange_headroom 1.5: the first record on the rig file's 24 V ranges; before the next,
    each channel's range is 2 x 1.5 x its peak (c V on channel c: 3, 6, 9, 12 V); that record
    clips on channel 2, narrowed below its ceiling: channel 2 back to 24 V and the record taken
    again, which is the one returned (not over-range)."""
    clipped = {c: r.copy() for c, r in RAW.items()}
    clipped[2][7] = 0xFFFF
    dig_script = [*DIG_SETUP, *record_script(RAW),
                  ":CHAN1:RANG 3", ":CHAN2:RANG 6", ":CHAN3:RANG 9", ":CHAN4:RANG 12", *record_script(clipped),
                  ":CHAN2:RANG 24", *record_script(RAW)]
    with ScriptedInstrument(generator_script(), "33500B") as gen, ScriptedInstrument(dig_script, "scope") as dig:
        with scripted_rig(gen, dig, "digitiser.autorange_headroom=1.5") as rig:
            rig.set_demand(10.0, np.array([[0.5, 1.0], [0.0, 0.5j]]), (0, 1), ramp_periods=0)
            rig.acquire(2)
            acq = rig.acquire(2)
            ranges = rig.channel_ranges_v
            retaken = rig.counters["records_retaken_range"]
    assert acq.overrange == () and retaken == 1
    assert ranges == {"l1": 3.0, "l2": 24.0, "g1": 9.0, "g2": 12.0}
    np.testing.assert_array_equal(acq.data["l2"], (RAW[2] - 32768) * 1e-3)


# -- property: nothing beyond a limit is ever written ------------------------------------

class GeneratorModel:
    """Replays a generator transcript: per channel load, limits, amplitude, offset, playing
    waveform and output; asserts the limits on every command."""

    def __init__(self, limits):
        self.limits = limits
        self.ch = {c: dict(load=None, hi=None, lo=None, lim_on=False, amp=0.1, off=0.0, wave=None, out=False) for c in (1, 2)}
        self.waves = {}

    def peak_bound(self, s):
        return abs(s["off"]) + s["amp"] / 2

    def run(self, transcript, blocks, tol=1e-9):
        for i, cmd in enumerate(transcript):
            m = re.match(r"SOUR(\d):DATA:ARB:DAC (\w+),#<block>$", cmd)
            if m:
                codes = blocks[i].astype(float)
                assert np.abs(codes).max(initial=0) <= 32767
                self.waves[m.group(2)] = codes
                continue
            m = re.match(r"(?:SOUR|OUTP)(\d)[: ]", cmd)
            if not m:
                continue
            c = int(m.group(1))
            s = self.ch[c]
            lim = self.limits[c]
            tail = cmd.split(" ", 1)
            head, arg = tail[0], (tail[1] if len(tail) > 1 else "")
            if head == f"OUTP{c}:LOAD":
                s["load"] = arg
            elif head == f"SOUR{c}:VOLT:LIM:HIGH":
                s["hi"] = float(arg)
                assert s["hi"] <= lim + tol
            elif head == f"SOUR{c}:VOLT:LIM:LOW":
                s["lo"] = float(arg)
                assert s["lo"] >= -lim - tol
            elif head == f"SOUR{c}:VOLT:LIM:STAT":
                s["lim_on"] = arg == "ON"
            elif head == f"SOUR{c}:VOLT":
                s["amp"] = float(arg)
            elif head == f"SOUR{c}:VOLT:OFFS":
                s["off"] = float(arg)
            elif head == f"SOUR{c}:FUNC:ARB":
                s["wave"] = self.waves[arg]
            elif head == f"OUTP{c}":
                if arg == "ON":
                    assert s["load"] == "INF" and s["lim_on"] and s["hi"] is not None and s["lo"] is not None and s["wave"] is not None, f"{cmd} before load/limits/waveform"
                s["out"] = arg == "ON"
            if s["lim_on"] or s["out"]:
                # every amplitude/offset state within the limit, whatever the waveform ...
                assert self.peak_bound(s) <= lim + tol, f"{cmd}: |offset| + A/2 = {self.peak_bound(s)} > {lim}"
                # ... and every waveform point
                if s["wave"] is not None:
                    pts = s["off"] + s["amp"] / 2 * s["wave"] / 32767
                    assert np.abs(pts).max() <= lim + tol


def recorder_rig(cfg):
    gen = Recorder(lambda q: {"*IDN?": IDN_GEN, "SYST:ERR?": NO_ERROR}[q])
    dig = Recorder(lambda q: {"*IDN?": IDN_DIG, ":SYST:ERR?": NO_ERROR}[q])
    rig = ScpiRig(cfg, Keysight33500B(ScpiLink(gen, "gen")), InfiniiVision(ScpiLink(dig, "dig")), clock=lambda: 0.0, sleep=lambda s: None)
    return rig, gen


ORDER_SETS = [(1,), (0, 1), (1, 2, 3), (0, 1, 3, 5), (1, 7), (0, 2, 4, 6, 9)]
CFG = load_rig(RIG, ["generator.arb_points=128", "generator.max_ramp_steps=6"])


@st.composite
def demands(draw):
    orders = draw(st.sampled_from(ORDER_SETS))
    f = draw(st.floats(0.5, 200.0))
    n = len(orders)
    out = []
    for _ in range(draw(st.integers(1, 4))):
        V = np.zeros((2, n), dtype=complex)
        for a, lim in enumerate((5.0, 4.0)):
            raw = np.array([complex(draw(st.floats(-1, 1)), 0.0 if k == 0 else draw(st.floats(-1, 1))) for k in orders])
            scale = draw(st.sampled_from([0.0, 0.3, 0.999, 1.0, 1.2]))  # fraction of the limit; >1 must be refused
            s = np.abs(raw).sum()
            V[a] = raw * (scale * lim / s) if s > 1e-9 else np.zeros_like(raw)  # no overflow from subnormal draws
        out.append((draw(st.floats(0.5, 200.0)) if draw(st.booleans()) else f, V, draw(st.sampled_from([0.0, 0.5, 2.0, 10.0]))))
    return orders, out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(demands())
@example(((0, 1), [(10.0, np.array([[4.9, 0], [-3.9, 0]]), 0.0), (10.0, np.array([[0, 4.9], [0, 3.9j]]), 0.0)]))  # DC -> AC in one jump
@example(((0, 1), [(10.0, np.array([[0, 4.9], [0, 3.9j]]), 0.0), (12.0, np.array([[-4.9, 0], [3.9, 0]]), 0.0)]))  # AC -> DC
def test_nothing_beyond_the_limit_is_ever_written(case):
    orders, seq = case
    rig, gen = recorder_rig(CFG)
    for f, V, ramp in seq:
        # the peak bound, with the AC part at least the generator's 1 mV minimum amplitude
        dc = np.abs(V[:, np.asarray(orders) == 0]).sum(axis=1)
        bound = dc + np.maximum(np.abs(V[:, np.asarray(orders) > 0]).sum(axis=1), 0.001)
        n_before = len(gen.transcript)
        if np.any(bound > np.array([5.0, 4.0]) * (1 + 1e-12)):
            with pytest.raises(LimitExceeded):
                rig.set_demand(f, V, orders, ramp_periods=ramp)
            assert len(gen.transcript) == n_before  # refused before anything was sent
        else:
            rig.set_demand(f, V, orders, ramp_periods=ramp)
    rig.close()
    GeneratorModel({1: 5.0, 2: 4.0}).run(gen.transcript, gen.blocks)
    assert [x for x in gen.transcript if re.match(r"OUTP\d ", x)][-2:] == ["OUTP1 OFF", "OUTP2 OFF"]


def test_uploaded_waveform_reproduces_the_demand():
    rig, gen = recorder_rig(CFG)
    rig._restart_latency_s = 0.0  # frozen clock: the restart lands at demand phase 0
    orders = (0, 1, 3)
    V = np.array([[0.4, 1.0 - 1.0j, 0.3j], [-0.2, 0.5, 0.0]])
    rig.set_demand(17.0, V, orders, ramp_periods=2.0)
    model = GeneratorModel({1: 5.0, 2: 4.0})
    model.run(gen.transcript, gen.blocks)
    th = 2 * np.pi * np.arange(128) / 128
    for c in (1, 2):
        s = model.ch[c]
        out = s["off"] + s["amp"] / 2 * s["wave"] / 32767
        want = np.real(sum(X * np.exp(1j * k * th) for k, X in zip(orders, V[c - 1])))
        assert np.abs(out - want).max() < 1e-4  # int16 + 1 uV rounding
        assert s["out"]
    # the ramp from zero: 2 periods at 17 Hz = 0.118 s in 0.05 s steps -> 3 level steps after
    # arming; the shape only scales, so one upload after the arming's zero waveform
    assert sum(1 for x in gen.transcript if x.startswith("SOUR1:DATA:ARB:DAC")) == 1 + 1
    amplitudes = [float(x.split()[1]) for x in gen.transcript if x.startswith("SOUR1:VOLT ")]
    assert len(amplitudes) == 1 + 3 and amplitudes[1] < amplitudes[2] < amplitudes[3]
    # a change of shape (a new harmonic) re-uploads at every step
    n = len(gen.transcript)
    rig.set_demand(17.0, V + np.array([[0, 0, 0.2], [0, 0, 0.1]]), orders, ramp_periods=2.0)
    assert sum(1 for x in gen.transcript[n:] if x.startswith("SOUR1:DATA:ARB:DAC")) == 3


@settings(max_examples=300, deadline=None)
@given(st.floats(1.0, 200.0), st.floats(0.0, 1.0, exclude_max=True), st.floats(0.0, 2.0), st.floats(0.0, 0.6),
       st.floats(-0.25, 0.05), st.integers(0, 50))
def test_the_trigger_edge_is_counted_right_while_the_reply_comes_within_most_of_a_period(f, wait, cmd, reply, land, k0):
    """A record's Sync edge from the host's bounds (ScpiRig.acquire): :DIGitize sent at
    ``lower``, the scope armed a command delay later (any length: a slow host or instrument)
    and triggered at the next edge, the reply a delay of up to 0.6 period after the record's
    end; the edges given up to 0.25 period late (placed by a slow reply) or 0.05 early. Never
    miscounted (rounding to the nearest edge did so past half a period)."""
    from hbtest.rig.scpi.rig import edge_index

    T = 1.0 / f
    t_land = 3.0
    lower = t_land + (k0 + wait) * T
    k = math.ceil((lower + cmd * T - t_land - land * T) / T - 1e-12)  # the first edge after the scope is armed
    upper = t_land + (k + land + reply) * T  # the edge, plus the reply's delay (the record's span taken off)
    assert edge_index(upper, lower, t_land, f, 0.05 * T) == k

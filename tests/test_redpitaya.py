"""Red Pitaya STEMlab 125-14 (rig kind ``redpitaya``): the driver's exact command transcripts
against the scripted fake over a real socket; the simulated board's documented behaviours
(hbtest/serve/scpi/redpitaya.py, numbered there) over real sockets; ``hbtest rig check``,
the limit and the outputs-off on close through the rig; a 2-point sweep through
``hbtest serve --protocol redpitaya`` against the exact structure (slow: the boards run in
real time)."""

import time
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from served import PAPER, QUIET, frf_error, kill_then_resume, served_sweep

from hbtest.cli import main
from hbtest.config import load_rig
from hbtest.errors import InstrumentError, LimitExceeded
from hbtest.method.harmonics import fit
from hbtest.rig import open_rig
from hbtest.rig.scpi.link import ScpiLink, open_resource
from hbtest.rig.scpi.redpitaya import RedPitaya
from hbtest.serve.scpi.redpitaya import BASE_HZ, BUFFER, RingPlant, open_boards
from hbtest.serve.scpi.redpitaya import RedPitaya as SimBoard
from hbtest.serve.scpi.server import ScpiServer, parse_message
from hbtest.rig.virtual import VirtualRig
from hbtest.serve.scripted import ScriptedInstrument

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = ROOT / "instruments" / "redpitaya-loopback.toml"
RATE = BASE_HZ / 16384


def board(fake, timeout_ms=500):
    return on(fake.resource_name, timeout_ms)


def on(resource: str, timeout_ms=500) -> RedPitaya:
    name = "Red Pitaya (test)"
    return RedPitaya(ScpiLink(open_resource(resource, name, timeout_ms=timeout_ms), name))


# -- driver transcripts (replies end in \r\n as the board's do) ---------------------------------
def test_reset_switches_the_outputs_off_before_anything_else():
    script = ["OUTPUT1:STATE OFF", "OUTPUT2:STATE OFF", "GEN:RST", "ACQ:RST", "*CLS"]
    with ScriptedInstrument(script, "RedPitaya") as fake:
        board(fake).reset()


def test_levels_change_in_the_order_that_stays_within_the_larger_bound():
    script = ["SOUR1:VOLT:OFFS 0.200000", "SOUR1:VOLT 0.500000",  # offset first: 0 + 0.5 > 0.2 + 0
              "SOUR1:VOLT 0.100000", "SOUR1:VOLT:OFFS 0.000000"]  # amplitude first: 0.2 + 0.1 <= 0 + 0.5
    with ScriptedInstrument(script, "RedPitaya") as fake:
        rp = board(fake)
        rp.set_level(1, 0.5, 0.2)
        rp.set_level(1, 0.1, 0.0)


def test_acquisition_setup_arming_and_a_binary_read():
    block = b"#14" + np.array([1, -2], "<i2").tobytes() + b"\r\n"
    script = ["ACQ:DEC 16384", "ACQ:AVG OFF", "ACQ:DATA:FORMAT BIN", "ACQ:DATA:UNITS RAW", "ACQ:DATA:BYTE:ORDER LEND",
              "ACQ:SOUR1:GAIN HV", "ACQ:SOUR2:GAIN LV", "ACQ:TRig:DLY 2000000000", "ACQ:START", "ACQ:TRig AWG_PE",
              ("ACQ:TRig:STAT?", "WAIT\r"),  # arm waits for the board to listen
              ("ACQ:TRig:STAT?", "WAIT\r"), ("ACQ:TRig:STAT?", "TD\r"), ("ACQ:TPOS?", "123\r"),
              ("ACQ:SOUR1:DATA:STA:N? 16383,2", block)]
    with ScriptedInstrument(script, "RedPitaya") as fake:
        rp = board(fake)
        rp.setup_acquisition(16384, {2: "LV", 1: "HV"}, 2_000_000_000)
        rp.arm("AWG_PE")
        assert not rp.triggered() and rp.triggered()
        assert rp.position("TPOS") == 123
        np.testing.assert_array_equal(rp.read_codes(1, 16383, 2), [1, -2])


def test_an_acquisition_triggered_before_its_source_fired_is_one_error_naming_the_board():
    script = ["ACQ:START", "ACQ:TRig EXT_PE", ("ACQ:TRig:STAT?", "TD\r")]
    with ScriptedInstrument(script, "RedPitaya") as fake:
        with pytest.raises(InstrumentError, match=r"Red Pitaya \(test\): the acquisition triggered .*EXT_PE"):
            board(fake).arm("EXT_PE")


def test_a_malformed_trigger_state_is_one_error_naming_the_board():
    with ScriptedInstrument([("ACQ:TRig:STAT?", "TRIGGERED\r")], "RedPitaya") as fake:
        with pytest.raises(InstrumentError, match=r"Red Pitaya \(test\): malformed reply to 'ACQ:TRig:STAT\?'"):
            board(fake).triggered()


def test_waveform_samples_outside_the_unit_range_are_never_sent():
    with ScriptedInstrument([], "RedPitaya") as fake:
        with pytest.raises(ValueError):
            board(fake).set_samples(1, np.array([0.0, 1.5]))


# -- the simulated board, behaviour by behaviour (numbers of the simulator's docstring) ----------
@pytest.fixture()
def boards():
    cfg = load_rig(QUIET, [f"rig.sample_rate_hz={RATE!r}"])
    with open_boards(cfg, seed=1) as b:
        yield b


def links(boards):
    return [on(s.resource, timeout_ms=2000).link for s in boards.servers]


def test_sim_identity_errors_and_reset_state(boards):  # 1, 2
    a, _ = links(boards)
    assert a.query("*IDN?").startswith("REDPITAYA,")
    a.write("SOUR1:NOPE 1")
    assert a.query("SYST:ERR?") == '-113,"Undefined header"' and a.query("SYST:ERR?") == '0,"No error"'
    assert (a.query("SOUR1:FUNC?"), a.query("SOUR1:VOLT?"), a.query("SOUR1:FREQ:FIX?")) == ("SINE", "0.8", "1000")
    assert a.query("OUTPUT1:STATE?") == "OFF" and a.query("SOUR1:BURS:STAT?") == "CONTINUOUS"
    for c in ("SOUR1:VOLT 0.2", "SOUR1:FUNC ARBITRARY", "OUTPUT1:STATE ON", "GEN:RST"):
        a.write(c)
    assert (a.query("SOUR1:FUNC?"), a.query("SOUR1:VOLT?"), a.query("OUTPUT1:STATE?")) == ("SINE", "0.8", "OFF")
    for c in ("ACQ:DEC 16384", "ACQ:TRig:DLY 100", "ACQ:RST"):
        a.write(c)
    assert (a.query("ACQ:DEC?"), a.query("ACQ:TRig:DLY?")) == ("1", "0")


def test_sim_refuses_amplitude_plus_offset_beyond_one_volt(boards):  # 3
    a, _ = links(boards)
    a.write("SOUR1:VOLT 0.3")
    a.write("SOUR1:VOLT:OFFS 0.8")
    assert a.query("SYST:ERR?").startswith("-222,") and a.query("SOUR1:VOLT:OFFS?") == "0"
    a.write("SOUR1:VOLT:OFFS -0.7")
    assert a.query("SYST:ERR?") == '0,"No error"' and a.query("SOUR1:VOLT:OFFS?") == "-0.7"


def test_sim_clips_arbitrary_samples_and_keeps_their_count(boards):  # 4
    a, _ = links(boards)
    a.write("SOUR2:TRAC:DATA:DATA 2,-3,0.5")
    assert a.query("SOUR2:TRAC:DATA:DATA?") == "1.000000,-1.000000,0.500000"


def test_sim_updates_in_place_and_a_new_frequency_keeps_the_read_position(boards):  # 4
    sim = boards.boards[0]

    def do(text):
        return sim.execute(parse_message(text, None))

    for c in ("SOUR1:FUNC ARBITRARY", "SOUR1:TRAC:DATA:DATA 0,1,0,-1", "SOUR1:VOLT 0.5", "SOUR1:FREQ:FIX 17",
              "OUTPUT1:STATE ON", "SOUR:TRig:INT"):
        do(c)
    ch = sim.gen[1]
    anchor = ch.anchor_k
    for c in ("SOUR1:VOLT 0.25", "SOUR1:VOLT:OFFS 0.1", "SOUR1:TRAC:DATA:DATA 0,0.5,0,-0.5"):
        do(c)
        assert ch.anchor_k == anchor and ch.anchor_frac == 0.0  # no restart
    with boards.plant.held() as k:  # one instant: the waveform's place before and after the new rate
        before = sim.position(1, k)
        do("SOUR1:FREQ:FIX 18")
        after = sim.position(1, k)
    assert ch.frequency_hz == 18.0 and boards.plant.frequency_hz == 18.0
    assert abs(after - before) < 1e-12 and before > 0


def test_sim_generator_start_triggers_its_own_and_only_a_chained_board(boards):  # 5, 7, 10
    a, b = links(boards)
    assert a.query("ACQ:TRig:STAT?") == "TD"  # not armed
    for x, source in ((a, "AWG_PE"), (b, "EXT_PE")):
        x.write("ACQ:DEC 16384")
        x.write("ACQ:START")
        x.write(f"ACQ:TRig {source}")
    assert a.query("ACQ:TRig:STAT?") == "WAIT"
    a.write("SOUR:TRig:INT")
    assert a.query("ACQ:TRig:STAT?") == "TD" and b.query("ACQ:TRig:STAT?") == "WAIT"  # chain not enabled
    a.write("DAISY:TRig:Out:SOUR DAC")
    a.write("DAISY:TRig:Out:ENable ON")
    a.write("SOUR1:TRig:INT")
    assert a.query("*OPC?") == "1"  # board 1 has done it (another connection may be served first)
    assert b.query("ACQ:TRig:STAT?") == "TD" and a.query("SYST:ERR?") == b.query("SYST:ERR?") == '0,"No error"'


def test_sim_decimation_values(boards):  # 7 (and the plant's rate only)
    a, _ = links(boards)
    for d in ("3", "8"):
        a.write(f"ACQ:DEC {d}")
        assert a.query("SYST:ERR?").startswith("-222,")
    a.write("ACQ:DEC 16384")
    assert a.query("ACQ:DEC?") == "16384" and a.query("SYST:ERR?") == '0,"No error"'


def test_sim_trigger_delay_counts_from_the_buffer_centre(boards):  # 7
    a, _ = links(boards)
    a.write("ACQ:TRig:DLY -8000")  # 192 samples from the trigger on, then writing stops
    a.write("ACQ:START")
    a.write("ACQ:TRig NOW")
    assert a.query("ACQ:TRig:STAT?") == "TD"
    time.sleep(0.1)  # 763 samples at 7.6 kS/s
    assert a.query("ACQ:TRig:FILL?") == "1"
    t, w = int(a.query("ACQ:TPOS?")), int(a.query("ACQ:WPOS?"))
    assert (w - t) % BUFFER == 191


def test_sim_data_units_formats_and_gain_setting(boards):  # 8, 9
    a, _ = links(boards)
    for c in ("ACQ:DEC 16384", "ACQ:START", "ACQ:TRig NOW", "ACQ:DATA:UNITS RAW"):
        a.write(c)
    raw = a.query("ACQ:SOUR1:DATA:STA:N? 0,4")
    assert raw.startswith("{") and raw.endswith("}")
    codes = np.array([int(x) for x in raw[1:-1].split(",")])
    a.write("ACQ:DATA:UNITS VOLTS")
    a.write("ACQ:SOUR1:GAIN HV")  # as the jumper: 20 V full scale
    hv = np.array([float(x) for x in a.query("ACQ:SOUR1:DATA:STA:N? 0,4")[1:-1].split(",")])
    np.testing.assert_allclose(hv, codes / 8192 * 20, atol=5e-7)
    a.write("ACQ:SOUR1:GAIN LV")  # not the jumper: volts scaled as if 1 V full scale, as on the board
    lv = np.array([float(x) for x in a.query("ACQ:SOUR1:DATA:STA:N? 0,4")[1:-1].split(",")])
    np.testing.assert_allclose(lv, codes / 8192, atol=5e-7)
    a.write("ACQ:DATA:FORMAT BIN")
    a.write("ACQ:DATA:UNITS RAW")
    a.write("ACQ:DATA:BYTE:ORDER LEND")
    np.testing.assert_array_equal(a.query_block("ACQ:SOUR1:DATA:STA:N? 0,4", "h"), codes)
    assert a.query_block("ACQ:SOUR2:DATA?", "h").size == BUFFER


def test_sim_whole_buffer_is_oldest_first(boards):  # 8
    a, _ = links(boards)
    for c in ("ACQ:DEC 16384", "ACQ:TRig:DLY 0", "ACQ:DATA:FORMAT BIN", "ACQ:DATA:UNITS RAW", "ACQ:DATA:BYTE:ORDER LEND",
              "ACQ:START", "ACQ:TRig NOW"):
        a.write(c)
    time.sleep(1.2)  # 8192 samples after the trigger: writing has stopped
    assert a.query("ACQ:TRig:FILL?") == "1"
    w = int(a.query("ACQ:WPOS?"))
    whole = a.query_block("ACQ:SOUR1:DATA?", "h")
    part = a.query_block(f"ACQ:SOUR1:DATA:STA:N? {(w + 1) % BUFFER},{BUFFER}", "h")
    np.testing.assert_array_equal(whole, part)


def test_sim_codes_saturate_on_the_lv_jumper_and_the_rig_reports_over_range(tmp_path):  # 9
    cfg = load_rig(QUIET, [f"rig.sample_rate_hz={RATE!r}"])
    plant = RingPlant(VirtualRig(cfg, 1))
    sims = [SimBoard(plant, (0, 1), drives=True, jumpers=("LV", "LV")), SimBoard(plant, (2, 3), drives=False)]
    sims[0].chain.append(sims[1])
    servers = [ScpiServer(b, "127.0.0.1", 0, f"RedPitaya{i}") for i, b in enumerate(sims)]
    for x in servers:
        x.start()
    try:
        text = LOOPBACK.read_text().replace('board = 1\nchannel = 1\njumper = "HV"', 'board = 1\nchannel = 1\njumper = "LV"')
        for default, server in zip((5000, 5001), servers):
            text = text.replace(f"::{default}::", f"::{server.port}::")
        (tmp_path / "lv.toml").write_text(text)
        with open_rig(load_rig(tmp_path / "lv.toml")) as rig:
            rig.set_demand(18.5, np.array([[2.0], [1.0]]), [1], ramp_periods=0.0)
            rig.wait(8)
            acq = rig.acquire(4)
        codes = np.rint(acq.data["l1"] * 8192).astype(int)  # LV: volts = code / 8192
        assert codes.max() == 8191 and codes.min() == -8192
        assert set(acq.overrange) == {"l1", "l2"}  # both jumpers of board 1 on LV (l2's setting says HV)
    finally:
        for x in servers:
            x.stop()


def test_sim_outputs_state_per_channel_and_both(boards):  # 6
    a, _ = links(boards)
    a.write("OUTPUT2:STATE ON")
    assert (a.query("OUTPUT1:STATE?"), a.query("OUTPUT2:STATE?")) == ("OFF", "ON")
    a.write("OUTPUT:STATE OFF")
    assert (a.query("OUTPUT1:STATE?"), a.query("OUTPUT2:STATE?")) == ("OFF", "OFF")


# -- the rig ---------------------------------------------------------------------------------------
def rig_file(boards, tmp_path: Path) -> Path:
    text = LOOPBACK.read_text()
    for default, server in zip((5000, 5001), boards.servers):
        text = text.replace(f"::{default}::", f"::{server.port}::")
    path = tmp_path / "redpitaya.toml"
    path.write_text(text)
    return path


def test_rig_check_reads_every_channel(boards, tmp_path, capsys):
    assert main(["rig", "check", str(rig_file(boards, tmp_path))]) == 0
    out = capsys.readouterr().out
    assert "(kind redpitaya)" in out and all(f"\n{c:>8} " in out for c in ("l1", "l2", "g1", "g2"))


def test_board_2_armed_late_still_takes_the_generator_start(boards, tmp_path, capsys):
    """The two boards are two connections: a write to board 2 is not acted on before a later
    write to board 1 unless the host waits for it. Board 2 here acts on its trigger source
    0.5 s late (a busy board: CI once failed this way under load), so a restart sent without a
    reply from board 2 goes out before board 2 listens on EXT and the chain never triggers it."""
    boards.servers[1].inject(parse_message("ACQ:TRig EXT_PE", None).header, "slow", 0.5)
    assert main(["rig", "check", str(rig_file(boards, tmp_path))]) == 0, capsys.readouterr().err


def test_rig_check_against_an_absent_board_is_one_line_exit_2(boards, tmp_path, capsys):
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: board 2 is absent, board 1 is served
    path = rig_file(boards, tmp_path)
    path.write_text(path.read_text().replace(f"::{boards.servers[1].port}::", f"::{port}::"))
    t0 = time.monotonic()
    assert main(["rig", "check", str(path)]) == 2
    assert time.monotonic() - t0 < 10
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert len(err) == 1 and f"Red Pitaya 2 TCPIP0::127.0.0.1::{port}::SOCKET" in err[0] and "cannot connect" in err[0], err
    assert not boards.boards[0].gen[1].output  # board 1 was never switched on


def test_rig_refuses_a_demand_beyond_the_limit_before_sending_and_switches_off_on_close(boards, tmp_path):
    cfg = load_rig(rig_file(boards, tmp_path))
    first = boards.boards[0]
    with open_rig(cfg) as rig:
        rig.set_demand(17.0, np.array([[0.5], [0.2]]), [1], ramp_periods=0.0)
        assert first.gen[1].output and first.gen[2].output
        sent = len(first.commands)
        with pytest.raises(LimitExceeded, match="'vertical'"):
            rig.set_demand(17.0, np.array([[5.2], [0.2]]), [1])
        assert len(first.commands) == sent
        acq = rig.acquire(2)
        assert set(acq.data) == {"l1", "l2", "g1", "g2"} and acq.t.size == int(np.ceil(2 * RATE / 17.0)) + 1
        assert np.allclose(np.diff(acq.t), 1 / RATE)
    deadline = time.monotonic() + 3.0  # the last writes are on their way when close() returns
    while (first.gen[1].output or first.gen[2].output) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not first.gen[1].output and not first.gen[2].output
    assert max(abs(first.gen[c].amplitude_v) + abs(first.gen[c].offset_v) for c in (1, 2)) == 0.0


@pytest.mark.slow  # ~45 s of real-time boards for 2 points
def test_two_points_through_two_simulated_boards_match_the_exact_structure(tmp_path):
    sets = ["sweep.points=2", "sweep.start_hz=16.0", "sweep.stop_hz=16.5", "test.transient_tolerance_mm=0.1",
            "test.averaging_periods=6"]
    ds = served_sweep(tmp_path, "redpitaya", sets, QUIET)
    assert ds.attrs["status"] == "completed" and bool(ds.converged.all())
    assert ds.attrs["rig_identity"].startswith("redpitaya-loopback")
    err = frf_error(ds, sets, QUIET)
    assert err.max() < 0.01, err  # measured: 0.14-0.23 %


@pytest.mark.slow
def test_boards_killed_mid_sweep_fail_cleanly_and_resume_completes(tmp_path):
    kill_then_resume(tmp_path, "redpitaya", ["sweep.start_hz=16.0", "sweep.stop_hz=16.6", "test.transient_tolerance_mm=0.1",
                                             "test.averaging_periods=6"], points=3, kill_after=1,
                     error=r"hbtest: error: Red Pitaya [12] TCPIP0::127\.0\.0\.1::\d+::SOCKET", deadline_s=600, twin=QUIET)


def test_a_steady_record_through_the_boards_matches_the_twins_exact_steady_state(boards, tmp_path):
    """End to end over the sockets in seconds: a demand through board 1's outputs (x5 amplifier),
    the twin's slowest mode (3.6 /s) decayed to < 1e-3 after 2 s, 10 periods read from both
    boards' buffers: every channel's fundamental (phase from the generator-start trigger,
    volts from the HV codes) equals the twin's exact steady state — at the first frequency and
    after a change of frequency (a restart with the waveform rotated to the predicted phase)."""
    with open_rig(load_rig(rig_file(boards, tmp_path))) as rig:
        for f, V in ((17.0, np.array([[1.5], [-0.8j]])), (16.0, np.array([[-1.0 + 0.5j], [0.6]]))):
            rig.set_demand(f, V, [1], ramp_periods=0.0)
            rig.wait(2.0 * f)
            acq = rig.acquire(10)
            exact = boards.plant.twin.steady_state(f, V, [1]).channels
            for name, x in acq.data.items():
                got = fit(acq.t, x, f, [1], n_periods=10, nuisance_hz=(50.0, 150.0, 250.0)).coefficients[0]
                want = exact[name][0]
                assert abs(got - want) < 0.005 * abs(want), (f, name, got, want)  # measured: lasers <= 5e-5, gauges <= 8e-4


@pytest.mark.slow  # ~2 min: 5 points of real-time boards plus the in-process baseline
def test_paper_sweep_through_two_simulated_boards_matches_the_exact_structure(tmp_path):
    """5 points: converged, FRF within 1 % of the exact structure, rig periods within 1.5x of
    the default in-process run (the transient fit on the twin's exact modes): the loopback file's
    [identify] has the rig measure its modes from free decays before the first point, counted
    in its rig time (`python benchmarks/redpitaya_rig_time.py`: 1.067x over the sweep, 0.997x
    without the identification's 4.9 s; a record costs ~0.03 s beyond its periods, it is cut
    from the live buffer). Until round 20 the baseline was the twin with its modes hidden, the
    rule of a rig without [identify]: against that, this rig now takes 0.13x."""
    # without the twin's scatter between evaluations: the bound compares the two paths' rig time
    # under one settling rule, and the scatter's draws differ between the served and in-process
    # twins (with it, against the modes-hidden baseline: one point at 2.67x, the sweep 1.45x).
    # Measured here in round 20: 1.287x and 0.962x over the sweep in two runs (0.57-1.69x a point)
    quiet = "virtual.demand_scatter.sd_v=[0, 0]"
    sets = ["sweep.points=5"]
    ds = served_sweep(tmp_path, "redpitaya", sets, serve_sets=[quiet])
    assert bool(ds.done.all()) and bool(ds.converged.all())
    err = frf_error(ds, sets)
    assert err.max() < 0.01, err
    ref = tmp_path / "inprocess.zarr"
    assert main(["sweep", str(PAPER), "--store", str(ref), "--no-plot", "--quiet", "--set", "sweep.points=5",
                 "--set", f"rig_set=['{quiet}']"]) == 0
    base = xr.open_zarr(ref, consolidated=False).load()
    assert ds.rig_periods.values.sum() <= 1.5 * base.rig_periods.values.sum(), ds.rig_periods.values / base.rig_periods.values

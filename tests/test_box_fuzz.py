"""Stateful protocol fuzzing of a real ``hbtest serve`` over a loopback socket.

A hypothesis :class:`RuleBasedStateMachine` plays an adversarial host: valid and invalid
staging, applies within and beyond the limits, limit changes, arming, measurements, waits,
garbage bytes, over-long lines, queries with wrong parameters, and hosts leaving abruptly.
After every step the invariants are checked:

- the demand in force (``SOUR:DEM?``) never exceeds the voltage limit in force
  (``SOUR:VOLT:LIM?``) nor the box's maximum;
- every query got exactly one reply (a ``*OPC?`` marker after the step is answered ``1`` and
  nothing else is left on the line);
- the server process is up;
- a fresh host can always take control after the current one goes.

Seeded: ``derandomize=True`` (the examples follow from the test's source). A short run is in
the default suite; ``-m slow`` runs at least 2,000 steps (the count is printed).
"""

import socket
import time
from pathlib import Path

import numpy as np
import pytest
from box_hosts import Host, serve
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
MAX_V = 5.0
STEPS = {"n": 0}


@pytest.fixture(scope="module")
def served():
    p, port = serve("--seed", "11")
    yield p, port
    p.terminate()
    out, _ = p.communicate(timeout=10)
    assert p.returncode == 0 and "Traceback" not in out, out


freqs = st.one_of(st.sampled_from([17.0, 18.5, 40.0, 3.0]), st.floats(1.0, 200.0))
bad_freqs = st.sampled_from(["1e308", "5e-324", "1e-300", "0.001", "2500", "-3", "nan", "inf", "0", "abc"])
volts = st.floats(-7.0, 7.0)
orders_st = st.lists(st.integers(0, 5), min_size=1, max_size=3, unique=True).map(sorted)
queries = st.sampled_from(["*IDN?", "SYST:ERR?", "SYST:ERR:COUN?", "SOUR:DEM?", "SOUR:EPOC?", "OUTP?",
                           "OUTP:PROT:TRIP?", "SOUR:VOLT:LIM?", "SENS:NUIS?", "CONF:CHAN?", "SYST:TIME?"])
bad_queries = st.sampled_from(["MEAS:RAW? 0", "MEAS:RAW? 99999999", "MEAS:COEF? 3", "MEAS:COEF? 2,1,1",
                               "WAIT? -1", "WAIT? 1e9", "SOUR:APPL? 5000", "SOUR:APPL? 2,-1", "*IDN? 1",
                               "FOO:BAR?", "SOUR:APPL? nan", "MEAS:COEF? 2,9999", "SENS:LIM? zz"])
commands = st.sampled_from(["OUTP ON", "OUTP OFF", "OUTP:PROT:CLE", "*RST", "*CLS", "SENS:NUIS 50",
                            "SENS:NUIS NONE", "OUTP:PROT:WDOG 30", "SOUR:VOLT:LIM 9", "SOUR:VOLT:LIM 0",
                            "SENS:LIM l1,-1,1", "SENS:LIM l1,-9.9e37,9.9e37", "SOUR:HARM 1,1", "SOUR:COEF 1,0,0"])


class BoxFuzz(RuleBasedStateMachine):
    port = 0
    process = None

    def __init__(self):
        super().__init__()
        self.host = Host(("127.0.0.1", self.port))
        self.host.send("*RST", "*CLS", "OUTP:PROT:CLE", "OUTP:PROT:WDOG 30")

    # -- rules --------------------------------------------------------------------------------
    @rule(f=freqs, orders=orders_st, data=st.data(), ramp=st.sampled_from(["0", "1", "2", "5.5"]), arm=st.booleans())
    def apply_demand(self, f, orders, data, ramp, arm):
        lines = ["OUTP ON"] if arm else []
        lines += [f"SOUR:FREQ {f!r}", "SOUR:HARM " + ",".join(map(str, orders))]
        for j in (1, 2):
            vals = []
            for k in orders:
                re_, im = data.draw(volts), (0.0 if k == 0 else data.draw(volts))
                vals += [repr(re_), repr(im)]
            lines.append(f"SOUR:COEF {j}," + ",".join(vals))
        self.host.send(*lines, f"SOUR:APPL? {ramp}")
        self.host.reply()

    @rule(f=bad_freqs)
    def stage_a_bad_frequency(self, f):
        self.host.send(f"SOUR:FREQ {f}", "SOUR:HARM 0", "SOUR:COEF 1,0.1,0", "SOUR:COEF 2,0,0")
        r = self.host.ask("SOUR:APPL? 1")
        assert r.startswith(("!-221", "!-222", "!20")), r

    @rule(lim=st.floats(0.05, 6.0))
    def set_limit(self, lim):
        self.host.send(f"SOUR:VOLT:LIM {lim!r}")

    @rule(n=st.integers(1, 4), orders=orders_st)
    def measure(self, n, orders):
        self.host.send(f"MEAS:RAW? {n}", f"MEAS:COEF? {n}," + ",".join(map(str, orders)), "WAIT? 0.5")
        for _ in range(3):
            self.host.reply()

    @rule(q=queries)
    def query(self, q):
        self.host.send(q)
        self.host.reply()

    @rule(q=bad_queries)
    def bad_query(self, q):
        assert self.host.ask(q).startswith("!")

    @rule(c=commands)
    def command(self, c):
        self.host.send(c)

    @rule(junk=st.binary(min_size=1, max_size=80).filter(lambda b: b"\n" not in b))
    def garbage(self, junk):
        self.host.send(junk)
        head = junk.strip().split(b" ", 1)[0].split(b"\t", 1)[0]
        if head.endswith(b"?"):
            self.host.reply()

    @rule()
    def overlong_line(self):
        self.host.s.sendall(b"SOUR:FREQ " + b"7" * 70000 + b"\n")

    @rule(abrupt=st.booleans())
    def host_leaves_and_a_fresh_one_takes_control(self, abrupt):
        if abrupt:
            self.host.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.host.close()
        self.host = Host(("127.0.0.1", self.port))
        r = self.host.ask("*IDN?")  # the fresh host gets control (within the busy wait), not 310
        assert r.startswith("HBTEST,BOX-TWIN"), r
        self.host.send("*CLS", "OUTP:PROT:CLE")

    # -- invariants ---------------------------------------------------------------------------
    @invariant()
    def every_query_got_exactly_one_reply_and_the_server_is_up(self):
        STEPS["n"] += 1
        assert self.process.poll() is None
        assert self.host.ask("*OPC?") == "1"
        self.host.s.settimeout(0.002)
        try:
            extra = self.host.s.recv(1 << 16)
        except (TimeoutError, BlockingIOError):
            extra = b""
        finally:
            self.host.s.settimeout(10.0)
        assert not self.host.buf and not extra, (bytes(self.host.buf[:80]), extra[:80])

    @invariant()
    def the_demand_in_force_is_within_the_limits(self):
        f = self.host.ask("SOUR:DEM?").split(",")
        lim = np.array([float(x) for x in self.host.ask("SOUR:VOLT:LIM?").split(",")])
        assert np.all(lim <= MAX_V)
        n = int(f[2])
        if n == 0:
            return
        x = np.array([float(v) for v in f[3 + n:]]).reshape(2, n, 2)
        peak = np.abs(x[..., 0] + 1j * x[..., 1]).sum(axis=-1)
        # a limit lowered below the demand in force trips the box and ramps it to zero
        assert np.all(peak <= lim * (1 + 1e-12)), (peak, lim)

    def teardown(self):
        self.host.close()


def _run(served, examples, steps):
    BoxFuzz.process, BoxFuzz.port = served
    STEPS["n"] = 0
    test = BoxFuzz.TestCase
    test.settings = settings(max_examples=examples, stateful_step_count=steps, derandomize=True, deadline=None,
                             suppress_health_check=list(HealthCheck))
    test("runTest").runTest()
    return STEPS["n"]


def test_the_box_survives_a_short_stateful_fuzz(served):
    t = time.monotonic()
    n = _run(served, 4, 15)
    assert n >= 30
    assert time.monotonic() - t < 60


@pytest.mark.slow
def test_the_box_survives_a_long_stateful_fuzz(served, capsys):
    n = _run(served, 60, 50)
    with capsys.disabled():
        print(f"\nbox fuzz: derandomize=True, {n} steps, nothing found")
    assert n >= 2000

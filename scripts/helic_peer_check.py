"""Interoperability check of hbtest's HELIC-DAQ code against the public peer's own code
(issue 44; docs/helic.md): the HELIC-DAQ repository's Python host package ``helic_daq``
(``host-python/``) and its localhost protocol-v3 simulator (``python -m helic_daq.sim``).

Usage: ``python scripts/helic_peer_check.py --peer DIR [--commit SHA] [--venv DIR] [--timeout S]``

``DIR`` is a checkout of the peer repository (never copied into hbtest, never a dependency of
hbtest); when it does not exist, the public repository (PEER_URL) is cloned into it, at
``--commit`` if given. Its ``host-python`` is installed editable into a venv of its own (``--venv``, default
``<tmp>/hbtest-helic-peer-venv``; reused while it imports ``helic_daq`` from this checkout).

(ref) the checks of (ii) against the peer simulator itself, which must pass (they encode the
    peer's behaviour; a failure there is a wrong check, not an hbtest defect).
(i) hbtest's host (rig kind ``helic``) against the peer simulator: ``hbtest rig check``; a
    coefficient loopback on ``out`` for both coefficient sets the simulator has
    (``forcing_coeffs``, ``target_coeffs``); a zero-demand record, an arm and a driven record
    with ``retakes = 0`` and nothing stale; one UDP primer per ``StreamStart``; ``close`` leaves
    zero coefficients and the gate disarmed; a ``ramp_parameter`` the device lacks is one line;
    the simulator's experiment has no safety gate: refused without ``ungated = true``.
(ii) the peer's ``Device`` and CLI against ``hbtest serve --protocol helic``: discovery (the
    32-parameter base registry, the source table order), get/set and every refusal's error
    code, ``cmd_epoch`` staging (which writes are queued), capture (plain and decimated),
    ``target_coeffs`` reaching the output, ``stop``, table ``upload`` and playback in each mode,
    ``reboot`` (the served twin restarts cleanly), ``diag-reset``, TCP keep-alive, and that a
    hostile request does not stop the device serving the next host.

One line per check (``PASS``/``FAIL``/``SKIP name: detail``), then ``N passed, M failed``;
exit 1 on any failure, 2 when the set-up itself fails. Everything binds to 127.0.0.1; every
process started is ended before exit.

hbtest is imported from this checkout (``hbtest.config.load_rig``, ``hbtest.rig.open_rig``,
``hbtest.errors.InstrumentError``); the served device (hbtest.serve.helic) is started as
``hbtest serve --protocol helic --rig instruments/virtual-cantilever.toml`` in a process of its
own. The peer's code runs only in its venv (scripts written to a temporary directory: its
``StreamReceiver`` patched to bind 127.0.0.1, an ephemeral port, primers to the device's port).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1] if (HERE.parents[1] / "hbtest").is_dir() else Path.cwd()
sys.path.insert(0, str(ROOT))

TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
LOOPBACK = ROOT / "instruments" / "helic-loopback.toml"
HOST = "127.0.0.1"
PEER_URL = "https://github.com/dawbarton/helic-daq"

RESULTS: list[tuple[str, str, str]] = []


PREFIX = [""]


def report(name: str, ok: bool | None, detail: str = "") -> None:
    name = PREFIX[0] + name
    status = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    RESULTS.append((status, name, detail))
    print(f"{status} {name}" + (f": {detail}" if detail else ""), flush=True)


# -- the peer's venv ---------------------------------------------------------------------------
def peer_venv(peer: Path, venv: Path) -> Path:
    """The venv's python with the peer's host-python installed editable (reused when it
    already imports helic_daq from this checkout)."""
    host_python = (peer / "host-python").resolve()
    if not (host_python / "pyproject.toml").is_file():
        raise SystemExit(f"helic_peer_check: {peer} has no host-python/pyproject.toml (not a HELIC-DAQ checkout)")
    py = venv / "bin" / "python"
    probe = "import helic_daq, os; print(os.path.realpath(helic_daq.__file__))"
    if py.exists():
        r = subprocess.run([str(py), "-c", probe], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip().startswith(str(host_python)):
            return py
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-e", str(host_python)], check=True)
    return py


def peer_checkout(peer: Path, commit: str | None) -> None:
    """Clone PEER_URL into ``peer`` when it does not exist (then check out ``commit``)."""
    if peer.exists():
        return
    subprocess.run(["git", "clone", "--quiet", PEER_URL, str(peer)], check=True)
    if commit:
        subprocess.run(["git", "-C", str(peer), "checkout", "--quiet", commit], check=True)


def peer_commit(peer: Path) -> str:
    r = subprocess.run(["git", "-C", str(peer), "rev-parse", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else "unknown (not a git work tree)"


class Proc:
    """A child process whose first matching output line gives its port; ended by its pid."""

    def __init__(self, argv, pattern: str, cwd=None, env=None, timeout=60.0):
        self.p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, start_new_session=True)
        self.lines: list[str] = []
        found = threading.Event()
        self.port = None

        def read():
            for line in self.p.stdout:
                self.lines.append(line.rstrip("\n"))
                m = re.search(pattern, line)
                if m and self.port is None:
                    self.port = int(m.group(1))
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(timeout) or self.port is None:
            self.stop()
            raise RuntimeError(f"{argv[:4]} did not start: " + " | ".join(self.lines[-5:]))

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self, grace: float = 5.0) -> float | None:
        """SIGTERM, then SIGKILL after ``grace`` s; the seconds it took to end (None: killed)."""
        if self.p.poll() is not None:
            return 0.0
        t0 = time.monotonic()
        self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(grace)
            return time.monotonic() - t0
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None


def hbtest_argv(*args) -> list[str]:
    return [sys.executable, "-c", "import sys; from hbtest.cli import main; sys.exit(main())", *args]


# -- (i) hbtest's host against the peer simulator --------------------------------------------------
def sim_rig_file(tmp: Path, control_port: int, stream_port: int, keep_ramp: bool = False) -> Path:
    """instruments/helic-loopback.toml adapted to the simulator: 8 kHz, its two coefficient
    sets as the two actuators (both reach ``out``), channels on its sources."""
    t = LOOPBACK.read_text()
    t = t.replace("sample_rate_hz = 5000.0", "sample_rate_hz = 8000.0")
    t = re.sub(r"control_port = \d+", f"control_port = {control_port}", t)
    t = re.sub(r"stream_port = \d+", f"stream_port = {stream_port}", t)
    t = t.replace('rotational = "forcing2_coeffs"', 'rotational = "target_coeffs"')
    if not keep_ramp:
        t = re.sub(r'ramp_parameter = "[^"]*"', 'ramp_parameter = ""', t)
    t = re.sub(r'input_limit_parameter = "[^"]*"', 'input_limit_parameter = ""', t)
    t = re.sub(r"ungated = \w+", "ungated = true  # pico2w-rig: no safety gate", t)
    for ch, src in (("l1", "laser"), ("l2", "out"), ("g1", "target"), ("g2", "forcing")):
        t = re.sub(rf'(\[helic\.channels\.{ch}\][^\n]*\n)source = "{ch}"', rf'\1source = "{src}"', t)
    path = tmp / ("peer-sim-shipped-ramp.toml" if keep_ramp else "peer-sim.toml")
    path.write_text(t)
    return path


def count_datagrams(sock: socket.socket) -> int:
    sock.settimeout(0.2)
    n = 0
    while True:
        try:
            sock.recvfrom(2048)
            n += 1
        except (TimeoutError, socket.timeout):
            return n


def check_rig_files(sim_port: int, primer_port: int, tmp: Path, timeout: float) -> Path:
    """``hbtest rig check`` exits 0 on the adapted rig file; the shipped ``ramp_parameter``
    (which the simulator lacks) is one error line naming file and key; without ``ungated =
    true`` a drive is refused in one line (the simulator's pico2w-rig has no safety gate)."""
    import numpy as np

    from hbtest.config import load_rig
    from hbtest.errors import InstrumentError
    from hbtest.rig import open_rig

    path = sim_rig_file(tmp, sim_port, primer_port)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    r = subprocess.run(hbtest_argv("rig", "check", str(path)), cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    report("i.rig-check", r.returncode == 0 and "pico2w-rig" in r.stdout,
           f"exit {r.returncode}" + ("" if r.returncode == 0 else ": " + (r.stderr or r.stdout).strip()[-300:]))
    shipped = sim_rig_file(tmp, sim_port, primer_port, keep_ramp=True)
    r = subprocess.run(hbtest_argv("rig", "check", str(shipped)), cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=timeout)
    err = r.stderr.strip().splitlines()
    one_line = r.returncode == 2 and len(err) == 1 and "helic.ramp_parameter: " in err[0] and str(shipped) in err[0]
    report("i.missing-ramp-parameter-is-one-line", one_line, f"exit {r.returncode}; " + (err[-1][:160] if err else "(no stderr)"))
    with open_rig(load_rig(path, ["helic.ungated=false"])) as rig:
        try:
            rig.set_demand(10.0, np.array([[0.5 + 0j], [0j]]), [1], ramp_periods=0.0)
            report("i.ungated-refused-by-default", False, "driven without ungated = true")
        except InstrumentError as e:
            report("i.ungated-refused-by-default", "no safety gate" in str(e) and "\n" not in str(e), str(e)[-110:])
    return path


def check_loopback(path: Path) -> None:
    """A fundamental and a 3rd harmonic in each coefficient set come back on ``out``."""
    import numpy as np

    from hbtest.config import load_rig
    from hbtest.rig import open_rig

    with open_rig(load_rig(path)) as rig:
        f, orders = 10.0, np.array([1, 3])
        for row, label in ((0, "forcing_coeffs"), (1, "target_coeffs")):
            V = np.zeros((2, 2), complex)
            V[row] = [0.8 - 0.3j, 0.2 + 0.1j]
            rig.set_demand(f, V, orders, ramp_periods=0.0)
            a = rig.acquire(4)
            t = np.asarray(a.t)
            expect = sum((V[row, j] * np.exp(2j * np.pi * k * f * t)).real for j, k in enumerate(orders))
            err_ = float(np.max(np.abs(np.asarray(a.data["l2"]) - expect)))
            report(f"i.loopback-{label}-on-out", err_ < 1e-6, f"max |out - demand| = {err_:.3g} V")


def check_arm_after_record(path: Path, primer: socket.socket) -> None:
    """A zero-demand record, an arm and a driven record with ``retakes = 0``; one primer per
    ``StreamStart`` (counted on hbtest's ControlLink.request)."""
    import numpy as np

    from hbtest.config import load_rig
    from hbtest.errors import InstrumentError
    from hbtest.rig import open_rig

    count_datagrams(primer)
    rig = open_rig(load_rig(path, ["helic.retakes=0"]))
    starts, request = [0], rig.link.request

    def counting(msg_type, *a, **k):
        starts[0] += int(msg_type == 8)  # StreamStart
        return request(msg_type, *a, **k)

    rig.link.request = counting
    try:
        rig.set_demand(10.0, np.zeros((2, 1)), [1], ramp_periods=0.0)
        rig.acquire(5)
        rig.set_demand(10.0, np.array([[0.5 + 0j], [0j]]), [1], ramp_periods=0.0)
        rig.acquire(5)
        report("i.arm-after-first-record-retakes-0", not any(rig.counters.values()), f"counters {rig.counters}")
    except InstrumentError as e:
        report("i.arm-after-first-record-retakes-0", False, f"{e}; counters {rig.counters}")
    finally:
        rig.close()
    primers = count_datagrams(primer)
    report("i.primer-before-each-stream-start", primers == starts[0] > 0,
           f"{primers} primer datagrams for {starts[0]} StreamStart requests")


def part_i(py: Path, tmp: Path, timeout: float) -> None:
    """hbtest's host against the peer simulator (a socket of ours stands in for the device's
    stream port: it counts the primers)."""
    sim = Proc([str(py), "-m", "helic_daq.sim", "--host", HOST, "--port", "0"],
               r"listening on [\d.]+:(\d+)", timeout=timeout)
    primer = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    primer.bind((HOST, 0))
    try:
        path = check_rig_files(sim.port, primer.getsockname()[1], tmp, timeout)
        check_loopback(path)
        check_arm_after_record(path, primer)
        state = peer_json(py, "state", sim.port, timeout=timeout)
        zero = all(v == 0 for v in state["forcing_coeffs"] + state["target_coeffs"])
        report("i.close-leaves-zero-coefficients-and-disarmed", zero and state["arm"] == 0 and not state["safety"] & 1,
               f"coefficients zero {zero}, arm {state['arm']}, safety {state['safety']}")
    finally:
        primer.close()
        sim.stop()


# -- (ii) the peer's Device and CLI against hbtest serve --protocol helic -------------------------
PEER_LOOPBACK = r'''
"""Imported first by the driver and the CLI wrapper in the peer's venv. The peer's receive
socket binds 0.0.0.0:2351 and primes port 2351 by default: here 127.0.0.1, an ephemeral port,
and the primer to the device's stream port ($HELIC_PEER_STREAM_PORT, else the peer's default)."""
import os
import helic_daq.stream as _stream
import helic_daq.device as _device
from helic_daq import protocol

STREAM_PORT = int(os.environ.get("HELIC_PEER_STREAM_PORT") or 0) or protocol.STREAM_PORT
_init = _stream.StreamReceiver.__init__
def _loopback(self, port=0, bind="127.0.0.1", timeout=2.0):
    _init(self, port=0, bind="127.0.0.1", timeout=timeout)
_stream.StreamReceiver.__init__ = _loopback
_stream.StreamReceiver.prime.__defaults__ = (STREAM_PORT,)
_device.StreamReceiver = _stream.StreamReceiver
'''

PEER_DRIVER = r'''
"""Runs inside the peer's venv: its Device against a v3 device on loopback."""
import peer_loopback  # noqa: F401 - first: the receive socket on loopback
import json, math, struct, subprocess, sys, time
import numpy as np
from helic_daq import protocol
from helic_daq.device import Device, DeviceError

BASE = [("firmware", "c", 16, 0), ("experiment", "c", 16, 0), ("sample_freq", "f", 1, 0), ("ticks", "I", 1, 0),
        ("loop_time_last", "I", 1, 0), ("loop_time_max", "I", 1, 0), ("clock_jitter", "I", 1, 0),
        ("overruns", "I", 1, 0), ("tick_timeouts", "I", 1, 0), ("records_dropped", "I", 1, 0),
        ("freq", "f", 1, 1), ("target_coeffs", "f", None, 1), ("forcing_coeffs", "f", None, 1),
        ("table", "f", 4096, 1), ("table_len", "H", 1, 0), ("table_freq", "f", 1, 1), ("table_gain", "f", 1, 1),
        ("table_interp", "I", 1, 1), ("table_mode", "I", 1, 1), ("table_mult", "I", 1, 1),
        ("table_phase", "f", 1, 1), ("table_trigger", "I", 1, 1), ("wake_phase_min", "I", 1, 0),
        ("wake_phase_max", "I", 1, 0), ("t_measure_max", "I", 1, 0), ("t_actuate_max", "I", 1, 0),
        ("t_rest_max", "I", 1, 0), ("diag_reset", "I", 1, 1), ("cmd_backlog_max", "I", 1, 0), ("arm", "I", 1, 1),
        ("safety", "I", 1, 0), ("mcu_reboot", "I", 1, 1)]


def out(name, ok, detail=""):
    print(json.dumps(dict(name=name, ok=None if ok is None else bool(ok), detail=str(detail))), flush=True)


def code_of(fn):
    """0 when accepted, else the device's error code (a host-side refusal: its message)."""
    try:
        fn()
        return 0
    except DeviceError as e:
        return e.code if e.code is not None else f"host: {e}"


def state(port):
    with Device("127.0.0.1", port) as d:
        print(json.dumps({n: d.get_parameter(n) for n in ("forcing_coeffs", "target_coeffs", "arm", "safety")}))


def setpar(d, name, fmt, *values):
    """A raw SetPar of ``values`` packed as ``fmt`` (no host-side checks), resolved when called."""
    def send():
        p = d.parameter(name)
        d._request(protocol.MsgType.SET_PAR, struct.pack("<H", p.index) + struct.pack(fmt, *values))
    return send


def epoch(d):
    return int(d.capture(["cmd_epoch"], samples=4, port=0)["cmd_epoch"][-1])


def interp(table, theta, hold):
    pos = np.mod(theta, 1.0) * len(table)
    i = np.floor(pos).astype(int) % len(table)
    if hold:
        return table[i]
    return table[i] + (pos - np.floor(pos)) * (table[(i + 1) % len(table)] - table[i])


SECTIONS = []


def section(fn):
    SECTIONS.append(fn)
    return fn


def device(port):
    d = Device("127.0.0.1", port)
    ctx = {}
    for fn in SECTIONS:
        try:
            fn(d, ctx)
        except Exception as x:  # one section's failure is one line; the next section runs
            out(f"ii.{fn.__name__}", False, f"{type(x).__name__}: {x}")
    d.close()


@section
def discovery(d, ctx):
    st = d.status()
    names = {p.name: p for p in d.params}
    missing = [n for n, *_ in BASE if n not in names]
    wrong = [n for n, t, c, w in BASE if n in names and (names[n].type_code != t or (c and names[n].count != c)
                                                        or names[n].writable != bool(w))]
    out("ii.discovery-base-registry", st["protocol_version"] == 3 and not missing and not wrong
        and len(d.params) == st["n_params"], f"{len(d.params)} parameters; missing {missing}; wrong type/access {wrong}")
    srcs = [s.name for s in d.sources]
    order = all(x in srcs for x in ("target", "forcing", "table", "phase")) and srcs[-1] == "cmd_epoch" \
        and srcs.index("target") < srcs.index("forcing") < srcs.index("table") < srcs.index("phase") < len(srcs) - 2
    out("ii.discovery-source-order", order, ", ".join(srcs))
    ctx.update(fs=st["sample_rate"], srcs=srcs, names=names, inp=srcs[0],
               outputs=srcs[srcs.index("phase") + 1:-1] if "phase" in srcs else [])


@section
def get_set(d, ctx):
    d.set_parameter("freq", 12.5)
    out("ii.get-set-freq", d.get_parameter("freq") == 12.5, d.get_parameter("freq"))
    code = code_of(lambda: d.set_parameter("freq", 0.0))
    out("ii.set-freq-0-accepted", code == 0 and d.get_parameter("freq") == 0.0, f"code {code}")


@section
def refusals(d, ctx):
    """The error code of every refusal ("Control channel"; SetPar rejects non-finite f32)."""
    fs, srcs, names = ctx["fs"], ctx["srcs"], ctx["names"]
    n = names["forcing_coeffs"].count if "forcing_coeffs" in names else 33
    cases = {
        "freq=fs/2": (setpar(d, "freq", "<f", fs / 2), 6), "freq=-1": (setpar(d, "freq", "<f", -1.0), 6),
        "freq=nan": (setpar(d, "freq", "<f", math.nan), 6), "freq=inf": (setpar(d, "freq", "<f", math.inf), 6),
        "forcing_coeffs nan": (setpar(d, "forcing_coeffs", f"<{n}f", math.nan, *[0.0] * (n - 1)), 6),
        "forcing_coeffs -inf": (setpar(d, "forcing_coeffs", f"<{n}f", 0.0, -math.inf, *[0.0] * (n - 2)), 6),
        "target_coeffs nan": (setpar(d, "target_coeffs", f"<{n}f", *[0.0] * (n - 1), math.nan), 6),
        "table_gain inf": (setpar(d, "table_gain", "<f", math.inf), 6),
        "table_mode 5": (setpar(d, "table_mode", "<I", 5), 6), "table_interp 2": (setpar(d, "table_interp", "<I", 2), 6),
        "table_mult 0": (setpar(d, "table_mult", "<I", 0), 6), "table_phase 1.0": (setpar(d, "table_phase", "<f", 1.0), 6),
        "mcu_reboot 1": (setpar(d, "mcu_reboot", "<I", 1), 6), "mcu_reboot 0": (setpar(d, "mcu_reboot", "<I", 0), 6),
        "read-only sample_freq": (setpar(d, "sample_freq", "<f", 1.0), 5),
        "bad index": (lambda: d._request(protocol.MsgType.SET_PAR, struct.pack("<Hf", len(d.params), 1.0)), 3),
        "bad length": (lambda: d._request(protocol.MsgType.SET_PAR, struct.pack("<HH", names["freq"].index, 1)), 4),
        "GetPar table": (lambda: d._request(protocol.MsgType.GET_PAR, struct.pack("<H", names["table"].index)), 4),
        "GetParams beyond": (lambda: d._request(protocol.MsgType.GET_PARAMS, struct.pack("<H", len(d.params) + 1)), 3),
        "GetParams 3 bytes": (lambda: d._request(protocol.MsgType.GET_PARAMS, b"\0\0\0"), 4),
        "unknown type 11": (lambda: d._request(11), 2), "BrokerInfo 128": (lambda: d._request(128), 2),
        "StreamSetup decimation 0": (lambda: d._request(protocol.MsgType.STREAM_SETUP, struct.pack("<HIBB", 0, 10, 1, 0)), 6),
        "StreamSetup no source": (lambda: d._request(protocol.MsgType.STREAM_SETUP, struct.pack("<HIB", 1, 10, 0)), 6),
        "StreamSetup source id": (lambda: d._request(protocol.MsgType.STREAM_SETUP, struct.pack("<HIBB", 1, 10, 1, len(srcs))), 6),
        "Commit 1 value": (lambda: d._request(protocol.MsgType.COMMIT, protocol.encode_commit(names["table"].index, 1)), 6),
        "SetBlock beyond": (lambda: d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(names["table"].index, 4096, b"\0" * 4)), 4),
        "SetBlock 3 bytes": (lambda: d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(names["table"].index, 0, b"\0" * 3)), 4),
        "SetBlock not table": (lambda: d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(names["freq"].index, 0, b"\0" * 4)), 3),
    }
    bad = {}
    for k, (fn, want) in cases.items():
        try:
            got = code_of(fn)
        except Exception as x:  # e.g. a parameter the device lacks
            got = f"{type(x).__name__}: {x}"
        if got != want:
            bad[k] = (got, want)
    bad = {k: v for k, v in bad.items() if v[0] != v[1]}
    out("ii.refusals-error-codes", not bad, "; ".join(f"{k}: got {g}, want {w}" for k, (g, w) in bad.items()))
    for name in ("forcing_coeffs", "target_coeffs"):  # a value accepted that should not have been: undo it
        if name in names:
            d.set_parameter(name, [0.0] * n)
    d.set_parameter("freq", 10.0)


@section
def commit_non_finite(d, ctx):
    """SetBlock stages any f32 (helic-rt TableGroup::set_block); Commit refuses non-finite."""
    i = ctx["names"]["table"].index
    staged = code_of(lambda: d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(i, 0, struct.pack("<2f", math.nan, 0.0))))
    committed = code_of(lambda: d._request(protocol.MsgType.COMMIT, protocol.encode_commit(i, 2)))
    out("ii.commit-non-finite-refused", staged == 0 and committed == 6,
        f"SetBlock NaN: code {staged} (want 0), Commit: code {committed} (want 6)")
    d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(i, 0, struct.pack("<2f", 0.0, 0.0)))

@section
def cmd_epoch_staging(d, ctx):
    """Queued writes advance cmd_epoch by one, local ones not at all (helic-rt params/groups.rs)."""
    fs, names = ctx["fs"], ctx["names"]
    n = names["forcing_coeffs"].count
    d.set_parameter("freq", 10.0)
    steps = []
    e = epoch(d)
    for label, action, want in [
        ("arm 1", lambda: d.set_parameter("arm", 1), 0), ("diag_reset 1", lambda: d.set_parameter("diag_reset", 1), 0),
        ("table_trigger 0", lambda: d.set_parameter("table_trigger", 0), 0),
        ("SetBlock", lambda: d._request(protocol.MsgType.SET_BLOCK, protocol.encode_set_block(names["table"].index, 0, struct.pack("<2f", 0.0, 0.0))), 0),
        ("refused freq", lambda: code_of(setpar(d, "freq", "<f", fs)), 0),
        ("freq", lambda: d.set_parameter("freq", 10.0), 1), ("forcing_coeffs", lambda: d.set_parameter("forcing_coeffs", [0.0] * n), 1),
        ("target_coeffs", lambda: d.set_parameter("target_coeffs", [0.0] * n), 1),
        ("table_gain", lambda: d.set_parameter("table_gain", 1.0), 1), ("table_trigger 1", lambda: d.set_parameter("table_trigger", 1), 1),
        ("Commit", lambda: d._request(protocol.MsgType.COMMIT, protocol.encode_commit(names["table"].index, 2)), 1),
        ("arm 0", lambda: d.set_parameter("arm", 0), 0)]:
        try:
            action()
            e2 = epoch(d)
            steps.append((label, (e2 - e) % (1 << 24), want))
            e = e2
        except DeviceError as x:
            steps.append((label, f"refused: {x}", want))
    wrong = [f"{l}: +{g} (want +{w})" for l, g, w in steps if g != w]
    out("ii.cmd-epoch-staging", not wrong, "; ".join(wrong) or "local: arm, diag_reset, table_trigger 0, SetBlock; queued: the rest")

@section
def capture(d, ctx):
    fs, inp = ctx["fs"], ctx["inp"]
    d.set_parameter("freq", 10.0)
    c1 = d.capture([inp, "phase", "cmd_epoch"], samples=1000, port=0)
    out("ii.capture-plain", len(c1[inp]) == 1000 and np.all(np.diff(c1["index"]) == 1) and c1["lost_packets"] == 0,
        f"{len(c1[inp])} records, index steps {set(np.diff(c1['index']).tolist())}")
    c4 = d.capture([inp, "phase"], samples=500, decimation=4, port=0)
    step = np.mod(np.diff(c4["phase"].astype(float)), 1.0)
    out("ii.capture-decimated", len(c4[inp]) == 500 and np.all(np.diff(c4["index"]) == 4)
        and np.max(np.abs(step - 4 * 10.0 / fs)) < 1e-5, f"{len(c4[inp])} records, phase step {step.mean():.6g}")

@section
def target_coeffs_reach_the_output(d, ctx):
    """Pass-through control: out = target + forcing + table (user guide, "Arbitrary waveform tables")."""
    srcs, outputs, n = ctx["srcs"], ctx["outputs"], ctx["names"]["forcing_coeffs"].count
    d.set_parameter("arm", 1)
    tc = [0.0] * n
    tc[1] = 0.5
    d.set_parameter("target_coeffs", tc)
    if outputs and "target" in srcs:
        c = d.capture(["target", "forcing", "table", "phase", outputs[0]], samples=2000, port=0)
        want = 0.5 * np.cos(2 * np.pi * c["phase"].astype(float))
        e_t = float(np.max(np.abs(c["target"] - want)))
        e_o = float(np.max(np.abs(c[outputs[0]] - (c["target"] + c["forcing"] + c["table"]))))
        out("ii.target-coeffs-reach-the-output", e_t < 1e-4 and e_o < 1e-4, f"target err {e_t:.3g}, {outputs[0]} err {e_o:.3g}")
    else:
        out("ii.target-coeffs-reach-the-output", False, f"no target/output sources ({srcs})")
    d.set_parameter("target_coeffs", [0.0] * n)
    d.set_parameter("arm", 0)

@section
def tables(d, ctx):
    """Upload and playback in each mode (a strictly positive table: nonzero where it plays)."""
    fs = ctx["fs"]
    N = 256
    table = (1.0 + 0.5 * np.sin(2 * np.pi * np.arange(N) / N)).astype(np.float32)
    f, g = 10.0, 0.8
    d.set_parameter("freq", f)
    for mode, kw in [("off", {}), ("loop", dict(freq=25.0, interpolation="hold")), ("one-shot", dict(freq=40.0)),
                     ("locked", dict(mult=2, phase=0.25)), ("locked-one-shot", dict(mult=2))]:
        try:
            e0 = epoch(d)
            d.upload_table(table, gain=g, mode=mode, **kw)
            c = d.capture(["table", "phase", "cmd_epoch"], samples=int(2 * fs / f), port=0)
        except DeviceError as x:
            out(f"ii.table-{mode}", False, f"refused: {x}")
            continue
        y, ph = c["table"].astype(float), c["phase"].astype(float)
        nz = np.flatnonzero(np.abs(y) > 1e-6)
        detail, ok = "", False
        if mode == "off":
            ok, detail = nz.size == 0, f"{nz.size} nonzero samples"
        elif mode == "loop":
            member = np.min(np.abs(y[:, None] - g * table[None, :].astype(float)), axis=1).max()
            k = c["index"].astype(float) / fs
            A = np.stack([np.ones_like(k), np.cos(2 * np.pi * 25.0 * k), np.sin(2 * np.pi * 25.0 * k)], 1)
            coef, *_ = np.linalg.lstsq(A, y, rcond=None)
            amp = float(np.hypot(coef[1], coef[2]))
            ok = member < 1e-5 and abs(amp - 0.5 * g) < 0.02 * g
            detail = f"hold values off the table by {member:.2g}; 25 Hz amplitude {amp:.4g} (want {0.5 * g:g})"
        elif mode == "one-shot":
            period = fs / 40.0
            ok = nz.size > 0 and 0.5 * period <= nz.size <= period + 2 and np.all(np.diff(nz) == 1)
            detail = f"{nz.size} contiguous samples played (one table period = {period:g})"
        elif mode == "locked":
            want = g * interp(table.astype(float), 2 * ph + 0.25, False)
            err = float(np.max(np.abs(y - want)))
            ok, detail = err < 1e-4, f"max |table - gain*table(2 phase + 0.25)| = {err:.3g}"
        else:
            period = fs / (2 * f)
            starts_at_wrap = nz.size > 0 and nz[0] > 0 and (ph[nz[0]] < ph[nz[0] - 1] or ph[nz[0]] < 2 * f / fs)
            ok = starts_at_wrap and abs(nz.size - period) <= 2 and np.all(np.diff(nz) == 1)
            detail = f"{nz.size} samples from index {nz[0] if nz.size else None} (want {period:g} from a master wrap)"
        tl = d.get_parameter("table_len")
        out(f"ii.table-{mode}", ok and tl == N, f"{detail}; table_len {tl}")

@section
def diag_reset(d, ctx):
    d.set_parameter("diag_reset", 1)
    out("ii.diag-reset-device", d.get_parameter("records_dropped") == 0 and d.get_parameter("diag_reset") == 0)


def reboot(port):
    d = Device("127.0.0.1", port)
    d.set_parameter("freq", 7.0)
    before = d.status()["uptime_s"]
    try:
        d.reboot()
    except DeviceError as x:
        out("ii.reboot-device", False, f"refused: {x}")
        return
    deadline, err = time.monotonic() + 10, None
    while time.monotonic() < deadline:
        try:
            with Device("127.0.0.1", port, timeout=2) as d2:
                s = d2.status()
                vals = {n: d2.get_parameter(n) for n in ("freq", "arm", "table_len", "forcing_coeffs", "target_coeffs")}
                e = int(d2.capture(["cmd_epoch"], samples=2, port=0)["cmd_epoch"][-1])
            clean = s["uptime_s"] < before + 1 and vals["arm"] == 0 and vals["table_len"] == 0 and vals["freq"] != 7.0 \
                and not any(vals["forcing_coeffs"]) and not any(vals["target_coeffs"])
            out("ii.reboot-device", clean, f"uptime {before:.2f} -> {s['uptime_s']:.2f} s, freq {vals['freq']}, "
                f"table_len {vals['table_len']}, arm {vals['arm']}, cmd_epoch {e}")
            return
        except (OSError, DeviceError) as x:
            err = x
            time.sleep(0.2)
    out("ii.reboot-device", False, f"no device within 10 s after the reboot: {err}")


def hostile(port):
    """A drive at a frequency a ramp cannot follow; then the next host must be served."""
    code = None
    try:
        with Device("127.0.0.1", port, timeout=5) as d:
            n = d.parameter("forcing_coeffs").count
            d.set_parameter("arm", 1)
            v = [0.0] * n
            v[1] = 0.1
            d.set_parameter("forcing_coeffs", v)
            code = code_of(lambda: d.set_parameter("freq", 1e-30))
            try:
                d.capture(["cmd_epoch"], samples=10, port=0)
            except Exception:
                pass
    except Exception:
        pass
    time.sleep(0.5)
    try:
        with Device("127.0.0.1", port, timeout=3) as d:
            out("ii.next-host-served-after-hostile-request", d.status()["protocol_version"] == 3,
                f"freq 1e-30 answered with code {code}")
    except Exception as x:
        out("ii.next-host-served-after-hostile-request", False, f"{type(x).__name__}: {x}")


if __name__ == "__main__":
    {"state": state, "device": device, "reboot": reboot, "hostile": hostile}[sys.argv[1]](int(sys.argv[2]))
'''

PEER_CLI = r'''
import sys
import peer_loopback  # noqa: F401 - first: the receive socket on loopback
from helic_daq.cli import main
sys.exit(main())
'''

_DRIVER: Path | None = None


def peer_run(py: Path, argv: list[str], stream_port: int, timeout: float) -> subprocess.CompletedProcess:
    """``argv`` (a script of PEER_* and its arguments) in the peer's venv, its stream primer
    aimed at ``stream_port`` (0: the peer's default)."""
    env = dict(os.environ, HELIC_PEER_STREAM_PORT=str(stream_port))
    return subprocess.run([str(py), *argv], capture_output=True, text=True, timeout=timeout, env=env)


def peer_json(py: Path, what: str, port: int, stream_port: int = 0, timeout: float = 120.0):
    r = peer_run(py, [str(_DRIVER), what, str(port)], stream_port, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"peer driver {what} failed: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def peer_checks(py: Path, what: str, port: int, stream_port: int, timeout: float) -> None:
    try:
        r = peer_run(py, [str(_DRIVER), what, str(port)], stream_port, timeout)
    except subprocess.TimeoutExpired:
        report(f"ii.{what}", False, f"no end within {timeout:g} s")
        return
    for line in r.stdout.splitlines():
        try:
            x = json.loads(line)
        except ValueError:
            continue
        report(x["name"], x["ok"], x["detail"])
    if r.returncode != 0:
        report(f"ii.{what}-ran", False, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit {r.returncode}")


def cli(py: Path, cli_file: Path, port: int, stream_port: int, *args, timeout: float = 60.0):
    return peer_run(py, [str(cli_file), "--host", HOST, "--port", str(port), *args], stream_port, timeout)


def part_ii(py: Path, tmp: Path, timeout: float) -> None:
    import numpy as np

    env = dict(os.environ, PYTHONPATH=str(ROOT))
    serve = Proc(hbtest_argv("serve", "--protocol", "helic", "--rig", str(TWIN), "--port", "0"),
                 r"listening on [\d.]+:(\d+)", cwd=ROOT, env=env, timeout=timeout)
    port, sport = serve.port, serve.port + 1
    cli_file = tmp / "peer_cli.py"
    cli_file.write_text(PEER_CLI)
    try:
        peer_checks(py, "device", port, sport, timeout)

        def run(name, *args, expect: str = "", check=None):
            r = cli(py, cli_file, port, sport, *args, timeout=timeout)
            ok = r.returncode == 0 and expect in r.stdout and (check is None or check(r.stdout))
            why = "" if ok else (": " + r.stderr.strip().splitlines()[-1][-200:] if r.returncode and r.stderr.strip()
                                 else f": output lacks {expect!r}")
            report(f"ii.cli-{name}", ok, f"exit {r.returncode}{why}")

        run("status", "status", expect="protocol_version: 3")
        run("sources", "sources", expect="cmd_epoch")
        run("list", "list", expect="mcu_reboot")
        run("get", "get", "freq", "arm", "safety", expect="freq = ")
        run("set", "set", "freq", "7.5", expect="freq = 7.5")
        run("capture", "capture", "--sources", "phase,cmd_epoch", "--samples", "1000", expect="captured 1000 records")
        run("capture-decimated", "capture", "--sources", "phase,cmd_epoch", "--samples", "300", "--decimation", "8",
            expect="captured 300 records")
        run("stop", "stop", expect="forcing and target zeroed")
        wave = tmp / "wave.npy"
        np.save(wave, (1.0 + 0.5 * np.sin(2 * np.pi * np.arange(64) / 64)).astype(np.float32))
        for mode, extra in (("off", ()), ("loop", ("--duration", "0.2")), ("one-shot", ("--freq", "5")),
                            ("locked", ("--mult", "2", "--phase", "0.5")), ("locked-one-shot", ()),
                            ("loop-hold", ("--freq", "3", "--interpolation", "hold"))):
            m = mode.removesuffix("-hold")
            run(f"upload-{mode}", "upload", str(wave), "--mode", m, *extra, expect=f"in {m} mode")
        run("diag-reset", "diag-reset", expect="diagnostics reset")

        # keep-alive on the served control connection ("Parameter discovery": a vanished host
        # is detected by TCP keep-alive probes within about 10 s)
        try:
            with socket.create_connection((HOST, port), timeout=5):
                time.sleep(0.3)
                q = subprocess.run(["ss", "-tnoH", "state", "established", f"( sport = :{port} )"],
                                   capture_output=True, text=True, timeout=10)
            report("ii.control-keepalive", "keepalive" in q.stdout, q.stdout.strip()[-120:] or "no timer shown")
        except (OSError, subprocess.SubprocessError) as e:
            report("ii.control-keepalive", None, f"ss unavailable: {e}")

        run("reboot", "reboot", expect="MCU reboot scheduled")
        peer_checks(py, "reboot", port, sport, timeout)
        peer_checks(py, "hostile", port, sport, timeout)
    finally:
        took = serve.stop()
        report("ii.serve-stops-on-sigterm", took is not None and took < 2.0,
               "killed after 5 s" if took is None else f"{took:.2f} s")
        time.sleep(0.2)  # the reader thread takes the last lines
        errors = [i for i, line in enumerate(serve.lines) if line.startswith("Exception in thread")]
        report("ii.served-device-raised-nothing", not errors,
               "; ".join(f"{serve.lines[i]} {next((x for x in serve.lines[i + 1:] if re.match(r'[A-Za-z_.]+(Error|Exception)', x)), '?')}"
                         for i in errors))


def part_ref(py: Path, tmp: Path, timeout: float) -> None:
    """The checks of (ii) against the peer's own simulator: they encode the peer's behaviour
    (a check that fails here is wrong, not hbtest)."""
    sim = Proc([str(py), "-m", "helic_daq.sim", "--host", HOST, "--port", "0"],
               r"listening on [\d.]+:(\d+)", timeout=timeout)
    PREFIX[0] = "ref."
    try:
        for what in ("device", "reboot", "hostile"):
            peer_checks(py, what, sim.port, 0, timeout)
    finally:
        PREFIX[0] = ""
        sim.stop()


def main(argv=None) -> int:
    global _DRIVER
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer", required=True, type=Path,
                    help="a checkout of the HELIC-DAQ repository (cloned from PEER_URL when missing)")
    ap.add_argument("--commit", help="the peer commit to check out after cloning")
    ap.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "hbtest-helic-peer-venv",
                    help="venv for the peer's host-python (created or reused)")
    ap.add_argument("--timeout", type=float, default=180.0, help="bound of each step [s]")
    ap.add_argument("--only", choices=("ref", "i", "ii"),
                    help="run one part (ref: the checks of ii against the peer's own simulator)")
    args = ap.parse_args(argv)
    peer = args.peer.resolve()
    try:
        peer_checkout(peer, args.commit)
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"helic_peer_check: cannot clone {PEER_URL} into {peer}: {e}", file=sys.stderr)
        return 2
    print(f"peer: {peer} at {peer_commit(peer)}; hbtest: {ROOT}", flush=True)
    try:
        py = peer_venv(peer, args.venv.resolve())
    except (subprocess.CalledProcessError, OSError) as e:
        print(f"helic_peer_check: cannot install the peer's host-python into {args.venv}: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="helic-peer-") as tmp:
        tmp = Path(tmp)
        _DRIVER = tmp / "peer_driver.py"
        _DRIVER.write_text(textwrap.dedent(PEER_DRIVER))
        (tmp / "peer_loopback.py").write_text(textwrap.dedent(PEER_LOOPBACK))
        for part, fn in (("ref", part_ref), ("i", part_i), ("ii", part_ii)):
            if args.only in (None, part):
                try:
                    fn(py, tmp, args.timeout)
                except Exception as e:  # a part that cannot run is one failure, the other part still runs
                    report(f"{part}.setup", False, f"{type(e).__name__}: {e}")
    passed = sum(s == "PASS" for s, _, _ in RESULTS)
    failed = sum(s == "FAIL" for s, _, _ in RESULTS)
    skipped = sum(s == "SKIP" for s, _, _ in RESULTS)
    print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The acquisition-box protocol on real loopback sockets: the documented transcript replayed
byte for byte, block coding round trips, garbage and malformed commands (SCPI errors, never a
hang), one controlling host at a time, and `hbtest serve` as a process (port on the first
line, clean exit on SIGTERM/SIGINT)."""

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.config import load_rig
from hbtest.rig.box.protocol import (
    Mnemonic,
    Record,
    decode_array,
    decode_block,
    encode_array,
    encode_block,
    parse_error_reply,
    reply_length,
)
from hbtest.serve.box import BoxServer

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
README = ROOT / "instruments" / "README.md"
TIMEOUT_S = 5.0


class Raw:
    """A bare socket client: lines out, whole replies (blocks by length) in."""

    def __init__(self, address, timeout=TIMEOUT_S):
        self.s = socket.create_connection(address, timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # no Nagle stalls between lines
        self.buf = b""

    def send(self, line: str | bytes):
        self.s.sendall((line.encode() if isinstance(line, str) else line) + b"\n")

    def reply(self) -> bytes:
        while True:
            n = reply_length(self.buf)
            if n is not None and len(self.buf) >= n:
                r, self.buf = self.buf[:n], self.buf[n:]
                return r
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("closed by the box")
            self.buf += chunk

    def ask(self, line) -> str:
        self.send(line)
        return self.reply().decode().rstrip("\n")

    def quiet(self, wait=0.2) -> bool:
        """True when nothing arrives within ``wait`` seconds."""
        self.s.settimeout(wait)
        try:
            data = self.s.recv(1 << 16)
        except socket.timeout:
            return not self.buf
        finally:
            self.s.settimeout(TIMEOUT_S)
        self.buf += data
        return False

    def close(self):
        self.s.close()


@pytest.fixture(scope="module")
def twin_cfg():
    return load_rig(TWIN)


@pytest.fixture(scope="module")
def server(twin_cfg):
    with BoxServer(twin_cfg, port=0, seed=7, watchdog_s=10.0, busy_wait_s=0.3) as srv:
        yield srv


@pytest.fixture
def client(server):
    c = Raw(server.address)
    c.send("*RST")
    c.send("*CLS")
    c.send("OUTP:PROT:CLE")
    assert c.ask("*OPC?") == "1"
    yield c
    c.close()
    time.sleep(0.05)  # let the box see the disconnect before the next test connects


def _transcript():
    text = README.read_text()
    block = text.split("```transcript\n", 1)[1].split("```", 1)[0]
    steps = []
    for line in block.splitlines():
        if line.startswith("> "):
            steps.append([line[2:], []])
        elif line.startswith("< "):
            steps[-1][1].append(line[2:])
        elif line.strip():
            raise AssertionError(f"bad transcript line {line!r}")
    return steps


def test_readme_transcript_replays_byte_for_byte(twin_cfg):
    """The documented example is what the box does (fresh box: seed 7, watchdog 10 s). After an
    intended change of the box: ``python scripts/box_transcript.py`` shows the replies that
    changed, ``--write`` rewrites them."""
    steps = _transcript()
    assert len(steps) > 50
    headers = {re.split(r"[ ?]", cmd, maxsplit=1)[0].upper() for cmd, _ in steps}
    with BoxServer(twin_cfg, port=0, seed=7, watchdog_s=10.0) as srv:
        c = Raw(srv.address)
        try:
            for cmd, expected in steps:
                c.send(cmd)
                if not expected:
                    continue
                assert len(expected) == 1
                got = c.reply()
                m = re.fullmatch(r"(.*#(\d)(\d+)) <(\d+) bytes>", expected[0])
                if m:
                    head = m.group(1).encode()
                    assert got.startswith(head), (cmd, got[:120], expected[0])
                    assert int(m.group(3)) == int(m.group(4)) == len(got) - len(head) - 1
                    assert got.endswith(b"\n")
                else:
                    assert got.decode() == expected[0] + "\n", cmd
            assert c.quiet()
            # the IDN names the rig file and the seed
            assert c.ask("*IDN?") == f"HBTEST,BOX-TWIN,{twin_cfg.source.sha256[:8]}-s7,{__import__('hbtest').__version__}"
        finally:
            c.close()
    # every command of the table is exercised by the transcript (DIAG:DEL: the stale-reply test)
    for h in ("*IDN", "*RST", "*CLS", "*OPC", "SYST:ERR", "SYST:ERR:COUN", "SYST:TIME", "CONF:CHAN", "CONF:ACT", "CONF:RATE",
              "CONF:RANG", "SOUR:FREQ", "SOUR:HARM", "SOUR:COEF", "SOUR:APPL", "SOUR:DEM", "SOUR:EPOC", "SOUR:VOLT:LIM",
              "SOUR:VOLT:LIM:MAX", "SENS:LIM", "SENS:NUIS", "MEAS:COEF", "MEAS:RAW", "WAIT", "OUTP", "OUTP:PROT:TRIP",
              "OUTP:PROT:CLE", "OUTP:PROT:WDOG"):
        assert h in headers, h


def test_measurement_blocks_decode_to_the_documented_shapes(client):
    c = client
    c.send("OUTP ON")
    c.send("SOUR:FREQ 17")
    c.send("SOUR:HARM 0,1,2")
    c.send("SOUR:COEF 1,0.1,0,0.5,-0.25,0,0")
    assert c.ask("SOUR:APPL? 2").split(",")[1] == "0"
    c.send("MEAS:COEF? 4,1,2,0")
    rec, payload = Record.split(c.reply())
    a = decode_array(payload, (4, 3, 3))
    assert rec.n_periods == 4 and rec.frequency_hz == 17.0 and rec.trip == 0 and rec.epoch == int(c.ask("SOUR:EPOC?"))
    assert np.all(a[:, :, 2] >= 0) and np.all(a[:, 2, 1] == 0)  # variances; DC real
    c.send("MEAS:RAW? 3")
    rec2, payload2 = Record.split(c.reply())
    raw = decode_array(payload2, (4, -1))
    assert raw.shape == (4, round(3 * 5000 / 17))
    assert rec2.elapsed_s == pytest.approx(rec.elapsed_s + raw.shape[1] / 5000, abs=1e-12)
    # t0 continues the demand time base: the record starts where the previous one ended
    assert rec2.t0_s == pytest.approx((rec.t0_s + round(4 * 5000 / 17) / 5000) % (1 / 17), abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(payload=st.binary(max_size=3000), prefix=st.text(alphabet="0123456789,.e-", max_size=40))
def test_block_round_trip(payload, prefix):
    blk = encode_block(payload)
    assert blk[:1] == b"#" and int(blk[1:2]) == len(str(len(payload)))
    got, end = decode_block(blk)
    assert got == payload and end == len(blk)
    # a whole reply: text fields, block, terminator; its length is known from the header alone
    reply = prefix.encode() + b"," + blk + b"\n"
    head = reply[: len(prefix) + 2 + int(blk[1:2]) + 1 + 8]
    assert reply_length(reply) == len(reply)
    n = reply_length(head)
    assert n is None or n == len(reply)
    assert reply_length(reply + b"next\n") == len(reply)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(allow_nan=False, width=64), min_size=0, max_size=60))
def test_float64_arrays_round_trip_exactly(values):
    a = np.array(values, dtype=float)
    assert np.array_equal(decode_array(encode_array(a)), a)


def test_block_decoding_rejects_malformed_headers():
    for bad in (b"#0", b"#", b"#a12", b"#3 12abc", b"#2", b"#15abc"):
        with pytest.raises(ValueError):
            decode_block(bad)
    with pytest.raises(ValueError):
        reply_length(b"1,0,#9999999999" + b"x" * 10)  # absurd block size
    with pytest.raises(ValueError):
        decode_array(b"1234567", (1,))


def test_mnemonics_take_short_and_long_forms_case_insensitively():
    m = Mnemonic("SYSTem:ERRor?")
    for h in ("SYST:ERR?", "SYSTEM:ERROR?", "system:error?", "Syst:Error?", ":SYST:ERR?"):
        assert m.matches(h), h
    for h in ("SYST:ERR", "SYSTE:ERR?", "SYST:ERR:COUN?", "SYS:ERR?"):
        assert not m.matches(h), h
    assert Mnemonic("*IDN?").matches("*idn?") and not Mnemonic("*IDN?").matches("IDN?")


@pytest.mark.parametrize(
    "line, code",
    [
        ("FOO?", -113),
        ("SOUR:FREQ abc", -104),
        ("SOUR:FREQ -3", -222),
        ("SOUR:FREQ", -109),
        ("SOUR:FREQ 1,2", -108),
        ("SOUR:HARM 1,1", -222),
        ("SOUR:COEF 1,0,0", -221),
        ("SENS:LIM x9,-1,1", -224),
        ("SENS:LIM l1,1,-1", -222),
        ("OUTP MAYBE", -224),
        ("OUTP:PROT:WDOG -1", -222),
        ("SOUR:VOLT:LIM 50", -222),
        ("MEAS:RAW? 0", -222),
        ("SOUR:APPL? 2,-5", -222),
        ("*IDN? 1", -108),
        ("MEAS:COEF? 3", -109),
    ],
)
def test_malformed_commands_queue_the_scpi_error(client, line, code):
    c = client
    c.send(line)
    if line.split(" ")[0].endswith("?"):
        got = c.reply().decode()
        assert got.startswith("!") and parse_error_reply(got)[0] == code
    got = c.ask("SYST:ERR?")
    assert parse_error_reply(got)[0] == code, got
    assert c.ask("SYST:ERR?") == '0,"No error"'


def test_measuring_before_any_demand_is_error_203(twin_cfg):
    with BoxServer(twin_cfg, port=0) as srv:
        c = Raw(srv.address)
        try:
            for q in ("MEAS:RAW? 2", "MEAS:COEF? 2,1", "WAIT? 1"):
                assert parse_error_reply(c.ask(q))[0] == 203
                assert parse_error_reply(c.ask("SYST:ERR?"))[0] == 203
        finally:
            c.close()


@pytest.fixture(scope="module")
def garbage_client(twin_cfg):
    with BoxServer(twin_cfg, port=0) as srv:
        c = Raw(srv.address, timeout=2.0)
        yield c
        c.close()


@settings(max_examples=80, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=300).filter(lambda b: b"\n" not in b))
def test_garbage_bytes_give_errors_never_a_hang(garbage_client, garbage):
    c = garbage_client
    c.send(garbage)
    head = garbage.strip().split(b" ", 1)[0].split(b"\t", 1)[0]
    if head.endswith(b"?"):
        r = c.reply()  # a query always gets exactly one reply
        assert r.endswith(b"\n")
    # the box still answers, and either accepted the line or queued an error for it
    assert c.ask("*OPC?") == "1"
    c.send("*RST")
    c.send("*CLS")
    c.send("OUTP:PROT:CLE")
    assert c.ask("SYST:ERR:COUN?") == "0"
    assert not c.buf


def test_overlong_line_is_discarded_with_an_error(client):
    c = client
    c.s.sendall(b"SOUR:FREQ " + b"1" * 70000 + b"\n")
    assert c.ask("*OPC?") == "1"
    assert parse_error_reply(c.ask("SYST:ERR?"))[0] == -363


def test_a_second_host_is_refused_while_one_is_in_control(server, client):
    other = Raw(server.address)
    try:
        r = other.reply().decode()  # sent unasked, then the box closes
        assert parse_error_reply(r) == (310, "Box busy; another host is in control")
        with pytest.raises((ConnectionError, OSError)):
            other.ask("*IDN?")
            other.ask("*IDN?")
    finally:
        other.close()
    assert client.ask("*OPC?") == "1"  # the controlling host is undisturbed


def _serve(*extra):
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "serve", "--rig", str(TWIN), "--port", "0", *extra],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    first = p.stdout.readline()
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", first)
    assert m, first
    return p, int(m.group(1))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_process_prints_its_port_first_and_stops_cleanly(sig):
    p, port = _serve("--seed", "3")
    try:
        c = Raw(("127.0.0.1", port))
        assert c.ask("*IDN?").startswith("HBTEST,BOX-TWIN,") and c.ask("*IDN?").endswith("-s3,0.1.0")
        c.close()
        p.send_signal(sig)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 0, out
        assert "stopped" in out and "Traceback" not in out
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_serve_refuses_a_rig_file_that_is_not_virtual(capsys):
    from hbtest.cli import main

    assert main(["serve", "--rig", str(ROOT / "instruments" / "box-loopback.toml"), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "virtual" in err

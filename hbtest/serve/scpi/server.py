"""SCPI over a raw TCP socket, as LAN instruments serve it on port 5025: program messages end in
``\\n``, a command may carry an IEEE 488.2 definite-length block (``#<n><len><bytes>``), a query's
reply ends in ``\\n`` (a block reply: the block then ``\\n``). One host at a time; loopback unless
told otherwise.

Headers are matched in their short form: every mnemonic of the long form (``SOURce``,
``VOLTage``) is accepted and reduced to its upper-case part (IEEE 488.2 / SCPI-99 short-form
rule), a numeric suffix is kept apart (``SOUR2`` -> ``SOUR`` with suffix 2; none = 1), a leading
``:`` is dropped.

Timing: a message is acted on as of the moment its bytes reached the instrument's socket
(:attr:`Command.received`: the kernel's receive timestamp where Linux gives it, else the time the
read returned; on :func:`time.monotonic`), not of the moment this simulator got round to it. The
simulator's own computing time (the twin advanced to the wall clock, a few ms per command, more
under a loaded machine) is not the instrument's latency: a restart burst once landed 5-8 ms, under
CI load tens of ms, after the host sent it, and the host's phase-continuous restart became a phase
jump the real generator would not have made.

Fault injection for client tests (:meth:`ScpiServer.inject`): the next reply to a query whose
short header matches is sent late, twice, cut short (part of it, then nothing), or the
connection is closed half-way through it; or the next command whose short header matches is
acted on late (a busy instrument: its own server process behind, its bytes already received).
"""

from __future__ import annotations

import math
import platform
import re
import socket
import struct
import sys
import threading
import time
from dataclasses import dataclass

__all__ = ["Command", "ScpiServer", "SimError", "short_form"]

POLL_S = 0.05
MAX_MESSAGE_BYTES = 64 * 2**20
FAULTS = ("late", "twice", "partial", "close", "slow")
SO_TIMESTAMPNS = 35  # Linux <asm-generic/socket.h>: recvmsg carries the arrival time (CLOCK_REALTIME timespec)
#: machines whose Linux takes that value from asm-generic (sparc, parisc, alpha number it otherwise)
GENERIC_SOCKET_ABI = ("x86_64", "i386", "i686", "aarch64", "arm64", "armv7l", "armv6l", "riscv64")
_TIMESPEC = struct.Struct("@ll")


class SimError(Exception):
    """An error the instrument puts in its error queue: ``code`` and ``text`` (SCPI)."""

    def __init__(self, code: int, text: str):
        super().__init__(f"{code:+d},\"{text}\"")
        self.code, self.text = code, text


def number(arg: str) -> float:
    """A numeric SCPI parameter, or the errors both manuals give: -104 for text that is not a
    number, -222 for a number out of range (inf, nan)."""
    try:
        v = float(arg)
    except ValueError:
        raise SimError(-104, "Data type error") from None
    if not math.isfinite(v):
        raise SimError(-222, "Data out of range")
    return v


_NODE = re.compile(r"^([A-Za-z_*]+?)(\d*)$")


def short_form(word: str) -> str:
    """``SOURce`` / ``source`` / ``SOUR`` -> ``SOUR`` (the short form is the leading 4 letters,
    3 when the 4th is a vowel, per the SCPI-99 rule; ``*IDN`` kept as is)."""
    w = word.upper()
    if w.startswith("*") or len(w) <= 4:
        return w
    return w[:3] if w[3] in "AEIOU" else w[:4]


@dataclass(frozen=True)
class Command:
    """One program message: ``nodes`` (short forms), ``suffixes`` (1 when absent), ``query``,
    ``args`` (text after the header), ``block`` (bytes of a definite-length block or None)."""

    nodes: tuple[str, ...]
    suffixes: tuple[int, ...]
    query: bool
    args: str
    block: bytes | None = None
    numbered: tuple[bool, ...] = ()  # per node: whether a numeric suffix was written (SOUR vs SOUR1)
    received: float | None = None  # when its last bytes reached the socket [s, time.monotonic]

    @property
    def header(self) -> str:
        return ":".join(self.nodes) + ("?" if self.query else "")


def parse_message(text: str, block: bytes | None, received: float | None = None) -> Command:
    text = text.strip()
    head, _, args = text.partition(" ")
    query = head.endswith("?")
    head = head.rstrip("?").lstrip(":")
    nodes, suffixes, numbered = [], [], []
    for part in head.split(":"):
        m = _NODE.match(part)
        if not m:
            raise SimError(-102, "Syntax error")
        nodes.append(short_form(m.group(1)))
        suffixes.append(int(m.group(2)) if m.group(2) else 1)
        numbered.append(bool(m.group(2)))
    return Command(tuple(nodes), tuple(suffixes), query, args.strip(), block, tuple(numbered), received)


def split_message(buf: bytearray) -> tuple[str, bytes | None, int] | None:
    """One complete message at the start of ``buf``: (text with the block cut out, block,
    bytes used), or None if more bytes are needed."""
    i = 0
    while i < len(buf):
        c = buf[i]
        if c == 0x0A:
            return buf[:i].decode("latin-1"), None, i + 1
        if c == 0x23 and i + 1 < len(buf) and 0x31 <= buf[i + 1] <= 0x39:
            n = buf[i + 1] - 0x30
            if len(buf) < i + 2 + n:
                return None
            length = int(buf[i + 2 : i + 2 + n])
            end = i + 2 + n + length
            if len(buf) < end + 1:
                return None
            text = buf[:i].decode("latin-1")
            nl = buf.find(b"\n", end)
            if nl < 0:
                return None
            return text + buf[end:nl].decode("latin-1"), bytes(buf[i + 2 + n : end]), nl + 1
        i += 1
    return None


class ScpiServer:
    """Serves ``instrument`` (an object with ``execute(Command) -> bytes | None`` that raises
    :class:`SimError` for the error queue, and ``push_error(SimError)``) on ``host:port``."""

    def __init__(self, instrument, host: str = "127.0.0.1", port: int = 0, name: str = "instrument"):
        self.instrument = instrument
        self.name = name
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self._sock.listen(8)
        self._sock.settimeout(POLL_S)
        self.host, self.port = self._sock.getsockname()[:2]
        self._stop = threading.Event()
        self._faults: list[tuple[str, str, float]] = []
        self._thread = threading.Thread(target=self._serve, name=f"scpi-sim-{name}", daemon=True)
        self.connections = 0

    @property
    def resource(self) -> str:
        return f"TCPIP0::{self.host}::{self.port}::SOCKET"

    def start(self) -> ScpiServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self._sock.close()

    def __enter__(self) -> ScpiServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def inject(self, header: str, fault: str, delay_s: float = 0.0) -> None:
        """The next reply to a query with short header ``header`` (e.g. ``"SYST:ERR?"``) is
        ``fault``: "late" (sent ``delay_s`` late), "twice", "partial" (half of it, then
        silence), "close" (half of it, then the connection closed); or "slow": the next command
        or query with that header is acted on ``delay_s`` after it arrived (the commands after
        it on the connection wait behind it, as on an instrument that executes in order)."""
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {FAULTS}")
        self._faults.append((header, fault, delay_s))

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            try:
                self._session(conn)
            except OSError:
                pass
            finally:
                conn.close()
                disconnected = getattr(self.instrument, "disconnected", None)
                if disconnected is not None:
                    disconnected()

    def _session(self, conn: socket.socket) -> None:
        conn.settimeout(POLL_S)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stamped = _stamp_arrivals(conn)
        buf = bytearray()
        while not self._stop.is_set():
            try:
                chunk, received = _receive(conn, stamped)
            except TimeoutError:
                continue
            if not chunk:
                return
            buf += chunk
            if len(buf) > MAX_MESSAGE_BYTES:
                return
            while True:
                got = split_message(buf)
                if got is None:
                    break
                text, block, used = got
                del buf[:used]
                if text.strip() and not self._one(conn, text, block, received):
                    return

    def _one(self, conn: socket.socket, text: str, block: bytes | None, received: float) -> bool:
        try:
            cmd = parse_message(text, block, received)
            self._act_late(cmd.header)
            reply = self.instrument.execute(cmd)
        except SimError as e:
            self.instrument.push_error(e)
            return True
        if reply is None:
            return True
        return self._send(conn, cmd.header, reply)

    def _pop_fault(self, header: str, on_reply: bool):
        """The first fault injected for ``header``, taken off the list: one on its reply
        (``on_reply``) or a "slow" one on its execution; None if there is none."""
        fault = next((f for f in self._faults if f[0] == header and (f[1] != "slow") == on_reply), None)
        if fault is not None:
            self._faults.remove(fault)
        return fault

    def _act_late(self, header: str) -> None:
        fault = self._pop_fault(header, on_reply=False)
        if fault is not None:
            time.sleep(fault[2])

    def _send(self, conn: socket.socket, header: str, reply: bytes) -> bool:
        fault = self._pop_fault(header, on_reply=True)
        if fault is None:
            conn.sendall(reply)
            return True
        kind, delay = fault[1], fault[2]
        if kind == "late":
            time.sleep(delay)
            conn.sendall(reply)
        elif kind == "twice":
            conn.sendall(reply + reply)
        elif kind == "partial":
            conn.sendall(reply[: max(1, len(reply) // 2)])
        else:
            conn.sendall(reply[: max(1, len(reply) // 2)])
            return False
        return True


def _stamp_arrivals(conn: socket.socket) -> bool:
    """Ask the kernel to timestamp arriving bytes (Linux); False where it cannot."""
    if not sys.platform.startswith("linux") or platform.machine() not in GENERIC_SOCKET_ABI:
        return False
    try:
        conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def _receive(conn: socket.socket, stamped: bool) -> tuple[bytes, float]:
    """The next bytes and when they reached the socket [s, time.monotonic]: the kernel's
    timestamp when ``stamped`` (and given), else now."""
    if not stamped:
        chunk = conn.recv(1 << 16)
        return chunk, time.monotonic()
    chunk, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(_TIMESPEC.size))
    now_mono, now_real = time.monotonic(), time.time()
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, ns = _TIMESPEC.unpack(data[: _TIMESPEC.size])
            return chunk, min(now_mono, now_mono - (now_real - (sec + ns * 1e-9)))
    return chunk, now_mono

"""A scripted fake SCPI instrument: a small TCP server on 127.0.0.1 (port chosen by the OS)
that a driver under test reaches through real pyvisa (``ResourceManager("@py")``,
``TCPIP0::127.0.0.1::<port>::SOCKET``).

It follows a SCRIPT of steps ``(expected command, reply)``:

- expected: the exact command text (``"OUTP1:LOAD INF"``), or :class:`Block` for a command
  carrying an IEEE 488.2 definite-length block (``#<n><len><bytes>``; the block's bytes are
  handed to the Block's ``check`` callable, which raises AssertionError on a bad payload);
- reply: ``None`` (a command, nothing sent back), ``str`` (sent with ``\\n``), ``bytes`` (sent
  verbatim: binary blocks, garbage), or :data:`Silent` (a query left unanswered: the driver
  must time out).

Everything received is recorded (:attr:`ScriptedInstrument.received`). On the first deviation
(wrong command, wrong order, extra command) the server records it and drops the connection,
so the driver fails fast; :meth:`ScriptedInstrument.check` (also run on leaving the ``with``
block) raises AssertionError with a diff of expected against received, including missing
commands at the end of the script.

:class:`Recorder` is the in-process counterpart for property tests: a pyvisa-like resource
that records every command (with decoded blocks) and answers queries from a callable.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np

__all__ = ["ScriptedInstrument", "Step", "Block", "Silent", "Recorder", "decode_block"]

POLL_S = 0.05  # accept/recv polling interval of the server thread
JOIN_S = 5.0  # how long stop() waits for the server thread
GRACE_S = 0.1  # after the script is done, how long extra commands are still watched for
DONE_S = 2.0  # on leaving the with block: wait this long for the rest of the script to arrive


class _Silent:
    def __repr__(self):
        return "Silent"


Silent = _Silent()


@dataclass(frozen=True)
class Block:
    """Expect ``prefix`` followed by a definite-length block; ``check(payload: bytes)`` may
    assert on the payload."""

    prefix: str
    check: Callable[[bytes], None] | None = None

    def __repr__(self):
        return f"{self.prefix}#<block>"


@dataclass(frozen=True)
class Step:
    expected: str | Block
    reply: str | bytes | None | _Silent = None


@dataclass(frozen=True)
class Received:
    text: str  # command text (the block replaced by "#<block>")
    block: bytes | None = None

    def __repr__(self):
        return self.text


def decode_block(data: bytes, start: int = 0) -> tuple[bytes, int] | None:
    """Parse a definite-length block at ``data[start:]`` (``#`` included). Returns
    (payload, index after it), or None if more bytes are needed. Raises ValueError if it is
    not a block header."""
    if len(data) < start + 2:
        return None
    if data[start : start + 1] != b"#" or not data[start + 1 : start + 2].isdigit() or data[start + 1 : start + 2] == b"0":
        raise ValueError("not a definite-length block")
    n = int(data[start + 1 : start + 2])
    if len(data) < start + 2 + n:
        return None
    length = int(data[start + 2 : start + 2 + n])
    end = start + 2 + n + length
    if len(data) < end:
        return None
    return data[start + 2 + n : end], end


def _split_message(buf: bytes) -> tuple[Received, int] | None:
    """One complete message at the start of ``buf`` (text, optional block, ``\\n``)."""
    i = 0
    while i < len(buf):
        c = buf[i : i + 1]
        if c == b"\n":
            return Received(buf[:i].decode("latin-1")), i + 1
        if c == b"#" and buf[i + 1 : i + 2].isdigit() and buf[i + 1 : i + 2] != b"0":
            got = decode_block(buf, i)
            if got is None:
                return None
            payload, end = got
            rest = buf[end:]
            nl = rest.find(b"\n")
            if nl < 0:
                return None
            text = buf[:i].decode("latin-1") + "#<block>" + rest[:nl].decode("latin-1")
            return Received(text, payload), end + nl + 1
        i += 1
    return None


class ScriptedInstrument:
    """The scripted fake (see module docstring). Use as a context manager::

        with ScriptedInstrument([Step("*IDN?", "ACME,X,1,1.0")], name="gen") as fake:
            res = pyvisa.ResourceManager("@py").open_resource(fake.resource_name, ...)
    """

    def __init__(self, script, name: str = "instrument"):
        self.script = [s if isinstance(s, Step) else Step(s) if isinstance(s, (str, Block)) else Step(*s) for s in script]
        self.name = name
        self.received: list[Received] = []
        self.deviation: str | None = None
        self._pos = 0
        self._stop = threading.Event()
        self._done = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(2)
        self._sock.settimeout(POLL_S)
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name=f"scripted-{name}", daemon=True)

    @property
    def resource_name(self) -> str:
        return f"TCPIP0::127.0.0.1::{self.port}::SOCKET"

    def start(self) -> "ScriptedInstrument":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(JOIN_S)
        self._sock.close()

    def __enter__(self) -> "ScriptedInstrument":
        return self.start()

    def wait_done(self, timeout: float = DONE_S) -> bool:
        """Wait until the whole script was received (or a deviation happened)."""
        return self._done.wait(timeout)

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and self.wait_done():
            self._stop.wait(GRACE_S)  # let a trailing extra command arrive and be caught
        self.stop()
        if exc_type is None:
            self.check()

    # -- verdict --------------------------------------------------------------------------
    def transcript(self) -> list[str]:
        return [r.text for r in self.received]

    def check(self) -> None:
        """Raise AssertionError (with a diff) on a deviation or missing commands."""
        problem = self.deviation
        if problem is None and self._pos < len(self.script):
            problem = f"missing command(s): the script expected {self.script[self._pos].expected!r} next"
        if problem is None:
            return
        lines = [f"{self.name}: {problem}", "  #   expected                                   received"]
        n = max(len(self.script), len(self.received))
        for i in range(n):
            e = repr(self.script[i].expected) if i < len(self.script) else "-"
            r = repr(self.received[i].text) if i < len(self.received) else "-"
            mark = "  " if (i < len(self.script) and i < len(self.received) and self._matches(self.script[i].expected, self.received[i], check=False)) else "!!"
            lines.append(f"{mark}{i:3d} {e:<42} {r}")
        raise AssertionError("\n".join(lines))

    # -- server -----------------------------------------------------------------------------
    @staticmethod
    def _matches(expected, got: Received, check: bool = True) -> bool:
        if isinstance(expected, Block):
            if got.block is None or got.text != expected.prefix + "#<block>":
                return False
            if check and expected.check is not None:
                expected.check(got.block)
            return True
        return got.block is None and got.text == expected

    def _serve(self) -> None:
        if not self.script:
            self._done.set()
        while not self._stop.is_set() and self.deviation is None:
            try:
                conn, _ = self._sock.accept()
            except (socket.timeout, OSError):
                continue
            with conn:
                self._talk(conn)

    def _talk(self, conn: socket.socket) -> None:
        conn.settimeout(POLL_S)
        buf = b""
        while not self._stop.is_set():
            got = _split_message(buf)
            if got is None:
                try:
                    chunk = conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                continue
            msg, used = got
            buf = buf[used:]
            self.received.append(msg)
            if self._pos >= len(self.script):
                self.deviation = f"extra command {msg.text!r} after the end of the script"
                self._done.set()
                return
            step = self.script[self._pos]
            try:
                ok = self._matches(step.expected, msg)
            except AssertionError as e:
                self.deviation = f"step {self._pos}: block payload of {msg.text!r} is wrong: {e}"
                self._done.set()
                return
            if not ok:
                self.deviation = f"step {self._pos}: expected {step.expected!r}, received {msg.text!r}"
                self._done.set()
                return
            self._pos += 1
            if self._pos == len(self.script):
                self._done.set()
            reply = step.reply
            if reply is None or reply is Silent:
                continue
            data = reply if isinstance(reply, bytes) else (reply + "\n").encode()
            try:
                conn.sendall(data)
            except OSError:
                return


class Recorder:
    """In-process pyvisa-like resource: records every command as text (blocks as
    ``#<block>`` in the text, payload decoded with ``datatype`` little-endian kept in
    :attr:`blocks` keyed by transcript index) and answers ``query`` with ``answer(command)``."""

    def __init__(self, answer: Callable[[str], str] | None = None):
        self.answer = answer or (lambda cmd: "0")
        self.transcript: list[str] = []
        self.blocks: dict[int, np.ndarray] = {}
        self.timeout = 5000.0

    def write(self, command: str) -> None:
        self.transcript.append(command)

    def query(self, command: str) -> str:
        self.transcript.append(command)
        return self.answer(command)

    def write_binary_values(self, command, values, datatype="h", is_big_endian=False):
        self.blocks[len(self.transcript)] = np.asarray(values).astype(("<" if not is_big_endian else ">") + datatype)
        self.transcript.append(command + "#<block>")

    def query_binary_values(self, command, datatype="H", is_big_endian=False, container=np.array):
        raise AssertionError(f"Recorder answers text queries only; the driver asked for binary values: {command!r}")

    def clear(self) -> None:
        pass

    def close(self) -> None:
        pass

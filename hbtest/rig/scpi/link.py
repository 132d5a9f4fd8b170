"""The one link between an SCPI driver and its instrument: every write, query and binary block
goes through :class:`ScpiLink`, which turns any transport failure (timeout, dropped
connection, garbage bytes, malformed IEEE 488.2 block) into one
:class:`hbtest.errors.InstrumentError` naming the instrument and the command.

The resource surface a driver needs is small and is exactly pyvisa's message-based resource:

- ``write(str)``, ``query(str) -> str`` (write/read termination ``\\n``);
- ``write_binary_values(str, values, datatype=..., is_big_endian=False)``: the command text
  followed by an IEEE 488.2 definite-length block ``#<n><len><bytes>`` and the termination;
- ``query_binary_values(str, datatype=..., is_big_endian=False, container=...)``;
- ``timeout`` [ms] (read/write attribute) and ``close()``.

Raw LAN sockets (``TCPIP[board]::<host>::<port>::SOCKET``, the instruments' port 5025) are
served by :class:`SocketResource`, our own small transport: a bounded connect (an unreachable
instrument is one line, never a hang), a closed connection is an error at once (pyvisa-py's
``clear()`` spins on a closed socket), and :meth:`SocketResource.pending` shows bytes nobody
asked for. Other addresses (and pyvisa-sim's ``file.yaml@sim``) go through pyvisa.

Discipline (one request, one reply; a stale value is never used):

- queries are never retried: a reply that does not arrive within the timeout is waited for once
  more (the same time); if it then arrives the error says **"reply came late"**, otherwise
  "no reply (timeout)";
- before every query, bytes already waiting (a late or doubled reply) are an error
  ("unsolicited reply ... a reply came late or twice");
- after any failed query the link is *out of step*: further queries fail at once, naming the
  first failure. Writes stay allowed, so the rig can still ramp its outputs down.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ...errors import InstrumentError

__all__ = ["OPEN_TIMEOUT_S", "ScpiLink", "SocketResource", "open_resource"]

REPLY_SHOWN = 60  # characters of a bad reply quoted in an error message
OPEN_TIMEOUT_S = 3.0  # TCP connect bound [s]
MAX_BLOCK_BYTES = 256 * 2**20  # a definite-length block larger than this is malformed
SOCKET_ADDRESS = re.compile(r"^TCPIP\d*::([^:]+)::(\d+)::SOCKET$", re.IGNORECASE)


class TransportTimeout(TimeoutError):
    """No (complete) reply within the resource's timeout."""


class IncompleteReply(TransportTimeout):
    """Part of a reply arrived, then nothing more within the timeout."""


@runtime_checkable
class Drainable(Protocol):
    """A resource that can show bytes waiting unread (without blocking)."""

    def pending(self, wait_s: float = 0.0) -> bytes: ...


def _is_timeout(e: BaseException) -> bool:
    if isinstance(e, TimeoutError):
        return True
    try:
        import pyvisa

        return isinstance(e, pyvisa.errors.VisaIOError) and e.error_code == pyvisa.constants.StatusCode.error_timeout
    except ImportError:  # pragma: no cover - pyvisa is a dependency
        return False


def _transport_errors() -> tuple[type[BaseException], ...]:
    errs: list[type[BaseException]] = [OSError, ValueError, UnicodeError, EOFError, TimeoutError]
    try:
        import pyvisa

        errs.append(pyvisa.errors.Error)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errs)


def _shown(reply) -> str:
    s = repr(reply)
    return s if len(s) <= REPLY_SHOWN else s[:REPLY_SHOWN] + "..."


@dataclass
class ScpiLink:
    """A resource plus the instrument's name (for errors); see the module docstring."""

    resource: object
    name: str
    out_of_step: str | None = field(default=None, init=False)

    def _fail(self, what: str, e: BaseException, query: bool) -> InstrumentError:
        if isinstance(e, IncompleteReply):
            why = str(e)
        elif _is_timeout(e):
            late = self._late_reply() if query else b""
            why = f"reply came late (after the {self._timeout_ms():g} ms timeout): {_shown(late)}" if late else "no reply (timeout)"
        else:
            why = f"{type(e).__name__}: {e}"
        if query:
            self.out_of_step = f"{what!r}: {why}"
        return InstrumentError(f"{self.name}: {what!r} failed: {why}")

    def _timeout_ms(self) -> float:
        return float(getattr(self.resource, "timeout", 0.0) or 0.0)

    def _late_reply(self) -> bytes:
        if not isinstance(self.resource, Drainable):
            return b""
        try:
            return self.resource.pending(self._timeout_ms() / 1e3)
        except Exception:
            return b""

    def _before_query(self, command: str) -> None:
        if self.out_of_step is not None:
            raise InstrumentError(f"{self.name}: {command!r} not sent: the link is out of step since {self.out_of_step}")
        if isinstance(self.resource, Drainable):
            try:
                stale = self.resource.pending(0.0)
            except Exception as e:
                raise self._fail(command, e, query=True) from None
            if stale:
                self.out_of_step = f"unsolicited reply {_shown(stale)}"
                raise InstrumentError(f"{self.name}: unsolicited reply {_shown(stale)} before {command!r}: a reply came late or twice")

    def _call(self, what: str, query: bool, fn, *args, **kw):
        if query:
            self._before_query(what)
        try:
            return fn(*args, **kw)
        except _transport_errors() as e:
            raise self._fail(what, e, query) from None

    def write(self, command: str) -> None:
        self._call(command, False, self.resource.write, command)

    def query(self, command: str) -> str:
        reply = self._call(command, True, self.resource.query, command)
        if isinstance(reply, str) and reply.endswith("\r"):  # a \r\n line ending (the Red Pitaya's SCPI server)
            reply = reply[:-1]
        if not isinstance(reply, str) or not reply.isprintable():
            self.out_of_step = f"{command!r}: not printable text"
            raise self.bad_reply(command, reply, "not printable text")
        return reply.strip()

    def query_float(self, command: str) -> float:
        reply = self.query(command)
        try:
            v = float(reply)
        except ValueError:
            raise self.bad_reply(command, reply, "not a number") from None
        if not np.isfinite(v):
            raise self.bad_reply(command, reply, "not a finite number")
        return v

    def write_block(self, command: str, values: np.ndarray, datatype: str) -> None:
        self._call(command + "<block>", False, self.resource.write_binary_values, command, np.asarray(values),
                   datatype=datatype, is_big_endian=False)

    def query_block(self, command: str, datatype: str) -> np.ndarray:
        return self._call(command, True, self.resource.query_binary_values, command, datatype=datatype,
                          is_big_endian=False, container=np.array)

    def drain_errors(self, query: str = "SYST:ERR?", max_reads: int = 20) -> list[str]:
        """The instrument's error queue, read with ``query`` until error 0 (``+0,"No error"``;
        at most ``max_reads`` entries): the SCPI-99 queue every driver here shares."""
        out = []
        for _ in range(max_reads):
            e = self.query(query)
            if e.split(",")[0].strip().lstrip("+") in ("0", "-0"):
                break
            out.append(e)
        return out

    def check_errors(self, after: str, query: str = "SYST:ERR?") -> None:
        """:meth:`drain_errors`; any error is an InstrumentError naming the instrument and ``after``."""
        errors = self.drain_errors(query)
        if errors:
            raise InstrumentError(f"{self.name}: error after {after}: {'; '.join(errors)}")

    def bad_reply(self, command: str, reply, problem: str) -> InstrumentError:
        return InstrumentError(f"{self.name}: malformed reply to {command!r}: {problem}: {_shown(reply)}")

    def set_timeout_ms(self, ms: float) -> None:
        try:
            self.resource.timeout = ms
        except Exception as e:  # a resource without a settable timeout is a wiring error
            raise InstrumentError(f"{self.name}: cannot set the timeout: {e}") from None

    def close(self) -> None:
        try:
            self.resource.close()
        except Exception:
            pass


class SocketResource:
    """pyvisa's message-based resource surface over one raw TCP socket (``\\n`` terminated,
    IEEE 488.2 definite-length blocks). ``timeout`` [ms] bounds every read and write."""

    def __init__(self, host: str, port: int, timeout_ms: float, open_timeout_s: float = OPEN_TIMEOUT_S):
        self._sock = socket.create_connection((host, port), timeout=open_timeout_s)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._buf = bytearray()
        self.timeout = timeout_ms

    def _recv(self, deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TransportTimeout("timeout")
        self._sock.settimeout(left)
        try:
            chunk = self._sock.recv(1 << 16)
        except TimeoutError:
            if self._buf:
                n = len(self._buf)
                self._buf.clear()
                raise IncompleteReply(f"incomplete reply ({n} bytes, then nothing within the timeout)") from None
            raise TransportTimeout("timeout") from None
        if not chunk:
            raise ConnectionError("connection closed by the instrument")
        self._buf += chunk

    def _take(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            self._recv(deadline)
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    def _deadline(self) -> float:
        return time.monotonic() + float(self.timeout) / 1e3

    def write_raw(self, data: bytes) -> None:
        self._sock.settimeout(float(self.timeout) / 1e3)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise TransportTimeout("timeout while sending") from None

    def write(self, command: str) -> None:
        self.write_raw(command.encode("ascii") + b"\n")

    def read(self) -> str:
        deadline = self._deadline()
        while b"\n" not in self._buf:
            self._recv(deadline)
        i = self._buf.index(b"\n")
        line = bytes(self._buf[:i])
        del self._buf[: i + 1]
        return line.decode("ascii")

    def query(self, command: str) -> str:
        self.write(command)
        return self.read()

    def write_binary_values(self, command: str, values, datatype: str = "h", is_big_endian: bool = False) -> None:
        payload = np.asarray(values).astype(np.dtype(datatype).newbyteorder(">" if is_big_endian else "<")).tobytes()
        n = str(len(payload))
        self.write_raw(command.encode("ascii") + b"#" + str(len(n)).encode() + n.encode() + payload + b"\n")

    def query_binary_values(self, command: str, datatype: str = "B", is_big_endian: bool = False, container=np.array):
        self.write(command)
        deadline = self._deadline()
        head = self._take(2, deadline)
        if head[:1] != b"#" or not head[1:2].isdigit() or head[1:2] == b"0":
            raise ValueError(f"not a definite-length block: {bytes(head)!r}")
        digits = self._take(int(head[1:2]), deadline)
        if not digits.isdigit() or int(digits) > MAX_BLOCK_BYTES:
            raise ValueError(f"bad block length {digits!r}")
        payload = self._take(int(digits), deadline)
        end = self._take(1, deadline)
        if end == b"\r":  # a \r\n line ending (the Red Pitaya's SCPI server)
            end = self._take(1, deadline)
        if end != b"\n":
            raise ValueError("block not followed by the line terminator")
        dt = np.dtype(datatype).newbyteorder(">" if is_big_endian else "<")
        if len(payload) % dt.itemsize:
            raise ValueError(f"block of {len(payload)} bytes is not a whole number of {datatype!r} values")
        return container(np.frombuffer(payload, dtype=dt).astype(dt.newbyteorder("=")))

    def pending(self, wait_s: float = 0.0) -> bytes:
        """Bytes waiting unread (buffered or on the socket), waiting at most ``wait_s`` [s]
        for the first; they are consumed. A closed connection is a ConnectionError."""
        out = bytearray(self._buf)
        self._buf.clear()
        wait = max(wait_s, 0.0) if not out else 0.0
        while True:
            self._sock.settimeout(wait if wait > 0 else 1e-4)
            try:
                chunk = self._sock.recv(1 << 16)
            except TimeoutError:
                return bytes(out)
            if not chunk:
                if out:
                    return bytes(out)
                raise ConnectionError("connection closed by the instrument")
            out += chunk
            wait = 0.0

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def open_resource(address: str, name: str, *, library: str = "@py", timeout_ms: float = 5000.0):
    """Open ``address``: a raw socket address with ``library`` "@py" through
    :class:`SocketResource`, anything else through pyvisa (``library``: ``"@py"`` for pyvisa-py,
    ``"file.yaml@sim"`` for pyvisa-sim) with ``\\n`` termination and a bounded timeout. Errors
    name the instrument."""
    m = SOCKET_ADDRESS.match(address.strip())
    if m and library == "@py":
        try:
            return SocketResource(m.group(1), int(m.group(2)), timeout_ms)
        except OSError as e:
            raise InstrumentError(f"{name}: cannot connect to {address!r}: {e.strerror or e}") from None
    import pyvisa

    try:
        rm = pyvisa.ResourceManager(library)
        res = rm.open_resource(address, read_termination="\n", write_termination="\n", timeout=timeout_ms)
    except Exception as e:
        raise InstrumentError(f"{name}: cannot open {address!r} ({library}): {type(e).__name__}: {e}") from None
    return res

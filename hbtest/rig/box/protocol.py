"""The acquisition-box protocol's grammar, shared by the server and the client (the command
reference with transcripts is ``instruments/README.md``).

Framing: ASCII text lines terminated by ``\\n`` over TCP. A *command* is a header and optional
comma-separated parameters (``SOUR:FREQ 17.5``); headers are SCPI mnemonics, case-insensitive,
long or short form (``SYSTem:ERRor?`` accepts ``SYST:ERR?`` and ``system:error?``). A header
ending in ``?`` is a *query*: it always gets exactly one reply, also when it fails — then the
reply is ``!<code>,"<message>"`` and the same error is queued for ``SYST:ERR?`` (so a client
never waits for a reply that will not come). A command without ``?`` never replies; its errors
go to the queue.

Bulk data: an IEEE 488.2 definite-length arbitrary block ``#<d><len><bytes>`` (``d`` digits
giving ``len``), little-endian float64, at the end of a reply line after its text fields:
``<fields>,#<d><len><bytes>\\n``. A reply carries a block iff a ``#`` outside double quotes,
followed by a digit 1-9, occurs before the first ``\\n``.

Numbers are written with 17 significant digits (``repr``), so float64 values round-trip
exactly. Complex coefficients follow :mod:`hbtest.method.harmonics` (``X_k = a_k - i b_k``) and are
written as ``re,im`` pairs.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

__all__ = [
    "TERMINATION",
    "MAX_LINE_BYTES",
    "MAX_BLOCK_BYTES",
    "SCPI_INFINITY",
    "ERRORS",
    "ProtocolError",
    "Mnemonic",
    "split_command",
    "to_float",
    "to_int",
    "to_bool",
    "fmt",
    "block_header",
    "encode_block",
    "decode_block",
    "reply_length",
    "encode_array",
    "decode_array",
    "error_text",
    "error_reply",
    "parse_error_reply",
    "Status",
    "Record",
]

TERMINATION = b"\n"
MAX_LINE_BYTES = 1 << 16  # longer command lines are discarded (-363 input buffer overrun)
MAX_BLOCK_BYTES = 1 << 28  # a reply announcing a larger block is malformed
SCPI_INFINITY = 9.9e37  # SCPI's "no limit"

ERRORS = {
    0: "No error",
    -100: "Command error",
    -102: "Syntax error",
    -104: "Data type error",
    -108: "Parameter not allowed",
    -109: "Missing parameter",
    -113: "Undefined header",
    -220: "Parameter error",
    -221: "Settings conflict",
    -222: "Data out of range",
    -224: "Illegal parameter value",
    -300: "Device-specific error",
    -350: "Queue overflow",
    -363: "Input buffer overrun",
    201: "Outputs disarmed",
    202: "Tripped",
    203: "No demand in force",
    301: "Trip: voltage limit",
    302: "Trip: channel limit",
    303: "Trip: watchdog",
    304: "Trip: connection lost",
    310: "Box busy",
}


class ProtocolError(Exception):
    """A command the box refuses: SCPI or device error ``code`` with a detail message."""

    def __init__(self, code: int, detail: str = ""):
        self.code, self.detail = int(code), detail
        super().__init__(error_text(code, detail))


class Mnemonic:
    """A SCPI header pattern such as ``SOURce:APPLy?``: each node matches its short form (the
    upper-case letters) or its long form, case-insensitively."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.query = pattern.endswith("?")
        nodes = pattern.rstrip("?").split(":")
        parts = []
        for node in nodes:
            if node.startswith("*"):
                parts.append(re.escape(node))
                continue
            short = "".join(c for c in node if c.isupper() or c.isdigit())
            long_ = node.upper()
            parts.append(f"(?:{re.escape(long_)}|{re.escape(short)})" if short != long_ else re.escape(long_))
        self._re = re.compile(":?" + ":".join(parts) + (r"\?" if self.query else "") + r"\Z", re.IGNORECASE)

    def matches(self, header: str) -> bool:
        return self._re.match(header) is not None

    @property
    def short(self) -> str:
        return ":".join("".join(c for c in n if not c.islower()) for n in self.pattern.split(":"))


def split_command(line: str) -> tuple[str, list[str]]:
    """``"SOUR:COEF 1, 0.5,-0.25"`` -> ("SOUR:COEF", ["1", "0.5", "-0.25"])."""
    line = line.strip()
    head, _, rest = line.partition(" ")
    if "\t" in head:
        head, _, more = head.partition("\t")
        rest = more + " " + rest
    rest = rest.strip()
    params = [p.strip() for p in rest.split(",")] if rest else []
    return head, params


def to_float(text: str, what: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ProtocolError(-104, f"{what} must be a number, got {text!r}") from None
    if not math.isfinite(v):
        raise ProtocolError(-222, f"{what} must be finite")
    return v


def to_int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ProtocolError(-104, f"{what} must be an integer, got {text!r}") from None


def to_bool(text: str, what: str) -> bool:
    t = text.upper()
    if t in ("1", "ON"):
        return True
    if t in ("0", "OFF"):
        return False
    raise ProtocolError(-224, f"{what} must be ON, OFF, 1 or 0, got {text!r}")


def fmt(x) -> str:
    """A number as the protocol writes it (float64 round-trips exactly)."""
    if isinstance(x, (bool, np.bool_)):
        return "1" if x else "0"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return repr(float(x))


# -- blocks -----------------------------------------------------------------------------------


def block_header(size: int) -> bytes:
    """``#<d><len>``: the header of a definite-length block of ``size`` bytes."""
    n = str(int(size)).encode()
    if len(n) > 9:
        raise ValueError("block too long for a definite-length header")
    return b"#" + str(len(n)).encode() + n


def encode_block(payload: bytes) -> bytes:
    """``#<d><len><payload>`` (IEEE 488.2 definite-length arbitrary block)."""
    return block_header(len(payload)) + bytes(payload)


def decode_block(buf: bytes, start: int = 0) -> tuple[bytes, int]:
    """Decode the block starting at ``buf[start]`` (which must be ``#``): (payload, index just
    past it). Raises ValueError when malformed or incomplete."""
    if buf[start : start + 1] != b"#":
        raise ValueError("a block starts with '#'")
    d = buf[start + 1 : start + 2]
    if not d or not d.isdigit() or d == b"0":
        raise ValueError(f"bad block header digit {d!r} (indefinite or malformed block)")
    nd = int(d)
    digits = buf[start + 2 : start + 2 + nd]
    if len(digits) < nd or not digits.isdigit():
        raise ValueError(f"bad block length field {bytes(digits)!r}")
    n = int(digits)
    if n > MAX_BLOCK_BYTES:
        raise ValueError(f"block of {n} bytes exceeds the limit of {MAX_BLOCK_BYTES}")
    begin = start + 2 + nd
    if len(buf) < begin + n:
        raise ValueError(f"incomplete block: {len(buf) - begin} of {n} bytes")
    return bytes(buf[begin : begin + n]), begin + n


def _block_start(head: bytes) -> int:
    """Index of the ``#`` opening a block in the text ``head`` (before the first newline),
    outside double quotes, followed by a digit 1-9; -1 when none."""
    quoted = False
    for i, c in enumerate(head):
        if c == 0x22:  # '"'
            quoted = not quoted
        elif c == 0x23 and not quoted and i + 1 < len(head) and 0x31 <= head[i + 1] <= 0x39:
            return i
    return -1


def reply_length(buf: bytes) -> int | None:
    """Total length (terminator included) of the reply at the start of ``buf``, or None when
    more bytes are needed to know it. Raises ValueError for a malformed block header."""
    nl = buf.find(TERMINATION)
    head = buf if nl < 0 else buf[:nl]
    i = _block_start(head)
    if i < 0:
        if nl >= 0:
            return nl + 1
        if len(buf) > MAX_LINE_BYTES:
            raise ValueError(f"no line end in {len(buf)} bytes")
        # a block header may still be incomplete ("...,#" at the end of what we have)
        return None
    nd = head[i + 1] - 0x30
    digits = buf[i + 2 : i + 2 + nd]
    if len(digits) < nd:
        return None
    if not digits.isdigit():
        raise ValueError(f"bad block length field {bytes(digits)!r}")
    n = int(digits)
    if n > MAX_BLOCK_BYTES:
        raise ValueError(f"block of {n} bytes exceeds the limit of {MAX_BLOCK_BYTES}")
    return i + 2 + nd + n + len(TERMINATION)


def encode_array(a: np.ndarray) -> bytes:
    """Little-endian float64 bytes of ``a`` (C order)."""
    return np.ascontiguousarray(a, dtype="<f8").tobytes()


def decode_array(payload: bytes, shape=None) -> np.ndarray:
    if len(payload) % 8:
        raise ValueError(f"block of {len(payload)} bytes is not a whole number of float64 values")
    a = np.frombuffer(payload, dtype="<f8").astype(float)
    if shape is not None:
        shape = tuple(shape)
        if -1 in shape:
            known = int(np.prod([s for s in shape if s != -1]))
            if known == 0 or a.size % known:
                raise ValueError(f"{a.size} values do not fill shape {shape}")
        elif a.size != int(np.prod(shape)):
            raise ValueError(f"{a.size} values do not fill shape {shape}")
        a = a.reshape(shape)
    return a


# -- errors -----------------------------------------------------------------------------------


def error_text(code: int, detail: str = "") -> str:
    """``-113,"Undefined header; FOO"`` (SYST:ERR? format; quotes/newlines/# in the detail are
    replaced so a message never looks like a block or ends a line)."""
    base = ERRORS.get(code, "Device error" if code > 0 else "Error")
    msg = f"{base}; {detail}" if detail else base
    msg = msg.replace('"', "'").replace("\n", " ").replace("\r", " ").replace("#", "No.")
    return f'{code},"{msg}"'


def error_reply(code: int, detail: str = "") -> str:
    """The reply of a failed query: ``!`` + :func:`error_text`."""
    return "!" + error_text(code, detail)


_ERR_RE = re.compile(r'!?\s*([+-]?\d+)\s*,\s*"(.*)"\s*\Z', re.DOTALL)


def parse_error_reply(text: str) -> tuple[int, str]:
    """``-113,"Undefined header"`` (or with a leading ``!``) -> (-113, "Undefined header")."""
    m = _ERR_RE.match(text.strip())
    if not m:
        raise ValueError(f"not an error reply: {text!r}")
    return int(m.group(1)), m.group(2)


# -- reply records ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Status:
    """Reply of a time-advancing command (``SOUR:APPL?``, ``WAIT?``):
    ``<epoch>,<trip>,<elapsed_s>``."""

    epoch: int
    trip: int
    elapsed_s: float

    def format(self) -> str:
        return f"{self.epoch},{self.trip},{fmt(self.elapsed_s)}"

    @classmethod
    def parse(cls, text: str) -> "Status":
        f = text.strip().split(",")
        if len(f) != 3:
            raise ValueError(f"status reply needs 3 fields, got {len(f)}")
        return cls(int(f[0]), int(f[1]), _finite(f[2]))


@dataclass(frozen=True)
class Record:
    """Header of a measurement reply (``MEAS:COEF?``, ``MEAS:RAW?``):
    ``<epoch>,<trip>,<n_periods>,<elapsed_s>,<frequency_hz>,<overrange>,<t0_s>,#<block>``.
    ``overrange``: bit i set when channel i (``CONF:CHAN?`` order) reached the ADC full scale;
    ``t0_s``: demand time of the record's first sample; ``elapsed_s``: box clock at its end."""

    epoch: int
    trip: int
    n_periods: int
    elapsed_s: float
    frequency_hz: float
    overrange: int
    t0_s: float

    def format(self) -> str:
        return ",".join([str(self.epoch), str(self.trip), str(self.n_periods), fmt(self.elapsed_s),
                         fmt(self.frequency_hz), str(self.overrange), fmt(self.t0_s)])

    @classmethod
    def parse(cls, text: str) -> "Record":
        f = text.strip().split(",")
        if len(f) != 7:
            raise ValueError(f"record header needs 7 fields, got {len(f)}")
        return cls(int(f[0]), int(f[1]), int(f[2]), _finite(f[3]), _finite(f[4]), int(f[5]), _finite(f[6]))

    @staticmethod
    def split(reply: bytes) -> tuple["Record", bytes]:
        """Split a full measurement reply (terminator included or not) into header and payload."""
        i = _block_start(reply[:256])  # the header is short; the block may contain any byte
        if i < 0 or i == 0 or reply[i - 1 : i] != b",":
            raise ValueError("measurement reply without a data block")
        head = reply[: i - 1].decode("ascii")
        payload, end = decode_block(reply, i)
        if reply[end:] not in (b"", TERMINATION):
            raise ValueError(f"{len(reply) - end} unexpected bytes after the data block")
        return Record.parse(head), payload


def _finite(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise ValueError(f"non-finite value {text!r}")
    return v

"""The HELIC-DAQ protocol v3 wire codec (docs/helic.md; the specification is the HELIC-DAQ
repository's ``docs/protocol.md``, cited below by its section names): control frames with
their CRC, the control payloads, the stream packet and the discovery beacon. Pure functions
and small dataclasses, no sockets. Every multi-byte field is little-endian.

Control frame ("Frame layout"): ``magic u16 = 0x4C48, type u8, seq u8, len u16, payload,
crc u16`` with the CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF, no reflection, no final
XOR) over type through payload; payloads are at most 1024 bytes. Stream packet ("Stream
channel"): ``magic u16, version u8 = 3, values per record u8, seq u32, first sample index
u32, cumulative drops u32, decimation u16, record count u16``, then record-major f32 values.
Units are whatever the device declares (volts, turns, counts).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

__all__ = [
    "EPOCH_MODULUS",
    "MAGIC",
    "MAX_DATAGRAM",
    "MAX_PAYLOAD",
    "PACKET_DTYPE",
    "VERSION",
    "Beacon",
    "BrokerInfo",
    "CodecError",
    "ErrorCode",
    "FrameReader",
    "MsgType",
    "ParamDef",
    "Status",
    "StreamPacket",
    "beacon_request",
    "crc16",
    "decode_beacon",
    "decode_error",
    "decode_packets",
    "decode_frame",
    "decode_packet",
    "packet_head",
    "decode_param_defs",
    "decode_param_page",
    "decode_sources",
    "encode_beacon",
    "encode_error",
    "encode_frame",
    "encode_packet",
    "encode_param_def",
    "encode_param_page",
    "encode_sources",
    "pack_value",
    "records_per_packet",
    "unpack_value",
    "value_size",
]

MAGIC = 0x4C48  # "HL" little-endian
VERSION = 3
MAX_PAYLOAD = 1024
MAX_DATAGRAM = 1472  # bytes of a stream datagram at most
EPOCH_MODULUS = 1 << 24  # cmd_epoch wraps modulo 2^24 ("Source discovery")
MAX_PARAM_NAME = 23
MAX_SOURCE_NAME = 15
MAX_UNIT = 7
HEADER = struct.Struct("<HBBH")
PACKET_HEADER = struct.Struct("<HBBIIIHH")
PACKET_DTYPE = np.dtype([("magic", "<u2"), ("version", "u1"), ("m", "u1"), ("seq", "<u4"), ("first", "<u4"),
                         ("dropped", "<u4"), ("dec", "<u2"), ("n", "<u2")])  # PACKET_HEADER as a numpy record
TYPE_SIZES = {"B": 1, "b": 1, "H": 2, "h": 2, "I": 4, "i": 4, "f": 4, "c": 1}


class MsgType(IntEnum):
    """Message types ("Message types"; broker types 128-131 are not implemented)."""

    GET_PARAMS = 1
    GET_SOURCES = 2
    GET_PAR = 3
    SET_PAR = 4
    SET_BLOCK = 5
    COMMIT = 6
    STREAM_SETUP = 7
    STREAM_START = 8
    STREAM_STOP = 9
    STATUS = 10
    ERROR = 255


class ErrorCode(IntEnum):
    """Error codes of an error frame ("Message types")."""

    BAD_FRAME = 1
    UNKNOWN_TYPE = 2
    BAD_INDEX = 3
    BAD_LENGTH = 4
    READ_ONLY = 5
    BAD_VALUE = 6
    BUSY = 7


ERROR_TEXT = {1: "bad frame", 2: "unknown type", 3: "bad index", 4: "bad length", 5: "read-only",
              6: "bad value", 7: "busy"}


class CodecError(ValueError):
    """Bytes that do not decode (bad magic, CRC, length, text); ``code`` is the protocol's
    error code that describes it best."""

    def __init__(self, message: str, code: int = ErrorCode.BAD_FRAME):
        super().__init__(message)
        self.code = int(code)


def crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE of ``data``."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def encode_frame(msg_type: int, seq: int, payload: bytes = b"") -> bytes:
    """One control frame (request or response)."""
    if len(payload) > MAX_PAYLOAD:
        raise CodecError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD}", ErrorCode.BAD_LENGTH)
    body = struct.pack("<BBH", int(msg_type), int(seq) & 0xFF, len(payload)) + bytes(payload)
    return struct.pack("<H", MAGIC) + body + struct.pack("<H", crc16(body))


def decode_frame(frame: bytes) -> tuple[int, int, bytes]:
    """``(type, seq, payload)`` of one complete frame; CodecError if it is not one."""
    if len(frame) < HEADER.size + 2:
        raise CodecError("frame shorter than its header")
    magic, msg_type, seq, n = HEADER.unpack_from(frame)
    if magic != MAGIC:
        raise CodecError(f"bad magic 0x{magic:04X}")
    if n > MAX_PAYLOAD or len(frame) != HEADER.size + n + 2:
        raise CodecError(f"frame length {len(frame)} does not match its payload length {n}")
    (crc,) = struct.unpack_from("<H", frame, HEADER.size + n)
    if crc != crc16(frame[2:HEADER.size + n]):
        raise CodecError("CRC mismatch")
    return msg_type, seq, bytes(frame[HEADER.size:HEADER.size + n])


class FrameReader:
    """Splits a TCP byte stream into frames: :meth:`feed` bytes, then :meth:`next` returns
    ``(type, seq, payload)`` or None while a frame is incomplete. Bad framing raises
    CodecError (the connection must then be dropped, "Frame layout")."""

    def __init__(self):
        self._buf = bytearray()

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next(self):
        if len(self._buf) < HEADER.size:
            return None
        magic, _, _, n = HEADER.unpack_from(self._buf)
        if magic != MAGIC or n > MAX_PAYLOAD:
            raise CodecError(f"bad frame header (magic 0x{magic:04X}, length {n})")
        end = HEADER.size + n + 2
        if len(self._buf) < end:
            return None
        frame = bytes(self._buf[:end])
        del self._buf[:end]
        return decode_frame(frame)


def _ascii(data: bytes, what: str) -> str:
    try:
        return data.decode("ascii")
    except UnicodeDecodeError:
        raise CodecError(f"{what} is not ASCII", ErrorCode.BAD_VALUE) from None


# -- parameter and source discovery ------------------------------------------------------------
@dataclass(frozen=True)
class ParamDef:
    """A parameter definition: ``name``, ``type`` (a struct character of ``B b H h I i f c``),
    ``count`` elements, ``writable``. ``size``: bytes of its raw value."""

    name: str
    type: str
    count: int
    writable: bool

    @property
    def size(self) -> int:
        return TYPE_SIZES[self.type] * self.count


def encode_param_def(p: ParamDef) -> bytes:
    """``name NUL, type u8, count u16, writable u8``."""
    if len(p.name) > MAX_PARAM_NAME or not p.name.isascii() or p.type not in TYPE_SIZES:
        raise CodecError(f"bad parameter definition {p!r}", ErrorCode.BAD_VALUE)
    return p.name.encode() + b"\0" + struct.pack("<cHB", p.type.encode(), p.count, int(p.writable))


def decode_param_defs(data: bytes) -> list[ParamDef]:
    out, i = [], 0
    while i < len(data):
        j = data.find(b"\0", i)
        if j < 0 or j + 5 > len(data):
            raise CodecError("truncated parameter definition", ErrorCode.BAD_LENGTH)
        t, count, writable = struct.unpack_from("<cHB", data, j + 1)
        ty = _ascii(t, "parameter type")
        if ty not in TYPE_SIZES:
            raise CodecError(f"unknown parameter type {ty!r}", ErrorCode.BAD_VALUE)
        out.append(ParamDef(_ascii(data[i:j], "parameter name"), ty, count, bool(writable)))
        i = j + 5
    return out


def encode_param_page(defs, start: int, limit: int = MAX_PAYLOAD) -> bytes:
    """The GetParams response page from ``start``: as many complete definitions as fit
    ("Parameter discovery"). ``start == len(defs)`` is the empty terminal page."""
    if not 0 <= start <= len(defs):
        raise CodecError(f"start {start} beyond {len(defs)} parameters", ErrorCode.BAD_INDEX)
    body, nxt = b"", start
    while nxt < len(defs):
        d = encode_param_def(defs[nxt])
        if 4 + len(body) + len(d) > limit:
            break
        body += d
        nxt += 1
    return struct.pack("<HH", start, nxt) + body


def decode_param_page(payload: bytes) -> tuple[int, int, list[ParamDef]]:
    if len(payload) < 4:
        raise CodecError("GetParams page shorter than its header", ErrorCode.BAD_LENGTH)
    start, nxt = struct.unpack_from("<HH", payload)
    return start, nxt, decode_param_defs(payload[4:])


def encode_sources(sources) -> bytes:
    """``name NUL, unit NUL`` per (name, unit)."""
    out = b""
    for name, unit in sources:
        if len(name) > MAX_SOURCE_NAME or len(unit) > MAX_UNIT or not (name + unit).isascii():
            raise CodecError(f"bad source {name!r} [{unit!r}]", ErrorCode.BAD_VALUE)
        out += name.encode() + b"\0" + unit.encode() + b"\0"
    return out


def decode_sources(payload: bytes) -> list[tuple[str, str]]:
    parts = payload.split(b"\0")
    if payload and (parts[-1] != b"" or len(parts) % 2 != 1):
        raise CodecError("truncated source table", ErrorCode.BAD_LENGTH)
    parts = parts[:-1]
    return [(_ascii(parts[i], "source name"), _ascii(parts[i + 1], "source unit")) for i in range(0, len(parts), 2)]


# -- other payloads ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Status:
    """The Status response: protocol ``version``, ``n_params``, ``n_sources``,
    ``sample_rate`` [Hz] (f32), ``uptime_ms`` (wraps after about 49.7 days)."""

    version: int
    n_params: int
    n_sources: int
    sample_rate: float
    uptime_ms: int

    FORMAT = struct.Struct("<BHBfI")

    def encode(self) -> bytes:
        return self.FORMAT.pack(self.version, self.n_params, self.n_sources, self.sample_rate,
                                self.uptime_ms & 0xFFFFFFFF)

    @classmethod
    def decode(cls, payload: bytes) -> Status:
        if len(payload) != cls.FORMAT.size:
            raise CodecError(f"Status payload of {len(payload)} bytes (needs {cls.FORMAT.size})", ErrorCode.BAD_LENGTH)
        return cls(*cls.FORMAT.unpack(payload))


def encode_error(code: int, request_type: int) -> bytes:
    return struct.pack("<BB", int(code), int(request_type) & 0xFF)


def decode_error(payload: bytes) -> tuple[int, int]:
    if len(payload) != 2:
        raise CodecError("error payload is not two bytes", ErrorCode.BAD_LENGTH)
    return payload[0], payload[1]


def value_size(p: ParamDef) -> int:
    return p.size


def pack_value(p: ParamDef, value) -> bytes:
    """The raw value of parameter ``p``: ``count`` elements; a char array is a NUL-padded
    string. f32 values must be finite (SetPar rejects non-finite values)."""
    if p.type == "c":
        raw = value.encode("ascii") if isinstance(value, str) else bytes(value)
        if len(raw) > p.count:
            raise CodecError(f"{p.name}: {len(raw)} characters, at most {p.count}", ErrorCode.BAD_VALUE)
        return raw.ljust(p.count, b"\0")
    arr = np.atleast_1d(np.asarray(value, dtype=float))
    if arr.size != p.count:
        raise CodecError(f"{p.name}: {arr.size} values, needs {p.count}", ErrorCode.BAD_LENGTH)
    if p.type == "f" and not np.all(np.isfinite(arr)):
        raise CodecError(f"{p.name}: non-finite value", ErrorCode.BAD_VALUE)
    return struct.pack(f"<{p.count}{p.type}", *(arr if p.type == "f" else arr.astype(np.int64)))


def unpack_value(p: ParamDef, raw: bytes):
    """A str for char arrays, a scalar for count 1, else a numpy array."""
    if len(raw) != p.size:
        raise CodecError(f"{p.name}: {len(raw)} bytes, needs {p.size}", ErrorCode.BAD_LENGTH)
    if p.type == "c":
        return raw.split(b"\0", 1)[0].decode("ascii", errors="replace")
    vals = struct.unpack(f"<{p.count}{p.type}", raw)
    return vals[0] if p.count == 1 else np.array(vals)


# -- stream packets ----------------------------------------------------------------------------
@dataclass(frozen=True)
class StreamPacket:
    """One stream datagram: ``seq`` packet sequence number, ``first_index`` sample index of
    record 0 (record i has ``first_index + i * decimation``), ``dropped`` cumulative
    source-ring drops, ``values`` f32 array (records, values per record)."""

    seq: int
    first_index: int
    dropped: int
    decimation: int
    values: np.ndarray

    @property
    def indices(self) -> np.ndarray:
        return self.first_index + self.decimation * np.arange(self.values.shape[0], dtype=np.int64)


def records_per_packet(values_per_record: int) -> int:
    return (MAX_DATAGRAM - PACKET_HEADER.size) // (4 * values_per_record)


def packet_header(seq: int, first_index: int, dropped: int, decimation: int, shape) -> bytes:
    """The 20-byte header of a datagram of ``shape`` = (records, values per record)."""
    n, m = shape
    if PACKET_HEADER.size + 4 * n * m > MAX_DATAGRAM or not 1 <= m <= 255:
        raise CodecError(f"{n} records of {m} values do not fit one datagram", ErrorCode.BAD_LENGTH)
    return PACKET_HEADER.pack(MAGIC, VERSION, m, seq & 0xFFFFFFFF, first_index & 0xFFFFFFFF,
                              dropped & 0xFFFFFFFF, decimation, n)


def encode_packet(p: StreamPacket) -> bytes:
    v = np.ascontiguousarray(p.values, dtype="<f4")
    return packet_header(p.seq, p.first_index, p.dropped, p.decimation, v.shape) + v.tobytes()


def packet_head(data: bytes) -> tuple[int, int, int, int, int, int]:
    """The checked header of a stream datagram: ``(values per record, seq, first_index,
    dropped, decimation, record count)`` (the values follow from byte 20, record-major f32)."""
    if len(data) < PACKET_HEADER.size:
        raise CodecError("datagram shorter than the stream header")
    magic, version, m, seq, first, dropped, dec, n = PACKET_HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise CodecError(f"not a v3 stream packet (magic 0x{magic:04X}, version {version})")
    if m == 0 or len(data) != PACKET_HEADER.size + 4 * m * n:
        raise CodecError(f"datagram of {len(data)} bytes for {n} records of {m} values")
    return m, seq, first, dropped, dec, n


def decode_packet(data: bytes) -> StreamPacket:
    m, seq, first, dropped, dec, n = packet_head(data)
    values = np.frombuffer(data, dtype="<f4", offset=PACKET_HEADER.size).reshape(n, m)
    return StreamPacket(seq, first, dropped, dec, values)


def decode_packets(data, size: int, m: int) -> tuple[np.ndarray, np.ndarray]:
    """The stream datagrams of ``m`` values per record among the consecutive datagrams of
    ``size`` bytes in ``data`` (the last may be shorter: a receive the kernel coalesced, or one
    datagram with ``size = len(data)``): their headers (PACKET_DTYPE) and their values, one
    (records, m) f32 array, in order. A datagram that is not a whole v3 stream packet of that
    layout is left out (as :func:`packet_head` would refuse it, or another stream's)."""
    buf = np.frombuffer(data, np.uint8)
    whole, rest = divmod(buf.size, size)
    k = whole + int(rest >= PACKET_HEADER.size)
    heads = np.ndarray((k,), PACKET_DTYPE, buf, 0, (size,))
    lengths = np.full(k, size)
    lengths[whole:] = rest
    ok = ((heads["magic"] == MAGIC) & (heads["version"] == VERSION) & (heads["m"] == m) & (m > 0)
          & (lengths == PACKET_HEADER.size + 4 * m * heads["n"].astype(np.int64)))
    every = bool(ok.all())  # the usual case: no selection (copies of structured arrays are slow)
    parts = [np.zeros((0, m), "<f4")]
    if ok[:whole].any():
        rows = buf[:whole * size].reshape(whole, size)[:, PACKET_HEADER.size:]
        parts.append(np.ascontiguousarray(rows if every else rows[ok[:whole]]).view("<f4").reshape(-1, m))
    if k > whole and ok[-1]:
        parts.append(np.frombuffer(data, "<f4", offset=whole * size + PACKET_HEADER.size).reshape(-1, m))
    return heads if every else heads[ok], np.concatenate(parts) if len(parts) > 2 else parts[-1]


# -- broker information and discovery beacon ---------------------------------------------------
@dataclass(frozen=True)
class BrokerInfo:
    """BrokerInfo extension version 1 ("Broker extension"); decoded for completeness, our
    server is a direct endpoint, not a broker."""

    version: int
    state: int
    capabilities: int
    capacity_ms: int
    available: int
    decimation: int
    count: int
    clients: int
    sources: tuple[int, ...]

    FORMAT = struct.Struct("<BBHIIHIHB")

    def encode(self) -> bytes:
        return self.FORMAT.pack(self.version, self.state, self.capabilities, self.capacity_ms, self.available,
                                self.decimation, self.count, self.clients, len(self.sources)) + bytes(self.sources)

    @classmethod
    def decode(cls, payload: bytes) -> BrokerInfo:
        if len(payload) < cls.FORMAT.size:
            raise CodecError("BrokerInfo payload too short", ErrorCode.BAD_LENGTH)
        *head, n = cls.FORMAT.unpack_from(payload)
        if len(payload) != cls.FORMAT.size + n:
            raise CodecError("BrokerInfo source list does not match its count", ErrorCode.BAD_LENGTH)
        return cls(*head, tuple(payload[cls.FORMAT.size:]))  # type: ignore[call-arg]  # head: the fixed fields in order


def beacon_request() -> bytes:
    return struct.pack("<HB", MAGIC, 1)


@dataclass(frozen=True)
class Beacon:
    """A beacon response: protocol ``version``, ``control_port``, ``mac`` (6 bytes),
    ``experiment`` and ``firmware`` (at most 16 characters each)."""

    version: int
    control_port: int
    mac: bytes
    experiment: str
    firmware: str


BEACON = struct.Struct("<HBBH6s16s16s")


def encode_beacon(b: Beacon) -> bytes:
    return BEACON.pack(MAGIC, 2, b.version, b.control_port, b.mac, b.experiment.encode(), b.firmware.encode())


def decode_beacon(data: bytes) -> Beacon:
    if len(data) != BEACON.size:
        raise CodecError(f"beacon of {len(data)} bytes (needs {BEACON.size})", ErrorCode.BAD_LENGTH)
    magic, kind, version, port, mac, exp, fw = BEACON.unpack(data)
    if magic != MAGIC or kind != 2:
        raise CodecError("not a beacon response")
    return Beacon(version, port, mac, exp.split(b"\0", 1)[0].decode("ascii"), fw.split(b"\0", 1)[0].decode("ascii"))

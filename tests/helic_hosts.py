"""A HELIC-DAQ v3 host written from the specification apart from hbtest's codec (frames with
``binascii.crc_hqx``, CRC-16/CCITT-FALSE), for the served-device tests (not a test module):
raw requests, error codes as numbers, the parameter table by name."""

from __future__ import annotations

import binascii
import socket
import struct

MAGIC = b"HL"
GET_PARAMS, GET_SOURCES, GET_PAR, SET_PAR, SET_BLOCK, COMMIT, STREAM_SETUP, STREAM_START, STREAM_STOP, STATUS = range(1, 11)
ERROR = 255
SIZES = {"c": 1, "f": 4, "I": 4, "H": 2, "B": 1, "i": 4, "h": 2}


class RawHost:
    """One control connection; :meth:`ask` returns ``(type, payload)`` of the reply."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.seq = 0
        self.buf = b""

    def send(self, msg_type: int, payload: bytes = b"") -> int:
        self.seq = (self.seq + 1) & 0xFF
        body = struct.pack("<BBH", msg_type, self.seq, len(payload)) + payload
        self.sock.sendall(MAGIC + body + struct.pack("<H", binascii.crc_hqx(body, 0xFFFF)))
        return self.seq

    def reply(self) -> tuple[int, int, bytes]:
        while True:
            if len(self.buf) >= 6:
                n = struct.unpack_from("<H", self.buf, 4)[0]
                if len(self.buf) >= 8 + n:
                    frame, self.buf = self.buf[:8 + n], self.buf[8 + n:]
                    assert frame[:2] == MAGIC
                    assert struct.unpack_from("<H", frame, 6 + n)[0] == binascii.crc_hqx(frame[2:6 + n], 0xFFFF)
                    return frame[2], frame[3], frame[6:6 + n]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("the device closed the connection")
            self.buf += chunk

    def ask(self, msg_type: int, payload: bytes = b"") -> tuple[int, bytes]:
        seq = self.send(msg_type, payload)
        rtype, rseq, body = self.reply()
        assert rseq == seq
        return rtype, body

    def code(self, msg_type: int, payload: bytes = b"") -> int:
        """0 when accepted, else the error code."""
        rtype, body = self.ask(msg_type, payload)
        if rtype == ERROR:
            return body[0]
        assert rtype == msg_type
        return 0

    def params(self) -> dict[str, tuple[int, str, int, bool]]:
        """name -> (index, type, count, writable), paged."""
        out, start, i = {}, 0, 0
        while True:
            rtype, body = self.ask(GET_PARAMS, struct.pack("<H", start))
            assert rtype == GET_PARAMS
            s0, nxt = struct.unpack_from("<HH", body)
            if nxt == start:
                return out
            rest = body[4:]
            while rest:
                name, rest = rest.split(b"\0", 1)
                t, count, w = struct.unpack_from("<cHB", rest)
                rest = rest[4:]
                out[name.decode()] = (i, t.decode(), count, bool(w))
                i += 1
            start = nxt

    def sources(self) -> list[str]:
        rtype, body = self.ask(GET_SOURCES)
        parts = body.split(b"\0")[:-1]
        return [p.decode() for p in parts[0::2]]

    def close(self) -> None:
        self.sock.close()


def setpar(table: dict, name: str, fmt: str, *values) -> bytes:
    """SetPar payload: index of ``name`` in ``table`` (RawHost.params), ``values`` as ``fmt``."""
    return struct.pack("<H", table[name][0]) + struct.pack("<" + fmt, *values)


def capture(host: RawHost, ids: list[int], count: int, decimation: int = 1):
    """A count-limited stream of sources ``ids``: ``(indices, values (count, len(ids)))``
    from the datagrams ("Stream channel": header <HBBIIIHH, then records of f32)."""
    import numpy as np

    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(10.0)
    try:
        assert host.code(STREAM_SETUP, struct.pack("<HIB", decimation, count, len(ids)) + bytes(ids)) == 0
        assert host.code(STREAM_START, struct.pack("<H", rx.getsockname()[1])) == 0
        idx, rows = [], []
        while len(rows) < count:
            data = rx.recv(65536)
            magic, version, m, seq, first, dropped, dec, n = struct.unpack_from("<HBBIIIHH", data)
            assert magic == 0x4C48 and version == 3 and m == len(ids) and dec == decimation
            vals = np.frombuffer(data, "<f4", offset=20).reshape(n, m)
            idx += [first + dec * k for k in range(n)]
            rows += list(vals)
        return np.array(idx), np.array(rows, float)
    finally:
        rx.close()

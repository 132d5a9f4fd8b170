"""Helpers of the box tests (not a test module): a bare-socket host speaking the box protocol
and ``hbtest serve`` started as a process."""

import socket
from pathlib import Path

from served import serve as served_serve

from hbtest.rig.box.protocol import parse_error_reply, reply_length

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"


class Host:
    """A bare socket host: lines out, whole replies (blocks by length) in."""

    def __init__(self, address, timeout=10.0):
        self.s = socket.create_connection(address, timeout=timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def send(self, *lines):
        self.s.sendall(b"".join((x.encode() if isinstance(x, str) else x) + b"\n" for x in lines))

    def reply(self) -> bytes:
        while True:
            head = bytes(self.buf[:400])  # a block's header is near the start: no copy of a long reply
            n = reply_length(head if b"#" in head else bytes(self.buf))
            if n is not None and len(self.buf) >= n:
                r = bytes(self.buf[:n])
                del self.buf[:n]
                return r
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed by the box")
            self.buf += chunk

    def ask(self, *lines) -> str:
        self.send(*lines)
        return self.reply().decode("latin-1").rstrip("\n")

    def code(self, *lines) -> int:
        """The error code of the reply to the last line (0: not an error)."""
        r = self.ask(*lines)
        return parse_error_reply(r)[0] if r.startswith("!") else 0

    def close(self):
        self.s.close()


def serve(*extra):
    """``hbtest serve`` of the twin on a free port: (process, port)."""
    served = served_serve("box", None, *extra)
    return served.process, served.port

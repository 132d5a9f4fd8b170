"""Replay the box protocol's example transcript (``instruments/README.md``, the ```` ```transcript ````
block) against a fresh box and show, or write, what the box answers now.

Usage: ``python scripts/box_transcript.py [--write]`` (a few seconds). The box is the one the
test replays against (``tests/test_box_protocol.py::test_readme_transcript_replays_byte_for_byte``):
``instruments/virtual-cantilever.toml``, seed 7, watchdog 10 s, on loopback. Every ``> command``
line is sent as written; each ``< reply`` line is replaced by the box's reply (a block reply as
its header and ``<N bytes>``, as the README writes it). Without ``--write`` the changed lines are
printed (``-`` old, ``+`` new) and the exit code is 1 when any changed; with ``--write`` the README
is rewritten in place (only the transcript block) after a change of the box that the test then
flags. Read the diff before committing it: the transcript is the protocol's documentation.
"""

from __future__ import annotations

import argparse
import socket
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_rig  # noqa: E402
from hbtest.rig.box.protocol import reply_length  # noqa: E402
from hbtest.serve.box import BoxServer  # noqa: E402

README = ROOT / "instruments" / "README.md"
TWIN = ROOT / "instruments" / "virtual-cantilever.toml"
FENCE = "```transcript\n"
TIMEOUT_S = 5.0


def split(text: str) -> tuple[str, str, str]:
    """(text before the block's body, the body, text after it)."""
    head, rest = text.split(FENCE, 1)
    body, tail = rest.split("```", 1)
    return head + FENCE, body, "```" + tail


def steps(body: str) -> list[tuple[str, int]]:
    """(command, number of reply lines) per ``> `` line of the body."""
    out: list[tuple[str, int]] = []
    for line in body.splitlines():
        if line.startswith("> "):
            out.append((line[2:], 0))
        elif line.startswith("< ") and out:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        elif line.strip():
            raise SystemExit(f"{README}: transcript line {line!r} is neither '> command' nor '< reply'")
    return out


def shown(reply: bytes) -> str:
    """A reply as the README writes it: text without its newline, a block as header + size."""
    i = reply.find(b"#")
    if 0 <= i < 80 and i + 1 < len(reply) and reply[i + 1 : i + 2].isdigit() and reply[i + 1] != ord("0"):
        nd = int(reply[i + 1 : i + 2])
        n = int(reply[i + 2 : i + 2 + nd])
        return f"{reply[: i + 2 + nd].decode()} <{n} bytes>"
    return reply.decode().rstrip("\n")


def replay(body: str) -> str:
    lines = []
    with BoxServer(load_rig(TWIN), port=0, seed=7, watchdog_s=10.0) as srv:
        s = socket.create_connection(srv.address, timeout=TIMEOUT_S)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        try:
            for cmd, replies in steps(body):
                lines.append("> " + cmd)
                s.sendall(cmd.encode() + b"\n")
                for _ in range(replies):
                    while (n := reply_length(buf)) is None or len(buf) < n:
                        chunk = s.recv(1 << 16)
                        if not chunk:
                            raise SystemExit(f"the box closed the connection after {cmd!r}")
                        buf += chunk
                    reply, buf = buf[:n], buf[n:]
                    lines.append("< " + shown(reply))
        finally:
            s.close()
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="rewrite the README's transcript block")
    args = ap.parse_args()
    head, body, tail = split(README.read_text())
    new = replay(body)
    old_lines, new_lines = body.splitlines(), new.splitlines()
    changed = [(a, b) for a, b in zip(old_lines, new_lines) if a != b]
    changed += [(a, "") for a in old_lines[len(new_lines):]] + [("", b) for b in new_lines[len(old_lines):]]
    for a, b in changed:
        print("-", a)
        print("+", b)
    if args.write:
        README.write_text(head + new + tail)
        print(f"{README}: {len(changed)} line(s) rewritten")
        return 0
    print(f"transcript_changed_lines={len(changed)}")
    return 1 if changed else 0


if __name__ == "__main__":
    raise SystemExit(main())

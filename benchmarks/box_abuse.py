"""``hbtest serve`` under abuse: for each kind of adversarial host, is the server alive, does a
fresh host's health probe (``*IDN?``) get its answer, how much did the server's RSS grow, and
how long does SIGTERM take to end it when it arrives in the middle of that abuse.

    python benchmarks/box_abuse.py [--rig instruments/virtual-cantilever.toml] [--quick]

Prints ``key=value`` lines: per case ``<case>.alive``, ``<case>.probe_ms``, ``<case>.rss_mb``
(growth since the server started, after the case; ``peak_rss_growth_mb``: the peak over all), then per case ``<case>.sigterm_s`` (a fresh server, SIGTERM
0.3 s into the abuse); summary ``all_alive``, ``max_rss_growth_mb``, ``max_sigterm_s``.
``--quick`` skips the per-case SIGTERM servers (one SIGTERM mid-command at the end instead).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def serve(rig):
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "serve", "--rig", str(rig), "--port", "0"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"})
    m = re.search(r"listening on 127\.0\.0\.1:(\d+) ", p.stdout.readline())
    if not m:
        raise SystemExit("hbtest serve did not start")
    threading.Thread(target=p.stdout.read, daemon=True).start()  # drain its event lines
    return p, int(m.group(1))


def rss_mb(pid, key="VmRSS") -> float:
    """Resident set [MB] (``key="VmHWM"``: its peak so far)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def conn(port, timeout=10.0):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_line(s, limit=1 << 26) -> bytes:
    buf = bytearray()
    while b"\n" not in buf and len(buf) < limit:
        chunk = s.recv(1 << 20)
        if not chunk:
            break
        buf += chunk
    return bytes(buf)


def read_reply(s) -> bytes:
    from hbtest.rig.box.protocol import reply_length

    buf = bytearray()
    while True:
        n = reply_length(bytes(buf[:400])) if b"#" in buf[:400] else reply_length(bytes(buf))
        if n is not None and len(buf) >= n:
            return bytes(buf[:n])
        chunk = s.recv(1 << 20)
        if not chunk:
            return bytes(buf)
        buf += chunk


DEMAND = b"OUTP ON\nSOUR:FREQ 17\nSOUR:HARM 1\nSOUR:COEF 1,0.1,0\nSOUR:COEF 2,0,0\nSOUR:APPL? 2\n"


def ask(port, *lines):
    with conn(port) as s:
        for ln in lines:
            s.sendall(ln if isinstance(ln, bytes) else ln.encode() + b"\n")
            if (ln if isinstance(ln, bytes) else ln.encode()).rstrip().split(b" ")[0].endswith(b"?"):
                read_reply(s)


# -- the abuse cases (each: port -> None; may leave connections behind) ------------------------
def overlong_line(port):
    with conn(port) as s:
        s.sendall(b"SOUR:FREQ " + b"1" * 200_000 + b"\n*OPC?\n")
        read_line(s)


def malformed_block_params(port):
    ask(port, b"SOUR:COEF 1,#9999999999\n", b"MEAS:RAW? #3abc\n", "*OPC?")


def garbage_bytes(port):
    ask(port, bytes(range(256)).replace(b"\n", b"") + b"\n", b"\x7f\x7f?\n", "*OPC?")


def huge_frequency_dc(port):
    ask(port, b"SOUR:FREQ 1e308\nSOUR:HARM 0\nSOUR:COEF 1,0,0\nSOUR:COEF 2,0,0\nSOUR:APPL? 1\n", "MEAS:RAW? 1", "*RST", "*OPC?")


def tiny_frequency(port):
    ask(port, b"SOUR:FREQ 5e-324\nSOUR:HARM 1\nSOUR:APPL? 1\n", "MEAS:RAW? 1", "*OPC?")


def huge_record(port):
    ask(port, b"SOUR:FREQ 0.001\nSOUR:HARM 1\nSOUR:APPL? 0\n", "MEAS:RAW? 100000", "*OPC?")


def endless_ramp(port):
    ask(port, b"SOUR:FREQ 1e-300\nSOUR:HARM 1\nSOUR:COEF 1,0,0\nSOUR:COEF 2,0,0\n", "SOUR:APPL? 1", "*OPC?")


def slow_reader_28mb(port):
    with conn(port, timeout=30) as s:
        s.sendall(DEMAND)
        read_reply(s)
        s.sendall(b"MEAS:RAW? 3000\n")
        time.sleep(0.5)
        read_reply(s)
        s.sendall(b"OUTP OFF\n")


def staging_leak(port):
    with conn(port) as s:
        s.sendall(b"SOUR:FREQ -1\n*OPC?\n")
        read_line(s)
    ask(port, b"SOUR:FREQ 17\nSOUR:HARM 1\nSOUR:COEF 1,0,0\nSOUR:COEF 2,0,0\n", "SOUR:APPL? 0")


def second_hosts(port):
    with conn(port) as s:
        s.sendall(b"*IDN?\n")
        read_line(s)
        others = [conn(port) for _ in range(5)]
        for o in others:
            o.sendall(b"*IDN?\n" * 100)
        for o in others:
            read_line(o)
            o.close()


def connection_burst(port):
    socks = [conn(port) for _ in range(50)]
    for s in socks:
        s.close()


def half_open(port):
    s = conn(port)
    s.sendall(DEMAND)
    read_reply(s)
    s.shutdown(socket.SHUT_WR)
    time.sleep(0.2)
    s.close()


def abrupt_disconnect(port):
    s = conn(port)
    s.sendall(DEMAND + b"MEAS:RAW? 500\n")
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.close()


def query_flood(port):
    with conn(port, timeout=30) as s:
        s.sendall(b"*IDN?\n" * 5000)
        got = 0
        buf = b""
        while got < 5000:
            buf += s.recv(1 << 20)
            got = buf.count(b"\n")


def held_reply(port):
    with conn(port) as s:
        s.sendall(DEMAND)
        read_reply(s)
        s.sendall(b"DIAG:DEL 2\nMEAS:RAW? 1\n")
        time.sleep(1.0)


CASES = [overlong_line, malformed_block_params, garbage_bytes, huge_frequency_dc, tiny_frequency, huge_record,
         endless_ramp, slow_reader_28mb, staging_leak, second_hosts, connection_burst, half_open,
         abrupt_disconnect, query_flood, held_reply]


def probe(port, wait_s=5.0) -> float:
    """ms until a fresh host's *IDN? is answered (the previous host may need the busy wait)."""
    t = time.monotonic()
    end = t + wait_s
    while time.monotonic() < end:
        try:
            with conn(port, timeout=wait_s) as s:
                s.sendall(b"*IDN?\n")
                if read_line(s).startswith(b"HBTEST"):
                    return (time.monotonic() - t) * 1e3
        except OSError:
            pass
        time.sleep(0.05)
    return float("inf")


def sigterm_mid(rig, case) -> float:
    p, port = serve(rig)
    threading.Thread(target=lambda: _quietly(case, port), daemon=True).start()
    time.sleep(0.3)
    t = time.monotonic()
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return float("inf")
    return time.monotonic() - t


def _quietly(case, port):
    try:
        case(port)
    except OSError:
        pass


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rig", default=str(ROOT / "instruments" / "virtual-cantilever.toml"))
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args(argv)
    p, port = serve(a.rig)
    print(f"warmup_probe_ms={probe(port, 60.0):.1f}")  # the first host after start-up (lazy imports)
    base = rss_mb(p.pid)
    alive_all, worst_rss = True, 0.0
    try:
        for case in CASES:
            t = time.monotonic()
            _quietly(case, port)
            alive = p.poll() is None
            ms = probe(port) if alive else float("inf")
            growth = rss_mb(p.pid) - base if alive else float("nan")
            alive_all &= alive and ms < 5000
            worst_rss = max(worst_rss, growth)
            print(f"{case.__name__}.alive={int(alive)}")
            print(f"{case.__name__}.probe_ms={ms:.1f}")
            print(f"{case.__name__}.rss_mb={growth:.1f}")
            print(f"{case.__name__}.case_s={time.monotonic() - t:.2f}", flush=True)
        print(f"peak_rss_growth_mb={rss_mb(p.pid, 'VmHWM') - base:.1f}")
    finally:
        t = time.monotonic()
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        print(f"shared_server.sigterm_s={time.monotonic() - t:.2f}")
    worst_term = 0.0
    for case in ([] if a.quick else CASES):
        s = sigterm_mid(a.rig, case)
        worst_term = max(worst_term, s)
        print(f"{case.__name__}.sigterm_s={s:.2f}", flush=True)
    print(f"all_alive={int(alive_all)}")
    print(f"max_rss_growth_mb={worst_rss:.1f}")
    if not a.quick:
        print(f"max_sigterm_s={worst_term:.2f}")


if __name__ == "__main__":
    main()

"""``hbtest serve --rig FILE [--host 127.0.0.1] [--port 5025] [--seed N]``: serve the
acquisition-box protocol (instruments/README.md) backed by the virtual twin of FILE.

The first line printed is ``hbtest serve: listening on HOST:PORT ...`` (``--port 0`` picks a
free port; scripts read the port from that line). Ctrl+C or SIGTERM: outputs ramp to zero,
sockets close, exit 0.

``--protocol helic`` serves the twin as a HELIC-DAQ protocol v3 device instead (docs/helic.md):
control on TCP PORT (default 2350), the stream from UDP PORT+1 (hbtest.serve.helic).

``--protocol scpi`` serves the twin behind a simulated Keysight 33500B generator on PORT
(default 5025) and an InfiniiVision scope on ``--scope-port`` (default PORT+1; with PORT 0 a
free port too): hbtest.serve.scpi, written from the instruments' manuals. Its first line is
``generator listening on HOST:P, scope listening on HOST:Q``.

``--protocol redpitaya`` serves the twin behind two simulated Red Pitaya STEMlab 125-14 boards
(hbtest.serve.scpi.redpitaya, written from the Red Pitaya SCPI documentation) on PORT
(default 5000) and ``--scope-port`` (default PORT+1; a free port when PORT is 0), the twin sampled at 125 MHz / 16384
(``rig.sample_rate_hz`` set so). Its first line is ``board 1 listening on HOST:P, board 2
listening on HOST:Q``."""

from __future__ import annotations

import os
import signal
import sys
import threading


def register(sub) -> None:
    p = sub.add_parser("serve", help="serve the acquisition-box protocol over TCP, backed by a virtual rig (loopback by default)")
    p.add_argument("--rig", required=True, metavar="FILE", help="a virtual rig file, e.g. instruments/virtual-cantilever.toml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a value of the rig file (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--protocol", choices=("box", "helic", "scpi", "redpitaya"), default="box",
                   help="box: the acquisition-box protocol (default); helic: HELIC-DAQ protocol v3 (docs/helic.md); "
                        "scpi: a simulated Keysight 33500B generator and InfiniiVision scope; "
                        "redpitaya: two simulated Red Pitaya STEMlab 125-14 boards")
    p.add_argument("--port", type=int, default=None,
                   help="TCP port (default 5025, helic 2350; 0 = a free port, printed on the first line)")
    p.add_argument("--scope-port", type=int, default=None,
                   help="scpi: the scope's TCP port; redpitaya: board 2's (default: PORT+1, or a free port when PORT is 0)")
    p.add_argument("--seed", type=int, default=None, help="seed of the twin (default: the rig file's)")
    p.add_argument("--watchdog", type=float, default=None, metavar="S",
                   help="default watchdog time [s] (a host sets its own with OUTP:PROT:WDOG)")
    p.add_argument("--idle", type=float, default=None, metavar="S",
                   help="disconnect a disarmed host silent this long [s] (default 300; 0 = never)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..config import load_rig
    from ..errors import ConfigError, UserError
    from ..serve.box import DEFAULT_IDLE_S, DEFAULT_WATCHDOG_S, BoxServer

    cfg = load_rig(args.rig, args.overrides)
    if cfg.kind != "virtual":
        raise ConfigError(args.rig, "rig.kind", f"hbtest serve needs a virtual rig file (the twin to serve), got kind {cfg.kind!r}")
    if args.port is None:
        args.port = {"helic": 2350, "redpitaya": 5000}.get(args.protocol, 5025)
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be in 0..65535, got {args.port}")
    watchdog = DEFAULT_WATCHDOG_S if args.watchdog is None else args.watchdog
    if not watchdog >= 0:
        raise UserError(f"--watchdog must be >= 0, got {args.watchdog}")
    idle = DEFAULT_IDLE_S if args.idle is None else args.idle
    if not idle >= 0:
        raise UserError(f"--idle must be >= 0, got {args.idle}")
    stop = threading.Event()
    started = threading.Event()

    def say(event) -> None:
        if event.kind == "listening":
            return  # printed below, with the resource name, as the first line
        if started.is_set():
            print(f"hbtest serve: [{event.elapsed_s:10.3f} s] {event.message}", flush=True)

    def handler(signum, frame):
        stop.set()

    # handlers first: a signal right after the "listening" line must already stop cleanly
    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        peer = {"helic": _serve_helic, "scpi": _serve_scpi, "redpitaya": _serve_redpitaya}.get(args.protocol)
        if peer is not None:
            return peer(args, cfg, stop)
        server = BoxServer(cfg, host=args.host, port=args.port, seed=args.seed, watchdog_s=watchdog, idle_s=idle, on_event=say)
        try:
            host, port = server.start()
        except OSError as e:
            raise UserError(f"hbtest serve: cannot listen on {args.host}:{args.port}: {e.strerror or e}") from None
        try:
            print(f"hbtest serve: listening on {host}:{port} (resource {server.resource}; rig {cfg.identity!r}; Ctrl+C stops)", flush=True)
            started.set()
            while not stop.wait(0.2):
                pass
        finally:
            server.stop()
            print("hbtest serve: stopped (outputs at zero, sockets closed)", flush=True)
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    sys.stdout.flush()
    sys.stderr.flush()
    if stop.is_set():
        # stopped by a signal: outputs at zero, sockets closed, output flushed — end now; the
        # interpreter's teardown of scipy alone takes ~1 s on a loaded machine
        os._exit(0)
    return 0


def _serve_helic(args, cfg, stop) -> int:
    from ..errors import UserError
    from ..serve.helic import HelicServer

    def say(kind, message) -> None:
        print(f"hbtest serve: {message}", flush=True)

    server = HelicServer(cfg, host=args.host, port=args.port, seed=args.seed, on_event=say)
    try:
        host, port = server.start()
    except OSError as e:
        raise UserError(f"hbtest serve: cannot listen on {args.host}:{args.port} (and UDP next to it): {e.strerror or e}") from None
    try:
        print(f"hbtest serve: listening on {host}:{port} (HELIC-DAQ v3 control; stream from UDP {server.stream_port};"
              f" rig {cfg.identity!r}; Ctrl+C stops)", flush=True)
        while not stop.wait(0.2):
            pass
    finally:
        server.stop()
    return 0


def _serve_scpi(args, cfg, stop) -> int:
    from ..errors import UserError
    from ..serve.scpi import open_bench

    scope_port = args.scope_port if args.scope_port is not None else (args.port + 1 if args.port else 0)
    try:
        bench = open_bench(cfg, args.seed, host=args.host, generator_port=args.port, scope_port=scope_port)
    except OSError as e:
        raise UserError(f"hbtest serve: cannot listen on {args.host}:{args.port}/{scope_port}: {e.strerror or e}") from None
    with bench:
        g, s = bench.generator_server, bench.scope_server
        print(f"generator listening on {g.host}:{g.port}, scope listening on {s.host}:{s.port}"
              f" (simulated 33500B + InfiniiVision; rig {cfg.identity!r}; Ctrl+C stops)", flush=True)
        while not stop.wait(0.2):
            pass
    return 0


def _serve_redpitaya(args, cfg, stop) -> int:
    from ..config import load_rig
    from ..errors import UserError
    from ..serve.scpi.redpitaya import BASE_HZ, open_boards

    rate = BASE_HZ / 16384  # the boards' decimation in instruments/redpitaya-loopback.toml
    cfg = load_rig(args.rig, [*args.overrides, f"rig.sample_rate_hz={rate!r}"])  # the twin at the boards' rate
    ports = (args.port, args.scope_port if args.scope_port is not None else (args.port + 1 if args.port else 0))
    try:
        boards = open_boards(cfg, args.seed, host=args.host, ports=ports)
    except OSError as e:
        raise UserError(f"hbtest serve: cannot listen on {args.host}:{ports[0]}/{ports[1]}: {e.strerror or e}") from None
    with boards:
        a, b = boards.servers
        print(f"board 1 listening on {a.host}:{a.port}, board 2 listening on {b.host}:{b.port}"
              f" (simulated Red Pitaya STEMlab 125-14 x2 at {rate:g} Hz; rig {cfg.identity!r}; Ctrl+C stops)", flush=True)
        while not stop.wait(0.2):
            pass
    return 0

"""``python -m hbtest.rig.scpi.sim --rig TWIN.toml [--generator-port P] [--scope-port Q] [--seed S]``:
serve the simulated 33500B and InfiniiVision on loopback until SIGINT/SIGTERM (exit 0)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading


def main(argv=None) -> int:
    from ....config import load_rig
    from ....errors import ConfigError
    from . import open_bench

    p = argparse.ArgumentParser(prog="python -m hbtest.rig.scpi.sim")
    p.add_argument("--rig", required=True, help="rig file of the twin (kind virtual)")
    p.add_argument("--generator-port", type=int, default=0)
    p.add_argument("--scope-port", type=int, default=0)
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args(argv)
    try:
        bench = open_bench(load_rig(a.rig), a.seed, generator_port=a.generator_port, scope_port=a.scope_port)
    except (ConfigError, OSError) as e:
        print(f"hbtest.rig.scpi.sim: error: {e}", file=sys.stderr)
        return 2
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with bench:
        g, s = bench.generator_server, bench.scope_server
        print(f"generator listening on {g.host}:{g.port}, scope listening on {s.host}:{s.port}", flush=True)
        while not done.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())

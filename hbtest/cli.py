"""The ``hbtest`` command line. Each subcommand lives in ``hbtest/commands/<name>.py`` and
registers itself through ``register(subparsers)``. A :class:`~hbtest.errors.UserError` becomes
one line on stderr and exit code 2; Ctrl+C outside a sweep exits 130."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import UserError

COMMANDS = ("design", "sweep", "resume", "plot", "export", "stability", "classical", "compare")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hbtest",
        description="Fourier-domain iterative hybrid testing of structures (virtual twin or real rig).",
    )
    parser.add_argument("--version", action="version", version=f"hbtest {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"hbtest.commands.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"hbtest.commands.{name}":
                continue  # command not part of this build
            raise
        module.register(sub)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed its one-line usage error
        return int(e.code or 0) if e.code in (0, None) else 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as e:
        print(f"hbtest: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("hbtest: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

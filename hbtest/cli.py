"""The ``hbtest`` command line. Each subcommand lives in ``hbtest/commands/<name>.py`` and
registers itself through ``register(subparsers)``. A :class:`~hbtest.errors.UserError` becomes
one line on stderr and its exit code (2 for a user mistake; 3 a run stopped by the rig; 4 a
store write failure); Ctrl+C exits 130, SIGTERM 143. Numerical warnings (overflow, invalid
value) raised while a command runs are collected and summarised in one line, never shown raw.

A command runs with one BLAS thread (threadpoolctl): the twin's and the solver's matrices are
small, so threads buy nothing, and a thread count that follows the machine's cores would make
the last bits of a seeded run depend on the machine it ran on (README, "Reproducibility").
The numerics are imported by the command that needs them, after the parse (``hbtest --help``
imports neither numpy nor scipy), so :func:`main` also sets the BLAS libraries' thread
variables to 1 before the command runs: a BLAS loaded after the threadpoolctl limit was taken
(scipy's own OpenBLAS, numpy's when nothing imported it yet) reads them when it loads."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings

from threadpoolctl import threadpool_limits

from . import __version__
from .errors import Terminated, UserError

#: the thread-count variables of the BLAS and OpenMP libraries numpy and scipy load
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")

COMMANDS = ("design", "sweep", "resume", "plot", "export", "stability", "classical", "compare", "serve", "rig", "modal", "campaign", "calibrate", "reduce", "report", "twin")


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
    os.environ.update(dict.fromkeys(BLAS_THREAD_VARIABLES, "1"))  # a BLAS loaded from here on
    with warnings.catch_warnings(record=True) as caught, threadpool_limits(limits=1, user_api="blas"):
        warnings.simplefilter("always", RuntimeWarning)
        try:
            return int(args.func(args) or 0)
        except UserError as e:
            print(f"hbtest: error: {_one_line(e)}", file=sys.stderr)
            return e.exit_code
        except Terminated:
            print("hbtest: terminated (SIGTERM)", file=sys.stderr)
            return 143
        except KeyboardInterrupt:
            print("hbtest: interrupted", file=sys.stderr)
            return 130
        finally:
            _report_warnings(caught)


def _one_line(e: Exception) -> str:
    return " ".join(str(e).split())


def _report_warnings(caught) -> None:
    """One line for the numerical warnings a command raised (where, how many): a NaN or an
    overflow in an analysis is worth knowing about, but not as a raw numpy message."""
    numeric = [w for w in caught if issubclass(w.category, RuntimeWarning)]
    for w in caught:
        if not issubclass(w.category, RuntimeWarning):
            print(f"hbtest: warning: {w.message}", file=sys.stderr)
    if numeric:
        first = numeric[0]
        where = f"{first.filename.rsplit('/', 1)[-1]}:{first.lineno}"
        print(f"hbtest: note: {len(numeric)} numerical warning(s) during this command, first: '{first.message}' at {where};"
              " values computed from NaN/overflow are shown as nan", file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

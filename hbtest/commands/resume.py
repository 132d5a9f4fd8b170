"""``hbtest resume STORE``: finish an interrupted or killed sweep."""

from __future__ import annotations

from .sweep import add_run_options


def register(sub) -> None:
    p = sub.add_parser("resume", help="finish an interrupted or killed sweep, redoing only unfinished points")
    p.add_argument("store", metavar="STORE", help="the run's zarr store")
    add_run_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..sweep.runner import exit_code, resume
    from .render import printer

    ds = resume(args.store, progress=None if args.quiet else printer(), seed=args.seed, plot=False if args.no_plot else None)
    return exit_code(ds)

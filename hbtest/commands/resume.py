"""``hbtest resume STORE``: finish an interrupted or killed sweep."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("resume", help="finish an interrupted or killed sweep, redoing only unfinished points")
    p.add_argument("store", metavar="STORE", help="the run's zarr store")
    p.add_argument("--seed", type=int, default=None, help="seed of a virtual rig (default: the rig file's)")
    p.add_argument("--no-plot", action="store_true", help="do not write the Bode plot")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..sweep import resume

    ds = resume(args.store, progress=None if args.quiet else (lambda s: print(s, flush=True)), seed=args.seed,
                plot=False if args.no_plot else None)
    status = ds.attrs.get("status")
    return 0 if status == "completed" else 130 if status == "interrupted" else 1

"""``hbtest sweep FILE``: run an iterative hybrid-test sweep into a zarr store."""

from __future__ import annotations

from .design import add_file_arguments


def register(sub) -> None:
    p = sub.add_parser("sweep", help="run a frequency sweep of the iterative hybrid test (writes a zarr store and a Bode plot)")
    add_file_arguments(p)
    p.add_argument("--store", metavar="PATH", help="output store (default: the file's output.store)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at that path")
    add_run_options(p)
    p.set_defaults(func=run)


def add_run_options(p) -> None:
    """Options shared by the commands that run a sweep (``sweep``, ``resume``)."""
    p.add_argument("--seed", type=int, default=None, help="seed of a virtual rig (default: the rig file's; resume: the store's)")
    p.add_argument("--no-plot", action="store_true", help="do not write the Bode plot")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def run(args) -> int:
    from ..config import load_sweep
    from ..sweep.runner import exit_code
    from ..sweep.runner import run as run_sweep
    from .render import printer

    cfg = load_sweep(args.file, args.overrides)
    ds = run_sweep(
        cfg, args.store, progress=None if args.quiet else printer(), overwrite=args.overwrite,
        seed=args.seed, plot=False if args.no_plot else None, overrides=tuple(args.overrides),
    )
    return exit_code(ds)

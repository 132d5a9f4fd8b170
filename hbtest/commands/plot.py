"""``hbtest plot STORE [--out DIR] [--kind bode|convergence|family|all]``: PNG plots of a run
(``all``: the family plot too when the store is a stepped-force family)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("plot", help="plot a run store: Bode plot of the interface FRFs, solver convergence")
    p.add_argument("store", metavar="STORE", help="run store (.zarr directory)")
    p.add_argument("--out", metavar="DIR", default=None, help="directory for the PNG files (default: next to the store)")
    p.add_argument("--kind", choices=("bode", "convergence", "family", "all"), default="all", help="which plot (default: all)")
    p.add_argument("--sync", metavar="INDEX", type=int, default=None, help="also print the synchronisation table of the point in slot INDEX")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from ..analysis.backbone import has_levels
    from ..analysis.export import check_intact
    from ..analysis.frf import format_sync_table, sync_table
    from ..analysis.plot import bode_png, convergence_png, default_png_path, family_png
    from ..errors import UserError
    from ..store import open_run

    check_intact(args.store)  # UserError for a missing, foreign or damaged store
    ds = open_run(args.store)
    kinds = ("bode", "convergence") + (("family",) if has_levels(ds) else ()) if args.kind == "all" else (args.kind,)
    writers = {"bode": bode_png, "convergence": convergence_png, "family": family_png}
    for kind in kinds:
        target = default_png_path(args.store, kind)
        if args.out is not None:
            out_dir = Path(args.out)
            if out_dir.exists() and not out_dir.is_dir():
                raise UserError(f"--out {out_dir}: not a directory")
            target = out_dir / target.name
        print(writers[kind](args.store, target))
    if args.sync is not None:
        n = ds.sizes["frequency"]
        if not 0 <= args.sync < n:
            raise UserError(f"--sync {args.sync}: slot outside 0..{n - 1}")
        if not bool(ds["done"].values[args.sync]):
            raise UserError(f"--sync {args.sync}: that point is not finished")
        print(format_sync_table(sync_table(ds, args.sync)))
    return 0

"""``hbtest export STORE [--netcdf FILE] [--split-complex] [--uff FILE]``."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("export", help="export a run store to netCDF (h5netcdf) and/or UFF type 58")
    p.add_argument("store", metavar="STORE", help="run store (.zarr directory)")
    p.add_argument("--netcdf", metavar="FILE", default=None, help="write the whole dataset to a netCDF file (complex stored natively)")
    p.add_argument("--split-complex", action="store_true", help="with --netcdf: split complex variables into *_real/*_imag (strict netCDF-4)")
    p.add_argument("--uff", metavar="FILE", default=None, help="write the FRFs as UFF type 58 records (needs pyuff: pip install hbtest[uff])")
    p.add_argument("--harmonic", metavar="K", type=int, default=1, help="harmonic order of the UFF FRFs (default 1)")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..analysis.export import check_intact, to_netcdf, to_uff
    from ..errors import UserError
    from ..store import RunStore

    if args.netcdf is None and args.uff is None:
        raise UserError("export: give --netcdf FILE and/or --uff FILE")
    check_intact(args.store)  # UserError for a missing, foreign or damaged store
    store = RunStore.open(args.store)
    if args.uff is not None and args.harmonic not in store.harmonics:
        raise UserError(f"--harmonic {args.harmonic}: not solved in {args.store} (orders {list(store.harmonics)})")
    if args.netcdf is not None:
        print(to_netcdf(args.store, args.netcdf, split_complex=args.split_complex))
    if args.uff is not None:
        print(to_uff(args.store, args.uff, harmonic=args.harmonic))
    return 0

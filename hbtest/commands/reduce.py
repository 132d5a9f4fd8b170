"""``hbtest reduce STORE --calibration FILE --store OUT [--force-reconstruction M]
[--overwrite]``: re-reduce a run's raw records with another calibration
(:mod:`hbtest.calibration.reduce`) into a new store that records both calibrations; prints
the compatibility residual of each point's state under the new calibration."""

from __future__ import annotations


def register(sub) -> None:
    from ..sensors import FORCE_METHODS

    p = sub.add_parser("reduce", help="recompute interface quantities from a store's raw records with another calibration")
    p.add_argument("store", metavar="STORE", help="run store (.zarr) written with output.raw_records")
    p.add_argument("--calibration", required=True, help="calibration record (JSON, from hbtest calibrate)")
    p.add_argument("--store", dest="out", required=True, help="the new store to write")
    p.add_argument("--force-reconstruction", choices=FORCE_METHODS, default="segment", help="force reconstruction rule (default: segment)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --store")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..calibration import load_calibration
    from ..calibration.reduce import reduce_store

    rec = load_calibration(args.calibration)
    points = reduce_store(args.store, rec, args.out, method=args.force_reconstruction, overwrite=args.overwrite)
    print(f"{args.out}: {len(points)} point(s) of {args.store} re-reduced with {rec.identification}")
    for p in points:
        print(f"  {p.frequency_hz:10.4f} Hz  residual |U_P - U_N| = {p.residual_norm * 1e3:.4g} mm")
    return 0

"""``hbtest reduce STORE --calibration FILE --store OUT [--force-reconstruction M]
[--overwrite]``: recompute a run with another calibration (:mod:`hbtest.analysis.reduce`)
into a new store that records both calibrations. A store that keeps every evaluation's channel
coefficients (sweeps of this hbtest) is re-solved: the hybrid solution a re-run with the new
calibration converges to (:mod:`hbtest.calibration.resolve`); prints per point the method, the
voltage change and how far it extrapolates beyond the measured voltages. An older store with
raw records only is re-reduced from its final windows (the state, with its residual)."""

from __future__ import annotations


def register(sub) -> None:
    from ..method.force_methods import FORCE_METHODS

    p = sub.add_parser("reduce", help="recompute a run's results with another calibration, without the rig")
    p.add_argument("store", metavar="STORE", help="run store (.zarr) of an hbtest sweep")
    p.add_argument("--calibration", required=True, help="calibration record (JSON, from hbtest calibrate)")
    p.add_argument("--store", dest="out", required=True, help="the new store to write")
    p.add_argument("--force-reconstruction", choices=FORCE_METHODS, default=None, help="force reconstruction rule (default: the sweep's, else segment)")
    p.add_argument("--ps-model-uncertainty", type=float, default=None, metavar="FRACTION",
                   help="relative standard uncertainty of the PS model on the model_jacobian path (default 0.01)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing store at --store")
    p.set_defaults(func=run)


def run(args) -> int:
    import math

    from ..analysis.reduce import reduce_store
    from ..calibration import load_calibration
    from ..calibration.resolve import EXTRAPOLATION_WARNING

    rec = load_calibration(args.calibration)
    from ..errors import UserError
    from ..store import RunStore

    if args.ps_model_uncertainty is not None and not (0.0 <= args.ps_model_uncertainty < 1.0):
        raise UserError(f"--ps-model-uncertainty: {args.ps_model_uncertainty:g} is not a fraction in [0, 1)")
    points = reduce_store(args.store, rec, args.out, method=args.force_reconstruction, overwrite=args.overwrite,
                          ps_model_uncertainty=args.ps_model_uncertainty)
    print(f"{args.out}: {len(points)} point(s) of {args.store} re-reduced with {rec.identification}")
    far = 0
    for p in points:
        if p.mode == "hybrid":
            ext = f", |dV| = {p.voltage_change:.3g} V ({p.extrapolation:.2g} x spread)" if math.isfinite(p.extrapolation) else ""
            flag = "  EXTRAPOLATED" if p.extrapolated else ""
            far += p.extrapolated
            print(f"  {p.frequency_hz:10.4f} Hz  {p.method} ({p.n_evaluations} evaluations){ext}, residual {p.residual_norm * 1e3:.3g} mm{flag}")
        else:
            print(f"  {p.frequency_hz:10.4f} Hz  final window only: residual |U_P - U_N| = {p.residual_norm * 1e3:.4g} mm")
    if any(p.mode == "final_window" for p in points):
        print("note: final-window points give the state under the new calibration, not the re-run's hybrid solution; re-run the sweep with this hbtest to re-solve them")
    for w in RunStore.open(args.out).attrs.get("reduction_warnings") or []:
        print(f"warning: {w}")
    if far:
        print(f"warning: {far} point(s) extrapolate beyond {EXTRAPOLATION_WARNING:g} x the spread of their measured voltages")
    return 0

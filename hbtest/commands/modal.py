"""``hbtest modal STORE [--json] [--dof u|theta] [--samples N] [--seed S] [--no-write]``:
natural frequency, damping ratio and modal constant of the swept mode(s) from the hybrid FRF,
with confidence intervals (:mod:`hbtest.analysis.modal`); written to the store attribute
``modal_fit`` (under the store lock) and reported on stdout."""

from __future__ import annotations


def register(sub) -> None:
    from ..analysis.modal_settings import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED

    p = sub.add_parser("modal", help="fit natural frequency, damping ratio and modal constant of the swept mode(s), with confidence intervals")
    p.add_argument("store", metavar="STORE", help="run store (.zarr directory)")
    p.add_argument("--json", action="store_true", help='print {"modes": [...]} as JSON instead of the text report')
    p.add_argument("--dof", choices=("u", "theta"), default="u", help="interface FRF to fit (default: u, the displacement)")
    p.add_argument("--harmonic", type=int, default=1, help="harmonic order of the FRF (default: 1)")
    p.add_argument("--samples", type=int, default=BOOTSTRAP_SAMPLES, help=f"bootstrap refits per mode (default: {BOOTSTRAP_SAMPLES})")
    p.add_argument("--seed", type=int, default=BOOTSTRAP_SEED, help=f"seed of the bootstrap (default: {BOOTSTRAP_SEED})")
    p.add_argument("--no-write", action="store_true", help="do not write the result into the store's attributes")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from ..analysis.modal import CONFIDENCE, fit_modes, modal_fit_attribute, write_modal_fit
    from ..errors import UserError
    from ..store import open_run

    if args.samples < 20:
        raise UserError(f"--samples {args.samples}: at least 20 bootstrap refits are needed for an interval")
    ds = open_run(args.store)  # UserError for a missing store / not a store
    try:
        modes = fit_modes(ds.load(), args.dof, args.harmonic, samples=args.samples, seed=args.seed)
    except (ValueError, KeyError) as e:
        raise UserError(f"{args.store}: no modal fit: {e}") from None
    doc = modal_fit_attribute(modes, harmonic=args.harmonic, samples=args.samples, seed=args.seed, confidence=CONFIDENCE)
    if not args.no_write:
        write_modal_fit(args.store, doc)
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    pct = f"{100 * CONFIDENCE:g} %"
    print(f"{args.store}: {len(modes)} mode(s) from the {args.dof}/F FRF (harmonic {args.harmonic}), {pct} confidence intervals"
          f" (bootstrap, {args.samples} refits, seed {args.seed})")
    for i, m in enumerate(modes, 1):
        lo, hi = m.frequency_hz_ci
        zl, zh = m.damping_ratio_ci
        al, ah = m.modal_constant_ci
        print(f"mode {i}: f_n = {m.frequency_hz:.5f} Hz [{lo:.5f}, {hi:.5f}]   zeta = {100 * m.damping_ratio:.4f} % [{100 * zl:.4f}, {100 * zh:.4f}]")
        print(f"        |A| = {m.modal_constant:.5g} {m.modal_constant_units} [{al:.5g}, {ah:.5g}], phase {m.modal_constant_phase_deg:.2f} deg;"
              f" {m.n_points} points {m.band_hz[0]:g}-{m.band_hz[1]:g} Hz, misfit {m.misfit:.2f} u_H" + ("; PEAK AT THE BAND EDGE (extrapolated)" if m.at_edge else ""))
    if not args.no_write:
        print(f"written to {args.store} attribute modal_fit")
    return 0

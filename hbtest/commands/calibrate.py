"""``hbtest calibrate RIGFILE [--procedure mains,channels] [--frequencies HZ,...] [--repeats N]
[--periods N] [--seed S] [--out FILE] [--json]``: run calibration procedures on the rig
(:mod:`hbtest.calibration`) and write a calibration record (JSON) that a rig file references
with ``[sensors] calibration = "FILE"``. Prints nominal vs calibrated values with their
standard uncertainties."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("calibrate", help="run sensor calibration procedures on a rig and write a calibration record (JSON)")
    p.add_argument("rigfile", metavar="RIGFILE", help="rig file (.toml)")
    p.add_argument("--procedure", default="mains,channels", help="comma-separated procedures: mains, channels (default: both)")
    p.add_argument("--frequencies", default=None, help="channel calibration drive frequencies [Hz], comma-separated (default: 2,3,14,18)")
    p.add_argument("--repeats", type=int, default=None, help="acquisitions per frequency and actuator (default: 4)")
    p.add_argument("--periods", type=int, default=None, help="forcing periods per acquisition (default: 20)")
    p.add_argument("--seed", type=int, default=None, help="seed of a virtual rig (default: the rig file's)")
    p.add_argument("--out", default=None, help="record file to write (default: <rigfile stem>-calibration.json beside the rig file)")
    p.add_argument("--json", action="store_true", help="print the record as JSON")
    p.set_defaults(func=run)


def _csv_numbers(text: str, what: str) -> tuple:
    from ..errors import UserError

    try:
        vals = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise UserError(f"{what}: comma-separated numbers expected, got {text!r}") from None
    if not vals or any(not v > 0 for v in vals):
        raise UserError(f"{what}: positive numbers expected, got {text!r}")
    return vals


def run(args) -> int:
    import dataclasses
    import json
    from pathlib import Path

    from ..calibration import ChannelSettings, run_calibration, save_calibration
    from ..config import load_rig
    from ..errors import UserError
    from ..rig import open_rig

    cfg = load_rig(args.rigfile)
    procs = tuple(p.strip() for p in args.procedure.split(",") if p.strip())
    ch = ChannelSettings()
    changes = {}
    if args.frequencies:
        changes["frequencies_hz"] = _csv_numbers(args.frequencies, "--frequencies")
    for opt, fld in (("repeats", "repeats"), ("periods", "n_periods")):
        v = getattr(args, opt)
        if v is not None:
            if v < 2:
                raise UserError(f"--{opt} {v}: at least 2")
            changes[fld] = v
    ch = dataclasses.replace(ch, **changes)
    out = Path(args.out) if args.out else Path(args.rigfile).with_name(Path(args.rigfile).stem + "-calibration.json")
    with open_rig(cfg, args.seed) as rig:
        rec = run_calibration(rig, cfg.physical, procs, channels=ch)
    save_calibration(rec, out)
    if args.json:
        print(json.dumps(rec.to_dict(), indent=2))
        return 0
    print(f"calibration of {rec.rig_identity!r} ({', '.join(rec.procedure)}), {rec.date_utc}")
    if "mains_hz" in rec.values:
        print(f"  mains: {rec.values['mains_hz']:.6f} Hz +/- {rec.standard_uncertainty['mains_hz']:.2g} (nominal {cfg.sensors.mains_hz:g} Hz)")
    for name, v in (rec.values.get("channels") or {}).items():
        u = rec.standard_uncertainty["channels"][name]
        nom = cfg.sensors.channel(name)
        print(f"  {name}: scale {v['scale_per_v']:.6g} +/- {u['scale_per_v']:.2g} per V (x{v['scale_per_v'] / nom.scale:.5f} of nominal),"
              f" skew {v['skew_us']:.2f} +/- {u['skew_us']:.2f} us (nominal {nom.skew * 1e6:g})")
    ref = rec.details.get("channels", {}).get("reference")
    if ref:
        print(f"  reference channel {ref}: absolute scale not identified (needs a known displacement)")
    print(f"written {out}; use it with [sensors] calibration = \"{out}\"")
    return 0

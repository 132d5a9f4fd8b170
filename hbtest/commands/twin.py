"""``hbtest twin RIGFILE --out TWIN.toml [--records FILE|DIR] [--template FILE] [--force]``: a
virtual twin of the rig, measured from the rig itself through the Rig protocol
(:mod:`hbtest.twin`): writes TWIN.toml (every fitted value with a comment naming its measurement
and standard uncertainty) and TWIN.json (the measurements). ``--records FILE``: fit from the
measurements of an earlier run instead of driving the rig; ``--records DIR`` (or an ``.npz``):
fit the noise and mains from stream records a lab already took (:mod:`hbtest.twin.streams`,
the layout of the authors' ``lab_records.npz``), RIGFILE giving the gauge layout they map to.

``hbtest twin --check TWIN.toml RIGFILE``: the same statistics measured on both, side by side,
each with its ratio; last line ``twin_worst_ratio=<x>``. ``hbtest twin --check TWIN.toml
--records DIR``: the twin's records taken the way the lab's were, against the lab's table."""

from __future__ import annotations

from pathlib import Path

#: the reference twin, whose mechanics a twin of a non-virtual rig starts from
REFERENCE = Path(__file__).resolve().parents[2] / "instruments" / "virtual-cantilever.toml"


def register(sub) -> None:
    p = sub.add_parser("twin", help="measure a virtual twin of the rig from the rig itself (or --check a twin against the rig)")
    p.add_argument("rigfile", metavar="RIGFILE", nargs="?",
                   help="the rig file (.toml) of the rig to measure (with --check: the rig to compare with; not with --check --records)")
    p.add_argument("--out", metavar="TWIN.toml", help="the twin's rig file to write (its record: the same name, .json)")
    p.add_argument("--records", metavar="FILE|DIR", help="fit from the record (.json) of an earlier `hbtest twin` instead of driving the rig,"
                   " or from a lab's stream records (a directory holding lab_records.npz, or the .npz: load_lab.py's layout)")
    p.add_argument("--template", metavar="FILE", help="virtual rig file whose mechanics the twin takes (default: RIGFILE when virtual, else the reference twin)")
    p.add_argument("--check", metavar="TWIN.toml", help="compare the twin TWIN.toml with RIGFILE: the same statistics on both")
    p.add_argument("--quick", action="store_true", help="shorter measurements (about a third of the rig time; larger uncertainties)")
    p.add_argument("--seed", type=int, default=None, help="seed of a virtual rig (default: the rig file's)")
    p.add_argument("--force", action="store_true", help="overwrite --out and its record")
    p.set_defaults(func=run)


def _settings(quick: bool):
    from ..calibration.procedures import ChannelSettings
    from ..twin import TwinSettings

    if not quick:
        return TwinSettings()
    return TwinSettings(quiet_records=4, quiet_record_s=2.0, quiet_settle_s=1.0, decay_repeats=2,
                        channels=ChannelSettings(frequencies_hz=(3.0, 14.0), n_periods=20, repeats=4, settle_s=4.0),
                        scatter_evaluations=30, scatter_periods=6)


def _measure(cfg, path: str, settings, seed):
    from ..rig import open_rig
    from ..twin import bound_s, measure
    from .render import printer

    with open_rig(cfg, seed) as rig:
        b = bound_s(rig, settings)
        print(f"hbtest twin: measuring {cfg.identity!r} ({path}): 4 steps, at most {b:.0f} s ({b / 60:.1f} min) of rig time", flush=True)
        return measure(rig, cfg.physical, settings, printer())


def _template(args, cfg):
    from ..config import load_rig
    from ..errors import UserError

    path = Path(args.template) if args.template else Path(args.rigfile) if cfg.kind == "virtual" else REFERENCE
    if not path.is_file():
        raise UserError(f"--template {path}: no such file (a virtual rig file whose mechanics the twin takes)")
    tcfg = load_rig(path)
    if tcfg.kind != "virtual":
        raise UserError(f"--template {path}: a virtual rig file is needed, this one is [rig].kind = {tcfg.kind!r}")
    return path, tcfg


def _outputs(args) -> tuple[Path, Path]:
    from ..errors import UserError

    if not args.out:
        raise UserError("hbtest twin: --out TWIN.toml is required (the twin's rig file to write)")
    out = Path(args.out)
    rec = out.with_suffix(".json")
    for p in (out, rec):
        if p.exists() and not args.force:
            raise UserError(f"{p} exists: not overwritten (choose another --out, or --force)")
    return out, rec


def run(args) -> int:
    from ..errors import UserError

    streams = bool(args.records) and (Path(args.records).is_dir() or args.records.endswith(".npz"))
    if args.check and streams:
        return _check_streams(args)
    if not args.rigfile:
        raise UserError("hbtest twin: RIGFILE is needed (the rig file of the rig to measure or to compare with)")
    if args.check:
        return _check(args)
    return _make_from_streams(args) if streams else _make(args)


def _load_record(path: str) -> dict:
    import json

    from ..errors import UserError

    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"--records {path}: not a readable JSON record ({e})") from None
    rec = doc.get("record", doc) if isinstance(doc, dict) else None
    missing = [k for k in ("quiet", "decays", "channels", "scatter") if not isinstance(rec, dict) or k not in rec]
    if missing or not isinstance(rec, dict):
        raise UserError(f"--records {path}: no {missing[0]!r} measurement (a record written by `hbtest twin` is expected)")
    return rec


def _make(args) -> int:
    import json
    from datetime import datetime, timezone

    from ..config import load_rig
    from ..errors import UserError
    from ..twin import fit_mechanics, fit_record
    from ..twin.write import twin_text

    cfg = load_rig(args.rigfile)
    if cfg.physical is None:
        raise UserError(f"{args.rigfile}: [physical] is needed (the beam model the channel gains are fitted through)")
    out, rec_path = _outputs(args)
    tpath, tcfg = _template(args, cfg)
    record = _load_record(args.records) if args.records else _measure(cfg, args.rigfile, _settings(args.quick), args.seed)
    nz = tcfg.spec.noise
    params, quantities = fit_record(record, cfg.sensors, nz.mains_drift_hz)
    # a virtual rig is its own template (exact mechanics): the clamp is fitted only to another template's
    mech = None if tpath.resolve() == Path(args.rigfile).resolve() else fit_mechanics(params, quantities, tcfg.spec, cfg.sensors)
    if mech is not None:
        params["clamp"], qm, record["mechanics"] = mech
        quantities = quantities + qm
    meta = {"rigfile": args.rigfile, "clamp_damping": (tcfg.spec.clamp.support_damping, tcfg.spec.clamp.rotational_damping), "template": str(tpath), "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "rig_time_s": record["rig_time_s"]["total"], "drift": (nz.mains_drift_hz, nz.mains_drift_period_s, str(tpath)),
            "input_range_v": record["quiet"].get("input_range_v") or nz.adc_range_v, "seed": tcfg.spec.seed}
    _write_twin(out, twin_text(Path(args.rigfile).read_text(), tpath.read_text(), cfg, params, quantities, meta), args.rigfile)
    rec_path.write_text(json.dumps({"meta": meta, "record": record, "quantities": [q.__dict__ for q in quantities]}, indent=1))
    _report(quantities, record["rig_time_s"], out, rec_path)
    return 0


def _write_twin(out: Path, text: str, source: str) -> None:
    """``text`` to ``out`` once it parses as a rig file (written beside, then swapped in: an
    existing twin is replaced only by a valid one); ``source``: what it was fitted from."""
    from ..config import load_rig
    from ..errors import UserError

    tmp = out.with_name(out.name + ".partial")
    tmp.write_text(text)
    try:
        load_rig(tmp)
    except UserError as e:
        tmp.unlink()
        raise UserError(f"the twin written from {source} does not parse: {e}") from None
    tmp.replace(out)


def _report(quantities, rig_time: dict, out: Path, rec: Path) -> None:
    for q in quantities:
        u = "(not measured)" if q.u is None else f"+/- {q.u:.2g}"
        flag = "  FLAGGED: large uncertainty" if q.flagged else ""
        note = f"  [{q.note}]" if q.note else ""
        print(f"  {q.key:<34} {q.value:>12.6g} {u:<12} {q.unit:<11}{flag}{note}")
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in rig_time.items() if k != "total")
    print(f"hbtest twin: wrote {out} and {rec}; rig time {steps}")
    print(f"twin_rig_time_s={rig_time['total']:.1f}")


def _check(args) -> int:
    from ..config import load_rig
    from ..errors import UserError
    from ..twin import fit_record
    from ..twin.check import compare

    tcfg, cfg = load_rig(args.check), load_rig(args.rigfile)
    if tcfg.kind != "virtual":
        raise UserError(
            f"--check {args.check}: a virtual rig file (a twin) is expected, this one is [rig].kind = {tcfg.kind!r}")
    settings = _settings(args.quick)
    drift = tcfg.spec.noise.mains_drift_hz
    _, qt = fit_record(_measure(tcfg, args.check, settings, args.seed), tcfg.sensors, drift)
    _, qr = fit_record(_measure(cfg, args.rigfile, settings, None), cfg.sensors, drift)
    rows, worst = compare(qt, qr)
    _print_rows(rows)
    print(f"twin_worst_ratio={worst:.3f}")
    return 0


def _make_from_streams(args) -> int:
    import json
    from datetime import datetime, timezone

    from ..config import load_rig
    from ..twin.streams import fit_records
    from ..twin.write import stream_twin_text
    from .render import printer

    cfg = load_rig(args.rigfile)
    out, rec_path = _outputs(args)
    tpath, tcfg = _template(args, cfg)
    doc, _, _ = fit_records(args.records, cfg, args.rigfile, printer())
    lab, values = doc["lab"], doc["twin"]
    nz = tcfg.spec.noise
    meta = {"records": args.records, "template": str(tpath), "date": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "points": lab["points"], "drift": (nz.mains_drift_hz, nz.mains_drift_period_s, str(tpath))}
    _write_twin(out, stream_twin_text(tpath.read_text(), values, lab, meta), args.records)
    rec_path.write_text(json.dumps(doc, indent=1) + "\n")
    u = values["u"]
    for key in ("gauge_rms_microstrain", "laser_rms_um", "mains_amplitude_microstrain", "mains_frequency_hz"):
        print(f"  {key:<30} {values[key]:>12.6g} +/- {u[key]:.2g}")
    print(f"hbtest twin: wrote {out} and {rec_path}; {lab['points']} streams, no rig time")
    print("twin_rig_time_s=0.0")
    return 0


def _check_streams(args) -> int:
    import json

    import numpy as np

    from ..config import load_rig
    from ..errors import UserError
    from ..rig import open_rig
    from ..twin import streams
    from ..twin.check import compare
    from .render import printer

    tcfg = load_rig(args.check)
    if tcfg.kind != "virtual":
        raise UserError(f"--check {args.check}: a virtual rig file (a twin) is expected, this one is [rig].kind = {tcfg.kind!r}")
    doc, stats, d = streams.fit_records(args.records, tcfg, args.check, printer())
    lab, pts = doc["lab"], stats["points"]
    n = 20 if args.quick else 60
    freqs = d["frequency"][pts][np.linspace(0, pts.size - 1, n).astype(int)]
    # the lab's streams span hours of mains drift: the twin's records span one period of its drift
    spacing = tcfg.spec.noise.mains_drift_period_s / n
    print(f"hbtest twin: {n} records of {args.check} at the records' frequencies, taken as the lab's (zero demand, 2 periods),"
          f" {spacing:.0f} s apart (over one period of its mains drift)", flush=True)
    with open_rig(tcfg, args.seed) as rig:
        twin = streams.summarise(streams.rig_statistics(rig, freqs, spacing, progress=printer()), 10000.0)
    rows, worst = compare(streams.table_quantities(twin, f"{n} twin records"), streams.table_quantities(lab, f"{pts.size} streams"))
    _print_rows(rows, "records")
    print(f"\n  {'not modelled (the twin is white): density ' + '-'.join(f'{b:g}' for b in streams.BAND_HZ) + ' Hz':<47} {'records':>12} {'twin':>12} {'ratio':>7}")
    for name, lab_v, twin_v in streams.band_rows(twin, lab):
        print(f"  {name:<47} {lab_v:>12.4g} {twin_v:>12.4g} {twin_v / lab_v:7.3f}")
    print(json.dumps({"twin_records": n, "streams": int(pts.size)}))
    print(f"twin_worst_ratio={worst:.3f}")
    return 0


def _print_rows(rows, other: str = "rig") -> None:
    print(f"  {'statistic':<34} {'twin':>12} {other:>12} {'ratio':>7} {'sigmas':>7}")
    for c in rows:
        ratio = f"{c.ratio:7.3f}" if c.ratio is not None else "      -"
        sig = f"{c.sigmas:7.1f}" if c.sigmas is not None else "      -"
        mark = "" if c.counted or c.ratio is None else "  (not counted: uncertain)"
        print(f"  {c.key:<34} {c.twin:>12.5g} {c.rig:>12.5g} {ratio} {sig} {c.unit}{mark}")

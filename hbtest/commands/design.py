"""``hbtest design SWEEPFILE [--json]``: the test-design report."""

from __future__ import annotations

import json


def add_file_arguments(p, what: str = "sweep") -> None:
    """The ``FILE`` positional and repeatable ``--set dotted.key=value`` overrides."""
    p.add_argument("file", metavar="FILE", help=f"{what} definition file (TOML)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a value of the file, e.g. --set sweep.points=61 (repeatable)",
    )


def register(sub) -> None:
    p = sub.add_parser("design", help="test-design report: hybrid modes, clamped-interface modes, nodes, warnings")
    add_file_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..config import load_sweep
    from ..design import design_report

    cfg = load_sweep(args.file, args.overrides)
    rep = design_report(cfg)
    if args.json:
        print(json.dumps(rep.to_dict()))
        return 0
    print(f"Test design for {cfg.source.path}")
    print(f"  interface at {rep.interface_mm:g} mm of {rep.total_length_mm:g} mm; PS model from {rep.ps_source}")
    print(f"  {'mode':>4} {'hybrid Hz':>11} {'zeta %':>7}  nodes [mm from root]")
    for i, (f, z, nodes) in enumerate(zip(rep.hybrid_modes_hz, rep.hybrid_damping_ratios, rep.mode_nodes_mm), 1):
        mark = "  <- target" if i == rep.target_mode else ""
        print(f"  {i:>4} {f:>11.4f} {100 * z:>7.3f}  {', '.join(f'{x:.1f}' for x in nodes) or '-'}{mark}")
    print("  clamped-interface modes [Hz]:")
    print("    numerical: " + ", ".join(f"{f:.2f}" for f in rep.ns_clamped_interface_modes_hz))
    print("    physical:  " + ", ".join(f"{f:.2f}" for f in rep.ps_clamped_interface_modes_hz))
    print(f"  target mode {rep.target_mode} at {rep.target_mode_hz:.4f} Hz; interface amplitude {rep.interface_relative_amplitude:.1%} of the mode maximum")
    _levels(rep.levels)
    print(f"  {_rig_time(cfg)}")
    for d in (rep.mains or {}).get("decisions", []):
        print(f"  mains: point {d['index'] + 1} ({d['requested_hz']:g} Hz): {d['action']} -> {d['applied_hz']:.6g} Hz")
    if rep.warnings:
        print("  warnings:")
        for w in rep.warnings:
            print(f"    - {w}")
    else:
        print("  no warnings")
    return 0


def _levels(lv) -> None:
    """The largest predicted peak per channel and actuator over the band, against its limit."""
    if not lv:
        return
    f = lv["frequencies_hz"]
    print("  predicted peaks over the band (raw V; steady state / on the way from the previous point):")
    for c in lv["channels"]:
        j = max(range(len(f)), key=lambda i: c["transient_peak_v"][i])
        lim = f"{max(abs(x) for x in c['window_v']):.3g} V ({c['action']})" if c["window_v"] else "no limit given"
        print(f"    {c['name']:<10} {max(c['peak_v']):>7.3g} / {c['transient_peak_v'][j]:>7.3g} at {f[j]:g} Hz  limit {lim}")
    if lv["voltage_peak_v"] is not None:
        for name, v, lim in zip(lv["actuators"], lv["voltage_peak_v"], lv["voltage_limits_v"]):
            j = max(range(len(f)), key=lambda i: v[i])
            print(f"    demand {name:<10} {v[j]:>7.3g} V at {f[j]:g} Hz  limit {lim:g} V")
    for n in lv["notes"]:
        print(f"    note: {n}")


#: rig time per sweep against the twin's in-process run, measured through the served twins (box,
#: helic, scpi with its ranges following the signal, redpitaya; paper sweep and bare beam, seeds
#: 1-4, the identification included: benchmarks/rig_time_kinds.py, issue 40, docs/benchmarks.md):
#: with the modes known (the point loop fits through the transient) and without (it settles
#: window by window)
RIG_TIME_WITH_MODES = "0.8-1.3x"
RIG_TIME_WITHOUT_MODES = "7-15x"


def identification_rig_time_s(n_actuators: int, ident) -> float:
    """Rig time [s] of the free-decay experiment of ``ident`` (:class:`~hbtest.config.section.IdentifySpec`),
    as :func:`hbtest.rig.identify.free_decay_modes` spends it: per actuator, a half-period ramp and
    3 periods of the multisine's fundamental ``band_hz / orders``, then ``decay_s`` rounded up
    to whole periods of ``band_hz``."""
    import math

    f0 = ident.band_hz / ident.orders
    return n_actuators * ((0.5 + 3) / f0 + math.ceil(ident.decay_s * ident.band_hz) / ident.band_hz)


def _rig_time(cfg) -> str:
    """One line: the rig time the sweep's rig can expect, with and without its modes known."""
    from ..config import load_rig

    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    if rig.kind == "virtual":
        return f"rig time: the twin knows its modes (the in-process figure); a hardware rig: {RIG_TIME_WITH_MODES} of it with [identify], {RIG_TIME_WITHOUT_MODES} without"
    if rig.identify is None:
        return (f"rig time: no [identify] in {rig.source.path}: the loop settles window by window, {RIG_TIME_WITHOUT_MODES} the twin's "
                f"in-process rig time; with [identify] ~{identification_rig_time_s(len(rig.actuators), _default_identify(rig)):.1f} s once, then {RIG_TIME_WITH_MODES}")
    spent = identification_rig_time_s(len(rig.actuators), rig.identify)
    on_file = "a record is on file" if rig.identify.record.exists() else "none on file yet"
    return (f"rig time: [identify] on ({rig.identify.record.name}, {on_file}): {spent:.1f} s once to measure the modes "
            f"({spent * cfg.sweep.start_hz:.0f} periods at {cfg.sweep.start_hz:g} Hz), then {RIG_TIME_WITH_MODES} the twin's in-process rig time; "
            f"without it {RIG_TIME_WITHOUT_MODES}")


def _default_identify(rig):
    """The ``[identify]`` defaults of ``rig``'s file."""
    from ..config.rig import read_identify
    from ..config.section import Section

    return read_identify(Section({}, rig.source.path, "identify"), rig.voltage_limit_v, rig.sample_rate_hz)

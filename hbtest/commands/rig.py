"""``hbtest rig check FILE``: open the rig of a rig file (any kind), identify it, say whether a
valid identification of its modes is on file (``[identify]``, :mod:`hbtest.rig.identification`),
read every channel once with the outputs at zero (disarmed), print per channel its mean level
and noise. ``hbtest rig identify FILE``: measure the rig's modes now from its free decays and
write the identification record (whatever is on file).

Levels are raw channel volts and, through the file's calibration, physical units (mm for
lasers, microstrain for gauges). An unreachable instrument is one line naming it, exit 2."""

from __future__ import annotations

CHECK_FREQUENCY_HZ = 10.0  # period base of the check record (the demand stays zero)
CHECK_PERIODS = 10  # record length: 1 s at 10 Hz


def register(sub) -> None:
    p = sub.add_parser("rig", help="rig utilities: 'hbtest rig check FILE' identifies a rig and reads its channels; "
                                   "'hbtest rig identify FILE' measures its modes")
    rs = p.add_subparsers(dest="rig_command", metavar="ACTION")
    actions = (("check", check, "identify the rig, say whether its modes are identified, read each channel once with outputs at zero, "
                "print levels and noise"),
               ("identify", identify, "measure the rig's modes from its free decays now ([identify]) and write the identification record"))
    for name, func, text in actions:
        c = rs.add_parser(name, help=text)
        c.add_argument("file", metavar="FILE", help="rig definition file (TOML)")
        c.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                       help="override a value of the rig file (repeatable)")
        c.add_argument("--seed", type=int, default=None, help="seed of a virtual rig")
        c.set_defaults(func=func)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _unit(spec) -> tuple[str, float]:
    return ("mm", 1e3) if spec.kind == "laser" else ("microstrain", 1e6)


def check(args) -> int:
    import numpy as np

    from ..config import load_rig
    from ..rig import open_rig

    cfg = load_rig(args.file, args.overrides)
    with open_rig(cfg, seed=args.seed) as rig:
        d = rig.describe()
        print(f"rig: {d.identity} (kind {d.kind})")
        idn = d.details.get("idn")
        if idn:
            print(f"instrument: {idn} at {d.details.get('resource')}")
        for key in ("parameters", "sources"):  # what a discovering device (helic) declared
            if d.details.get(key):
                print(f"{key}: {', '.join(d.details[key])}")
        print(f"actuators: {', '.join(d.actuators)}; voltage limit {d.voltage_limit_v:g} V; "
              f"sample rate {d.sample_rate_hz:g} Hz; input range {d.input_range_v if d.input_range_v else 'unknown'} V")
        _identification_line(rig, cfg)
        rig.set_demand(CHECK_FREQUENCY_HZ, np.zeros((len(d.actuators), 1)), [1], ramp_periods=0.0)
        acq = rig.acquire(CHECK_PERIODS)
        print(f"{'channel':>8} {'mean [V]':>12} {'noise [V]':>12} {'mean':>12} {'noise':>12}  unit")
        for name, x in acq.data.items():
            x = np.asarray(x, dtype=float)
            try:
                spec = d.sensors.channel(name)
            except KeyError:
                print(f"{name:>8} {x.mean():>12.5g} {x.std():>12.4g}")
                continue
            unit, k = _unit(spec)
            phys = (x * spec.scale + spec.offset) * k
            print(f"{name:>8} {x.mean():>12.5g} {x.std():>12.4g} {phys.mean():>12.5g} {phys.std():>12.4g}  {unit}")
    return 0


def _identification_line(rig, cfg) -> None:
    """Whether the rig's modes are known: its own (the twin), a valid record on file, or not."""
    from ..rig.capabilities import KnownModes
    from ..rig.identification import IdentifiedModes, identification_on_file

    if cfg.identify is not None and isinstance(rig, IdentifiedModes):
        print(f"identification: {identification_on_file(rig, cfg.identify)[1]}")
    elif isinstance(rig, KnownModes):
        print("identification: the rig knows its own modes (the point loop fits through the transient)")
    else:
        print("identification: none ([identify] absent): the point loop settles window by window, several times the rig time")


def identify(args) -> int:
    from ..config import load_rig
    from ..errors import ConfigError
    from ..rig import open_rig
    from ..rig.identification import identify as measure

    cfg = load_rig(args.file, args.overrides)
    if cfg.identify is None:
        raise ConfigError(cfg.source.path, "identify", "no [identify] table: add one to say how the rig's free decays are measured")
    with open_rig(cfg, seed=args.seed) as rig:
        rec, spent = measure(rig, cfg.identify, again=True)
        print(f"identification: {cfg.identify.record}: {rec.summary()}")
    return 0

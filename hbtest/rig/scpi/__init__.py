"""Rig kind ``scpi``: standard SCPI instruments — a Keysight 33500B-style two-channel
arbitrary waveform generator driving the actuators and an InfiniiVision-style oscilloscope (or
digitiser) measuring the sensors, composed into one :class:`~hbtest.rig.scpi.rig.ScpiRig`.

Rig-file tables owned by this kind (units in the key names; see
``instruments/lab-33500b-scope.toml``)::

    [generator]
    resource = "TCPIP0::192.0.2.10::5025::SOCKET"   # VISA address
    visa_library = "@py"          # pyvisa backend ("@py" = pyvisa-py; "file.yaml@sim" = pyvisa-sim)
    timeout_ms = 5000             # per reply; a query is never retried: a late reply is an error (hbtest.rig.scpi.link)
    output_load = "INF"           # only HIGH Z is accepted: 50 ohm would double the volts at the amplifier
    arb_points = 1000             # points of the one-period arbitrary waveform
    sync_channel = 1              # the Sync output follows this channel's waveform point 0
    ramp_step_s = 0.05            # at most one waveform/level step per this time during a ramp
    max_ramp_steps = 20
    ramp_down_s = 1.0             # safe ramp-down duration
    ramp_down_steps = 20          # ... in this many amplitude steps
    [[generator.channels]]        # one per actuator of [rig].actuators
    actuator = "vertical"; channel = 1; voltage_limit_v = 5.0   # <= [rig].voltage_limit_v (default: it)

    [digitiser]
    driver = "infiniivision"
    resource = "TCPIP0::192.0.2.11::5025::SOCKET"; visa_library = "@py"; timeout_ms = 5000
    trigger = "external"          # the generator's Sync output into EXT TRIG (the only choice)
    trigger_level_v = 1.0         # Sync is TTL
    trigger_delay_s = 0.0         # latency from demand phase 0 to the trigger instant
    max_points = 62500            # record length cap (points per channel)
    autorange_headroom = 1.5      # channel ranges follow the signal: half-range = this x the last record's
                                  # peak, range_v the ceiling (hbtest.rig.scpi.ranging); 0 = fixed ranges
    [[digitiser.channels]]        # one per sensor channel of [sensors]
    sensor = "l1"; channel = 1; range_v = 20.0; offset_v = 0.0   # range: full scale (8 div)

    (the optional ``[identify]`` table is common to every kind: ``hbtest.config.read_identify``,
    ``hbtest.rig.identification``; with it the rig offers its modes, measured once and kept in
    an identification record, so the point loop fits through the transient)
"""

from __future__ import annotations

from dataclasses import dataclass

from ..registry import RigKind, register
from .infiniivision import InfiniiVision
from .keysight33500b import Keysight33500B
from .link import ScpiLink, open_resource
from .rig import IdentifyingScpiRig, ScpiAcquisition, ScpiRig, synthesise

__all__ = [
    "GeneratorChannel",
    "GeneratorSpec",
    "DigitiserChannel",
    "DigitiserSpec",
    "ScpiSpec",
    "ScpiRig",
    "IdentifyingScpiRig",
    "ScpiAcquisition",
    "Keysight33500B",
    "InfiniiVision",
    "ScpiLink",
    "synthesise",
    "parse",
    "open",
    "KIND",
]

DIGITISER_DRIVERS = ("infiniivision",)


@dataclass(frozen=True)
class GeneratorChannel:
    actuator: str
    channel: int
    voltage_limit_v: float


@dataclass(frozen=True)
class GeneratorSpec:
    resource: str
    visa_library: str
    timeout_ms: float
    channels: tuple[GeneratorChannel, ...]
    arb_points: int = 1000
    sync_channel: int = 1
    ramp_step_s: float = 0.05
    max_ramp_steps: int = 20
    ramp_down_s: float = 1.0
    output_load: str = "INF"
    ramp_down_steps: int = 20


@dataclass(frozen=True)
class DigitiserChannel:
    sensor: str
    channel: int
    range_v: float
    offset_v: float = 0.0


@dataclass(frozen=True)
class DigitiserSpec:
    driver: str
    resource: str
    visa_library: str
    timeout_ms: float
    channels: tuple[DigitiserChannel, ...]
    trigger: str = "external"
    trigger_level_v: float = 1.0
    trigger_delay_s: float = 0.0
    max_points: int = 62500
    autorange_headroom: float = 0.0


@dataclass(frozen=True)
class ScpiSpec:
    """The parsed ``[generator]`` and ``[digitiser]`` tables."""

    generator: GeneratorSpec
    digitiser: DigitiserSpec


def _parse_generator(sec, common) -> GeneratorSpec:
    chans, seen_ch = [], set()
    for c in sec.subs("channels"):
        act = c.string("actuator", choices=tuple(common.actuators))
        ch = c.integer("channel", min=1, max=2)
        lim = c.number("voltage_limit_v", common.voltage_limit_v, positive=True)
        if lim > common.voltage_limit_v:
            raise c.error("voltage_limit_v", f"{lim:g} V exceeds the rig's voltage_limit_v of {common.voltage_limit_v:g} V")
        if act in {x.actuator for x in chans}:
            raise c.error("actuator", f"actuator {act!r} mapped twice")
        if ch in seen_ch:
            raise c.error("channel", f"generator channel {ch} used twice")
        seen_ch.add(ch)
        chans.append(GeneratorChannel(act, ch, lim))
        c.finish()
    missing = [a for a in common.actuators if a not in {x.actuator for x in chans}]
    if missing:
        raise sec.error("channels", f"no generator channel for actuator(s) {', '.join(missing)}")
    spec = GeneratorSpec(
        resource=sec.string("resource"),
        visa_library=sec.string("visa_library", "@py"),
        timeout_ms=sec.number("timeout_ms", 5000.0, positive=True, max=600000),
        channels=tuple(chans),
        arb_points=sec.integer("arb_points", 1000, min=8, max=65536),
        sync_channel=sec.integer("sync_channel", 1, min=1, max=2),
        ramp_step_s=sec.number("ramp_step_s", 0.05, positive=True),
        max_ramp_steps=sec.integer("max_ramp_steps", 20, min=1, max=1000),
        ramp_down_s=sec.number("ramp_down_s", 1.0, nonnegative=True, max=600),
        output_load=sec.string("output_load", "INF", choices=("INF",)),
        ramp_down_steps=sec.integer("ramp_down_steps", 20, min=1, max=1000),
    )
    sec.finish()
    return spec


def _parse_digitiser(sec, common) -> DigitiserSpec:
    sensors = tuple(c.name for c in common.sensors.channels)
    chans = []
    for c in sec.subs("channels"):
        name = c.string("sensor", choices=sensors)
        ch = c.integer("channel", min=1, max=4)
        if name in {x.sensor for x in chans}:
            raise c.error("sensor", f"sensor {name!r} mapped twice")
        if ch in {x.channel for x in chans}:
            raise c.error("channel", f"digitiser channel {ch} used twice")
        chans.append(DigitiserChannel(name, ch, c.number("range_v", positive=True), c.number("offset_v", 0.0)))
        c.finish()
    missing = [s for s in sensors if s not in {x.sensor for x in chans}]
    if missing:
        raise sec.error("channels", f"no digitiser channel for sensor(s) {', '.join(missing)}")
    spec = DigitiserSpec(
        driver=sec.string("driver", "infiniivision", choices=DIGITISER_DRIVERS),
        resource=sec.string("resource"),
        visa_library=sec.string("visa_library", "@py"),
        timeout_ms=sec.number("timeout_ms", 5000.0, positive=True, max=600000),
        channels=tuple(chans),
        trigger=sec.string("trigger", "external", choices=("external",)),
        trigger_level_v=sec.number("trigger_level_v", 1.0),
        trigger_delay_s=sec.number("trigger_delay_s", 0.0, min=-1.0, max=1.0),
        max_points=sec.integer("max_points", 62500, min=100, max=10_000_000),
        autorange_headroom=_headroom(sec),
    )
    sec.finish()
    return spec


def _headroom(sec) -> float:
    """``autorange_headroom``: 0 (fixed ranges) or at least 1.1 (a range sized to the last
    record's peak with less would clip the next record on noise alone)."""
    h = sec.number("autorange_headroom", 0.0, nonnegative=True, max=100.0)
    if 0 < h < 1.1:
        raise sec.error("autorange_headroom", f"must be 0 (fixed ranges) or >= 1.1, got {h:g}")
    return h


def parse(top, common) -> ScpiSpec:
    """Parse the ``[generator]`` and ``[digitiser]`` tables (registry.md ``RigKind.parse``)."""
    return ScpiSpec(_parse_generator(top.sub("generator"), common), _parse_digitiser(top.sub("digitiser"), common))


def open(rig_config, seed: int | None = None) -> ScpiRig:  # noqa: A001 - the registry's name
    """Open both instruments through pyvisa and compose the rig (``seed`` is unused: real
    instruments have no random generator)."""
    spec: ScpiSpec = rig_config.spec
    g, d = spec.generator, spec.digitiser
    gen_link = ScpiLink(open_resource(g.resource, f"generator {g.resource}", library=g.visa_library, timeout_ms=g.timeout_ms), f"generator {g.resource}")
    try:
        dig_link = ScpiLink(open_resource(d.resource, f"digitiser {d.resource}", library=d.visa_library, timeout_ms=d.timeout_ms), f"digitiser {d.resource}")
    except Exception:
        gen_link.close()
        raise
    try:
        cls = ScpiRig if rig_config.identify is None else IdentifyingScpiRig
        return cls(rig_config, Keysight33500B(gen_link), InfiniiVision(dig_link, timeout_ms=d.timeout_ms))
    except Exception:
        gen_link.close()
        dig_link.close()
        raise


KIND = register(RigKind("scpi", ("generator", "digitiser"), parse, open))

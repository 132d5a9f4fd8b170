"""Rig definition files (``instruments/*.toml``): the common part (``[rig]``, ``[sensors]``,
``[physical]``); a kind's own tables are parsed by the kind registered in
:mod:`hbtest.rig.registry` (config never imports a rig implementation)."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..rig import registry
from .files import load_toml
from .section import BeamSpec, IdentifySpec, RigCommon, Section, SourceFile, read_beam

__all__ = ["RigConfig", "load_rig", "read_sensors"]



@dataclass(frozen=True, init=False)
class RigConfig:
    """A parsed rig definition file. ``kind``: the :class:`~hbtest.rig.registry.RigKind` that
    parsed it and opens the rig; ``sensors``: the :class:`~hbtest.method.sensors.SensorLayout`;
    ``spec``: the kind's parsed tables (e.g. :class:`hbtest.rig.virtual.VirtualSpec`);
    ``physical``: the PS beam as the rig file describes it (design), None when absent;
    ``identify``: the ``[identify]`` table (:class:`~hbtest.config.section.IdentifySpec`), None
    when absent (a rig kind that is not told its modes then settles window by window).

    ``virtual`` is the older name of ``spec``: a read-only property, and accepted by the
    constructor as a keyword (``RigConfig(..., virtual=spec)``)."""

    source: SourceFile
    kind: str
    identity: str
    actuators: tuple[str, ...]
    sample_rate_hz: float
    voltage_limit_v: float
    sensors: Any
    spec: Any = None
    physical: BeamSpec | None = None
    identify: IdentifySpec | None = None

    def __init__(self, source, kind, identity, actuators, sample_rate_hz, voltage_limit_v, sensors, spec=None, physical=None, identify=None, *,
                 virtual=None):
        if virtual is not None:
            if spec is not None and spec is not virtual:
                raise TypeError("RigConfig: give the kind's spec as spec= or as virtual=, not both")
            spec = virtual
        values = (source, kind, identity, actuators, sample_rate_hz, voltage_limit_v, sensors, spec, physical, identify)
        for f, v in zip(fields(self), values):
            object.__setattr__(self, f.name, v)

    @property
    def virtual(self) -> Any:
        """The kind's parsed tables (older name of :attr:`spec`)."""
        return self.spec

    @property
    def common(self) -> RigCommon:
        """The fields every rig kind shares, as handed to the kind's parser."""
        return RigCommon(self.identity, tuple(self.actuators), self.sample_rate_hz, self.voltage_limit_v, self.sensors, self.physical, self.source.path)


def read_sensors(sec: Section, calibrated: bool = True):
    """``[sensors]``: calibration, segment properties and the channels with their roles.

    Two forms. Explicit: every ``[[sensors.channels]]`` has ``name`` (an identifier), ``kind``
    (``laser`` | ``strain_gauge``) and ``position_mm`` (a laser's lever position along the
    clamp, 0 = pin axis; a gauge's distance from the interface along the PS): any number >= 2
    of each. Published (legacy): channels named ``l1, l2, g1, g2`` placed by
    ``laser_spacing_mm`` (l1 at 0, l2 at the spacing) and ``gauge_positions_mm`` (g1, g2).
    Both: ``scale_per_v``, ``offset``, ``lowpass_hz``, ``lowpass_order``, ``lag_table``,
    ``skew_us`` (the channel samples ``skew_us`` late; removed per harmonic), ``full_scale_v``
    (optional: the sensor's own output range, +/- V; a record reaching it counts as clipped).
    ``calibration`` (optional): a calibration record (JSON, :mod:`hbtest.calibration`) whose
    values replace the nominal ones for the reduction (``calibrated=False``: the nominal layout,
    the rig file's own values, which a rig kind may need — the twin simulates them)."""
    from ..method.sensors import SensorLayout

    seg = read_beam(sec.sub("segment"), length_required=False)
    legacy_pos = _legacy_positions(sec)
    cal = sec.number("gauge_calibration_nm_per_strain", 0.0, nonnegative=True)
    if cal == 0.0:
        cal = 2 * seg.EI / seg.thickness  # c = 2 EI / h (see hbtest.method.sensors)
    channels: list = []
    for ch in sec.subs("channels"):
        channels.append(_read_channel(ch, legacy_pos, {c.name for c in channels}))
        ch.finish()
    channels = _checked_channels(sec, channels, legacy_pos is not None)
    layout = SensorLayout(
        gauge_calibration=cal,
        EI=seg.EI,
        rhoA=seg.rhoA,
        thickness=seg.thickness,
        zeta_mass=seg.zeta_mass,
        zeta_stiffness=seg.zeta_stiffness,
        channels=tuple(channels),
        mains_hz=sec.number("mains_hz", 50.0, nonnegative=True),
        mains_multiples=sec.integer("mains_multiples", 3, min=0, max=50),
    )
    if sec.has("calibration"):
        if calibrated:
            layout = _apply_calibration_key(sec, layout)
        else:
            sec.value("calibration")  # read (known key); the nominal layout is wanted
    sec.finish()
    return layout


def _legacy_positions(sec: Section) -> dict[str, float] | None:
    """The published l1/l2/g1/g2 positions [m] from ``laser_spacing_mm`` and
    ``gauge_positions_mm``; None for the explicit form."""
    if not (sec.has("laser_spacing_mm") or sec.has("gauge_positions_mm")):
        return None
    gauges = sec.numbers("gauge_positions_mm", scale=1e-3, length=2, nonnegative=True)
    if not gauges[0] < gauges[1]:
        raise sec.error("gauge_positions_mm", "needs d1 < d2")
    spacing = sec.number("laser_spacing_mm", scale=1e-3)
    if spacing == 0:
        raise sec.error("laser_spacing_mm", "must be non-zero")
    return {"l1": 0.0, "l2": spacing, "g1": gauges[0], "g2": gauges[1]}


def _read_channel(ch: Section, legacy_pos: dict[str, float] | None, names: set):
    """One ``[[sensors.channels]]`` entry (``names``: those read before it)."""
    from ..method.sensors import CHANNEL_KINDS, CHANNEL_NAME, LEGACY_CHANNELS, ChannelSpec

    if legacy_pos is not None:
        name = ch.string("name", choices=LEGACY_CHANNELS)
        for key in ("kind", "position_mm"):
            if ch.has(key):
                raise ch.error(key, "not with laser_spacing_mm/gauge_positions_mm (the published l1/l2/g1/g2 layout places its channels): use one form")
        kind = "laser" if name.startswith("l") else "strain_gauge"
        position = legacy_pos[name]
    else:
        name = ch.string("name")
        if not CHANNEL_NAME.match(name):
            raise ch.error("name", f"must be an identifier (letters, digits, _), got {name!r}")
        kind = ch.string("kind", choices=CHANNEL_KINDS)
        position = ch.number("position_mm", scale=1e-3, **({"nonnegative": True} if kind == "strain_gauge" else {}))
    if name in names:
        raise ch.error("name", f"channel {name!r} defined twice")
    lag: tuple = ()
    if ch.has("lag_table"):
        raw = ch.value("lag_table")
        if not isinstance(raw, list) or not all(isinstance(r, list) and len(r) == 2 for r in raw):
            raise ch.error("lag_table", "must be [[frequency_hz, lag_rad], ...]")
        lag = tuple((float(a), float(b)) for a, b in raw)
    return ChannelSpec(
        name=name,
        kind=kind,
        unit="m" if kind == "laser" else "strain",
        scale=ch.number("scale_per_v", positive=True),
        offset=ch.number("offset", 0.0),
        lowpass_hz=ch.number("lowpass_hz", 0.0, nonnegative=True),
        lowpass_order=ch.integer("lowpass_order", 2, min=1, max=8),
        lag_table=lag,
        position=position,
        skew=ch.number("skew_us", 0.0, scale=1e-6, min=-1e6, max=1e6),
        full_scale_v=ch.number("full_scale_v", None, required=False, positive=True),
    )


def _checked_channels(sec: Section, channels: list, legacy: bool) -> list:
    """The channels in their order (the published layout's canonical one), checked complete."""
    from ..method.sensors import LEGACY_CHANNELS

    if legacy:
        missing = set(LEGACY_CHANNELS) - {c.name for c in channels}
        if missing:
            raise sec.error("channels", f"missing channel(s) {', '.join(sorted(missing))}")
        return sorted(channels, key=lambda c: LEGACY_CHANNELS.index(c.name))  # the twin's canonical order
    for kind, what in (("laser", "lasers"), ("strain_gauge", "strain gauges")):
        pos = [c.position for c in channels if c.kind == kind]
        if len(pos) < 2:
            raise sec.error("channels", f"needs at least two {what} (kind = {kind!r}), got {len(pos)}")
        if len(set(pos)) != len(pos):
            raise sec.error("channels", f"two {what} at the same position_mm: their readings could not be told apart")
    return channels


def read_identify(sec: Section, voltage_limit_v: float, sample_rate_hz: float) -> IdentifySpec:
    """``[identify]`` (:class:`~hbtest.config.section.IdentifySpec`): the multisine's peak
    bound ``voltage_v`` (default half of ``voltage_limit_v``, at most it), ``band_hz`` (at most
    a fifth of the sample rate), ``decay_s``, ``orders`` and ``record`` (relative to the rig file)."""
    base = Path(sec.source).resolve().parent
    spec = IdentifySpec(
        voltage_v=sec.number("voltage_v", 0.5 * voltage_limit_v, positive=True, max=voltage_limit_v),
        band_hz=sec.number("band_hz", 150.0, positive=True, max=0.2 * sample_rate_hz),
        decay_s=sec.number("decay_s", 1.5, positive=True, max=60.0),
        orders=sec.integer("orders", 24, min=2, max=200),
        record=sec.path("record", base, default=f"{Path(sec.source).stem}.modes.json"),
    )
    sec.finish()
    return spec


def _apply_calibration_key(sec: Section, layout):
    """``[sensors].calibration = "record.json"`` (relative to the rig file): the calibration
    record's values replace the nominal ones (:func:`hbtest.calibration.apply_calibration`);
    every problem is a ConfigError on ``sensors.calibration``."""
    from ..calibration import apply_calibration, load_calibration
    from ..errors import UserError

    path = sec.path("calibration", Path(sec.source).resolve().parent)
    try:
        return apply_calibration(layout, load_calibration(path))
    except UserError as e:
        raise sec.error("calibration", str(e)) from None
    except ValueError as e:  # the calibrated layout is not a valid layout
        raise sec.error("calibration", f"{path}: {e}") from None


class _KindTables(Section):
    """The top level of a rig file as a kind's parser sees it: reading a table the kind does
    not own (:attr:`RigKind.tables`) is a programming error (RuntimeError), not a user's."""

    def __init__(self, top: Section, rig_kind):
        super().__init__(top.data, top.source, top.prefix)
        self.rig_kind = rig_kind

    def _get(self, name, default, required):
        if name not in self.rig_kind.tables:
            raise RuntimeError(f"rig kind {self.rig_kind.name!r} read the table [{name}], which it does not own {self.rig_kind.tables}")
        return super()._get(name, default, required)


def _parse_kind(rig_kind, top: Section, common: RigCommon):
    """``rig_kind.parse(view, common)`` on a view of ``top`` limited to the kind's tables; the
    tables it read count as read in ``top``."""
    view = _KindTables(top, rig_kind)
    spec = rig_kind.parse(view, common)
    for name in view.used:
        top.value(name, required=False)
    return spec


def load_rig(path, overrides=(), text: str | None = None) -> RigConfig:
    """Parse and validate a rig file: ``[rig]`` (``kind`` one of
    :func:`hbtest.rig.registry.names`), ``[sensors]``, optional ``[physical]`` and
    ``[identify]``; the kind's own
    tables are parsed by its registered ``parse(top, common)``; any other top-level table is an
    error. A kind whose module cannot be imported is a ConfigError on ``rig.kind``."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    rig = top.sub("rig")
    kind = rig.string("kind", choices=registry.names())
    raw = rig.value("actuators", ["vertical", "rotational"])
    actuators = tuple(raw) if isinstance(raw, list) else ()
    if not actuators or not all(isinstance(a, str) and a for a in actuators) or len(set(actuators)) != len(actuators):
        raise rig.error("actuators", "must name one or more distinct actuators (in the order of the demand's rows)")
    common = dict(
        identity=rig.string("identity", Path(src.path).stem),
        actuators=actuators,
        sample_rate_hz=rig.number("sample_rate_hz", positive=True),
        voltage_limit_v=rig.number("voltage_limit_v", positive=True),
    )
    rig.finish()
    sensors_sec = top.sub("sensors")
    nominal = read_sensors(sensors_sec, calibrated=False)
    sensors = read_sensors(Section(sensors_sec.data, sensors_sec.source, sensors_sec.prefix)) if sensors_sec.has("calibration") else nominal
    physical = None
    if top.has("physical"):
        ph = top.sub("physical")
        physical = read_beam(ph)
        ph.finish()
    identify = read_identify(top.sub("identify"), common["voltage_limit_v"], common["sample_rate_hz"]) if top.has("identify") else None
    try:
        rig_kind = registry.get(kind)
    except KeyError as e:
        reason = e.reason if isinstance(e, registry.KindUnavailable) else "no implementation registered"
        raise ConfigError(src.path, "rig.kind", f"rig kind {kind!r} is not available: {reason}") from None
    # the kind's parsed tables (RigConfig.spec; ``virtual=`` is the constructor's older name)
    # the kind parses against the rig file's nominal sensors (the twin simulates them); the
    # configuration carries the calibrated ones (what the reduction uses)
    virtual = _parse_kind(rig_kind, top, RigCommon(sensors=nominal, physical=physical, path=src.path, **common))
    top.finish()
    return RigConfig(src, kind, sensors=sensors, virtual=virtual, physical=physical, identify=identify, **common)

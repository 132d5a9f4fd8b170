"""Sweep and rig definition files (TOML) parsed into frozen, validated dataclasses.

Units: SI inside; a file field carries its unit in its name (``length_mm``,
``youngs_modulus_gpa``, ``frequency_hz``, ``voltage_limit_v``...) and is converted at load.
Every problem is a :class:`~hbtest.errors.ConfigError` naming the file and the dotted key.

``--set dotted.key=value`` overrides (value parsed as a TOML value, bare words as strings)
are applied to the parsed document before validation, so they are checked like the file.

The shared schema pieces (:class:`Section`, :class:`SourceFile`, :class:`BeamSpec`,
:func:`read_beam`, :class:`RigCommon`) live in the leaf module :mod:`hbtest.schema` and are
re-exported here. A rig file's kind-specific tables are parsed by the kind registered in
:mod:`hbtest.rig.registry` (config never imports a rig implementation).
"""

from __future__ import annotations

import hashlib
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from .errors import ConfigError
from .rig import registry
from .schema import BeamSpec, RigCommon, Section, SourceFile, read_beam

__all__ = [
    "Section",
    "load_toml",
    "apply_overrides",
    "parse_override",
    "SourceFile",
    "BeamSpec",
    "read_beam",
    "RigCommon",
    "NumericalSpec",
    "NonlinearElementSpec",
    "read_nonlinear",
    "ExcitationSpec",
    "SweepSpec",
    "TestSpec",
    "SolverSpec",
    "OutputSpec",
    "SweepConfig",
    "RigConfig",
    "load_sweep",
    "load_rig",
]


# ---------------------------------------------------------------------------------------
# reading helpers


def load_toml(path, overrides=(), text: str | None = None) -> tuple[dict, SourceFile]:
    """Read a TOML file (or parse ``text`` as if it were that file, e.g. the verbatim copy kept
    in a run's store); apply ``--set`` overrides. Errors name the file."""
    p = Path(path)
    if text is None:
        if p.is_dir():
            raise ConfigError(str(path), "", "is a directory, expected a file")
        if not p.is_file():
            raise ConfigError(str(path), "", "file not found")
        try:
            raw = p.read_bytes()
        except OSError as e:
            raise ConfigError(str(path), "", f"cannot read: {e.strerror or e}") from None
        text = _decode_text(raw, str(path))
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), "", f"not valid TOML: {e}") from None
    apply_overrides(doc, overrides, str(path))
    return doc, SourceFile(str(path), text, hashlib.sha256(text.encode()).hexdigest())


def _decode_text(raw: bytes, path: str) -> str:
    """UTF-8 text of a definition file; a binary file (NUL bytes, invalid UTF-8) is a
    ConfigError naming the path."""
    nul = raw.find(b"\x00")
    if nul >= 0:
        raise ConfigError(path, "", f"not a text TOML file (NUL byte at offset {nul})")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(path, "", f"not a text TOML file (invalid UTF-8 at byte {e.start})") from None


def parse_override(item: str, source: str = "--set") -> tuple[str, Any]:
    """``"a.b=1.5"`` -> ("a.b", 1.5). Values are TOML values; bare words become strings."""
    if "=" not in item:
        raise ConfigError(source, item, "an override must look like dotted.key=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ConfigError(source, item, "empty key in override")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return key, value


def apply_overrides(doc: dict, overrides, source: str) -> None:
    """Apply ``--set`` overrides in place. ``a.b[1].c=v`` addresses an entry of an array of
    tables. Overriding a table, or a key inside a non-table, is an error; new keys are allowed
    here and checked by the schema like any other."""
    for item in overrides:
        key, value = parse_override(item, f"{source} (--set)")
        node = doc
        parts = key.split(".")
        for part in parts[:-1]:
            name, index = _split_index(part, key, source)
            nxt = node.setdefault(name, {}) if index is None else node.get(name)
            if index is not None:
                if not isinstance(nxt, list) or not -len(nxt) <= index < len(nxt) or not isinstance(nxt[index], dict):
                    raise ConfigError(f"{source} (--set)", key, f"{name}[{index}] is not an entry of an array of tables")
                nxt = nxt[index]
            if not isinstance(nxt, dict):
                raise ConfigError(f"{source} (--set)", key, f"{part!r} is not a table")
            node = nxt
        if isinstance(node.get(parts[-1]), dict):
            raise ConfigError(f"{source} (--set)", key, "is a table; set one of its keys")
        node[parts[-1]] = value


def _split_index(part: str, key: str, source: str) -> tuple[str, int | None]:
    if not part.endswith("]"):
        return part, None
    name, _, idx = part[:-1].partition("[")
    try:
        return name, int(idx)
    except ValueError:
        raise ConfigError(f"{source} (--set)", key, f"bad index in {part!r}") from None


# ---------------------------------------------------------------------------------------
# sweep file schema


@dataclass(frozen=True)
class NonlinearElementSpec:
    """One ``[[numerical.nonlinear]]`` entry (SI): an element of a registered kind
    (:data:`hbtest.numerical.ELEMENT_KINDS`) at the node at ``position`` [m from the root],
    acting on ``dof`` (``"u"`` or ``"theta"``), grounded or, with ``to_position``, between the
    two nodes (relative coordinate ``q(position) - q(to_position)``); ``params``: the kind's
    parameters in SI as (field, value) pairs (see :mod:`hbtest.numerical.elements` for the
    force laws and their sign conventions)."""

    kind: str
    position: float
    dof: str
    to_position: float | None = None
    params: tuple[tuple[str, float], ...] = ()

    @property
    def positions(self) -> tuple[float, ...]:
        return (self.position,) if self.to_position is None else (self.position, self.to_position)

    def dof_names(self, beam) -> tuple[str, ...]:
        """The DOF names of the element on ``beam`` (a node must sit at each position)."""
        return tuple(f"{self.dof}{beam.node_at(x)}" for x in self.positions)

    def build(self, beam):
        from .numerical import create_element

        return create_element(self.kind, self.dof_names(beam), **dict(self.params))


@dataclass(frozen=True)
class NumericalSpec:
    """The numerical substructure: a beam clamped (``root``) at x = 0 with the interface at
    its other end (x = length), and optional nonlinear elements (``nonlinear``; the beam then
    gets a node at every element position)."""

    kind: str
    beam: BeamSpec
    root: str
    nonlinear: tuple[NonlinearElementSpec, ...] = ()

    def substructure(self):
        """The linear substructure (the linear part when there are nonlinear elements)."""
        from .substructure import Substructure

        extra = tuple(sorted({x for e in self.nonlinear for x in e.positions}))
        b = self.beam.build(left=self.root, right="free", extra_nodes=extra) if extra else self.beam.build(left=self.root, right="free")
        j = b.x_nodes.size - 1
        return Substructure(b, (f"u{j}", f"theta{j}"))

    @property
    def is_linear(self) -> bool:
        return not self.nonlinear

    def numerical_substructure(self):
        """The :class:`~hbtest.numerical.NumericalSubstructure`: a
        :class:`~hbtest.numerical.LinearSubstructure` without nonlinear elements, else a
        :class:`~hbtest.numerical.NonlinearSubstructure`."""
        from .numerical import LinearSubstructure, NonlinearSubstructure

        sub = self.substructure()
        if not self.nonlinear:
            return LinearSubstructure(sub)
        return NonlinearSubstructure(sub, tuple(e.build(sub.structure) for e in self.nonlinear))


@dataclass(frozen=True)
class ExcitationSpec:
    """External force on the numerical substructure [N]: amplitude of the fundamental of a
    sinusoidal point force (cosine phase reference) at ``position`` [m from the root; default the
    interface node]."""

    amplitude: float
    position: float | None

    def force_vector(self, ns) -> np.ndarray:
        b = ns.structure
        x = b.x_nodes[-1] if self.position is None else self.position
        F = np.zeros(b.n_dof, dtype=complex)
        F[b.index(f"u{b.node_at(x)}")] = self.amplitude
        return F


@dataclass(frozen=True)
class SweepSpec:
    """The frequency list [Hz] and the harmonic orders solved."""

    start_hz: float
    stop_hz: float
    points: int
    direction: str
    harmonics: tuple[int, ...]
    on_trip: str = "stop"  # a trip of the rig's safety layer: stop the sweep, or go on
    on_overrange: str = "continue"  # a clipped sensor channel: go on to the next point, or stop

    @property
    def frequencies_hz(self) -> np.ndarray:
        """Frequencies in the order they are tested."""
        f = np.linspace(self.start_hz, self.stop_hz, self.points)
        if self.direction == "down":
            return f[::-1].copy()
        if self.direction == "up-down":
            return np.concatenate([f, f[-2::-1]])
        return f


@dataclass(frozen=True)
class TestSpec:
    """Tolerances of the test (SI: metres). ``residual``: ``displacement`` or ``force`` form;
    ``force_reconstruction``: see :data:`hbtest.sensors.FORCE_METHODS`; ``accuracy``: relative
    interface-displacement error the hbtest profile also requires (0 = off);
    ``rotation_length`` [m]: weight of rotations in the residual norm (|R_u|^2 + l^2 |R_th|^2);
    ``harmonic_tolerance``: the hbtest profile also requires each solved harmonic's residual
    below this fraction of that harmonic's own amplitude (or of the fundamental's, for a
    harmonic at its noise floor; see :class:`hbtest.point.profiles.HbtestProfile`); 0 = off."""

    target_mode: int
    tolerance: float
    transient_tolerance: float
    averaging_periods: int
    max_iterations: int
    residual: str
    force_reconstruction: str
    accuracy: float = 0.0
    rotation_length: float = 0.1
    harmonic_tolerance: float = 0.01


@dataclass(frozen=True)
class SolverSpec:
    """Solver profile and its safety knobs (SI: volts)."""

    profile: str
    max_step_v: float
    ramp_periods: float
    max_settle_windows: int
    fd_step_v: float = 0.1


@dataclass(frozen=True)
class OutputSpec:
    """Where a run goes: the store, the Bode plot, and whether the store keeps the raw sample
    records of each point's final window (``raw_records``; None: on for hardware rigs, off
    for the twin) for re-reduction with another calibration (``hbtest reduce``)."""

    store: Path
    plot: bool
    raw_records: bool | None = None


@dataclass(frozen=True)
class SweepConfig:
    """A parsed sweep definition file."""

    source: SourceFile
    name: str
    rig_path: Path
    rig_overrides: tuple[str, ...]
    numerical: NumericalSpec
    excitation: ExcitationSpec
    sweep: SweepSpec
    test: TestSpec
    solver: SolverSpec
    output: OutputSpec
    design_ps: BeamSpec | None = None


def load_sweep(path, overrides=(), text: str | None = None) -> SweepConfig:
    """Parse and validate a sweep file (see ``sweeps/paper-cantilever.toml`` for every key).
    ``text``: parse this instead of the file's current content (relative paths still resolve
    against the file's folder)."""
    from .sensors import FORCE_METHODS

    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    base = Path(src.path).resolve().parent
    name = top.string("name", Path(src.path).stem)
    rig_path = top.path("rig", base)
    rig_overrides = top.value("rig_set", [])
    if not isinstance(rig_overrides, list) or not all(isinstance(x, str) and "=" in x for x in rig_overrides):
        raise top.error("rig_set", 'must be a list of "dotted.key=value" overrides of the rig file')

    sw = top.sub("sweep")
    start = sw.number("start_hz", positive=True)
    stop = sw.number("stop_hz", positive=True)
    if stop <= start:
        raise sw.error("stop_hz", f"sweep band is empty: stop_hz ({stop:g}) must exceed start_hz ({start:g})")
    harmonics = sw.numbers("harmonics", [1], integer=True, nonnegative=True)
    if not harmonics or len(set(harmonics)) != len(harmonics) or max(harmonics) == 0:
        raise sw.error("harmonics", "needs distinct orders including at least one k >= 1")
    sweep = SweepSpec(
        start_hz=start,
        stop_hz=stop,
        points=sw.integer("points", min=2, max=100000),
        direction=sw.string("direction", "up", choices=("up", "down", "up-down")),
        harmonics=tuple(sorted(harmonics)),
        on_trip=sw.string("on_trip", "stop", choices=("stop", "continue")),
        on_overrange=sw.string("on_overrange", "continue", choices=("continue", "stop")),
    )
    sw.finish()

    nm = top.sub("numerical")
    kind = nm.string("kind", "beam", choices=("beam",))
    root = nm.string("root", "clamped", choices=("clamped", "pinned", "free", "sliding"))
    nm_beam = read_beam(nm)
    numerical = NumericalSpec(kind=kind, beam=nm_beam, root=root, nonlinear=read_nonlinear(nm, nm_beam, root))
    nm.finish()

    ex = top.sub("excitation")
    ex.string("kind", "point_force", choices=("point_force",))
    pos = ex.number("position_mm", None, required=False, scale=1e-3, nonnegative=True)
    if pos is not None and pos > numerical.beam.length * (1 + 1e-12):
        raise ex.error("position_mm", f"{pos * 1e3:g} mm lies outside the numerical beam (0..{numerical.beam.length * 1e3:g} mm)")
    excitation = ExcitationSpec(amplitude=ex.number("amplitude_n", positive=True), position=pos)
    ex.finish()

    ts = top.sub("test")
    test = TestSpec(
        target_mode=ts.integer("target_mode", 1, min=1, max=100),
        tolerance=ts.number("tolerance_mm", 0.02, scale=1e-3, positive=True),
        transient_tolerance=ts.number("transient_tolerance_mm", 0.013, scale=1e-3, positive=True),
        averaging_periods=ts.integer("averaging_periods", 30, min=1, max=10000),
        max_iterations=ts.integer("max_iterations", 100, min=1, max=10000),
        residual=ts.string("residual", "displacement", choices=("displacement", "force")),
        force_reconstruction=ts.string("force_reconstruction", "segment", choices=FORCE_METHODS),
        accuracy=ts.number("accuracy", 0.0, nonnegative=True, max=0.5),
        rotation_length=ts.number("rotation_length_mm", 100.0, scale=1e-3, positive=True),
        harmonic_tolerance=ts.number("harmonic_tolerance", 0.01, nonnegative=True, max=1.0),
    )
    ts.finish()

    so = top.sub("solver", required=False)
    solver = SolverSpec(
        profile=so.string("profile", "hbtest", choices=tuple(_profile_names())),
        max_step_v=so.number("max_step_v", 0.5, positive=True),
        ramp_periods=so.number("ramp_periods", 2.0, nonnegative=True, max=1000),
        max_settle_windows=so.integer("max_settle_windows", 20, min=2, max=1000),
        fd_step_v=so.number("fd_step_v", 0.1, positive=True),
    )
    so.finish()

    out = top.sub("output", required=False)
    store = out.path("store", base, default=f"runs/{name}.zarr")
    raw = out.boolean("raw_records", False) if out.has("raw_records") else None
    output = OutputSpec(store=store.resolve(), plot=out.boolean("plot", True), raw_records=raw)
    out.finish()

    design_ps = None
    if top.has("design"):
        ds = top.sub("design")
        design_ps = read_beam(ds.sub("physical"), default_from=numerical.beam)
        ds.finish()
    top.finish()
    return SweepConfig(src, name, rig_path, tuple(rig_overrides), numerical, excitation, sweep, test, solver, output, design_ps)


#: ``dof`` values of a nonlinear element and the DOF-name prefix each stands for
NONLINEAR_DOFS = {"u": "u", "theta": "theta", "θ": "theta"}
#: ``side`` values of a contact element and the sign of its stop
CONTACT_SIDES = {"positive": 1.0, "negative": -1.0}


def read_nonlinear(nm: Section, beam: BeamSpec, root: str) -> tuple[NonlinearElementSpec, ...]:
    """``[[numerical.nonlinear]]``: ``kind`` (a registered element kind), ``position_mm``,
    ``dof`` (``"u"`` or ``"theta"``), optional ``to_position_mm`` (between two nodes), and the
    kind's parameters under their unit-named keys (``u`` / ``theta`` elements):
    ``cubic_spring``: ``k3_n_per_m3`` / ``k3_nm_per_rad3``; ``friction``: ``force_n`` /
    ``moment_nm`` and ``velocity_scale_m_per_s`` / ``velocity_scale_rad_per_s``; ``contact``:
    ``gap_mm`` / ``gap_mrad``, ``stiffness_n_per_m`` / ``stiffness_nm_per_rad`` and ``side``
    (``"positive"``: the stop at +gap, default; ``"negative"``: at -gap)."""
    from .numerical import ELEMENT_KINDS
    from .structures import BOUNDARY_CONDITIONS

    out = []
    length = beam.length
    for sec in nm.subs("nonlinear"):
        kind = sec.string("kind", choices=tuple(ELEMENT_KINDS))
        dof = NONLINEAR_DOFS[sec.string("dof", choices=tuple(NONLINEAR_DOFS))]
        positions = []
        for key in ("position_mm", "to_position_mm"):
            x = sec.number(key, None, required=key == "position_mm", scale=1e-3, nonnegative=True)
            if x is None:
                continue
            if x > length * (1 + 1e-12):
                raise sec.error(key, f"{x * 1e3:g} mm lies outside the numerical beam (0..{length * 1e3:g} mm)")
            if x <= length * 1e-12 and (0 if dof == "u" else 1) in BOUNDARY_CONDITIONS[root]:
                raise sec.error(key, f"the {root} root fixes {dof} at 0 mm: an element there would never move")
            positions.append(min(x, length))
        if len(positions) == 2 and abs(positions[0] - positions[1]) <= 1e-9 * length:
            raise sec.error("to_position_mm", "must differ from position_mm (a grounded element has no to_position_mm)")
        cls = ELEMENT_KINDS[kind]
        params = []
        for prm in cls.params:
            key, other = (prm.key_u, prm.key_theta) if dof == "u" else (prm.key_theta, prm.key_u)
            if other != key and sec.has(other):
                raise sec.error(other, f"is for a {'theta' if dof == 'u' else 'u'} element; this {kind} acts on {dof}: use {key}")
            opts = dict(positive=prm.sign == "positive", nonnegative=prm.sign == "nonnegative")
            params.append((prm.field, sec.number(key, prm.default, required=prm.default is None, scale=prm.scale, **opts)))
        if kind == "contact":
            params.append(("side", CONTACT_SIDES[sec.string("side", "positive", choices=tuple(CONTACT_SIDES))]))
        sec.finish()
        out.append(NonlinearElementSpec(kind, positions[0], dof, positions[1] if len(positions) == 2 else None, tuple(params)))
    return tuple(out)


def _profile_names():
    from .point import PROFILES  # the registry of solver profiles (by name)

    return PROFILES


# ---------------------------------------------------------------------------------------
# rig file: the common part; a kind's own tables are parsed by the kind (hbtest.rig.registry)


@dataclass(frozen=True, init=False)
class RigConfig:
    """A parsed rig definition file. ``kind``: the :class:`~hbtest.rig.registry.RigKind` that
    parsed it and opens the rig; ``sensors``: the :class:`~hbtest.sensors.SensorLayout`;
    ``spec``: the kind's parsed tables (e.g. :class:`hbtest.rig.virtual.VirtualSpec`);
    ``physical``: the PS beam as the rig file describes it (design), None when absent.

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

    def __init__(self, source, kind, identity, actuators, sample_rate_hz, voltage_limit_v, sensors, spec=None, physical=None, *, virtual=None):
        if virtual is not None:
            if spec is not None and spec is not virtual:
                raise TypeError("RigConfig: give the kind's spec as spec= or as virtual=, not both")
            spec = virtual
        values = (source, kind, identity, actuators, sample_rate_hz, voltage_limit_v, sensors, spec, physical)
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
    ``skew_us`` (the channel samples ``skew_us`` late; removed per harmonic).
    ``calibration`` (optional): a calibration record (JSON, :mod:`hbtest.calibration`) whose
    values replace the nominal ones for the reduction (``calibrated=False``: the nominal layout,
    the rig file's own values, which a rig kind may need — the twin simulates them)."""
    from .sensors import CHANNEL_KINDS, CHANNEL_NAME, LEGACY_CHANNELS, ChannelSpec, SensorLayout

    seg = read_beam(sec.sub("segment"), length_required=False)
    legacy = sec.has("laser_spacing_mm") or sec.has("gauge_positions_mm")
    if legacy:
        gauges = sec.numbers("gauge_positions_mm", scale=1e-3, length=2, nonnegative=True)
        if not gauges[0] < gauges[1]:
            raise sec.error("gauge_positions_mm", "needs d1 < d2")
        spacing = sec.number("laser_spacing_mm", scale=1e-3)
        if spacing == 0:
            raise sec.error("laser_spacing_mm", "must be non-zero")
        legacy_pos = {"l1": 0.0, "l2": spacing, "g1": gauges[0], "g2": gauges[1]}
    cal = sec.number("gauge_calibration_nm_per_strain", 0.0, nonnegative=True)
    if cal == 0.0:
        cal = 2 * seg.EI / seg.thickness  # c = 2 EI / h (see hbtest.sensors)
    channels = []
    names = set()
    for ch in sec.subs("channels"):
        if legacy:
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
        names.add(name)
        lag = ()
        if ch.has("lag_table"):
            raw = ch.value("lag_table")
            if not isinstance(raw, list) or not all(isinstance(r, list) and len(r) == 2 for r in raw):
                raise ch.error("lag_table", "must be [[frequency_hz, lag_rad], ...]")
            lag = tuple((float(a), float(b)) for a, b in raw)
        channels.append(
            ChannelSpec(
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
            )
        )
        ch.finish()
    if legacy:
        missing = set(LEGACY_CHANNELS) - names
        if missing:
            raise sec.error("channels", f"missing channel(s) {', '.join(sorted(missing))}")
        channels.sort(key=lambda c: LEGACY_CHANNELS.index(c.name))  # the twin's canonical order
    else:
        for kind, what in (("laser", "lasers"), ("strain_gauge", "strain gauges")):
            pos = [c.position for c in channels if c.kind == kind]
            if len(pos) < 2:
                raise sec.error("channels", f"needs at least two {what} (kind = {kind!r}), got {len(pos)}")
            if len(set(pos)) != len(pos):
                raise sec.error("channels", f"two {what} at the same position_mm: their readings could not be told apart")
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


def _apply_calibration_key(sec: Section, layout):
    """``[sensors].calibration = "record.json"`` (relative to the rig file): the calibration
    record's values replace the nominal ones (:func:`hbtest.calibration.apply_calibration`);
    every problem is a ConfigError on ``sensors.calibration``."""
    from .calibration import apply_calibration, load_calibration
    from .errors import UserError

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
    :func:`hbtest.rig.registry.names`), ``[sensors]``, optional ``[physical]``; the kind's own
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
    return RigConfig(src, kind, sensors=sensors, virtual=virtual, physical=physical, **common)


# ---------------------------------------------------------------------------------------
# lumped-chain file (``hbtest stability chain``, ``hbtest classical chain``); kept as one
# appended section so it merges apart from the sweep/rig schema above

from dataclasses import dataclass as _dataclass  # noqa: E402 - own imports of this section

# the stability analysis of a chain builds dense n x n matrices (and a 2n eigenproblem)
MAX_CHAIN_MASSES = 800


@_dataclass(frozen=True)
class ChainConfig:
    """A parsed lumped-chain definition (see ``sweeps/three-mass-chain.toml``).

    Chain ``[left wall] m_0 .. m_{n-1} [right wall]`` (masses [kg]); link ``i`` joins element
    ``i-1`` and ``i`` (spring [N/m], dashpot [N s/m]). ``interface``: actuated DOF indices;
    ``physical_masses`` / ``physical_links``: the physical substructure. ``cutoff_hz`` [Hz]
    and ``tau_max_s`` [s]: defaults of the stability analysis (``[stability]`` table)."""

    source: SourceFile
    name: str
    masses: tuple
    springs: tuple
    dampers: tuple | None
    left_wall: bool
    right_wall: bool
    interface: tuple
    physical_masses: tuple
    physical_links: tuple
    cutoff_hz: float = 500.0
    tau_max_s: float = 1.0

    def chain_kwargs(self) -> dict:
        """Keyword arguments of :func:`hbtest.stability.chain_hybrid`."""
        return dict(
            masses=list(self.masses), springs=list(self.springs), dampers=None if self.dampers is None else list(self.dampers),
            left_wall=self.left_wall, right_wall=self.right_wall, interface=list(self.interface),
            physical_masses=list(self.physical_masses), physical_links=list(self.physical_links),
        )


def load_chain(path, overrides=(), text: str | None = None) -> ChainConfig:
    """Parse and validate a lumped-chain file: ``[chain]`` (``masses_kg``,
    ``springs_n_per_m``, optional ``dampers_n_s_per_m``, ``left_wall`` = true,
    ``right_wall`` = false), ``[split]`` (``interface``, optional ``physical_masses`` as DOF
    names ``"x0"``.. or indices, optional ``physical_links`` as link indices) and an optional
    ``[stability]`` (``cutoff_hz``, ``tau_max_s``). Every problem is a ConfigError naming the
    file and key."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    name = top.string("name", Path(src.path).stem)
    top.string("description", "")

    ch = top.sub("chain")
    masses = ch.numbers("masses_kg", nonnegative=True)
    springs = ch.numbers("springs_n_per_m", nonnegative=True)
    dampers = ch.numbers("dampers_n_s_per_m", nonnegative=True) if ch.has("dampers_n_s_per_m") else None
    left, right = ch.boolean("left_wall", True), ch.boolean("right_wall", False)
    n = len(masses)
    if n == 0:
        raise ch.error("masses_kg", "needs at least one mass")
    if n > MAX_CHAIN_MASSES:
        raise ch.error("masses_kg", f"{n} masses exceed {MAX_CHAIN_MASSES} (the stability analysis builds dense n x n matrices)")
    n_links = n - 1 + int(left) + int(right)
    if len(springs) != n_links:
        raise ch.error("springs_n_per_m", f"{n} masses with these walls need {n_links} springs, got {len(springs)}")
    if dampers is not None and len(dampers) != n_links:
        raise ch.error("dampers_n_s_per_m", f"needs {n_links} values, got {len(dampers)}")
    ch.finish()

    sp = top.sub("split")

    def dofs(key, required):
        raw = sp._get(key, [], required)
        if not isinstance(raw, list):
            raise sp.error(key, "must be a list of DOF names (x0, x1, ...) or indices")
        out = []
        for x in raw:
            if isinstance(x, str) and x.startswith("x") and x[1:].isdigit():
                i = int(x[1:])
            elif isinstance(x, int) and not isinstance(x, bool):
                i = x
            else:
                raise sp.error(key, f"{x!r} is not a DOF name like 'x0' or an index")
            if not 0 <= i < n:
                raise sp.error(key, f"DOF {x!r} outside x0..x{n - 1}")
            out.append(i)
        return tuple(out)

    interface = dofs("interface", True)
    physical_masses = dofs("physical_masses", False)
    links = sp.numbers("physical_links", [], integer=True)
    for i in links:
        if not 0 <= i < n_links:
            raise sp.error("physical_links", f"link {i} outside 0..{n_links - 1}")
    sp.finish()

    st = top.sub("stability", required=False)
    cutoff = st.number("cutoff_hz", 500.0, positive=True)
    tau_max = st.number("tau_max_s", 1.0, positive=True)
    st.finish()
    top.finish()
    return ChainConfig(src, name, masses, springs, dampers, left, right, interface, physical_masses, tuple(links), cutoff, tau_max)


__all__ += ["ChainConfig", "load_chain", "MAX_CHAIN_MASSES"]


# ---------------------------------------------------------------------------------------
# campaign file (``hbtest campaign``); kept as one appended section so it merges apart from
# the sweep/rig schema above. The campaign engine lives in :mod:`hbtest.campaign`.

import math as _math  # noqa: E402 - own imports of this section

#: what a campaign case runs
CAMPAIGN_KINDS = ("sweep", "classical", "stability")
#: where a varied key points: ``sweep.points`` (the base sweep file), ``rig:virtual.x`` (its
#: rig file, as an item of the sweep's ``rig_set``), ``analysis:delay_ms`` (the campaign's
#: ``[analysis]`` settings of a classical / stability case)
CAMPAIGN_TARGETS = ("sweep", "rig", "analysis")
CAMPAIGN_DISTRIBUTIONS = ("uniform", "normal", "lognormal", "choice")
#: the most cases one campaign store holds (one chunk file per variable and case)
MAX_CAMPAIGN_CASES = 100000
#: the figures a campaign of each kind can keep (computed by :mod:`hbtest.campaign.figures`)
CAMPAIGN_FIGURES = {
    "sweep": ("frf_error_max", "frf_error_rms", "converged_fraction", "rig_periods", "iterations_mean", "resonance_shift"),
    "classical": ("classical_frf_error_max", "iterative_frf_error_max", "classical_unstable_fraction", "converged_fraction",
                  "critical_delay_ms"),
    "stability": ("critical_delay_ms", "critical_frequency_hz"),
}
#: ``[analysis]`` settings of each kind: name -> (default, meaning); None = required
CAMPAIGN_ANALYSIS = {
    "sweep": {},
    "classical": {"delay_ms": None, "dt_ms": 0.2, "duration_s": 6.0, "actuator_hz": 0.0},
    "stability": {"cutoff_hz": 500.0, "tau_max_s": 1.0, "elements_per_metre": 0.0},
}


@_dataclass(frozen=True)
class CampaignParameter:
    """One varied parameter. ``key`` as written (``sweep.points``, ``rig:virtual.seed``,
    ``analysis:delay_ms``); ``target`` / ``path`` its parts. A grid parameter has ``values``;
    a random one a ``distribution`` and its ``arguments`` (uniform: low, high; normal: mean,
    std; lognormal: median, sigma of the logarithm; choice: values). ``also``: further
    ``(target, path)`` keys set to the same value in each case (e.g. the classical test's
    delay and the twin's actuation delay varied together)."""

    key: str
    target: str
    path: str
    values: tuple = ()
    distribution: str = ""
    arguments: tuple = ()
    also: tuple = ()


@_dataclass(frozen=True)
class CampaignConfig:
    """A parsed campaign file (see ``campaigns/paper-noise-budget.toml``).

    The cases are the Cartesian product of the ``[[grid]]`` values (in file order, the last
    varying fastest), each repeated ``draws`` times with fresh ``[[random]]`` draws (seeded by
    ``seed``). ``set`` / ``rig_set``: overrides every case shares. ``rig_seed``: ``"per-case"``
    (each case's virtual rig seeded from ``seed`` and its index) or ``"file"`` (the rig file's
    seed in every case)."""

    source: SourceFile
    name: str
    description: str
    kind: str
    base: Path
    overrides: tuple
    rig_overrides: tuple
    analysis: dict
    grid: tuple
    random: tuple
    draws: int
    seed: int
    rig_seed: str
    figures: tuple
    keep_runs: bool

    @property
    def parameters(self) -> tuple:
        return self.grid + self.random

    @property
    def n_cases(self) -> int:
        n = self.draws
        for p in self.grid:
            n *= len(p.values)
        return n


def _campaign_key(sec: Section, key: str, name: str) -> tuple[str, str]:
    if not isinstance(key, str) or not key.strip():
        raise sec.error(name, "must be a dotted key such as sweep.points, rig:virtual.actuation_delay_ms or analysis:delay_ms")
    target, sep, path = key.partition(":")
    if not sep:
        target, path = "sweep", key
    if target not in CAMPAIGN_TARGETS:
        raise sec.error(name, f"{key!r}: prefix {target!r} is not one of {', '.join(t + ':' for t in CAMPAIGN_TARGETS)}")
    if not path or any(not part for part in path.split(".")):
        raise sec.error(name, f"{key!r}: empty part in the dotted key")
    return target, path


def _also(sec: Section) -> tuple:
    raw = sec.value("also", [])
    if not isinstance(raw, list):
        raise sec.error("also", "must be a list of keys set to the same value")
    return tuple(_campaign_key(sec, k, "also") + (k,) for k in raw)


def _scalar_values(sec: Section, name: str, raw) -> tuple:
    if not isinstance(raw, list) or not raw:
        raise sec.error(name, "must be a non-empty list of values")
    for v in raw:
        if isinstance(v, (dict, list)):
            raise sec.error(name, f"{v!r}: a value must be a number, a string or a boolean")
        if isinstance(v, float) and not _math.isfinite(v):
            raise sec.error(name, f"{v!r}: values must be finite")
    return tuple(raw)


def load_campaign(path, overrides=(), text: str | None = None) -> CampaignConfig:
    """Parse and validate a campaign file: ``name``, ``description``, ``kind`` (one of
    :data:`CAMPAIGN_KINDS`), ``base`` (the sweep file, relative to the campaign file),
    ``set`` / ``rig_set`` (overrides of every case), ``seed``, ``draws``, ``rig_seed``,
    ``figures`` (default: every figure of the kind), ``keep_runs``, ``[analysis]`` (the kind's
    settings, :data:`CAMPAIGN_ANALYSIS`), ``[[grid]]`` (``key``, ``values`` or ``start`` /
    ``stop`` / ``num``) and ``[[random]]`` (``key``, ``distribution`` and its arguments);
    both take ``also`` (keys set to the same value).
    Whether a varied key exists in the sweep or rig file is checked per case (a bad key fails
    that case, recorded in the store)."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    base_dir = Path(src.path).resolve().parent
    name = top.string("name", Path(src.path).stem)
    description = top.string("description", "")
    kind = top.string("kind", "sweep", choices=CAMPAIGN_KINDS)
    base = top.path("base", base_dir)
    sets = []
    for key in ("set", "rig_set"):
        raw = top.value(key, [])
        if not isinstance(raw, list) or not all(isinstance(x, str) and "=" in x for x in raw):
            raise top.error(key, 'must be a list of "dotted.key=value" overrides')
        for item in raw:
            parse_override(item, f"{src.path}: {key}")
        sets.append(tuple(raw))
    seed = top.integer("seed", 0, min=0, max=2**63 - 1)
    rig_seed = top.string("rig_seed", "per-case", choices=("per-case", "file"))
    keep_runs = top.boolean("keep_runs", False)

    an = top.sub("analysis", required=False)
    analysis = {}
    for key, default in CAMPAIGN_ANALYSIS[kind].items():
        if default is None:
            analysis[key] = an.number(key, None, required=False, positive=True)
        else:
            analysis[key] = an.number(key, default, nonnegative=True)
    an.finish()

    grid = []
    for g in top.subs("grid"):
        key = g.string("key")
        target, kpath = _campaign_key(g, key, "key")
        if g.has("values"):
            values = _scalar_values(g, "values", g.value("values"))
        else:
            start, stop = g.number("start"), g.number("stop")
            num = g.integer("num", min=1, max=MAX_CAMPAIGN_CASES)
            values = tuple(float(v) for v in np.linspace(start, stop, num))
        grid.append(CampaignParameter(key, target, kpath, values=values, also=_also(g)))
        g.finish()

    random = []
    for r in top.subs("random"):
        key = r.string("key")
        target, kpath = _campaign_key(r, key, "key")
        dist = r.string("distribution", choices=CAMPAIGN_DISTRIBUTIONS)
        if dist == "uniform":
            low, high = r.number("low"), r.number("high")
            if not high > low:
                raise r.error("high", f"must exceed low ({low:g})")
            args = (low, high)
        elif dist == "normal":
            args = (r.number("mean"), r.number("std", nonnegative=True))
        elif dist == "lognormal":
            args = (r.number("median", positive=True), r.number("sigma", nonnegative=True))
        else:
            args = _scalar_values(r, "values", r.value("values"))
        random.append(CampaignParameter(key, target, kpath, distribution=dist, arguments=args, also=_also(r)))
        r.finish()
    # draws without [[random]]: repeats of each grid point (noise only through the per-case rig seed)
    draws = top.integer("draws", 1, min=1, max=MAX_CAMPAIGN_CASES)
    keys = [p.key for p in grid + random] + [a[2] for p in grid + random for a in p.also]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise top.error("grid", f"parameter {twice[0]!r} varied twice")

    if kind == "classical" and analysis["delay_ms"] is None and "analysis:delay_ms" not in keys:
        raise top.error("analysis.delay_ms", "a classical campaign needs the actuator delay (here or varied as analysis:delay_ms)")
    known = CAMPAIGN_FIGURES[kind]
    figures = top.value("figures", list(known))
    if not isinstance(figures, list) or not figures or not all(isinstance(f, str) for f in figures):
        raise top.error("figures", f"must be a non-empty list of figure names ({', '.join(known)})")
    for f in figures:
        if f not in known:
            raise top.error("figures", f"{f!r} is not a figure of a {kind} campaign ({', '.join(known)})")
    for p in grid + random:
        for target, kpath, key in ((p.target, p.path, p.key),) + p.also:
            if target == "analysis" and kpath not in CAMPAIGN_ANALYSIS[kind]:
                raise top.error("grid" if p in grid else "random",
                                f"{key!r}: a {kind} campaign has no analysis setting {kpath!r} ({', '.join(CAMPAIGN_ANALYSIS[kind]) or 'none'})")
    top.finish()
    cfg = CampaignConfig(src, name, description, kind, base, sets[0], sets[1], analysis, tuple(grid), tuple(random), draws, seed,
                         rig_seed, tuple(figures), keep_runs)
    if cfg.n_cases > MAX_CAMPAIGN_CASES:
        raise ConfigError(src.path, "grid", f"{cfg.n_cases} cases exceed the {MAX_CAMPAIGN_CASES} one campaign store holds")
    return cfg


__all__ += ["CampaignParameter", "CampaignConfig", "load_campaign", "CAMPAIGN_KINDS", "CAMPAIGN_FIGURES", "CAMPAIGN_TARGETS", "MAX_CAMPAIGN_CASES"]

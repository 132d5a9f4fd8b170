"""The ``[virtual]`` table of a rig file, parsed into frozen dataclasses (SI units inside; a
file key carries its unit in its name and is converted when read).

Geometry and signs (those of :mod:`hbtest.rig.virtual`): x along the beam from the pin axis,
``u`` up, ``theta`` counter-clockwise. A shaker's ``position`` is the x [m] of its stinger on
the clamp (0 = pin axis). Keys and defaults: ``instruments/virtual-cantilever.toml``.

:func:`parse_virtual_kind` is the kind's ``parse(top, common)`` for
:mod:`hbtest.rig.registry`: it reads only the ``[virtual]`` table; the PS beam it simulates is
the rig file's ``[physical]`` table (``common.physical``), required for this kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...config.section import BeamSpec, RigCommon, Section
from ...errors import ConfigError
from ...numerical.table import NonlinearElementSpec, read_element_tables
from .scatter import DemandScatterSpec

__all__ = [
    "CHANNELS",
    "ShakerSpec",
    "ClampSpec",
    "FrictionSpec",
    "NoiseSpec",
    "VirtualSpec",
    "parse_virtual",
    "parse_virtual_kind",
    "NONLINEAR_SUBSTEPS",
]

#: the channels of the published layout (legacy rig files); the twin's acquisition channels
#: are those of its rig file's [sensors], in the layout's order (``SensorLayout.channel_names``)
CHANNELS = ("l1", "l2", "g1", "g2")
#: the twin drives exactly this many shakers (translation at the pin, rotation by the lever)
TWIN_ACTUATORS = 2
#: default sub-steps per sample of the explicit nonlinear-element forces (``[virtual]``
#: ``nonlinear_substeps``): the element force is held over dt / substeps (2: the steady state
#: within 4e-5 of the one with 8; a stiff element needs more, the twin says how many)
NONLINEAR_SUBSTEPS = 2


#: largest clamp mass [kg], inertia [kg m2], stiffness or damping of [virtual.clamp] (SI)
CLAMP_MAX = 1e9

@dataclass(frozen=True)
class ShakerSpec:
    """An electrodynamic shaker with its amplifier and stinger (SI units).

    position: x [m] of the stinger's attachment on the clamp (0 = pin axis);
    amplifier_gain [V/V]; quadratic [1/V], cubic [1/V^2]: ``v_amp = g (v + a2 v^2 + a3 v^3)``;
    resistance [ohm], inductance [H]; force_constant [N/A] (= back-EMF constant [V s/m]);
    moving_mass [kg]; suspension stiffness [N/m] / damping [N s/m] (armature to ground);
    stinger stiffness [N/m] / damping [N s/m] (axial, armature to clamp).
    """

    position: float
    amplifier_gain: float
    quadratic: float
    cubic: float
    resistance: float
    inductance: float
    force_constant: float
    moving_mass: float
    suspension_stiffness: float
    suspension_damping: float
    stinger_stiffness: float
    stinger_damping: float

    @property
    def nonlinear(self) -> bool:
        return self.quadratic != 0.0 or self.cubic != 0.0


@dataclass(frozen=True)
class ClampSpec:
    """Rigid clamp on the slider: translating mass [kg] and rotary inertia about the pin axis
    [kg m^2]; support springs/dashpots: translation [N/m, N s/m], rotation [N m/rad, N m s/rad]."""

    mass: float
    inertia: float
    support_stiffness: float
    support_damping: float
    rotational_stiffness: float
    rotational_damping: float


@dataclass(frozen=True)
class FrictionSpec:
    """Regularised Coulomb friction: slider force [N] with velocity scale [m/s], pin torque
    [N m] with angular-velocity scale [rad/s]. Zero amplitudes = off."""

    slider_force: float = 0.0
    slider_velocity: float = 1e-3
    pin_torque: float = 0.0
    pin_velocity: float = 0.05

    @property
    def active(self) -> bool:
        return self.slider_force > 0.0 or self.pin_torque > 0.0


@dataclass(frozen=True)
class NoiseSpec:
    """Sensor imperfections. laser_rms [m], gauge_rms [strain]: white noise at the ADC;
    mains_hz, mains_amplitude [strain, of the fundamental at the gauge bridge],
    mains_harmonics: relative amplitudes of mains multiples 1, 2, 3...; adc_bits (0 = ideal
    converter), adc_range_v (+/- full scale).

    Correlated white noise: ``laser_mix`` / ``gauge_mix`` (rows and columns per laser / per
    gauge, unitless; None = identity): the white noise of those channels is ``rms * mix @ n``
    with ``n`` independent unit deviates (a shared source = a column with several non-zero
    entries). Mains pickup: with ``mains_gain`` / ``mains_phase`` (per gauge, per multiple;
    phase [rad]) the line of multiple ``h`` on gauge ``j`` is ``mains_amplitude *
    mains_harmonics[h] * gain[j][h] * cos(h Phi(t) + phase[j][h])`` at the ADC, one mains phase
    ``Phi`` for every gauge (common-mode pickup keeps its phase relation); without them each
    gauge's multiple has its own random phase, through the gauge filter (the legacy model).
    ``mains_drift_hz`` [Hz], ``mains_drift_period_s`` [s]: the mains frequency wanders as
    ``mains_hz + drift sin(2 pi t / period + psi)`` (``psi`` random)."""

    laser_rms: float = 0.0
    gauge_rms: float = 0.0
    mains_hz: float = 50.0
    mains_amplitude: float = 0.0
    mains_harmonics: tuple = (1.0,)
    adc_bits: int = 0
    adc_range_v: float = 10.0
    laser_mix: tuple | None = None
    gauge_mix: tuple | None = None
    mains_gain: tuple | None = None
    mains_phase: tuple | None = None
    mains_drift_hz: float = 0.0
    mains_drift_period_s: float = 1800.0


@dataclass(frozen=True)
class VirtualSpec:
    """The parsed ``[virtual]`` table plus the PS beam it simulates (SI units)."""

    seed: int
    beam: BeamSpec
    mesh_root_element: float
    mesh_root_length: float
    clamp: ClampSpec
    shakers: tuple
    friction: FrictionSpec
    noise: NoiseSpec
    actuation_delay: float
    modal_cutoff_hz: float
    #: the sensors the twin simulates: the rig file's nominal ``[sensors]`` changed by
    #: ``[virtual.true_sensors]`` (never the calibrated layout the reduction uses); None (a
    #: spec built by hand) = the layout the rig is opened with is the truth
    true_sensors: object = None
    #: nonlinear elements on the PS beam (``[[virtual.nonlinear]]``, positions [m] from the
    #: clamp, x = 0 = the interface node) and the sub-steps per sample of their explicit forces
    nonlinear: tuple[NonlinearElementSpec, ...] = ()
    nonlinear_substeps: int = NONLINEAR_SUBSTEPS
    #: ``[virtual.demand_scatter]`` (:mod:`hbtest.rig.virtual.scatter`); None = the demand as commanded
    demand_scatter: DemandScatterSpec | None = None

    def simulated_sensors(self, nominal):
        """The sensor layout the twin simulates: :attr:`true_sensors` or ``nominal``."""
        return self.true_sensors if self.true_sensors is not None else nominal

    def nodes(self, gauge_positions) -> np.ndarray:
        """FE node positions [m]: ``beam.elements`` equal elements, refined to
        ``mesh_root_element`` over ``[0, max(mesh_root_length, d2 + 10 mm)]``, nodes at the
        gauges and at every nonlinear element."""
        L = self.beam.length
        d2 = max(gauge_positions)
        zone = min(L, max(self.mesh_root_length, d2 + 0.01))
        n_zone = max(1, int(math.ceil(zone / self.mesh_root_element - 1e-9)))
        x = np.concatenate([np.linspace(0.0, L, self.beam.elements + 1), np.linspace(0.0, zone, n_zone + 1)])
        fixed = np.array([0.0, L, *gauge_positions, *(x for e in self.nonlinear for x in e.positions)])
        x = np.unique(np.round(np.concatenate([x, fixed]), 12))
        tol = 0.25 * min(self.mesh_root_element, L / self.beam.elements)
        keep: list[float] = []
        is_fixed = lambda v: bool(np.any(np.abs(fixed - v) < 1e-12))  # noqa: E731
        for xi in x:
            if is_fixed(xi):
                while keep and not is_fixed(keep[-1]) and xi - keep[-1] < tol:
                    keep.pop()
                keep.append(float(xi))
            elif not keep or xi - keep[-1] >= tol:
                keep.append(float(xi))
        x = np.array(keep)
        x[0], x[-1] = 0.0, L
        return x


def _shaker(sec: Section) -> ShakerSpec:
    s = ShakerSpec(
        position=sec.number("position_mm", scale=1e-3, min=-1000, max=1000),
        amplifier_gain=sec.number("amplifier_gain", positive=True, max=1000),
        quadratic=sec.number("amplifier_quadratic_per_v", 0.0, min=-1, max=1),
        cubic=sec.number("amplifier_cubic_per_v2", 0.0, min=-1, max=1),
        resistance=sec.number("coil_resistance_ohm", positive=True, max=1000),
        inductance=sec.number("coil_inductance_mh", scale=1e-3, positive=True, max=1000),
        force_constant=sec.number("force_constant_n_per_a", positive=True, max=1000),
        moving_mass=sec.number("moving_mass_g", scale=1e-3, positive=True, max=1e5),
        suspension_stiffness=sec.number("suspension_stiffness_n_per_m", positive=True),
        suspension_damping=sec.number("suspension_damping_n_s_per_m", 0.0, nonnegative=True),
        stinger_stiffness=sec.number("stinger_stiffness_n_per_m", positive=True),
        stinger_damping=sec.number("stinger_damping_n_s_per_m", 0.0, nonnegative=True),
    )
    sec.finish()
    return s


def parse_virtual(sec: Section, physical: BeamSpec, sensors, common) -> VirtualSpec:
    """Parse and validate the ``[virtual]`` table of a rig file (keys: see
    ``instruments/virtual-cantilever.toml``) for the PS beam ``physical`` and the
    :class:`~hbtest.method.sensors.SensorLayout` ``sensors``; ``common``: the
    :class:`~hbtest.config.section.RigCommon` (or a mapping with ``sample_rate_hz`` and
    ``actuators``). Every problem is a ConfigError naming the key."""
    if isinstance(common, RigCommon):
        fs, actuators = float(common.sample_rate_hz), tuple(common.actuators)
    else:
        fs, actuators = float(common["sample_rate_hz"]), tuple(common["actuators"])
    seed = sec.integer("seed", 0, min=0, max=2**63 - 1)
    delay = sec.number("actuation_delay_ms", 0.0, scale=1e-3, nonnegative=True, max=1000)
    cutoff = sec.number("modal_cutoff_hz", 1500.0, min=50, max=100000)
    root_el, root_len = _mesh(sec, physical, sensors)
    clamp = _clamp(sec.sub("clamp"))
    shakers = _shakers(sec, actuators)
    fr = sec.sub("friction", required=False)
    friction = FrictionSpec(
        slider_force=fr.number("slider_coulomb_n", 0.0, nonnegative=True, max=1000),
        slider_velocity=fr.number("slider_velocity_mm_per_s", 1.0, scale=1e-3, positive=True),
        pin_torque=fr.number("pin_coulomb_nm", 0.0, nonnegative=True, max=1000),
        pin_velocity=fr.number("pin_velocity_rad_per_s", 0.05, positive=True),
    )
    fr.finish()
    true_sensors = _true_sensors(sec.sub("true_sensors", required=False), sensors)
    simulated = true_sensors if true_sensors is not None else sensors
    d2 = max(simulated.gauge_positions)
    if d2 >= physical.length:
        raise sec.error("true_sensors", f"gauge at {d2 * 1e3:g} mm lies beyond the {physical.length * 1e3:g} mm beam")
    skewed = [c.name for c in simulated.channels if c.skew != 0.0]
    if any(c.skew < 0 for c in simulated.channels):
        raise ConfigError(sec.source, "sensors.channels", "the virtual twin simulates only non-negative skew_us (a channel sampled late)")
    if skewed and friction.active:
        raise fr.error("slider_coulomb_n", f"the twin does not simulate friction together with channel skew ({', '.join(skewed)}): set one of them to 0")
    _check_explicit_friction(fr, friction, clamp, shakers, fs)
    noise = _noise(sec, simulated, fs)
    # nonlinear elements on the PS beam: the same tables (and parser) as [[numerical.nonlinear]]
    nonlinear = read_element_tables(sec.subs("nonlinear"), physical.length, "free", frozenset(), "physical beam")
    substeps = int(sec.integer("nonlinear_substeps", NONLINEAR_SUBSTEPS, min=1, max=64))
    if nonlinear and friction.active:
        raise fr.error("slider_coulomb_n", "the twin does not simulate [virtual.friction] together with [[virtual.nonlinear]] elements: set one of them to 0")
    if nonlinear and skewed:
        raise sec.error("nonlinear", f"the twin does not simulate nonlinear elements together with channel skew ({', '.join(skewed)})")
    scatter = _demand_scatter(sec.sub("demand_scatter", required=False), actuators)
    sec.finish()
    return VirtualSpec(seed=seed, beam=physical, mesh_root_element=root_el, mesh_root_length=root_len, clamp=clamp,
                       shakers=shakers, friction=friction, noise=noise, actuation_delay=delay, modal_cutoff_hz=cutoff,
                       true_sensors=simulated, nonlinear=nonlinear, nonlinear_substeps=substeps,
                       demand_scatter=scatter)


def _demand_scatter(sec: Section, actuators: tuple) -> DemandScatterSpec | None:
    """``[virtual.demand_scatter]``: ``sd_v`` (one per actuator, V rms per coefficient of the
    fundamental) and ``correlation`` (between consecutive offsets); None when absent or all zero."""
    if not sec.data:
        return None
    sd = sec.numbers("sd_v", length=len(actuators), nonnegative=True)
    if any(x > 1.0 for x in sd):
        raise sec.error("sd_v", f"at most 1 V per coefficient, got {list(sd)}")
    rho = sec.number("correlation", 0.0, nonnegative=True, max=0.99)
    sec.finish()
    return DemandScatterSpec(tuple(sd), rho) if any(sd) else None


def _mesh(sec: Section, physical: BeamSpec, sensors) -> tuple[float, float]:
    """``mesh_root_element_mm`` and ``mesh_root_length_mm`` [m], checked against the beam and
    the gauges (the refined mesh must stay below 3000 elements)."""
    root_el = sec.number("mesh_root_element_mm", 1.0, scale=1e-3, positive=True)
    root_len = sec.number("mesh_root_length_mm", 40.0, scale=1e-3, nonnegative=True)
    if root_el > physical.length / 4:
        raise sec.error("mesh_root_element_mm", f"{root_el * 1e3:g} mm is too coarse for a {physical.length * 1e3:g} mm beam")
    if root_len > physical.length:
        raise sec.error("mesh_root_length_mm", f"{root_len * 1e3:g} mm exceeds the beam length {physical.length * 1e3:g} mm")
    d2 = max(sensors.gauge_positions)
    if d2 >= physical.length:
        raise ConfigError(sec.source, "sensors.gauge_positions_mm", f"gauge at {d2 * 1e3:g} mm lies beyond the {physical.length * 1e3:g} mm beam")
    n_el = int(math.ceil(min(physical.length, max(root_len, d2 + 0.01)) / root_el)) + physical.elements
    if n_el > 3000:
        raise sec.error("mesh_root_element_mm", f"mesh of about {n_el} elements is too fine (max 3000)")
    return root_el, root_len


def _clamp(cl: Section) -> ClampSpec:
    """``[virtual.clamp]``. Upper bounds far beyond any lab clamp: beyond them the twin's
    eigenproblem loses every mode to overflow (a clamp of 1e308 kg used to end in a traceback)."""
    clamp = ClampSpec(
        mass=cl.number("mass_kg", positive=True, max=CLAMP_MAX),
        inertia=cl.number("inertia_kg_m2", positive=True, max=CLAMP_MAX),
        support_stiffness=cl.number("support_stiffness_n_per_m", positive=True, max=CLAMP_MAX),
        support_damping=cl.number("support_damping_n_s_per_m", 0.0, nonnegative=True, max=CLAMP_MAX),
        rotational_stiffness=cl.number("rotational_stiffness_nm_per_rad", positive=True, max=CLAMP_MAX),
        rotational_damping=cl.number("rotational_damping_nms_per_rad", 0.0, nonnegative=True, max=CLAMP_MAX),
    )
    cl.finish()
    return clamp


def _shakers(sec: Section, actuators: tuple) -> tuple:
    """``[[virtual.shakers]]``: one per actuator of ``[rig].actuators``, in that order, acting at
    two distinct points."""
    if len(actuators) != TWIN_ACTUATORS:
        raise ConfigError(sec.source, "rig.actuators", f"the virtual twin drives exactly {TWIN_ACTUATORS} shakers (translation, rotation), one per"
                          f" [[virtual.shakers]] table; [rig].actuators names {len(actuators)}")
    shaker_secs = sec.subs("shakers")
    if len(shaker_secs) != len(actuators):
        raise sec.error("shakers", f"needs one [[virtual.shakers]] table per actuator ({len(actuators)}: {', '.join(actuators)}), got {len(shaker_secs)}")
    shakers = []
    for i, s in enumerate(shaker_secs):
        name = s.string("actuator", actuators[i])
        if name != actuators[i]:
            raise s.error("actuator", f"shaker {i} drives actuator {actuators[i]!r} (order of [rig].actuators), not {name!r}")
        shakers.append(_shaker(s))
    if abs(shakers[0].position - shakers[1].position) < 1e-3:
        raise shaker_secs[1].error("position_mm", "the two stingers act at the same point: rotation cannot be controlled (need a lever arm)")
    return tuple(shakers)


def _check_explicit_friction(fr: Section, friction, clamp, shakers, fs: float) -> None:
    """Explicit friction: the regularised slope must be small against mass / dt."""
    dt = 1.0 / fs
    m_u = clamp.mass + sum(s.moving_mass for s in shakers)
    j_t = clamp.inertia + sum(s.moving_mass * s.position**2 for s in shakers)
    if friction.slider_force / friction.slider_velocity * dt / m_u > 0.5:
        raise fr.error("slider_velocity_mm_per_s", "too small for the Coulomb force at this sample rate (explicit friction would chatter): raise it")
    if friction.pin_torque / friction.pin_velocity * dt / j_t > 0.5:
        raise fr.error("pin_velocity_rad_per_s", "too small for the Coulomb torque at this sample rate (explicit friction would chatter): raise it")


def _matrix(sec: Section, key: str, rows: int, cols: int, what: str, scale: float = 1.0, nonnegative: bool = False):
    """An optional ``rows`` x ``cols`` array of arrays of numbers (None when absent)."""
    if not sec.has(key):
        return None
    v = sec.value(key)
    square = rows == cols
    # a layout with more channels than the table lists: the first ones (the rest: see _pad)
    n = len(v) if isinstance(v, list) and 0 < len(v) <= rows else rows
    width = n if square else cols
    if not isinstance(v, list) or len(v) != n or any(not isinstance(r, list) or len(r) != width for r in v):
        raise sec.error(key, f"must be {rows} arrays ({what}) of {cols} numbers each, got {v!r}")
    out = []
    for r in v:
        bad = [x for x in r if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x)]
        if bad or (nonnegative and any(x < 0 for x in r)):
            raise sec.error(key, f"entries must be finite{' non-negative' if nonnegative else ''} numbers, got {r!r}")
        out.append(tuple(float(x) * scale for x in r))
    return _pad(tuple(out), rows, cols, square)


def _pad(m: tuple, rows: int, cols: int, square: bool) -> tuple:
    """Rows (and, square, columns) beyond those given: identity for a mix (independent unit
    noise), zero for a per-multiple table (no fixed pickup on those gauges)."""
    n = len(m)
    if n == rows:
        return m
    if square:
        return tuple(tuple(m[i][j] if i < n and j < n else float(i == j) for j in range(cols)) for i in range(rows))
    return m + tuple((0.0,) * cols for _ in range(rows - n))


def _noise(sec: Section, simulated, fs: float) -> NoiseSpec:
    """``[virtual.noise]``, ``[virtual.mains]`` and ``[virtual.adc]`` (see :class:`NoiseSpec`)."""
    n_l = sum(c.kind == "laser" for c in simulated.channels)
    n_g = len(simulated.channels) - n_l
    nz = sec.sub("noise", required=False)
    laser_rms = nz.number("laser_rms_um", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    gauge_rms = nz.number("gauge_rms_microstrain", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    laser_mix = _matrix(nz, "laser_mix", n_l, n_l, "one per laser")
    gauge_mix = _matrix(nz, "gauge_mix", n_g, n_g, "one per gauge")
    nz.finish()
    mn = sec.sub("mains", required=False)
    mains_hz = mn.number("frequency_hz", 50.0, positive=True)
    mains_amp = mn.number("amplitude_microstrain", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    mains_h = mn.numbers("harmonics", [1.0], nonnegative=True)
    if not mains_h:
        raise mn.error("harmonics", "needs at least one relative amplitude (fundamental first)")
    if mains_hz * len(mains_h) >= fs / 2:
        raise mn.error("harmonics", f"mains multiple {len(mains_h)} x {mains_hz:g} Hz lies above the Nyquist frequency {fs / 2:g} Hz")
    gain = _matrix(mn, "gauge_gain", n_g, len(mains_h), "one per gauge, one entry per multiple", nonnegative=True)
    what = "one per gauge, one entry per multiple"
    phase = _matrix(mn, "gauge_phase_deg", n_g, len(mains_h), what, scale=math.pi / 180)
    if (gain is None) != (phase is None):
        key = "gauge_phase_deg" if phase is None else "gauge_gain"
        raise mn.error(key, "gauge_gain and gauge_phase_deg go together (fixed pickup per gauge)")
    drift = mn.number("drift_hz", 0.0, nonnegative=True, max=5.0)
    if drift >= mains_hz:
        raise mn.error("drift_hz", f"must be below frequency_hz ({mains_hz:g} Hz)")
    period = mn.number("drift_period_s", 1800.0, positive=True, max=1e7)
    mn.finish()
    adc = sec.sub("adc", required=False)
    bits = adc.integer("bits", 16, min=0, max=32)
    if 0 < bits < 8:
        raise adc.error("bits", f"must be 0 (ideal) or 8..32, got {bits}")
    rng_v = adc.number("range_v", 10.0, positive=True, max=1000)
    adc.finish()
    return NoiseSpec(laser_rms, gauge_rms, mains_hz, mains_amp, tuple(mains_h), bits, rng_v,
                     laser_mix, gauge_mix, gain, phase, drift, period)


#: keys of a channel's table in ``[virtual.true_sensors]`` -> (ChannelSpec field, file scale)
TRUE_CHANNEL_KEYS = {"position_mm": ("position", 1e-3), "lowpass_hz": ("lowpass_hz", 1.0), "skew_us": ("skew", 1e-6)}


def _true_sensors(sec: Section, nominal):
    """``[virtual.true_sensors]``: one sub-table per channel name whose TRUE parameters differ
    from the nominal ``[sensors]`` ones (which the reduction keeps using). Keys:
    ``scale_factor`` (true scale_per_v = factor x nominal: the channel outputs
    ``physical / (factor scale)`` volts, so a reduction with the nominal scale reads the
    physical quantity divided by the factor), ``position_mm``, ``lowpass_hz``, ``skew_us``.
    None when the table is absent or empty. (The true mains frequency is
    ``[virtual.mains].frequency_hz``; the reduction assumes ``[sensors].mains_hz``.)"""
    if not sec.data:
        return None
    changes = {}
    for name in list(sec.data):
        if name not in nominal.channel_names:
            raise sec.error(name, f"no channel {name!r} in [sensors] (channels: {', '.join(nominal.channel_names)})")
        ch = sec.sub(name)
        nom = nominal.channel(name)
        c = {}
        if ch.has("scale_factor"):
            c["scale"] = nom.scale * ch.number("scale_factor", positive=True, min=0.5, max=2.0)
        for key, (attr, scale) in TRUE_CHANNEL_KEYS.items():
            if ch.has(key):
                c[attr] = ch.number(key, nonnegative=key != "position_mm" or nom.kind == "strain_gauge", scale=scale)
        if "lowpass_hz" in c and nom.lag_table:
            raise ch.error("lowpass_hz", "the channel's nominal lag is a lag_table: the twin simulates filters only")
        ch.finish()
        changes[name] = c
    try:
        return nominal.with_channels(changes)
    except ValueError as e:
        raise ConfigError(sec.source, sec.prefix, str(e)) from None


def parse_virtual_kind(top: Section, common: RigCommon) -> VirtualSpec:
    """The virtual kind's parser (:class:`hbtest.rig.registry.RigKind`): ``[virtual]`` of the
    rig file, for the ``[physical]`` beam and the sensor layout in ``common``."""
    if common.physical is None:
        raise ConfigError(common.path, "physical", "a virtual rig needs the [physical] beam it simulates")
    return parse_virtual(top.sub("virtual"), common.physical, common.sensors, common)

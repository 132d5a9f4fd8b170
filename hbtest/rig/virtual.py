"""The virtual twin of the hybrid-test rig (SPEC §5): a physics model behind the :class:`Rig`
protocol, so the solver sees only sensor voltages — and an exact reference, so accuracy is
measured, not assumed.

Physics (SI units; x along the beam from the pin axis, ``u`` up, ``theta`` counter-clockwise):

- **PS**: the tip beam of the rig file's ``[physical]`` table (Euler–Bernoulli FE,
  :func:`hbtest.structures.beam`, consistent mass, ``C = zeta_M M + zeta_K K``, free tip),
  rigidly clamped at x = 0: the beam's node-0 DOFs *are* the clamp's (u, theta), which are the
  interface DOFs. The mesh is refined near the root (``mesh_root_element_mm`` up to
  ``mesh_root_length_mm``, at least 10 mm past the far gauge) with nodes at the gauges, so the
  FE curvature seen by the gauges is accurate (the segment reconstruction agrees with the FE
  interface forces to ~1e-5 with 1 mm elements).
- **Clamp**: rigid body on a vertical slider with a pin: translating mass (slider carriage,
  clamp, pin) on a support spring/dashpot, rotary inertia about the pin axis on a rotational
  spring/dashpot. The clamp's centre of mass is on the pin axis (no mass coupling).
- **Friction** (optional): regularised Coulomb force ``-F_c tanh(u'/v_s)`` on the slider and
  torque ``-M_c tanh(theta'/w_s)`` on the pin; viscous parts are the support dashpots. When
  active the simulation takes a slower per-sample path (explicit friction force held over one
  sample; about 10-20x real time instead of > 1000x) and :meth:`VirtualRig.steady_state` is
  the linear (friction-free) response, flagged ``exact=False``.
- **Shakers** (one table per actuator, in the order of ``[rig].actuators``): voltage amplifier
  (gain g, optional static polynomial ``v_amp = g (v + a2 v^2 + a3 v^3)``: harmonic
  generation), coil ``L di/dt + R i + K_f z' = v_amp``, armature (moving mass, suspension
  spring/dashpot to ground) pushed by ``K_f i``, stinger (axial spring/dashpot) from the
  armature to the clamp point at ``position_mm`` along x: the first at the pin axis (vertical),
  the second at a lever arm (rotation, through the moment of its stinger force).
- **Sensors** (the layout of ``[sensors]`` is taken as the true geometry): lasers
  ``l1 = u`` and ``l2 = u + d_l theta``; gauges ``eps_j = -(h/2) u''(d_j)`` of the twin's own
  beam (never the interface forces). Each channel with ``lowpass_hz > 0`` passes an analogue
  Butterworth low-pass of its order (part of the continuous model: exact, state carried
  across calls). Mains interference (``mains_hz`` and multiples, amplitudes relative to the
  fundamental, phases drawn from the seed) is picked up at the gauge bridge and passes the
  gauge filter; white noise (laser, gauge) and ADC quantisation/clipping are added at the
  converter. Raw channel values are volts: ``volts = (physical - offset) / scale``.
- **Actuation delay** ``tau``: a delay of the DAC output. ``tau = (d + alpha) dt`` is applied
  exactly, fractional part included (the held input changes at ``t_n + tau``); no rounding.

Simulation: the linear model (beam + clamp + stingers + armatures + coil currents; inputs =
amplifier input voltages and the friction force/torque) is assembled in first-order form
``E x' = A x + B u`` and diagonalised (generalised eigenproblem with left and right vectors;
the eigenvector condition of every kept mode is checked, ~3e2 for the reference rig).
Modes with ``|lambda| < 2 pi modal_cutoff_hz`` are kept; the rest (high beam modes, among them
the overdamped ones that stiffness-proportional damping clusters near ``-1/zeta_K`` — the
ill-conditioned part of the spectrum) enter as a static correction matching the full model's
DC gain. The channel filters are appended by partial fractions, so the whole model is
diagonal. Each mode is discretised exactly for the zero-order-hold DAC,
``z[n+1] = e^{lambda dt} z[n] + (e^{lambda dt} - 1)/lambda * b u[n]`` (split in two at the
fractional delay), states carried across calls. The input is generated as a sum of complex
exponentials in n wherever it is one (a constant demand; a raised-cosine ramp at constant
frequency with a linear amplifier), and there the recurrence is solved in closed form —
periodic particular solution plus every mode's decaying transient, evaluated block-wise —
which is the same exact discrete solution at a cost independent of the number of modes (all
transients are kept; output terms are dropped only once below 1e-9 V). Frequency-changing
ramps and the first ``d + 1`` samples of a segment (delay line) run the recurrence with
:func:`scipy.signal.lfilter` per mode; friction runs it sample by sample. A test checks the two
paths agree to 1e-9. :meth:`VirtualRig.reduction_error` measures the truncation against the
full model: ~1e-5 in the 16-19 Hz band, growing as f^2 (the truncated modes' mass-like part)
to ~4e-4 at 100 Hz.

White sensor noise is drawn from a 2^16-level table of Gaussian quantiles (unit variance, tails
clipped at 4.3 sigma): i.i.d. and five times cheaper than exact normal deviates.

Time: the DAC and ADC share the sample clock ``t_n = n / fs``; the demand sample ``v[n]`` is
held over ``[t_n + tau, t_{n+1} + tau)`` and ``y[n]`` is the channel at ``t_n``. The generator
phase is continuous across demand changes (frequency and coefficients ramp together with a
raised cosine) and acquisitions report times in the demand time base (``hbtest.rig``).

Truth (for tests and the reference data of the point loop, never for control):
:meth:`VirtualRig.steady_state`, :meth:`VirtualRig.ps_dynamic_stiffness`,
:meth:`VirtualRig.emulated_interface_response`, :meth:`VirtualRig.modes`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.signal
import scipy.special

from ..config import BeamSpec, Section
from ..errors import ConfigError, InstrumentError
from ..sensors import SensorLayout
from ..structures import Beam, beam as _make_beam
from ..substructure import Substructure
from . import Acquisition, RigDescription, check_voltage

__all__ = [
    "ShakerSpec",
    "ClampSpec",
    "FrictionSpec",
    "NoiseSpec",
    "VirtualSpec",
    "SteadyState",
    "VirtualRig",
    "parse_virtual",
    "CHANNELS",
]

CHANNELS = ("l1", "l2", "g1", "g2")
_MAX_CHUNK = 1 << 15  # samples simulated per vectorised block
# White sensor noise: i.i.d. draws from 2^16 equiprobable Gaussian quantiles (unit variance,
# tails clipped at 4.3 sigma) — five times cheaper than exact normal deviates, and the
# random-number cost dominates the simulation.
_GAUSS = scipy.special.ndtri((np.arange(1 << 16) + 0.5) / (1 << 16))
_GAUSS /= _GAUSS.std()


# ---------------------------------------------------------------------------------------
# specification


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
    converter), adc_range_v (+/- full scale)."""

    laser_rms: float = 0.0
    gauge_rms: float = 0.0
    mains_hz: float = 50.0
    mains_amplitude: float = 0.0
    mains_harmonics: tuple = (1.0,)
    adc_bits: int = 0
    adc_range_v: float = 10.0


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

    def nodes(self, gauge_positions) -> np.ndarray:
        """FE node positions [m]: ``beam.elements`` equal elements, refined to
        ``mesh_root_element`` over ``[0, max(mesh_root_length, d2 + 10 mm)]``, nodes at the
        gauges."""
        L = self.beam.length
        d2 = max(gauge_positions)
        zone = min(L, max(self.mesh_root_length, d2 + 0.01))
        n_zone = max(1, int(math.ceil(zone / self.mesh_root_element - 1e-9)))
        x = np.concatenate([np.linspace(0.0, L, self.beam.elements + 1), np.linspace(0.0, zone, n_zone + 1)])
        fixed = np.array([0.0, L, *gauge_positions])
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


def parse_virtual(sec: Section, physical: BeamSpec, sensors: SensorLayout, common: dict) -> VirtualSpec:
    """Parse and validate the ``[virtual]`` table of a rig file (keys: see
    ``instruments/virtual-cantilever.toml``). Every problem is a ConfigError naming the key."""
    fs = float(common["sample_rate_hz"])
    actuators = tuple(common["actuators"])
    seed = sec.integer("seed", 0, min=0, max=2**63 - 1)
    delay = sec.number("actuation_delay_ms", 0.0, scale=1e-3, nonnegative=True, max=1000)
    cutoff = sec.number("modal_cutoff_hz", 1500.0, min=50, max=100000)
    root_el = sec.number("mesh_root_element_mm", 1.0, scale=1e-3, positive=True)
    root_len = sec.number("mesh_root_length_mm", 40.0, scale=1e-3, nonnegative=True)
    if root_el > physical.length / 4:
        raise sec.error("mesh_root_element_mm", f"{root_el * 1e3:g} mm is too coarse for a {physical.length * 1e3:g} mm beam")
    if root_len > physical.length:
        raise sec.error("mesh_root_length_mm", f"{root_len * 1e3:g} mm exceeds the beam length {physical.length * 1e3:g} mm")
    d1, d2 = sensors.gauge_positions
    if d2 >= physical.length:
        raise ConfigError(sec.source, "sensors.gauge_positions_mm", f"gauge at {d2 * 1e3:g} mm lies beyond the {physical.length * 1e3:g} mm beam")
    n_el = int(math.ceil(min(physical.length, max(root_len, d2 + 0.01)) / root_el)) + physical.elements
    if n_el > 3000:
        raise sec.error("mesh_root_element_mm", f"mesh of about {n_el} elements is too fine (max 3000)")

    cl = sec.sub("clamp")
    clamp = ClampSpec(
        mass=cl.number("mass_kg", positive=True),
        inertia=cl.number("inertia_kg_m2", positive=True),
        support_stiffness=cl.number("support_stiffness_n_per_m", positive=True),
        support_damping=cl.number("support_damping_n_s_per_m", 0.0, nonnegative=True),
        rotational_stiffness=cl.number("rotational_stiffness_nm_per_rad", positive=True),
        rotational_damping=cl.number("rotational_damping_nms_per_rad", 0.0, nonnegative=True),
    )
    cl.finish()

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

    fr = sec.sub("friction", required=False)
    friction = FrictionSpec(
        slider_force=fr.number("slider_coulomb_n", 0.0, nonnegative=True, max=1000),
        slider_velocity=fr.number("slider_velocity_mm_per_s", 1.0, scale=1e-3, positive=True),
        pin_torque=fr.number("pin_coulomb_nm", 0.0, nonnegative=True, max=1000),
        pin_velocity=fr.number("pin_velocity_rad_per_s", 0.05, positive=True),
    )
    fr.finish()
    # explicit friction: the regularised slope must be small against mass / dt
    dt = 1.0 / fs
    m_u = clamp.mass + sum(s.moving_mass for s in shakers)
    j_t = clamp.inertia + sum(s.moving_mass * s.position**2 for s in shakers)
    if friction.slider_force / friction.slider_velocity * dt / m_u > 0.5:
        raise fr.error("slider_velocity_mm_per_s", "too small for the Coulomb force at this sample rate (explicit friction would chatter): raise it")
    if friction.pin_torque / friction.pin_velocity * dt / j_t > 0.5:
        raise fr.error("pin_velocity_rad_per_s", "too small for the Coulomb torque at this sample rate (explicit friction would chatter): raise it")

    nz = sec.sub("noise", required=False)
    laser_rms = nz.number("laser_rms_um", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    gauge_rms = nz.number("gauge_rms_microstrain", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    nz.finish()
    mn = sec.sub("mains", required=False)
    mains_hz = mn.number("frequency_hz", 50.0, positive=True)
    mains_amp = mn.number("amplitude_microstrain", 0.0, scale=1e-6, nonnegative=True, max=1e4)
    mains_h = mn.numbers("harmonics", [1.0], nonnegative=True)
    if not mains_h:
        raise mn.error("harmonics", "needs at least one relative amplitude (fundamental first)")
    if mains_hz * len(mains_h) >= fs / 2:
        raise mn.error("harmonics", f"mains multiple {len(mains_h)} x {mains_hz:g} Hz lies above the Nyquist frequency {fs / 2:g} Hz")
    mn.finish()
    adc = sec.sub("adc", required=False)
    bits = adc.integer("bits", 16, min=0, max=32)
    if 0 < bits < 8:
        raise adc.error("bits", f"must be 0 (ideal) or 8..32, got {bits}")
    rng_v = adc.number("range_v", 10.0, positive=True, max=1000)
    adc.finish()
    noise = NoiseSpec(laser_rms, gauge_rms, mains_hz, mains_amp, tuple(mains_h), bits, rng_v)
    sec.finish()
    return VirtualSpec(
        seed=seed,
        beam=physical,
        mesh_root_element=root_el,
        mesh_root_length=root_len,
        clamp=clamp,
        shakers=tuple(shakers),
        friction=friction,
        noise=noise,
        actuation_delay=delay,
        modal_cutoff_hz=cutoff,
    )


# ---------------------------------------------------------------------------------------
# the linear model


@dataclass(frozen=True, eq=False)
class _Model:
    """Everything derived once from the spec (read-only arrays)."""

    beam: Beam
    nb: int  # beam DOFs (node 0 = clamp u, theta)
    nm: int  # mechanical DOFs (beam + 2 armatures)
    A: np.ndarray
    E: np.ndarray
    MCK: tuple  # mechanical M, C, K (beam DOFs, armatures)
    B: np.ndarray  # inputs: amplifier inputs (2), slider force, pin torque
    C_raw: np.ndarray  # l1, l2, eps1, eps2 (unfiltered physical), u', theta'
    channel_filters: tuple  # per channel: None or (poles, gain)
    kept: np.ndarray  # kept eigenvalues (all members of pairs)
    lam: np.ndarray  # simulated modal states (representatives + filter modes)
    fac: np.ndarray
    Cy: np.ndarray  # (4, n_s) complex, factors folded in
    Dy: np.ndarray  # (4, 4) direct feedthrough of held inputs (unfiltered channels)
    Cv: np.ndarray  # (2, n_s) velocities u', theta'
    Dv: np.ndarray
    Bz: np.ndarray  # (n_s, 4)
    Bz2: np.ndarray  # (n_s, 2) actuation columns, contiguous
    a: np.ndarray
    c_now: np.ndarray  # weight of u[n-d] over the interval (actuation inputs)
    c_prev: np.ndarray  # weight of u[n-d-1]
    c_force: np.ndarray  # (e^{lambda dt} - 1)/lambda (undelayed inputs)
    delay_samples: int
    delay_fraction: float
    rig_modes: np.ndarray  # eigenvalues of clamp + shakers without the beam
    max_condition: float


def _filter(ch) -> tuple | None:
    if ch.lowpass_hz <= 0:
        return None
    _, p, k = scipy.signal.butter(ch.lowpass_order, 2 * np.pi * ch.lowpass_hz, analog=True, output="zpk")
    return (np.asarray(p, complex), float(k))


def _filter_response(filt, s) -> np.ndarray:
    s = np.asarray(s, dtype=complex)
    if filt is None:
        return np.ones_like(s)
    p, k = filt
    return k / np.prod(s[..., None] - p, axis=-1)


def _assemble(spec: VirtualSpec, layout: SensorLayout, with_beam: bool = True):
    """Mechanical M, C, K (beam DOFs, then armature z1, z2) and the first-order (A, E, B)."""
    bs = spec.beam
    if with_beam:
        b = _make_beam(
            bs.length, bs.width, bs.thickness, bs.youngs_modulus, bs.density,
            zeta_mass=bs.zeta_mass, zeta_stiffness=bs.zeta_stiffness, left="free", right="free",
            nodes=spec.nodes(layout.gauge_positions),
        )
        nb = b.n_dof
    else:
        b, nb = None, 2
    n = nb + 2
    M = np.zeros((n, n))
    K = np.zeros((n, n))
    C = np.zeros((n, n))
    if b is not None:
        M[:nb, :nb], K[:nb, :nb], C[:nb, :nb] = b.M, b.K, b.C
    cl = spec.clamp
    M[0, 0] += cl.mass
    M[1, 1] += cl.inertia
    K[0, 0] += cl.support_stiffness
    C[0, 0] += cl.support_damping
    K[1, 1] += cl.rotational_stiffness
    C[1, 1] += cl.rotational_damping
    for j, sh in enumerate(spec.shakers):
        z = nb + j
        M[z, z] += sh.moving_mass
        K[z, z] += sh.suspension_stiffness
        C[z, z] += sh.suspension_damping
        e = np.zeros(n)
        e[0], e[1], e[z] = 1.0, sh.position, -1.0  # stinger elongation z - (u + x theta), sign-flipped
        K += sh.stinger_stiffness * np.outer(e, e)
        C += sh.stinger_damping * np.outer(e, e)
    N = 2 * n + 2
    A = np.zeros((N, N))
    E = np.eye(N)
    A[:n, n : 2 * n] = np.eye(n)
    A[n : 2 * n, :n] = -K
    A[n : 2 * n, n : 2 * n] = -C
    E[n : 2 * n, n : 2 * n] = M
    Bm = np.zeros((N, 4))
    for j, sh in enumerate(spec.shakers):
        ii, z = 2 * n + j, nb + j
        A[n + z, ii] = sh.force_constant  # coil force on the armature
        A[ii, n + z] = -sh.force_constant  # back-EMF
        A[ii, ii] = -sh.resistance
        E[ii, ii] = sh.inductance
        Bm[ii, j] = sh.amplifier_gain
    Bm[n + 0, 2] = 1.0  # friction force on the slider
    Bm[n + 1, 3] = 1.0  # friction torque on the pin
    return b, nb, n, A, E, Bm, (M, C, K)


@functools.lru_cache(maxsize=8)
def _build_model(spec: VirtualSpec, layout: SensorLayout, fs: float) -> _Model:
    b, nb, nm, A, E, B, MCK = _assemble(spec, layout)
    N = A.shape[0]
    h = spec.beam.thickness
    eye = np.eye(nb)
    C_raw = np.zeros((6, N))
    C_raw[0, 0] = 1.0
    C_raw[1, 0], C_raw[1, 1] = 1.0, layout.laser_spacing
    for j, d in enumerate(layout.gauge_positions):
        C_raw[2 + j, :nb] = -(h / 2) * np.array([b.curvature(eye[k], d) for k in range(nb)])
    C_raw[4, nm + 0] = 1.0
    C_raw[5, nm + 1] = 1.0

    lam, wl, vr = scipy.linalg.eig(A, E, left=True, right=True)
    keep = np.abs(lam) < 2 * np.pi * spec.modal_cutoff_hz
    lam, wl, vr = lam[keep], wl[:, keep], vr[:, keep]
    o = np.lexsort((np.imag(lam), np.abs(lam)))
    lam, wl, vr = lam[o], wl[:, o], vr[:, o]
    nrm = np.einsum("im,ij,jm->m", wl.conj(), E, vr)
    cond = np.linalg.norm(wl, axis=0) * np.linalg.norm(E @ vr, axis=0) / np.abs(nrm)
    if np.any(cond > 1e9) or np.any(np.real(lam) >= 0):
        raise ValueError(f"virtual rig: kept modes are ill-conditioned or unstable (condition {cond.max():.3g})")
    cm = C_raw @ vr  # (6, k)
    bm = (wl.conj().T @ B) / nrm[:, None]  # (k, 4)
    G0 = -C_raw @ np.linalg.solve(A, B)
    D = np.real(G0 - np.einsum("ik,kj->ij", cm, bm / (-lam)[:, None]))  # static correction

    # representatives: one member of each conjugate pair (factor 2), real modes (factor 1)
    is_real = np.abs(np.imag(lam)) <= 1e-9 * np.abs(lam)
    rep = is_real | (np.imag(lam) > 0)
    lam_r = np.where(is_real, np.real(lam), lam)[rep]
    fac_r = np.where(is_real[rep], 1.0, 2.0)

    filters = tuple(_filter(layout.channel(c)) for c in CHANNELS)
    lam_s = [lam_r]
    fac_s = [fac_r]
    Bz = [bm[rep]]
    Cy_m = np.zeros((4, lam_r.size), complex)
    Cy_f = []
    Dy = np.zeros((4, 4))
    for j, filt in enumerate(filters):
        Cy_m[j] = cm[j, rep] * _filter_response(filt, lam_r)
        if filt is None:
            Dy[j] = D[j]
            continue
        p, k = filt
        if np.min(np.abs(p[:, None] - lam[None, :])) < 1e-6 * np.abs(p).min():
            raise ValueError("virtual rig: a channel filter pole coincides with a structural mode")
        for i, pi in enumerate(p):
            if np.imag(pi) < -1e-9 * abs(pi):
                continue
            rho = k / np.prod(pi - np.delete(p, i))
            g = rho * (np.einsum("k,kj->j", cm[j] / (pi - lam), bm) + D[j])
            real_pole = abs(np.imag(pi)) <= 1e-9 * abs(pi)
            lam_s.append(np.array([np.real(pi) if real_pole else pi]))
            fac_s.append(np.array([1.0 if real_pole else 2.0]))
            Bz.append(g[None, :])
            Cy_f.append((j, len(Cy_f)))
    lam_all = np.concatenate(lam_s).astype(complex)
    fac_all = np.concatenate(fac_s)
    Bz = np.concatenate(Bz, axis=0)
    n_s = lam_all.size
    Cy = np.zeros((4, n_s), complex)
    Cy[:, : lam_r.size] = Cy_m
    for j, i in Cy_f:
        Cy[j, lam_r.size + i] = 1.0
    Cy = Cy * fac_all[None, :]
    Cv = np.zeros((2, n_s), complex)
    Cv[:, : lam_r.size] = cm[4:6, rep] * fac_r[None, :]
    Dv = D[4:6]

    dt = 1.0 / fs
    tau = spec.actuation_delay / dt
    d = int(math.floor(tau + 1e-9))
    alpha = max(0.0, tau - d)
    x = lam_all * dt
    a = np.exp(x)
    phi = lambda y: np.where(np.abs(y) > 0, np.expm1(y) / np.where(y == 0, 1, y), 1.0) * dt  # noqa: E731
    c_force = phi(x)
    # held input changes at t_n + alpha dt: u[n-d-1] on [t_n, t_n + alpha dt), u[n-d] after
    c_now = phi(x * (1 - alpha)) * (1 - alpha)
    c_prev = np.exp(x * (1 - alpha)) * phi(x * alpha) * alpha

    # modes of the rig without the beam (clamp on springs + shakers)
    _, _, _, A0, E0, _, _ = _assemble(spec, layout, with_beam=False)
    rig = scipy.linalg.eigvals(A0, E0)
    rig = rig[np.isfinite(rig)]
    rig = rig[np.argsort(np.abs(rig))]
    return _Model(
        beam=b, nb=nb, nm=nm, A=A, E=E, MCK=MCK, B=B, C_raw=C_raw, channel_filters=filters, kept=lam,
        lam=lam_all, fac=fac_all, Cy=Cy, Dy=Dy, Cv=Cv, Dv=Dv, Bz=Bz, Bz2=np.ascontiguousarray(Bz[:, :2]), a=a, c_now=c_now,
        c_prev=c_prev, c_force=c_force, delay_samples=d, delay_fraction=alpha, rig_modes=rig,
        max_condition=float(cond.max()),
    )


def _zoh(s, dt) -> np.ndarray:
    """Zero-order hold: ``(1 - e^{-s dt}) / (s dt)`` (1 at s = 0)."""
    s = np.asarray(s, dtype=complex)
    x = s * dt
    safe = np.where(x == 0, 1.0, x)
    return np.where(x == 0, 1.0, -np.expm1(-safe) / safe)


@dataclass(frozen=True)
class SteadyState:
    """Exact periodic steady state of the twin (noise-free; see
    :meth:`VirtualRig.steady_state`). Coefficients follow :mod:`hbtest.harmonics`, last axis =
    ``orders``. channels: name -> raw volts; displacement: (u [m], theta [rad]); force: (T [N],
    M [N m]) applied to the PS beam at x = 0; amplifier_input: the demand after the amplifier
    polynomial [V] (before the gain)."""

    frequency_hz: float
    orders: np.ndarray
    channels: dict
    displacement: np.ndarray
    force: np.ndarray
    amplifier_input: np.ndarray
    exact: bool


# ---------------------------------------------------------------------------------------
# the rig


class VirtualRig:
    """The virtual twin behind the :class:`hbtest.rig.Rig` protocol.

    ``VirtualRig(rig_config, seed=None, *, noise=True)``: ``rig_config`` from
    :func:`hbtest.config.load_rig` (kind "virtual"); ``seed`` overrides the file's; with
    ``noise=False`` the sensors are ideal (no white noise, no mains, no quantisation) —
    the filters, the delay and all physics stay.

    Protocol: :meth:`describe`, :meth:`set_demand`, :meth:`acquire`, :meth:`wait`,
    :attr:`elapsed_s` (simulated time), :meth:`safe_state`, :meth:`close`, context manager.
    Truth (exact, noise-free; for tests and reference data only): :meth:`steady_state`,
    :meth:`ps_dynamic_stiffness`, :meth:`emulated_interface_response`, :meth:`modes`,
    :meth:`rig_modes`, :meth:`frequency_response`, :meth:`reduction_error`; the FE beam as
    :attr:`beam` / :attr:`ps_substructure`.
    """

    def __init__(self, rig_config, seed: int | None = None, *, noise: bool = True):
        spec = rig_config.virtual
        if not isinstance(spec, VirtualSpec):
            raise TypeError("VirtualRig needs a rig configuration of kind 'virtual'")
        self.config = rig_config
        self.spec: VirtualSpec = spec
        self.sensors: SensorLayout = rig_config.sensors
        self.fs = float(rig_config.sample_rate_hz)
        self.dt = 1.0 / self.fs
        self.seed = int(spec.seed if seed is None else seed)
        self.noise = bool(noise)
        self._m = _build_model(spec, self.sensors, self.fs)
        self._rng = np.random.default_rng(self.seed)
        nh = len(spec.noise.mains_harmonics)
        self._mains_phase = self._rng.uniform(0.0, 2 * np.pi, size=(2, nh))
        chans = [self.sensors.channel(c) for c in CHANNELS]
        self._scale = np.array([c.scale for c in chans])
        self._offset = np.array([c.offset for c in chans])
        n_s = self._m.lam.size
        self._z = np.zeros(n_s, complex)
        self._hist = np.zeros((2, self._m.delay_samples + 1))  # u[n-d-1 .. n-1]
        self._force_prev = np.zeros(2)
        self._n = 0
        self._phase = 0.0
        self._freq: float | None = None
        self._V = np.zeros((2, 1), complex)
        self._orders = np.array([1])
        self._closed = False
        self._seg = None  # (X, rho, n_start): the input as a sum of exponentials
        self._uk_orders = np.array([1])
        self._uk = np.zeros((2, 1), complex)
        self._force_sample_path = False  # testing hook: run the per-sample path without friction

    # -- protocol ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"virtual rig {self.config.identity!r}"

    def describe(self) -> RigDescription:
        m = self._m
        kept = m.kept[np.imag(m.kept) >= 0]
        details = dict(
            seed=self.seed,
            noise=self.noise,
            source=self.config.source.path,
            sha256=self.config.source.sha256,
            actuation_delay_s=self.spec.actuation_delay,
            modal_cutoff_hz=self.spec.modal_cutoff_hz,
            fe_nodes=int(m.beam.x_nodes.size),
            modal_states=int(m.lam.size),
            modal_condition=m.max_condition,
            modes_hz=[float(abs(x) / (2 * np.pi)) for x in kept],
            modes_damping=[float(-np.real(x) / abs(x)) for x in kept],
            rig_modes_hz=[float(abs(x) / (2 * np.pi)) for x in m.rig_modes if np.imag(x) > 0],
            friction=self.spec.friction.active,
            nonlinear_amplifier=any(s.nonlinear for s in self.spec.shakers),
        )
        return RigDescription(
            identity=self.config.identity,
            kind="virtual",
            actuators=tuple(self.config.actuators),
            sample_rate_hz=self.fs,
            voltage_limit_v=self.config.voltage_limit_v,
            sensors=self.sensors,
            details=details,
            input_range_v=self.spec.noise.adc_range_v,
        )

    @property
    def elapsed_s(self) -> float:
        return self._n * self.dt

    def _check_open(self):
        if self._closed:
            raise InstrumentError(f"{self.name} is closed")

    def set_demand(self, frequency_hz: float, voltage, orders, ramp_periods: float = 2.0) -> None:
        """Ramp (raised cosine over ``ramp_periods`` periods of the new frequency; frequency and
        coefficients together, generator phase continuous) to the new demand. Rig time passes."""
        self._check_open()
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        V = np.asarray(voltage, dtype=complex)
        if V.ndim == 1:
            V = V[:, None]
        if V.shape != (2, orders.size):
            raise ValueError(f"voltage must have shape (2, {orders.size}) (actuators x orders), got {V.shape}")
        if orders.size == 0 or np.any(orders < 0) or len(set(orders.tolist())) != orders.size:
            raise ValueError(f"harmonic orders must be distinct non-negative integers, got {orders.tolist()}")
        f = float(frequency_hz)
        if not (f > 0 and math.isfinite(f)):
            raise ValueError(f"frequency must be positive, got {frequency_hz!r}")
        if orders.max() * f >= self.fs / 2:
            raise ValueError(f"harmonic {orders.max()} of {f:g} Hz lies above the Nyquist frequency {self.fs / 2:g} Hz")
        if not ramp_periods >= 0:
            raise ValueError("ramp_periods must be non-negative")
        if not np.all(np.isfinite(V)):
            raise ValueError("voltage must be finite")
        V = V.copy()
        V[:, orders == 0] = np.real(V[:, orders == 0])
        check_voltage(V, orders, self.config.voltage_limit_v, self.name)
        f_old = self._freq if self._freq is not None else f
        allo = np.union1d(self._orders, orders)
        Vo = np.zeros((2, allo.size), complex)
        Vn = np.zeros((2, allo.size), complex)
        Vo[:, np.searchsorted(allo, self._orders)] = self._V
        Vn[:, np.searchsorted(allo, orders)] = V
        n_ramp = int(round(ramp_periods / f * self.fs))
        if n_ramp > 0:
            if f_old == f and not self._nonlinear and not self._per_sample:
                # constant frequency, linear amplifier: the raised-cosine ramp is a sum of
                # exponentials in n, V(n) = (Vo+Vn)/2 - (Vn-Vo)/4 (e^{i pi n/N} + e^{-i pi n/N})
                om = 2 * np.pi * f * self.dt
                rot = np.exp(1j * allo * self._phase)
                mid, dif = 0.5 * (Vo + Vn) * rot, -0.25 * (Vn - Vo) * rot
                X = np.concatenate([mid, dif, dif], axis=1)
                rho = np.concatenate([1j * allo * om, 1j * (allo * om + np.pi / n_ramp), 1j * (allo * om - np.pi / n_ramp)])
                self._begin_segment(X, rho)
                self._advance(n_ramp, None)
                self._phase = float((self._phase + om * n_ramp) % (2 * np.pi))
            else:
                self._ramp_by_samples(f_old, f, Vo, Vn, allo, n_ramp)
        self._freq, self._V, self._orders = f, V, orders
        self._set_input_harmonics()
        om = 2 * np.pi * f * self.dt
        self._begin_segment(self._uk * np.exp(1j * self._uk_orders * self._phase), 1j * self._uk_orders * om)

    def _ramp_by_samples(self, f_old, f, Vo, Vn, allo, n_ramp) -> None:
        """A ramp that changes the frequency (or passes the amplifier polynomial): demand
        generated sample by sample, phase accumulated, simulated with the sample recurrence."""
        self._seg = None
        done = 0
        while done < n_ramp:
            n = min(_MAX_CHUNK, n_ramp - done)
            w = 0.5 * (1 - np.cos(np.pi * (done + np.arange(n)) / n_ramp))
            fk = f_old + w * (f - f_old)
            ph = self._phase + 2 * np.pi * self.dt * np.concatenate([[0.0], np.cumsum(fk[:-1])])
            coef = Vo[:, :, None] + w[None, None, :] * (Vn - Vo)[:, :, None]
            v = np.real(np.einsum("aon,on->an", coef, np.exp(1j * np.multiply.outer(allo, ph))))
            self._run(self._amplifier_input(v), outputs=False)
            self._phase = float((ph[-1] + 2 * np.pi * self.dt * fk[-1]) % (2 * np.pi))
            done += n

    def _set_input_harmonics(self) -> None:
        """Harmonics of the amplifier input (after the polynomial) of the constant demand."""
        if self._nonlinear:
            deg = 3 if any(s.cubic != 0 for s in self.spec.shakers) else 2
            ks = np.arange(deg * int(self._orders.max()) + 1)
        else:
            ks = self._orders
        self._uk_orders = ks
        self._uk = self._input_harmonics(self._freq, self._V, self._orders, ks)

    def _begin_segment(self, X: np.ndarray, rho: np.ndarray) -> None:
        """From the next sample on, the amplifier input is ``u[n] = Re sum_e X_e
        exp(rho_e (n - n_start))`` (X: (2, n_e), rho purely imaginary)."""
        self._seg = (np.asarray(X, complex), np.asarray(rho, complex), self._n)

    def _segment_input(self, n_from: int, N: int) -> np.ndarray:
        X, rho, n_s = self._seg
        return np.real(X @ np.exp(np.multiply.outer(rho, n_from - n_s + np.arange(N))))

    def _advance(self, N: int, gain: np.ndarray | None):
        """Advance ``N`` samples of the current segment; channels (4, N) in physical units
        times ``gain`` (None: no outputs). The first ``d + 1`` samples of a segment (delay line
        still holding the previous input) and the friction path use the sample recurrence;
        the rest is evaluated in closed form — the same exact discrete solution."""
        y = np.empty((4, N)) if gain is not None else None
        done = 0
        d1 = self._m.delay_samples + 1
        while done < N:
            since = self._n - self._seg[2]
            if self._per_sample or since < d1:
                m = min(_MAX_CHUNK, N - done) if self._per_sample else min(d1 - since, N - done)
                part = self._run(self._segment_input(self._n, m), gain is not None)
                if gain is not None:
                    part *= gain[:, None]
            else:
                m = min(_MAX_CHUNK, N - done)
                part = self._run_closed_form(m, gain)
            if gain is not None:
                y[:, done : done + m] = part
            done += m
        return y

    def _constant(self, n: int, gain: np.ndarray | None):
        """Simulate ``n`` samples of the current (constant) demand; returns (t, y) with ``y``
        (4, n) the channels in physical units times ``gain``, or None without outputs."""
        f = self._freq
        t0 = self._phase / (2 * np.pi * f)
        y = self._advance(n, gain)
        self._phase = float((self._phase + 2 * np.pi * f * self.dt * n) % (2 * np.pi))
        return t0 + np.arange(n) * self.dt, y

    def wait(self, n_periods: float) -> None:
        self._check_open()
        self._require_demand()
        n = int(round(float(n_periods) * self.fs / self._freq))
        if n > 0:
            self._constant(n, None)

    def acquire(self, n_periods: int) -> Acquisition:
        self._check_open()
        self._require_demand()
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        n_periods = int(n_periods)
        f = self._freq
        n = int(round(n_periods * self.fs / f))
        n0 = self._n
        q = self._quantum()
        t, y = self._constant(n, 1.0 / (self._scale * q))
        volts = self._to_volts(y, n0, q)
        data = {c: volts[i] for i, c in enumerate(CHANNELS)}
        return Acquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=self.fs, n_periods=n_periods, elapsed_s=self.elapsed_s)

    def safe_state(self, ramp_periods: float = 2.0) -> None:
        """Ramp all outputs to zero (at the current frequency)."""
        self._check_open()
        if self._freq is None or not np.any(self._V != 0):
            return
        self.set_demand(self._freq, np.zeros_like(self._V), self._orders, ramp_periods)

    def close(self) -> None:
        if self._closed:
            return
        self.safe_state()
        self._closed = True

    def __enter__(self) -> "VirtualRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require_demand(self):
        if self._freq is None:
            raise RuntimeError(f"{self.name}: set_demand() first (no frequency yet)")

    # -- simulation core ----------------------------------------------------------------

    @property
    def _nonlinear(self) -> bool:
        return any(s.nonlinear for s in self.spec.shakers)

    @property
    def _per_sample(self) -> bool:
        return self.spec.friction.active or self._force_sample_path

    def _amplifier_input(self, v: np.ndarray) -> np.ndarray:
        out = np.array(v, dtype=float, copy=True)
        for j, sh in enumerate(self.spec.shakers):
            if sh.nonlinear:
                x = v[j]
                out[j] = x + sh.quadratic * x * x + sh.cubic * x * x * x
        return out

    def _run(self, u: np.ndarray, outputs: bool):
        """Advance by the amplifier-input samples ``u`` (2, N) [V] with the sample recurrence
        (one :func:`scipy.signal.lfilter` per modal state, or a loop over samples for short
        runs); physical channel values (4, N) at the sample instants when ``outputs``."""
        m = self._m
        N = u.shape[1]
        d = m.delay_samples
        ext = np.concatenate([self._hist, u], axis=1)  # index k <-> u[n0 + k - d - 1]
        P = m.Bz2[:, 0:1] * ext[0, : N + 1] + m.Bz2[:, 1:2] * ext[1, : N + 1]
        self._hist = ext[:, -(d + 1) :].copy()
        self._n += N
        held = ext[:, :N]  # input held just before t_n
        if self._per_sample:
            beta = m.c_now[:, None] * P[:, 1:] + m.c_prev[:, None] * P[:, :-1]
            return self._run_per_sample(beta, held, outputs)
        a, cn, cp = m.a, m.c_now, m.c_prev
        Z = np.empty((m.lam.size, N), complex) if outputs else None
        z = self._z
        if N <= 64:
            for k in range(N):
                if outputs:
                    Z[:, k] = z
                z = a * z + cn * P[:, k + 1] + cp * P[:, k]
            self._z = z
        else:
            for i in range(m.lam.size):
                # z[n+1] = a z[n] + c_now P[n+1] + c_prev P[n]
                y, _ = scipy.signal.lfilter([cn[i], cp[i]], [1.0, -a[i]], P[i, 1:], zi=[cp[i] * P[i, 0] + a[i] * z[i]])
                if outputs:
                    Z[i, 0] = z[i]
                    Z[i, 1:] = y[:-1]
                z[i] = y[-1]
        if not outputs:
            return None
        return np.real(np.einsum("cm,mn->cn", m.Cy, Z)) + np.einsum("cj,jn->cn", m.Dy[:, :2], held)

    def _run_closed_form(self, N: int, gain: np.ndarray | None):
        """Advance ``N`` samples of a segment whose delay line is already filled with it. Per
        mode the recurrence ``z[n+1] = a z[n] + c_now b u[n-d] + c_prev b u[n-d-1]`` with
        ``u[n] = Re sum_e X_e e^{rho_e n}`` has the particular solution ``z_p[n] = sum_e
        (G(X_e, rho_e) e^{rho_e n} + G(X_e*, rho_e*) e^{rho_e* n}) / 2``, ``G(X, r) = b X
        (c_now e^{-r d} + c_prev e^{-r (d+1)}) / (e^r - a)``; the rest decays as ``a^n``.
        Outputs are sums of exponentials evaluated block-wise (cost per sample independent of
        the number of modes); without outputs only the end state is computed."""
        m = self._m
        d = m.delay_samples
        X0, rho, n_s = self._seg
        j0 = self._n - n_s
        X = X0 * np.exp(rho * j0)[None, :]  # the expression relative to the first sample here
        a, cn, cp = m.a[:, None], m.c_now[:, None], m.c_prev[:, None]

        def G(Xe, r):
            return (m.Bz2 @ Xe) * (cn * np.exp(-r * d) + cp * np.exp(-r * (d + 1))) / (np.exp(r) - a)

        Gp = 0.5 * G(X, rho)
        Gm = 0.5 * G(np.conj(X), np.conj(rho))

        def zp(j):
            e = np.exp(rho * j)
            return Gp @ e + Gm @ np.conj(e)

        c = self._z - zp(0)
        y = None
        if gain is not None:
            # y = Re sum_e W_e exp(r_e j): forced part and modal transients, each transient
            # kept while above 1e-9 V on some channel (block granularity). With j = L b + i:
            # y_c[b, i] = sum_e Re(W_ce O_eb) Re(I_ei) - Im(W_ce O_eb) Im(I_ei),
            # O_eb = exp(r_e L b), I_ei = exp(r_e i): one small real matrix product.
            Y = np.einsum("cm,mk->ck", m.Cy, Gp) + np.conj(np.einsum("cm,mk->ck", m.Cy, Gm))
            Y += np.einsum("cj,jk->ck", m.Dy[:, :2], X) * np.exp(-rho * (d + 1))
            W = m.Cy * c[None, :]
            thr = 1e-9 * self._scale
            with np.errstate(under="ignore", divide="ignore"):
                ratio = np.max(np.abs(W) / thr[:, None], axis=0)
                sig = -np.real(m.lam) * self.dt
                n_act = np.where(ratio > 1, np.ceil(np.log(np.maximum(ratio, 1.0)) / sig), 0)
            act = np.flatnonzero(n_act > 0)
            rates = np.concatenate([rho, m.lam[act] * self.dt])
            coef = np.concatenate([Y, W[:, act]], axis=1) * gain[:, None]
            L = 256
            nB = -(-N // L)
            with np.errstate(under="ignore"):
                inner = np.exp(np.multiply.outer(rates, np.arange(L)))  # (n_e, L)
                outer = np.exp(np.multiply.outer(rates, L * np.arange(nB)))  # (n_e, nB)
            nblk = np.concatenate([np.full(rho.size, nB), np.minimum(nB, -(-n_act[act] // L)).astype(int)])
            outer[np.arange(nB)[None, :] >= nblk[:, None]] = 0.0
            WO = coef[:, :, None] * outer[None, :, :]  # (4, n_e, nB)
            A = np.concatenate([WO.real, -WO.imag], axis=1).transpose(0, 2, 1).reshape(4 * nB, 2 * rates.size)
            B = np.concatenate([inner.real, inner.imag], axis=0)
            y = (A @ B).reshape(4, nB * L)[:, :N]
        with np.errstate(under="ignore"):
            self._z = zp(N) + c * np.exp(m.lam * self.dt * N)
        self._hist = np.real(X @ np.exp(np.multiply.outer(rho, np.arange(N - d - 1, N))))
        self._n += N
        return y

    def _run_per_sample(self, beta, held, outputs):
        """Slow path with friction: explicit regularised Coulomb force, held over one sample."""
        m = self._m
        fr = self.spec.friction
        N = beta.shape[1]
        a, cf = m.a, m.c_force
        Bf = m.Bz[:, 2:4] * cf[:, None]
        Cv, Dv = m.Cv, m.Dv
        z = self._z.copy()
        fprev = self._force_prev.copy()
        Z = np.empty((m.lam.size, N), complex) if outputs else None
        Fh = np.empty((2, N)) if outputs else None
        tanh = math.tanh
        for k in range(N):
            if outputs:
                Z[:, k] = z
                Fh[:, k] = fprev
            vel = np.real(Cv @ z) + Dv[:, :2] @ held[:, k] + Dv[:, 2:] @ fprev
            F0 = -fr.slider_force * tanh(vel[0] / fr.slider_velocity) if fr.slider_force > 0 else 0.0
            F1 = -fr.pin_torque * tanh(vel[1] / fr.pin_velocity) if fr.pin_torque > 0 else 0.0
            fprev = np.array([F0, F1])
            z = a * z + beta[:, k] + Bf @ fprev
        self._z[:] = z
        self._force_prev = fprev
        if not outputs:
            return None
        return np.real(np.einsum("cm,mn->cn", m.Cy, Z)) + np.einsum("cj,jn->cn", m.Dy[:, :2], held) + np.einsum("cj,jn->cn", m.Dy[:, 2:], Fh)

    def _quantum(self) -> float:
        """Output unit of the simulation for an acquisition: one ADC step [V] (1 V when the
        converter is ideal or the sensors are ideal)."""
        nz = self.spec.noise
        if self.noise and nz.adc_bits > 0:
            return 2 * nz.adc_range_v / 2**nz.adc_bits
        return 1.0

    def _to_volts(self, y: np.ndarray, n0: int, q: float) -> np.ndarray:
        """Channels in ADC steps (``physical / (scale q)``) -> volts: offset, mains, white
        noise, quantisation and clipping (in place)."""
        nz = self.spec.noise
        N = y.shape[1]
        if np.any(self._offset != 0):
            y -= (self._offset / (self._scale * q))[:, None]
        if self.noise and nz.mains_amplitude > 0:
            y[2:4] += self._mains(n0, N, 1.0 / (self._scale[2:4] * q))
        if self.noise and (nz.laser_rms > 0 or nz.gauge_rms > 0):
            sig = np.array([nz.laser_rms, nz.laser_rms, nz.gauge_rms, nz.gauge_rms]) / (self._scale * q)
            noise = _GAUSS.take(self._rng.integers(0, _GAUSS.size, size=(4, N), dtype=np.uint16))
            noise *= sig[:, None]
            y += noise
        if self.noise and nz.adc_bits > 0:
            np.rint(y, out=y)
            lim = nz.adc_range_v / q
            np.clip(y, -lim, lim, out=y)
            y *= q
        return y

    def _mains(self, n0: int, N: int, gain) -> np.ndarray:
        """Mains interference on the gauge channels (strain after the gauge filter, times
        ``gain`` per channel) for the samples n0 .. n0+N-1 of the rig clock."""
        nz = self.spec.noise
        gain = np.asarray(gain, dtype=float)

        def signal(n):  # n: sample indices (int array)
            base = (2 * np.pi * nz.mains_hz * self.dt * n) % (2 * np.pi)
            acc = np.zeros((2, n.size), complex)
            w = np.exp(1j * base)
            wh = np.ones(n.size, complex)
            for h, rel in enumerate(nz.mains_harmonics, start=1):
                wh = wh * w
                if rel == 0:
                    continue
                for j in (0, 1):
                    g = complex(_filter_response(self._m.channel_filters[2 + j], 2j * np.pi * h * nz.mains_hz))
                    acc[j] += gain[j] * nz.mains_amplitude * rel * g * np.exp(1j * self._mains_phase[j, h - 1]) * wh
            return np.real(acc)

        period = self.fs / nz.mains_hz
        if abs(period - round(period)) < 1e-9 and abs(self.fs - round(self.fs)) < 1e-9:
            # an integer number of samples per mains period: a precomputed periodic table
            P = int(round(period))
            key = (P, tuple(gain))
            if getattr(self, "_mains_key", None) != key or self._mains_table.shape[1] < N + P:
                reps = -(-(max(N, _MAX_CHUNK) + P) // P)
                self._mains_table = np.tile(signal(np.arange(P)), reps)
                self._mains_key = key
            o = n0 % P
            return self._mains_table[:, o : o + N]
        return signal(n0 + np.arange(N))

    # -- the truth ----------------------------------------------------------------------

    @property
    def beam(self) -> Beam:
        """The twin's PS beam (FE model, node 0 at the interface)."""
        return self._m.beam

    @property
    def ps_substructure(self) -> Substructure:
        """The PS beam as a substructure with interface (u0, theta0)."""
        return Substructure(self._m.beam, ("u0", "theta0"))

    def ps_dynamic_stiffness(self, s) -> np.ndarray:
        """``D_P(s)``: the twin's PS beam condensed on its interface (u0, theta0), shape
        (*s.shape, 2, 2): ``D_P [u, theta] = [T, M]``."""
        return self.ps_substructure.dynamic_stiffness(s)

    def modes(self) -> np.ndarray:
        """Eigenvalues [rad/s] of the simulated structural/electrical modes (one per conjugate
        pair, Im >= 0), sorted by modulus; free decays follow ``exp(lambda t)``."""
        k = self._m.kept
        return k[np.imag(k) >= 0]

    def rig_modes(self) -> np.ndarray:
        """Eigenvalues [rad/s] of the rig alone (clamp on its springs with the shakers, beam
        removed), Im >= 0."""
        r = self._m.rig_modes
        return r[np.imag(r) >= 0]

    def _mechanical_response(self, s: complex, u: np.ndarray) -> np.ndarray:
        """Full-model mechanical DOFs ``q`` (beam, armatures) for amplifier inputs ``u`` (2, ...)
        at the Laplace variable ``s``: the coil currents eliminated,
        ``i = (g u - K_f s z) / (s L + R)``, so
        ``(s^2 M + s C + K + diag(K_f^2 s / (s L + R))) q = K_f g u / (s L + R)`` on the armatures."""
        m = self._m
        M, C, K = m.MCK
        D = s * s * M + s * C + K
        rhs = np.zeros((m.nm,) + np.shape(u)[1:], complex)
        for j, sh in enumerate(self.spec.shakers):
            z = m.nb + j
            Z = s * sh.inductance + sh.resistance
            D[z, z] += sh.force_constant**2 * s / Z
            rhs[z] = sh.force_constant * sh.amplifier_gain * np.asarray(u)[j] / Z
        return np.linalg.solve(D, rhs)

    def _input_harmonics(self, frequency_hz, voltage, orders, out_orders) -> np.ndarray:
        """Harmonic coefficients (2, n_out) of the amplifier-polynomial output of the demand."""
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        V = np.asarray(voltage, dtype=complex).reshape(2, orders.size)
        U = np.zeros((2, out_orders.size), complex)
        if not any(s.nonlinear for s in self.spec.shakers):
            for i, k in enumerate(out_orders):
                hit = np.flatnonzero(orders == k)
                if hit.size:
                    U[:, i] = V[:, hit[0]]
            U[:, out_orders == 0] = np.real(U[:, out_orders == 0])
            return U
        kmax = int(max(orders.max(), out_orders.max()))
        M = 16 * (3 * kmax + 1)
        ph = 2 * np.pi * np.arange(M) / M
        v = np.real(V @ np.exp(1j * np.multiply.outer(orders, ph)))
        p = self._amplifier_input(v)
        X = np.fft.fft(p, axis=1) / M
        for i, k in enumerate(out_orders):
            U[:, i] = np.real(X[:, 0]) if k == 0 else 2 * X[:, k]
        return U

    def steady_state(self, frequency_hz: float, voltage, orders, output_orders=None) -> SteadyState:
        """Exact periodic steady state for the demand ``voltage`` (2, n_orders) at
        ``frequency_hz`` — noise-free raw channel volts (filters, delay, zero-order hold and
        amplifier polynomial included) and the exact PS interface (u, theta, T, M) with
        ``T, M`` the generalised forces applied to the PS beam at x = 0 (interface rows of
        ``D_beam(s) q``). Computed from the *full* FE model (no modal truncation) in the
        frequency domain: per harmonic ``x = (sE - A)^-1 B U_k ZOH(s) e^{-s tau}``; the
        aliases of the held input above Nyquist are neglected (below 1e-7 relative here).
        ``output_orders`` (default ``orders``) selects the harmonics returned. With friction
        the result is the friction-free response (``exact=False``)."""
        m = self._m
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        out = orders if output_orders is None else np.atleast_1d(np.asarray(output_orders, dtype=int))
        U = self._input_harmonics(frequency_hz, voltage, orders, out)
        w = 2 * np.pi * float(frequency_hz)
        ch = np.zeros((4, out.size), complex)
        disp = np.zeros((2, out.size), complex)
        force = np.zeros((2, out.size), complex)
        b = m.beam
        for i, k in enumerate(out):
            s = 1j * k * w
            gain = complex(_zoh(s, self.dt)) * np.exp(-s * self.spec.actuation_delay)
            x = self._mechanical_response(s, U[:, i]) * gain
            y = m.C_raw[:4, : m.nm] @ x
            for j in range(4):
                y[j] *= complex(_filter_response(m.channel_filters[j], s))
            if k == 0:
                y = np.real(y) - self._offset
            ch[:, i] = y / self._scale
            q = x[: m.nb]
            disp[:, i] = q[:2]
            force[:, i] = (b.dynamic_stiffness(s) @ q)[:2]
            if k == 0:
                disp[:, i], force[:, i], ch[:, i] = np.real(disp[:, i]), np.real(force[:, i]), np.real(ch[:, i])
        return SteadyState(
            frequency_hz=float(frequency_hz),
            orders=out,
            channels={c: ch[j] for j, c in enumerate(CHANNELS)},
            displacement=disp,
            force=force,
            amplifier_input=U,
            exact=not self.spec.friction.active,
        )

    def emulated_interface_response(self, ns: Substructure, force_vector, frequency_hz: float, orders) -> np.ndarray:
        """Exact interface displacement (2, n_orders) of the emulated (hybrid) structure:
        the numerical substructure ``ns`` joined to the twin's PS beam, forced by
        ``force_vector`` (on all NS DOFs, [N]) at the fundamental only:
        ``U_k = (D_N + D_P)^-1 F_N,cond`` at ``s = i k Omega`` (zero for k != 1)."""
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        out = np.zeros((2, orders.size), complex)
        for i, k in enumerate(orders):
            if k != 1:
                continue
            s = 2j * np.pi * float(frequency_hz)
            Fc = ns.condensed_force(np.asarray(force_vector, dtype=complex), s)
            out[:, i] = np.linalg.solve(ns.dynamic_stiffness(s) + self.ps_dynamic_stiffness(s), Fc)
        return out

    def frequency_response(self, frequency_hz, reduced: bool = False) -> np.ndarray:
        """Continuous-time transfer (4 channels [physical units], 2 actuators [per V of
        amplifier input]) at ``frequency_hz`` (scalar), filters included, without hold and
        delay: full model, or the simulated modal model when ``reduced``."""
        m = self._m
        s = 2j * np.pi * float(frequency_hz)
        if not reduced:
            G = m.C_raw[:4, : m.nm] @ self._mechanical_response(s, np.eye(2))
            return G * np.array([_filter_response(f, s) for f in m.channel_filters])[:, None]
        # the diagonal model: sum over all modal states (representatives expanded)
        G = np.zeros((4, 2), complex)
        for i, lam in enumerate(m.lam):
            term = np.outer(m.Cy[:, i] / m.fac[i], m.Bz[i, :2]) / (s - lam)
            G += term if m.fac[i] == 1.0 else term + np.conj(np.outer(m.Cy[:, i] / m.fac[i], m.Bz[i, :2])) / (s - np.conj(lam))
        return G + m.Dy[:, :2]

    def reduction_error(self, frequencies_hz) -> float:
        """Largest relative error (per channel, against the channel's largest response over
        both actuators) of the simulated modal model against the full model."""
        err = 0.0
        for f in np.atleast_1d(frequencies_hz):
            Gf = self.frequency_response(f)
            Gr = self.frequency_response(f, reduced=True)
            err = max(err, float(np.max(np.abs(Gr - Gf).max(axis=1) / np.abs(Gf).max(axis=1))))
        return err

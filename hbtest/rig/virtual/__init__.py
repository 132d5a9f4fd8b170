"""The virtual twin of the hybrid-test rig (docs/method.md §5): a physics model behind the :class:`Rig`
protocol, so the solver sees only sensor voltages — and an exact reference, so accuracy is
measured, not assumed.

Physics (SI units; x along the beam from the pin axis, ``u`` up, ``theta`` counter-clockwise):

- **PS**: the tip beam of the rig file's ``[physical]`` table (Euler–Bernoulli FE,
  :func:`hbtest.method.structures.beam`, consistent mass, ``C = zeta_M M + zeta_K K``, free tip),
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
- **Nonlinear elements** (optional, ``[[virtual.nonlinear]]``: the element tables of a sweep
  file's ``[[numerical.nonlinear]]``, one parser, :mod:`hbtest.numerical.table`): cubic springs,
  regularised friction, contact stops at nodes of the PS beam (x from the clamp), grounded or
  between two nodes. Simulated in the time domain: the modal state is split into the actuation
  part (exact recurrence) and the element part driven by the element forces, stepped
  explicitly ``nonlinear_substeps`` times per sample with first-order hold of the force
  (second order; free flight of a contact off its stop in closed form) — :mod:`.engine`.
  Not together with friction or channel skew (a ConfigError). :meth:`VirtualRig.steady_state`
  is then the linear part's response (``exact=False``); the exact reference of the joined
  nonlinear structure is :mod:`.emulated` (harmonic balance).
- **Shakers** (one table per actuator, in the order of ``[rig].actuators``): voltage amplifier
  (gain g, optional static polynomial ``v_amp = g (v + a2 v^2 + a3 v^3)``: harmonic
  generation), coil ``L di/dt + R i + K_f z' = v_amp``, armature (moving mass, suspension
  spring/dashpot to ground) pushed by ``K_f i``, stinger (axial spring/dashpot) from the
  armature to the clamp point at ``position_mm`` along x: the first at the pin axis (vertical),
  the second at a lever arm (rotation, through the moment of its stinger force).
- **Sensors** (the layout of ``[sensors]`` is taken as the true geometry unless
  ``[virtual.true_sensors]`` gives TRUE per-channel parameters that differ from the nominal
  ones — ``scale_factor``, ``position_mm``, ``lowpass_hz``, ``skew_us``, see
  :func:`.spec.parse_virtual`: the twin simulates the true ones while ``describe().sensors``,
  what the point loop reduces with, stays the nominal (or calibrated) layout; the true mains
  frequency is ``[virtual.mains].frequency_hz``, the assumed one ``[sensors].mains_hz``;
  every declared channel is simulated, in the layout's order): a laser at lever position ``p`` reads
  ``u + p theta`` (the published ``l1 = u``, ``l2 = u + d_l theta``); a gauge at ``d`` reads
  ``eps = -(h/2) u''(d)`` of the twin's own beam (never the interface forces); the beam has a
  node at every gauge. Each channel with ``lowpass_hz > 0`` passes an analogue
  Butterworth low-pass of its order (part of the continuous model: exact, state carried
  across calls). Mains interference (``mains_hz`` and multiples, amplitudes relative to the
  fundamental, phases drawn from the seed) is picked up at the gauge bridge and passes the
  gauge filter; white noise (laser, gauge) and ADC quantisation/clipping are added at the
  converter. Raw channel values are volts: ``volts = (physical - offset) / scale``.
- **Actuation delay** ``tau``: a delay of the DAC output. ``tau = (d + alpha) dt`` is applied
  exactly, fractional part included (the held input changes at ``t_n + tau``); no rounding.
- **Channel skew** (``skew_us`` of a channel, >= 0): the channel's sample ``n`` is its signal
  at ``t_n - skew`` — computed exactly from the modal state ``q + 1`` samples earlier and the
  held inputs over the partial step (``skew = (q + beta) dt``), on both simulation paths. Not
  together with friction (a ConfigError).
- **Actuators**: exactly two shakers (``[rig].actuators`` must name two, one
  ``[[virtual.shakers]]`` table each; other rig kinds take any number).

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

Files, one job each: ``spec`` (the ``[virtual]`` table: ShakerSpec ... VirtualSpec,
parse_virtual), ``model`` (assembly of beam + clamp + shakers + coils + filters, first-order
form, modal diagonalisation, discretisation), ``engine`` (time integration: closed-form and
per-sample paths; noise table, mains, ADC), ``rig`` (VirtualRig: the Rig protocol),
``reference`` (the exact truths), ``emulated`` (the exact reference of a nonlinear emulated
structure, and the one the sweep stores: :func:`sweep_reference`). This package registers the rig kind ``virtual``
(:mod:`hbtest.rig.registry`): it owns the rig file's ``[virtual]`` table and needs its
``[physical]`` beam.
"""

from __future__ import annotations

from ..registry import RigKind, register
from .emulated import REFERENCE_MAX_ORDER, SweepReference, emulated_structure, joined_force_vector, sweep_reference
from .reference import SteadyState
from .rig import Demand, VirtualRig, open_virtual
from .spec import (
    CHANNELS,
    NONLINEAR_SUBSTEPS,
    ClampSpec,
    FrictionSpec,
    NoiseSpec,
    ShakerSpec,
    VirtualSpec,
    parse_virtual,
    parse_virtual_kind,
)

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
    "Demand",
    "parse_virtual_kind",
    "open_virtual",
    "KIND",
    "REFERENCE_MAX_ORDER",
    "SweepReference",
    "emulated_structure",
    "joined_force_vector",
    "sweep_reference",
    "NONLINEAR_SUBSTEPS",
]

KIND = register(RigKind("virtual", ("virtual",), parse_virtual_kind, open_virtual))

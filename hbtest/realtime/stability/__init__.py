"""Delay stability ("substructurability") of real-time hybrid tests (docs/method.md §4).

Characteristic roots of linear retarded and neutral delay equations, the critical delay of a
hybrid test, stability maps, and the stability of a delay-compensated loop.

Conventions
-----------
- SI units: delays [s], characteristic roots ``s = sigma + i omega`` [rad/s], frequencies
  reported in Hz (``Im s / 2 pi``), masses [kg], stiffnesses [N/m or N m/rad], damping
  [N s/m].  ``Re s > 0`` is a growing solution ``exp(s t)``.
- A delay equation (:class:`DelayEquation`) is

      sum_k  M_k u''(t - tau_k) + C_k u'(t - tau_k) + K_k u(t - tau_k) = 0,

  with characteristic matrix ``T(s) = sum_k (s^2 M_k + s C_k + K_k) exp(-s tau_k)``; its
  roots are the zeros of the *entire* function ``det T(s)``. It is *retarded* when only the
  undelayed term carries the highest derivative and *neutral* when a delayed term does too
  (a delayed mass, as when a continuous structure is split: the physical substructure's
  inertia force is fed back through the actuator delay). A first-order (state-space) system
  is the special case with all ``M_k = 0``.
- Actuator cut-off: actuators do not follow commands above a cut-off frequency ``f_c``
  (default 500 Hz), so only roots with ``|Im s| < 2 pi f_c`` matter. Neutral equations have
  chains of roots going to infinity, possibly in the right half-plane for every delay; those
  above the cut-off are ignored. A system is *unstable* at a delay when a root with
  ``Re s > 0`` and ``|Im s| < 2 pi f_c`` exists (the "unstable box").
- Critical delay: the smallest delay at which the unstable box holds a root. Roots enter the
  box either through the imaginary axis (a Hopf crossing, ``s = i omega``) or through the
  cut-off line (``s = sigma + i 2 pi f_c``, ``sigma > 0``), which is how neutral root chains
  with positive real part arrive.

Classical real-time hybrid test with one actuator delay (:func:`hybrid_system`): the
numerical substructure (NS) computes the interface displacement ``u_i(t)``; the actuator
imposes ``x_i(t) = u_i(t - tau)`` on the physical substructure (PS); the PS force measured
at the interface is fed back to the NS. The characteristic function is
``det(D_N(s) + D_P(s) exp(-s tau))`` (condensed, rational) or, without its poles, the
determinant of the block matrix derived in :func:`hybrid_system`.

Modules (one job each):

- :mod:`.equation` — :class:`DelayTerm`, :class:`DelayEquation` (spectral roots, Newton
  polishing, Rouché bound), :func:`count_roots` (argument principle);
- :mod:`.crossings` — :class:`Crossing`, :class:`CriticalDelay`, the crossing scan on the
  boundary of the unstable box;
- :mod:`.systems` — :class:`SingleDelaySystem` (one delay: critical delay, unstable count);
- :mod:`.builders` — :func:`hybrid_system`, :func:`chain_hybrid`, :func:`beam_hybrid`,
  :func:`craig_bampton`;
- :mod:`.sdof` — the split single oscillator and its closed forms;
- :mod:`.prediction` — polynomial forward predictor: weights, equation, stable horizons;
- :mod:`.maps` — root loci and stability maps over delay and parameters;
- :mod:`.integrate` — method-of-steps RK4 time integration (independent check);
- :mod:`.plots` — matplotlib drawings of loci and maps on a given Axes.
"""

from .builders import (
    BEAM_SECTION_KEYS,
    MAX_BEAM_ELEMENTS,
    MAX_INTERFACE_DOFS,
    beam_elements,
    beam_hybrid,
    chain_hybrid,
    craig_bampton,
    hybrid_system,
)
from .crossings import MAX_CROSSINGS, CriticalDelay, Crossing
from .equation import DEFAULT_CUTOFF_HZ, DelayEquation, DelayTerm, count_roots
from .integrate import simulate
from .maps import DelayMap, ParameterMap, beam_delay_map, delay_map, parameter_map, root_locus
from .plots import plot_delay_map, plot_root_locus
from .prediction import (
    HORIZON_SEARCH_LIMIT,
    MAX_PREDICTOR_GAIN,
    MAX_PREDICTOR_ORDER,
    MAX_PREDICTOR_SAMPLES,
    PredictionIntervals,
    max_predictor_horizon,
    polynomial_predictor_weights,
    prediction_intervals,
    predictor_equation,
    stable_prediction_intervals,
)
from .sdof import (
    PhaseMargin,
    sdof_critical_delay,
    sdof_hopf_curve_p,
    sdof_hopf_curve_zeta,
    sdof_phase_margin,
    sdof_stable_for_all_delays,
    sdof_system,
    small_delay_estimate,
)
from .systems import SingleDelaySystem

__all__ = [
    "DEFAULT_CUTOFF_HZ",
    "DelayTerm",
    "DelayEquation",
    "SingleDelaySystem",
    "Crossing",
    "CriticalDelay",
    "hybrid_system",
    "sdof_system",
    "chain_hybrid",
    "beam_hybrid",
    "craig_bampton",
    "sdof_critical_delay",
    "sdof_phase_margin",
    "PhaseMargin",
    "sdof_hopf_curve_p",
    "sdof_hopf_curve_zeta",
    "sdof_stable_for_all_delays",
    "small_delay_estimate",
    "polynomial_predictor_weights",
    "predictor_equation",
    "stable_prediction_intervals",
    "count_roots",
    "root_locus",
    "simulate",
    "DelayMap",
    "delay_map",
    "beam_delay_map",
    "ParameterMap",
    "parameter_map",
    # added with the package split
    "PredictionIntervals",
    "prediction_intervals",
    "beam_elements",
    "BEAM_SECTION_KEYS",
    "MAX_BEAM_ELEMENTS",
    "MAX_INTERFACE_DOFS",
    "MAX_CROSSINGS",
    "MAX_PREDICTOR_ORDER",
    "MAX_PREDICTOR_SAMPLES",
    "HORIZON_SEARCH_LIMIT",
    "MAX_PREDICTOR_GAIN",
    "max_predictor_horizon",
    "plot_root_locus",
    "plot_delay_map",
]

"""Names and tuning constants of the hybrid test's continuation (no heavy imports: the config
layer reads the defaults from here).

Units: the arclength is measured in the scaled coordinates ``z = (V / v_scale, f / f_scale)``
of :mod:`hbtest.sweep.arclength.continuation` (dimensionless): ``v_scale`` the rig's voltage limit
[V], ``f_scale`` the width of the sweep band [Hz].
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CONTINUATIONS", "ArclengthSettings", "DEFAULT_MAX_POINTS"]

#: ``sweep.continuation`` values: ``stepped`` (the frequency grid, point after point; the
#: default) and ``arclength`` (pseudo-arclength through folds, :mod:`hbtest.sweep.arclength`)
CONTINUATIONS = ("stepped", "arclength")

#: slots an arclength run allocates when the sweep file does not say (``sweep.max_points``)
DEFAULT_MAX_POINTS = 400


@dataclass(frozen=True)
class ArclengthSettings:
    """Step control of the hybrid pseudo-arclength continuation (scaled arclength, see the
    module docstring).

    - ``initial_step`` / ``min_step`` / ``max_step``: the arclength step of the first
      prediction, the smallest one tried before the trace gives up, the largest one taken;
    - ``turn_angle``: the tangent turn a step should make [rad]: the next step is this over
      the curvature the last step measured (the angle between its two tangents over its
      length), within ``[min_factor, max_factor]`` of it — dense at the folds, sparse on the
      flanks, whatever number of corrector evaluations the noise asked for (the former rule,
      ``target_iterations / used``, followed the noise: 509 slots on the reference twin
      without its scatter);
    - ``max_corrector_iterations``: evaluations of one corrector before the step is halved
      (and the rig Jacobian re-measured): 12, the corrector's judgement on a pool that
      averages a scatter of about the residual level a point needs takes more evaluations
      than the 8 that sufficed on a repeating rig;
    - ``frequency_fd_fraction``: the frequency step of the rig's ``dY/df`` finite difference,
      as a fraction of the band (the path pool refines the column as the trace moves; 2e-3,
      8 mHz of a 4 Hz band, turned the reference twin's demand scatter (about 1 um per
      evaluation) into a ``dY/df`` error that bent the first tangent: 2e-2);
    - ``model_frequency_step``: relative frequency step of the central difference of the
      numerical side's explicit ``dR/df`` (a model, no rig time);
    - ``max_points``: slots of the store, the trace stops when they are full;
    - ``worst_case_factor``: a point is accepted when the interface error its residual implies
      is within ``test.accuracy`` (as the hbtest profile) *and* the worst error any residual
      of that size could imply (the 2-norm of the residual-to-displacement operator times the
      residual norm) within this multiple of it: the Broyden-carried rig Jacobian judges the
      amplification well but the direction less so (measured on sweeps/cubic-interface.toml:
      estimates of 0.25 % came with true errors up to 1.1 % without this rule; 2: 1.06 % with
      the twin's default seed; 1.5: 0.61 %, at twice the points; 1: stalls at 16 Hz on noise);
    - ``fold_confirm_points``, ``fold_retreat``: a fold is reported once ``df/ds`` has opposed
      the branch for this many points in a row and the trace has gone back from the extreme
      frequency by this fraction of the band (measured points near a fold wiggle by a few mHz:
      0.25 % of a 4 Hz band is 10 mHz);
    - ``max_voltage_step_factor``: a corrector step changes no voltage by more than this
      multiple of ``solver.max_step_v``;
    - ``pool_prior_fraction``, ``pool_radius``, ``pool_max``: the path pool (module
      docstring, "Pooling"): every evaluation of the trace within ``pool_radius`` times the
      current step of the corrector's newest one (scaled distance in ``(V, f)``), at most
      ``pool_max`` of them, nearest first, pooled at the newest with the random-effects
      rule of the hbtest profile (:meth:`hbtest.point.PointLoop.pool`, ``between``); the
      prior standard deviation of the carried rig Jacobian ``[dY/dV, dY/df]`` entries is
      ``pool_prior_fraction`` of the largest entry of each row (the point profile's 0.3:
      the pool holds 10-24 evaluations against 5 coordinates, the data fit the Jacobian; a
      corrector's own at most 8 evaluations needed 0.03 and could not estimate a scatter).
      Without a pooling profile the last evaluation is used alone;
    - ``tangent_chord_limit``: the tangent at a new point (the null vector of the measured
      Jacobian) may differ from the chord of the step that reached it by at most this [rad];
      beyond, the chord is the tangent (predictor, fold test, next turn): on a smooth curve the
      two differ by about half the step's turn (``turn_angle`` / 2 where the step control
      holds), and the reference twin's seed 2 turned a tangent by 64 deg on the flank at
      17.28 Hz (df/ds 0.98 to 0.39, the curve's turn a few degrees): the next corrector halved
      its step to the minimum along it and stalled (issue 41). 0.5 rad: twice ``turn_angle``;
    - ``tangent_chord_min``: a chord shorter than this (scaled) is not used against the
      tangent: a converged point's position is uncertain by about ``test.accuracy`` of its
      state (about 1e-3 scaled here), which turns a chord of 1e-2 by up to about 0.2 rad; with
      every chord used, the reference twin's seed 3 took a chord of 4e-4 (128 deg from the
      measured tangent) near the upper fold, turned back and stalled at 19.43 Hz;
    - ``pool_min_radius``: the path pool's radius stops shrinking with the step here (scaled):
      the rig is affine in the voltages, and a pool shrunk with the steps a pool's outliers
      halved held a few evaluations, whose Jacobian turned the tangent by 20-80 deg a step
      near the upper fold (reference twin seeds 3 and 4); 2e-2, the frequency finite
      difference's reach and twice ``tangent_chord_min``;
    - ``corrector_trust``: a corrector's next demand lies within this many steps of the
      prediction (at least this many ``pool_min_radius``), or the corrector is refused and the
      step halved, the rig Jacobian before the refused pool kept (not re-measured): on the curve
      a corrector moves about the step's sagitta (``turn_angle / 2`` of it) and the noise; the
      corrector of a pool that bent the Jacobian near a fold moved 2.4 steps, then ran to
      15.9 Hz and clipped the sensors (reference twin seed 3). 1.
      The initial step, 1e-2."""

    initial_step: float = 0.01
    min_step: float = 1e-4
    max_step: float = 0.05
    min_factor: float = 0.5
    max_factor: float = 2.0
    max_corrector_iterations: int = 12
    frequency_fd_fraction: float = 2e-2
    model_frequency_step: float = 1e-6
    max_points: int = DEFAULT_MAX_POINTS
    max_voltage_step_factor: float = 4.0
    worst_case_factor: float = 1.5
    fold_confirm_points: int = 2
    fold_retreat: float = 2.5e-3
    pool_prior_fraction: float = 0.3
    pool_radius: float = 1.5
    pool_max: int = 24
    turn_angle: float = 0.25
    tangent_chord_limit: float = 0.5
    tangent_chord_min: float = 1e-2
    pool_min_radius: float = 2e-2
    corrector_trust: float = 1.0

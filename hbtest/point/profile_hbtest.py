"""The ``hbtest`` solver profile (the default): the rig Jacobian ``G = d[U_P; F_P]/dV``
(finite differences at the first point, good-Broyden updates from every measured change that
stands out of the noise, carried along the sweep with its posterior covariance) gives the
residual Jacobian at any frequency exactly through the known ``D_N``; each point starts from
the prediction at the new frequency; on a rig that gives raw records and its modes, each
evaluation fits the new steady state together with the known free decay right after the ramp
(:mod:`hbtest.method.estimators`) instead of waiting, growing the record only until the residual
stands out of the noise while far from the solution, and near it until the noise of every
evaluation of the point pooled (:meth:`PointLoop.pool`, an affine fit over the voltages whose
Jacobian becomes ``G``) meets the target; an iteration without progress stops as ``stalled``
after one Jacobian restart, saying what held it; otherwise windows are as short as the
measured noise allows and the settling check extrapolates the geometric decay of the
transient. A single-harmonic point is reported at the solution of its pooled affine fit
(:meth:`HbtestProfile.solution_estimate`) and accepted when that estimate's stated standard
uncertainty is within ``accuracy`` x |U| and, under the carried Jacobian posterior, it agrees
with the point's own entrywise-prior solution (:meth:`HbtestProfile.carried_prior_conflicts`).
A multi-harmonic point stops on accuracy as measured (the interface error a residual still
implies). The method: ``docs/method.md``, "The iterative
Fourier-domain hybrid test". Units: SI; residual figures in metres (the weighted convergence
norm of :mod:`hbtest.point.loop`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..method import broyden, estimators, harmonics
from .base import Carried, PointResult, SolverProfile, register_profile
from .loop import Evaluation, Measured, PointLoop, PointSettings
from .numerical import NumericalSide
from .start_guard import guard_start
from .windows import NoiseSized

__all__ = ["HbtestProfile", "HbtestCarry", "SolutionEstimate"]


@dataclass
class HbtestCarry(Carried):
    """What the hbtest profile carries along the sweep: the rig Jacobian ``G`` (weighted,
    packed; None until measured), its posterior row covariance ``G_cov`` at the last
    converged point (None: none), and the residual level ``r_target`` [m] the last point
    needed (None: the tolerance)."""

    G: np.ndarray | None = None
    G_cov: np.ndarray | None = None
    r_target: float | None = None

    @property
    def jacobian(self) -> np.ndarray:
        """``G``, once measured (every phase after :meth:`HbtestProfile.jacobian`)."""
        assert self.G is not None, "the rig Jacobian is measured in the point's jacobian phase"
        return self.G


class SolutionEstimate(NamedTuple):
    """The point's state at the solution ``V*`` of its pooled affine fit
    (:meth:`HbtestProfile.solution_estimate`): the ``estimate`` (an :class:`Evaluation` at a
    demand the rig did not hold), ``sigma`` the standard uncertainty of its interface
    displacement, ``correction`` its distance from the last measured state and
    ``sigma_here`` the same propagation at the last demand [m, weighted norms]; ``fit`` the
    pooled affine fit at ``V*``."""

    estimate: Evaluation
    sigma: float
    correction: float
    sigma_here: float
    fit: estimators.AffinePool | None = None


@dataclass
class Walk:
    """One point's working state between the phases of :meth:`HbtestProfile.run`: every
    evaluation (``history``), the last one the rig held (``raw``), the pooled estimate at it
    (``e``), the pools' prior Jacobian and row covariance, the last posterior covariance and
    whether the pooled-fit rule applies (``solve``)."""

    history: list
    raw: Evaluation
    e: Evaluation
    prior: np.ndarray
    prior_cov: np.ndarray | None
    G_cov: np.ndarray | None
    solve: bool


@dataclass(frozen=True)
class Judgement:
    """:meth:`HbtestProfile.judge` of a pooled estimate: converged (``ok``), the reported
    estimate when the pooled-fit solution is accepted (``final``), that solution (``sol``,
    None when not estimated), the noise amplification residual -> displacement (``amp``),
    the Newton step ``dV`` and the residual level the point needs ``r_target`` [m]."""

    ok: bool
    final: Evaluation | None
    sol: SolutionEstimate | None
    amp: float
    dV: np.ndarray
    r_target: float


@dataclass(frozen=True)
class Stop:
    """Why :meth:`HbtestProfile.iterate` stopped: ``reason``, the profile's own ``message``
    (None: the loop's standard one), the iterations and the last judgement."""

    reason: str
    message: str | None
    iterations: int
    judgement: Judgement


@register_profile
class HbtestProfile(SolverProfile[HbtestCarry]):
    """hbtest's own profile: rig Jacobian by finite differences then good Broyden updates,
    predicted starts, noise-sized windows fitted through the transient. Stops when the whole
    residual norm is below ``tolerance``, the estimated interface error within ``accuracy``,
    and — per-harmonic balance, ``test.harmonic_tolerance`` = h > 0 — every solved harmonic
    k >= 1 has ``|R_k| < max(h scale_k, harmonic_noise_sigmas sigma_k)``: ``scale_k`` is the
    harmonic's own measured amplitude, or the fundamental's when the harmonic is at its noise
    floor or below ``weak_harmonic_fraction`` of the fundamental (its exact value may be 0);
    ``sigma_k`` the noise of ``|R_k|`` (:meth:`harmonic_limits`). h = 0: the single norm only.

    Every decision after the first evaluation of a point uses the pooled estimate of all the
    point's evaluations at the current voltages (:meth:`PointLoop.pool`); the Jacobian is the
    pool's fitted one. A record grows until its residual stands
    ``far_snr`` noise standard deviations out (far from the solution) or its noise, pooled
    with what was measured before, meets the target (:meth:`noise_target`). No progress for
    ``stall_iterations`` iterations re-measures the Jacobian; after ``stall_restarts`` such
    restarts the point stops as ``stalled`` (:meth:`stall_message`).

    One point walks four phases (:meth:`run`): :meth:`start` (predicted demand, restart on
    over range) -> :meth:`jacobian` (finite differences, periodic refresh, the pools' prior)
    -> :meth:`iterate` (measure, pool, :meth:`judge`, step; stall restarts) ->
    :meth:`posterior` (the carried posterior and the reported result)."""

    name = "hbtest"
    reject_mains = True
    #: the residual noise a window aims at, as a fraction of the transient tolerance
    noise_fraction_of_tolerance = 1 / 3
    #: windows never exceed this multiple of ``averaging_periods``
    max_window_factor = 4
    #: a change within this many standard deviations of two noisy windows is noise
    settle_sigmas = 3.0
    #: cap of the geometric decay ratio when extrapolating what is left of a transient
    max_decay_ratio = 0.95
    #: settle each evaluation to this fraction of the residual level the point needs
    settle_fraction = 0.65
    #: a new residual must fall below this fraction of the best to count as progress
    progress_fraction = 0.9
    #: iterations without progress before the rig Jacobian is re-measured
    stall_iterations = 3
    #: the predicted first step of a point may be this multiple of ``max_step_v``
    prediction_step_factor = 4.0
    #: per-harmonic balance: a residual within this many standard deviations of its noise
    #: counts as balanced (the coefficients cannot say more)
    harmonic_noise_sigmas = 3.0
    #: a harmonic whose measured amplitude is below this many standard deviations of its
    #: noise is "at the noise floor" (its exact value may be zero) ...
    weak_harmonic_sigmas = 3.0
    #: ... or below this fraction of the fundamental's amplitude: judged on the fundamental's
    #: scale instead of its own
    weak_harmonic_fraction = 1e-3

    #: an evaluation whose residual stands this many noise standard deviations out stops
    #: growing its record: far from the solution a Newton step needs no more precision
    far_snr = 4.0
    #: ... but only once its noise is below this multiple of the residual tolerance: a record
    #: much noisier than that is a transient the fit's linear free modes do not explain (a
    #: contact or other nonlinear specimen). Measured on sweeps/contact-tip.toml 18.5-18.9 Hz:
    #: unbounded 3/3 points diverged (3 sigma noise up to 786 um against a 20 um tolerance),
    #: 1.0 still 2/3, 0.1 and 0.02 converge 3/3; bare-beam/paper seed 1: 252/223 periods per
    #: point, FRF 0.83/0.50 % (unbounded: 235/224, 0.71/0.55 %)
    #: The ceiling applies in multi-harmonic tests only: a single-harmonic test assumes a
    #: linear specimen, whose free modes the fit explains
    far_noise_ceiling = 0.1
    #: a transient-fit record never exceeds this multiple of ``averaging_periods``: beyond
    #: it the point steps again and pools (measured on the bare-beam and paper sweeps, seeds
    #: 1-4: 2 -> 173 periods per point but FRF error up to 1.6 %; 3 -> 234, 0.80 %;
    #: 4 -> 291, 0.78 %; 8 -> 506, 0.69 %)
    max_record_factor = 3
    #: pooled estimate (:meth:`PointLoop.pool`): prior standard deviation of the rig Jacobian
    #: entries, a fraction of the largest entry of each row of the carried ``G``
    #: The rig Jacobian after each evaluation is the pooled fit's (a weighted multi-secant
    #: estimate over every evaluation of the point, the carried ``G`` as its prior)
    pool_prior_fraction = 0.3
    #: an evaluation whose pooled information already meets the noise target asks its own
    #: record for at most this many times the target noise (the least record then applies)
    max_noise_relief = 10.0
    #: a falling pooled noise counts as progress only while the residual level needed is at
    #: least this fraction of the noise (beyond, averaging would take over 100x the periods)
    averaging_reach = 0.1
    #: stop with ``stalled`` after this many Jacobian restarts that did not restore progress
    stall_restarts = 1
    #: predictor: extrapolate the solution over at most this many previous points in frequency
    #: (2: linear, 3: quadratic; evenly spaced monotonic steps; single-harmonic tests only,
    #: :meth:`single_harmonic`). Under the measured rule a linear predictor let a point be
    #: accepted from its first record at 1.08 % FRF error; under the pooled-fit rule the
    #: acceptance asks for the estimate's noise, and 2 cut the paper sweep from 126 to 107
    #: periods per point (seeds 1-2). 3 overshoots at the resonance peak (over range)
    predictor_points = 2
    #: recursive rig Jacobian across points: each point's pools take the previous point's
    #: posterior as prior, its covariance divided by ``jacobian_forgetting`` (recursive least
    #: squares with exponential forgetting: directions no recent point measured grow uncertain
    #: geometrically; the exact Jacobian drifts steadily with frequency, 1.6-2.1 % per 0.1 Hz
    #: step on the noise-free bare-beam twin, which a random walk underestimates) and grown by
    #: ``jacobian_drift`` times each row's largest entry (None: every point starts from the
    #: entrywise ``pool_prior_fraction`` prior). Measured (bare-beam, paper; seeds 1-4 and the
    #: rig file's): drift 0.05 -> 212 and 105 periods per point, but one point of the rig
    #: file's seed at 0.94 % FRF error (3.3 stated sigma); 0.07 -> a 1.11 % point (paper seed
    #: 2); 0.1 -> 244 and 121, every point of 16 sweeps (seeds 1-7 and the rig file's) within
    #: 0.78 %, rms error over stated uncertainty 1.00-1.20 (None: 165 periods per point on the
    #: paper sweep, rig file's seed)
    jacobian_forgetting = 0.8
    jacobian_drift = 0.1
    #: re-measure the rig Jacobian by finite differences at the start of every this many-th
    #: point (after its first record; single-harmonic tests; None: at the first point only).
    #: The records are pooled with the carried posterior as prior, like any other record, so
    #: they cost little rig time. The carried Jacobian's error grows along the sweep in the
    #: directions the points' evaluations do not move (0.3 % after the first point's finite
    #: differences, 25-43 % by 17-18 Hz on a bare-beam run), and the stated uncertainty is
    #: propagated through it. Measured (benchmarks' bare-beam and paper sweeps; stated over
    #: exact-Jacobian uncertainty per point, printed by ``benchmarks/rig_time.py --profiles
    #: hbtest --seeds 1 2 3 4``): None -> 244 and 121 periods per point, ratio median 0.84 and
    #: 0.86, smallest 0.57 and 0.42; 4 -> 243 and 119, median 0.98 and 0.97, smallest 0.77 and
    #: 0.76; every point converged. Re-measuring with the entrywise prior instead (the carried
    #: posterior dropped) stalled a low-level point of a family sweep (tests/test_family.py)
    jacobian_refresh_points = 4
    #: when the start demand predicted for a point (extrapolated in frequency) drives a sensor
    #: over range, start again from the previous point's solution instead of stopping the
    #: point: on bare-beam 18.3/18.5/18.7 Hz with the ADC at 8 V the extrapolation to 18.7 Hz
    #: clipped all four channels although the solution there is within range
    restart_on_overrange = True
    #: A single-harmonic point with ``accuracy > 0`` is reported at the solution of its pooled
    #: affine fit (:meth:`solution_estimate`) and accepted when that estimate's stated
    #: uncertainty meets ``accuracy``, instead of iterating until the residual itself is that
    #: small. The estimate may lie this fraction of ``|U|`` from the last measured displacement
    #: (farther, the point steps again: the affine fit is trusted for small moves only)
    max_correction_fraction = 0.02
    #: ... Newton steps on the affine model (one is exact for a linear numerical side)
    solution_newton_steps = 4
    #: ... the pooled residual noise an evaluation aims at, as a fraction of the level the
    #: accuracy needs (the estimate's noise is that level's: its stated uncertainty meets
    #: ``accuracy`` at one standard deviation with margin for the extrapolation)
    solution_noise_fraction = 0.95
    #: a pooled-fit solution accepted under the carried Jacobian posterior must agree with the
    #: one the point's own evaluations give under the entrywise prior to within this many
    #: combined stated standard uncertainties (:meth:`carried_prior_conflicts`). Measured on
    #: the paper and bare-beam sweeps, seeds 1-4 (229 accepted points): 1.15 at most, but
    #: 3.32 at paper seed 4, 19 Hz, whose accepted solution was 4.9 stated sigmas (1.37 %) off
    carried_prior_sigmas = 3.0
    #: the pooled fit of a linear single-harmonic point (the pooled-fit rule) allows its
    #: evaluations to scatter by more than their read noise: a between-evaluation variance
    #: estimated from the misfit (:func:`hbtest.method.estimators.pool_affine`, ``between``), only
    #: where read noise cannot explain it (the twins without demand scatter pool as without
    #: it). In a multi-harmonic test only a scatter below ``multi_between_fraction`` of the
    #: residual tolerance (:meth:`between_limit`): a contact specimen's evaluations do not
    #: repeat either (transients its fit does not model), and averaging all of that moved the
    #: contact-tip sweep's 18.5 Hz point from 0.07 % to 1.28 % FRF error, even with only the
    #: misfit of the nearer half counted (``affine=False``); its far and unsettled evaluations
    #: go as outliers. False: no pool averages a scatter
    pool_between = True
    #: the largest between-evaluation scatter a multi-harmonic pool averages, as a fraction of
    #: the residual tolerance (the 2-norm over the scaled outputs of its standard deviation)
    multi_between_fraction = 0.25

    def between_limit(self, loop: PointLoop, solve: bool) -> float:
        """How far a pool of this point's evaluations may scatter beyond their reads and still
        be averaged (:meth:`PointLoop.pool`, ``between``; [m], the scaled outputs): any
        scatter in a linear single-harmonic point that solves its pooled fit (``solve``), none
        in one that does not, and up to ``multi_between_fraction`` of the tolerance in a
        multi-harmonic test.

        Why the bound there: on the reference twin a cubic-interface point's evaluations
        scatter by 0.3-1.8 um (its demand scatter; the 20 um tolerance) and, not averaged,
        stalled the sweep at its first point (16 Hz: residual 30 um, each evaluation off by
        its own offset); the contact tip's evaluations (the stop's transients, no demand
        scatter) misfit by 16-42 um, and averaged they moved its 18.5 Hz point from 0.07 % to
        1.28 % FRF error. A misfit as large as the tolerance is the affine model failing over
        the evaluations, not a scatter; those go as outliers."""
        if not self.pool_between:
            return 0.0
        if self.single_harmonic(loop):
            return np.inf if solve else 0.0
        return self.multi_between_fraction * loop.s.tolerance

    def window_rule(self, s: PointSettings) -> NoiseSized:
        """Noise-sized windows and records (the class constants) under the settings ``s``."""
        multi = len(s.orders) != 1  # not single_harmonic: the far-noise ceiling applies
        return NoiseSized(
            min_window_periods=int(s.min_window_periods), averaging_periods=int(s.averaging_periods),
            most=int(s.max_settle_windows), noise_fraction=self.noise_fraction_of_tolerance,
            max_window_factor=self.max_window_factor, settle_sigmas=self.settle_sigmas,
            max_decay_ratio=self.max_decay_ratio, far_snr=self.far_snr,
            far_ceiling=self.far_noise_ceiling * s.tolerance if multi else np.inf,
            max_record_factor=self.max_record_factor, reject_mains=self.reject_mains)

    def new_carry(self, start_V: np.ndarray | None = None) -> HbtestCarry:
        return HbtestCarry(start_V=start_V)

    def extrapolated(self, carry: HbtestCarry, f: float, single: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """(V, Y) at ``f`` extrapolated in frequency (Lagrange, degree up to
        ``predictor_points - 1``) over the last solutions; the last solution itself when there
        is one, or when the frequency steps are not monotonic."""
        sol = carry.solutions[-(self.predictor_points if single else 1):]
        fs = np.array([x[0] for x in sol])
        if len(sol) >= 2:
            d = np.diff(np.r_[fs, f])  # only over evenly spaced, monotonic steps
            if not (np.all(d > 0) or np.all(d < 0)) or np.max(np.abs(d)) > 1.5 * np.min(np.abs(d)):
                sol, fs = sol[-1:], fs[-1:]
        w = np.array([np.prod([(f - fs[k]) / (fs[j] - fs[k]) for k in range(len(fs)) if k != j]) for j in range(len(fs))])
        V = sum(wj * x[1] for wj, x in zip(w, sol))
        Y = sum(wj * x[2] for wj, x in zip(w, sol))
        return V, Y

    @staticmethod
    def single_harmonic(loop: PointLoop) -> bool:
        """One solved order (a linear test): the pooled-fit solution and the frequency
        extrapolation apply. A multi-harmonic test (a nonlinear specimen) keeps the measured
        rule and the last solution as predictor: measured on sweeps/contact-tip.toml 18.5-18.9
        Hz, the solution's noise runs through the weakly controllable orders (DC, k >= 2) and
        stalls 2 of 3 points, a linear extrapolation across the contact's jump drives a
        laser over range, and the carried Jacobian posterior (an amplitude-dependent slope
        taken for a constant) stalls one."""
        return loop.orders.size == 1

    def point_prior(self, carry: HbtestCarry):
        """Prior covariance of the rig Jacobian's rows for this point's pools: the previous
        point's posterior (``carry.G_cov``) grown by ``jacobian_drift`` times each row's
        largest entry (what a frequency step may change), or None (the entrywise
        ``pool_prior_fraction`` prior) when there is none."""
        if carry.G_cov is None or carry.G is None or self.jacobian_drift is None:
            return None
        m = carry.G.shape[1]
        q = self.jacobian_drift * np.max(np.abs(carry.G), axis=1)
        return carry.G_cov / self.jacobian_forgetting + np.einsum("i,ab->iab", q**2, np.eye(m))

    def refresh_jacobian(self, loop: PointLoop, carry: HbtestCarry) -> bool:
        """Whether this point re-measures the carried rig Jacobian
        (``jacobian_refresh_points``): every that many solved points of a single-harmonic test."""
        n = len(carry.solutions)
        return bool(self.jacobian_refresh_points and self.single_harmonic(loop) and carry.G is not None
                    and n > 0 and n % self.jacobian_refresh_points == 0)

    def predict(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry) -> np.ndarray:
        """Voltages at the new frequency from the previous solutions and their measured rig
        outputs, both extrapolated in frequency (:meth:`extrapolated`), and the rig Jacobian,
        with the exact ``D_N`` of the new frequency: the linear rig model
        ``Y(V) = Y_extrapolated + G (V - V_extrapolated)`` solved for ``R = 0``."""
        V_prev, Y = self.extrapolated(carry, num.frequency_hz, self.single_harmonic(loop))
        n = 2 * loop.p
        scaleY = loop.output_scale(num)
        U = harmonics.unpack((Y[:n] / scaleY[:n]).reshape(2, loop.p), loop.orders)
        F = harmonics.unpack((Y[n:] / scaleY[n:]).reshape(2, loop.p), loop.orders)
        _, _, vec, _ = loop.residual(num, Measured(U, F))
        J = loop.residual_jacobian_from_G(num, carry.jacobian, at=Measured(U, F))
        return loop.clip(V_prev + broyden.limit_step(broyden.newton_step(J, vec), self.prediction_step_factor * loop.s.max_step_v))

    def error_estimate(self, loop: PointLoop, num: NumericalSide, G: np.ndarray, e: Evaluation) -> tuple[float, float, np.ndarray]:
        """Newton step ``dV = -J_R^+ R`` and the interface-displacement error it implies,
        ``e_U = G_U J_R^+ R = (D_N + D_P)^-1 D_N R`` (weighted norm, metres), plus the noise
        amplification ``|G_U J_R^+|`` from residual to displacement error."""
        J = loop.residual_jacobian_from_G(num, G, at=e.meas)
        dV = broyden.newton_step(J, e.vector)
        GU = G[: 2 * loop.p]
        err = float(np.linalg.norm(GU @ dV))
        amp = float(np.linalg.norm(GU @ np.linalg.pinv(J, rcond=1e-10), 2))
        if loop.s.residual_form == "force":
            amp *= float(np.linalg.norm(e.vector) / max(e.norm, 1e-300))
        return err, amp, dV

    @staticmethod
    def residual_target(s: PointSettings, err_tol: float, amp: float) -> float:
        """Residual level [m] that keeps the displacement error within ``err_tol``."""
        if s.accuracy <= 0 or err_tol <= 0:  # no accuracy target, or no motion yet
            return s.tolerance
        return min(s.tolerance, err_tol / max(amp, 1.0))

    def harmonic_limits(self, loop: PointLoop, num: NumericalSide, e: Evaluation) -> tuple[np.ndarray, np.ndarray]:
        """Per-harmonic balance (``test.harmonic_tolerance`` = h > 0): the residual ``|R_k|``
        of each solved order and the limit it must be below [m, weighted as the norm]:

            limit_k = max(h * scale_k, harmonic_noise_sigmas * sigma_k)

        where ``sigma_k`` is the standard deviation of ``|R_k|`` from the measured variances
        (the noise floor of its coefficients) and ``scale_k`` the harmonic's own measured
        amplitude ``|U_P,k|`` — unless that amplitude is at the noise floor (below
        ``weak_harmonic_sigmas`` standard deviations of ``|U_P,k|``) or below
        ``weak_harmonic_fraction`` of the fundamental's: such a harmonic may be exactly zero,
        so it is judged on the fundamental's scale, ``scale_k = |U_P,1|`` (the amplitude of
        order 1, or of the strongest solved order when 1 is not solved). Every ``|R_k|`` is in
        any case below the absolute ``tolerance`` (the whole norm is). DC (k = 0) is judged
        by the whole norm only. Returns ``(|R_k|, limit_k)``; limits are ``inf`` when h = 0."""
        ph = loop.per_harmonic(num, e)
        r = ph["residual"]
        h = loop.s.harmonic_tolerance
        if h <= 0:
            return r, np.full(r.shape, np.inf)
        limit = np.maximum(h * self.harmonic_scales(loop, ph), self.harmonic_noise_sigmas * ph["noise"])
        return r, np.where(loop.orders == 0, np.inf, limit)

    def harmonic_scales(self, loop: PointLoop, ph: dict) -> np.ndarray:
        """``scale_k`` of :meth:`harmonic_limits` from :meth:`PointLoop.per_harmonic` [m]."""
        a, orders = ph["amplitude"], loop.orders
        fund = float(a[orders == 1][0]) if np.any(orders == 1) else float(a[orders > 0].max())
        weak = (a < self.weak_harmonic_sigmas * ph["amplitude_noise"]) | (a < self.weak_harmonic_fraction * fund)
        return np.where(weak, fund, a)

    def harmonic_target(self, loop: PointLoop, num: NumericalSide, e: Evaluation) -> float:
        """Residual level [m] the per-harmonic rule needs: ``min_k h scale_k`` (inf when off
        or with no motion yet); settling and window noise follow it like the tolerance."""
        h = loop.s.harmonic_tolerance
        if h <= 0:
            return float("inf")
        scale = self.harmonic_scales(loop, loop.per_harmonic(num, e))[loop.orders > 0]
        t = float(h * scale.min()) if scale.size else 0.0
        return t if t > 0 else float("inf")

    def harmonics_balanced(self, loop: PointLoop, num: NumericalSide, e: Evaluation) -> bool:
        """Every solved harmonic within its own limit (:meth:`harmonic_limits`)."""
        r, limit = self.harmonic_limits(loop, num, e)
        return bool(np.all(r < limit))

    def solution_estimate(self, loop: PointLoop, num: NumericalSide, evaluations: list, prior: np.ndarray, prior_cov,
                          G: np.ndarray, e: Evaluation):
        """The point's estimate at the solution ``V*`` of its pooled affine fit: Newton steps
        on ``Y(V)`` (the affine fit over ``evaluations`` with the prior Jacobian ``prior``
        and its row covariance ``prior_cov`` or None, :meth:`PointLoop.pool` at ``V*``; ``G``
        its fitted Jacobian) from the pooled
        evaluation ``e`` until the model's residual vanishes. Returns ``(estimate, sigma,
        correction, sigma_here)``: the estimate is an :class:`Evaluation` at ``V*`` (a demand
        the rig did not hold) with the fit's outputs and variances there; ``sigma`` the
        standard deviation of its interface displacement (weighted norm, metres) by first-order
        propagation of the outputs' noise through ``V*`` — ``dU* = (E_U - G_U J^+ P) dY``,
        ``P = dR/dY``, ``J = P G``, the outputs correlated as the sensor reduction makes them;
        ``correction`` ``|U* - U_e|``; ``sigma_here`` the same
        propagation of the pooled noise at the last demand (no extrapolation: what more
        averaging buys). None when ``V*`` is beyond the voltage limit or the model's residual
        does not vanish."""
        est, V, fit = e, e.V.copy(), None
        for _ in range(self.solution_newton_steps):
            J = loop.residual_jacobian_from_G(num, G, at=est.meas)
            V = V + broyden.newton_step(J, est.vector)
            if not np.array_equal(loop.clip(V), V):
                return None
            pooled = loop.pool(num, evaluations, prior, self.pool_prior_fraction, at=V, prior_cov=prior_cov,
                               between=self.between_limit(loop, True))
            est, fit = pooled.evaluation, pooled.fit
            if est.norm <= 1e-9 * max(e.norm, loop.s.tolerance):
                break
        if est.norm > 1e-3 * min(loop.s.tolerance, max(e.norm, np.finfo(float).tiny / 1e-3)):
            return None  # Newton on the fit did not reach its solution (a nonlinear side far off)
        n = 2 * loop.p
        C = self.output_correlation(loop, num, e.meas)
        sigma = self.stated_uncertainty(loop, num, G, est.meas, C, fit)
        # the same propagation with the noise of the estimate at the last demand: what more
        # averaging there buys (the extrapolation's share falls as the point closes in); where
        # the evaluations scatter, the scatter's share measured as for ``sigma``, not in full
        sigma_here = self.stated_uncertainty(loop, num, G, e.meas, C, fit)
        return SolutionEstimate(est, sigma, float(np.linalg.norm(est.Y[:n] - e.Y[:n])), sigma_here, fit)

    def stated_uncertainty(self, loop: PointLoop, num: NumericalSide, G: np.ndarray, meas, correlation: np.ndarray,
                           fit, G_cov: np.ndarray | None = None) -> float:
        """:meth:`displacement_uncertainty` of a pooled-fit solution (``G_cov``: with the fitted
        Jacobian's own uncertainty); where its evaluations scatter by more than their reads
        (``fit.between`` > 0: :func:`hbtest.method.estimators.pool_affine`) as follows.
        The stated variances then hold the scatter as if each output scattered on its own, and
        propagate it in full; but a scatter along the rig's own response (``G dV``: an offset of
        what the actuators deliver) only moves the solution along the model and leaves its
        outputs, and the propagation ``M`` (:func:`hbtest.method.estimators.solution_map`) passes only
        what is not. So the scatter's share is measured: the sandwich variance of ``M`` times
        the estimate (:func:`hbtest.method.estimators.sandwich_variance`: each evaluation's misfit
        through its influence), never below the reads' own share (``fit.read_variance``
        propagated as :meth:`displacement_uncertainty` does). On the twin with the lab's demand
        scatter (``[virtual.demand_scatter]``), the stated uncertainty with the scatter in full
        was 2-5x the error against the exact structure. The Jacobian's share (``G_cov``) is
        propagated with the reads' variances and added."""
        full = self.displacement_uncertainty(loop, num, G, meas, correlation, G_cov)
        if fit is None or fit.between is None or not np.any(fit.between > 0):
            return full
        P = loop.residual_jacobian_from_G(num, np.eye(G.shape[0]), at=meas)
        n = 2 * loop.p
        scattered = estimators.sandwich_variance(estimators.solution_map(G, P, n), fit)
        if not np.isfinite(scattered):  # too few evaluations to measure it: all of it
            return full
        read = estimators.solution_uncertainty(G, P, fit.read_variance, correlation, n)
        jacobian = 0.0 if G_cov is None else (
            estimators.solution_uncertainty(G, P, fit.read_variance, correlation, n, G_cov) ** 2 - read**2)
        return float(np.sqrt(max(scattered, read**2) + max(jacobian, 0.0)))

    def output_correlation(self, loop: PointLoop, num: NumericalSide, meas) -> np.ndarray:
        """Correlation of the packed rig outputs' errors: as the sensor reduction of ``meas``
        makes them (lasers -> u, theta; gauges -> T, M: :meth:`PointLoop.packed_output_correlation`),
        or independent without raw channels. Measured on bare-beam and paper seeds 1-4:
        independent outputs gave 192 and 113 periods per point but FRF errors up to 1.00 % (the
        stated uncertainty too small); correlated 217 and 122, 0.70 %."""
        C = loop.packed_output_correlation(num, meas)
        return np.eye(loop.packed_output_variance(num, meas).size) if C is None else C

    def displacement_uncertainty(self, loop: PointLoop, num: NumericalSide, G: np.ndarray, meas, correlation: np.ndarray,
                                 G_cov: np.ndarray | None = None) -> float:
        """Standard uncertainty [m, weighted norm] of the interface displacement of the solution
        ``R = 0`` of a linear rig model with Jacobian ``G`` whose outputs at that solution are
        ``meas`` (their variances), their errors correlated by ``correlation``
        (:meth:`output_correlation`): first-order propagation ``dU* = (E_U - G_U J^+ P) dY``,
        ``P = dR/dY``, ``J = P G``. With the rig's exact Jacobian for ``G`` (the twin's) this is
        the uncertainty the fitted ``G`` only estimates.

        ``G_cov`` (rows x coordinates x coordinates): the covariance of each row of a fitted
        ``G`` (the pool's posterior, rows independent). The variance is then the mean over the
        true Jacobian ``G + dG`` to second order in ``dG``: the map through it is
        ``M (I - A + A^2)``, ``A = dG J^+ P``, so the variance gains
        ``sum_i (M^T M)_ii tr(W S W^T C_i) + 2 tr(M E[A^2] S M^T)`` (``W = J^+ P``, ``S`` the
        outputs' covariance, ``C_i`` row i's covariance). Without it the fitted Jacobian
        understates the uncertainty where its weakly measured directions are off: over the
        bare-beam and paper twins (seeds 1-4, every point) the uncertainty through the fitted
        ``G`` is 0.84-0.86 of the one through the exact ``G`` at the median, and 0.95 with this
        term (``benchmarks/rig_time.py`` prints the calibration of all three)."""
        var_Y = loop.packed_output_variance(num, meas)
        P = loop.residual_jacobian_from_G(num, np.eye(var_Y.size), at=meas)
        return estimators.solution_uncertainty(G, P, var_Y, correlation, 2 * loop.p, G_cov)

    def noise_target(self, r_target: float, pooled_noise: float, solve: bool = False) -> float:
        """Residual noise [m] the next evaluation's own record must reach so that, pooled with
        the information already measured at this point (noise ``pooled_noise``), the noise is
        ``noise_fraction_of_tolerance * settle_fraction * r_target`` — or, under the pooled-fit
        rule (``solve``), ``solution_noise_fraction * r_target``."""
        goal = (self.solution_noise_fraction if solve else self.noise_fraction_of_tolerance * self.settle_fraction) * r_target
        if not np.isfinite(pooled_noise) or pooled_noise <= 0:
            return goal
        left = 1.0 / goal**2 - 1.0 / pooled_noise**2
        if left <= 0:
            return self.max_noise_relief * goal
        return min(1.0 / np.sqrt(left), self.max_noise_relief * goal)

    def stall_message(self, loop: PointLoop, num: NumericalSide, e: Evaluation, r_target: float, n: int) -> str:
        """What stopped a stalled point: the residual against its tolerance and noise floor,
        and the harmonic that holds it."""
        ph = loop.per_harmonic(num, e)
        k = int(np.argmax(ph["residual"]))
        floor = 3.0 * e.noise
        why = ("at its noise floor: averaging, not iterating, would help" if e.norm <= floor
               else "above its noise floor: the Jacobian does not lead to the solution")
        return (f"stalled after {n} iterations, the last {self.stall_iterations} without progress (and a Jacobian restart); "
                f"residual {e.norm * 1e6:.3g} um (needed {r_target * 1e6:.3g} um, "
                f"tolerance {loop.s.tolerance * 1e6:.3g} um) is {why} (3 sigma noise {floor * 1e6:.3g} um); "
                f"largest at harmonic {int(loop.orders[k])} ({ph['residual'][k] * 1e6:.3g} um)")

    # -- one point, phase by phase ---------------------------------------------------------
    def run(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, history: list) -> PointResult:
        """Converged when ``|R| < tolerance``, every solved harmonic is balanced on its own
        scale (:meth:`harmonic_limits`, with ``harmonic_tolerance > 0``) and, with
        ``accuracy > 0``, when the estimated interface-displacement error is within
        ``accuracy * |U_P|``; settling and noise targets follow the residual level that this
        requires. Phases: :meth:`start`, :meth:`jacobian`, :meth:`iterate`, :meth:`posterior`."""
        raw, note = self.start(loop, num, carry, history)
        walk = self.jacobian(loop, num, carry, raw, history)
        stop = self.iterate(loop, num, carry, walk)
        return self.posterior(loop, num, carry, walk, stop, note)

    def settle_tolerance(self, loop: PointLoop, carry: HbtestCarry) -> float:
        """The transient tolerance of the next evaluation [m]: ``settle_fraction`` of the
        residual level the point needs (the last point's until this one has judged)."""
        return self.settle_fraction * (carry.r_target or loop.s.tolerance)

    def start(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, history: list):
        """Phase 1, predict/restart: the first evaluation at the demand predicted from the
        previous solutions (:meth:`predict`), or at the previous solution. A predicted demand
        that drives a sensor over range is measured again at the previous point's solution
        (the clipped record stays in the history, out of every fit). Returns ``(evaluation,
        note)``: the note says that the start was restarted (None otherwise)."""
        predicted = bool(carry.solutions) and carry.G is not None
        V = self.predict(loop, num, carry) if predicted else loop.start_voltage(carry)
        guarded = None
        if predicted:  # a start predicted near a tripping channel window is not sent
            V, guarded = guard_start(self, loop, num, carry, V)
        raw = loop.evaluate(num, V, self.settle_tolerance(loop, carry), kind="start")
        history.append(raw)
        if not (raw.overrange and predicted and self.restart_on_overrange):
            return raw, guarded
        note = (f"the predicted start drove {', '.join(raw.overrange)} over range; "
                f"restarted from the previous point's demand")
        raw = loop.evaluate(num, loop.start_voltage(carry), self.settle_tolerance(loop, carry), kind="start")
        history.append(raw)
        return raw, note

    def jacobian(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, raw: Evaluation, history: list) -> Walk:
        """Phase 2, the rig Jacobian: by finite differences around the start when none is
        carried; every ``jacobian_refresh_points``-th point finite differences pooled with the
        carried posterior. Returns the point's walk: the pools' prior (mean and row
        covariance, :meth:`point_prior`) and the first pooled estimate."""
        refresh = self.refresh_jacobian(loop, carry)
        if carry.G is None:
            carry.G = loop.finite_differences(num, raw, history, self.settle_tolerance(loop, carry))[1]
        prior, prior_cov = carry.G, (self.point_prior(carry) if self.single_harmonic(loop) else None)
        if refresh:
            # finite differences around the start, pooled with the carried posterior: they
            # measure the directions the earlier points' evaluations did not move
            loop.finite_differences(num, raw, history, self.settle_tolerance(loop, carry))
            carry.G = loop.pool(num, history, prior, self.pool_prior_fraction, prior_cov=prior_cov).jacobian
        here = [h for h in history if np.array_equal(h.V, raw.V)] or [raw]
        e = loop.pool(num, here, carry.jacobian, self.pool_prior_fraction).evaluation
        solve = loop.s.accuracy > 0 and self.single_harmonic(loop)
        return Walk(history, raw, e, prior, prior_cov, prior_cov, solve)

    def judge(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, w: Walk) -> Judgement:
        """Is the pooled estimate ``w.e`` converged, and what does the point need? Sets the
        residual level the point needs (``carry.r_target``) from the accuracy, the stated
        uncertainty of the pooled-fit solution where it applies, and the per-harmonic rule."""
        s, e = loop.s, w.e
        err, amp, dV = self.error_estimate(loop, num, carry.jacobian, e)
        U = loop.displacement_amplitude(e)
        sol = None
        if w.solve and e.norm < s.tolerance:
            sol = self.solution_estimate(loop, num, w.history, w.prior, w.prior_cov, carry.jacobian, e)
            if sol is not None and sol.sigma_here > 0 and e.noise > 0:
                amp = sol.sigma_here / e.noise  # displacement noise of the estimate per unit residual noise
        if sol is not None and sol.sigma_here > 0:
            # the residual noise at which the estimate's own noise meets the accuracy
            r_target = min(s.tolerance, s.accuracy * U / amp, self.harmonic_target(loop, num, e))
        else:
            r_target = min(self.residual_target(s, s.accuracy * U, amp), self.harmonic_target(loop, num, e))
        carry.r_target = r_target
        # without the pooled-fit rule (multi-harmonic, or accuracy 0): the measured state is
        # converged when the error its residual still implies is within the accuracy
        ok = (not w.solve and e.norm < s.tolerance and (s.accuracy <= 0 or (err <= s.accuracy * U and e.settled))
              and self.harmonics_balanced(loop, num, e))
        final = None
        if not ok and sol is not None:
            # or the pooled fit's solution next to it is known well enough
            ok = (e.settled and self.harmonics_balanced(loop, num, e)
                  and sol.sigma <= s.accuracy * U and sol.correction <= self.max_correction_fraction * U)
            final = sol.estimate if ok else None
        return Judgement(ok, final, sol, amp, dV, r_target)

    def measure_step(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, w: Walk, j: Judgement) -> None:
        """One step: measure at the limited Newton step from the pooled estimate, update the
        rig Jacobian by good Broyden where the change stands out of the noise, and pool every
        evaluation of the point again (its fitted Jacobian becomes ``carry.G``)."""
        step = broyden.limit_step(j.dV, loop.s.max_step_v)
        prev_raw = w.raw
        # what is known at the solution: the estimate there (its noise and extrapolation, in
        # residual units), or the pooled noise at the last demand when there is none yet
        known = j.sol.sigma / j.amp if j.sol is not None and j.amp > 0 else w.e.noise
        w.raw = loop.evaluate(num, w.e.V + step, self.settle_fraction * j.r_target,
                              noise_target=self.noise_target(j.r_target, known, w.solve))
        w.history.append(w.raw)
        dVm, dY = w.raw.V - prev_raw.V, w.raw.Y - prev_raw.Y
        if broyden.informative(dY, max(prev_raw.noise, w.raw.noise) / np.sqrt(dY.size)):
            carry.G = broyden.good_broyden_update(carry.jacobian, dVm, dY)
        # prior mean: in a linear (single-harmonic) test the point's own start Jacobian, so
        # the pool counts each measurement once; in a multi-harmonic one (a nonlinear
        # specimen) the Jacobian after the latest secant, the local slope. Its covariance:
        # the carried posterior's (:meth:`point_prior`) or the entrywise one
        if not w.solve:
            w.prior = carry.jacobian
        pooled = loop.pool(num, w.history, w.prior, self.pool_prior_fraction, prior_cov=w.prior_cov,
                           between=self.between_limit(loop, w.solve))
        w.e, carry.G, w.G_cov = pooled.evaluation, pooled.jacobian, pooled.jacobian_cov

    def iterate(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, w: Walk) -> Stop:
        """Phase 3, measure-pool-judge-step until converged, over range, the iteration limit
        or stalled; an acceptance under the carried posterior that conflicts with the point's own
        evaluations (:meth:`carried_prior_conflicts`) is judged again under the entrywise prior
        first. Progress: the residual falls by ``progress_fraction``, or — while the level
        needed is within reach of averaging (``averaging_reach``) — the pooled noise falls (at
        all in a single-harmonic test, by ``progress_fraction`` in a multi-harmonic one);
        ``stall_iterations`` without it re-measure the Jacobian, ``stall_restarts`` such
        restarts stop the point.

        The pooled noise falls as 1/sqrt(evaluations) once the records are at their longest, so
        a fixed fraction would stop a point that is averaging its way to the accuracy: asked to
        fall by ``progress_fraction`` over ``stall_iterations`` evaluations, a pool of more
        than ~13 stalls. It did (a linear family on the harsh-mains twin, 18.4 Hz, "at its noise
        floor: averaging, not iterating, would help"; with other last bits of the BLAS the same
        point converged). Any fall counted first where the evaluations scatter (the reference
        twin), now in every single-harmonic test: paper and bare-beam sweeps, seeds 1-4,
        263 -> 246 and 488 -> 481 periods per point, max FRF error 0.74 -> 0.77 %
        (``benchmarks/rig_time.py --profiles hbtest --seeds 1 2 3 4``). Not in a multi-harmonic
        test: a contact specimen's pooled noise keeps falling without the point closing in (the
        contact-tip sweep's 18.9 Hz point, ``tests/test_twin_nonlinear.py``, did not converge;
        with the fraction it does)."""
        best, best_noise = w.e.norm, w.e.noise
        stalled, restarts, since, it = 0, 0, 0, 0
        while True:
            j = self.judge(loop, num, carry, w)
            if w.e.overrange:
                return Stop("overrange", None, it, j)
            if j.ok and self.carried_prior_conflicts(loop, num, carry, w, j):
                best, best_noise = w.e.norm, w.e.noise  # judged again, under the entrywise prior
                continue
            if j.ok:
                return Stop("converged", None, it, j)
            if it >= loop.s.max_iterations:
                return Stop("iteration_limit", None, it, j)
            it += 1
            self.measure_step(loop, num, carry, w, j)
            since += 1
            reach = j.r_target >= self.averaging_reach * w.e.noise
            # in a linear (single-harmonic) test each evaluation is an average more: any fall of
            # the pooled noise is progress; a nonlinear specimen's must fall by progress_fraction
            falls = w.e.noise < (1.0 if w.solve else self.progress_fraction) * best_noise
            if w.e.norm < self.progress_fraction * best or (reach and falls):
                best, best_noise, stalled = min(best, w.e.norm), min(best_noise, w.e.noise), 0
                continue
            stalled += 1
            if stalled < self.stall_iterations:
                continue
            if restarts >= self.stall_restarts:
                return Stop("stalled", self.stall_message(loop, num, w.e, j.r_target, since), it, j)
            # stagnation: re-measure the rig Jacobian around the current voltages
            carry.G = loop.finite_differences(num, w.raw, w.history, self.settle_fraction * j.r_target)[1]
            w.prior, w.prior_cov = carry.jacobian, None
            restarts, stalled = restarts + 1, 0
            best, best_noise = self.restart_baseline(loop, num, w)

    def carried_prior_conflicts(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, w: Walk,
                                j: Judgement) -> bool:
        """Whether a pooled-fit solution about to be accepted under the carried Jacobian
        posterior (``w.prior_cov``) disagrees with the one the point's own evaluations give under
        the entrywise prior (``pool_prior_fraction``, as after a Jacobian restart); if so, the
        point drops the carried covariance for the rest of its pools (``w``, ``carry.G``
        updated to the entrywise pool) and returns True: the caller judges it again.

        The rule: both are estimates of the same interface displacement ``U*`` from the same
        evaluations, each with its stated standard uncertainty (``sigma_c``, ``sigma_e``, 2-norm
        over the weighted displacement outputs [m]). When the carried prior holds the truth
        within its covariance, both are unbiased and their difference ``d`` has variance at most
        ``sigma_c^2 + sigma_e^2`` (they share the data, so their errors correlate positively):
        ``|d| > carried_prior_sigmas * hypot(sigma_c, sigma_e)`` then happens with probability
        at most 0.27 % (3 sigmas, all of the variance in one direction), far less when it spreads
        over the four real coordinates. Beyond it the carried prior conflicts with the data and
        the conflict moves the answer: the prior is what is dropped, not the data.

        Why: the carried posterior can be far more confident than right. Paper sweep seed 4,
        19 Hz (``tests/test_carried_prior.py``): its first column was 56 % off the twin's exact
        Jacobian, its Re u row 77 from the exact one on the chi-squared scale of its covariance
        (4 degrees of freedom); under it that row misfit the evaluations by up to 259 read
        sigmas, the pool took the misfit for a scatter between evaluations (3.7 um in Re u,
        0.24 um under the entrywise prior) and so handed the row back to the prior; the solution
        was accepted 12.7 um (1.37 %, 4.9 stated sigmas) from the exact one. The same
        evaluations under the entrywise prior: 3.3 um (0.35 %, 2.1 sigmas); the two 3.3
        combined sigmas apart. The residual at the last demand, 0.19 um against 1.24 um pooled
        noise, is no sign of it: that demand is where the previous pool put its solution, so the
        new pool's residual there is small by design, and the stored history's last row is
        that pooled estimate, not an evaluation."""
        if not (w.solve and w.prior_cov is not None and j.sol is not None):
            return False
        pooled = loop.pool(num, w.history, w.prior, self.pool_prior_fraction, between=self.between_limit(loop, True))
        if pooled.jacobian is None:  # no entrywise fit: nothing says the prior is wrong
            return False
        own = self.solution_estimate(loop, num, w.history, w.prior, None, pooled.jacobian, pooled.evaluation)
        if own is None:  # the entrywise fit has no solution to compare: nothing says the prior is wrong
            return False
        n = 2 * loop.p
        apart = float(np.linalg.norm(own.estimate.Y[:n] - j.sol.estimate.Y[:n]))
        if apart <= self.carried_prior_sigmas * np.hypot(j.sol.sigma, own.sigma):
            return False
        w.prior_cov = None
        w.e, carry.G, w.G_cov = pooled.evaluation, pooled.jacobian, pooled.jacobian_cov
        return True

    def restart_baseline(self, loop: PointLoop, num: NumericalSide, w: Walk) -> tuple[float, float]:
        """(residual norm, noise) [m] that progress after a Jacobian restart is judged
        against: the pool the next steps make (every evaluation, the finite differences too,
        under the new prior ``w.prior`` without the carried covariance) at the current demand.
        The pooled estimate before the restart was made under the carried posterior, which
        pools the point's evaluations more tightly: its noise is no baseline for the pools that
        follow. Measured (helic over loopback, paper sweep seed 1, 16.6 Hz): 1.31 um before the
        restart, 2.19 um at the first pool after it, then 1.93, 1.75, 1.64, 1.50 um with the
        solution's uncertainty closing on the accuracy (1.06 -> 0.82 um, 0.78 um needed);
        none of those counted as progress against 1.31 um, and the point stopped as stalled."""
        pooled = loop.pool(num, w.history, w.prior, self.pool_prior_fraction, at=w.e.V,
                           between=self.between_limit(loop, w.solve)).evaluation
        return pooled.norm, pooled.noise

    def posterior(self, loop: PointLoop, num: NumericalSide, carry: HbtestCarry, w: Walk, stop: Stop,
                  note: str | None) -> PointResult:
        """Phase 4: the fitted Jacobian's posterior at the reported solution (from the raw
        evaluations), the history's last evaluation at the demand the point ends at (the last
        row, or the one before a closing Jacobian re-measure's finite differences) replaced by
        the pooled estimate the point ends with (its own rig time and windows unchanged), the
        posterior covariance carried
        to the next point (:meth:`point_prior`) when converged, and the result."""
        final = stop.judgement.final
        G_post = None
        if final is not None:
            G_post = loop.pool(num, w.history, w.prior, self.pool_prior_fraction, at=final.V,
                               prior_cov=w.prior_cov, between=self.between_limit(loop, True)).jacobian_cov
        h = w.history
        # the row of the demand the point ends at: the last one measured there, which a closing
        # Jacobian re-measure (a stall restart's finite differences) may have followed
        at = [k for k, e in enumerate(h) if np.array_equal(e.V, w.e.V)]
        if at and h[at[-1]] is not w.e:
            h[at[-1]] = w.e
        converged = stop.reason == "converged"
        carry.G_cov = w.G_cov if converged else None
        reported = w.e if final is None else final
        reason, message = (stop.reason, stop.message) if stop.message else loop.stop_message(reported, stop.reason)
        if note is not None:
            message = f"{message} ({note})"
        if final is None:
            return PointResult(reported, converged, stop.iterations, reason, message, measured=w.raw)
        sol = stop.judgement.sol
        assert sol is not None  # a reported estimate is the pooled-fit solution
        with_G = self.stated_uncertainty(loop, num, carry.jacobian, final.meas, self.output_correlation(loop, num, w.e.meas),
                                         sol.fit, G_post)
        return PointResult(final, converged, stop.iterations, reason, message, applied=w.e,
                           solution_offset=float(sol.correction), uncertainty=float(sol.sigma), noise_uncertainty=float(sol.sigma_here),
                           uncertainty_with_jacobian=with_G, measured=w.raw)

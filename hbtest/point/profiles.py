"""Solver profiles: how a point iterates the actuator voltages (SPEC §2).

A profile is a class whose class attributes are its tuning constants and whose methods decide
windows, settling and steps on top of the measuring machinery of
:class:`hbtest.point.loop.PointLoop`. Profiles are registered by name in :data:`PROFILES`
(the sweep file's ``solver.profile``); a third profile is a new class, not new branches.

- :class:`PublishedProfile` (``published``): the authors' released method with their lab
  settings (``BroydenMethod.m``; the class docstring maps each rule to its lines) — a
  scaled-identity inverse Jacobian at the first point, carried along the sweep; Broyden's
  second update; steps limited relative to the point's first step; the force residual in N
  with their tolerance; reads of 10 periods, at least 30 of them, until two consecutive reads
  agree; a finite-difference re-measurement that replaces the update every 20th step when the
  residual rose; line search available but off as in their lab runs.
- :class:`HbtestProfile` (``hbtest``): the rig Jacobian ``G = d[U_P; F_P]/dV`` (finite
  differences at the first point, good-Broyden updates from every measured change that stands
  out of the noise, carried along the sweep) gives the residual Jacobian at any frequency
  exactly through the known ``D_N``; each point starts from the model prediction at the new
  frequency; on a rig that gives raw records and its modes, each evaluation fits the new
  steady state together with the known free decay right after the ramp
  (:mod:`hbtest.estimators`) instead of waiting, growing the record only until the residual
  stands out of the noise while far from the solution, and near it until the noise of every
  evaluation of the point pooled (:meth:`PointLoop.pool`, an affine fit over the voltages whose
  Jacobian becomes ``G``) meets the target; an iteration without progress stops as
  ``stalled`` after one Jacobian restart, saying what held it;
  otherwise windows are as short as the measured noise allows and the settling check
  extrapolates the geometric decay of the transient; stagnation triggers a finite-difference
  restart. A single-harmonic point is reported at the solution of its pooled affine fit
  (:meth:`HbtestProfile.solution_estimate`) and accepted when that estimate's stated standard
  uncertainty is within ``accuracy`` x |U|; the rig Jacobian's posterior is carried to the
  next point as its prior. A multi-harmonic point stops on accuracy as measured (the
  interface error a residual still implies).
"""

from __future__ import annotations

import numpy as np

from .. import harmonics, solver
from .base import PROFILES, SolverProfile, get_profile, register_profile
from .loop import Carry, Evaluation, Measured, PointLoop, PointOutcome, PointSettings
from .numerical import NumericalSide

__all__ = ["SolverProfile", "PublishedProfile", "HbtestProfile", "PROFILES", "get_profile", "register_profile"]


@register_profile
class PublishedProfile(SolverProfile):
    """The released method of the paper (``BroydenMethod.m`` of
    github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing), with the authors' lab
    settings as the class constants. Line numbers below refer to that file.

    - Residual: force form in newtons, ``R = D_N U_P + F_P - F_e`` (``ResidualSG``,
      l.875–921; moment rows divided by ``rotation_length``, see
      :meth:`PointLoop.force_residual`); converged when ``|R|_2 <= tolerance_n`` (l.78).
    - Evaluation (``ResidualSG``, l.923–950): reads of ``read_periods`` periods; at least
      ``min_reads``, then more until two consecutive reads differ by less than
      ``settle_change_n`` (2-norm of the residual change, N); the last read is the result.
      ``max_reads`` bounds a read loop that theirs leaves unbounded (ours must end).
    - Start (first point, no carried Jacobian): ``X0 = 0`` and ``R0 = -F_e`` without a
      measurement, inverse Jacobian ``H0 = (first_step_v / |R0|) I`` — the first step is
      ``first_step_v`` volts along the forcing coefficient. Later points start at the previous
      solution, measured once at the new frequency, with the carried ``H``.
    - Step (l.80–95): ``dX = -H R``; scaled by ``rate / max_change_rate`` when its 2-norm is
      more than ``max_change_rate`` times the norm of the point's first step.
    - Line search (l.96–135, ``line_search`` off in every released lab run): at steps 1, 11,
      21 … try the fractions ``line_search_fractions`` of the step, then measure again at the
      best (ties: the shortest).
    - Update (l.154–169): Broyden's second update of ``H``; except when the step count
      (``it``, which starts at 1) is a multiple of ``remeasure_every``, the residual is above
      ``remeasure_above`` × tolerance and has risen: then ``H = inv(J)`` of a forward
      finite-difference Jacobian with steps ``max(fd_min_step_v, fd_relative_step * X_i)``
      at the new voltages, replacing that update.
    - Counting: the paper counts evaluations of the residual, steps + 1
      (``iteration_count_offset``); ``iterations`` of a point is that count.
    Mains interference is not rejected (their box averages coefficients as they come).
    """

    name = "published"
    #: convergence tolerance on the 2-norm of the force residual [N] (their lab runs: 0.0016
    #: to 0.0056 N, 5-15 % of the forcing)
    tolerance_n = 0.0016
    #: one read (``ImposeVoltage`` + coefficients) spans this many forcing periods
    read_periods = 10
    #: reads before the settling check starts
    min_reads = 30
    #: settled when two consecutive reads differ by less than this [N]: l.932 says 0.001, the
    #: runs used 1.3 mN (the settle traces saved with 9 of the 10 lab files that have one)
    settle_change_n = 0.0013
    #: each read comes ``time_step * waiting_time`` s after the last (``ImposeVoltage``, l.221:
    #: 0.625 s, ten periods of the first frequency, in 9 of 13 lab files); the box's average
    #: then covers the last ``read_periods`` whole periods (phase-aligned), so the rest of the
    #: pause, rounded to whole periods, is not read
    read_pause_s = 0.625
    #: the residual's basis: forces at two transducers this far apart [m], ``f1 = T + M / l``,
    #: ``f2 = -M / l`` (``T2N'``, l.596-620 and l.846; ``rot = (u1 - u2) / 111.6 mm``, l.608-609)
    transducer_spacing_m = 0.1116
    #: bound of the read loop (not in theirs: their loop has no bound)
    max_reads = 100
    #: the inverse-Jacobian start gives a first step of this many volts
    first_step_v = -0.5
    #: a step longer than this multiple of the point's first step is scaled back to it
    max_change_rate = 1.0
    #: line search on/off, its period and trial fractions
    line_search = False
    line_search_every = 10
    line_search_fractions = (1 / 3, 2 / 3, 1.0)
    #: finite-difference re-measure: every n-th step count ...
    remeasure_every = 20
    #: ... when the residual is above this multiple of the tolerance and rose
    remeasure_above = 2.0
    #: finite-difference step ``max(fd_min_step_v, fd_relative_step * X_i)`` [V]
    fd_min_step_v = 0.05
    fd_relative_step = 0.15
    #: reported iterations = steps + this (their plots count residual evaluations)
    iteration_count_offset = 1

    # -- evaluation: their read loop -------------------------------------------------------
    min_settle_windows = min_reads

    def initial_window(self, s) -> int:
        return int(self.read_periods)

    def next_window(self, window, noise, transient_tol, s) -> int:
        return int(self.read_periods)

    def max_windows(self, s) -> int:
        return int(self.max_reads)

    def read_gap_periods(self, frequency_hz: float) -> float:
        """Whole periods waited unread before each read: the pause minus the averaged periods."""
        return float(max(0, round(self.read_pause_s * frequency_hz) - self.read_periods))

    def settle_distance(self, loop, num, prev, cur) -> float:
        """``norm(D(:,end-1) - D(:,end))`` with ``D = R`` in the transducer basis (l.921, l.931)."""
        change = loop.force_residual(num, cur[0]) - loop.force_residual(num, prev[0])
        return float(np.linalg.norm(self.transducer_forces(loop, change)))

    def settled(self, d, prev_d, noise, transient_tol) -> bool:
        return d < self.settle_change_n

    # -- the iteration ---------------------------------------------------------------------
    def residual(self, loop: PointLoop, num: NumericalSide, e: Evaluation) -> np.ndarray:
        """Their residual of an evaluation: the force form in N, in the transducer basis."""
        return self.transducer_forces(loop, loop.force_residual(num, e.meas))

    def transducer_forces(self, loop: PointLoop, r: np.ndarray) -> np.ndarray:
        """The packed force residual ``r`` (T rows, then M / rotation_length rows) as the
        front/back transducer forces ``[T + M / l; -M / l]`` [N] (``T2N'``, l.846)."""
        m = r[loop.p :] * (loop.s.rotation_length / self.transducer_spacing_m)
        return np.concatenate([r[: loop.p] + m, -m])

    def initial_inverse_jacobian(self, R0: np.ndarray, n_voltages: int) -> np.ndarray:
        """``(first_step_v / |R0|) I``: the first step ``-H0 R0`` is ``first_step_v`` volts
        long (on one coefficient when the forcing is on one)."""
        return np.eye(n_voltages, R0.size) * (self.first_step_v / max(float(np.linalg.norm(R0)), 1e-300))

    def limited(self, dX: np.ndarray, dX0: np.ndarray) -> np.ndarray:
        """Scale ``dX`` back to ``max_change_rate`` times the norm of the first step ``dX0``."""
        rate = float(np.linalg.norm(dX)) / max(float(np.linalg.norm(dX0)), 1e-300)
        return dX / (rate / self.max_change_rate) if rate > self.max_change_rate else dX

    def fd_steps(self, X: np.ndarray) -> np.ndarray:
        """Their finite-difference steps ``max(fd_min_step_v, fd_relative_step * X_i)``
        (signed ``X_i``: a negative coefficient gets the minimum step)."""
        return np.maximum(self.fd_min_step_v, self.fd_relative_step * X)

    def remeasure(self, loop: PointLoop, num: NumericalSide, e: Evaluation, R1: np.ndarray, history: list) -> np.ndarray:
        """``inv(J)`` of a forward finite-difference Jacobian around ``e`` (l.154–165)."""
        steps = self.fd_steps(e.V)
        J = np.empty((R1.size, e.V.size))
        for i, h in enumerate(steps):
            dv = np.zeros_like(e.V)
            dv[i] = h
            t = loop.evaluate(num, e.V + dv, kind="finite_difference")
            history.append(t)
            J[:, i] = (self.residual(loop, num, t) - R1) / h
        return np.linalg.inv(J) if J.shape[0] == J.shape[1] else np.linalg.pinv(J)

    def run(self, loop: PointLoop, num: NumericalSide, carry: Carry, history: list) -> PointOutcome:
        s = loop.s
        tol = self.tolerance_n
        e = None
        if carry.H is None and not carry.solutions and carry.start_V is None:
            X0 = np.zeros(loop.n_act * loop.p)
            zero = Measured(np.zeros_like(num.F_e), np.zeros_like(num.F_e))
            R0 = self.transducer_forces(loop, loop.force_residual(num, zero))
        else:
            X0 = loop.start_voltage(carry)
            e = loop.evaluate(num, X0, kind="start")
            history.append(e)
            X0, R0 = e.V, self.residual(loop, num, e)
        if carry.H is None:
            carry.H = self.initial_inverse_jacobian(R0, X0.size)
        H = carry.H
        err = [float(np.linalg.norm(R0))]
        dX0 = -H @ R0
        it = 1
        reason = "iteration_limit"
        while err[-1] > tol and it <= s.max_iterations:
            if e is not None and e.overrange:  # a safety stop of ours, not in theirs
                reason = "overrange"
                break
            full = self.limited(-H @ R0, dX0)
            best = 1.0
            if self.line_search and (it - 1) % self.line_search_every == 0:
                norms = []
                for a in self.line_search_fractions:
                    t = loop.evaluate(num, X0 + a * full, kind="line_search")
                    history.append(t)
                    norms.append(float(np.linalg.norm(self.residual(loop, num, t))))
                best = self.line_search_fractions[int(np.argmin(norms))]
            new = loop.evaluate(num, X0 + best * full)
            history.append(new)
            R1 = self.residual(loop, num, new)
            it += 1
            err.append(float(np.linalg.norm(R1)))
            if it % self.remeasure_every == 0 and err[-1] > self.remeasure_above * tol and err[-1] > err[-2]:
                H = self.remeasure(loop, num, new, R1, history)
            else:
                H = solver.bad_broyden_inverse_update(H, new.V - X0, R1 - R0)
            X0, R0, e = new.V, R1, new
        carry.H = H
        if e is None:  # no step was allowed (max_iterations = 0): measure where we are
            e = loop.evaluate(num, X0, kind="start")
            history.append(e)
        if reason != "overrange" and err[-1] <= tol:
            reason = "converged"
        return loop.outcome(num, e, reason == "converged", it - 1 + self.iteration_count_offset, history, reason)


@register_profile
class HbtestProfile(SolverProfile):
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
    pool's fitted one (``jacobian_from_pool``). A record grows until its residual stands
    ``far_snr`` noise standard deviations out (far from the solution) or its noise, pooled
    with what was measured before, meets the target (:meth:`noise_target`). No progress for
    ``stall_iterations`` iterations re-measures the Jacobian; after ``stall_restarts`` such
    restarts the point stops as ``stalled`` (:meth:`stall_message`)."""

    name = "hbtest"
    reject_mains = True
    #: fit steady state + the known free decay on the record right after the ramp (where the
    #: rig gives raw records and its modes) instead of waiting for the transient to die
    fit_transient = True
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
    far_noise_ceiling = 0.1
    #: ... in every test (True) or in multi-harmonic ones only (False: a single-harmonic test
    #: assumes a linear specimen, whose free modes the fit explains)
    far_ceiling_always = False
    #: a transient-fit record never exceeds this multiple of ``averaging_periods``: beyond
    #: it the point steps again and pools (measured on the bare-beam and paper sweeps, seeds
    #: 1-4: 2 -> 173 periods per point but FRF error up to 1.6 %; 3 -> 234, 0.80 %;
    #: 4 -> 291, 0.78 %; 8 -> 506, 0.69 %)
    max_record_factor = 3
    #: pooled estimate (:meth:`PointLoop.pool`): prior standard deviation of the rig Jacobian
    #: entries, a fraction of the largest entry of each row of the carried ``G``
    pool_prior_fraction = 0.3
    #: the rig Jacobian after each evaluation is the pooled fit's (a weighted multi-secant
    #: estimate over every evaluation of the point, the carried ``G`` as its prior)
    jacobian_from_pool = True
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
    #: propagate the outputs' noise with the correlation the sensor reduction gives them
    #: (:meth:`PointLoop.packed_output_correlation`) instead of as independent. Measured on
    #: bare-beam and paper seeds 1-4: independent -> 192 and 113 periods per point but FRF
    #: errors up to 1.00 % (the stated uncertainty too small); correlated -> 217 and 122, 0.70 %
    correlated_outputs = True
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
    #: report each point at the solution of its pooled affine fit (:meth:`solution_estimate`)
    #: and accept it when that estimate's stated uncertainty meets ``accuracy`` (with
    #: ``accuracy > 0``), instead of iterating until the residual itself is that small
    solve_pool = True
    #: ... the estimate may lie this fraction of ``|U|`` from the last measured displacement
    #: (farther, the point steps again: the affine fit is trusted for small moves only)
    max_correction_fraction = 0.02
    #: ... Newton steps on the affine model (one is exact for a linear numerical side)
    solution_newton_steps = 4
    #: ... the pooled residual noise an evaluation aims at, as a fraction of the level the
    #: accuracy needs (the estimate's noise is that level's: its stated uncertainty meets
    #: ``accuracy`` at one standard deviation with margin for the extrapolation)
    solution_noise_fraction = 0.95

    def initial_window(self, s: PointSettings) -> int:
        return int(s.min_window_periods)

    def first_record(self, loop) -> int:
        return int(loop.s.min_window_periods)

    def record_periods(self, loop, total, noise, norm, transient_tol, noise_target):
        """Grow until the residual noise meets the target (``noise_target`` or the window
        rule's fraction of ``transient_tol``), or until the residual stands ``far_snr`` noise
        standard deviations out (far from the solution), within the window bounds."""
        target = self.noise_fraction_of_tolerance * transient_tol if noise_target is None else noise_target
        ceiling = self.far_noise_ceiling * loop.s.tolerance if self.far_ceiling_always or not self.single_harmonic(loop) else np.inf
        target = max(target, min(norm / self.far_snr, ceiling))
        want = total * (noise / target) ** 2
        return int(np.clip(np.ceil(want), loop.s.min_window_periods, self.max_record_factor * loop.s.averaging_periods))

    def next_window(self, window, noise, transient_tol, s):
        # noise variance scales as 1/n: size the window so the noise is the wanted fraction
        want = window * (noise / (self.noise_fraction_of_tolerance * transient_tol)) ** 2
        return int(np.clip(np.ceil(want), s.min_window_periods, self.max_window_factor * s.averaging_periods))

    def settled(self, d, prev_d, noise, transient_tol):
        limit = max(transient_tol, self.settle_sigmas * np.sqrt(2.0) * noise)
        ok = d < limit
        if ok and prev_d is not None and prev_d > 0:
            # geometric decay: what is left of the transient is about d q / (1 - q)
            q = min(d / prev_d, self.max_decay_ratio)
            ok = d * q / (1 - q) < limit
        return ok

    def extrapolated(self, carry: Carry, f: float, single: bool = True) -> tuple[np.ndarray, np.ndarray]:
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

    def point_prior(self, carry: Carry):
        """Prior covariance of the rig Jacobian's rows for this point's pools: the previous
        point's posterior (``carry.G_cov``) grown by ``jacobian_drift`` times each row's
        largest entry (what a frequency step may change), or None (the entrywise
        ``pool_prior_fraction`` prior) when there is none."""
        if carry.G_cov is None or carry.G is None or self.jacobian_drift is None:
            return None
        m = carry.G.shape[1]
        q = self.jacobian_drift * np.max(np.abs(carry.G), axis=1)
        return carry.G_cov / self.jacobian_forgetting + np.einsum("i,ab->iab", q**2, np.eye(m))

    def refresh_jacobian(self, loop: PointLoop, carry: Carry) -> bool:
        """Whether this point re-measures the carried rig Jacobian
        (``jacobian_refresh_points``): every that many solved points of a single-harmonic test."""
        n = len(carry.solutions)
        return bool(self.jacobian_refresh_points and self.single_harmonic(loop) and carry.G is not None
                    and n > 0 and n % self.jacobian_refresh_points == 0)

    def predict(self, loop: PointLoop, num: NumericalSide, carry: Carry) -> np.ndarray:
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
        J = loop.residual_jacobian_from_G(num, carry.G, at=Measured(U, F))
        return loop.clip(V_prev + solver.limit_step(solver.newton_step(J, vec), self.prediction_step_factor * loop.s.max_step_v))

    def error_estimate(self, loop: PointLoop, num: NumericalSide, G: np.ndarray, e: Evaluation) -> tuple[float, float, np.ndarray]:
        """Newton step ``dV = -J_R^+ R`` and the interface-displacement error it implies,
        ``e_U = G_U J_R^+ R = (D_N + D_P)^-1 D_N R`` (weighted norm, metres), plus the noise
        amplification ``|G_U J_R^+|`` from residual to displacement error."""
        J = loop.residual_jacobian_from_G(num, G, at=e.meas)
        dV = solver.newton_step(J, e.vector)
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
        ``P = dR/dY``, ``J = P G``, the outputs correlated as the sensor reduction makes them
        (``correlated_outputs``); ``correction`` ``|U* - U_e|``; ``sigma_here`` the same
        propagation of the pooled noise at the last demand (no extrapolation: what more
        averaging buys). None when ``V*`` is beyond the voltage limit or the model's residual
        does not vanish."""
        est, V = e, e.V.copy()
        for _ in range(self.solution_newton_steps):
            J = loop.residual_jacobian_from_G(num, G, at=est.meas)
            V = V + solver.newton_step(J, est.vector)
            if not np.array_equal(loop.clip(V), V):
                return None
            est, _ = loop.pool(num, evaluations, prior, self.pool_prior_fraction, at=V, prior_cov=prior_cov)
            if est.norm <= 1e-9 * max(e.norm, loop.s.tolerance):
                break
        if est.norm > 1e-3 * min(loop.s.tolerance, max(e.norm, np.finfo(float).tiny / 1e-3)):
            return None  # Newton on the fit did not reach its solution (a nonlinear side far off)
        n = 2 * loop.p
        C = self.output_correlation(loop, num, e.meas)
        sigma = self.displacement_uncertainty(loop, num, G, est.meas, C)
        # the same propagation with the noise of the estimate at the last demand: what more
        # averaging there buys (the extrapolation's share falls as the point closes in)
        sigma_here = self.displacement_uncertainty(loop, num, G, e.meas, C)
        return est, sigma, float(np.linalg.norm(est.Y[:n] - e.Y[:n])), sigma_here

    def output_correlation(self, loop: PointLoop, num: NumericalSide, meas) -> np.ndarray:
        """Correlation of the packed rig outputs' errors: as the sensor reduction of ``meas``
        makes them (lasers -> u, theta; gauges -> T, M: :meth:`PointLoop.packed_output_correlation`)
        with ``correlated_outputs``, else (or without raw channels) independent."""
        C = loop.packed_output_correlation(num, meas) if self.correlated_outputs else None
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
        n = 2 * loop.p
        var_Y = loop.packed_output_variance(num, meas)
        P = loop.residual_jacobian_from_G(num, np.eye(var_Y.size), at=meas)
        Jp = np.linalg.pinv(P @ G, rcond=1e-10)
        M = np.eye(n, var_Y.size) - G[:n] @ Jp @ P
        sd = np.sqrt(var_Y)
        S = correlation * np.outer(sd, sd)
        var = np.trace(M @ S @ M.T)
        if G_cov is not None:
            # M(G + dG) = M (I - A + A^2) + O(dG^3), A = dG W, W = J^+ P; rows of dG
            # independent with covariances C_i: E[A S A^T] = diag_i tr(W S W^T C_i) and
            # E[A^2] = Q W with Q_i = W[:, i]^T C_i
            W = Jp @ P
            B = W @ S @ W.T
            var += float(np.einsum("i,iab,ba->", np.einsum("ji,ji->i", M, M), G_cov, B))
            Q = np.einsum("ai,iab->ib", W, G_cov)
            var += 2.0 * float(np.trace(M @ Q @ W @ S @ M.T))
        return float(np.sqrt(max(var, 0.0)))

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

    def run(self, loop: PointLoop, num: NumericalSide, carry: Carry, history: list) -> PointOutcome:
        """Converged when ``|R| < tolerance``, every solved harmonic is balanced on its own
        scale (:meth:`harmonic_limits`, with ``harmonic_tolerance > 0``) and, with
        ``accuracy > 0``, when the estimated interface-displacement error is within
        ``accuracy * |U_P|``; settling and noise targets follow the residual level that this
        requires."""
        s = loop.s
        solve = self.solve_pool and s.accuracy > 0 and self.single_harmonic(loop)
        predicted = bool(carry.solutions) and carry.G is not None
        V = self.predict(loop, num, carry) if predicted else loop.start_voltage(carry)
        r_target = carry.r_target or s.tolerance
        raw = loop.evaluate(num, V, self.settle_fraction * r_target, kind="start")
        history.append(raw)
        note = None
        if raw.overrange and predicted and self.restart_on_overrange:
            # the demand extrapolated in frequency drove a sensor to its full scale: start
            # again from the previous point's solution (the clipped record is kept in the
            # history, out of every fit)
            note = (f"the predicted start drove {', '.join(raw.overrange)} over range; "
                    f"restarted from the previous point's demand")
            raw = loop.evaluate(num, loop.start_voltage(carry), self.settle_fraction * r_target, kind="start")
            history.append(raw)
        refresh = self.refresh_jacobian(loop, carry)
        if carry.G is None:
            _, carry.G = loop.finite_differences(num, raw, history, self.settle_fraction * r_target)
        # the Jacobian prior of every pool of this point
        prior, prior_cov = carry.G, (self.point_prior(carry) if self.single_harmonic(loop) else None)
        G_cov = prior_cov
        if refresh:
            # finite differences around the start, pooled with the carried posterior: they
            # measure the directions the earlier points' evaluations did not move
            loop.finite_differences(num, raw, history, self.settle_fraction * r_target)
            _, carry.G, _ = loop.pool(num, history, prior, self.pool_prior_fraction, prior_cov=prior_cov, posterior=True)
        e, _ = loop.pool(num, [h for h in history if np.array_equal(h.V, raw.V)] or [raw], carry.G, self.pool_prior_fraction)
        best, best_noise = e.norm, e.noise
        stalled, restarts, since = 0, 0, 0
        reason, message = "iteration_limit", None
        it = 0
        final = None
        while True:
            err, amp, dV = self.error_estimate(loop, num, carry.G, e)
            U = loop.displacement_amplitude(e)
            sol = None
            if solve and e.norm < s.tolerance:
                sol = self.solution_estimate(loop, num, history, prior, prior_cov, carry.G, e)
                if sol is not None and sol[3] > 0 and e.noise > 0:
                    amp = sol[3] / e.noise  # displacement noise of the estimate per unit residual noise
            if sol is not None and sol[3] > 0:
                # the residual noise at which the estimate's own noise meets the accuracy
                r_target = min(s.tolerance, s.accuracy * U / amp, self.harmonic_target(loop, num, e))
            else:
                r_target = min(self.residual_target(s, s.accuracy * U, amp), self.harmonic_target(loop, num, e))
            carry.r_target = r_target
            # without the pooled-fit rule (multi-harmonic, or accuracy 0): the measured state is
            # converged when the error its residual still implies is within the accuracy
            ok = (not solve and e.norm < s.tolerance and (s.accuracy <= 0 or (err <= s.accuracy * U and e.settled))
                  and self.harmonics_balanced(loop, num, e))
            final = None
            if not ok and sol is not None:
                # or the pooled fit's solution next to it is known well enough
                ok = (e.settled and self.harmonics_balanced(loop, num, e)
                      and sol[1] <= s.accuracy * U and sol[2] <= self.max_correction_fraction * U)
                final = sol[0] if ok else None
            if e.overrange:
                reason = "overrange"
                break
            if ok:
                reason = "converged"
                break
            if it >= s.max_iterations:
                break
            it += 1
            step = solver.limit_step(dV, s.max_step_v)
            prev_raw = raw
            # what is known at the solution: the estimate there (its noise and extrapolation, in
            # residual units), or the pooled noise at the last demand when there is none yet
            known = sol[1] / amp if sol is not None and amp > 0 else e.noise
            raw = loop.evaluate(num, e.V + step, self.settle_fraction * r_target, noise_target=self.noise_target(r_target, known, solve))
            history.append(raw)
            dVm, dY = raw.V - prev_raw.V, raw.Y - prev_raw.Y
            if solver.informative(dY, max(prev_raw.noise, raw.noise) / np.sqrt(dY.size)):
                carry.G = solver.good_broyden_update(carry.G, dVm, dY)
            # prior mean: in a linear (single-harmonic) test the point's own start Jacobian, so
            # the pool counts each measurement once; in a multi-harmonic one (a nonlinear
            # specimen) the Jacobian after the latest secant, the local slope. Its covariance:
            # the carried posterior's (:meth:`point_prior`) or the entrywise one
            if not solve:
                prior = carry.G
            e, G_fit, G_cov = loop.pool(num, history, prior, self.pool_prior_fraction, prior_cov=prior_cov, posterior=True)
            if self.jacobian_from_pool:
                carry.G = G_fit
            since += 1
            # progress: the residual falls, or — while the level needed is within reach of
            # averaging (``averaging_reach``) — the pooled noise does
            reach = r_target >= self.averaging_reach * e.noise
            if e.norm < self.progress_fraction * best or (reach and e.noise < self.progress_fraction * best_noise):
                best, best_noise, stalled = min(best, e.norm), min(best_noise, e.noise), 0
            else:
                stalled += 1
            if stalled >= self.stall_iterations:
                if restarts >= self.stall_restarts:
                    reason, message = "stalled", self.stall_message(loop, num, e, r_target, since)
                    break
                # stagnation: re-measure the rig Jacobian around the current voltages
                _, carry.G = loop.finite_differences(num, raw, history, self.settle_fraction * r_target)
                prior, prior_cov = carry.G, None
                restarts += 1
                stalled = 0
                best, best_noise = e.norm, e.noise
        # the fitted Jacobian's posterior at the reported solution, from the raw evaluations
        # (before the last is replaced by the pooled estimate below)
        G_post = None
        if final is not None:
            _, _, G_post = loop.pool(num, history, prior, self.pool_prior_fraction, at=final.V, prior_cov=prior_cov, posterior=True)
        if history and history[-1] is not e and np.array_equal(history[-1].V, e.V):
            # the history's last evaluation carries the pooled estimate the point ends with
            # (its own rig time and windows unchanged)
            history[-1] = e
        # the point's posterior Jacobian is the next point's prior (:meth:`point_prior`)
        carry.G_cov = G_cov if reason == "converged" else None
        out = loop.outcome(num, e if final is None else final, reason == "converged", it, history, reason, message)
        if note is not None:
            out.message = f"{out.message} ({note})"
        if final is not None:
            out.applied, out.solution_offset, out.uncertainty, out.noise_uncertainty = e, float(sol[2]), float(sol[1]), float(sol[3])
            out.uncertainty_with_jacobian = self.displacement_uncertainty(loop, num, carry.G, final.meas, self.output_correlation(loop, num, e.meas), G_post)
        return out

"""Solver profiles: how a point iterates the actuator voltages (SPEC §2).

A profile is a class whose class attributes are its tuning constants and whose methods decide
windows, settling and steps on top of the measuring machinery of
:class:`hbtest.point.loop.PointLoop`. Profiles are registered by name in :data:`PROFILES`
(the sweep file's ``solver.profile``); a third profile is a new class, not new branches.

- :class:`PublishedProfile` (``published``): the released method — inverse Jacobian by
  finite differences at the first point, carried along the sweep; Broyden's second update;
  steps scaled to ``max_step_v``; a three-point line search every ``line_search_every``-th
  iteration; a finite-difference re-measurement every ``remeasure_every`` iterations when
  ``|R| > remeasure_above * tol`` and rising; fixed ``averaging_periods`` windows repeated
  until the change between windows is below the transient tolerance; each point starts from
  the previous solution.
- :class:`HbtestProfile` (``hbtest``): the rig Jacobian ``G = d[U_P; F_P]/dV`` (finite
  differences at the first point, good-Broyden updates from every measured change that stands
  out of the noise, carried along the sweep) gives the residual Jacobian at any frequency
  exactly through the known ``D_N``; each point starts from the model prediction at the new
  frequency; windows are as short as the measured noise allows; the settling check
  extrapolates the geometric decay of the transient; stagnation triggers a finite-difference
  restart; it also stops on accuracy (the interface error a residual still implies).
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
    name = "published"
    #: a line search (trial fractions below) at every n-th iteration
    line_search_every = 10
    line_search_fractions = (1 / 3, 2 / 3, 1.0)
    #: re-measure the Jacobian by finite differences every n-th iteration ...
    remeasure_every = 20
    #: ... when the residual is above this multiple of the tolerance and rising
    remeasure_above = 2.0

    def run(self, loop: PointLoop, num: NumericalSide, carry: Carry, history: list) -> PointOutcome:
        s = loop.s
        V = loop.start_voltage(carry)
        e = loop.evaluate(num, V)
        history.append(e)
        if carry.H is None:
            JR, _ = loop.finite_differences(num, e, history)
            carry.H = np.linalg.pinv(JR)
            e = loop.evaluate(num, V)
            history.append(e)
        norms = [e.norm]
        reason = "iteration_limit"
        it = 0
        while True:
            if e.overrange:
                reason = "overrange"
                break
            if e.norm < s.tolerance:
                reason = "converged"
                break
            if it >= s.max_iterations:
                break
            it += 1
            if it % self.remeasure_every == 0 and e.norm > self.remeasure_above * s.tolerance and len(norms) > 1 and norms[-1] > norms[-2]:
                JR, _ = loop.finite_differences(num, e, history)
                carry.H = np.linalg.pinv(JR)
            step = solver.limit_step(-carry.H @ e.vector, s.max_step_v)
            if it % self.line_search_every == 0:
                trials = []
                for a in self.line_search_fractions:
                    t = loop.evaluate(num, e.V + a * step)
                    history.append(t)
                    trials.append(t)
                new = min(trials, key=lambda t: t.norm)
            else:
                new = loop.evaluate(num, e.V + step)
                history.append(new)
            dV, dR = new.V - e.V, new.vector - e.vector
            carry.H = solver.bad_broyden_inverse_update(carry.H, dV, dR)
            e = new
            norms.append(e.norm)
        return loop.outcome(num, e, reason == "converged", it, history, reason)


@register_profile
class HbtestProfile(SolverProfile):
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

    def initial_window(self, s: PointSettings) -> int:
        return int(s.min_window_periods)

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

    def predict(self, loop: PointLoop, num: NumericalSide, carry: Carry) -> np.ndarray:
        """Voltages at the new frequency from the last solution, its measured rig output and
        the rig Jacobian, with the exact ``D_N`` of the new frequency: the linear rig model
        ``Y(V) = Y_prev + G (V - V_prev)`` solved for ``R = 0``."""
        _, V_prev, Y = carry.solutions[-1]
        n = 2 * loop.p
        scaleY = loop.output_scale(num)
        U = harmonics.unpack((Y[:n] / scaleY[:n]).reshape(2, loop.p), loop.orders)
        F = harmonics.unpack((Y[n:] / scaleY[n:]).reshape(2, loop.p), loop.orders)
        _, _, vec, _ = loop.residual(num, Measured(U, F))
        J = loop.residual_jacobian_from_G(num, carry.G)
        return loop.clip(V_prev + solver.limit_step(solver.newton_step(J, vec), self.prediction_step_factor * loop.s.max_step_v))

    def error_estimate(self, loop: PointLoop, num: NumericalSide, G: np.ndarray, e: Evaluation) -> tuple[float, float, np.ndarray]:
        """Newton step ``dV = -J_R^+ R`` and the interface-displacement error it implies,
        ``e_U = G_U J_R^+ R = (D_N + D_P)^-1 D_N R`` (weighted norm, metres), plus the noise
        amplification ``|G_U J_R^+|`` from residual to displacement error."""
        J = loop.residual_jacobian_from_G(num, G)
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

    def run(self, loop: PointLoop, num: NumericalSide, carry: Carry, history: list) -> PointOutcome:
        """Converged when ``|R| < tolerance`` and, with ``accuracy > 0``, when the estimated
        interface-displacement error is within ``accuracy * |U_P|``; settling and noise
        targets follow the residual level that this requires."""
        s = loop.s
        if carry.solutions and carry.G is not None:
            V = self.predict(loop, num, carry)
        else:
            V = loop.start_voltage(carry)
        r_target = carry.r_target or s.tolerance
        e = loop.evaluate(num, V, self.settle_fraction * r_target)
        history.append(e)
        if carry.G is None:
            _, carry.G = loop.finite_differences(num, e, history, self.settle_fraction * r_target)
        best = e.norm
        stalled = 0
        reason = "iteration_limit"
        it = 0
        while True:
            err, amp, dV = self.error_estimate(loop, num, carry.G, e)
            U = loop.displacement_amplitude(e)
            r_target = self.residual_target(s, s.accuracy * U, amp)
            carry.r_target = r_target
            ok = e.norm < s.tolerance and (s.accuracy <= 0 or (err <= s.accuracy * U and e.settled))
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
            new = loop.evaluate(num, e.V + step, self.settle_fraction * r_target)
            history.append(new)
            dVm, dY = new.V - e.V, new.Y - e.Y
            if solver.informative(dY, max(e.noise, new.noise) / np.sqrt(dY.size)):
                carry.G = solver.good_broyden_update(carry.G, dVm, dY)
            if new.norm < self.progress_fraction * best:
                best, stalled = new.norm, 0
            else:
                stalled += 1
            e = new
            if stalled >= self.stall_iterations:
                # stagnation: re-measure the rig Jacobian around the current voltages
                _, carry.G = loop.finite_differences(num, e, history, self.settle_fraction * r_target)
                stalled = 0
                best = e.norm
        return loop.outcome(num, e, reason == "converged", it, history, reason)

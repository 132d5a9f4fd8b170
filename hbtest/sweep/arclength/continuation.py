"""Pseudo-arclength continuation of the hybrid test through folds, on the rig.

The hybrid test's response curve is the set of ``(V, f)`` — packed actuator voltages
(:mod:`hbtest.method.harmonics` convention, actuators concatenated) [V] and forcing frequency [Hz] —
where the measured force-form residual vanishes. :class:`HybridArclength` traces it with a
predictor (along the tangent) and a corrector (Newton on the residual and the arclength
hyperplane together, :func:`hbtest.numerical.continuation.bordered_step`); every residual is
*measured*: the demand ``(V, f)`` is applied through :meth:`hbtest.point.PointLoop.evaluate`,
so the solver cannot tell a twin from hardware. Unlike a frequency step, this passes the folds
of a hardening or softening response and measures the unstable branch between them (the
Fourier-domain iteration holds it: the rig never sees the instability of the emulated
structure's time response).

Coordinates and units. The curve lives in ``z = (V / v_scale, f / f_scale)`` with ``v_scale``
the rig's voltage limit [V] and ``f_scale`` the width of the band [Hz]: both unknowns of order
one over the curve, so the arclength is well conditioned and fixed for a whole run (a resumed
run measures the same arclength). The residual is the force form
``r = (F_P - F_P*(U_P; f)) / d_scale`` (moment rows divided by ``rotation_length``, as
:meth:`PointLoop.force_residual`; ``d_scale`` the largest entry of ``|D_N|`` at the first
frequency, so ``r`` is in metres), whatever ``test.residual`` the point loop uses.

Jacobian ``dr/dz`` (physically split, as the hbtest profile):

- the rig part ``dY/dz`` (``Y = [U_P; F_P]`` packed and weighted as
  :meth:`PointLoop.output_scale`): ``dY/dV`` by finite differences at the first point (the
  point loop's own start), ``dY/df`` by one finite difference in frequency there
  (``frequency_fd_fraction`` of the band), then good-Broyden updates of the whole
  ``[dY/dV, dY/df]`` from every pair of successive evaluations whose change stands out of the
  noise (a secant in voltage *and* frequency); within a corrector, the fit of the pooled
  evaluations (below) replaces it, as the hbtest profile's pooled Jacobian does; re-measured
  when a corrector fails;
- the numerical part analytic: ``dr/dU_P = -dF_P*/dU`` from the AFT derivative of the
  numerical substructure (:meth:`hbtest.point.NumericalSide.force_residual_jacobian`),
  ``dr/dF_P = I``; the explicit frequency dependence of the model ``dr/df|_Y`` by a central
  difference in frequency of the numerical side (a model, no rig time).

Convergence of a point: the point loop's rules — displacement-form norm below
``test.tolerance``, every solved harmonic balanced on its own scale (the hbtest profile's
``harmonics_balanced``), and with ``test.accuracy`` the interface-displacement error the
residual still implies within ``accuracy * |U_P|``; that error is the displacement change of
the bordered Newton correction onto the curve (regular at a fold, where the fixed-frequency
Jacobian is singular); and, with a pooling profile, a path pool of at least ``m + 2``
evaluations (``m`` the coordinates of ``(V, f)``: a fit that checks itself,
:meth:`HybridArclength._pool_checks`).

Pooling (the path pool): the twin, like the lab's rig, does not repeat — each evaluation
scatters about the rig's affine response by a random offset of its own (a demand scatter of
about 1 um here, of the order of the accuracy a point needs), so no single evaluation, and no
corrector's handful of them (at most 8 against the 5 coordinates of ``(V, f)``: at most 2
degrees of freedom for a scatter), judges a point. Every evaluation the trace holds is kept
with its scaled demand ``z_j`` (:attr:`HybridArclength.bank`: the first point's, the
finite differences, every corrector's, the failed attempts' too). Each judgement pools,
at the corrector's newest evaluation ``z``, those within ``pool_radius * h`` of it (``h`` the
step; at least ``pool_min_radius``; nearest ``pool_max``) by the affine model ``Y_j = A (z_j - z) + c + b_j + e_j``
(:meth:`PointLoop.pool`, prior ``A ~ N(Gz, (pool_prior_fraction * max|row|)^2)``), ``e_j``
the read noise of the record (its stated variance ``s_j^2``), ``b_j ~ N(0, tau^2)`` the
between-evaluation offset with ``tau^2`` per output the Paule-Mandel estimate from the misfit
of all of them, ``sum_j res_j^2 / (s_j^2 + tau^2) = J - 1 - m`` — the single-harmonic pool's
random-effects rule (:func:`hbtest.method.estimators.pool_affine`), estimated only where the
misfit is beyond the read noise's 1e-6 tail (a rig that repeats pools as without it) and
averaged only up to the profile's ``between_limit`` (beyond it the model is failing). The
estimate ``c`` (variance from weights ``1 / (s_j^2 + tau^2)``) is the point's; the fitted
``A`` replaces ``Gz``. Evaluations the fit drops as outliers mean the affine model does not
hold over the radius: the point's record says so and the next step is at most
``min_factor`` of this one (the radius shrinks with it, down to ``pool_min_radius``: a pool
of the few evaluations a smaller one holds bends the Jacobian). Each record asks for the noise that,
pooled, meets the goal (:meth:`_noise_target`, from the pooled noise, the scatter included:
a longer record does not average a scatter, the records are capped by ``max_record_factor``).

Step control: the next step is ``h * turn_angle / angle`` where ``angle`` is the turn of the
tangent over the last step (the curvature of the traced branch times the step), within
``[min_factor, max_factor]`` and ``[min_step, max_step]`` — dense at the folds, sparse on
the flanks. A corrector that fails within ``max_corrector_iterations`` halves the step and
re-measures the rig Jacobian at the last point (its evaluations join the pool); below
``min_step`` the trace stops (stalled). A corrector whose next demand would leave the trust
region (``corrector_trust`` steps from the prediction, at least ``corrector_trust *
pool_min_radius``) is refused: the step halved, the rig Jacobian before its pool kept (a pool
that bent it asked for the move), and the point's record says so. The tangent at a new point is the null vector of its
measured Jacobian unless it is more than ``tangent_chord_limit`` from the chord of the step
that reached it (a chord of at least ``tangent_chord_min``) (:func:`chord_checked_tangent`: a Jacobian the noise bent, on a curve that
turns about ``turn_angle`` a step): then the chord is the tangent, and the point's record
says so.
Folds: where ``df/ds`` (the tangent's frequency component) changes sign and stays changed for
``fold_confirm_points`` points while the trace goes back by ``fold_retreat`` of the band (a
measured tangent flickers near a fold); the fold frequency is
the extreme frequency reached since the previous fold — of the measured points and of the
extremum of the cubic Hermite interpolant of ``f(s)`` between two points whose tangents
straddle it (:func:`hermite_extremum`). The trace stops when the frequency
leaves the band or the slots run out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...errors import RigTrip
from ...method import broyden
from ...numerical.continuation import bordered_step, bordered_tangent
from ...point import HbtestCarry, HbtestProfile, NumericalSide, PointLoop, PointOutcome, PointResult
from ...point.base import PoolingProfile
from .settings import ArclengthSettings

__all__ = ["HybridArclength", "TracedPoint", "chord_checked_tangent", "hermite_extremum"]

#: each evaluation settles to this fraction of the residual level the point needs: the hbtest
#: profile's own constant (one declaration)
SETTLE_FRACTION = HbtestProfile.settle_fraction


@dataclass
class TracedPoint:
    """One point of the traced curve: the point loop's :class:`~hbtest.point.PointOutcome`
    (frequency, final evaluation, history of every rig evaluation spent on it), the scaled
    state ``z`` and unit tangent ``tangent`` (``tangent[-1]`` is ``df/ds`` scaled), the
    arclength ``step`` that reached it, and ``fold_hz``: the fold met between the previous
    point and this one (None if none)."""

    outcome: PointOutcome
    z: np.ndarray
    tangent: np.ndarray
    step: float
    fold_hz: float | None = None
    #: the interface-displacement error the accepted residual still implies (bordered Newton
    #: correction onto the curve), relative to |U_P| (NaN for the point loop's first point)
    estimated_error: float = float("nan")


def hermite_extremum(f0: float, f1: float, d0: float, d1: float, ds: float) -> float:
    """Extremum of the cubic Hermite interpolant ``f(s)`` on ``[0, ds]`` with ``f(0) = f0``,
    ``f(ds) = f1``, ``f'(0) = d0``, ``f'(ds) = d1`` where ``d0`` and ``d1`` differ in sign (a
    fold between the two points): the root of the quadratic ``f'`` in ``[0, ds]``."""
    # f(x ds) = h00 f0 + h10 ds d0 + h01 f1 + h11 ds d1, x in [0, 1]
    a, b = ds * d0, ds * d1
    # f'(x) ds = 6(x^2 - x)(f0 - f1) + (3x^2 - 4x + 1) a + (3x^2 - 2x) b
    c2 = 6 * (f0 - f1) + 3 * a + 3 * b
    c1 = -6 * (f0 - f1) - 4 * a - 2 * b
    c0 = a
    roots = np.roots([c2, c1, c0]) if abs(c2) > 1e-300 else np.array([-c0 / c1])
    x = [float(r.real) for r in np.atleast_1d(roots) if abs(r.imag) < 1e-12 and -1e-9 <= r.real <= 1 + 1e-9]
    if not x:  # degenerate: the linear interpolation of f'
        x = [d0 / (d0 - d1)]
    x = min(x, key=lambda v: abs(v - d0 / (d0 - d1)))
    h00, h10, h01, h11 = 2 * x**3 - 3 * x**2 + 1, x**3 - 2 * x**2 + x, -2 * x**3 + 3 * x**2, x**3 - x**2
    return float(h00 * f0 + h10 * a + h01 * f1 + h11 * b)


def chord_checked_tangent(z0: np.ndarray, z: np.ndarray, t: np.ndarray, limit: float,
                          min_chord: float = 0.0, t0: np.ndarray | None = None) -> tuple[np.ndarray, float | None]:
    """The tangent at ``z`` (unit ``t``, from the measured Jacobian) checked against the chord
    from the previous point ``z0`` (scaled coordinates): on a smooth curve the two differ by
    about half the turn of the step, which the step control keeps near ``turn_angle``; a
    tangent more than ``limit`` [rad] from the chord comes from a Jacobian the noise bent,
    not from the curve, and the unit chord replaces it. A chord shorter than ``min_chord`` is
    no evidence (the points' own position noise turns it): ``t`` is checked against the
    previous tangent ``t0`` instead (a curve that turns ``turn_angle`` over steps of about
    ``min_chord`` and more does not turn by ``limit`` over a shorter one) and ``t0`` replaces
    it beyond ``limit`` (kept as it is without ``t0``). Returns (tangent, the rejected
    tangent's angle to what replaced it [rad], or None when ``t`` is kept)."""
    chord = np.asarray(z, dtype=float) - np.asarray(z0, dtype=float)
    length = float(np.linalg.norm(chord))
    if not length > 0 or length < min_chord:
        if t0 is None:
            return t, None
        angle = float(np.arccos(np.clip(float(t0 @ t), -1.0, 1.0)))
        return (t, None) if angle <= limit else (np.array(t0, dtype=float), angle)
    chord = chord / length
    angle = float(np.arccos(np.clip(float(chord @ t), -1.0, 1.0)))
    if angle <= limit:
        return t, None
    return chord, angle


class HybridArclength:
    """Pseudo-arclength continuation of the hybrid test on the rig behind ``loop`` (see the
    module docstring). ``band_hz = (start, stop)``; ``direction`` +1 traces from ``start``
    upwards, -1 from ``stop`` downwards. Use :meth:`start` (or :meth:`resume`), then
    :meth:`step` until :attr:`finished`."""

    def __init__(self, loop: PointLoop, band_hz: tuple[float, float], direction: int = 1, settings: ArclengthSettings = ArclengthSettings()):
        self.loop = loop
        self.lo, self.hi = sorted(float(b) for b in band_hz)
        self.direction = 1 if direction >= 0 else -1
        self.s = settings
        self.v_scale = float(loop.voltage_limit) if loop.voltage_limit and np.isfinite(loop.voltage_limit) else 1.0
        self.f_scale = self.hi - self.lo
        self.n_v = loop.n_act * loop.p
        self.d_scale: float | None = None
        self.Gz: np.ndarray | None = None
        self.z = self.t = self.e = None
        self.h = settings.initial_step
        self.r_target = loop.s.tolerance
        self.finished = False
        self.pending: list = []  # evaluations spent before the next point (Jacobian re-measures)
        self.pending_t0 = None
        self.last_error = float("nan")  # the last judged evaluation's implied error / |U_P|
        self._last_num: NumericalSide | None = None
        self.branch_sign = self.direction  # sign of df/ds on the current branch
        self.extreme: float | None = None  # extreme frequency since the last fold [Hz]
        self.against = 0  # points in a row whose df/ds opposes the branch
        self.bank: list = []  # the path pool: (scaled demand z, evaluation) of every evaluation held
        self.not_affine = 0  # evaluations the last pools of this step dropped as outliers
        self.trust_notes: list = []  # this point's correctors that left it (their distance in steps)

    # -- coordinates ---------------------------------------------------------------------
    def scale(self, V: np.ndarray, f: float) -> np.ndarray:
        return np.concatenate([np.asarray(V, dtype=float) / self.v_scale, [f / self.f_scale]])

    def unscale(self, z: np.ndarray) -> tuple[np.ndarray, float]:
        return z[:-1] * self.v_scale, float(z[-1] * self.f_scale)

    def numerical_side(self, f: float) -> NumericalSide:
        lp = self.loop
        return NumericalSide.build(lp.ns, lp.force_vector, f, lp.orders)

    # -- residual and Jacobian -----------------------------------------------------------
    def residual(self, num: NumericalSide, meas) -> np.ndarray:
        """Force-form residual ``r`` [m] of a measurement (module docstring)."""
        return self.loop.force_residual(num, meas) / self.d_scale

    def jacobian(self, num: NumericalSide, e) -> np.ndarray:
        """``dr/dz`` at evaluation ``e``: the rig part through ``Gz``, the numerical part
        analytic, plus the model's explicit ``dr/df``."""
        lp = self.loop
        n = 2 * lp.p
        scaleY = lp.output_scale(num)
        GU, GF = self.Gz[:n] / scaleY[:n, None], self.Gz[n:] / scaleY[n:, None]
        w = np.repeat([1.0, 1.0 / lp.s.rotation_length], lp.p)
        J = w[:, None] * (num.force_residual_jacobian(e.meas.displacement) @ GU + GF) / self.d_scale
        f = num.frequency_hz
        df = self.s.model_frequency_step * f
        rp = self.residual(self.numerical_side(f + df), e.meas)
        rm = self.residual(self.numerical_side(f - df), e.meas)
        J[:, -1] += (rp - rm) / (2 * df) * self.f_scale
        return J

    def _broyden(self, e_prev, z_prev, e, z) -> None:
        dY = e.Y - e_prev.Y
        if broyden.informative(dY, max(e.noise, e_prev.noise) / np.sqrt(dY.size)):
            self.Gz = broyden.good_broyden_update(self.Gz, z - z_prev, dY)

    def _measure_jacobian(self, num: NumericalSide, e, history: list) -> None:
        """``Gz`` by finite differences at evaluation ``e``: each voltage (the point loop's
        :meth:`~PointLoop.finite_differences`) and the frequency."""
        lp = self.loop
        tol = SETTLE_FRACTION * self.r_target
        n0 = len(history)
        _, G = lp.finite_differences(num, e, history, tol)
        f = num.frequency_hz
        self._remember(history[n0:], f)
        df = self.s.frequency_fd_fraction * self.f_scale * (1 if f + self.s.frequency_fd_fraction * self.f_scale <= self.hi else -1)
        ef = lp.evaluate(self.numerical_side(f + df), e.V, tol, kind="finite_difference")
        history.append(ef)
        self._remember([ef], f + df)
        self.Gz = np.hstack([G * self.v_scale, ((ef.Y - e.Y) / df * self.f_scale)[:, None]])

    def _judge(self, num: NumericalSide, e, J: np.ndarray, t_ref: np.ndarray):
        """(converged?, the correction onto the curve dz, the residual target [m])."""
        lp, st = self.loop, self.loop.s
        r = self.residual(num, e.meas)
        B = np.vstack([J, t_ref[None, :]])
        Binv = np.linalg.inv(B)
        dz = -Binv[:, :-1] @ r
        GUz = self.Gz[: 2 * lp.p]  # weighted displacement (metres) per unit z
        err = float(np.linalg.norm(GUz @ dz))
        amp = float(np.linalg.norm(GUz @ Binv[:, :-1], 2)) * float(np.linalg.norm(r) / max(e.norm, 1e-300))
        U = lp.displacement_amplitude(e)
        wanted = st.accuracy * U
        target = HbtestProfile.residual_target(st, wanted, amp)
        balanced = lp.profile.harmonics_balanced(lp, num, e) if isinstance(lp.profile, PoolingProfile) else True
        # the error along the measured residual's direction, and the worst over directions
        # (the Broyden-carried Jacobian may misjudge the direction, not the amplification)
        worst = amp * e.norm
        close = err <= wanted and worst <= self.s.worst_case_factor * wanted
        ok = e.norm < st.tolerance and (st.accuracy <= 0 or (close and e.settled)) and balanced
        self.last_error = err / max(U, 1e-300)
        return ok, target

    def _outcome(self, f: float, e, converged: bool, iterations: int, history: list, t0: float, reason: str, message: str) -> PointOutcome:
        lp = self.loop
        return lp.outcome(f, PointResult(e, converged, iterations, reason, message), history, (lp.rig.elapsed_s - t0) * f)

    # -- the trace -------------------------------------------------------------------------
    def start(self, carry=None) -> TracedPoint:
        """The first point at the band's start (``stop`` for direction -1), converged by the
        point loop's own profile; then the rig Jacobian in frequency and the first tangent."""
        lp = self.loop
        f0 = self.lo if self.direction > 0 else self.hi
        carry = lp.new_carry() if carry is None else carry
        t0 = lp.rig.elapsed_s
        out = lp.run(f0, carry)
        if not out.converged:
            self.finished = True
            return TracedPoint(out, np.full(self.n_v + 1, np.nan), np.full(self.n_v + 1, np.nan), 0.0)
        num = self.numerical_side(f0)
        self.d_scale = float(np.abs(num.D).max())
        e = out.final
        history = out.history
        self._remember(history, f0)
        self._initial_jacobian(num, e, carry, history, self.direction)
        out = replace(out, rig_periods=(lp.rig.elapsed_s - t0) * f0)
        self.z, self.e = self.scale(e.V, f0), e
        direction = np.zeros(self.n_v + 1)
        direction[-1] = self.direction
        self.t = bordered_tangent(self.jacobian(num, e), direction)
        return TracedPoint(out, self.z.copy(), self.t.copy(), 0.0)

    def _initial_jacobian(self, num: NumericalSide, e, carry, history: list, direction: int) -> None:
        """``Gz`` at a point the point loop's profile converged (evaluation ``e``): its fitted
        rig Jacobian where the profile carries one (the hbtest profile pools every evaluation
        of the point: far less noisy than one finite difference per voltage), else
        :meth:`_measure_jacobian`; the frequency column by one finite difference towards
        ``direction``."""
        if not (isinstance(carry, HbtestCarry) and carry.G is not None):
            self._measure_jacobian(num, e, history)
            return
        f = num.frequency_hz
        df = self.s.frequency_fd_fraction * self.f_scale * direction
        ef = self.loop.evaluate(self.numerical_side(f + df), e.V, SETTLE_FRACTION * self.r_target, kind="finite_difference")
        history.append(ef)
        self._remember([ef], f + df)
        self.Gz = np.hstack([carry.G * self.v_scale, ((ef.Y - e.Y) / df * self.f_scale)[:, None]])

    def _reconverge(self, num: NumericalSide, history: list):
        """A finished point of the curve (frequency of ``num``), where a trace resumes,
        converged again by the point loop's profile as the first point is (from the profile's
        start, not from the stored demand), and ``Gz`` there (:meth:`_initial_jacobian`, the
        frequency difference along the branch while in the band); its evaluations appended to
        ``history``; returns the final evaluation. The profile's pooled fit determines the rig
        Jacobian from the spread of its demands: converged from the stored demand (the solution)
        its demands cluster and the fit is poor (a tangent's df/ds 0.70 where the curve's is
        0.98, OpenBLAS Sandybridge); one finite difference per voltage was worse (0.17, and the
        trace turned back at 16.13 Hz; harsh-mains twin, cubic interface, resumed at 16.01 Hz). The cost:
        a first point's rig time, charged to the next point."""
        lp = self.loop
        carry = lp.new_carry()
        out = lp.run(num.frequency_hz, carry)
        history.extend(out.history)
        self._remember(out.history, num.frequency_hz)
        inside = num.frequency_hz + self.branch_sign * self.s.frequency_fd_fraction * self.f_scale
        self._initial_jacobian(num, out.final, carry, history, self.branch_sign if self.lo <= inside <= self.hi else -self.branch_sign)
        return out.final

    def resume(self, voltages, frequencies_hz, first_frequency_hz: float, n_folds: int = 0) -> None:
        """Continue a trace from its finished points (packed ``voltages`` (n, n_v) and
        ``frequencies_hz`` (n,), in trace order; ``first_frequency_hz`` that of the run's first
        point, which fixes the residual scale; ``n_folds`` folds already passed): converge the last point again and
        take the rig Jacobian there (:meth:`_reconverge`, rig time charged to the next point) and the direction of
        the last secant (or of the band for a single point)."""
        V = np.asarray(voltages, dtype=float)
        f = np.asarray(frequencies_hz, dtype=float)
        self.branch_sign = self.direction * (-1) ** int(n_folds)
        self.d_scale = float(np.abs(self.numerical_side(float(first_frequency_hz)).D).max())
        lp = self.loop
        self.pending_t0 = lp.rig.elapsed_s
        num = self.numerical_side(float(f[-1]))
        e = self._reconverge(num, self.pending)
        self.z, self.e = self.scale(e.V, float(f[-1])), e
        if f.size >= 2:
            prev = self.z - self.scale(V[-2], float(f[-2]))
        else:
            prev = np.zeros(self.n_v + 1)
            prev[-1] = self.direction
        self.t = bordered_tangent(self.jacobian(num, e), prev / np.linalg.norm(prev))

    def step(self) -> TracedPoint:
        """The next point of the curve (or a non-converged point that ends the trace:
        step below ``min_step``, a rig trip, or an over-range sensor)."""
        lp = self.loop
        history, self.pending = self.pending, []
        t0 = lp.rig.elapsed_s if self.pending_t0 is None else self.pending_t0
        self.pending_t0 = None
        self.not_affine = 0
        self.trust_notes = []
        z0, tz0 = self.z, self.t
        while True:
            try:
                res, left = self._correct(self.h, history)
            except RigTrip as ex:
                lp.rig.safe_state()
                self.finished = True
                _, f = self.unscale(z0)
                return TracedPoint(self._outcome(f, history[-1] if history else None, False, len(history), history, t0, "trip",
                                                 f"rig tripped: {ex}"), z0, tz0, self.h)
            if res is not None:
                break
            e_last = history[-1] if history else None
            if e_last is not None and e_last.overrange:
                self.finished = True
                f = self._last_num.frequency_hz
                reason, message = lp.stop_message(e_last, "overrange")
                # (no excluded_energy_fraction on this path, as before the point loop's outcome)
                out = PointOutcome(f, e_last, False, len(history), (lp.rig.elapsed_s - t0) * f, history, message, reason)
                return TracedPoint(out, z0, tz0, self.h)
            self.h *= 0.5
            if self.h < self.s.min_step:
                self.finished = True
                num = self._last_num
                return TracedPoint(self._outcome(num.frequency_hz, e_last, False, len(history), history, t0, "stalled",
                                                 f"arclength continuation stalled: step below {self.s.min_step:g} (scaled) at"
                                                 f" {self.unscale(z0)[1]:.4f} Hz"), z0, tz0, self.h)
            if left is not None:
                self.trust_notes.append(left)
                continue  # the Jacobian before the bent pool is kept: no re-measure
            self._remeasure(z0, history)
        z, e, num, J, its = res
        t, bent_note = self._tangent(z0, tz0, z, J)
        fold = self._fold(z0, tz0, z, t)
        step = self.h
        self.z, self.t, self.e = z, t, e
        factor, note = self._step_factor(tz0, t)
        note += bent_note + self._trust_note()
        self.h = float(np.clip(self.h * factor, self.s.min_step, self.s.max_step))
        f = num.frequency_hz
        if f < self.lo or f > self.hi:
            self.finished = True
        out = self._outcome(f, e, True, its, history, t0, "converged", "converged" + note)
        return TracedPoint(out, z.copy(), t.copy(), step, fold, self.last_error)

    def _remeasure(self, z0: np.ndarray, history: list) -> None:
        """After a failed corrector the rig Jacobian may have drifted: re-measured at the last
        point of the curve ``z0`` (its evaluations appended to ``history`` and the pool)."""
        V0, f0 = self.unscale(z0)
        num0 = self.numerical_side(f0)
        e0 = self.loop.evaluate(num0, V0, SETTLE_FRACTION * self.r_target, kind="start")
        history.append(e0)
        self._remember([e0], f0)
        self._measure_jacobian(num0, e0, history)
        self.e = e0

    def _tangent(self, z0: np.ndarray, t0: np.ndarray, z: np.ndarray, J: np.ndarray) -> tuple[np.ndarray, str]:
        """The unit tangent at the new point ``z`` (Jacobian ``J``), reached from ``z0`` with
        tangent ``t0``: the measured one checked against the chord or the previous tangent
        (:func:`chord_checked_tangent`), and a note for the point's record when replaced."""
        t, bent = chord_checked_tangent(z0, z, bordered_tangent(J, t0), self.s.tangent_chord_limit,
                                        self.s.tangent_chord_min, t0)
        if bent is None:
            return t, ""
        if float(np.linalg.norm(z - z0)) >= self.s.tangent_chord_min:
            return t, (f"; the measured tangent was {np.degrees(bent):.0f} deg from the chord of the step"
                       " (a Jacobian bent by the noise): the chord taken as the tangent")
        return t, (f"; the measured tangent turned {np.degrees(bent):.0f} deg over a step too short to turn it"
                   " (a Jacobian bent by the noise): the previous tangent kept")

    def _beyond_trust(self, z: np.ndarray, z_pred: np.ndarray, h: float) -> float | None:
        """How far the corrector's next demand ``z`` lies from the prediction ``z_pred`` of a
        step ``h``, in steps, when beyond the trust region (radius ``corrector_trust`` times the
        step, at least ``corrector_trust * pool_min_radius``: below it the points' own noise);
        None within it. The corrector of a step too long for the curve, or one whose pool bent
        the Jacobian (near a fold: 19.51 -> 15.93 Hz in five corrections, the sensors clipped,
        reference twin seed 3), moves beyond it; on the curve a corrector moves the step's
        sagitta, ``h turn_angle / 2``, and the noise."""
        d = float(np.linalg.norm(np.asarray(z, dtype=float) - z_pred))
        return d / h if d > self.s.corrector_trust * max(h, self.s.pool_min_radius) else None

    def _trust_note(self) -> str:
        """The point record's note on correctors that left their trust region."""
        if not self.trust_notes:
            return ""
        far = ", ".join(f"{d:.1f}" for d in self.trust_notes)
        return (f"; {len(self.trust_notes)} corrector(s) would have moved {far} steps from the prediction"
                " (beyond the trust region): not taken, step halved")

    def _step_factor(self, t0: np.ndarray, t: np.ndarray) -> tuple[float, str]:
        """The next step over this one, and a note for the point's record: the step that
        turns the tangent by ``turn_angle`` where this one turned it by ``angle`` (the
        curvature of the traced branch, ``angle / step``), within ``[min_factor,
        max_factor]``; at most ``min_factor`` where the path pool's affine model did not
        hold over the evaluations near the point (:attr:`not_affine`)."""
        angle = float(np.arccos(np.clip(float(t0 @ t), -1.0, 1.0)))
        factor = float(np.clip(self.s.turn_angle / max(angle, np.finfo(float).tiny), self.s.min_factor, self.s.max_factor))
        if not self.not_affine:
            return factor, ""
        return min(factor, self.s.min_factor), (f"; the affine model of the path pool did not hold over {self.not_affine}"
                                                 " evaluation(s) near the point: step shortened")

    def _fold(self, z0, t0, z, t) -> float | None:
        """Fold detection: ``df/ds`` has changed sign against the branch for
        ``fold_confirm_points`` points in a row and the trace has gone back from the extreme
        frequency by ``fold_retreat`` of the band (near a fold ``df/ds`` is small and a
        measured tangent, and the measured points, may flicker: a lone flip is not a fold). The fold frequency is the extreme
        frequency along the branch since the last fold: of the points and of the Hermite
        extremum of every flip (:func:`hermite_extremum`)."""
        pick = max if self.branch_sign > 0 else min
        f = z[-1] * self.f_scale
        self.extreme = f if self.extreme is None else pick(self.extreme, f)
        if np.sign(t[-1]) != np.sign(t0[-1]) and t0[-1] != 0:
            fh = hermite_extremum(z0[-1], z[-1], t0[-1], t[-1], float(np.linalg.norm(z - z0))) * self.f_scale
            if np.sign(t0[-1]) == self.branch_sign:  # an extremum in the branch's direction
                self.extreme = pick(self.extreme, fh)
        if np.sign(t[-1]) == self.branch_sign:
            self.against = 0
            return None
        self.against += 1
        retreat = self.branch_sign * (self.extreme - f) / self.f_scale  # back from the extreme
        if self.against < self.s.fold_confirm_points or retreat < self.s.fold_retreat:
            return None
        fold, self.extreme = self.extreme, f
        self.branch_sign, self.against = -self.branch_sign, 0
        return float(fold)

    def _correct(self, h: float, history: list):
        """Predictor ``z0 + h t0`` and measured corrector: ((z, evaluation, numerical side,
        Jacobian, evaluations used) or None when it does not converge, and how many steps a
        corrector refused for leaving its trust region would have gone, else None)."""
        lp = self.loop
        z0, t0 = self.z, self.t
        z = z_pred = z0 + h * t0
        Gz0 = self.Gz
        e_prev, z_prev = self.e, z0
        max_dv = self.s.max_voltage_step_factor * lp.s.max_step_v / self.v_scale
        raws, zs = [], []  # this corrector's own evaluations and their scaled demands
        pooled_noise = float("inf")
        for it in range(1, self.s.max_corrector_iterations + 1):
            V, f = self.unscale(z)
            num = self.numerical_side(f)
            self._last_num = num
            raw = lp.evaluate(num, V, SETTLE_FRACTION * self.r_target, kind="start" if it == 1 else "iteration",
                              noise_target=self._noise_target(pooled_noise))
            history.append(raw)
            z = self.scale(raw.V, f)  # clipped to the voltage limit where the demand was beyond it
            self._broyden(e_prev, z_prev, raw, z)
            if raw.overrange:
                return None, None
            raws.append(raw)
            zs.append(z)
            self.bank.append((z, raw))
            e, pooled = self._pool(num, raws, zs)
            pooled_noise = e.noise
            J = self.jacobian(num, e)
            ok, target = self._judge(num, e, J, t0)
            ok = ok and self._pool_checks(pooled)
            self.r_target = target
            if ok:
                if e is not raw:
                    history[-1] = e  # the point ends with the pooled estimate (rig time: the last record's own)
                return (z, e, num, J, it), None
            dz = bordered_step(J, t0, self.residual(num, e.meas), float(t0 @ (z - z0) - h))
            big = float(np.abs(dz[:-1]).max())
            if big > max_dv:
                dz *= max_dv / big
            left = self._beyond_trust(z + dz, z_pred, h)
            if left is not None:
                self.Gz = Gz0  # the pool that asked for it bent the Jacobian: the one before it kept
                return None, left
            e_prev, z_prev = raw, z
            z = z + dz
        return None, None

    def _pool(self, num: NumericalSide, raws: list, zs: list):
        """The path pool at the corrector's last evaluation (module docstring, "Pooling"):
        :meth:`PointLoop.pool` over the scaled demands ``z = (V, f)`` of the evaluations of
        the path (:meth:`_near`), prior ``Gz`` within ``pool_prior_fraction``, the
        between-evaluation variance of the profile's own rule
        (:meth:`HbtestProfile.between_limit`). The fitted ``[dY/dV, dY/df]`` replaces ``Gz``.
        Evaluations the affine model does not explain (the pool's outliers) mean the radius
        is too wide for the curve here: :attr:`not_affine` is set (the step is shortened).
        Without pooling (another profile) the last evaluation itself. With the number of
        evaluations the path pool held (0 without pooling)."""
        prof = self.loop.profile
        if not isinstance(prof, PoolingProfile):
            return raws[-1], 0
        near = self._near(zs[-1], raws[-1])
        if len(near) < 2:
            return raws[-1], len(near)
        pooled = self.loop.pool(num, [e for _, e in near], self.Gz, self.s.pool_prior_fraction,
                                demands=np.stack([z for z, _ in near]), between=prof.between_limit(self.loop, False))
        self.Gz = pooled.jacobian
        if pooled.fit is not None and pooled.fit.used.size < len(near):
            self.not_affine = max(self.not_affine, len(near) - pooled.fit.used.size)
        return pooled.evaluation, len(near)

    def _pool_checks(self, pooled: int) -> bool:
        """Whether a judgement's path pool of ``pooled`` evaluations could check its own fit: at least ``m + 2``
        evaluations for the ``m`` coordinates of ``(V, f)`` (an affine fit of ``m + 1``
        unknowns per output with one residual degree of freedom; fewer, the carried Jacobian's
        prior decides the estimate, and a point accepted on 5 evaluations near the upper fold
        lay 1.16 % from the curve, harsh-mains twin seed 2). True without a pooling profile."""
        if not isinstance(self.loop.profile, PoolingProfile):
            return True
        return pooled >= self.n_v + 3

    def _near(self, z: np.ndarray, last) -> list:
        """The path pool's evaluations at ``z``: those of :attr:`bank` within
        ``pool_radius`` steps of it (scaled distance in ``(V, f)``; the step of the attempt;
        at least ``pool_min_radius``), at most ``pool_max`` of them, nearest first kept, in the
        order measured with ``last`` (the corrector's newest) at the end."""
        radius = max(self.s.pool_radius * self.h, self.s.pool_min_radius)
        d = np.array([float(np.linalg.norm(zb - z)) for zb, _ in self.bank])
        idx = [int(j) for j in np.argsort(d, kind="stable") if d[j] <= radius and self.bank[j][1] is not last]
        keep = sorted(idx[: self.s.pool_max - 1])
        return [self.bank[j] for j in keep] + [(z, last)]

    def _remember(self, evaluations, f: float) -> None:
        """Put ``evaluations`` (at frequency ``f``, not over range) into the path pool."""
        self.bank.extend((self.scale(e.V, f), e) for e in evaluations if not e.overrange)

    def _noise_target(self, pooled_noise: float) -> float | None:
        """Residual noise [m] the next record must reach so that, pooled with the corrector's
        evaluations so far (noise ``pooled_noise``), it meets the profile's goal for the
        current residual level (:meth:`HbtestProfile.noise_target`); None for a profile
        without one (its own window rule)."""
        prof = self.loop.profile
        if not isinstance(prof, PoolingProfile):
            return None
        return float(prof.noise_target(self.r_target, pooled_noise))

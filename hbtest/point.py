"""One frequency point of the iterative hybrid test (SPEC §2).

Apply a demand, settle, measure the PS interface through the sensors, form the residual
against the numerical substructure, and iterate the actuator voltages to tolerance. Only the
:class:`~hbtest.rig.Rig` protocol is used: a virtual twin and real hardware look the same.

Residual (per harmonic k of the solved orders):
- displacement form ``R_k = U_P - D_N(ikW)^-1 (F_e - F_P)`` [m, rad];
- force form ``D_N U_P + F_P - F_e`` [N, N m] (the same equation scaled by D_N).
The *convergence norm* is always the displacement form, with rotations weighted by
``rotation_length`` so that it is in metres: ``|R| = sqrt(sum_k |R_u,k|^2 + l^2 |R_th,k|^2)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from . import harmonics, solver
from .sensors import InterfaceMeasurement, measure_interface

__all__ = ["NumericalSide", "PointSettings", "Evaluation", "PointOutcome", "Carry", "PointLoop"]


@dataclass(frozen=True)
class NumericalSide:
    """The numerical substructure at one frequency: ``D_N(ikW)`` (n_orders, 2, 2) and the
    condensed external force coefficients ``F_e`` (2, n_orders) [N, N m]."""

    frequency_hz: float
    orders: np.ndarray
    D: np.ndarray
    F_e: np.ndarray

    @classmethod
    def build(cls, ns, force_vector, frequency_hz: float, orders) -> "NumericalSide":
        orders = np.asarray(orders, dtype=int)
        s = 2j * np.pi * frequency_hz * orders
        D = ns.dynamic_stiffness(s)
        F = np.zeros((2, orders.size), dtype=complex)
        if 1 in orders:  # the external force is a pure sinusoid at the fundamental
            k1 = int(np.flatnonzero(orders == 1)[0])
            F[:, k1] = ns.condensed_force(force_vector, s[k1])
        return cls(frequency_hz, orders, D, F)

    def numerical_displacement(self, F_P: np.ndarray) -> np.ndarray:
        """``U_N = D_N^-1 (F_e - F_P)`` per harmonic, (2, n_orders)."""
        return np.einsum("kij,jk->ik", np.linalg.inv(self.D), self.F_e - F_P)


@dataclass(frozen=True)
class PointSettings:
    """SI units. ``profile``: ``published`` or ``hbtest`` (see :class:`PointLoop`)."""

    orders: tuple[int, ...]
    tolerance: float
    transient_tolerance: float
    averaging_periods: int
    max_iterations: int
    residual_form: str
    force_method: str
    profile: str
    max_step_v: float
    ramp_periods: float
    max_settle_windows: int
    accuracy: float = 0.0
    rotation_length: float = 0.1
    fd_step_v: float = 0.1
    min_window_periods: int = 3

    @classmethod
    def from_config(cls, cfg) -> "PointSettings":
        return cls(
            orders=tuple(cfg.sweep.harmonics),
            tolerance=cfg.test.tolerance,
            transient_tolerance=cfg.test.transient_tolerance,
            averaging_periods=cfg.test.averaging_periods,
            max_iterations=cfg.test.max_iterations,
            residual_form=cfg.test.residual,
            force_method=cfg.test.force_reconstruction,
            profile=cfg.solver.profile,
            max_step_v=cfg.solver.max_step_v,
            ramp_periods=cfg.solver.ramp_periods,
            max_settle_windows=cfg.solver.max_settle_windows,
            accuracy=cfg.test.accuracy,
            rotation_length=cfg.test.rotation_length,
            fd_step_v=cfg.solver.fd_step_v,
        )


@dataclass
class Evaluation:
    """One settled measurement at voltages ``V`` (packed)."""

    V: np.ndarray
    meas: InterfaceMeasurement
    U_N: np.ndarray
    R: np.ndarray  # complex displacement-form residual (2, n_orders)
    norm: float
    vector: np.ndarray  # what Broyden works on (chosen form, packed, weighted)
    Y: np.ndarray  # packed [U_P; F_P] (weighted) — the rig's output
    noise: float  # standard deviation of the residual norm from the measured variances
    periods: float  # forcing periods the rig ran for this evaluation (ramp + settling)
    windows: int
    settled: bool
    overrange: tuple = ()  # channels that reached the ADC full scale (clipped) in the last window


@dataclass
class Carry:
    """What one point hands to the next: the Jacobian estimate and previous solutions."""

    H: np.ndarray | None = None  # published: inverse residual Jacobian
    G: np.ndarray | None = None  # hbtest: rig Jacobian d[U_P; F_P]/dV (weighted, packed)
    solutions: list = field(default_factory=list)  # (frequency_hz, V packed, Y packed)
    start_V: np.ndarray | None = None  # where to start when there is no solution yet (resume)
    r_target: float | None = None  # hbtest: residual level the last point needed [m]


@dataclass
class PointOutcome:
    frequency_hz: float
    final: Evaluation
    converged: bool
    iterations: int
    rig_periods: float
    history: list  # of Evaluation, one per iteration (line-search trials included)
    message: str


@dataclass(frozen=True)
class _Measured:
    """Interface coefficients without noise information (for predictions)."""

    displacement: np.ndarray
    force: np.ndarray

    @property
    def displacement_variance(self):
        return np.zeros(self.displacement.shape)

    @property
    def force_variance(self):
        return np.zeros(self.force.shape)


class PointLoop:
    """Runs frequency points on a rig.

    Profiles:
    - ``published``: the released method, faithfully — inverse Jacobian by finite differences
      at the first point, carried along the sweep; Broyden's second update; steps scaled to
      ``max_step_v``; a three-point line search (1/3, 2/3, 1 of the step) every 10th
      iteration; finite-difference re-measurement every 20 iterations when ``|R| > 2 tol``
      and rising; fixed ``averaging_periods`` windows repeated until the change between
      windows is below the transient tolerance; each point starts from the previous solution.
    - ``hbtest``: the rig Jacobian ``G = d[U_P; F_P]/dV`` (finite differences at the first
      point, good-Broyden updates from every measured change that stands out of the noise,
      carried along the sweep) gives the residual Jacobian at any frequency exactly through
      the known ``D_N``; each point starts from the model prediction at the new frequency;
      windows are as short as the measured noise allows; the settling check extrapolates the
      geometric decay of the transient; stagnation triggers a finite-difference restart.
    """

    def __init__(self, rig, ns, force_vector, settings: PointSettings, progress=None):
        self.rig = rig
        self.ns = ns
        self.force_vector = force_vector
        self.s = settings
        self.orders = np.asarray(settings.orders, dtype=int)
        desc = rig.describe()
        self.layout = desc.sensors
        self.n_act = len(desc.actuators)
        self.voltage_limit = desc.voltage_limit_v
        self.identity = desc.identity
        self.input_range = desc.input_range_v
        self.p = harmonics.packed_size(self.orders)
        self.progress = progress
        self._window = settings.min_window_periods if settings.profile == "hbtest" else settings.averaging_periods
        self._scaleY = None

    # -- packing helpers -------------------------------------------------------------------
    def _w(self) -> np.ndarray:
        """Row weights of packed interface displacement vectors (u: 1, theta: l)."""
        return np.repeat([1.0, self.s.rotation_length], self.p)

    def _pack2(self, X: np.ndarray) -> np.ndarray:
        return harmonics.pack(X, self.orders).reshape(-1)

    def norm(self, R: np.ndarray) -> float:
        return float(np.linalg.norm(self._w() * self._pack2(R)))

    def unpack_voltage(self, V: np.ndarray) -> np.ndarray:
        return harmonics.unpack(V.reshape(self.n_act, self.p), self.orders)

    def _output_scale(self, num: NumericalSide) -> np.ndarray:
        """Weights of the packed rig output [U_P; F_P]: displacement weights for U, and for F
        the inverse of the largest ``|D_N|`` entry at the first frequency the loop ran (fixed
        for the whole sweep, so the carried rig Jacobian keeps its meaning)."""
        if self._scaleY is None:
            scale_F = 1.0 / np.abs(num.D).max()
            self._scaleY = np.concatenate([self._w(), np.repeat([scale_F, scale_F / self.s.rotation_length], self.p)])
        return self._scaleY

    # -- measurement -----------------------------------------------------------------------
    def _residual(self, num: NumericalSide, meas: InterfaceMeasurement):
        U_N = num.numerical_displacement(meas.force)
        R = meas.displacement - U_N
        if self.s.residual_form == "force":
            RF = np.einsum("kij,jk->ik", num.D, meas.displacement) + meas.force - num.F_e
            vec = self._pack2(RF) * np.repeat([1.0, 1.0 / self.s.rotation_length], self.p) / np.abs(num.D).max()
        else:
            vec = self._w() * self._pack2(R)
        # noise of the displacement residual: var U + |D_N^-1|^2 var F (per DOF, per order)
        Dinv = np.linalg.inv(num.D)
        var_R = meas.displacement_variance + np.einsum("kij,jk->ik", np.abs(Dinv) ** 2, meas.force_variance)
        var_R = np.nan_to_num(var_R, nan=0.0)
        noise = float(np.sqrt(np.sum(var_R * np.array([[1.0], [self.s.rotation_length**2]]))))
        return U_N, R, vec, noise

    def evaluate(self, num: NumericalSide, V: np.ndarray, transient_tol: float | None = None) -> Evaluation:
        """Apply ``V``, settle, measure. Rig time: ramp + windows until the residual changes
        less than ``transient_tol`` (default: the test's transient tolerance) between windows.
        The hbtest profile sizes its windows so that the residual noise is a third of that."""
        transient_tol = self.s.transient_tolerance if transient_tol is None else transient_tol
        t0 = self.rig.elapsed_s
        f = num.frequency_hz
        self.rig.set_demand(f, self.unpack_voltage(V), self.orders, ramp_periods=self.s.ramp_periods)
        hb = self.s.profile == "hbtest"
        prev_R, prev_d = None, None
        settled = False
        scaleY = self._output_scale(num)
        windows = 0
        for windows in range(1, self.s.max_settle_windows + 1):
            acq = self.rig.acquire(int(self._window))
            meas = measure_interface(acq, self.layout, self.orders, self.s.force_method, reject_mains=hb)
            U_N, R, vec, noise = self._residual(num, meas)
            if hb:
                # adapt the window so the residual noise is a third of the transient tolerance
                # (noise variance scales as 1/n)
                want = self._window * (3.0 * noise / transient_tol) ** 2
                self._window = int(np.clip(np.ceil(want), self.s.min_window_periods, 4 * self.s.averaging_periods))
            if prev_R is not None:
                d = self.norm(R - prev_R)
                # hbtest: a change within 3 sigma of the difference of two noisy windows is
                # not evidence of a transient (the published rule compares d alone)
                limit = max(transient_tol, 3.0 * np.sqrt(2.0) * noise) if hb else transient_tol
                ok = d < limit
                if hb and ok and prev_d is not None and prev_d > 0:
                    # geometric decay: what is left of the transient is about d q / (1 - q)
                    q = min(d / prev_d, 0.95)
                    ok = d * q / (1 - q) < limit
                if ok:
                    settled = True
                    break
                prev_d = d
            prev_R = R
        Y = scaleY * np.concatenate([self._pack2(meas.displacement), self._pack2(meas.force)])
        periods = (self.rig.elapsed_s - t0) * f
        over = ()
        if self.input_range:
            over = tuple(n for n, x in acq.data.items() if np.max(np.abs(x)) >= 0.999 * self.input_range)
        return Evaluation(V.copy(), meas, U_N, R, self.norm(R), vec, Y, noise, periods, windows, settled, over)

    @staticmethod
    def _overrange_message(e: Evaluation) -> str:
        return f"sensor over range (clipped): {', '.join(e.overrange)} — lower the excitation or extend the channel range"

    # -- Jacobians -------------------------------------------------------------------------
    def _residual_jacobian_from_G(self, num: NumericalSide, G: np.ndarray) -> np.ndarray:
        """``dR/dV = [I, D_N^-1] G`` in the weighted packed coordinates of the chosen form."""
        n = 2 * self.p
        scaleY = self._output_scale(num)
        GU = G[:n] / scaleY[:n, None]
        GF = G[n:] / scaleY[n:, None]
        if self.s.residual_form == "force":
            Dr = harmonics.real_operator(num.D, self.orders)
            w = np.repeat([1.0, 1.0 / self.s.rotation_length], self.p) / np.abs(num.D).max()
            return w[:, None] * (Dr @ GU + GF)
        Dinv = harmonics.real_operator(np.linalg.inv(num.D), self.orders)
        return self._w()[:, None] * (GU + Dinv @ GF)

    def _finite_differences(self, num, base: Evaluation, history: list, transient_tol: float | None = None):
        """Perturb each packed voltage by ``fd_step_v``: returns (J_residual, G) columns."""
        m = base.V.size
        JR = np.empty((base.vector.size, m))
        G = np.empty((base.Y.size, m))
        for j, dv in enumerate(solver.finite_difference_columns(m, self.s.fd_step_v).T):
            V = self._clip(base.V + dv)
            e = self.evaluate(num, V, transient_tol)
            history.append(e)
            step = V - base.V
            jj = int(np.argmax(np.abs(step)))
            JR[:, j] = (e.vector - base.vector) / step[jj]
            G[:, j] = (e.Y - base.Y) / step[jj]
        return JR, G

    def _clip(self, V: np.ndarray) -> np.ndarray:
        return solver.clip_voltage(V, self.n_act, self.voltage_limit, self.orders)[0]

    # -- the point -------------------------------------------------------------------------
    def run(self, frequency_hz: float, carry: Carry) -> PointOutcome:
        num = NumericalSide.build(self.ns, self.force_vector, frequency_hz, self.orders)
        t0 = self.rig.elapsed_s
        if self.s.profile == "published":
            out = self._run_published(num, carry)
        else:
            out = self._run_hbtest(num, carry)
        out.rig_periods = (self.rig.elapsed_s - t0) * frequency_hz
        if out.converged:
            carry.solutions.append((frequency_hz, out.final.V.copy(), out.final.Y.copy()))
        return out

    def _start_voltage(self, carry: Carry) -> np.ndarray:
        if carry.solutions:
            return carry.solutions[-1][1].copy()
        if carry.start_V is not None:
            return carry.start_V.copy()
        return np.zeros(self.n_act * self.p)

    def _run_published(self, num: NumericalSide, carry: Carry) -> PointOutcome:
        s = self.s
        history: list[Evaluation] = []
        V = self._start_voltage(carry)
        e = self.evaluate(num, V)
        history.append(e)
        if carry.H is None:
            JR, _ = self._finite_differences(num, e, history)
            carry.H = np.linalg.pinv(JR)
            e = self.evaluate(num, V)
            history.append(e)
        norms = [e.norm]
        message = "iteration limit reached"
        it = 0
        while it < s.max_iterations:
            if e.overrange:
                message = self._overrange_message(e)
                break
            if e.norm < s.tolerance:
                message = "converged"
                break
            it += 1
            if it % 20 == 0 and e.norm > 2 * s.tolerance and len(norms) > 1 and norms[-1] > norms[-2]:
                JR, _ = self._finite_differences(num, e, history)
                carry.H = np.linalg.pinv(JR)
            step = solver.limit_step(-carry.H @ e.vector, s.max_step_v)
            if it % 10 == 0:
                trials = []
                for a in (1 / 3, 2 / 3, 1.0):
                    t = self.evaluate(num, self._clip(e.V + a * step))
                    history.append(t)
                    trials.append(t)
                new = min(trials, key=lambda t: t.norm)
            else:
                new = self.evaluate(num, self._clip(e.V + step))
                history.append(new)
            dV, dR = new.V - e.V, new.vector - e.vector
            carry.H = solver.bad_broyden_inverse_update(carry.H, dV, dR)
            e = new
            norms.append(e.norm)
        else:
            if e.norm < s.tolerance and not e.overrange:
                message = "converged"
        return PointOutcome(num.frequency_hz, e, message == "converged", it, 0.0, history, message)

    def _predict(self, num: NumericalSide, carry: Carry) -> np.ndarray:
        """Voltages at the new frequency from the last solution, its measured rig output and
        the rig Jacobian, with the exact ``D_N`` of the new frequency: the linear rig model
        ``Y(V) = Y_prev + G (V - V_prev)`` solved for ``R = 0``."""
        _, V_prev, Y = carry.solutions[-1]
        n = 2 * self.p
        scaleY = self._output_scale(num)
        U = harmonics.unpack((Y[:n] / scaleY[:n]).reshape(2, self.p), self.orders)
        F = harmonics.unpack((Y[n:] / scaleY[n:]).reshape(2, self.p), self.orders)
        _, _, vec, _ = self._residual(num, _Measured(U, F))
        G = carry.G
        J = self._residual_jacobian_from_G(num, G)
        return self._clip(V_prev + solver.limit_step(solver.newton_step(J, vec), 4 * self.s.max_step_v))

    def _error_estimate(self, num: NumericalSide, G: np.ndarray, e: Evaluation) -> tuple[float, float, np.ndarray]:
        """Newton step ``dV = -J_R^+ R`` and the interface-displacement error it implies,
        ``e_U = G_U J_R^+ R = (D_N + D_P)^-1 D_N R`` (weighted norm, metres), plus the noise
        amplification ``|G_U J_R^+|`` from residual to displacement error."""
        J = self._residual_jacobian_from_G(num, G)
        dV = solver.newton_step(J, e.vector)
        GU = G[: 2 * self.p]
        err = float(np.linalg.norm(GU @ dV))
        amp = float(np.linalg.norm(GU @ np.linalg.pinv(J, rcond=1e-10), 2))
        if self.s.residual_form == "force":
            amp *= float(np.linalg.norm(e.vector) / max(e.norm, 1e-300))
        return err, amp, dV

    def _residual_target(self, err_tol: float, amp: float) -> float:
        """Residual level [m] that keeps the displacement error within ``err_tol``."""
        if self.s.accuracy <= 0 or err_tol <= 0:  # no accuracy target, or no motion yet
            return self.s.tolerance
        return min(self.s.tolerance, err_tol / max(amp, 1.0))

    def _run_hbtest(self, num: NumericalSide, carry: Carry) -> PointOutcome:
        """Converged when ``|R| < tolerance`` and, with ``accuracy > 0``, when the estimated
        interface-displacement error is within ``accuracy * |U_P|``; settling and noise
        targets follow the residual level that this requires."""
        s = self.s
        history: list[Evaluation] = []
        if carry.solutions and carry.G is not None:
            V = self._predict(num, carry)
        else:
            V = self._start_voltage(carry)
        r_target = carry.r_target or s.tolerance
        e = self.evaluate(num, V, 0.65 * r_target)
        history.append(e)
        if carry.G is None:
            _, carry.G = self._finite_differences(num, e, history, 0.65 * r_target)
        best = e.norm
        stalled = 0
        message = "iteration limit reached"
        it = 0
        while True:
            err, amp, dV = self._error_estimate(num, carry.G, e)
            U = float(np.linalg.norm(self._w() * self._pack2(e.meas.displacement)))
            r_target = self._residual_target(s.accuracy * U, amp)
            carry.r_target = r_target
            ok = e.norm < s.tolerance and (s.accuracy <= 0 or (err <= s.accuracy * U and e.settled))
            if e.overrange:
                message = self._overrange_message(e)
                break
            if ok:
                message = "converged"
                break
            if it >= s.max_iterations:
                break
            it += 1
            step = solver.limit_step(dV, s.max_step_v)
            new = self.evaluate(num, self._clip(e.V + step), 0.65 * r_target)
            history.append(new)
            dVm, dY = new.V - e.V, new.Y - e.Y
            if solver.informative(dY, max(e.noise, new.noise) / np.sqrt(dY.size)):
                carry.G = solver.good_broyden_update(carry.G, dVm, dY)
            if new.norm < 0.9 * best:
                best, stalled = new.norm, 0
            else:
                stalled += 1
            e = new
            if stalled >= 3:
                # stagnation: re-measure the rig Jacobian around the current voltages
                _, carry.G = self._finite_differences(num, e, history, 0.65 * r_target)
                stalled = 0
                best = e.norm
        return PointOutcome(num.frequency_hz, e, message == "converged", it, 0.0, history, message)

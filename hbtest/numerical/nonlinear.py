"""A nonlinear numerical substructure: a linear structure plus nonlinear elements
(:mod:`hbtest.numerical.elements`), solved by multi-harmonic balance with alternating
frequency–time (AFT) and Newton's method with the analytic AFT Jacobian.

Units and sign conventions: see :mod:`hbtest.numerical.base` (interface, ``F_P``) and
:mod:`hbtest.numerical.elements` (element forces). The equations of motion of the substructure

    M q'' + C q' + K q + sum_e w_e g_e = f_ext(t) - S^T f_P(t)

are balanced at the harmonic orders ``orders``. The linear part is first condensed (exactly,
per harmonic, Schur complement) onto the *active* DOFs: the interface DOFs (first, in
interface order) and the DOFs the elements act on. With ``x`` the packed coefficients of the
active DOFs (channel-major), the residual is

    R(x) = D_A x + f_nl(x) - pack(F_A - S^T F_P),

``D_A`` the real operator of the condensed dynamic stiffness ``D_A(ikW)``, ``f_nl`` the AFT
of the element forces, ``F_A`` the condensed external force. Newton:
``dR/dx = D_A + sum_e (w_e w_e^T) (x) dG_e/dr`` with the AFT derivative of each element.
Since ``dR/dF_P = +S^T`` (packed), ``dU_N/dF_P = -S (dR/dx)^-1 S^T`` at the solution.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..method import harmonics
from ..method.substructure import Substructure, condense
from .base import HarmonicBalanceError, InterfaceResponse, LinearPart
from .elements import AFTGrid, Element, aft_grid, packed_force
from .linear import external_interface_force

__all__ = ["NonlinearSubstructure", "HarmonicBalanceSolution", "NEWTON_TOLERANCE", "NEWTON_NOISE_FLOOR", "NEWTON_STAGNATION", "NEWTON_MAX_ITERATIONS", "LINE_SEARCH_HALVINGS"]

#: Newton stops when the step is below this fraction of the solution (max norm)
NEWTON_TOLERANCE = 1e-12
#: ... or when a step below this fraction no longer contracts (by NEWTON_STAGNATION): the
#: rounding noise floor of an ill-conditioned condensation (a long beam near resonance)
NEWTON_NOISE_FLOOR = 1e-8
NEWTON_STAGNATION = 0.5
#: Newton iterations before :class:`HarmonicBalanceError`
NEWTON_MAX_ITERATIONS = 100
#: load-path continuation (the fallback when Newton fails): arclength steps in scaled units
LOAD_STEP_INITIAL = 0.05
LOAD_STEP_MIN = 1e-8
LOAD_STEP_MAX = 0.5
LOAD_STEP_GROW = 1.5
LOAD_EASY_ITERATIONS = 4
LOAD_MAX_STEPS = 5000
#: frequencies whose condensed operators are kept (a point and its frequency differences)
OPERATOR_CACHE_SIZE = 8
#: backtracking halvings of a Newton step that does not reduce the residual
LINE_SEARCH_HALVINGS = 30


@dataclass(frozen=True)
class HarmonicBalanceSolution:
    """Harmonic balance of the active DOFs at one frequency.

    dofs: active DOF names (interface first); coefficients: (n_active, n_orders) complex;
    state: the same packed (n_active p,); tangent: ``dR/dx`` at the solution (n_active p,
    n_active p); iterations: Newton iterations; residual: final max-norm of R [N, N m]."""

    dofs: tuple[str, ...]
    orders: np.ndarray
    coefficients: np.ndarray
    state: np.ndarray
    tangent: np.ndarray
    iterations: int
    residual: float


@dataclass(eq=False)
class NonlinearSubstructure(LinearPart):
    """A :class:`~hbtest.method.substructure.Substructure` (its linear part) plus nonlinear
    ``elements`` acting on its DOFs (by name). ``n_time``: AFT samples per period (default
    from :func:`hbtest.numerical.elements.aft_grid`)."""

    substructure: Substructure
    elements: tuple[Element, ...]
    n_time: int | None = None
    tolerance: float = NEWTON_TOLERANCE
    max_iterations: int = NEWTON_MAX_ITERATIONS
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.elements = tuple(self.elements)
        names = set(self.structure.dof_names)
        for e in self.elements:
            for d in e.dofs:
                if d not in names:
                    raise KeyError(f"{e.kind}: no DOF named {d!r} in the substructure")
        iface = list(self.substructure.interface)
        extra = sorted({d for e in self.elements for d in e.dofs} - set(iface), key=self.structure.index)
        self.active = tuple(iface + extra)
        self.active_index = [self.structure.index(d) for d in self.active]
        self._weights = []
        for e in self.elements:
            w = np.zeros(len(self.active))
            for d, we in zip(e.dofs, e.weights):
                w[self.active.index(d)] += we
            self._weights.append(w)

    # -- the linear part (as hbtest.method.substructure.Substructure) ------------------------------
    @property
    def is_linear(self) -> bool:
        return all(e.is_zero for e in self.elements)

    # -- harmonic balance ------------------------------------------------------------------
    def _operators(self, frequency_hz: float, orders: np.ndarray, force_vector):
        """(D_A real operator, packed condensed external force, AFT grid), cached per call
        signature (the point loop asks many times at one frequency)."""
        fv = np.asarray(force_vector, dtype=complex)
        key = (float(frequency_hz), tuple(orders.tolist()), fv.tobytes())
        ops_cache = self._cache.setdefault("ops", {})
        if key in ops_cache:
            return ops_cache[key]
        s = 2j * np.pi * frequency_hz * orders
        if len(self.active) == len(self.interface):  # the interface condensation, same numbers
            D_A = self.substructure.dynamic_stiffness(s)
            F_A = external_interface_force(self.substructure, fv, frequency_hz, orders)
        else:
            sub = Substructure(self.structure, self.active)
            D_A = condense(self.structure.dynamic_stiffness(s), self.active_index)
            F_A = external_interface_force(sub, fv, frequency_hz, orders)
        ops = (harmonics.real_operator(D_A, orders), harmonics.pack(F_A, orders).reshape(-1), aft_grid(orders, self.n_time))
        if len(ops_cache) >= OPERATOR_CACHE_SIZE:
            ops_cache.pop(next(iter(ops_cache)))
        ops_cache[key] = ops
        return ops

    def _residual(self, x, Dr, b, grid: AFTGrid, omega: float, p: int, jacobian: bool):
        nA = len(self.active)
        X = x.reshape(nA, p)
        R = Dr @ x - b
        J = Dr.copy() if jacobian else None
        for e, w in zip(self.elements, self._weights):
            if e.is_zero:
                continue
            g, dg = packed_force(e, w @ X, omega, grid)
            R += np.outer(w, g).reshape(-1)
            if jacobian:
                J += np.einsum("a,b,ij->aibj", w, w, dg).reshape(nA * p, nA * p)
        return R, J

    def solve(self, frequency_hz: float, orders, F_P=None, force_vector=None, start=None) -> HarmonicBalanceSolution:
        """Harmonic balance of the active DOFs under the external point-force vector
        ``force_vector`` (n_dof,) complex at order 1 [N] and the interface force ``F_P``
        (n_interface, n_orders) the substructure applies to its neighbour. ``start``: packed
        initial state (default: the linear solution). Raises :class:`HarmonicBalanceError`
        when Newton fails."""
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        p = harmonics.packed_size(orders)
        nA, ni = len(self.active), len(self.interface)
        fv = np.zeros(self.structure.n_dof, dtype=complex) if force_vector is None else force_vector
        Dr, bF, grid = self._operators(frequency_hz, orders, fv)
        b = bF.copy()
        if F_P is not None:
            b[: ni * p] -= harmonics.pack(np.asarray(F_P), orders).reshape(-1)
        omega = 2 * np.pi * frequency_hz
        x = np.linalg.solve(Dr, b) if start is None else np.array(start, dtype=float)
        if x.shape != (nA * p,):
            raise ValueError(f"start must have {nA * p} packed entries, got {x.shape}")
        fun = lambda y: self._residual(y, Dr, b, grid, omega, p, True)  # noqa: E731
        try:
            x, R, J, it = self._newton(fun, x, frequency_hz)
        except HarmonicBalanceError:
            # globalise: follow the solution branch from zero load to the full load by
            # pseudo-arclength in (x, load factor), through folds of the load
            x0 = self._load_path(Dr, b, grid, omega, p, frequency_hz)
            x, R, J, it = self._newton(fun, x0, frequency_hz)
        return HarmonicBalanceSolution(self.active, orders, harmonics.unpack(x.reshape(nA, p), orders), x, J, it, float(np.abs(R).max()))

    def _load_path(self, Dr, b, grid, omega, p, frequency_hz) -> np.ndarray:
        """A state at full load on the branch that starts at rest under zero load:
        ``R(x, lam) = D x + f_nl(x) - lam b`` traced by pseudo-arclength in
        ``z = (x / x_scale, lam)`` (``dR/dlam = -b`` exactly) until ``lam`` passes 1."""
        n = b.size
        xs = max(np.abs(np.linalg.solve(Dr, b)).max(), np.finfo(float).tiny)

        def jac(z):
            R, J = self._residual(z[:n] * xs, Dr, z[n] * b, grid, omega, p, True)
            return R, np.hstack([J * xs, -b[:, None]])

        def tangent(z, prev):
            _, A = jac(z)
            t = np.linalg.solve(np.vstack([A, prev[None, :]]), np.eye(n + 1)[n])
            return t / np.linalg.norm(t)

        z = np.zeros(n + 1)
        reached = 0.0
        t = tangent(z, np.eye(n + 1)[n])
        h = LOAD_STEP_INITIAL
        for _ in range(LOAD_MAX_STEPS):
            zn, its = z + h * t, None
            for it in range(1, NEWTON_MAX_ITERATIONS + 1):
                R, A = jac(zn)
                dz = np.linalg.solve(np.vstack([A, t[None, :]]), -np.concatenate([R, [t @ (zn - z) - h]]))
                zn = zn + dz
                if not np.all(np.isfinite(zn)):
                    break
                if np.abs(dz).max() <= NEWTON_NOISE_FLOOR * max(1.0, np.abs(zn).max()):
                    its = it
                    break
            if its is None:
                h *= 0.5
                if h < LOAD_STEP_MIN:
                    break
                continue
            if zn[n] >= 1.0:  # interpolate to full load; Newton polishes it
                w = (1.0 - z[n]) / (zn[n] - z[n])
                return (z[:n] + w * (zn[:n] - z[:n])) * xs
            t, z = tangent(zn, t), zn
            reached = max(reached, z[n])
            if z[n] < 0.0:  # the branch folded back past zero load: full load is on another branch
                break
            if its <= LOAD_EASY_ITERATIONS:
                h = min(h * LOAD_STEP_GROW, LOAD_STEP_MAX)
        raise HarmonicBalanceError(
            f"harmonic balance at {frequency_hz:g} Hz did not converge, and the solution branch from zero load"
            f" folds back after {reached:.3g} of the load (the full load lies on another branch)"
        )

    def _newton(self, fun, x, frequency_hz):
        """Damped Newton on ``fun(x) -> (R, dR/dx)``: (x, R, J, iterations)."""
        R, J = fun(x)
        rn = np.linalg.norm(R)
        prev = np.inf
        for it in range(1, self.max_iterations + 1):
            dx = np.linalg.solve(J, -R)
            step = 1.0
            for _ in range(LINE_SEARCH_HALVINGS):
                xn = x + step * dx
                Rn, Jn = fun(xn)
                if np.linalg.norm(Rn) < rn or step * np.abs(dx).max() <= self.tolerance * np.abs(xn).max():
                    break
                step *= 0.5
            x, R, J, rn = xn, Rn, Jn, np.linalg.norm(Rn)
            size, xmax = step * np.abs(dx).max(), max(np.abs(x).max(), np.finfo(float).tiny)
            # converged: a step below the tolerance, or one at the rounding noise floor of an
            # ill-conditioned condensation that no longer contracts
            at_floor = size <= NEWTON_NOISE_FLOOR * xmax and size >= NEWTON_STAGNATION * prev
            prev = size
            if size <= self.tolerance * xmax or at_floor:
                return x, R, J, it
        raise HarmonicBalanceError(
            f"harmonic balance at {frequency_hz:g} Hz did not converge in {self.max_iterations} Newton iterations"
            f" (residual {np.abs(R).max():.3g})"
        )

    def interface_response(self, frequency_hz, orders, F_P, force_vector, start=None) -> InterfaceResponse:
        """``U_N`` and ``dU_N/dF_P`` (packed) at one frequency (see the module docstring)."""
        sol = self.solve(frequency_hz, orders, F_P, force_vector, start)
        ni, nA, p = len(self.interface), len(self.active), harmonics.packed_size(sol.orders)
        rhs = np.zeros((nA * p, ni * p))
        rhs[: ni * p] = -np.eye(ni * p)
        jac = np.linalg.solve(sol.tangent, rhs)[: ni * p]
        return InterfaceResponse(sol.coefficients[:ni], jac, sol.state, sol.iterations)

    def interface_force(self, frequency_hz, orders, U, force_vector, start=None) -> InterfaceResponse:
        """The inverse question (force form of the residual): the interface force ``F_P``
        (n_interface, n_orders) for which the substructure's interface displacement is ``U``,
        and ``d pack(F_P) / d pack(U)`` (packed). Bulk active DOFs are solved by harmonic
        balance with the interface prescribed; for a linear substructure this is
        ``F_e - D_N U``. Returned as an :class:`InterfaceResponse` whose ``displacement`` holds
        the force [N, N m] and ``jacobian`` the derivative; ``state``: the bulk active DOFs."""
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        p = harmonics.packed_size(orders)
        nA, ni = len(self.active), len(self.interface)
        n_i = ni * p
        fv = np.zeros(self.structure.n_dof, dtype=complex) if force_vector is None else force_vector
        Dr, bF, grid = self._operators(frequency_hz, orders, fv)
        omega = 2 * np.pi * frequency_hz
        u = harmonics.pack(np.asarray(U), orders).reshape(-1)
        if nA > ni:
            def bulk(y):
                R, J = self._residual(np.concatenate([u, y]), Dr, bF, grid, omega, p, True)
                return R[n_i:], J[n_i:, n_i:]

            y0 = np.linalg.solve(Dr[n_i:, n_i:], bF[n_i:] - Dr[n_i:, :n_i] @ u) if start is None else np.array(start, dtype=float)
            y, _, _, it = self._newton(bulk, y0, frequency_hz)
        else:
            y, it = np.zeros(0), 0
        R, J = self._residual(np.concatenate([u, y]), Dr, bF, grid, omega, p, True)
        # R_i = (D x + f_nl - F_A)_i + F_P = 0 at the balance, so F_P = -R_i(F_P = 0)
        F = -R[:n_i]
        dF = -(J[:n_i, :n_i] - J[:n_i, n_i:] @ np.linalg.solve(J[n_i:, n_i:], J[n_i:, :n_i])) if nA > ni else -J[:n_i, :n_i]
        return InterfaceResponse(harmonics.unpack(F.reshape(ni, p), orders), dF, y, it)

"""The numerical side of one frequency point (docs/method.md §2): ``D_N(ikW)`` and the condensed
external force, and the numerical interface displacement ``U_N`` the numerical substructure
answers to the measured interface force ``F_P``.

Units: SI. ``D`` is (n_orders, 2, 2) over the interface DOFs (u [m], theta [rad]) and their
conjugate forces (T [N], M [N m]); coefficient arrays are (2, n_orders) in the
:mod:`hbtest.method.harmonics` convention (``X_k = a_k - i b_k``); packed vectors are channel-major
(``harmonics.pack(X, orders).reshape(-1)``).

``build`` takes a linear :class:`~hbtest.method.substructure.Substructure` (today's behaviour,
``U_N = D_N^-1 (F_e - F_P)``) or any :class:`~hbtest.numerical.NumericalSubstructure`; a
nonlinear one is solved by harmonic balance for every ``F_P`` asked (``D`` and ``F_e`` are then
those of its linear part: scaling and noise estimates). :meth:`NumericalSide.displacement_jacobian`
gives ``dU_N/dF_P`` (packed) either way: ``-D_N^-1`` for a linear substructure, the AFT
harmonic-balance derivative for a nonlinear one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..method import harmonics
from ..numerical.base import HarmonicBalanceError, NumericalSubstructure

__all__ = ["NumericalSide"]


@dataclass(frozen=True)
class NumericalSide:
    """The numerical substructure at one frequency: ``D_N(ikW)`` (n_orders, 2, 2) of its linear
    part, the condensed external force coefficients ``F_e`` (2, n_orders) [N, N m], and, for a
    nonlinear substructure, the substructure and the external point-force vector (solved on
    demand; the last solution warm-starts the next)."""

    frequency_hz: float
    orders: np.ndarray
    D: np.ndarray
    F_e: np.ndarray
    substructure: Any = None
    force_vector: np.ndarray | None = None
    _last: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def build(cls, ns, force_vector, frequency_hz: float, orders) -> "NumericalSide":
        """``ns``: a :class:`~hbtest.method.substructure.Substructure` or a
        :class:`~hbtest.numerical.NumericalSubstructure`; ``force_vector``: complex point-force
        amplitudes of the fundamental over its DOFs [N]."""
        orders = np.asarray(orders, dtype=int)
        s = 2j * np.pi * frequency_hz * orders
        D = ns.dynamic_stiffness(s)
        F = np.zeros((2, orders.size), dtype=complex)
        if 1 in orders:  # the external force is a pure sinusoid at the fundamental
            k1 = int(np.flatnonzero(orders == 1)[0])
            F[:, k1] = ns.condensed_force(force_vector, s[k1])
        nonlinear = isinstance(ns, NumericalSubstructure) and not ns.is_linear
        if nonlinear:
            return cls(frequency_hz, orders, D, F, ns, np.asarray(force_vector, dtype=complex))
        return cls(frequency_hz, orders, D, F)

    @property
    def is_linear(self) -> bool:
        return self.substructure is None

    def _response(self, F_P: np.ndarray):
        F_P = np.asarray(F_P, dtype=complex)
        key = F_P.tobytes()
        if self._last.get("key") == key:
            return self._last["response"]
        try:
            r = self.substructure.interface_response(self.frequency_hz, self.orders, F_P, self.force_vector, start=self._last.get("state"))
        except HarmonicBalanceError:
            if self._last.get("state") is None:
                raise
            # the warm start lay on the wrong side of a steep change: start from the linear answer
            r = self.substructure.interface_response(self.frequency_hz, self.orders, F_P, self.force_vector)
        self._last.update(key=key, response=r, state=r.state)
        return r

    def numerical_displacement(self, F_P: np.ndarray) -> np.ndarray:
        """``U_N`` (2, n_orders): ``D_N^-1 (F_e - F_P)`` per harmonic for a linear substructure,
        the harmonic-balance solution for a nonlinear one."""
        if self.is_linear:
            return np.einsum("kij,jk->ik", np.linalg.inv(self.D), self.F_e - F_P)
        return self._response(F_P).displacement

    def displacement_jacobian(self, F_P: np.ndarray | None = None) -> np.ndarray:
        """``d pack(U_N) / d pack(F_P)`` (2p, 2p) at ``F_P`` (``-D_N^-1`` for a linear
        substructure, where ``F_P`` is not needed)."""
        if self.is_linear:
            return -harmonics.real_operator(np.linalg.inv(self.D), self.orders)
        if F_P is None:
            raise ValueError("a nonlinear substructure's Jacobian depends on F_P: pass it")
        return self._response(F_P).jacobian

    # -- force form ------------------------------------------------------------------------
    def _force(self, U_P: np.ndarray):
        U_P = np.asarray(U_P, dtype=complex)
        key = U_P.tobytes()
        if self._last.get("force_key") == key:
            return self._last["force"]
        r = self.substructure.interface_force(self.frequency_hz, self.orders, U_P, self.force_vector, start=self._last.get("force_state"))
        self._last.update(force_key=key, force=r, force_state=r.state if r.state is not None and r.state.size else None)
        return r

    def force_residual(self, U_P: np.ndarray, F_P: np.ndarray) -> np.ndarray:
        """Force-form residual (2, n_orders) [N, N m]: ``F_P - F_P*(U_P)`` with ``F_P*(U)`` the
        interface force under which the numerical substructure moves by ``U``; for a linear
        substructure ``D_N U_P + F_P - F_e`` (the loop's force form today)."""
        if self.is_linear:
            return np.einsum("kij,jk->ik", self.D, U_P) + F_P - self.F_e
        return np.asarray(F_P) - self._force(U_P).displacement

    def force_residual_jacobian(self, U_P: np.ndarray | None = None) -> np.ndarray:
        """``d pack(force_residual) / d pack(U_P)`` (2p, 2p): ``D_N`` (packed) for a linear
        substructure, ``-dF_P*/dU`` at ``U_P`` for a nonlinear one (the derivative with
        respect to ``F_P`` is the identity)."""
        if self.is_linear:
            return harmonics.real_operator(self.D, self.orders)
        if U_P is None:
            raise ValueError("a nonlinear substructure's force Jacobian depends on U_P: pass it")
        return -self._force(U_P).jacobian

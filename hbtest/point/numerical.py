"""The numerical side of one frequency point (SPEC §2): ``D_N(ikW)`` and the condensed
external force, and the numerical interface displacement ``U_N = D_N^-1 (F_e - F_P)``.

Units: SI. ``D`` is (n_orders, 2, 2) over the interface DOFs (u [m], theta [rad]) and their
conjugate forces (T [N], M [N m]); coefficient arrays are (2, n_orders) in the
:mod:`hbtest.harmonics` convention (``X_k = a_k - i b_k``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NumericalSide"]


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

"""The linear numerical substructure (today's behaviour): ``U_N = D_N(ikW)^-1 (F_e - F_P)``.

Units and sign conventions: see :mod:`hbtest.numerical.base`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..method import harmonics
from ..method.substructure import Substructure
from .base import InterfaceResponse, LinearPart

__all__ = ["LinearSubstructure", "external_interface_force"]


def external_interface_force(sub: Substructure, force_vector, frequency_hz: float, orders) -> np.ndarray:
    """Condensed external force ``F_e`` (n_interface, n_orders) [N, N m]: the point-force vector
    acts at order 1 only (zero at the other orders)."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    F = np.zeros((len(sub.interface), orders.size), dtype=complex)
    if 1 in orders:
        k1 = int(np.flatnonzero(orders == 1)[0])
        F[:, k1] = sub.condensed_force(force_vector, 2j * np.pi * frequency_hz)
    return F


@dataclass(frozen=True, eq=False)
class LinearSubstructure(LinearPart):
    """A linear substructure (a :class:`~hbtest.method.substructure.Substructure`) behind the
    :class:`~hbtest.numerical.NumericalSubstructure` protocol."""

    substructure: Substructure

    is_linear = True
    elements = ()

    def interface_response(self, frequency_hz, orders, F_P, force_vector, start=None) -> InterfaceResponse:
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        D = self.dynamic_stiffness(2j * np.pi * frequency_hz * orders)
        Dinv = np.linalg.inv(D)
        F_e = external_interface_force(self.substructure, force_vector, frequency_hz, orders)
        U = np.einsum("kij,jk->ik", Dinv, F_e - np.asarray(F_P))
        return InterfaceResponse(U, -harmonics.real_operator(Dinv, orders))

    def interface_force(self, frequency_hz, orders, U, force_vector, start=None) -> InterfaceResponse:
        """The interface force for which the interface displacement is ``U``:
        ``F_P = F_e - D_N U``, and ``dF_P/dU = -D_N`` (packed); see
        :meth:`hbtest.numerical.NonlinearSubstructure.interface_force`."""
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        D = self.dynamic_stiffness(2j * np.pi * frequency_hz * orders)
        F_e = external_interface_force(self.substructure, force_vector, frequency_hz, orders)
        F = F_e - np.einsum("kij,jk->ik", D, np.asarray(U))
        return InterfaceResponse(F, -harmonics.real_operator(D, orders))

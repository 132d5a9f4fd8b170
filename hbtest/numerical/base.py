"""The :class:`NumericalSubstructure` protocol: what the point loop needs from the numerical
side at one frequency.

Units: SI. Interface DOFs are (u [m], theta [rad]) with conjugate forces (T [N], M [N m]);
coefficient arrays are (n_interface, n_orders) complex in the :mod:`hbtest.method.harmonics`
convention ``X_k = a_k - i b_k``; packed vectors are channel-major
(``harmonics.pack(X, orders).reshape(-1)``: all orders of u, then all orders of theta).

Sign convention (as :class:`hbtest.point.NumericalSide`): ``F_P`` is the interface force
the numerical substructure applies to the physical one (measured on the rig), so the
numerical substructure itself is loaded by ``F_ext - F_P``; for a linear substructure
``U_N = D_N(ikW)^-1 (F_e - F_P)`` and ``dU_N/dF_P = -D_N^-1``.

The external force is a point-force vector over the substructure's DOFs (complex amplitudes
of the fundamental, as :meth:`hbtest.config.ExcitationSpec.force_vector` builds it): it acts
at harmonic order 1 only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["InterfaceResponse", "NumericalSubstructure", "HarmonicBalanceError"]


class HarmonicBalanceError(RuntimeError):
    """The harmonic balance of a nonlinear substructure did not converge (a numerical failure,
    not a user mistake: the message says at which frequency and how far it got)."""


@dataclass(frozen=True)
class InterfaceResponse:
    """The numerical substructure's answer at one frequency.

    displacement: ``U_N`` (n_interface, n_orders) complex [m, rad];
    jacobian: ``d pack(U_N) / d pack(F_P)`` (n_interface p, n_interface p) real;
    state: packed coefficients of every DOF the solution carries (warm start of the next
        call; ``None`` for a linear substructure);
    iterations: Newton iterations (0 for a linear substructure)."""

    displacement: np.ndarray
    jacobian: np.ndarray
    state: np.ndarray | None = None
    iterations: int = 0


@runtime_checkable
class NumericalSubstructure(Protocol):
    """A numerical substructure as the point loop sees it.

    ``structure``/``interface``/``dynamic_stiffness``/``condensed_force`` are those of its
    *linear part* (as :class:`hbtest.method.substructure.Substructure`: scaling, the force-form
    residual of a linear substructure, noise estimates); :meth:`interface_response` is the
    full (possibly nonlinear) answer."""

    @property
    def interface(self) -> tuple[str, ...]: ...

    @property
    def is_linear(self) -> bool: ...

    def dynamic_stiffness(self, s) -> np.ndarray: ...

    def condensed_force(self, F: np.ndarray, s) -> np.ndarray: ...

    def interface_response(self, frequency_hz: float, orders, F_P: np.ndarray, force_vector: np.ndarray, start: np.ndarray | None = None) -> InterfaceResponse: ...

    def interface_force(self, frequency_hz: float, orders, U: np.ndarray, force_vector: np.ndarray, start: np.ndarray | None = None) -> InterfaceResponse:
        """The inverse: the ``F_P`` giving interface displacement ``U`` (force form), with
        ``dF_P/dU`` packed (the answer's ``displacement`` field holds the force)."""
        ...


class LinearPart:
    """Mixin: the linear substructure (``self.substructure``, a
    :class:`~hbtest.method.substructure.Substructure`) behind a numerical substructure — its structure,
    interface, condensed dynamic stiffness and condensed external force."""

    @property
    def structure(self):
        return self.substructure.structure

    @property
    def interface(self) -> tuple[str, ...]:
        return self.substructure.interface

    @property
    def interface_index(self) -> list[int]:
        return self.substructure.interface_index

    def dynamic_stiffness(self, s) -> np.ndarray:
        return self.substructure.dynamic_stiffness(s)

    def condensed_force(self, F, s) -> np.ndarray:
        return self.substructure.condensed_force(F, s)


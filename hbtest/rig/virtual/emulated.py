"""The twin's exact reference of the emulated (joined) structure when either side is
nonlinear: the numerical substructure (its linear beam and its ``[[numerical.nonlinear]]``
elements) joined to the twin's PS beam (and its ``[[virtual.nonlinear]]`` elements), solved by
multi-harmonic balance with alternating frequency–time on the full FE model
(:class:`hbtest.numerical.NonlinearSubstructure`: exact per-harmonic condensation, analytic AFT
Jacobian) with harmonics ``0 .. REFERENCE_MAX_ORDER`` — many more than a test balances, so the
reference is the periodic solution of the continuous model, not of the test's truncation.

Conventions: SI; harmonic coefficients of :mod:`hbtest.method.harmonics` (``X_k = a_k - i b_k``, DC
real). The joined beam is :func:`hbtest.method.substructure.join_beams` (global node numbering: the
NS nodes first, its last node = the interface = the PS clamp node 0; PS element positions are
shifted by the NS length). The external force is the sweep's point-force vector on the NS
DOFs at the fundamental. The returned interface displacement is (u [m], theta [rad]) of the
interface node at the requested orders.

Branch choice (stepped sweep): a nonlinear response can be multi-valued. :class:`SweepReference`
solves each point by Newton from the previous point's solution (the first point: from the
linear solution, falling back to the load path from rest), so it follows the branch a stepped
test follows from the same start; where the branch folds the reference jumps like the test.
Where the branch is unique the answer does not depend on the start.
"""

from __future__ import annotations

import numpy as np

from ...method.substructure import Substructure, join_beams
from ...numerical import NonlinearSubstructure
from ..capabilities import ExactReference
from .model import Model
from .reference import ps_substructure

__all__ = ["REFERENCE_MAX_ORDER", "emulated_structure", "joined_force_vector", "SweepReference", "sweep_reference"]

#: harmonics 0 .. this order in the exact reference of a nonlinear emulated structure (a
#: penalty contact's force spectrum decays slowly, ~1/k^2: at the contact-tip sweep's
#: resonance, solving 0..12 instead of 0..24 changes harmonics 0-3 of the interface by 2e-4
#: of the fundamental, 0..48 instead of 0..24 by 4e-5)
REFERENCE_MAX_ORDER = 24


def _linear_part(ns) -> Substructure:
    return ns if isinstance(ns, Substructure) else ns.substructure


def emulated_structure(model: Model, ns) -> NonlinearSubstructure:
    """The joined beam (NS + PS) with the elements of both sides, as a
    :class:`~hbtest.numerical.NonlinearSubstructure` whose interface is the joint (u, theta).
    ``ns``: a :class:`~hbtest.method.substructure.Substructure`, a linear or a nonlinear numerical
    substructure (its ``elements``, on the NS beam's DOF names)."""
    sub = _linear_part(ns)
    joined = join_beams(sub, ps_substructure(model))
    jn = sub.structure.x_nodes.size - 1
    offset = float(sub.structure.x_nodes[-1])
    elements = tuple(getattr(ns, "elements", ())) + tuple(e.build(joined, offset) for e in model.spec.nonlinear)
    return NonlinearSubstructure(Substructure(joined, (f"u{jn}", f"theta{jn}")), elements)


def joined_force_vector(joined: NonlinearSubstructure, ns, force_vector) -> np.ndarray:
    """The NS point-force vector (over the NS DOFs) on the joined beam's DOFs (by name)."""
    S = _linear_part(ns).structure
    F = np.zeros(joined.structure.n_dof, dtype=complex)
    for name, value in zip(S.dof_names, np.asarray(force_vector, dtype=complex)):
        F[joined.structure.index(name)] += value
    return F


class SweepReference:
    """The exact interface displacement along a stepped sweep, called like
    :meth:`VirtualRig.emulated_interface_response` (``(substructure, force_vector,
    frequency_hz, orders)``; the first argument is ignored: the structure is fixed at
    construction). Each call continues the harmonic balance from the previous call's solution
    (see the module docstring); ``max_order``: the highest harmonic solved."""

    def __init__(self, model: Model, ns, max_order: int = REFERENCE_MAX_ORDER):
        self.model, self.ns = model, ns
        self.joined = emulated_structure(model, ns)
        self.max_order = int(max_order)
        self._state = None
        self._key = None

    def solve(self, force_vector, frequency_hz: float, orders=None):
        """The :class:`~hbtest.numerical.HarmonicBalanceSolution` at ``frequency_hz`` with
        orders ``0 .. max(max_order, max(orders))`` (continued from the previous call)."""
        kmax = max(self.max_order, int(np.max(orders)) if orders is not None else 0)
        ref_orders = np.arange(kmax + 1)
        F = joined_force_vector(self.joined, self.ns, force_vector)
        key = (kmax, F.tobytes())
        start = self._state if self._key == key else None
        sol = self.joined.solve(float(frequency_hz), ref_orders, None, F, start)
        self._state, self._key = sol.state, key
        return sol

    def __call__(self, substructure, force_vector, frequency_hz: float, orders) -> np.ndarray:
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        sol = self.solve(force_vector, frequency_hz, orders)
        return sol.coefficients[:2][:, orders]


def sweep_reference(rig, ns):
    """The exact reference a sweep stores for the numerical substructure ``ns`` on ``rig``:
    None when the rig has none (real instruments); the linear closed form when both sides are
    linear; else a :class:`SweepReference` (harmonic balance of the joined nonlinear structure,
    continued along the sweep). The callable takes ``(substructure, force_vector,
    frequency_hz, orders)`` and returns the interface displacement (2, n_orders): the rig's own
    :meth:`~hbtest.rig.capabilities.ExactReference.sweep_reference`."""
    return rig.sweep_reference(ns) if isinstance(rig, ExactReference) else None


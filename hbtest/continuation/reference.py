"""The exact reference of a nonlinear hybrid test: the emulated (joined) structure's harmonic
balance, from public numerical APIs — the numerical substructure (its linear part and its
nonlinear elements) joined to a physical substructure (e.g. a twin's true PS beam,
``VirtualRig.ps_substructure``), forced as the test forces the numerical side.

Units: SI; coefficient arrays (2, n_orders) over the interface DOFs (u [m], theta [rad]) in
the :mod:`hbtest.harmonics` convention. Each reference point is Newton-corrected at the
frequency asked from a start on the branch wanted (e.g. the measured interface state): between
the folds of a hardening response there are three solutions at one frequency, and the
comparison must be on the same branch.
"""

from __future__ import annotations

import numpy as np

from .. import harmonics
from ..numerical import NonlinearSubstructure
from ..substructure import Substructure, join_beams

__all__ = ["joined_structure", "reference_on_branch"]


def joined_structure(ns: NonlinearSubstructure, ps: Substructure, force_vector) -> tuple[NonlinearSubstructure, np.ndarray]:
    """The numerical substructure ``ns`` (beam, interface at its last node) joined to the
    physical beam ``ps`` (interface (u0, theta0)): a :class:`NonlinearSubstructure` whose
    interface is the joint (its DOF names are the numerical side's: its elements apply
    unchanged), and the external point-force vector over the joined DOFs [N]."""
    full = join_beams(ns.substructure, ps)
    sub = Substructure(full, tuple(ns.interface))
    fv = np.asarray(force_vector, dtype=complex)
    out = np.zeros(full.n_dof, dtype=complex)
    for i in np.flatnonzero(fv):
        out[full.index(ns.structure.dof_names[i])] = fv[i]
    return NonlinearSubstructure(sub, tuple(ns.elements)), out


def reference_on_branch(joined: NonlinearSubstructure, force_vector, frequency_hz: float, orders, start: np.ndarray) -> np.ndarray:
    """Exact interface displacement (2, n_orders) of the joined structure at ``frequency_hz``
    on the branch through ``start`` (2, n_orders): Newton from ``start``."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    if len(joined.active) != len(joined.interface):
        raise ValueError("the joined structure's nonlinear elements must act on its interface DOFs")
    x0 = harmonics.pack(np.asarray(start, dtype=complex), orders).reshape(-1)
    sol = joined.solve(frequency_hz, orders, force_vector=force_vector, start=x0)
    return sol.coefficients[:2]

"""The exact reference of a nonlinear hybrid test: the emulated (joined) structure's harmonic
balance, from public numerical APIs — the numerical substructure (its linear part and its
nonlinear elements) joined to a physical substructure (e.g. a twin's true PS beam,
``VirtualRig.ps_substructure``), forced as the test forces the numerical side.

Units: SI; coefficient arrays (2, n_orders) over the interface DOFs (u [m], theta [rad]) in
the :mod:`hbtest.method.harmonics` convention. Each reference point is Newton-corrected at the
frequency asked from a start on the branch wanted (e.g. the measured interface state): between
the folds of a hardening response there are three solutions at one frequency, and the
comparison must be on the same branch. Near a fold the same-frequency comparison is
ill-posed (the curve is vertical there: a frequency error of the rig's clock or a residual
within tolerance moves the amplitude by a finite amount at an infinitesimal frequency change),
so :func:`nearest_on_curve` also gives the exact point *nearest* to a measured one — the
orthogonal projection onto the exact curve in scaled (state, frequency) coordinates, which is
the same-frequency point away from folds and stays regular at them.
"""

from __future__ import annotations

import numpy as np

from ...method import harmonics
from ...method.substructure import Substructure, join_beams
from ...numerical import NonlinearSubstructure
from ...rig.capabilities import KnownPhysicalSide

__all__ = ["joined_structure", "reference_on_branch", "nearest_on_curve", "curve_errors", "NEAREST_TOLERANCE", "NEAREST_MAX_ITERATIONS",
           "NEAREST_FREQUENCY_STEP", "NEAREST_TANGENT_UPDATES", "TraceReference", "BRANCH_TOLERANCE"]

#: :func:`nearest_on_curve`: Newton stops at a scaled step below this (the condensed joined beam
#: rounds its residual at ~1e-9 relative: far below any measurement) ...
NEAREST_TOLERANCE = 1e-7
#: ... or after this many iterations (ValueError)
NEAREST_MAX_ITERATIONS = 30
#: the tangent of the projection is taken from the first iterates only
NEAREST_TANGENT_UPDATES = 3
#: relative frequency step of the central difference ``dR/df``
NEAREST_FREQUENCY_STEP = 1e-7


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


def _residual(joined: NonlinearSubstructure, fv, f: float, orders, x: np.ndarray, p: int):
    """Harmonic-balance residual of the joined structure with the interface state ``x``
    (packed): ``R = -F_P(x)`` — the interface force that would hold the structure at ``x``
    (zero on the curve) — and ``dR/dx``."""
    r = joined.interface_force(f, orders, harmonics.unpack(x.reshape(-1, p), orders), fv)
    return -harmonics.pack(r.displacement, orders).reshape(-1), -r.jacobian


def nearest_on_curve(joined: NonlinearSubstructure, force_vector, frequency_hz: float, orders, start: np.ndarray,
                     frequency_scale: float) -> tuple[np.ndarray, float]:
    """The exact point nearest to the measured one (``start`` (2, n_orders) at
    ``frequency_hz``): Newton on the harmonic balance of the joined structure and
    ``t . (z - z_m) = 0`` (``t`` the curve's tangent at the iterate) in ``z = (x / x_scale,
    f / frequency_scale)``, ``x_scale`` the largest packed coefficient of ``start``. Returns
    (interface displacement (2, n_orders), its frequency [Hz])."""
    from ...numerical.continuation import bordered_step, bordered_tangent

    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    p = harmonics.packed_size(orders)
    fv = np.asarray(force_vector, dtype=complex)
    xm = harmonics.pack(np.asarray(start, dtype=complex), orders).reshape(-1)
    xs = float(np.abs(xm).max())
    zm = np.concatenate([xm / xs, [frequency_hz / frequency_scale]])
    z = zm.copy()
    t = np.zeros(z.size)
    t[-1] = 1.0
    for it in range(NEAREST_MAX_ITERATIONS):
        x, f = z[:-1] * xs, float(z[-1] * frequency_scale)
        R, Jx = _residual(joined, fv, f, orders, x, p)
        h = NEAREST_FREQUENCY_STEP * f
        Rp, _ = _residual(joined, fv, f + h, orders, x, p)
        Rm, _ = _residual(joined, fv, f - h, orders, x, p)
        J = np.hstack([Jx * xs, ((Rp - Rm) / (2 * h) * frequency_scale)[:, None]])
        if it < NEAREST_TANGENT_UPDATES:  # then fixed: a plain bordered Newton
            t = bordered_tangent(J, t)
        dz = bordered_step(J, t, R, float(t @ (z - zm)))
        z = z + dz
        if np.abs(dz).max() <= NEAREST_TOLERANCE * max(1.0, np.abs(z).max()):
            x, f = z[:-1] * xs, float(z[-1] * frequency_scale)
            return harmonics.unpack(x.reshape(-1, p), orders)[:2], f
    raise ValueError(f"no exact point near the measured one at {frequency_hz:g} Hz (Newton did not converge)")


#: :class:`TraceReference`: the branch Newton's answer is kept only within this relative
#: distance of the measured fundamental (a larger one is another branch: the traced point lies
#: just past an exact fold, where its own branch has no solution at its frequency)
BRANCH_TOLERANCE = 0.1


class TraceReference:
    """The exact reference an arclength trace stores at each point: Newton at the traced
    point's frequency from the *measured* interface state, so the reference is on the branch
    the test is on (a reference continued in frequency jumps branches at every fold). Used
    when the twin's physical side is linear and the numerical side's elements act on the
    interface (:func:`joined_structure`); NaN where Newton fails or lands farther than
    :data:`BRANCH_TOLERANCE` from the measurement. Called as ``(frequency_hz, orders,
    measured)`` with ``measured`` the interface displacement (2, n_orders) or None."""

    def __init__(self, ps: Substructure, ns: NonlinearSubstructure, force_vector):
        self.joined, self.fv = joined_structure(ns, ps, force_vector)

    @classmethod
    def applies(cls, rig, ns) -> bool:
        return (isinstance(rig, KnownPhysicalSide) and rig.ps_is_linear and not getattr(ns, "is_linear", True)
                and len(ns.active) == len(ns.interface))

    def __call__(self, frequency_hz: float, orders, measured) -> np.ndarray:
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        nan = np.full((2, orders.size), np.nan + 0j)
        if measured is None or not np.all(np.isfinite(measured)):
            return nan
        try:
            U = reference_on_branch(self.joined, self.fv, frequency_hz, orders, measured)
        except (ValueError, RuntimeError, np.linalg.LinAlgError, ArithmeticError):  # HarmonicBalanceError is a RuntimeError
            return nan
        k1 = int(np.argmax(orders == 1)) if np.any(orders == 1) else 0
        scale = max(float(np.abs(measured[0, k1])), np.finfo(float).tiny)
        return U if abs(U[0, k1] - measured[0, k1]) <= BRANCH_TOLERANCE * scale else nan


def curve_errors(ds, orders, frequency_scale: float, joined: NonlinearSubstructure, force_vector) -> np.ndarray:
    """Per finished point of a store ``ds`` (trace or grid order), against the nearest exact
    point (:func:`nearest_on_curve`, ``frequency_scale`` [Hz] the band's width): ``|U_k -
    U_ref,k| / |U_ref|`` of ``u`` for each order (relative to the amplitude of the whole
    exact response there), then that point's frequency offset ``f_ref - f`` [Hz]. Rows
    (points), columns (orders..., offset)."""
    done = np.asarray(ds["done"].values, dtype=bool)
    f = ds["frequency"].values[done]
    U = ds["interface_displacement"].values[done]
    out = []
    for fi, Ui in zip(f, U):
        Ur, fr = nearest_on_curve(joined, force_vector, float(fi), orders, Ui, frequency_scale)
        out.append([*(np.abs(Ui[0] - Ur[0]) / np.linalg.norm(Ur[0])), fr - fi])
    return np.array(out)

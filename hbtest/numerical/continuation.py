"""Frequency response curves of a nonlinear substructure by pseudo-arclength continuation of
its harmonic balance (:class:`~hbtest.numerical.NonlinearSubstructure`), with fold detection.

This is the *numerical* reference (e.g. the exact nonlinear response of an emulated structure:
a substructure with zero interface force), not the hybrid test's continuation.

Units: SI, frequencies in Hz. The curve lives in ``z = (x / x_scale, f / f_scale)`` (``x``: packed
harmonic coefficients of the active DOFs, see :mod:`hbtest.numerical.nonlinear`); the
arclength step is taken in ``z``. A fold is where ``df/ds`` changes sign along the curve; its
frequency is refined by bisection on the arclength between the two bracketing points.
``dR/df`` is a central difference in frequency of the (linear, condensed) dynamic stiffness and
external force (the nonlinear forces' derivative in ``x`` is the analytic AFT one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..method import harmonics
from .base import HarmonicBalanceError
from .nonlinear import NonlinearSubstructure

__all__ = ["ResponseCurve", "trace_response", "ContinuationSettings", "bordered_tangent", "bordered_step"]


def bordered_tangent(J: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Unit tangent ``t`` of the curve ``R(z) = 0`` with Jacobian ``J = dR/dz`` (n, n + 1),
    oriented along ``previous`` (``previous . t > 0``): the bordered system
    ``[J; previous^T] t = [0; 1]``, normalised. Shared by the numerical trace and the hybrid
    test's continuation (:mod:`hbtest.sweep.arclength`)."""
    A = np.vstack([J, previous[None, :]])
    rhs = np.zeros(A.shape[0])
    rhs[-1] = 1.0
    t = np.linalg.solve(A, rhs)
    return t / np.linalg.norm(t)


def bordered_step(J: np.ndarray, t: np.ndarray, R: np.ndarray, g: float) -> np.ndarray:
    """Pseudo-arclength corrector step ``dz``: Newton on ``R(z) = 0`` and the hyperplane
    condition ``t . (z - z0) - s = g`` together, ``[J; t^T] dz = -[R; g]``."""
    return np.linalg.solve(np.vstack([J, t[None, :]]), -np.concatenate([R, [g]]))


@dataclass(frozen=True)
class ContinuationSettings:
    """Step control of :func:`trace_response` (arclength in scaled units, see module doc)."""

    initial_step: float = 0.01
    min_step: float = 1e-6
    max_step: float = 0.05
    grow: float = 1.5  # step factor after an easy correction
    easy_iterations: int = 4  # corrections converged in at most this many iterations are easy
    max_corrector_iterations: int = 12
    corrector_tolerance: float = 1e-11  # on the scaled Newton step
    noise_floor: float = 1e-8  # ... or a step this small that no longer contracts
    stagnation: float = 0.5  # (by this factor): rounding noise of the condensation
    frequency_step_hz: float = 1e-6  # central difference of dR/df (relative to f)
    fold_tolerance: float = 1e-10  # bisection stops at this arclength interval (scaled)
    max_points: int = 20000


@dataclass(frozen=True)
class ResponseCurve:
    """A traced response curve: ``frequencies_hz`` (n,), ``states`` (n, n_active p) packed,
    the active ``dofs`` and ``orders``, ``folds_hz``: fold frequencies in the order met."""

    frequencies_hz: np.ndarray
    states: np.ndarray
    dofs: tuple[str, ...]
    orders: np.ndarray
    folds_hz: np.ndarray

    def coefficients(self, dof: str) -> np.ndarray:
        """(n, n_orders) complex coefficients of one active DOF along the curve."""
        i = self.dofs.index(dof)
        p = harmonics.packed_size(self.orders)
        return harmonics.unpack(self.states[:, i * p : (i + 1) * p], self.orders)


class _Problem:
    def __init__(self, ns: NonlinearSubstructure, orders, force_vector, F_P, x_scale, f_scale, settings):
        self.ns, self.orders, self.fv = ns, np.atleast_1d(np.asarray(orders, dtype=int)), force_vector
        self.p = harmonics.packed_size(self.orders)
        self.ni = len(ns.interface)
        self.FP = None if F_P is None else harmonics.pack(np.asarray(F_P), self.orders).reshape(-1)
        self.xs, self.fs, self.s = x_scale, f_scale, settings

    def R(self, z, jacobian=True):
        x, f = z[:-1] * self.xs, z[-1] * self.fs
        Dr, b, grid = self.ns._operators(f, self.orders, self.fv)
        b = b.copy()
        if self.FP is not None:
            b[: self.ni * self.p] -= self.FP
        return self.ns._residual(x, Dr, b, grid, 2 * np.pi * f, self.p, jacobian)

    def full_jacobian(self, z):
        R, Jx = self.R(z)
        h = self.s.frequency_step_hz * z[-1]
        Rp, _ = self.R(np.concatenate([z[:-1], [z[-1] + h]]), False)
        Rm, _ = self.R(np.concatenate([z[:-1], [z[-1] - h]]), False)
        Jf = (Rp - Rm) / (2 * h)
        return R, np.hstack([Jx * self.xs, Jf[:, None]])

    def tangent(self, z, previous):
        _, J = self.full_jacobian(z)
        return bordered_tangent(J, previous)

    def correct(self, z0, t, s):
        """Newton onto the curve in the hyperplane ``t . (z - z0) = s``: (z, iterations) or None."""
        z = z0 + s * t
        prev = np.inf
        for it in range(1, self.s.max_corrector_iterations + 1):
            R, J = self.full_jacobian(z)
            g = t @ (z - z0) - s
            dz = bordered_step(J, t, R, g)
            z = z + dz
            if not np.all(np.isfinite(z)):
                return None
            size, zmax = np.abs(dz).max(), max(1.0, np.abs(z).max())
            at_floor = size <= self.s.noise_floor * zmax and size >= self.s.stagnation * prev
            prev = size
            if size <= self.s.corrector_tolerance * zmax or at_floor:
                return z, it
        return None


def trace_response(
    ns: NonlinearSubstructure,
    start_hz: float,
    stop_hz: float,
    orders,
    force_vector=None,
    F_P=None,
    settings: ContinuationSettings = ContinuationSettings(),
) -> ResponseCurve:
    """Trace the harmonic-balance response from ``start_hz`` towards ``stop_hz`` (either
    direction) through folds, until the frequency leaves the band. ``force_vector``: external
    point-force amplitudes (n_dof,) at order 1 [N]; ``F_P``: a fixed interface force
    (n_interface, n_orders) the substructure applies (default none)."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    fv = np.zeros(ns.structure.n_dof, dtype=complex) if force_vector is None else np.asarray(force_vector, dtype=complex)
    sol = ns.solve(start_hz, orders, F_P, fv)
    x_scale = max(np.abs(sol.state).max(), np.finfo(float).tiny)
    f_scale = abs(stop_hz - start_hz)
    pb = _Problem(ns, orders, fv, F_P, x_scale, f_scale, settings)
    z = np.concatenate([sol.state / x_scale, [start_hz / f_scale]])
    direction = np.sign(stop_hz - start_hz)
    t = pb.tangent(z, np.concatenate([np.zeros(z.size - 1), [direction]]))
    lo, hi = sorted((start_hz, stop_hz))
    zs, ts, folds = [z], [t], []
    h = settings.initial_step
    while len(zs) < settings.max_points:
        res = pb.correct(z, t, h)
        if res is None:
            h *= 0.5
            if h < settings.min_step:
                raise HarmonicBalanceError(f"continuation stalled at {z[-1] * f_scale:g} Hz (step below {settings.min_step:g})")
            continue
        zn, its = res
        tn = pb.tangent(zn, t)
        if np.sign(tn[-1]) != np.sign(t[-1]) and t[-1] != 0:
            folds.append(_refine_fold(pb, z, t, zn) * f_scale)
        z, t = zn, tn
        zs.append(z)
        ts.append(t)
        f = z[-1] * f_scale
        if f < lo or f > hi:
            break
        if its <= settings.easy_iterations:
            h = min(h * settings.grow, settings.max_step)
    Z = np.array(zs)
    return ResponseCurve(Z[:, -1] * f_scale, Z[:, :-1] * x_scale, ns.active, orders, np.array(folds))


def _refine_fold(pb: _Problem, z0, t0, z1) -> float:
    """Scaled frequency of the fold between z0 (tangent t0) and z1: bisection on the arclength
    ``s`` of the sign of df/ds."""
    a, b = 0.0, float(t0 @ (z1 - z0))
    fa = t0[-1]
    best = z1
    while b - a > pb.s.fold_tolerance:
        m = 0.5 * (a + b)
        res = pb.correct(z0, t0, m)
        if res is None:
            break
        zm = res[0]
        tm = pb.tangent(zm, t0)
        best = zm
        if np.sign(tm[-1]) == np.sign(fa):
            a = m
        else:
            b = m
    return float(best[-1])

"""Time integration of a delay equation by the method of steps (classical RK4), an
independent check of the characteristic roots: the growth rate of a simulated response is the
rightmost root's real part. Units: s.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .equation import DelayEquation

__all__ = ["simulate"]


def simulate(eq: DelayEquation, t_end: float, dt: float, x0=None, history: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integrate the delay equation by the method of steps with classical RK4.

    Uses the first-order form ``E_0 x'(t) = A_0 x(t) + sum_k [A_k x(t - tau_k) - E_k
    x'(t - tau_k)]`` (``x = [u; u']`` for second-order equations), ``E_0`` invertible; delayed
    values and derivatives come from cubic Lagrange interpolation of the stored solution.
    Every delay must be at least ``dt``. Initial history: ``history(t) -> (x, x')`` for
    ``t <= 0`` or the constant ``x0`` (derivative 0). Returns (t, x) with x shape
    (n_steps + 1, n_state). Units: s."""
    delays, E, A = eq.first_order()
    ns = E[0].shape[0]
    E0inv = np.linalg.inv(E[0])
    dl = [(float(d), Ek, Ak) for d, Ek, Ak in zip(delays[1:], E[1:], A[1:])]
    if dl and min(d for d, _, _ in dl) < dt * (1 - 1e-12):
        raise ValueError("every delay must be at least one time step")
    n_steps = int(round(t_end / dt))
    h0 = int(np.ceil(max([d for d, _, _ in dl], default=0.0) / dt)) + 4
    if history is None:
        x0 = np.zeros(ns) if x0 is None else np.asarray(x0, dtype=float)
        history = lambda t: (x0, np.zeros(ns))  # noqa: E731
    X = np.zeros((h0 + n_steps + 1, ns))
    Xd = np.zeros_like(X)
    for j in range(h0 + 1):
        X[j], Xd[j] = history((j - h0) * dt)
    last = h0  # index of the latest known sample (t = 0)

    # With a fixed step the delayed abscissae sit at a fixed offset from the latest sample for
    # each stage (c = 0, 1/2, 1): precompute the cubic Lagrange stencils (start index relative
    # to the latest sample, weights), using known samples only.
    def stencil(u):
        j = int(np.floor(u + 1e-9))
        j0 = min(j - 1, -3)
        xs = np.arange(j0, j0 + 4, dtype=float)
        L = np.ones(4)
        for a in range(4):
            for b in range(4):
                if a != b:
                    L[a] *= (u - xs[b]) / (xs[a] - xs[b])
        return j0, L

    sten = {c: [(*stencil(c - d / dt), Ek, Ak) for d, Ek, Ak in dl] for c in (0.0, 0.5, 1.0)}

    def f(c, x):
        rhs = A[0] @ x
        for j0, L, Ek, Ak in sten[c]:
            i = last + j0
            rhs = rhs + Ak @ (L @ X[i : i + 4]) - Ek @ (L @ Xd[i : i + 4])
        return E0inv @ rhs

    Xd[h0] = f(0.0, X[h0])
    for i in range(n_steps):
        x = X[last]
        k1 = Xd[last]
        k2 = f(0.5, x + dt / 2 * k1)
        k3 = f(0.5, x + dt / 2 * k2)
        k4 = f(1.0, x + dt * k3)
        X[last + 1] = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        last += 1
        Xd[last] = f(0.0, X[last])
    return dt * np.arange(n_steps + 1), X[h0:]

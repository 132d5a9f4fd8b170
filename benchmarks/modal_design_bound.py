"""The most rig time any modal design can save against the uniform sweep, at equal intervals.

A lower bound on the modal strategy's rig time (``sweep.strategy = "modal"``), from the Fisher
information of the single-mode model that ``hbtest modal`` fits, so that the figure printed by
``benchmarks/rig_time_modal.py`` (``modal_rig_time_ratio``) can be read against what is possible.

Model: ``H(f) = A / (w_n^2 - w^2 + 2 i zeta w_n w) + R`` (w = 2 pi f; A, R complex), parameters
f_n [Hz], zeta [1], A [1/kg], R [m/N]. Cost: a point measured for p rig periods has complex
circular noise of relative standard deviation ``s / sqrt(p)`` on H. That is the hbtest profile's
regime on the lab-calibrated twin, where a point is averaging-limited: its periods grow as
``1/accuracy^2`` and are flat across the band at a fixed relative accuracy (paper sweep, seed 1:
368-781 periods per point, 606 on average, from 16 to 19 Hz), so the noise per period relative
to |H| does not depend on the frequency. Per-point overheads (settling, the Jacobian, iterations)
are left out, which favours designs with few points: the bound is optimistic for the design.

Uniform: 31 points, 16-19 Hz, equal periods. Best design: periods ``w_i >= 0`` on a 61-point
grid of the same band minimising ``sum w_i`` subject to var(f_n), var(zeta) (and var(|A|)) no
larger than the uniform sweep's -- a convex problem (c-optimal allocation), solved by SLSQP.
``s`` cancels in the ratio. Printed: the ratio for R = 0, 2 % and 5 % of the peak |H|, last
``modal_design_bound=<ratio for f_n, zeta, |A| at R = 2 % of the peak>``.

Run: ``python benchmarks/modal_design_bound.py`` (a few seconds; no rig).
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize

# the twin's exact emulated structure, mode 2 of the paper cantilever (benchmarks/rig_time_modal.py
# prints these as "exact": f_n=18.52845 zeta=0.00794 |A|=11.62)
F_N, ZETA, A_ABS = 18.52845, 0.00794, 11.62
UNIFORM = np.linspace(16.0, 19.0, 31)
GRID = np.linspace(16.0, 19.0, 61)


def model(f, th):
    fn, z, ar, ai, rr, ri = th
    wn, w = 2 * np.pi * fn, 2 * np.pi * f
    return (ar + 1j * ai) / (wn**2 - w**2 + 2j * z * wn * w) + (rr + 1j * ri)


def variances(f, w, th) -> np.ndarray:
    """Cramer-Rao variances of f_n, zeta, |A| for periods ``w`` at frequencies ``f`` (per s^2)."""
    eps = 1e-7 * np.maximum(np.abs(th), 1e-3)
    J = np.stack([(model(f, th + e) - model(f, th - e)) / (2 * e[j]) for j, e in enumerate(np.diag(eps))], axis=1)
    h = np.abs(model(f, th))
    Jr = np.concatenate([J.real, J.imag]) / np.concatenate([h, h])[:, None]
    C = np.linalg.inv((Jr * np.concatenate([w, w])[:, None]).T @ Jr)
    gA = np.zeros(th.size)
    gA[2:4] = th[2:4] / np.hypot(th[2], th[3])
    return np.array([C[0, 0], C[1, 1], gA @ C @ gA])


def best_ratio(th, which) -> float:
    vu = variances(UNIFORM, np.ones(UNIFORM.size), th)
    cons = [{"type": "ineq", "fun": lambda x, j=j: 1 - variances(GRID, x + 1e-9, th)[j] / vu[j]} for j in which]
    r = minimize(lambda x: x.sum(), np.full(GRID.size, UNIFORM.size / GRID.size), jac=lambda x: np.ones_like(x),
                 constraints=cons, bounds=[(0, None)] * GRID.size, method="SLSQP",
                 options={"maxiter": 1000, "ftol": 1e-10})
    if not r.success:
        raise SystemExit(f"modal_design_bound: the allocation did not converge: {r.message}")
    return UNIFORM.size / r.x.sum()


def main() -> None:
    peak = A_ABS / (2 * ZETA * (2 * np.pi * F_N) ** 2)
    out = {}
    for share in (0.0, 0.02, 0.05):
        th = np.array([F_N, ZETA, A_ABS, 0.0, share * peak, 0.0])
        two, three = best_ratio(th, [0, 1]), best_ratio(th, [0, 1, 2])
        out[share] = three
        print(f"R = {share:4.0%} of the peak |H|: best design / uniform rig time for f_n, zeta: 1/{two:.2f};"
              f" for f_n, zeta, |A|: 1/{three:.2f}")
    print(f"modal_design_bound={out[0.02]:.2f}")


if __name__ == "__main__":
    main()

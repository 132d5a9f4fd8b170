"""Condensation identities and clamped-interface modes."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.method.structures import beam, mass_chain
from hbtest.method.substructure import Substructure, condense, join, join_beams, mode_nodes, split_beam

REF = dict(width=25.4e-3, thickness=1e-3, youngs_modulus=217e9, density=8210.0, zeta_mass=0.9, zeta_stiffness=7e-5)
GRID = 2j * np.pi * np.linspace(0.5, 300.0, 97)


@settings(max_examples=15, deadline=None)
@given(alpha=st.floats(0.1, 0.9))
def test_hybrid_equals_full_structure_condensed(alpha):
    ns, ps, full = split_beam(0.53, 0.53 * alpha, elements_per_metre=80, **REF)
    DN, DP = ns.dynamic_stiffness(GRID), ps.dynamic_stiffness(GRID)
    lhs = DN + DP
    j = full.node_at(0.53 * alpha)
    rhs = condense(full.dynamic_stiffness(GRID), [full.index(f"u{j}"), full.index(f"theta{j}")])
    # relative to the size of the terms summed: near a clamped-interface pole D_P is huge and
    # both sides carry eps * cond(D_bb) absolute error, which is small against |D_P|
    scale = np.abs(DN).max(axis=(-1, -2)) + np.abs(DP).max(axis=(-1, -2))
    rel = np.abs(lhs - rhs).max(axis=(-1, -2)) / scale
    # 1e-8: at a grid point within 0.1 % of a clamped-interface pole cond(D_bb) ~ 1e7 and the
    # Schur complement carries eps * cond ~ 2e-9 of its size (seen at alpha = 0.336)
    assert rel.max() < 1e-8


def test_condensed_force_and_bulk_recover_full_solution():
    ns, ps, full = split_beam(0.53, 0.17, elements_per_metre=100, **REF)
    s = 2j * np.pi * 17.3
    F = np.zeros(ns.structure.n_dof, complex)
    F[ns.structure.index("u10")] = 1.0  # a bulk force on the numerical side
    U = np.linalg.solve(ns.dynamic_stiffness(s) + ps.dynamic_stiffness(s), ns.condensed_force(F, s))
    # same as the full beam
    Ff = np.zeros(full.n_dof, complex)
    Ff[full.index("u10")] = 1.0
    q = np.linalg.solve(full.dynamic_stiffness(s), Ff)
    j = full.node_at(0.17)
    np.testing.assert_allclose(U, q[[full.index(f"u{j}"), full.index(f"theta{j}")]], rtol=1e-8)
    ub = ns.bulk_response(U, F, s)
    np.testing.assert_allclose(ub[ns.structure.index("u10") - 0], q[full.index("u10")], rtol=1e-9)


def test_receptance_peaks_at_full_structure_modes():
    from scipy.optimize import minimize_scalar

    ns, ps, full = split_beam(0.53, 0.17, elements_per_metre=100, **REF)

    def mag(f):
        D = ns.dynamic_stiffness(2j * np.pi * np.atleast_1d(f)) + ps.dynamic_stiffness(2j * np.pi * np.atleast_1d(f))
        return np.abs(np.linalg.solve(D, np.broadcast_to(np.array([1.0, 0.0]), D.shape[:-1])[..., None])[..., 0, 0])

    f = np.linspace(1.0, 60.0, 2951)  # 0.02 Hz grid, then a local maximum search
    r = mag(f)
    coarse = np.flatnonzero((r[1:-1] > r[:-2]) & (r[1:-1] > r[2:])) + 1
    peaks = [minimize_scalar(lambda x: -mag(x)[0], bounds=(f[i - 1], f[i + 1]), method="bounded",
                             options={"xatol": 1e-7}).x for i in coarse]
    modes = full.modes()
    # damped peak of the displacement receptance: w_n sqrt(1 - 2 zeta^2) (single mode approx.)
    expected = modes.frequencies_hz[:3] * np.sqrt(1 - 2 * modes.damping_ratios[:3] ** 2)
    np.testing.assert_allclose(peaks, expected, rtol=1e-3)


def test_clamped_interface_modes_are_poles_of_condensed_stiffness():
    ns, ps, _ = split_beam(0.53, 0.17, elements_per_metre=100, **REF)
    # PS clamped at x=0, free tip: cantilever of 0.36 m
    fc = ps.clamped_interface_modes()[:2]
    EI = REF["youngs_modulus"] * REF["width"] * REF["thickness"] ** 3 / 12
    rhoA = REF["density"] * REF["width"] * REF["thickness"]
    exact = np.array([1.8751040687, 4.6940911330]) ** 2 / (2 * np.pi * 0.36**2) * np.sqrt(EI / rhoA)
    np.testing.assert_allclose(fc, exact, rtol=1e-6)
    # ... and |D_P| blows up there (undamped copy)
    und = split_beam(0.53, 0.17, elements_per_metre=100, **{**REF, "zeta_mass": 0, "zeta_stiffness": 0})[1]
    near = np.abs(und.dynamic_stiffness(2j * np.pi * fc[1] * (1 + 1e-7))).max()
    far = np.abs(und.dynamic_stiffness(2j * np.pi * fc[1] * 1.1)).max()
    assert near > 1e4 * far


def test_join_of_chains_matches_whole_chain():
    m, k, c = 1.0, 100.0, 0.5
    whole = mass_chain([m, m, m], [k] * 4, [c] * 4, True, True)
    left = mass_chain([m, m / 2], [k, k], [c, c], True, False)
    right = mass_chain([m / 2, m], [k, k], [c, c], False, True)
    j = join(Substructure(left, ("x1",)), Substructure(right, ("x0",)))
    s = 2j * np.pi * np.linspace(0.1, 5, 11)
    a = condense(whole.dynamic_stiffness(s), [1])
    b = condense(j.dynamic_stiffness(s), [1])
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_mode_nodes_of_cantilever_mode2_and_join_beams():
    ns, ps, full = split_beam(0.53, 0.17, elements_per_metre=100, **REF)
    b = join_beams(ns, ps)
    # rtol 1e-7: a dense generalised eigensolve resolves the lowest eigenvalue to about
    # eps * lambda_max / lambda_1 ~ 1e-8 relative on this mesh (the two meshes differ in node order)
    np.testing.assert_allclose(b.modes().frequencies_hz[:4], full.modes().frequencies_hz[:4], rtol=1e-7)
    nodes = mode_nodes(b, b.modes().shapes[:, 1])
    # clamped-free mode 2 node at x/L = 0.7834
    assert nodes.shape == (1,)
    assert nodes[0] / 0.53 == pytest.approx(0.7834, abs=2e-4)
    assert len(mode_nodes(b, b.modes().shapes[:, 2])) == 2

"""Beam FE against Euler–Bernoulli closed forms; chains; generic; modes."""

import numpy as np
import pytest

from hbtest.method.structures import beam, generic, mass_chain

E, RHO, B, H, L = 217e9, 8210.0, 25.4e-3, 1e-3, 0.53
EI = E * B * H**3 / 12
RHOA = RHO * B * H

# roots beta_n L of the characteristic equations
CLAMPED_FREE = [1.8751040687119611, 4.694091132974175, 7.854757438237613]
CLAMPED_CLAMPED = [4.730040744862704, 7.853204624095838, 10.995607838001671]
PINNED_PINNED = [np.pi, 2 * np.pi, 3 * np.pi]


def analytic(betas):
    return np.array(betas) ** 2 / (2 * np.pi * L**2) * np.sqrt(EI / RHOA)


@pytest.mark.parametrize(
    "left,right,betas",
    [("clamped", "free", CLAMPED_FREE), ("clamped", "clamped", CLAMPED_CLAMPED), ("pinned", "pinned", PINNED_PINNED)],
)
def test_beam_frequencies_match_euler_bernoulli(left, right, betas):
    b = beam(L, B, H, E, RHO, n_elements=50, left=left, right=right)
    f = b.modes().frequencies_hz[:3]
    rel = np.abs(f / analytic(betas) - 1)
    assert np.all(rel < 1e-5), rel


def test_beam_converges_from_above_with_mesh():
    errs = [abs(beam(L, B, H, E, RHO, n).modes().frequencies_hz[2] / analytic(CLAMPED_FREE)[2] - 1) for n in (4, 8, 16)]
    assert errs[0] > errs[1] > errs[2]
    # Hermite cubics: frequency error O(h^4)
    assert errs[1] / errs[2] > 10


def test_beam_damping_ratio_is_rayleigh():
    zm, zk = 0.9, 7e-5
    b = beam(L, B, H, E, RHO, 40, zeta_mass=zm, zeta_stiffness=zk)
    m = b.modes()
    w = 2 * np.pi * m.frequencies_hz[:4]
    np.testing.assert_allclose(m.damping_ratios[:4], zm / (2 * w) + zk * w / 2, rtol=1e-8)


def test_static_tip_deflection_is_exact():
    b = beam(L, B, H, E, RHO, 5)  # cubic shape functions: exact for point loads
    F = np.zeros(b.n_dof)
    F[b.index("u5")] = 1.0
    q = np.linalg.solve(b.K, F)
    assert q[b.index("u5")] == pytest.approx(L**3 / (3 * EI), rel=1e-12)
    # curvature at the root: M = F L => u'' = F L / EI
    assert b.curvature(q, 0.0) == pytest.approx(L / EI, rel=1e-10)


def test_symmetric_three_mass_two_wall_chain():
    m, k = 2.0, 1000.0
    s = mass_chain([m, m, m], [k, k, k, k], None, True, True)
    f = s.modes().frequencies_hz
    # eigenvalues of k/m * tridiag(-1, 2, -1): 2 - sqrt2, 2, 2 + sqrt2
    expected = np.sqrt(k / m * np.array([2 - np.sqrt(2), 2, 2 + np.sqrt(2)])) / (2 * np.pi)
    np.testing.assert_allclose(f, expected, rtol=1e-12)
    with pytest.raises(ValueError):
        mass_chain([m, m], [k], None, True, True)


def test_generic_checks_and_receptance_peaks_at_modes():
    K = np.array([[2.0, -1.0], [-1.0, 1.0]]) * 1e4
    M = np.eye(2)
    s = generic(M, 1e-7 * K, K)  # light damping: peaks at the undamped frequencies
    f = s.modes().frequencies_hz
    grid = np.linspace(0.5 * f[0], 1.5 * f[1], 20001)
    r = np.abs(s.receptance(grid, np.array([0.0, 1.0]))[:, 1])
    peaks = grid[1:-1][(r[1:-1] > r[:-2]) & (r[1:-1] > r[2:])]
    np.testing.assert_allclose(peaks, f, rtol=2e-4)
    with pytest.raises(ValueError):
        generic(np.array([[1.0, 0.1], [0.0, 1.0]]), K, K)
    with pytest.raises(ValueError):
        generic(-np.eye(2), K, K)

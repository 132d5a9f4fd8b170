"""Delay stability: closed forms, independent root methods, time simulation, CLI."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.realtime import stability as S
from hbtest.cli import main

REF = dict(width=25.4e-3, thickness=1e-3, youngs_modulus=217e9, density=8210.0, zeta_mass=0.9, zeta_stiffness=7e-5)
L_REF = 0.53


def growth_rate(t, u, t_min):
    """Slope of log |u| through its local maxima after t_min [1/s]."""
    a = np.abs(u)
    i = np.flatnonzero((a[1:-1] > a[:-2]) & (a[1:-1] >= a[2:])) + 1
    i = i[t[i] > t_min]
    return np.polyfit(t[i], np.log(a[i]), 1)[0]


# ---------------------------------------------------------------------------------------
# predictor weights


def test_predictor_weights_textbook_extrapolation():
    np.testing.assert_allclose(S.polynomial_predictor_weights(2, 3, 1), [3, -3, 1], atol=1e-12)
    np.testing.assert_allclose(S.polynomial_predictor_weights(1, 2, 1), [2, -1], atol=1e-12)
    np.testing.assert_allclose(S.polynomial_predictor_weights(2, 3, 0), [1, 0, 0], atol=1e-12)
    np.testing.assert_allclose(S.polynomial_predictor_weights(0, 4, 3.7), [0.25] * 4, atol=1e-12)
    w = S.polynomial_predictor_weights(2, 3, [1.0, 2.0])
    assert w.shape == (2, 3)
    np.testing.assert_allclose(w[1], [6, -8, 3], atol=1e-12)  # Lagrange through 0, -1, -2 at +2
    with pytest.raises(ValueError):
        S.polynomial_predictor_weights(3, 3, 1.0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(order=st.integers(0, 3), extra=st.integers(0, 5), h=st.floats(-1.0, 5.0), seed=st.integers(0, 2**16))
def test_predictor_exact_for_polynomials_and_least_squares(order, extra, h, seed):
    n = order + 1 + extra
    w = S.polynomial_predictor_weights(order, n, h)
    rng = np.random.default_rng(seed)
    c = rng.normal(size=order + 1)
    t = -np.arange(n)
    np.testing.assert_allclose(w @ np.polyval(c, t), np.polyval(c, h), rtol=1e-8, atol=1e-8 * (1 + abs(h)) ** order)
    # least squares: the prediction of noisy data equals the LS fit evaluated at h
    y = rng.normal(size=n)
    fit = np.polyfit(t, y, order)
    assert abs(w @ y - np.polyval(fit, h)) < 1e-8 * (1 + abs(h)) ** max(order, 1) * (1 + np.abs(y).max())


# ---------------------------------------------------------------------------------------
# single oscillator: closed forms against root computations


@settings(max_examples=25, deadline=None, derandomize=True)
@given(zeta=st.floats(0.005, 0.3), p=st.floats(0.2, 3.0), wn=st.floats(2.0, 200.0))
def test_sdof_crossing_scan_equals_closed_form_and_phase_margin(zeta, p, wn):
    m, k = 1.0, wn * wn
    c, ks = 2 * zeta * wn * m, p * k
    closed = S.sdof_critical_delay(m, c, k, ks)
    pm = S.sdof_phase_margin(m, c, k, ks)
    scan = S.sdof_system(m, c, k, ks).critical_delay(cutoff_hz=1e4, tau_max=50.0 / wn)
    stable_all = bool(S.sdof_stable_for_all_delays(zeta, p))
    if stable_all:
        assert math.isinf(closed.delay_s) and math.isinf(scan.delay_s) and math.isinf(pm.critical_delay_s)
        return
    assert closed.delay_s == pytest.approx(scan.delay_s, rel=1e-8)
    assert pm.critical_delay_s == pytest.approx(closed.delay_s, rel=1e-12)
    assert scan.frequency_hz == pytest.approx(closed.frequency_hz, rel=1e-8)
    assert pm.crossover_hz == pytest.approx(closed.frequency_hz, rel=1e-12)
    # the nondimensional delay lies on the Hopf curve at the crossing frequency
    w_hat = 2 * np.pi * closed.frequency_hz / wn
    tau_hat, p_curve = S.sdof_hopf_curve_p(zeta, w_hat)
    assert p_curve == pytest.approx(p, rel=1e-9)
    assert tau_hat == pytest.approx(closed.delay_s * wn, rel=1e-9)


def test_sdof_hopf_curves_are_roots_on_the_axis():
    w = np.linspace(0.3, 2.5, 111)
    for zeta in (0.01, 0.1, 0.5):
        for branch in (0, 1):
            tau, p = S.sdof_hopf_curve_p(zeta, w, branch)
            lam = 1j * w
            res = lam**2 + 2 * zeta * lam + 1 + p * np.exp(-lam * tau)
            assert np.abs(res).max() < 1e-12
    for p in (0.5, 1.0, 2.0):
        tau, zeta = S.sdof_hopf_curve_zeta(p, w)
        ok = np.isfinite(tau)
        assert ok.sum() > 5
        lam = 1j * w[ok]
        res = lam**2 + 2 * zeta[ok] * lam + 1 + p * np.exp(-lam * tau[ok])
        assert np.abs(res).max() < 1e-12


def test_sdof_hopf_curve_crosses_stability():
    """Just left of the (tau, p) Hopf curve's first branch the oscillator is stable, just
    right of it unstable (argument-principle count)."""
    zeta = 0.05
    for w in (1.2, 1.6):
        tau, p = S.sdof_hopf_curve_p(zeta, w)
        sy = S.sdof_system(1.0, 2 * zeta, 1.0, p)
        assert sy.count_unstable(0.97 * tau, cutoff_hz=5) == 0
        assert sy.count_unstable(1.03 * tau, cutoff_hz=5) == 2


def test_small_delay_estimate_is_the_limit():
    m, k, ks = 1.0, 1000.0, 600.0
    errs = []
    for c in (1e-1, 1e-2, 1e-3):
        tc = S.sdof_critical_delay(m, c, k, ks).delay_s
        errs.append(abs(tc / S.small_delay_estimate(c, ks) - 1))
    assert errs[-1] < 1e-3
    assert errs[0] > errs[1] > errs[2]  # converges as damping (and the delay) -> 0
    assert errs[1] / errs[2] == pytest.approx(100, rel=0.2)  # relative error O(c^2)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(zeta=st.floats(0.01, 1.5), p=st.floats(0.05, 2.0))
def test_stable_for_all_delays_region(zeta, p):
    closed = S.sdof_critical_delay(1.0, 2 * zeta, 1.0, p)
    assert bool(S.sdof_stable_for_all_delays(zeta, p)) == math.isinf(closed.delay_s)


def test_stable_for_all_delays_known_points():
    assert S.sdof_stable_for_all_delays(0.8, 0.9)  # zeta^2 > 1/2, p < 1
    assert not S.sdof_stable_for_all_delays(0.8, 1.1)  # p > 1: always a crossing
    assert S.sdof_stable_for_all_delays(0.3, 0.5)  # (1 - 2 zeta^2)^2 = 0.6724 < 0.75
    assert not S.sdof_stable_for_all_delays(0.1, 0.5)


# ---------------------------------------------------------------------------------------
# independent root methods


def test_spectral_roots_agree_with_pade_rational_approximation():
    m, c, k, ks = 1.0, 0.1, 1.0, 0.5
    tau = 0.6
    r = S.sdof_system(m, c, k, ks).equation(tau).rightmost(cutoff_hz=1.0)
    # diagonal Pade [8/8] of exp(-x): polynomial characteristic equation
    n = 8
    coef = [math.factorial(2 * n - j) * math.factorial(n) / (math.factorial(2 * n) * math.factorial(j) * math.factorial(n - j)) for j in range(n + 1)]
    num = np.poly1d([coef[j] * (-tau) ** j for j in range(n + 1)][::-1])
    den = np.poly1d([coef[j] * tau**j for j in range(n + 1)][::-1])
    char = np.poly1d([m, c, k]) * den + ks * num
    roots = char.roots
    near = roots[np.argmin(np.abs(roots - r))]
    assert abs(near - r) < 1e-9 * abs(r)


def test_newton_polished_roots_are_roots_of_det():
    eq = S.sdof_system(1.0, 0.1, 1.0, 0.5).equation(2.0)
    r = eq.roots(cutoff_hz=3.0)
    assert r.size >= 4
    res = np.abs([eq.matrix(z)[0, 0] for z in r])
    assert res.max() < 1e-9
    # more collocation nodes: the same polished roots
    r2 = eq.roots(cutoff_hz=3.0, n_nodes=60)
    assert r2.size == r.size
    nearest = np.array([r[np.argmin(np.abs(r - z))] for z in r2])
    np.testing.assert_allclose(r2, nearest, rtol=1e-9)


@pytest.fixture(scope="module")
def beam_reduced():
    """Reference cantilever split at 170 mm, Craig–Bampton parts (modes up to 750 Hz)."""
    return S.beam_hybrid(L_REF, 0.17, **REF, modes_up_to_hz=750.0)


@pytest.fixture(scope="module")
def beam_full():
    return S.beam_hybrid(L_REF, 0.17, **REF)


def test_block_matrix_is_the_entire_form_of_the_condensed_equation(beam_full):
    sy = beam_full
    s = np.array([2j * np.pi * 17.0 + 3.0, 40.0 + 2j * np.pi * 260.0, -5 + 1j * 900])
    tau = 1.3e-3
    e = np.exp(-s * tau)
    T = sy.equation(tau).matrix(s)
    Dn = sy.ns.dynamic_stiffness(s)
    Dp = sy.ps.dynamic_stiffness(s)
    b = sy.ns.bulk_index
    Nbb = sy.ns.structure.dynamic_stiffness(s)[:, b][:, :, b]
    b = sy.ps.bulk_index
    Pbb = sy.ps.structure.dynamic_stiffness(s)[:, b][:, :, b]
    lhs = np.linalg.slogdet(T)
    parts = [np.linalg.slogdet(X) for X in (Nbb, Pbb, Dn + e[:, None, None] * Dp)]
    np.testing.assert_allclose(lhs.logabsdet, sum(p.logabsdet for p in parts), rtol=1e-9)
    np.testing.assert_allclose(lhs.sign, np.prod([p.sign for p in parts], axis=0), atol=1e-7)
    # the fast pencil equals the substructure condensation
    P, Q = sy.pencil(s)
    np.testing.assert_allclose(P, Dn, rtol=1e-8, atol=1e-8 * np.abs(Dn).max())
    np.testing.assert_allclose(Q, Dp, rtol=1e-8, atol=1e-8 * np.abs(Dp).max())


def test_beam_spectral_roots_match_argument_principle_count(beam_reduced):
    fc = 250.0
    wc = 2 * np.pi * fc
    for tau in (1.5e-3, 4e-3):
        eq = beam_reduced.equation(tau)
        lo = -40.0
        r = eq.roots(fc, sigma_min=lo, n_nodes=36)
        hi = eq.sigma_bound(wc)
        assert np.all(r.real < hi)
        inside = np.sum((r.real > lo) & (np.abs(r.imag) < wc))
        assert S.count_roots(eq, lo, hi, wc) == inside
        # and the unstable count from the crossing scan
        cd = beam_reduced.critical_delay(fc, tau_max=5e-3, all_crossings=True)
        assert cd.unstable_roots(tau) == np.sum(r.real > 0)


def test_beam_crossing_count_matches_argument_principle(beam_full):
    for fc in (100.0, 500.0):
        cd = beam_full.critical_delay(fc, tau_max=0.02, all_crossings=True)
        assert cd.delay_s > 0
        taus = sorted({0.5 * cd.delay_s, 0.98 * cd.delay_s, 1.02 * cd.delay_s, 0.0123, 0.0191})
        for tau in taus:
            assert cd.unstable_roots(tau) == beam_full.count_unstable(tau, fc), (fc, tau)


def test_beam_critical_delay_brackets_spectral_rightmost(beam_reduced):
    fc = 250.0
    cd = beam_reduced.critical_delay(fc)
    assert cd.boundary in ("imaginary-axis", "cut-off")
    below = beam_reduced.equation(0.97 * cd.delay_s).roots(fc, sigma_min=-50.0, n_nodes=30)
    above = beam_reduced.equation(1.03 * cd.delay_s).roots(fc, sigma_min=-50.0, n_nodes=30)
    assert below.real.max() < 0 < above.real.max()
    top = above[np.argmax(above.real)]
    assert abs(abs(top.imag) / (2 * np.pi) - cd.frequency_hz) < 0.05 * fc


def test_craig_bampton_accuracy(beam_full, beam_reduced):
    """Condensed stiffness below the cut-off converges with the kept fixed-interface modes;
    critical delays of the 3x-cut-off reduction agree with the full mesh within 2 %."""
    s = 2j * np.pi * np.linspace(1.0, 250.0, 200)
    for side in ("ns", "ps"):
        full = getattr(beam_full, side)
        errs = []
        for mult in (3, 6, 12):
            red = S.craig_bampton(full, 250.0 * mult)
            Df, Dr = full.dynamic_stiffness(s), red.dynamic_stiffness(s)
            errs.append((np.abs(Df - Dr).max(axis=(1, 2)) / np.abs(Df).max(axis=(1, 2))).max())
        assert errs[0] > errs[1] > errs[2]
        assert errs[1] < 0.02 and errs[2] < 3e-3
    for fc in (100.0, 250.0):
        a = beam_full.critical_delay(fc).delay_s
        b = beam_reduced.critical_delay(fc).delay_s
        assert b == pytest.approx(a, rel=0.02)


def test_neutral_chain_asymptotics():
    """(s^2 + 0.05 s + 1) + (0.5 s^2 + 0.3) e^{-s tau}: z_inf = -2, so high-frequency roots
    approach (-ln 2 + i (2k+1) pi) / tau."""
    tau = 0.7
    sy = S.SingleDelaySystem(([[1.0]], [[0.05]], [[1.0]]), ([[0.5]], [[0.0]], [[0.3]]))
    assert sy.is_neutral
    np.testing.assert_allclose(sy.z_infinity(), [-2.0])
    r = sy.equation(tau).roots(cutoff_hz=40.0, sigma_min=-5.0)
    hi = r[r.imag > 150]
    assert hi.size > 5
    np.testing.assert_allclose(hi.real, -np.log(2) / tau, atol=0.02)
    k = np.round((hi.imag * tau / np.pi - 1) / 2)
    np.testing.assert_allclose(hi.imag, (2 * k + 1) * np.pi / tau, atol=0.05)


def test_neutral_chain_in_rhp_enters_through_cutoff():
    """A delayed mass heavier than the undelayed one: the chain sits in the right half-plane
    for every delay; the critical delay is set by the cut-off, the root entering through
    the cut-off line at about tau = pi / (2 pi f_c) (z_inf = -1/2: Im s tau ~ pi)."""
    sy = S.SingleDelaySystem(([[0.5]], [[0.5]], [[100.0]]), ([[1.0]], [[0.0]], [[50.0]]))
    for fc in (20.0, 50.0):
        cd = sy.critical_delay(fc, tau_max=1.0)
        assert cd.boundary == "cut-off"
        assert cd.frequency_hz == pytest.approx(fc)
        assert cd.delay_s == pytest.approx(np.pi / (2 * np.pi * fc), rel=0.2)
        assert sy.count_unstable(0.97 * cd.delay_s, fc) == 0
        assert sy.count_unstable(1.03 * cd.delay_s, fc) == 2


# ---------------------------------------------------------------------------------------
# time simulation: growth rate = rightmost real part


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.5])
def test_simulation_growth_rate_sdof(tau):
    eq = S.sdof_system(1.0, 0.1, 1.0, 0.5).equation(tau)
    r = eq.rightmost(cutoff_hz=1.0)
    t, x = S.simulate(eq, 60.0, 0.01, x0=[1.0, 0.0])
    assert growth_rate(t, x[:, 0], 15.0) == pytest.approx(r.real, abs=2e-3 + 1e-2 * abs(r.real))


def test_simulation_growth_rate_neutral():
    eq = S.DelayEquation([S.DelayTerm(0, [[1.0]], [[0.05]], [[1.0]]), S.DelayTerm(0.7, [[0.5]], [[0]], [[0.3]])])
    assert eq.is_neutral
    r = eq.rightmost(cutoff_hz=2.0)
    t, x = S.simulate(eq, 60.0, 0.005, x0=[1.0, 0.0])
    assert growth_rate(t, x[:, 0], 15.0) == pytest.approx(r.real, abs=2e-3)


def test_simulation_growth_rate_chain_and_predictor():
    sy = S.chain_hybrid([1.0, 0.5, 1.0], [1.0, 2.0, 2.0, 1.0], [0.01, 0.005, 0.005, 0.01], True, True, [0, 2], [1], [1, 2])
    eq = sy.equation(0.2)
    r = eq.rightmost(cutoff_hz=2.0)
    t, x = S.simulate(eq, 80.0, 0.01, x0=[1.0, 0.3, 0.0, 0, 0, 0])
    assert growth_rate(t, x[:, 0], 30.0) == pytest.approx(r.real, abs=3e-3)
    # multi-delay: predictor before the actuator (order 1, 2 samples, dt 0.05, rho 0.3)
    eqp = S.predictor_equation(S.sdof_system(1.0, 0.1, 1.0, 0.5), 0.4, 1, 2, 0.05, 0.3)
    rp = eqp.rightmost(cutoff_hz=2.0)
    t, x = S.simulate(eqp, 60.0, 0.01, x0=[1.0, 0.0])
    assert growth_rate(t, x[:, 0], 15.0) == pytest.approx(rp.real, abs=2e-3)


# ---------------------------------------------------------------------------------------
# compensated loop


def test_predictor_equation_square_case_at_zero_horizon_is_plain_delay():
    sy = S.sdof_system(1.0, 0.5, 1000.0, 500.0)
    s = np.array([3 + 40j, -2 + 300j])
    a = S.predictor_equation(sy, 2e-3, 2, 3, 1e-3, 0.0).matrix(s)
    b = sy.equation(2e-3).matrix(s)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_stable_prediction_interval():
    sy = S.sdof_system(1.0, 0.5, 1000.0, 500.0)
    tau_c = S.sdof_critical_delay(1.0, 0.5, 1000.0, 500.0).delay_s
    tau, dt = 3e-3, 1e-3
    iv = S.stable_prediction_intervals(sy, tau, 2, 3, dt, rho_range=(0.0, 0.02), n_grid=21)
    assert len(iv) == 1
    lo, hi = iv[0]
    assert lo < tau < hi
    # roughly the uncompensated margin is recovered: the residual delay tau - rho < tau_c
    assert tau - lo == pytest.approx(tau_c, rel=0.2)
    for rho, stable in ((lo - 2e-5, False), (lo + 2e-5, True), (tau, True)):
        r = S.predictor_equation(sy, tau, 2, 3, dt, rho).rightmost(cutoff_hz=500.0)
        assert (r.real < 0) == stable


# ---------------------------------------------------------------------------------------
# lumped chain, maps


def test_chain_assembly_and_critical_delay():
    sy = S.chain_hybrid([1.0, 0.5, 1.0], [1000.0, 2000.0, 2000.0, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True, [0, 2], [1], [1, 2])
    assert sy.dof_names == ("I.x0", "I.x2", "P.x1")
    assert not sy.is_neutral
    # at zero delay the hybrid equals the full chain
    from hbtest.method.structures import mass_chain

    full = mass_chain([1.0, 0.5, 1.0], [1000.0, 2000.0, 2000.0, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True)
    lam0 = np.sort_complex(sy.eigenvalues_without_delay())
    np.testing.assert_allclose(lam0, np.sort_complex(full.eigenvalues()), rtol=1e-9)
    cd = sy.critical_delay(500.0)
    assert cd.boundary == "imaginary-axis"
    assert sy.count_unstable(0.98 * cd.delay_s) == 0
    assert sy.count_unstable(1.02 * cd.delay_s) == 2
    with pytest.raises(ValueError, match="interface"):
        S.chain_hybrid([1.0, 0.5, 1.0], [1.0] * 4, None, True, True, [0], [1], [1, 2])


def test_delay_map_and_parameter_map():
    def chain(k1, k2=2000.0):
        return S.chain_hybrid([1.0, 0.5, 1.0], [1000.0, k1, k2, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True, [0, 2], [1], [1, 2])

    delays = np.linspace(0.0, 4e-3, 9)
    dm = S.delay_map(chain, [1000.0, 3000.0], delays)
    assert dm.unstable_roots.shape == (2, 9)
    for i, k1 in enumerate([1000.0, 3000.0]):
        for j in (2, 5, 8):
            assert dm.unstable_roots[i, j] == chain(k1).count_unstable(delays[j])
        assert np.all(dm.stable[i, delays < dm.critical_delay_s[i]])
    pm = S.parameter_map(chain, [1000.0, 3000.0], [1000.0, 2000.0], delay=1e-3)
    assert pm.critical_delay_s.shape == (2, 2)
    assert pm.critical_delay_s[1, 1] == pytest.approx(dm.critical_delay_s[1])
    assert np.array_equal(pm.unstable_roots == 0, pm.critical_delay_s > 1e-3)


def test_beam_delay_map_small():
    dm = S.beam_delay_map([0.3, 0.6], [0.5e-3, 3e-3], L_REF, **REF, cutoff_hz=250.0, elements_per_metre=40)
    assert dm.unstable_roots.shape == (2, 2)
    assert np.all(dm.unstable_roots[:, 0] == 0) and np.all(dm.unstable_roots[:, 1] > 0)
    assert np.all((dm.critical_delay_s > 0.5e-3) & (dm.critical_delay_s < 3e-3))


# ---------------------------------------------------------------------------------------
# CLI


def run_json(capsys, argv):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_cli_sdof_methods_agree(capsys):
    base = ["stability", "sdof", "--m", "1", "--k", "1000", "--c", "0.5", "--ks", "500", "--json"]
    a = run_json(capsys, base)
    b = run_json(capsys, base + ["--method", "phase-margin"])
    assert a["critical_delay_s"] == pytest.approx(b["critical_delay_s"], rel=1e-8)
    assert a["frequency_hz"] == pytest.approx(b["frequency_hz"], rel=1e-8)
    assert 0 < b["phase_margin_deg"] < 180 and b["crossover_hz"] == pytest.approx(a["frequency_hz"], rel=1e-8)
    c = run_json(capsys, base + ["--delay", "0.003", "--predictor-order", "2", "--predictor-samples", "3", "--sample-time", "0.001", "--rho-max", "0.01"])
    lo, hi = c["stable_prediction_interval_s"]
    assert lo < 0.003 < hi
    assert main(["stability", "sdof", "--m", "1", "--k", "1000", "--c", "0.5", "--ks", "500"]) == 0
    assert "critical delay" in capsys.readouterr().out


def test_cli_chain_and_plot(capsys, tmp_path):
    out = run_json(capsys, ["stability", "chain", "sweeps/three-mass-chain.toml", "--json"])
    sy = S.chain_hybrid([1.0, 0.5, 1.0], [1000.0, 2000.0, 2000.0, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True, [0, 2], [1], [1, 2])
    assert out["critical_delay_s"] == pytest.approx(sy.critical_delay(500.0).delay_s, rel=1e-9)
    png = tmp_path / "locus.png"
    assert main(["stability", "chain", "sweeps/three-mass-chain.toml", "--plot", str(png)]) == 0
    assert png.stat().st_size > 1000


PAPER = "sweeps/paper-cantilever.toml"  # complete sweep file; its PS beam comes from the rig file
COARSE = ["--set", "numerical.elements=10"]


def test_cli_beam(capsys):
    one = run_json(capsys, ["stability", "beam", PAPER, *COARSE, "--cutoff-hz", "250", "--json"])
    assert one["alpha"] == pytest.approx(170 / 530)
    ref = S.beam_hybrid(L_REF, 0.17, **REF, elements_per_metre=10 / 0.17).critical_delay(250.0)
    assert one["critical_delay_s"] == pytest.approx(ref.delay_s, rel=1e-6)
    grid = run_json(capsys, ["stability", "beam", PAPER, *COARSE, "--cutoff-hz", "250", "--alpha-grid", "0.3:0.5:2", "--json"])
    assert len(grid["critical_delay_s"]) == 2 and grid["alpha"] == [0.3, 0.5]


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["stability", "sdof", "--m", "-1", "--k", "1", "--c", "0", "--ks", "1"], "--m"),
        (["stability", "sdof", "--m", "1", "--k", "1", "--c", "0.1", "--ks", "1", "--delay", "0.1"], "--predictor-order"),
        (["stability", "sdof", "--m", "1", "--k", "1", "--c", "0.1", "--ks", "1", "--cutoff-hz", "0"], "--cutoff-hz"),
        (["stability", "chain", "does-not-exist.toml"], "does-not-exist.toml"),
        (["stability", "beam", PAPER, "--set", "numerical.kind=plate", "--cutoff-hz", "100"], "numerical"),
        (["stability", "beam", "sweeps/three-mass-chain.toml", "--cutoff-hz", "100"], "three-mass-chain.toml"),
    ],
)
def test_cli_user_errors(capsys, argv, needle):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def test_cli_bad_chain_file(capsys, tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('[chain]\nmasses_kg = [1.0, 1.0]\nsprings_n_per_m = [1.0, 1.0]\n[split]\ninterface = ["x7"]\n')
    assert main(["stability", "chain", str(f)]) == 2
    assert "split.interface" in capsys.readouterr().err
    f.write_text('[chain]\nmasses_kg = [1.0, 1.0]\nsprings_n_per_m = [1.0]\n[split]\ninterface = ["x0"]\n')
    assert main(["stability", "chain", str(f)]) == 2
    assert "chain.springs_n_per_m" in capsys.readouterr().err
    # a [design.physical] PS beam without its length
    assert main(["stability", "beam", PAPER, *COARSE, "--set", "design.physical.width_mm=25.4"]) == 2
    assert "physical.length_mm" in capsys.readouterr().err


def test_state_space_forms_hayes_equation():
    """x' = -x(t - tau): stable iff tau < pi/2, crossing at 1 rad/s (Hayes)."""
    sy = S.SingleDelaySystem.from_state_space([[0.0]], [[-1.0]])
    assert not sy.is_neutral
    assert math.isinf(sy.critical_delay(cutoff_hz=10.0, tau_max=1.0).delay_s)  # searched up to 1 s
    cd = sy.critical_delay(cutoff_hz=10.0, tau_max=10.0)
    assert cd.delay_s == pytest.approx(np.pi / 2, rel=1e-10)
    assert cd.frequency_hz == pytest.approx(1 / (2 * np.pi), rel=1e-10)
    eq = S.DelayEquation.from_state_space([[0.0]], delayed=[(1.2, [[-1.0]])])
    assert eq.order == 1 and eq.count_unstable(10.0) == 0
    assert S.DelayEquation.from_state_space([[0.0]], delayed=[(1.7, [[-1.0]])]).count_unstable(10.0) == 2
    # two delays: x' = -0.6 x(t - 1) - 0.6 x(t - 2); spectral roots against the argument principle
    eq2 = S.DelayEquation.from_state_space([[0.0]], delayed=[(1.0, [[-0.6]]), (2.0, [[-0.6]])])
    r = eq2.roots(cutoff_hz=2.0, sigma_min=-1.5)
    assert S.count_roots(eq2, -1.5, eq2.sigma_bound(4 * np.pi), 4 * np.pi) == r.size
    assert eq2.count_unstable(2.0) == np.sum(r.real > 0)
    # neutral state space: x' + 0.5 x'(t - 1) = -x  ->  z_inf = -2, chain at Re s = -ln 2
    sn = S.SingleDelaySystem.from_state_space([[-1.0]], [[0.0]], E1=[[0.5]])
    assert sn.is_neutral
    np.testing.assert_allclose(sn.z_infinity(), [-2.0])


def _spd(rng, n, scale):
    X = rng.normal(size=(n, n))
    return scale * (X @ X.T / n + 0.3 * np.eye(n))


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), neutral=st.booleans())
def test_random_two_dof_crossing_count_equals_argument_principle(seed, neutral):
    """Random 2-DOF systems with a delayed stiffness (retarded) or also a delayed mass
    (neutral): the unstable-root count from the boundary crossings equals the
    argument-principle count at random delays."""
    rng = np.random.default_rng(seed)
    MA, KA = _spd(rng, 2, 1.0), _spd(rng, 2, 4e4)
    CA = 2e-3 * KA + 0.5 * MA
    MB = _spd(rng, 2, rng.uniform(0.2, 2.0)) if neutral else np.zeros((2, 2))
    KB = _spd(rng, 2, 2e4)
    sy = S.SingleDelaySystem((MA, CA, KA), (MB, 0.2 * CA, KB))
    fc = 60.0
    cd = sy.critical_delay(fc, tau_max=0.05, all_crossings=True)
    for tau in rng.uniform(1e-3, 0.05, 2):
        try:
            n_ap = sy.count_unstable(tau, fc)
        except RuntimeError:  # a root on the contour: skip this delay
            continue
        assert cd.unstable_roots(tau) == n_ap, (seed, neutral, tau)


def test_advanced_type_split_is_unstable_at_any_delay():
    """An interface mass entirely in the PS (no undelayed inertia) gives an advanced-type
    equation: unstable for every delay."""
    sy = S.chain_hybrid([1.0, 0.5, 1.0], [1000.0, 2000.0, 2000.0, 1000.0], [1.0, 0.5, 0.5, 1.0], True, True, [0, 2], [0, 1], [1, 2])
    assert sy.is_neutral
    assert np.any(np.abs(sy.z_infinity()) < 1e-12)
    cd = sy.critical_delay(500.0)
    assert cd.delay_s == 0.0 and cd.boundary == "at-zero"


# ---------------------------------------------------------------------------------------
# predictor horizon search: followed until the interval closes


def test_prediction_interval_is_followed_until_it_closes():
    """m = 2.2 kg, k = k_s = 2250 N/m, c = 3 N s/m, tau = 9.4 ms, order-2 predictor through
    10 samples of 1 ms: the stable interval runs past the first range's end (3 tau + n dt =
    38.2 ms) and closes at 41.0 ms. Checked against the rightmost root (spectral method +
    Newton, independent of the argument-principle counts the search uses) and a fine scan."""
    import scipy.optimize

    sy = S.sdof_system(2.2, 3.0, 2250.0, 2250.0)
    tau, order, n, dt = 9.4e-3, 2, 10, 1e-3
    res = S.prediction_intervals(sy, tau, order, n, dt)
    assert not res.open_end and not res.hard_bound
    assert len(res.intervals) == 1
    lo, hi = res.intervals[0]
    assert lo < tau < 3 * tau + n * dt < hi
    assert round(hi * 1e3, 1) == 41.0

    def rightmost(rho):
        return S.predictor_equation(sy, tau, order, n, dt, rho).rightmost(500.0).real

    cross = scipy.optimize.brentq(rightmost, 40.9e-3, 41.1e-3, xtol=1e-10)
    assert round(cross * 1e3, 1) == 41.0
    assert hi == pytest.approx(cross, abs=dt * 1e-3)  # the bisection tolerance, dt / 1000
    for rho in np.linspace(40.9e-3, 41.1e-3, 9):
        if abs(rho - cross) > 2e-6:
            n_unstable = S.predictor_equation(sy, tau, order, n, dt, rho).count_unstable(500.0)
            assert n_unstable == (0 if rho < cross else 2), rho
    assert S.stable_prediction_intervals(sy, tau, order, n, dt) == list(res.intervals)
    assert res.containing(tau) == (lo, hi) and res.containing(0.0) is None


def test_prediction_interval_hard_bound_and_given_range():
    """An order-0 predictor (the mean of the samples) does not depend on the horizon: a loop
    stable for every delay stays stable for every horizon, so the open-ended search stops at
    its documented hard bound and says so; a given range is clipped at its end instead."""
    sy = S.sdof_system(1.0, 80.0, 1000.0, 300.0)  # zeta = 1.26, p = 0.3: stable for all delays
    assert S.sdof_stable_for_all_delays(80.0 / (2 * math.sqrt(1000.0)), 0.3)
    tau, n, dt = 3e-3, 2, 1e-3
    res = S.prediction_intervals(sy, tau, 0, n, dt, n_grid=5)
    end = S.HORIZON_SEARCH_LIMIT * (3 * tau + n * dt)
    assert res.open_end and res.hard_bound
    assert res.intervals == ((0.0, pytest.approx(end)),)
    assert res.search_range_s == (0.0, pytest.approx(end))
    given = S.prediction_intervals(sy, tau, 0, n, dt, rho_range=(0.0, 5e-3), n_grid=5)
    assert given.open_end and not given.hard_bound and given.intervals == ((0.0, 5e-3),)


def test_max_predictor_horizon_is_where_the_gain_reaches_its_bound():
    for order, n in ((1, 2), (2, 3), (3, 6)):
        h = S.max_predictor_horizon(order, n, 1e-3)
        gain = np.abs(S.polynomial_predictor_weights(order, n, h / 1e-3)).sum()
        assert gain == pytest.approx(S.MAX_PREDICTOR_GAIN, rel=1e-6)
        assert np.abs(S.polynomial_predictor_weights(order, n, 1.01 * h / 1e-3)).sum() > S.MAX_PREDICTOR_GAIN
        with pytest.raises(ValueError, match="round-off"):
            S.predictor_equation(S.sdof_system(1.0, 0.5, 1000.0, 500.0), 3e-3, order, n, 1e-3, 1.01 * h)
        with pytest.raises(ValueError, match="usable"):
            S.prediction_intervals(S.sdof_system(1.0, 0.5, 1000.0, 500.0), 3e-3, order, n, 1e-3, rho_range=(0.0, 1.01 * h))
    assert math.isinf(S.max_predictor_horizon(0, 4, 1e-3))
    with pytest.raises(ValueError):
        S.polynomial_predictor_weights(S.MAX_PREDICTOR_ORDER + 1, S.MAX_PREDICTOR_ORDER + 2, 1.0)
    with pytest.raises(ValueError):
        S.polynomial_predictor_weights(1, S.MAX_PREDICTOR_SAMPLES + 1, 1.0)


# ---------------------------------------------------------------------------------------
# split beam from hbtest.method.substructure.split_beam


def test_beam_hybrid_is_split_beam_with_the_physical_section():
    from hbtest.method.substructure import split_beam

    thick = dict(REF, thickness=2e-3)
    sy = S.beam_hybrid(L_REF, 0.17, **REF, physical={"thickness": 2e-3}, elements_per_metre=40)
    ns, _, _ = split_beam(L_REF, 0.17, **REF, elements_per_metre=40, min_elements=3)
    _, ps, _ = split_beam(L_REF, 0.17, **thick, elements_per_metre=40, min_elements=3)
    for mine, ref in ((sy.ns, ns), (sy.ps, ps)):
        assert mine.interface == ref.interface
        for m in ("M", "C", "K"):
            np.testing.assert_array_equal(getattr(mine.structure, m), getattr(ref.structure, m))
    assert S.beam_elements(L_REF, 0.17, 40) == ns.structure.x_nodes.size + ps.structure.x_nodes.size - 2
    with pytest.raises(ValueError, match="unknown"):
        S.beam_hybrid(L_REF, 0.17, **REF, physical={"colour": 1.0})
    with pytest.raises(ValueError, match=str(S.MAX_BEAM_ELEMENTS)):
        S.beam_hybrid(L_REF, 0.17, **REF, elements_per_metre=1e9)


def test_plot_helpers_draw_on_a_given_axes():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    S.plot_root_locus(ax, S.sdof_system(1.0, 0.5, 1000.0, 500.0), [0.0, 1e-3, 2e-3], 100.0, "t")
    assert len(ax.lines) >= 3 and ax.get_title() == "t"
    ax2 = fig.add_subplot(2, 1, 2)
    dm = S.delay_map(lambda k: S.sdof_system(1.0, 0.5, 1000.0, k), [300.0, 500.0], np.linspace(0, 4e-3, 5), 100.0)
    S.plot_delay_map(ax2, dm)
    assert ax2.get_xlabel().startswith("delay")


# ---------------------------------------------------------------------------------------
# chain files through the config layer


def test_load_chain_matches_the_file_and_takes_overrides():
    from hbtest.config import ChainConfig, load_chain

    cfg = load_chain("sweeps/three-mass-chain.toml")
    assert isinstance(cfg, ChainConfig)
    assert cfg.masses == (1.0, 0.5, 1.0) and cfg.springs == (1000.0, 2000.0, 2000.0, 1000.0)
    assert cfg.interface == (0, 2) and cfg.physical_masses == (1,) and cfg.physical_links == (1, 2)
    assert cfg.left_wall and cfg.right_wall and cfg.cutoff_hz == 500.0 and cfg.tau_max_s == 1.0
    sy = S.chain_hybrid(**cfg.chain_kwargs())
    assert sy.dof_names == ("I.x0", "I.x2", "P.x1")
    over = load_chain("sweeps/three-mass-chain.toml", ["stability.cutoff_hz=250", "chain.masses_kg=[2.0, 0.5, 1.0]"])
    assert over.cutoff_hz == 250.0 and over.masses == (2.0, 0.5, 1.0)


@pytest.mark.parametrize(
    "text, key",
    [
        ('[chain]\nmasses_kg = [1.0]\nsprings_n_per_m = [1.0]\ncolour = 1\n[split]\ninterface = ["x0"]\n', "chain.colour"),
        ('[chain]\nmasses_kg = [1.0, -1.0]\nsprings_n_per_m = [1.0, 1.0]\n[split]\ninterface = ["x0"]\n', "chain.masses_kg"),
        ('[chain]\nmasses_kg = [1.0]\nsprings_n_per_m = [1.0]\n[split]\ninterface = ["y0"]\n', "split.interface"),
        ('[chain]\nmasses_kg = [1.0]\nsprings_n_per_m = [1.0]\n[split]\ninterface = [0]\nphysical_links = [3]\n', "split.physical_links"),
        ('[chain]\nmasses_kg = [1.0]\nsprings_n_per_m = [1.0]\n[split]\ninterface = [0]\n[stability]\ncutoff_hz = -1\n', "stability.cutoff_hz"),
        ('[chain]\nmasses_kg = [1.0]\nsprings_n_per_m = [1.0]\n', "split"),
    ],
)
def test_load_chain_errors_name_file_and_key(tmp_path, text, key):
    from hbtest.config import load_chain
    from hbtest.errors import ConfigError

    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_chain(f)
    assert e.value.key == key and e.value.source == str(f)


# ---------------------------------------------------------------------------------------
# absurd sizes through the CLI: one line naming the flag and the bound, exit 2, quickly


SDOF = ["stability", "sdof", "--m", "1", "--k", "1000", "--c", "0.5", "--ks", "500"]
PRED = SDOF + ["--delay", "0.003", "--predictor-order", "2", "--predictor-samples", "3", "--sample-time", "0.001"]


def _with(argv, flag, value):
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    return argv


def _big_chain(tmp_path, n_masses, n_interface):
    f = tmp_path / "big.toml"
    masses = ", ".join(["1.0"] * n_masses)
    springs = ", ".join(["1000.0"] * n_masses)
    iface = ", ".join(f'"x{i}"' for i in range(n_interface))
    phys = ", ".join(str(i) for i in range(1, n_masses))
    f.write_text(f"[chain]\nmasses_kg = [{masses}]\nsprings_n_per_m = [{springs}]\n[split]\ninterface = [{iface}]\nphysical_links = [{phys}]\n")
    return str(f)


@pytest.mark.parametrize(
    "argv, flag, bound",
    [
        (SDOF + ["--tau-max", "1e9"], "--tau-max", "20 s"),
        (SDOF + ["--cutoff-hz", "1e12"], "--cutoff-hz", "100000 Hz"),
        (_with(PRED, "--sample-time", "1e-9"), "--sample-time", "1e+07"),
        (_with(PRED, "--sample-time", "1e9"), "--sample-time", "20 s"),
        (_with(PRED, "--predictor-samples", "1000000000"), "--predictor-samples", "100"),
        (_with(_with(PRED, "--predictor-samples", "100"), "--predictor-order", "50"), "--predictor-order", "0..8"),
        (_with(PRED, "--delay", "1e9"), "--delay", "20 s"),
        (PRED + ["--rho-max", "1e9"], "--rho-max", "1e+07"),
        (["stability", "beam", PAPER, "--elements-per-metre", "1e9"], "--elements-per-metre", "400"),
        (["stability", "beam", PAPER, "--set", "numerical.elements=2000"], "numerical.elements", "400"),
        (["stability", "beam", PAPER, "--alpha-grid", "0.1:0.9:1000000000"], "--alpha-grid", "100"),
        (["stability", "beam", PAPER, "--tau-max", "1e9"], "--tau-max", "20 s"),
        (["stability", "chain", "sweeps/three-mass-chain.toml", "--tau-max", "1e9"], "--tau-max", "20 s"),
        (["stability", "chain", "sweeps/three-mass-chain.toml", "--set", "stability.tau_max_s=1e9"], "stability.tau_max_s", "20 s"),
        (["stability", "chain", "sweeps/three-mass-chain.toml", "--set", "stability.cutoff_hz=1e12"], "stability.cutoff_hz", "100000 Hz"),
    ],
)
def test_cli_refuses_absurd_sizes(capsys, argv, flag, bound):
    import time

    t0 = time.perf_counter()
    assert main(argv) == 2
    elapsed = time.perf_counter() - t0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert flag in err and bound in err, err
    assert elapsed < 5.0


@pytest.mark.parametrize("n_masses, n_interface, key, bound", [(10_000, 1, "chain.masses_kg", "exceed 800"), (7, 6, "split", "at most 5")])
def test_cli_refuses_huge_chains(capsys, tmp_path, n_masses, n_interface, key, bound):
    import time

    f = _big_chain(tmp_path, n_masses, n_interface)
    t0 = time.perf_counter()
    assert main(["stability", "chain", f]) == 2
    assert time.perf_counter() - t0 < 5.0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and bound in err, err


def test_cli_help_states_the_library_bounds(capsys):
    import re

    def help_text(argv):
        assert main(argv + ["--help"]) == 0
        return " ".join(capsys.readouterr().out.split())

    beam = help_text(["stability", "beam"])
    assert f"at most {S.MAX_BEAM_ELEMENTS} elements" in beam
    sdof = help_text(["stability", "sdof"])
    assert f"order + 1 .. {S.MAX_PREDICTOR_SAMPLES})" in sdof and f"(0..{S.MAX_PREDICTOR_ORDER})" in sdof
    assert float(re.search(r"sum below (\S+) \(round-off\)", sdof).group(1)) == S.MAX_PREDICTOR_GAIN
    assert float(re.search(r"at most (\S+)x that end", sdof).group(1)) == S.HORIZON_SEARCH_LIMIT


def test_cli_predictor_follows_the_interval(capsys):
    out = run_json(capsys, ["stability", "sdof", "--m", "2.2", "--k", "2250", "--c", "3", "--ks", "2250", "--delay", "0.0094",
                            "--predictor-order", "2", "--predictor-samples", "10", "--sample-time", "0.001", "--json"])
    lo, hi = out["stable_prediction_interval_s"]
    assert round(hi * 1e3, 1) == 41.0 and not out["upper_end_clipped"] and not out["search_hard_bound"]

"""a point reported at the solution of its pooled affine fit, with a stated
uncertainty, and the recursive rig Jacobian behind it.

Evidence: the twin's exact emulated structure (noise-free: the estimate from two evaluations
is the exact hybrid solution), an independent method (Monte Carlo of the sensor reduction
against the first-order output correlation; the entrywise prior against its full-covariance
form), and a seeded statistical check that the stated uncertainty covers the real error."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.config import load_rig, load_sweep
from hbtest.method.estimators import pool_affine
from hbtest.point import HbtestCarry, NumericalSide, PointLoop, PointSettings, get_profile
from hbtest.rig import ChannelCoefficients, open_rig
from hbtest.method.sensors import measure_interface_from_coefficients

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
BARE = ROOT / "sweeps" / "bare-beam.toml"
QUIET = ["virtual.noise.laser_rms_um=0.0", "virtual.noise.gauge_rms_microstrain=0.0", "virtual.mains.amplitude_microstrain=0.0",
         "virtual.adc.bits=0", "virtual.demand_scatter.sd_v=[0, 0]"]


def _loop(sweep, sets=(), rig_sets=(), seed=1):
    cfg = load_sweep(sweep, list(sets))
    rig = open_rig(load_rig(cfg.rig_path, list(cfg.rig_overrides) + list(rig_sets)), seed=seed)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    return cfg, rig, ns, F, PointLoop(rig, ns, F, PointSettings.from_config(cfg))


# -- pool_affine with a full prior covariance ------------------------------------------------

@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), J=st.integers(1, 5))
def test_full_prior_covariance_with_diagonal_entries_is_the_entrywise_prior(seed, J):
    rng = np.random.default_rng(seed)
    n, m = 4, 3
    A = rng.normal(size=(n, m))
    V = rng.normal(size=(J, m))
    Y = V @ A.T + rng.normal(size=n) + 0.01 * rng.normal(size=(J, n))
    var = rng.uniform(1e-4, 1e-3, size=(J, n))
    sd = rng.uniform(0.05, 1.0, size=(n, m))
    a = pool_affine(V, Y, var, V[-1], A + 0.1, sd)
    b = pool_affine(V, Y, var, V[-1], A + 0.1, prior_cov=np.einsum("ia,ab->iab", sd**2, np.eye(m)))
    np.testing.assert_allclose(b.value, a.value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(b.variance, a.variance, rtol=1e-9)
    np.testing.assert_allclose(b.jacobian_cov, a.jacobian_cov, rtol=1e-9, atol=1e-15)


def test_posterior_jacobian_covariance_shrinks_only_where_the_demands_moved():
    """Evaluations along one demand direction teach the Jacobian that direction only: the
    posterior variance there falls far below the prior's, across it the prior's stays."""
    rng = np.random.default_rng(7)
    A = rng.normal(size=(2, 2))
    d = np.array([1.0, 0.0])
    V = np.outer(np.linspace(-1, 1, 6), d)
    Y = V @ A.T + 1e-3 * rng.normal(size=(6, 2))
    out = pool_affine(V, Y, np.full(Y.shape, 1e-6), V[-1], A + 0.2, 0.5)
    cov = out.jacobian_cov
    assert np.all(cov[:, 0, 0] < 1e-3 * 0.25)  # measured direction
    np.testing.assert_allclose(cov[:, 1, 1], 0.25, rtol=1e-6)  # prior variance kept across it
    np.testing.assert_allclose(out.jacobian[:, 0], A[:, 0], atol=1e-2)


# -- the solution estimate on the twin -------------------------------------------------------

def test_solution_estimate_equals_the_iterated_root_on_the_quiet_twin():
    """Noise-free twin at 18.4 Hz (near the hybrid resonance), two root finders: the pooled
    fit's solution from evaluations away from the root (a start, its finite differences and one
    step) equals the measured state of a point iterated on the rig until its residual is below
    1e-12 m (the measured rule, accuracy 0). The rig's measured outputs are affine in the
    demand, so the fit is exact wherever the demands span the space."""
    _, _, _, _, tight = _loop(PAPER, ["test.tolerance_mm=1e-9", "test.accuracy=0"], rig_sets=QUIET)
    root = tight.run(18.4, HbtestCarry())
    assert root.converged and root.applied is None and root.final.norm < 1e-12
    cfg, rig, ns, F, loop = _loop(PAPER, rig_sets=QUIET)
    f = 18.4
    num = NumericalSide.build(ns, F, f, loop.orders)
    prof = get_profile("hbtest")
    base = loop.evaluate(num, np.array([0.3, 0.1, -0.2, 0.2]), kind="start")
    history = [base]
    _, G = loop.finite_differences(num, base, history)
    step = loop.evaluate(num, base.V + np.array([0.05, -0.02, 0.01, 0.03]))
    history.append(step)
    pooled = loop.pool(num, history, G, prof.pool_prior_fraction)
    e, G_fit = pooled.evaluation, pooled.jacobian
    est, sigma, offset, sigma_here, _ = prof.solution_estimate(loop, num, history, G, None, G_fit, e)
    np.testing.assert_allclose(est.meas.displacement, root.final.meas.displacement, rtol=1e-6)
    np.testing.assert_allclose(est.meas.force, root.final.meas.force, rtol=1e-6)
    assert est.norm < 1e-12 and offset > 1e-5  # it moved, and the fit's residual vanishes there
    assert sigma >= sigma_here >= 0.0
    # the rig never held V*: the estimate says so by its own demand
    assert not any(np.array_equal(h.V, est.V) for h in history)


def test_point_reports_the_solution_with_its_offset_and_the_last_measured_residual():
    cfg, rig, ns, F, loop = _loop(PAPER, seed=2)
    carry = HbtestCarry()
    for f in (17.9, 18.0):
        out = loop.run(f, carry)
    assert out.converged and out.applied is not None
    U = loop.displacement_amplitude(out.final)
    assert out.uncertainty <= cfg.test.accuracy * U
    assert out.solution_offset <= get_profile("hbtest").max_correction_fraction * U
    assert out.applied.norm < cfg.test.tolerance  # the rig held a balanced state next to it
    assert out.history[-1] is out.applied
    # the fitted Jacobian's own uncertainty only adds
    assert out.uncertainty < out.uncertainty_with_jacobian < 2 * out.uncertainty


def test_output_correlation_matches_a_monte_carlo_of_the_sensor_reduction():
    """The first-order correlation of the packed outputs (u, theta, T, M) from independent
    channel noise equals the sample correlation of the reduction of noisy channel
    coefficients (20000 draws, seeded)."""
    cfg, rig, ns, F, loop = _loop(PAPER, rig_sets=QUIET)
    f = 17.5
    num = NumericalSide.build(ns, F, f, loop.orders)
    e = loop.evaluate(num, np.array([0.3, 0.1, -0.2, 0.2]))
    C = loop.packed_output_correlation(num, e.meas)
    coef, _ = (np.asarray(x) for x in e.meas.raw_channels)
    names = loop.layout.channel_names
    rng = np.random.default_rng(11)
    var = np.full(coef.shape, 1e-8)
    meas = e.meas.__class__(e.meas.orders, e.meas.displacement, e.meas.force, e.meas.displacement_variance,
                            e.meas.force_variance, e.meas.n_periods, raw_channels=(coef, var))
    C = loop.packed_output_correlation(num, meas)
    draws = []
    for _ in range(20000):
        noisy = coef + np.sqrt(var / 2) * (rng.normal(size=coef.shape) + 1j * rng.normal(size=coef.shape))
        rec = ChannelCoefficients({c: noisy[i] for i, c in enumerate(names)}, {c: var[i] for i, c in enumerate(names)},
                                  loop.orders, f, 1, 0.0)
        m = measure_interface_from_coefficients(rec, loop.layout, loop.orders, cfg.test.force_reconstruction)
        draws.append(np.concatenate([loop.pack2(m.displacement), loop.pack2(m.force)]))
    emp = np.corrcoef(np.array(draws).T)
    np.testing.assert_allclose(C, emp, atol=0.03)
    assert np.max(np.abs(C - np.eye(C.shape[0]))) > 0.5  # the reduction does correlate them


def test_jacobian_uncertainty_term_is_the_mean_over_the_jacobians_spread():
    """The term for the fitted Jacobian's own uncertainty equals a Monte Carlo: with rig
    Jacobians drawn around the fitted one (row covariances C_i at 0.5 % of each row's
    largest entry, seeded, 8000 draws), the mean squared uncertainty through the drawn
    Jacobians exceeds the fitted one's by what the second-order expansion says (within the
    Monte Carlo's 5 % and the third order's few per cent)."""
    cfg, rig, ns, F, loop = _loop(PAPER, seed=3)
    f = 18.2
    num = NumericalSide.build(ns, F, f, loop.orders)
    prof = loop.profile
    V = np.array([0.6, 0.2, -0.3, 0.25])
    e = loop.evaluate(num, V, noise_target=1e-7)
    scaleY = loop.output_scale(num)

    def outputs(v):
        ss = rig.steady_state(f, loop.unpack_voltage(v), loop.orders)
        return scaleY * np.concatenate([loop.pack2(ss.displacement), loop.pack2(ss.force)])

    G = np.stack([outputs(V + d) - outputs(V) for d in np.eye(V.size)], axis=1)
    rng = np.random.default_rng(5)
    scale = 0.005 * np.abs(G).max(axis=1)
    Lr = rng.normal(size=(G.shape[0], V.size, V.size))
    C = np.einsum("iab,icb->iac", Lr, Lr) / V.size * scale[:, None, None] ** 2
    L = np.linalg.cholesky(C)
    corr = prof.output_correlation(loop, num, e.meas)
    draws = [prof.displacement_uncertainty(loop, num, G + np.einsum("iab,ib->ia", L, rng.normal(size=G.shape)), e.meas, corr) ** 2
             for _ in range(8000)]
    plain = prof.displacement_uncertainty(loop, num, G, e.meas, corr) ** 2
    with_G = prof.displacement_uncertainty(loop, num, G, e.meas, corr, C) ** 2
    assert with_G > 1.01 * plain
    np.testing.assert_allclose(with_G - plain, np.mean(draws) - plain, rtol=0.2)


#: (seeds, bounds of rms(z), lower bound of rms(z_j)) of the off-resonance coverage test. Measured spread
#: (``python benchmarks/off_resonance_coverage.py 1 48``, at 494bb6b, and at f9839d3 before the twin's refined
#: eigenvectors): rms(z) per 12 seeds 0.78-1.11 over the 8 sets, mean 0.96, sd 0.12; rms(z_j) 0.69-1.03, mean 0.88,
#: sd 0.12; over all 48 seeds rms(z) 0.93 / 1.01 and rms(z_j) 0.84 / 0.93 (sd of a 48-seed figure ~0.06). Bounds sit
#: >= 3 sd from the mean: 12 seeds in the default run catch a statement off by a factor ~1.6, 48 seeds (slow) by ~1.3.
OFF_RESONANCE_COVERAGE = (
    pytest.param(range(1, 13), (0.6, 1.4), 0.5, id="12-seeds"),
    pytest.param(range(1, 49), (0.75, 1.25), 0.65, id="48-seeds", marks=pytest.mark.slow),
)


def off_resonance_z(seed: int) -> tuple[list[float], list[float]]:
    """(z, z_j) at the three points after the first of 17.0-17.3 Hz on the bare beam, one seed:
    z = |U - U_exact| / stated uncertainty, z_j the same over the stored uncertainty (which adds
    the fitted Jacobian's own uncertainty). On the harsh-mains twin, where every one of these
    points converges (on the lab-calibrated twin, 3x noisier in the gauges' broadband, the
    hbtest profile leaves some unconverged)."""
    harsh = "rig=../instruments/virtual-cantilever-harsh-mains.toml"
    cfg, rig, ns, F, loop = _loop(BARE, ["sweep.start_hz=17.0", "sweep.stop_hz=17.3", "sweep.points=4", harsh], seed=seed)
    carry = HbtestCarry()
    w = np.array([1.0, cfg.test.rotation_length])
    z, zj = [], []
    for i, f in enumerate(cfg.sweep.frequencies_hz):
        out = loop.run(float(f), carry)
        assert out.converged, (seed, f)
        if i:
            exact = rig.emulated_interface_response(ns, F, float(f), loop.orders)[:, 0]
            err = np.linalg.norm((out.final.meas.displacement[:, 0] - exact) * w)
            z.append(err / out.uncertainty)
            zj.append(err / out.uncertainty_with_jacobian)
    return z, zj


@pytest.mark.parametrize("seeds, bounds, lower_j", OFF_RESONANCE_COVERAGE)
def test_stated_uncertainty_covers_the_error_off_resonance(seeds, bounds, lower_j):
    """The root mean square of :func:`off_resonance_z` over seeded runs is about one, for the
    acceptance's uncertainty and for the stored one. Bounds and their measured spread:
    :data:`OFF_RESONANCE_COVERAGE`."""
    pairs = [off_resonance_z(seed) for seed in seeds]
    rms = float(np.sqrt(np.mean(np.square([p[0] for p in pairs]))))
    assert bounds[0] < rms < bounds[1], rms
    rms_j = float(np.sqrt(np.mean(np.square([p[1] for p in pairs]))))
    assert lower_j < rms_j <= rms, (rms_j, rms)


def test_carried_jacobian_prior_grows_by_forgetting_and_drift():
    prof = get_profile("hbtest")
    G = np.array([[2.0, -1.0], [0.5, 0.25]])
    carry = HbtestCarry(G=G, G_cov=np.stack([np.diag([1e-4, 4e-4]), np.diag([1e-6, 1e-6])]))
    P = prof.point_prior(carry)
    q = prof.jacobian_drift * np.abs(G).max(axis=1)
    np.testing.assert_allclose(P[:, 0, 0], carry.G_cov[:, 0, 0] / prof.jacobian_forgetting + q**2)
    assert prof.point_prior(HbtestCarry(G=G)) is None  # no posterior yet: the entrywise prior


def _exact_jacobian_sigma(rig, loop, out):
    """The stated uncertainty of ``out`` recomputed through the twin's exact rig Jacobian at
    its reported demand (unit differences of the exact steady state: the twin is linear)."""
    f = out.frequency_hz
    num = NumericalSide.build(loop.ns, loop.force_vector, f, loop.orders)
    scaleY = loop.output_scale(num)

    def outputs(v):
        ss = rig.steady_state(f, loop.unpack_voltage(v), loop.orders)
        return scaleY * np.concatenate([loop.pack2(ss.displacement), loop.pack2(ss.force)])

    V = out.final.V
    G = np.stack([outputs(V + d) - outputs(V) for d in np.eye(V.size)], axis=1)
    prof = loop.profile
    return prof.displacement_uncertainty(loop, num, G, out.final.meas, prof.output_correlation(loop, num, out.applied.meas))


def _sweep_ratios(refresh, seed=1):
    # without the reference twin's demand scatter: the exact-Jacobian uncertainty these ratios
    # divide by propagates a scatter in full (README "Two solver profiles"), and on it a stalled
    # point re-measures its Jacobian where the refresh is off
    cfg, rig, ns, F, loop = _loop(BARE, rig_sets=["virtual.demand_scatter.sd_v=[0, 0]"], seed=seed)
    if not refresh:
        loop.profile.jacobian_refresh_points = None
    carry = HbtestCarry()
    outs = [loop.run(float(f), carry) for f in cfg.sweep.frequencies_hz]
    assert all(o.converged for o in outs)
    # points whose Jacobian was measured by finite differences right after their first record
    # (the first point, the refresh); a stall restart re-measures later in a point (seed 4 of the
    # sweep without refresh: at 18.0 Hz, after 8 iterations)
    fd = [i for i, o in enumerate(outs) if len(o.history) > 1 and o.history[1].kind == "finite_difference"]
    return fd, np.array([o.uncertainty / _exact_jacobian_sigma(rig, loop, o) for o in outs])


# Seed-to-seed spread of the ratio stated/exact sigma over the whole bare-beam sweep (31 points),
# printed by `python benchmarks/jacobian_refresh_spread.py 1 2 3 4 5 6 7 8` (these very helpers,
# one BLAS thread, AMD EPYC with OpenBLAS's Zen kernels; an Intel machine gave 0.9009 for the
# unrefreshed median of seed 1 where this one gives 0.8933: a kernel change moves a median ~0.01):
#   with refresh:    median 0.940-0.991 (mean 0.962, sd 0.017); minimum 0.68-0.81 (sd 0.049)
#   without refresh: median 0.79-0.94 (mean 0.85, sd 0.057)
#   per-seed difference of the medians (with - without): 0.012-0.200 (mean 0.11, sd 0.060)
# The default test holds the refreshed sweep of one seed to bounds >= 5 spreads away from every
# measured value; the comparison with the unrefreshed sweep, whose single-seed difference is
# as small as 0.01, is judged on the mean over 8 seeds (standard error 0.021) in a slow test.

def test_refreshed_jacobian_keeps_the_stated_uncertainty_honest():
    """The whole bare-beam sweep, seeded: the rig Jacobian is re-measured by finite
    differences at every ``jacobian_refresh_points``-th point, exactly, and the stated
    uncertainty stays near the one through the twin's exact Jacobian: median ratio >= 0.85
    (measured 0.94-0.99 over seeds 1-8, sd 0.017: 5 sd below the lowest) and none below 0.45
    (lowest point per seed 0.68-0.81, sd 0.049: 4.7 sd below the lowest)."""
    fd, ratio = _sweep_ratios(refresh=True)
    k = get_profile("hbtest").jacobian_refresh_points
    assert fd == list(range(0, len(ratio), k))
    assert np.median(ratio) >= 0.85 and ratio.min() > 0.45, (np.median(ratio), ratio.min())


@pytest.mark.slow
def test_without_refresh_the_stated_uncertainty_falls_short_over_seeds():
    """Carried across the sweep without refresh, the fitted Jacobian drifts in the directions
    the points do not move and the stated uncertainty falls short of the one through the exact
    Jacobian: over seeds 1-8 the refreshed median exceeds the unrefreshed one by 0.11 on
    average (sd 0.060 per seed, standard error of the mean 0.021); asserted > 0.03, 3.8
    standard errors below the measured mean. One seed alone cannot show it (its difference
    was 0.012 for seed 3)."""
    diffs = []
    for seed in range(1, 9):
        fd0, ratio0 = _sweep_ratios(refresh=False, seed=seed)
        assert fd0 == [0]
        diffs.append(np.median(_sweep_ratios(refresh=True, seed=seed)[1]) - np.median(ratio0))
    assert np.mean(diffs) > 0.03, diffs


# -- clipped records -----------------------------------------------------------------------

def test_a_clipped_record_is_left_out_of_the_pool():
    """Pooling [a, clipped, b] is pooling [a, b], exactly; a clipped last record comes back
    unpooled (the point stops on it)."""
    from dataclasses import replace

    cfg, rig, ns, F, loop = _loop(BARE, seed=3)
    num = NumericalSide.build(ns, F, 18.0, loop.orders)
    base = np.full(loop.n_act * loop.p, 0.3)  # packed demand, V
    a = loop.evaluate(num, base, None)
    G = loop.finite_differences(num, a, [], None)[1]
    b = loop.evaluate(num, base + 0.05, None)
    c = replace(loop.evaluate(num, base - 0.08, None), overrange=("g2",))
    got, want = loop.pool(num, [a, c, b], G, 0.3), loop.pool(num, [a, b], G, 0.3)
    np.testing.assert_array_equal(got.evaluation.Y, want.evaluation.Y)
    np.testing.assert_array_equal(got.jacobian, want.jacobian)
    n = a.meas.n_periods + b.meas.n_periods
    assert got.evaluation.meas.n_periods == want.evaluation.meas.n_periods == n
    last = loop.pool(num, [a, b, c], G, 0.3)
    assert last.evaluation is c and last.jacobian is G


def _range_sweep(tmp_path, monkeypatch, restart):
    from hbtest.analysis import frf
    from hbtest.sweep.runner import run

    base = load_sweep(BARE, [])
    over = ["sweep.start_hz=18.3", "sweep.stop_hz=18.7", "sweep.points=3",
            "rig_set=" + repr([*base.rig_overrides, "virtual.adc.range_v=8.0"])]
    monkeypatch.setattr(type(get_profile("hbtest")), "restart_on_overrange", restart)
    ds = run(load_sweep(BARE, over), tmp_path / f"r{int(restart)}.zarr", progress=None, plot=False, overrides=over).load()
    return ds, float(np.abs(frf.relative_error(ds)).max())


def test_an_overranging_prediction_restarts_from_the_previous_solution(tmp_path, monkeypatch):
    """Bare-beam across its resonance in 0.2 Hz steps with the ADC at 8 V: the demand
    extrapolated to 18.7 Hz clips the sensors, the solution there does not. The point starts
    again from 18.5 Hz's solution, converges within 1 % of the twin's exact structure and says
    what happened; without the restart it stops as over range."""
    ds, err = _range_sweep(tmp_path, monkeypatch, True)
    assert bool(ds.converged.all()) and err < 0.01
    msg = str(ds.message.values[-1])
    assert msg.startswith("converged (the predicted start drove ") and "restarted from the previous point's demand" in msg
    ds0, _ = _range_sweep(tmp_path, monkeypatch, False)
    assert list(ds0.stop_reason.values) == ["converged", "converged", "overrange"]

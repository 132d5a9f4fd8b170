"""Adaptive sweep strategies (hbtest.sweep.strategy): the single-mode model fit against exact and
seeded synthetic FRFs with known modal parameters, the design's choices (bracket, A-optimal
step, CI-based stop, curve refinement), refusals in the sweep file, and one modal design on
the virtual twin, interrupted and resumed."""

import json
from pathlib import Path

import numpy as np
import pytest

from hbtest.config import load_sweep
from hbtest.config.sweep import TargetSpec
from hbtest.errors import ConfigError
from hbtest.events import PointFinished
from hbtest.store import RunStore
from hbtest.sweep.strategy import BRACKET_POINTS, CANDIDATE_SPAN, DESIGN_ACCURACY_SHARE, FINAL_ACCURACY_SHARES, DesignPoints, Estimate, _half_widths, _z, curve_attribute, curve_from_attribute, curve_uncertainty, fit_model, next_curve, next_modal
from hbtest.sweep.runner import resume, run

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"

FN, ZETA, A, R0, R2 = 18.5, 0.008, 12.0 * np.exp(0.1j), 0.002 - 0.001j, 0.004 + 0.0005j


def exact(f, terms=3):
    """A single-mode FRF with known parameters (u/F [m/N]): A/(w_n^2 - w^2 + 2 i zeta w_n w) + R0 + R2 (w_n/w)^2."""
    w, wn = 2 * np.pi * np.asarray(f), 2 * np.pi * FN
    H = A / (wn**2 - w**2 + 2j * ZETA * wn * w) + R0
    return H + R2 * (wn / w) ** 2 if terms == 3 else H


def measured(f, rel, rng, terms=2):
    H = exact(f, terms)
    u = rel * np.abs(H)
    return H + u / np.sqrt(2) * (rng.standard_normal(H.size) + 1j * rng.standard_normal(H.size)), u


def points(f, H, u):
    n = len(f)
    return DesignPoints(np.asarray(f, float), np.asarray(H), np.asarray(u, float), np.ones(n, bool), np.full(n, 100.0))


def test_model_fit_recovers_the_exact_parameters():
    f = FN * (1 + np.linspace(-3, 3, 7) * ZETA)
    fit = fit_model(f, exact(f, 2), 1e-3 * np.abs(exact(f, 2)), 18.45, 0.01, 2)
    assert fit.fn == pytest.approx(FN, rel=1e-9) and fit.zeta == pytest.approx(ZETA, rel=1e-7)
    assert fit.modal_constant == pytest.approx(A, rel=1e-7) and fit.coef[1] == pytest.approx(R0, rel=1e-6)
    g = np.linspace(16, 19, 9)
    fit3 = fit_model(g, exact(g, 3), 1e-3 * np.abs(exact(g, 3)), 18.4, 0.01, 3)
    assert np.max(np.abs(fit3.value(np.linspace(16, 19, 301)) / exact(np.linspace(16, 19, 301)) - 1)) < 1e-8


def test_linearised_intervals_match_the_scatter_of_seeded_refits():
    """Independent check of the covariance behind the design: 200 seeded noisy copies, refitted."""
    rng = np.random.default_rng(7)
    f = FN * (1 + np.linspace(-3, 3, 8) * ZETA)
    est = []
    for _ in range(200):
        H, u = measured(f, 2e-3, rng)
        fit = fit_model(f, H, u, FN, ZETA, 2)
        est.append((fit.fn, fit.zeta, abs(fit.modal_constant)))
    sd = np.std(est, axis=0, ddof=1) / np.array([FN, ZETA, abs(A)])
    fit0 = fit_model(f, exact(f, 2), 2e-3 * np.abs(exact(f, 2)), FN, ZETA, 2)
    predicted = _half_widths(fit0, fit0.cov, 1.0)
    np.testing.assert_allclose(predicted, sd, rtol=0.15)


def test_bracket_starts_at_the_prediction_and_steps_out_from_an_edge_peak():
    target, prior, allowed = TargetSpec(), (FN, ZETA), lambda f: True
    f0, why, _ = next_modal(points([], [], []), prior, None, target, allowed)
    assert f0 == pytest.approx(FN) and why.startswith("bracket")
    f1 = next_modal(points([FN], exact([FN]), [1e-3]), prior, None, target, allowed).frequency
    assert f1 == pytest.approx(FN * (1 - ZETA))
    # the mode lies above the three points measured: the next point steps 2 bandwidths beyond the highest
    f = np.array([17.9, 18.0, 18.1])
    f3, why, _ = next_modal(points(f, exact(f, 2), 1e-3 * np.abs(exact(f, 2))), prior, None, target, allowed)
    assert f3 == pytest.approx(18.1 * (1 + 2 * ZETA)) and "highest" in why


def test_stop_when_the_asked_intervals_are_reached_and_not_before():
    f = FN * (1 + np.linspace(-2, 2, BRACKET_POINTS) * ZETA)
    pts = points(f, exact(f, 2), 1e-3 * np.abs(exact(f, 2)))
    est = Estimate(FN, ZETA, abs(A), np.array([1e-5, 0.01, 0.02]), "test")
    assert (
        next_modal(pts, (FN, ZETA), est, TargetSpec(frequency_ci_rel=2e-5, damping_ci_rel=0.02), lambda f: True)[0]
        is None
    )
    go, why, _ = next_modal(
        pts, (FN, ZETA), est, TargetSpec(frequency_ci_rel=2e-5, damping_ci_rel=0.005), lambda f: True
    )
    assert go is not None and why.startswith("A-optimal")
    # a point predicted to reach every asked interval by itself is measured to the loosest accuracy tried
    last = next_modal(pts, (FN, ZETA), Estimate(FN, ZETA, abs(A), np.array([1.0, 1.0, 1.0]), "test"),
                      TargetSpec(frequency_ci_rel=1e-2, damping_ci_rel=0.5), lambda f: True)
    assert last.accuracy_share == max(FINAL_ACCURACY_SHARES) and "accuracy x1:" in last.reason
    # |A| asked too: 0.02 > 0.01 keeps the design going
    assert (
        next_modal(
            pts,
            (FN, ZETA),
            est,
            TargetSpec(frequency_ci_rel=2e-5, damping_ci_rel=0.02, modal_constant_ci_rel=0.01),
            lambda f: True,
        )[0]
        is not None
    )


def test_a_optimal_step_stays_in_the_band_skips_forbidden_frequencies_and_shrinks_the_intervals():
    rng = np.random.default_rng(3)
    f = FN * (1 + np.array([0.0, -1, 1, -2, 2]) * ZETA)
    H, u = measured(f, 2e-3, rng)
    pts = points(f, H, u)
    est = Estimate(FN, ZETA, abs(A), np.array([1.0, 1.0, 1.0]), "test")
    target = TargetSpec(frequency_ci_rel=1e-6, damping_ci_rel=1e-4)
    free, _, share = next_modal(pts, (FN, ZETA), est, target, lambda f: True)
    assert share == DESIGN_ACCURACY_SHARE  # far from the targets: the informative share
    assert abs(free / FN - 1) <= (CANDIDATE_SPAN + 0.01) * ZETA
    banned = next_modal(pts, (FN, ZETA), est, target, lambda x: abs(x - free) > 0.05).frequency
    assert abs(banned - free) > 0.05
    # the chosen point beats every other point of the span under the design's own noise model
    # (the points' median u/|H| times DESIGN_ACCURACY_SHARE), computed here from the Fisher information
    fit = fit_model(f, H, u, FN, ZETA, 2)
    r = np.median(u / np.abs(H)) * DESIGN_ACCURACY_SHARE

    def score(x):
        A_ = fit.jacobian(np.r_[f, x])
        w = np.sqrt(2) / np.r_[u, r * np.abs(fit.value([x]))]
        M = np.concatenate([A_.real * w[:, None], A_.imag * w[:, None]])
        return np.sum((_half_widths(fit, np.linalg.pinv(M.T @ M), _z(0.95))[:2] / [1e-6, 1e-4]) ** 2)

    others = fit.fn * (1 + np.linspace(-CANDIDATE_SPAN, CANDIDATE_SPAN, 13) * fit.zeta)
    assert score(free) <= min(score(x) for x in others) * (1 + 1e-9)


def test_a_synthetic_modal_design_reaches_its_intervals_with_the_truth_inside():
    """The whole decision loop on seeded synthetic measurements (estimate: the linearised fit)."""
    rng = np.random.default_rng(11)
    target = TargetSpec(frequency_ci_rel=5e-5, damping_ci_rel=0.01)
    f, H, u = [], [], []
    prior = (FN * 1.002, ZETA * 1.3)  # a design model a little off
    for _ in range(40):
        pts = points(f, H, u)
        est = None
        if len(f) >= BRACKET_POINTS:
            fit = fit_model(pts.f, pts.H, pts.u, prior[0], prior[1], 2)
            est = Estimate(fit.fn, fit.zeta, abs(fit.modal_constant), _half_widths(fit, fit.cov, _z(0.95)), "test")
        nxt, why, share = next_modal(pts, prior, est, target, lambda x: True)
        if nxt is None:
            break
        h, s = measured([nxt], 3e-3 * share, rng)
        f.append(nxt), H.append(h[0]), u.append(s[0])
    assert nxt is None and "reached" in why
    assert len(f) < 40
    hw = est.half_widths
    assert abs(est.fn / FN - 1) <= hw[0] and abs(est.zeta / ZETA - 1) <= hw[1]


def test_curve_design_refines_until_the_model_is_known_to_the_accuracy():
    rng = np.random.default_rng(5)
    band, prior = (16.0, 19.0), (FN, ZETA)
    target = TargetSpec(curve_accuracy=0.01)
    f, H, u = [], [], []
    for _ in range(40):
        nxt, why, _ = next_curve(points(f, H, u), prior, band, target, lambda x: True)
        if nxt is None:
            break
        assert band[0] <= nxt <= band[1]
        h, s = measured([nxt], 3e-3, rng, terms=3)
        f.append(nxt), H.append(h[0]), u.append(s[0])
    assert nxt is None and "curve known" in why
    assert f[:2] == [16.0, 19.0]
    fit = fit_model(np.array(f), np.array(H), np.array(u), FN, ZETA, 3)
    g = np.linspace(*band, 601)
    assert curve_uncertainty(fit, g, 0.95).max() <= 0.01
    assert np.max(np.abs(fit.value(g) / exact(g) - 1)) < 0.01
    back = curve_from_attribute(json.loads(json.dumps(curve_attribute(fit, "u"))))  # the store attribute, as JSON
    np.testing.assert_array_equal(back.value(g), fit.value(g))
    # dense where the curve bends: more points within 3 bandwidths of the mode than in the rest of the band
    near = np.abs(np.array(f) - FN) < 3 * ZETA * FN
    assert near.sum() > (~near).sum() - 2


@pytest.mark.parametrize(
    "extra, key",
    [
        (["sweep.continuation=arclength"], "sweep.strategy"),
        (["sweep.force_levels=[0.02, 0.05]"], "sweep.strategy"),
        (["sweep.harmonics=[1, 3]"], "sweep.strategy"),
        (["sweep.target.frequency_ci_rel=0", "sweep.target.damping_ci_rel=0"], "sweep.target.frequency_ci_rel"),
        (["sweep.target.confidence=1.5"], "sweep.target.confidence"),
        (["sweep.target.bogus=1"], "sweep.target.bogus"),
    ],
)
def test_refusals_name_the_file_and_key(extra, key):
    with pytest.raises(ConfigError) as e:
        load_sweep(PAPER, ["sweep.strategy=modal", *extra])
    assert key in str(e.value) and "paper-cantilever.toml" in str(e.value) and "\n" not in str(e.value)


def test_modal_design_on_the_twin_interrupted_and_resumed_continues_the_design(tmp_path):
    """End to end: the modal strategy on the twin (loose targets: the bracket is enough),
    Ctrl+C after two points, resume finishes the design from the store."""
    over = [
        "sweep.strategy=modal",
        "sweep.max_points=8",
        "sweep.target.frequency_ci_rel=2e-3",
        "sweep.target.damping_ci_rel=0.2",
        "test.accuracy=0.01",
    ]
    cfg = load_sweep(PAPER, over)
    seen = []

    def progress(ev):
        if isinstance(ev, PointFinished):
            seen.append(ev.frequency_hz)
            if len(seen) == 2:
                raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, tmp_path / "m.zarr", progress=progress, plot=False, overrides=over, seed=1)
    store = RunStore.open(tmp_path / "m.zarr")
    assert store.done().sum() == 2 and store.attrs["status"] == "interrupted"
    first = store.dataset().load()
    ds = resume(tmp_path / "m.zarr", plot=False).load()
    done = np.asarray(ds["done"].values)
    n = int(done.sum())
    assert ds.attrs["status"] == "completed" and "reached" in ds.attrs["design_finished"]
    assert BRACKET_POINTS <= n < 8 and done[:n].all()
    np.testing.assert_array_equal(ds["frequency"].values[:2], first["frequency"].values[:2])
    np.testing.assert_array_equal(ds["interface_displacement"].values[:2], first["interface_displacement"].values[:2])
    fp = ds["frequency"].values
    # the bracket, continued after the resume: prediction, -1 and +1 bandwidth, then +-2 about the peak
    assert fp[1] < fp[0] < fp[2]
    assert all(str(r).startswith("bracket") for r in ds["design_reason"].values[:n])
    assert np.isfinite(ds["design_frequency_hz"].values[n - 1]) and ds["design_frequency_ci_rel"].values[n - 1] <= 2e-3
    assert ds.attrs["modal_fit"]["modes"]


@pytest.mark.slow
def test_curve_strategy_on_the_twin_meets_its_accuracy_against_the_exact_frf(tmp_path):
    """End to end (slow): the curve strategy on the twin; the stored curve against the twin's
    exact emulated FRF over the whole band."""
    from hbtest.config import load_rig
    from hbtest.rig import open_rig

    over = ["sweep.strategy=curve", "sweep.max_points=30", "sweep.target.curve_accuracy=0.01"]
    cfg = load_sweep(PAPER, over)
    ds = run(cfg, tmp_path / "c.zarr", plot=False, overrides=over, seed=3).load()
    assert "curve known" in ds.attrs["design_finished"]
    curve = curve_from_attribute(ds.attrs["curve_fit"])
    g = np.linspace(cfg.sweep.start_hz, cfg.sweep.stop_hz, 201)
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=0)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    H = np.array([rig.emulated_interface_response(ns, F, float(f), [1])[0, 0] for f in g]) / cfg.excitation.amplitude
    rig.close()
    assert np.max(np.abs(curve.value(g) / H - 1)) <= 0.01

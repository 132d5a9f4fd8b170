"""FRF uncertainty (hbtest.analysis.frf.frf_uncertainty) and the modal fit with confidence intervals
(hbtest.analysis.modal, ``hbtest modal``): against the virtual twin's exact emulated structure, and
the propagation against a forward Monte-Carlo simulation of the measurement."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.analysis.frf import compare_resonance, frf, frf_uncertainty, uncertainty_coverage
from hbtest.analysis.modal import fit_modes, model_mode
from hbtest.store import PointRecord, RunStore, StoreLock, open_run
from hbtest.method.substructure import Substructure
from hbtest.sweep.runner import run

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
AROUND = ["sweep.start_hz=18.2", "sweep.stop_hz=18.9", "sweep.points=15"]


def _sweep(path, overrides, seed=None):
    cfg = load_sweep(PAPER, overrides)
    run(cfg, path, progress=None, plot=False, overrides=overrides, seed=seed)
    return path


@pytest.fixture(scope="module")
def twin15(tmp_path_factory):
    """15 points around mode 2 on the noisy twin (the rig file's seed)."""
    return _sweep(tmp_path_factory.mktemp("modal") / "around.zarr", AROUND)


# ---------------------------------------------------------------------------------------
# uncertainty


def test_uncertainty_covers_the_true_error_on_the_twin(twin15):
    ds = open_run(twin15).load()
    u = frf_uncertainty(ds)
    assert u.attrs["model"] == "rig file [physical]"
    H = frf(ds).values
    np.testing.assert_array_equal(u["H"].values, H)
    rel = u["u_H"].values / np.abs(H)
    # the noise of the twin gives per-mille uncertainties, never zero, never percent
    assert np.all(rel > 2e-4) and np.all(rel < 1e-2)
    for dof in ("u", "theta"):
        cov = uncertainty_coverage(ds, dof=dof)
        assert cov["n"] == 15
        # 15 points against their 95 % intervals: the misses are binomial (n 15, p 0.05) when the
        # statement is right; at most 3 misses holds with probability 0.9945 (at most 1, the old
        # bound of 0.9, only 0.83: the audit saw 0.933 at one seed shift)
        assert cov["complex"] >= 0.8 and cov["magnitude"] >= 0.8
        # right on average, neither blind nor wildly conservative
        assert 0.4 < cov["rms_normalised_error"] < 1.5


def _hybrid(frequency_hz):
    """D_N, D_P and the condensed external force at one frequency from the paper sweep's
    numerical model and the rig file's PS beam (the models frf_uncertainty rebuilds)."""
    cfg = load_sweep(PAPER)
    ns = cfg.numerical.substructure()
    pb = load_rig(RIG).physical.build(left="free", right="free", x_offset=cfg.numerical.beam.length)
    ps = Substructure(pb, ("u0", "theta0"))
    s = np.array([2j * np.pi * frequency_hz])
    Fc = ns.condensed_force(cfg.excitation.force_vector(ns), s[0])
    return ns.dynamic_stiffness(s)[0], ps.dynamic_stiffness(s)[0], Fc, cfg.excitation.amplitude


def _forward_store(path, frequencies, draws, sigma_u, sigma_f, offset, seed=0):
    """A run dataset whose points are simulated forward through the physics: the rig holds
    ``U = U* (1 + offset)``, the PS answers ``D_P U``, the sensors add circular complex noise
    (standard deviations sigma_u per DOF and sigma_f per force), the NS computes U_N.
    One store slot per frequency is written (the template); the ``draws`` repetitions are
    copies of it in memory with their own noise."""
    import xarray as xr

    rng = np.random.default_rng(seed)
    freqs = np.asarray(frequencies, float)
    cfg = load_sweep(PAPER)
    attrs = {
        "sweep_text": cfg.source.text, "sweep_path": str(PAPER), "rig_text": RIG.read_text(),
        "rig_path": str(RIG), "overrides": [], "rig_overrides": [],
    }
    store = RunStore.create(path, frequencies_hz=freqs, harmonics=(1,), actuators=("a", "b"), max_iterations=2, attrs=attrs)
    var_u = np.square(sigma_u)[:, None] * np.ones((2, 1))
    var_f = np.square(sigma_f)[:, None] * np.ones((2, 1))
    models = [_hybrid(f) for f in freqs]
    for i, f in enumerate(freqs):
        DN, DP, Fc, amp = models[i]
        Ustar = np.linalg.solve(DN + DP, Fc)
        store.write_point(i, PointRecord(
            frequency_hz=float(f), interface_displacement=Ustar[:, None], interface_force=(DP @ Ustar)[:, None],
            numerical_displacement=Ustar[:, None], external_force=np.array([amp + 0j]), voltage=np.zeros((2, 1), complex),
            interface_displacement_variance=var_u, interface_force_variance=var_f, converged=True, iterations=1, residual_norm=0.0, rig_periods=30.0,
            history_voltage=np.zeros((1, 2, 1), complex), history_residual=np.zeros((1, 2, 1), complex),
            history_residual_norm=np.array([0.0]), history_periods=np.array([30.0]), reference_interface_displacement=Ustar[:, None],
        ))
    ds = xr.concat([open_run(path).load()] * draws, dim="frequency")

    def cn(scale):
        return (rng.standard_normal(2) + 1j * rng.standard_normal(2)) * np.asarray(scale) / np.sqrt(2)

    UPs, FPs, UNs = (np.empty((ds.sizes["frequency"], 2, 1), complex) for _ in range(3))
    for n in range(ds.sizes["frequency"]):
        DN, DP, Fc, _ = models[n % freqs.size]
        U = np.linalg.solve(DN + DP, Fc) * (1 + offset)
        UP = U + cn(sigma_u)
        FP = DP @ U + cn(sigma_f)
        UPs[n, :, 0], FPs[n, :, 0], UNs[n, :, 0] = UP, FP, np.linalg.solve(DN, Fc - FP)
    ds["interface_displacement"].values = UPs
    ds["interface_force"].values = FPs
    ds["numerical_displacement"].values = UNs
    return ds


def test_residual_error_is_exact_without_noise(tmp_path):
    """No noise, a rig holding the wrong displacement: the measured FRF's error is exactly
    the interface error the residual implies, G D_N R / F."""
    ds = _forward_store(tmp_path / "exact.zarr", [16.5, 18.5, 18.6], 1, sigma_u=[0.0, 0.0], sigma_f=[0.0, 0.0], offset=0.01 - 0.004j)
    u = frf_uncertainty(ds)
    err = frf(ds).values - frf(ds, "reference").values
    np.testing.assert_allclose(u["residual_error"].values, err, rtol=1e-6, atol=0)
    np.testing.assert_allclose(u["u_H"].values, np.abs(err), rtol=1e-6)
    assert np.all(u["u_H_noise"].values == 0)


@pytest.mark.parametrize("frequency_hz", [16.5, 18.53])
def test_noise_propagation_matches_a_forward_simulation(tmp_path, frequency_hz):
    """Monte Carlo through the physics: the error left after taking out the residual term has
    the rms frf_uncertainty states (off resonance and at the peak, where G amplifies the
    force noise)."""
    draws = 200
    ds = _forward_store(tmp_path / "mc.zarr", [frequency_hz], draws, sigma_u=[3e-7, 1.5e-5], sigma_f=[2e-4, 2e-5], offset=0.0)
    u = frf_uncertainty(ds)
    err = frf(ds).values - frf(ds, "reference").values - u["residual_error"].values
    rms = np.sqrt(np.mean(np.abs(err) ** 2, axis=0))
    stated = np.sqrt(np.mean(u["u_H_noise"].values ** 2, axis=0))
    # 200 draws: the rms of |err| is within about 3/sqrt(2*200) = 15 % of the truth
    np.testing.assert_allclose(rms, stated, rtol=0.15)
    # and the noise does show up in the residual term too (it is computed from noisy data)
    assert np.all(np.abs(u["residual_error"].values) > 0)


def test_a_stated_uncertainty_sets_the_size_of_the_noise_band(tmp_path):
    """Where a point states its solution's uncertainty (the hbtest profile's
    ``displacement_uncertainty``, weighted norm |(u, l theta)|) and balanced the fundamental
    alone, the noise part of the band has exactly that size, split between u and theta as
    propagated; points stating none keep the propagation."""
    ds = _forward_store(tmp_path / "stated.zarr", [16.5, 18.53, 18.6], 1, sigma_u=[3e-7, 1.5e-5], sigma_f=[2e-4, 2e-5], offset=0.0)
    before = frf_uncertainty(ds)["u_H_noise"].values
    stated = np.array([2e-7, np.nan, 5e-6])
    ds["displacement_uncertainty"].values = stated
    after = frf_uncertainty(ds)["u_H_noise"].values
    F = np.abs(ds.external_force.sel(harmonic=1).values)
    length = load_sweep(PAPER).test.rotation_length
    size = np.hypot(after[:, 0], length * after[:, 1]) * F
    np.testing.assert_allclose(size[[0, 2]], stated[[0, 2]], rtol=1e-12)
    np.testing.assert_allclose(after[:, 0] / after[:, 1], before[:, 0] / before[:, 1], rtol=1e-12)
    assert np.array_equal(after[1], before[1])
    # two harmonics in the store: only the point that balanced the fundamental alone is scaled
    import xarray as xr

    from hbtest.analysis.frf import _stated_size
    two = xr.Dataset({"displacement_uncertainty": ("frequency", [1.0, 1.0, 1.0]),
                      "harmonic_active": (("frequency", "harmonic"), [[True, False], [True, True], [False, True]])},
                     coords={"harmonic": [1, 2]})
    var = np.full((3, 2), 4.0)  # weighted: 4 + 0.5^2 4 = 5, stated 1: scaled by 1/5
    np.testing.assert_array_equal(_stated_size(two, var, 1, 0.5), [[0.8, 0.8], [4.0, 4.0], [4.0, 4.0]])
    np.testing.assert_array_equal(_stated_size(two.drop_vars("harmonic_active"), var, 1, 0.5), var)


# ---------------------------------------------------------------------------------------
# modal fit


def test_model_mode_agrees_with_the_reference_frf_fit(twin15):
    ds = open_run(twin15).load()
    ref = compare_resonance(ds)["reference"]
    exact = model_mode(ds, 18.5)
    assert exact["frequency_hz"] == pytest.approx(ref.frequency_hz, rel=1e-5)
    assert exact["damping_ratio"] == pytest.approx(ref.damping_ratio, rel=1e-3)


def test_modal_fit_within_acceptance_and_inside_its_intervals(twin15):
    ds = open_run(twin15).load()
    (mode,) = fit_modes(ds)
    exact = model_mode(ds, 18.5)
    fn, zeta = exact["frequency_hz"], exact["damping_ratio"]
    assert mode.frequency_hz == pytest.approx(fn, rel=1e-3)
    assert mode.damping_ratio == pytest.approx(zeta, rel=0.03)
    # one seeded realization against its 95 % interval (2 sigma): within 1.5 half-widths (3 sigma),
    # as a 95 % interval misses the truth at one seed in twenty (seeds 1 and shifted: inside)
    lo, hi = mode.frequency_hz_ci
    assert abs(mode.frequency_hz - fn) <= 1.5 * (hi - lo) / 2 and hi - lo < 1e-3 * fn
    lo, hi = mode.damping_ratio_ci
    # one seeded realization against its 95 % interval: within 1.5 half-widths (about 3 sigma)
    # plus the twin's own reduction bias (noise-free twin: +0.04 % in the damping; this
    # realization: +0.27 %, 1.6 sigma, since the pooled-fit points)
    assert abs(mode.damping_ratio - zeta) <= 1.5 * (hi - lo) / 2 + 5e-4 * zeta and hi - lo < 0.03 * zeta
    # the modal constant agrees with the same fit of the exact reference FRF
    ref = ds.copy()
    ref["interface_displacement"] = ds["reference_interface_displacement"]
    (exact_fit,) = fit_modes(ref, samples=20)
    lo, hi = mode.modal_constant_ci
    assert abs(mode.modal_constant - exact_fit.modal_constant) <= 1.5 * (hi - lo) / 2  # 3 sigma, as above
    assert abs(mode.modal_constant_phase_deg) < 2.0  # proportional damping: nearly real
    assert mode.n_points == 15 and not mode.at_edge


def test_theta_frf_gives_the_same_pole(twin15):
    ds = open_run(twin15).load()
    (mu,) = fit_modes(ds, "u", samples=50)
    (mt,) = fit_modes(ds, "theta", samples=50)
    assert mt.frequency_hz == pytest.approx(mu.frequency_hz, rel=1e-4)
    assert mt.damping_ratio == pytest.approx(mu.damping_ratio, rel=0.01)
    assert mt.modal_constant_units != mu.modal_constant_units


def test_bootstrap_is_seeded(twin15):
    ds = open_run(twin15).load()
    a = fit_modes(ds, samples=40, seed=3)[0]
    b = fit_modes(ds, samples=40, seed=3)[0]
    c = fit_modes(ds, samples=40, seed=4)[0]
    assert a == b
    assert a.frequency_hz == c.frequency_hz and a.frequency_hz_ci != c.frequency_hz_ci


# ---------------------------------------------------------------------------------------
# command


def test_modal_command_json_and_store_attribute(twin15, capsys):
    before = RunStore.open(twin15).attrs
    assert main(["modal", str(twin15), "--json", "--samples", "50"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (m,) = doc["modes"]
    for key in ("frequency_hz", "frequency_hz_ci", "damping_ratio", "damping_ratio_ci", "modal_constant", "modal_constant_ci"):
        assert key in m
    assert m["frequency_hz_ci"][0] < m["frequency_hz"] < m["frequency_hz_ci"][1]
    after = RunStore.open(twin15).attrs
    assert after["modal_fit"]["modes"] == doc["modes"]
    assert after["status"] == before["status"] and after["sweep_text"] == before["sweep_text"]
    # text report
    assert main(["modal", str(twin15), "--samples", "50", "--no-write"]) == 0
    out = capsys.readouterr().out
    assert "mode 1: f_n = 18.5" in out and "written" not in out


def test_modal_command_refuses_a_store_being_written(twin15, capsys):
    with StoreLock(twin15):
        assert main(["modal", str(twin15), "--samples", "20"]) == 2
    err = capsys.readouterr().err
    assert "being written" in err and "Traceback" not in err


def test_modal_command_user_errors(tmp_path, capsys):
    assert main(["modal", str(tmp_path / "missing.zarr")]) == 2
    assert "not found" in capsys.readouterr().err


def test_set_attrs_keeps_the_status(twin15):
    s = RunStore.open(twin15)
    with StoreLock(twin15):
        s.set_attrs(note={"a": 1})
        with pytest.raises(ValueError):
            s.set_attrs(status="failed")
    assert s.attrs["note"] == {"a": 1} and s.attrs["status"] == "completed"


# ---------------------------------------------------------------------------------------
# over seeds (slow): the paper sweep, 31 points


@pytest.mark.slow
def test_paper_sweep_over_seeds(tmp_path):
    misses = 0
    covered = np.zeros(3)  # complex, magnitude, points
    for seed in (1, 2, 3, 4, 5):
        ds = open_run(_sweep(tmp_path / f"paper-{seed}.zarr", [], seed=seed)).load()
        cov = uncertainty_coverage(ds)
        covered += [cov["complex"] * cov["n"], cov["magnitude"] * cov["n"], cov["n"]]
        assert cov["complex"] >= 0.8 and cov["magnitude"] >= 0.8  # a seed: 31 points
        (mode,) = fit_modes(ds)
        exact = model_mode(ds, 18.5)
        assert mode.frequency_hz == pytest.approx(exact["frequency_hz"], rel=1e-3)
        assert mode.damping_ratio == pytest.approx(exact["damping_ratio"], rel=0.03)
        misses += not (mode.frequency_hz_ci[0] <= exact["frequency_hz"] <= mode.frequency_hz_ci[1])
        misses += not (mode.damping_ratio_ci[0] <= exact["damping_ratio"] <= mode.damping_ratio_ci[1])
    # 95 % intervals: 10 statements, at most 2 misses (P(>2 misses) = 1 %)
    assert misses <= 2
    # 2 sigma over all 155 points: about 0.95 when the uncertainty is right (0.9 is 2.9 sd
    # of the binomial below; one seed's 31 points alone miss 0.9 with ~7 % probability)
    assert covered[0] / covered[2] >= 0.9 and covered[1] / covered[2] >= 0.9, covered


def test_two_swept_modes_are_fitted_separately(tmp_path):
    """A sweep over modes 1 and 2 of the emulated structure (forward-simulated, small noise):
    two modes, each at its exact pole, in frequency order."""
    freqs = np.concatenate([np.linspace(2.75, 3.15, 11), np.linspace(18.2, 18.9, 11)])
    ds = _forward_store(tmp_path / "two.zarr", freqs, 1, sigma_u=[1e-8, 1e-7], sigma_f=[1e-6, 1e-7], offset=0.0)
    modes = fit_modes(ds, samples=50)
    assert len(modes) == 2
    for m, near in zip(modes, (2.96, 18.53)):
        exact = model_mode(ds, near)
        assert m.frequency_hz == pytest.approx(exact["frequency_hz"], rel=1e-4)
        assert m.damping_ratio == pytest.approx(exact["damping_ratio"], rel=0.01)
        assert m.n_points <= 11
    assert modes[0].band_hz[1] < 4.0 < modes[1].band_hz[0]


def test_modal_command_unsolved_harmonic_is_one_line(twin15, capsys):
    assert main(["modal", str(twin15), "--harmonic", "3", "--no-write"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hbtest: error:") and "harmonic 3" in err and "\n" not in err

"""Calibration uncertainty in the FRF uncertainty: the calibration record's per-channel
scale and skew standard uncertainties propagated first order through the reduction and the
hybrid solution (``frf_uncertainty``'s ``u_H_calibration``)."""

from pathlib import Path

import numpy as np
import pytest

from bounds import ONE_SWEEP_FRF_BOUND

from hbtest.analysis import frf
from hbtest.calibration import CalibrationRecord, run_calibration, save_calibration
from hbtest.calibration.uncertainty import calibration_perturbations, reduction_matrix
from hbtest.config import load_rig, load_sweep
from hbtest.errors import UserError
from hbtest.rig.virtual import VirtualRig
from hbtest.method.sensors import measure_interface_from_coefficients
from hbtest.sweep.runner import run

ROOT = Path(__file__).resolve().parents[1]
NOMINAL = ROOT / "instruments" / "virtual-cantilever.toml"
MISCAL = ROOT / "instruments" / "virtual-cantilever-miscalibrated.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
RESONANCE = ["sweep.start_hz=18.2", "sweep.stop_hz=18.8", "sweep.points=7"]
#: the TRUE sensor values of the miscalibrated twin, in record units (nominal x true factor)
TRUE_VALUES = {"mains_hz": 50.2, "channels": {"l2": {"scale_per_v": 5.05e-4}, "g1": {"scale_per_v": 2.04e-5}, "g2": {"skew_us": 50.0}}}


def _sweep(tmp_path, rig, name, cal=None, points=RESONANCE, extra_rig=(), seed=None):
    rs = [f'sensors.calibration="{cal}"'] if cal else []
    rs += list(extra_rig)
    ov = [*points, f"rig='{rig}'", "test.max_iterations=25"] + ([f"rig_set={rs!r}"] if rs else [])
    return run(load_sweep(PAPER, ov), tmp_path / f"{name}.zarr", progress=None, plot=False, overrides=ov, seed=seed).load()


def _coefficients(state, f):
    """A steady state's raw channel coefficients as a ChannelCoefficients-like record."""
    from types import SimpleNamespace

    return SimpleNamespace(orders=np.array([1]), coefficients=state.channels, frequency_hz=f, n_periods=1,
                           variance={n: np.zeros(1) for n in state.channels})


def _record(values, uncertainty, date="2026-11-23T19:00:00Z"):
    return CalibrationRecord(date, ("channels",), "test", values, uncertainty)


@pytest.mark.parametrize("method", ["finite-difference", "inertia", "segment"])
@pytest.mark.parametrize("channel, key", [("l1", "scale_per_v"), ("l2", "scale_per_v"), ("g1", "scale_per_v"), ("g2", "skew_us")])
def test_linearised_interface_change_matches_re_reduction_with_the_changed_value(method, channel, key):
    """The interface change of one standard uncertainty of a calibrated value equals (to first
    order) re-reducing the same raw channel coefficients with that value changed by it."""
    cfg = load_rig(MISCAL)
    layout = cfg.sensors
    f = 18.5
    rec = _coefficients(VirtualRig(cfg, noise=False).steady_state(f, np.array([[1.0], [0.6j]]), [1]), f)
    base = measure_interface_from_coefficients(rec, layout, [1], method)
    spec = layout.channel(channel)
    rel = 1e-5
    if key == "scale_per_v":
        sigma = rel * spec.scale
        changed = layout.with_channels({channel: {"scale": spec.scale + sigma}})
    else:
        sigma = 1e-2  # µs
        changed = layout.with_channels({channel: {"skew": spec.skew + sigma * 1e-6}})
    moved = measure_interface_from_coefficients(rec, changed, [1], method)
    exact = np.concatenate([moved.displacement[:, 0] - base.displacement[:, 0], moved.force[:, 0] - base.force[:, 0]])
    d = calibration_perturbations(layout, _record({}, {"channels": {channel: {key: sigma}}}), f, 1, method,
                                  base.displacement[:, 0], base.force[:, 0])
    assert d.shape == (1, 4)
    scale = np.abs(np.concatenate([base.displacement[:, 0], base.force[:, 0]]))
    assert np.all(np.abs(d[0] - exact) <= 1e-3 * np.abs(exact) + 1e-9 * scale)
    assert np.max(np.abs(exact) / scale) > 1e-7  # the value matters


def test_reduction_matrix_reproduces_the_reduction():
    """``L c`` with the channel coefficients the reduction corrects equals the reduction."""
    cfg = load_rig(NOMINAL)
    f = 17.3
    rec = _coefficients(VirtualRig(cfg, noise=False).steady_state(f, np.array([[1.0], [0.4j]]), [1]), f)
    m = measure_interface_from_coefficients(rec, cfg.sensors, [1], "segment")
    c = np.array([rec.coefficients[s.name][0] * s.scale / s.response(f) for s in cfg.sensors.channels])
    L = reduction_matrix(cfg.sensors, f, 1, "segment")
    assert L @ c == pytest.approx(np.concatenate([m.displacement[:, 0], m.force[:, 0]]), rel=1e-10)


def test_nominal_store_has_no_calibration_part(tmp_path):
    ds = _sweep(tmp_path, NOMINAL, "nominal", points=["sweep.start_hz=18.4", "sweep.stop_hz=18.5", "sweep.points=2"])
    u = frf.frf_uncertainty(ds)
    assert np.all(u.u_H_calibration.values == 0) and u.attrs["calibration"] == ""
    assert u.u_H.values == pytest.approx(np.sqrt(u.u_H_noise.values**2 + np.abs(u.residual_error.values) ** 2), rel=1e-12)


def test_calibration_part_is_the_frf_error_a_calibration_error_makes(tmp_path):
    """Independent check of the hybrid propagation: noise-free twin, a record with the TRUE
    values except one off by its stated standard uncertainty. The FRF error against the exact
    reference, less the residual's own part, is then that one value's calibration error, whose
    magnitude ``u_H_calibration`` must equal (first order)."""
    # the noise-free twin: no white noise and no mains (the transient fit's noise estimate near
    # 18.6 Hz with mains regressors is far above the twin's real noise; see the notes)
    quiet = ["virtual.noise.laser_rms_um=0.0", "virtual.noise.gauge_rms_microstrain=0.0", "virtual.mains.amplitude_microstrain=0.0"]
    # accuracy 1e-5: the point ends where it was measured (an estimate extrapolated by the
    # pooled fit carries its Jacobian prior's uncertainty, far above this test's 10 %)
    pts = ["sweep.start_hz=18.4", "sweep.stop_hz=18.6", "sweep.points=2", "test.accuracy=1e-5"]
    for channel, key, sigma in (("g1", "scale_per_v", 2.04e-8), ("g2", "skew_us", 2.0), ("l2", "scale_per_v", 5.05e-8)):
        vals = {"mains_hz": 50.2, "channels": {c: dict(v) for c, v in TRUE_VALUES["channels"].items()}}
        vals["channels"].setdefault(channel, {})
        vals["channels"][channel][key] = vals["channels"][channel].get(key, 0.0) + sigma
        p = save_calibration(_record(vals, {"channels": {channel: {key: sigma}}}), tmp_path / f"{channel}.json")
        ds = _sweep(tmp_path, MISCAL, f"q{channel}", cal=p, points=pts, extra_rig=quiet)
        u = frf.frf_uncertainty(ds)
        err = frf.frf(ds).values - frf.frf(ds, "reference").values - u.residual_error.values
        uc = u.u_H_calibration.values
        assert np.all(uc > 3 * u.u_H_noise.values), channel  # the calibration error dominates
        assert np.abs(err) == pytest.approx(uc, rel=0.1), channel
    # the sweep keeps the applied record in the store: rewriting the file afterwards changes
    # nothing; a store that keeps only the rig file's reference refuses a record that is not
    # the one it names; an explicit record is used as given
    save_calibration(_record(vals, {"channels": {channel: {key: 2 * sigma}}}, date="2026-11-24T00:00:00Z"), p)
    assert frf.frf_uncertainty(ds).u_H_calibration.values == pytest.approx(uc, rel=1e-9)
    without_copy = ds.copy()
    del without_copy.attrs["calibration_record"]
    with pytest.raises(UserError, match="not the one the store was reduced with"):
        frf.frf_uncertainty(without_copy)
    assert frf.frf_uncertainty(ds, calibration=p).u_H_calibration.values == pytest.approx(2 * uc, rel=1e-9)


def _calibrated_resonance(tmp_path, seed):
    cfg = load_rig(MISCAL)
    with VirtualRig(cfg, seed=seed) as rig:
        rec = run_calibration(rig, cfg.physical)
    p = save_calibration(rec, tmp_path / f"cal{seed}.json")
    return _sweep(tmp_path, MISCAL, f"cal{seed}", cal=p, seed=seed)


def calibrated_coverage(tmp_path, seeds):
    """Pooled over seeds: max FRF error, complex 2-sigma coverage, rms and max normalised
    error, share of the calibration part in u_H."""
    errs, covered, norm, share = [], [], [], []
    for seed in seeds:
        ds = _calibrated_resonance(tmp_path, seed)
        assert bool(ds.converged.all())
        u = frf.frf_uncertainty(ds)
        assert u.attrs["calibration"]
        e = np.abs(frf.frf(ds).values - frf.frf(ds, "reference").values)
        errs.append(np.abs(frf.relative_error(ds).values).ravel())
        covered.append((e <= 2 * u.u_H.values).ravel())
        norm.append((e / u.u_H.values).ravel())
        share.append((u.u_H_calibration.values / u.u_H.values).ravel())
    errs, covered, norm, share = map(np.concatenate, (errs, covered, norm, share))
    return {"max_relative_error": float(errs.max()), "coverage": float(covered.mean()), "n": int(covered.size),
            "rms_normalised_error": float(np.sqrt(np.mean(norm**2))), "max_normalised_error": float(norm.max()),
            "median_calibration_share": float(np.median(share))}


def test_calibrated_resonance_sweep_error_is_covered_by_the_stated_uncertainty(tmp_path):
    """Acceptance: calibrate the miscalibrated twin, sweep 7 points around resonance
    with that calibration: FRF error <= 1.25 % (one seed: ``bounds.ONE_SWEEP_FRF_BOUND``) and 2 u_H
    covers the true error (binomial misses)."""
    r = calibrated_coverage(tmp_path, [1])
    assert r["max_relative_error"] <= ONE_SWEEP_FRF_BOUND
    # 2 u_H covers 95.4 % when the statement is right: over n = 14 values the misses are binomial,
    # at most 3 with probability 0.998 (none, the old ">= 0.95", only 0.52: 2 misses at SEED_SHIFT=2)
    assert (1 - r["coverage"]) * r["n"] <= 3 + 1e-9, r
    assert r["median_calibration_share"] > 0.5  # the calibration part is the main one here


@pytest.mark.slow
def test_calibrated_coverage_over_seeds(tmp_path):
    """Over 10 seeds the error is judged against what the calibration states, not against 1 %:
    seed 4's largest error is 1.01 % (AVX-512 numpy + SkylakeX), 1.30 % (AVX2 numpy) and
    0.76 % (Sandybridge) at 1.80 / 1.89 / 1.14 of its stated u_H (~0.6 %, mostly the
    calibration's): a bound at 1 % failed on those last bits at every commit back to 417d47c
    (the threshold audit), and no bound of the relative error alone is what the statement
    supports. The other nine seeds' maxima are 0.25-0.89 % in the three environments."""
    r = calibrated_coverage(tmp_path, range(1, 11))
    assert r["max_normalised_error"] <= 4, r  # P(|z| > 4) = 6e-5 a value: under 1 % over 140
    assert r["coverage"] >= 0.90  # binomial over 140 values: 0.954 expected, sd 0.018, bound 3 sd below
    assert 0.2 < r["rms_normalised_error"] < 1.5  # neither far too small nor far too large


if __name__ == "__main__":  # python tests/test_calibration_uncertainty.py [n_seeds]: the figures
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        print(calibrated_coverage(Path(d), range(1, 1 + int(sys.argv[1]) if len(sys.argv) > 1 else 11)))

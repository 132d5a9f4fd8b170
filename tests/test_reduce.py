"""``hbtest reduce`` re-solves the hybrid problem with a corrected calibration: the
result equals re-running the sweep with that calibration — to ~1e-6 on the noise-free twin,
within the combined stated uncertainty on the noisy one — from every evaluation's raw channel
coefficients kept in the store."""

import json
from pathlib import Path

import numpy as np
import pytest

from bounds import ONE_SWEEP_FRF_BOUND

from hbtest.analysis import frf
from hbtest.method import harmonics
from hbtest.calibration import CalibrationRecord, save_calibration
from hbtest.analysis.reduce import reduce_store
from hbtest.calibration.resolve import EXTRAPOLATION_WARNING, RESOLVE_METHODS, reduce_evaluations, resolve_point
from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.point import NumericalSide
from hbtest.store import RunStore, open_run
from hbtest.sweep.runner import run

ROOT = Path(__file__).resolve().parents[1]
NOMINAL = ROOT / "instruments" / "virtual-cantilever.toml"
MISCAL = ROOT / "instruments" / "virtual-cantilever-miscalibrated.toml"
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
#: the TRUE channel values of the miscalibrated twin, in record units (nominal x true factor)
TRUE_CHANNELS = {"l2": {"scale_per_v": 5.05e-4}, "g1": {"scale_per_v": 2.04e-5}, "g2": {"skew_us": 50.0}}
#: five points around the resonance of mode 2 (18.53 Hz)
POINTS = ["sweep.start_hz=18.3", "sweep.stop_hz=18.7", "sweep.points=5"]
#: the noise-free twin: no white noise, no mains, an ideal ADC
QUIET = ["virtual.noise.laser_rms_um=0.0", "virtual.noise.gauge_rms_microstrain=0.0", "virtual.mains.amplitude_microstrain=0.0", "virtual.adc.bits=0"]
#: the mains where the nominal layout assumes it (50 Hz): channel coefficients fitted with
#: the wrong mains frequency cannot be refitted (see hbtest.calibration.resolve)
MAINS_AT_50 = ["virtual.mains.frequency_hz=50.0"]


def _record():
    return CalibrationRecord("2026-11-23T20:00:00Z", ("channels",), "twin truth", {"channels": TRUE_CHANNELS}, {})


def _sweep(tmp_path, name, rig_set, extra=(), seed=None):
    ov = [*POINTS, f"rig='{MISCAL}'", "test.max_iterations=25", *extra, f"rig_set={list(rig_set)!r}"]
    return run(load_sweep(PAPER, ov), tmp_path / f"{name}.zarr", progress=None, plot=False, overrides=ov, seed=seed).load()


# -- the re-solution on synthetic linear data (independent: direct linear algebra) ---------


def _synthetic(seed, n_eval, noise=0.0):
    """A linear physical side: raw channel coefficients ``c = A V`` (random complex A),
    reduced with the twin's layout; a linear numerical side. Returns (kwargs for
    resolve_point, exact hybrid voltage, exact interface displacement)."""
    rng = np.random.default_rng(seed)
    layout = load_rig(NOMINAL).sensors
    names = layout.channel_names
    f, orders = 18.5, np.array([1])
    A = (rng.normal(size=(len(names), 2)) + 1j * rng.normal(size=(len(names), 2))) * 0.5
    V = rng.normal(size=(n_eval, 2, 1)) + 1j * rng.normal(size=(n_eval, 2, 1))
    c = np.einsum("ca,eak->eck", A, V)
    c = c + noise * (rng.normal(size=c.shape) + 1j * rng.normal(size=c.shape))
    var = np.full(c.shape, max(noise, 1e-12) ** 2 * 2)
    D = np.array([[[2.0e3 + 50j, 30.0], [30.0, 8.0 + 0.5j]]])
    Fe = np.array([[0.05 + 0.01j], [0.002]])
    num = NumericalSide(f, orders, D, Fe)
    # exact: reduce the map's columns, then solve U(V) = D^-1 (Fe - F(V)) for V
    cols = reduce_evaluations(A.T[:, :, None], np.zeros((2, len(names), 1)), names, layout, f, orders, "segment")
    BU, BF = cols[0][:, :, 0].T, cols[1][:, :, 0].T  # (2, n_act)
    Dinv = np.linalg.inv(D[0])
    V_exact = np.linalg.solve(BU + Dinv @ BF, Dinv @ Fe[:, 0])
    kw = dict(voltages=V, coefficients=c, variance=var, channel_names=names, layout=layout, frequency_hz=f, orders=orders,
              method="segment", num=num)
    return kw, V_exact, BU @ V_exact


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("n_eval", [3, 5, 9])
def test_resolution_of_exact_linear_data_is_the_exact_hybrid_solution(seed, n_eval):
    kw, V_exact, U_exact = _synthetic(seed, n_eval)
    r = resolve_point(**kw)
    # 3 evaluations: only the per-harmonic complex fit (n_act + 1) is possible; 5 = n_v + 1
    # allows the real affine fit too
    assert r.method in (("complex_fit",) if n_eval < 5 else ("complex_fit", "affine_fit"))
    assert r.voltage[:, 0] == pytest.approx(V_exact, rel=1e-8, abs=1e-10)
    assert r.displacement[:, 0] == pytest.approx(U_exact, rel=1e-8, abs=1e-14)
    assert r.residual_norm < 1e-10 * np.abs(U_exact).max()
    assert r.numerical_displacement == pytest.approx(r.displacement, rel=1e-8, abs=1e-14)
    # the extrapolation ratio: |V* - V_final| over the rms distance of the evaluations from their mean
    x = harmonics.pack(kw["voltages"], [1]).reshape(n_eval, -1)
    spread = np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1)))
    dv = np.linalg.norm(harmonics.pack(V_exact[:, None], [1]).reshape(-1) - x[-1])
    assert r.voltage_change == pytest.approx(dv, rel=1e-6) and r.extrapolation == pytest.approx(dv / spread, rel=1e-6)
    assert r.extrapolated == (r.extrapolation > EXTRAPOLATION_WARNING)


def test_resolution_with_noise_states_an_uncertainty_that_covers_its_error():
    """Noisy evaluations: the real-affine and complex fits give the exact solution within
    three times the stated standard deviation of the displacement (over 20 seeds, >= 18 covered)."""
    covered = 0
    for seed in range(20):
        kw, V_exact, U_exact = _synthetic(100 + seed, 12, noise=1e-4)
        r = resolve_point(**kw)
        assert r.method in RESOLVE_METHODS[:2]
        covered += bool(np.all(np.abs(r.displacement[:, 0] - U_exact) <= 3 * np.sqrt(r.displacement_variance[:, 0])))
    assert covered >= 18


def test_too_few_evaluations_fall_back_and_say_so():
    kw, V_exact, U_exact = _synthetic(7, 2)  # fewer than n_act + 1: no fit
    r = resolve_point(**kw)
    assert r.method == "state_only" and np.isnan(r.extrapolation)
    assert r.voltage[:, 0] == pytest.approx(kw["voltages"][-1, :, 0])
    assert r.residual_norm > 0


# -- on the twin: reduce == re-run -------------------------------------------------------


def test_reduce_equals_the_rerun_on_the_noise_free_twin(tmp_path):
    """Noise-free miscalibrated twin (2 % gauge gain, 1 % laser scale, 50 us skew): the sweep
    reduced with the nominal sensors is clearly off; `reduce` with the true channel values
    equals a re-run with them to 5e-6 relative. The re-run converges to 1e-7 mm (1e-10 m,
    2.5e-7 of the interface displacement: a 20th of the bound); below that the twin's own
    rounding decides (its residual floor scatters over 1e-13 to 2e-11 m, and a 1e-9 mm
    tolerance converged 4 of 5 points on AVX-512 numpy)."""
    nominal = _sweep(tmp_path, "nominal", QUIET)
    assert float(np.abs(frf.relative_error(nominal)).min()) > 0.05
    cal = save_calibration(_record(), tmp_path / "true.json")
    points = reduce_store(tmp_path / "nominal.zarr", _record(), tmp_path / "reduced.zarr")
    assert [p.mode for p in points] == ["hybrid"] * 5
    assert all(p.method in ("complex_fit", "affine_fit") for p in points)
    reduced = open_run(tmp_path / "reduced.zarr").load()
    rerun = _sweep(tmp_path, "rerun", [*QUIET, f'sensors.calibration="{cal}"'], ["test.tolerance_mm=1e-7", "test.accuracy=1e-7"])
    assert bool(rerun.converged.all()) and float(rerun.residual_norm.max()) < 1e-10
    H, H_rerun = frf.frf(reduced).values, frf.frf(rerun).values
    # (3e-6 before the pooled-fit rule; the nominal run now stops with fewer, noise-sized
    # evaluations, so the re-solution extrapolates farther: 3.1e-6 measured)
    assert np.max(np.abs(H - H_rerun) / np.abs(H_rerun)) < 5e-6
    assert float(np.abs(frf.relative_error(reduced)).max()) < 1e-3  # the exact reference (force reconstruction ~3e-4)
    assert bool(reduced.converged.all())


@pytest.fixture(scope="module")
def noisy(tmp_path_factory):
    """Seeded miscalibrated twin with noise and mains (at the assumed 50 Hz): the nominal sweep,
    its reduction with the true channel values, and the re-run with them."""
    tmp = tmp_path_factory.mktemp("noisy")
    nominal = _sweep(tmp, "nominal", MAINS_AT_50, seed=11)
    cal = save_calibration(_record(), tmp / "true.json")
    # the twin's PS is the rig file's [physical] beam (the exact reference agrees to ~3e-6):
    # its model needs no uncertainty allowance here
    points = reduce_store(tmp / "nominal.zarr", _record(), tmp / "reduced.zarr", ps_model_uncertainty=0.0)
    rerun = _sweep(tmp, "rerun", [*MAINS_AT_50, f'sensors.calibration="{cal}"'], seed=11)
    return dict(tmp=tmp, nominal=nominal, points=points, reduced=open_run(tmp / "reduced.zarr").load(), rerun=rerun, cal=cal)


def test_reduce_equals_the_rerun_within_the_stated_noise(noisy):
    """Acceptance: the reduced FRF and the re-run's agree within four combined standard
    uncertainties; both are within 1.25 % of the exact reference (one seed:
    ``bounds.ONE_SWEEP_FRF_BOUND``), the nominal one is off by more than 5 %. ``u_H`` is the rms
    complex error, so for circular complex Gaussian errors |dH| exceeds k combined sigmas with
    probability exp(-k^2): 1.1e-7 per value at k = 4 (5 independent values: u and theta share
    one solution). Measured max |dH| / sigma over seeds 11-16: 1.52, 1.63, 1.05, 1.87, 2.21,
    2.44; 3.03 on one machine (seed 11, AVX-512 numpy with Haswell BLAS), where k = 3 failed."""
    red, rerun = noisy["reduced"], noisy["rerun"]
    assert float(np.abs(frf.relative_error(noisy["nominal"])).min()) > 0.05
    assert float(np.abs(frf.relative_error(red)).max()) < ONE_SWEEP_FRF_BOUND
    assert float(np.abs(frf.relative_error(rerun)).max()) < ONE_SWEEP_FRF_BOUND
    u_red, u_rerun = frf.frf_uncertainty(red), frf.frf_uncertainty(rerun)
    dH = np.abs(u_red.H.values - u_rerun.H.values)
    sigma = np.sqrt(u_red.u_H.values ** 2 + u_rerun.u_H.values ** 2)
    assert np.all(dH <= 4 * sigma)
    assert np.all(sigma < 0.01 * np.abs(u_rerun.H.values))  # a meaningful comparison: below 1 %


def test_reduced_store_records_both_calibrations_and_each_points_method(noisy):
    red, points = noisy["reduced"], noisy["points"]
    assert not json.loads(red.attrs["sensor_layout_original"])["calibration"]
    layout = json.loads(red.attrs["sensor_layout"])
    assert layout["calibration"]
    assert json.loads(red.attrs["calibration_record"])["values"]["channels"]["g1"]["scale_per_v"] == 2.04e-5
    summary = red.attrs["reduction"]
    assert [s["index"] for s in summary] == list(range(5))
    for s, p in zip(summary, points):
        assert s["method"] == p.method in RESOLVE_METHODS and s["n_evaluations"] >= 1
        assert s["extrapolated"] == (s["extrapolation"] > EXTRAPOLATION_WARNING)
    # the nominal run's voltages are far from where the corrected run converges (100 % FRF error)
    assert any(s["extrapolated"] for s in summary)
    # the solved voltage is where the re-run converged, to the noise (a few per cent)
    V_red, V_rerun = red.voltage.values, noisy["rerun"].voltage.values
    assert np.max(np.abs(V_red - V_rerun)) < 0.05 * np.max(np.abs(V_rerun))
    # the histories (raw, calibration-free) are carried over: the reduced store reduces again
    st = RunStore.open(noisy["tmp"] / "reduced.zarr")
    assert st.evaluation_channels == ("l1", "l2", "g1", "g2")
    src = RunStore.open(noisy["tmp"] / "nominal.zarr")
    for i in range(5):
        a, b = src.read_point(i), st.read_point(i)
        n = a.history_voltage.shape[0]
        assert a.history_channel_coefficients.shape == (n, 4, 1) and np.all(np.isfinite(a.history_channel_coefficients))
        assert np.array_equal(a.history_channel_coefficients, b.history_channel_coefficients)
        assert np.array_equal(a.history_channel_variance, b.history_channel_variance)
        assert np.all(a.history_channel_variance > 0)
        # the final row reduced with the run's own layout is the final window's measurement:
        # the run stores the estimate pooled over the point's evaluations (hbtest profile) at
        # the solution of the pooled fit, which differs from that one window by less than the
        # window's own noise (3 sigma) plus the recorded distance of that solution from the
        # last measured state (solution_offset, weighted norm: u in m, theta times l)
        U, F, vU, vF = reduce_evaluations(a.history_channel_coefficients[-1:], a.history_channel_variance[-1:], src.evaluation_channels,
                                          load_rig(MISCAL).sensors, a.frequency_hz, [1], "segment")
        off = a.solution_offset * np.array([[1.0], [1.0 / load_sweep(PAPER).test.rotation_length]])
        assert np.all(np.abs(U[0] - a.interface_displacement) <= 3 * np.sqrt(vU[0]) + off)
        if a.solution_offset == 0:
            assert np.all(np.abs(F[0] - a.interface_force) <= 3 * np.sqrt(vF[0]))
        # and pooling only lowers the variance of the estimate below the one window's
        if a.solution_offset == 0:  # (at the pooled fit's solution the variance carries its extrapolation)
            assert np.all(a.interface_displacement_variance <= vU[0] * (1 + 1e-9)) and np.all(a.interface_force_variance <= vF[0] * (1 + 1e-9))
        else:  # a point reported at the pooled fit's solution states its uncertainty
            assert np.isfinite(a.displacement_uncertainty) and a.displacement_uncertainty > 0
    ds = open_run(noisy["tmp"] / "nominal.zarr")
    assert ds.displacement_uncertainty.attrs["units"] == "m"


def test_reducing_a_store_with_its_own_calibration_reproduces_it(noisy, tmp_path):
    """Consistency without a calibration change: the re-run's store reduced with its own
    record (default settings) stays inside its measured voltages and reproduces its FRF within
    the combined stated uncertainty."""
    points = reduce_store(noisy["tmp"] / "rerun.zarr", _record(), tmp_path / "same.zarr")
    # every point re-solved inside its measured voltages (the method with the smallest stated
    # force variance: a fit, or the PS model's small step from the fitted anchor)
    assert all(p.method != "state_only" and p.extrapolation < 0.1 for p in points)
    same = frf.frf_uncertainty(open_run(tmp_path / "same.zarr").load())
    orig = frf.frf_uncertainty(noisy["rerun"])
    assert np.all(np.abs(same.H.values - orig.H.values) <= 3 * np.sqrt(same.u_H.values ** 2 + orig.u_H.values ** 2))


def test_reduce_command_reports_methods_and_one_line_errors(noisy, tmp_path, capsys):
    cal = noisy["cal"]
    assert main(["reduce", str(noisy["tmp"] / "nominal.zarr"), "--calibration", str(cal), "--store", str(tmp_path / "r.zarr"),
                 "--ps-model-uncertainty", "0"]) == 0
    out = capsys.readouterr().out
    assert "5 point(s)" in out and "EXTRAPOLATED" in out and "x spread" in out
    # a record that moves the mains: reported, since coefficients cannot be refitted
    moved = CalibrationRecord("2026-11-23T20:00:00Z", ("mains", "channels"), "twin", {"mains_hz": 50.2, "channels": TRUE_CHANNELS}, {})
    p = save_calibration(moved, tmp_path / "mains.json")
    assert main(["reduce", str(noisy["tmp"] / "nominal.zarr"), "--calibration", str(p), "--store", str(tmp_path / "m.zarr")]) == 0
    assert "warning: the record changes the mains frequency (50 -> 50.2 Hz)" in capsys.readouterr().out
    # a store with neither per-evaluation coefficients nor raw records: one line, exit 2
    plain = RunStore.create(tmp_path / "plain.zarr", frequencies_hz=[18.0], harmonics=[1], actuators=["a", "b"], max_iterations=1, attrs={})
    assert main(["reduce", str(plain.path), "--calibration", str(cal), "--store", str(tmp_path / "x.zarr")]) == 2
    assert main(["reduce", str(noisy["tmp"] / "nominal.zarr"), "--calibration", str(cal), "--store", str(tmp_path / "y.zarr"),
                 "--ps-model-uncertainty", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "re-run the sweep with this hbtest" in err[0] and "--ps-model-uncertainty" in err[1]


def test_reduce_with_the_record_of_hbtest_calibrate_equals_the_rerun(tmp_path):
    """The same with the record `hbtest calibrate` identifies on the twin (mains at 50 Hz):
    reduce and re-run agree within three combined standard uncertainties of their noise and
    the re-run's residual (the calibration part is common to both: left out), both within 1 %
    of the exact reference."""
    rig = tmp_path / "rig.toml"
    text = MISCAL.read_text(encoding="utf-8")
    rig.write_text(text.replace("frequency_hz = 50.2 ", "frequency_hz = 50.0 "), encoding="utf-8")
    assert rig.read_text(encoding="utf-8") != text
    cal = tmp_path / "cal.json"
    assert main(["calibrate", str(rig), "--out", str(cal)]) == 0
    from hbtest.calibration import load_calibration

    rec = load_calibration(cal)
    ov = [*POINTS, f"rig='{rig}'", "test.max_iterations=25"]
    run(load_sweep(PAPER, ov), tmp_path / "nominal.zarr", plot=False, overrides=ov, seed=3)
    points = reduce_store(tmp_path / "nominal.zarr", rec, tmp_path / "reduced.zarr", ps_model_uncertainty=0.0)
    assert all(p.method != "state_only" for p in points)
    ov2 = ov + [f"rig_set=['sensors.calibration=\"{cal}\"']"]
    rerun = run(load_sweep(PAPER, ov2), tmp_path / "rerun.zarr", plot=False, overrides=ov2, seed=3).load()
    red = open_run(tmp_path / "reduced.zarr").load()
    assert float(np.abs(frf.relative_error(red)).max()) < ONE_SWEEP_FRF_BOUND
    assert float(np.abs(frf.relative_error(rerun)).max()) < ONE_SWEEP_FRF_BOUND
    ur, uc = frf.frf_uncertainty(red), frf.frf_uncertainty(rerun)
    sigma = np.sqrt(ur.u_H_noise.values ** 2 + uc.u_H_noise.values ** 2 + np.abs(uc.residual_error.values) ** 2)
    assert np.all(np.abs(ur.H.values - uc.H.values) <= 3 * sigma)

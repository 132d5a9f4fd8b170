"""Per-harmonic balance: each solved harmonic judged on its own scale, the
excluded-energy fraction of the interface motion, and the two-harmonic acceptance sweep
against the twin's exact emulated structure (force at k = 1 only: exact second harmonic 0)."""

from pathlib import Path

import numpy as np
import pytest

from hbtest.method import harmonics
from hbtest.config import load_rig, load_sweep
from hbtest.point import HbtestCarry, HbtestProfile, NumericalSide, PointLoop, PointSettings
from hbtest.rig import Acquisition, open_rig
from hbtest.method.sensors import excluded_energy_fraction
from hbtest.sweep.runner import run

ROOT = Path(__file__).resolve().parents[1]
TWO = ROOT / "sweeps" / "two-harmonic.toml"
#: on the reference twin with its demand scatter: a multi-harmonic pool averages it up to a
#: quarter of the tolerance (``HbtestProfile.between_limit``); before it did not, and 16 and
#: 19 Hz stalled (2/4 converged, 7588 periods; now 4/4, 3908)
FEW = ["sweep.start_hz=16.0", "sweep.stop_hz=19.0", "sweep.points=4"]
#: bound of the largest harmonic-1 error of that sweep against the exact structure. A
#: multi-harmonic point states no uncertainty yet; measured over the sweep file's seed (1.05 %
#: on AVX-512 numpy) and seeds 1-4 (1.47, 0.51, 0.58, 0.50 %): mean 0.82 %, sd 0.41 %, so 2.5 %
#: is 4 spreads from the mean
TWO_HARMONIC_FRF_BOUND = 0.025


def _sweep(tmp_path, overrides, name="run"):
    cfg = load_sweep(TWO, overrides)
    return run(cfg, tmp_path / f"{name}.zarr", progress=None, plot=False, overrides=overrides).load()


def test_harmonic_tolerance_is_a_test_key_with_a_one_percent_default():
    assert load_sweep(TWO).test.harmonic_tolerance == pytest.approx(0.01)
    assert load_sweep(TWO, ["test.harmonic_tolerance=0"]).test.harmonic_tolerance == 0.0
    assert PointSettings.from_config(load_sweep(TWO, ["test.harmonic_tolerance=0.02"])).harmonic_tolerance == pytest.approx(0.02)


def test_two_harmonic_sweep_balances_every_harmonic_and_matches_the_exact_reference(tmp_path):
    """On the scattering reference twin a multi-harmonic point does not always converge: over
    the sweep file's seed in five numeric environments (threshold audit) and seeds 1-4, 35 of 36
    points did (the 19 Hz point of seed shift 2 did not), so at least 3 of the 4 must; every
    converged point balances both harmonics and matches the exact reference."""
    ds = _sweep(tmp_path, FEW)
    conv = np.asarray(ds.converged.values, dtype=bool)
    assert bool(ds.done.all()) and conv.sum() >= 3, ds.stop_reason.values
    U = ds.interface_displacement.sel(dof="u").values[conv]  # (frequency, harmonic) orders (1, 2)
    ref = ds.reference_interface_displacement.sel(dof="u").values[conv]
    assert np.all(ref[:, 1] == 0)  # force at k = 1 only, linear structure: no exact 2nd harmonic
    assert np.all(np.abs(U[:, 1]) <= 0.01 * np.abs(U[:, 0]))
    assert np.all(np.abs(U[:, 0] - ref[:, 0]) <= TWO_HARMONIC_FRF_BOUND * np.abs(ref[:, 0]))
    # the per-harmonic residual of every evaluation is stored, the last one being the last
    # demand the rig held: the stored state is that one, or (solution_offset > 0) the pooled
    # fit's solution next to it, where the residual vanishes
    tol = float(ds.attrs["tolerance_m"])
    for i in np.flatnonzero(conv):
        n = int(ds.history_length[i])
        hist = ds.history_residual.values[i, :n]
        assert n >= 1 and np.isfinite(hist).all()
        R = ds.interface_displacement.values[i] - ds.numerical_displacement.values[i]
        # (the last demand held: the last row, or the one before a closing Jacobian re-measure)
        gap = np.abs(ds.history_residual_norm.values[i, :n] - float(ds.residual_norm[i]))
        k = int(np.argmin(gap))
        assert gap[k] <= 1e-12 * tol
        assert float(ds.residual_norm[i]) < tol  # what converged means (the audit's spread is the residual's own)
        if float(ds.solution_offset[i]) == 0.0:
            np.testing.assert_allclose(hist[k], R, rtol=1e-12, atol=1e-18)
            # that row is at the stored demand, and any after it are the re-measure's perturbations of it
            Vh = ds.history_voltage.values[i, :n]
            np.testing.assert_array_equal(Vh[k], ds.voltage.values[i])
            assert all(np.count_nonzero(v != Vh[k]) == 1 for v in Vh[k + 1:])
        else:
            assert np.all(np.abs(R) < 1e-6 * tol)


def _point(overrides, frequency_hz):
    cfg = load_sweep(TWO, overrides)
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides))
    ns = cfg.numerical.numerical_substructure()
    loop = PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))
    return loop, loop.run(frequency_hz, HbtestCarry())


def test_zero_harmonic_tolerance_is_the_old_single_norm_rule():
    # a loose absolute tolerance (0.05 mm) and no accuracy stop: only the per-harmonic rule
    # can keep the point iterating once the whole norm is below it
    tol = 5e-5
    loose = [f"test.tolerance_mm={tol * 1e3}", "test.accuracy=0"]
    loop0, old = _point(loose + ["test.harmonic_tolerance=0"], 17.5)
    loop1, new = _point(loose + ["test.harmonic_tolerance=0.01"], 17.5)
    prof = HbtestProfile()
    assert old.converged and new.converged
    # old: stops at the first evaluation whose whole norm is below the tolerance; no limits
    norms = [e.norm for e in old.history if e.kind != "finite_difference"]
    assert old.final.norm < tol and all(n >= tol for n in norms[:-1])  # the stop rule itself, not a margin

    side = NumericalSide.build(loop0.ns, loop0.force_vector, 17.5, loop0.orders)
    r0, lim0 = prof.harmonic_limits(loop0, side, old.final)
    assert np.all(np.isinf(lim0))
    # with h = 1 % the point settles and iterates until every harmonic is within its limit:
    # the residual of each harmonic ends below that of the single-norm stop
    r1, lim1 = prof.harmonic_limits(loop1, side, new.final)
    assert np.all(r1 < lim1) and np.all(np.isfinite(lim1))
    assert new.iterations >= old.iterations and float(np.linalg.norm(r1)) < float(np.linalg.norm(r0))
    x = new.excluded_energy_fraction
    assert x is not None and x.shape == (2,) and np.all((x >= 0) & (x < 0.01))


def _synthetic_record(layout, f, U, fs=2000.0, periods=3):
    """Raw volts of every channel for interface motion ``U`` (2, K) at orders 1..K (exact
    through each channel's response, scale and offset); gauges read a fixed multisine."""
    K = U.shape[1]
    orders = np.arange(1, K + 1)
    n = int(round(periods * fs / f))
    t = np.arange(n) / fs
    data = {}
    for spec in layout.channels:
        g = np.array([spec.response(k * f) for k in orders])
        phys = U[0] + spec.position * U[1] if spec.kind == "laser" else np.array([2e-6, 1e-7j] + [0] * (K - 2))
        raw = harmonics.reconstruct(t, phys * g / spec.scale, f, orders) - spec.offset / spec.scale + 0.3
        data[spec.name] = raw
    return Acquisition(t, data, f, fs, periods, float(t[-1]))


def test_excluded_energy_fraction_of_a_synthetic_multisine_is_exact():
    layout = load_rig(load_sweep(TWO).rig_path).sensors
    f = 17.0
    U = np.array([[1e-3, 2e-5 - 1e-5j, 3e-5j, 0.0, 4e-6],        # u [m], orders 1..5
                  [2e-3j, 0.0, 1e-4, 5e-5 + 5e-5j, 0.0]])        # theta [rad]
    acq = _synthetic_record(layout, f, U)
    P = np.abs(U) ** 2
    for solved in ([1], [1, 2], [1, 3], [1, 2, 3, 4, 5]):
        out = np.isin(np.arange(1, 6), solved, invert=True)
        want = P[:, out].sum(axis=1) / P.sum(axis=1)
        got = excluded_energy_fraction(acq, layout, solved)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    # only orders up to max_order are looked at: with max 3, orders 4 and 5 do not count (on a
    # record of a whole number of samples per period they are orthogonal to the fit: exact)
    got = excluded_energy_fraction(_synthetic_record(layout, f, U, fs=100 * f), layout, [1], max_order=3)
    want = P[:, 1:3].sum(axis=1) / P[:, :3].sum(axis=1)
    np.testing.assert_allclose(got, want, rtol=1e-9)

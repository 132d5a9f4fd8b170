"""FRFs, resonance estimate, synchronisation table, plots and export, on stores filled from
the exact reference hybrid test (split cantilever, 16–19 Hz)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hbtest.cli import main as cli_main
from hbtest.config import SweepSpec
from hbtest.errors import UserError
from hbtest.analysis.export import open_netcdf, to_netcdf, to_uff
from hbtest.analysis.frf import (
    compare_resonance,
    fit_resonance,
    format_sync_table,
    frf,
    frf_dataset,
    harmonic_energy,
    relative_error,
    resonance,
    sync_metrics,
    sync_table,
)
from hbtest.analysis.plot import bode_png, convergence_png, default_png_path
from hbtest.store import RunStore, open_run

sys.path.insert(0, str(Path(__file__).parent))
from test_store import AMPLITUDE, exact_point, make_record, model, new_store  # noqa: E402

GRID = np.linspace(16.0, 19.0, 31)
PNG = b"\x89PNG\r\n\x1a\n"


def exact_mode2():
    """The exact pole of the emulated structure's mode 2: (f_n [Hz], zeta)."""
    _, _, full = model()
    lam = full.eigenvalues()
    lam = lam[np.imag(lam) > 0]
    fn = np.abs(lam) / (2 * np.pi)
    i = int(np.argmin(np.abs(fn - 18.5)))
    return fn[i], -lam[i].real / abs(lam[i])


@pytest.fixture(scope="module")
def run31(tmp_path_factory):
    """A finished 31-point sweep (harmonics 1, 3): 0.2 % measurement perturbation, two
    non-converged points."""
    path = tmp_path_factory.mktemp("runs") / "paper.zarr"
    s = new_store(path, GRID)
    recs = []
    for i, f in enumerate(GRID):
        r = make_record(f, (1, 3), seed=i, converged=i not in (4, 20))
        s.write_point(i, r)
        recs.append(r)
    s.set_status("completed")
    return path, recs


@pytest.fixture(scope="module")
def updown(tmp_path_factory):
    """An interrupted up-down sweep: some slots never written."""
    f = SweepSpec(16.0, 19.0, 7, "up-down", (1,)).frequencies_hz
    path = tmp_path_factory.mktemp("runs") / "updown.zarr"
    s = new_store(path, f, orders=(1,))
    for i in range(f.size - 3):
        s.write_point(i, make_record(f[i], (1,), seed=i, converged=i != 2))
    s.set_status("interrupted")
    return path


# ---------------------------------------------------------------------------------------
# FRF


def test_frf_is_displacement_per_force_and_error_matches_perturbation(run31):
    path, recs = run31
    ds = open_run(path)
    Hm, Hr = frf(ds, "measured"), frf(ds, "reference")
    assert Hm.dims == ("frequency", "dof")
    U = np.stack([exact_point(f, (1,))[0][:, 0] for f in GRID])
    np.testing.assert_allclose(Hr.values, U / AMPLITUDE, rtol=1e-14)
    Um = np.stack([r.interface_displacement[:, 0] for r in recs])
    np.testing.assert_allclose(Hm.values, Um / AMPLITUDE, rtol=1e-14)
    e = relative_error(ds)
    np.testing.assert_allclose(e.values, np.abs(Um - U) / np.abs(U), rtol=1e-10)
    assert 1e-5 < float(e.max()) < 2e-2  # the seeded 0.2 % perturbation
    # harmonic 3 carries no external force: not an FRF
    assert np.all(np.isnan(frf(ds, "measured", 3).values))
    fd = frf_dataset(ds)
    assert set(fd.data_vars) >= {"H_measured", "H_numerical", "H_reference", "relative_error", "converged"}
    np.testing.assert_allclose(fd["H_measured"].sel(harmonic=1).values, Hm.values)


def test_frf_masks_unwritten_slots(updown):
    ds = open_run(updown)
    H = frf(ds).values
    done = ds["done"].values
    assert np.all(np.isfinite(H[done])) and np.all(np.isnan(H[~done]))


def test_resonance_of_exact_model_from_31_points():
    fn, zeta = exact_mode2()
    H = np.stack([exact_point(f, (1,))[0][:, 0] for f in GRID]) / AMPLITUDE
    for j in range(2):  # u/F and theta/F share the pole
        est = fit_resonance(GRID, H[:, j])
        assert abs(est.frequency_hz / fn - 1) < 1e-3  # requirement; in fact ~1e-7
        assert abs(est.frequency_hz / fn - 1) < 1e-5
        assert est.damping_ratio == pytest.approx(zeta, rel=1e-3)
        assert not est.at_edge and est.peak_frequency_hz == pytest.approx(18.5)
        assert 5 <= est.n_points < 31 and est.misfit < 1e-2
    # order and repeats do not matter (an up-down sweep)
    est2 = fit_resonance(np.r_[GRID, GRID[::-1]], np.r_[H[:, 0], H[::-1, 0]])
    assert est2.frequency_hz == pytest.approx(fit_resonance(GRID, H[:, 0]).frequency_hz, rel=1e-9)


def test_resonance_measured_vs_reference_same_grid(run31):
    path, _ = run31
    ds = open_run(path)
    fn, zeta = exact_mode2()
    cmp = compare_resonance(ds)
    assert cmp["reference"].frequency_hz == pytest.approx(fn, rel=1e-5)
    # same points for both (non-converged excluded from both)
    assert cmp["measured"].n_points == cmp["reference"].n_points
    assert abs(cmp["frequency_relative_difference"]) < 1e-3
    assert abs(cmp["damping_relative_difference"]) < 0.1
    assert resonance(ds, "reference", dof="theta").frequency_hz == pytest.approx(fn, rel=1e-5)


def test_resonance_rejects_too_few_points():
    with pytest.raises(ValueError, match="at least 3"):
        fit_resonance([17.0, 18.0], [1.0, 2.0])


# ---------------------------------------------------------------------------------------
# synchronisation


def test_sync_metrics_known_delay_and_gain():
    rng = np.random.default_rng(11)
    f, tau, gain = 17.3, 0.15e-3, 1.008
    for k in (1, 2, 3):
        U_N = rng.standard_normal(2) + 1j * rng.standard_normal(2)
        U_P = gain * U_N * np.exp(-1j * 2 * np.pi * k * f * tau)
        d, a = sync_metrics(U_P, U_N, f, k)
        np.testing.assert_allclose(d, tau, rtol=1e-10)
        np.testing.assert_allclose(a, gain - 1, rtol=1e-10)
    # a PS that leads has a negative delay
    d, _ = sync_metrics(np.exp(+1j * 0.01), 1.0, 10.0, 1)
    assert d == pytest.approx(-0.01 / (2 * np.pi * 10.0))


def test_sync_table_of_a_stored_point(tmp_path):
    f = 18.2
    s = new_store(tmp_path / "s.zarr", [f], orders=(1, 3))
    r = make_record(f, (1, 3), seed=5)
    taus, gains = np.array([0.12e-3, 0.05e-3]), np.array([1.004, 0.995])  # per dof (u, theta)
    r.numerical_displacement = r.interface_displacement.copy()
    for j in range(2):
        for i, k in enumerate((1, 3)):
            r.interface_displacement[j, i] = gains[j] * r.numerical_displacement[j, i] * np.exp(-1j * 2 * np.pi * k * f * taus[j])
    s.write_point(0, r)
    ds = open_run(tmp_path / "s.zarr")
    rows = sync_table(ds, 0)
    assert [(x.dof, x.harmonic) for x in rows] == [("u", 1), ("theta", 1), ("u", 3), ("theta", 3)]
    for x in rows:
        j = 0 if x.dof == "u" else 1
        assert x.delay_ms == pytest.approx(taus[j] * 1e3, rel=1e-9)
        assert x.amplification_pct == pytest.approx((gains[j] - 1) * 100, rel=1e-9)
    text = format_sync_table(rows)
    assert "delay [ms]" in text and "0.1200" in text and "0.4000" in text
    with pytest.raises(ValueError, match="no finished point"):
        sync_table(open_run(new_store(tmp_path / "e.zarr", [f]).path), 0)


def test_harmonic_energy(tmp_path):
    s = new_store(tmp_path / "h.zarr", [17.0], orders=(1, 3))
    r = make_record(17.0, (1, 3), seed=1)
    r.interface_displacement = np.array([[3.0, 1.0j], [1.0, 0.0]])
    r.excluded_energy_fraction = np.array([0.01, 0.02])
    s.write_point(0, r)
    e = harmonic_energy(open_run(tmp_path / "h.zarr"))
    np.testing.assert_allclose(e["higher_solved"].values[0], [0.1, 0.0])
    np.testing.assert_allclose(e["excluded"].values[0], [0.01, 0.02])


# ---------------------------------------------------------------------------------------
# plots


def _is_png(p: Path) -> bool:
    return p.is_file() and p.stat().st_size > 2000 and p.read_bytes()[:8] == PNG


def test_bode_and_convergence_pngs(run31, updown, tmp_path):
    path, _ = run31
    p = bode_png(path)
    assert p == default_png_path(path, "bode") == path.with_name("paper-bode.png") and _is_png(p)
    q = convergence_png(updown, tmp_path / "sub" / "conv.png")
    assert q == tmp_path / "sub" / "conv.png" and _is_png(q)
    assert _is_png(bode_png(updown, tmp_path / "ud.png"))
    # an empty store still plots
    empty = new_store(tmp_path / "empty.zarr", [17.0, 18.0])
    assert _is_png(bode_png(empty.path)) and _is_png(convergence_png(empty.path))


def test_plot_cli(run31, tmp_path, capsys):
    path, _ = run31
    out = tmp_path / "figs"
    assert cli_main(["plot", str(path), "--out", str(out), "--kind", "all", "--sync", "15"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == str(out / "paper-bode.png") and lines[1] == str(out / "paper-convergence.png")
    assert all(_is_png(Path(x)) for x in lines[:2])
    assert any("delay [ms]" in x for x in lines[2:])
    assert cli_main(["plot", str(tmp_path / "missing.zarr")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.zarr" in err[0] and "not found" in err[0]


def test_sync_table_text_and_the_plot_command_prints_it(run31, capsys):
    from hbtest.analysis.frf import format_sync_table, sync_table

    path, _ = run31
    text = format_sync_table(sync_table(open_run(path), 0, harmonics=[1]))
    assert text.count("\n") == 2 and " u " in text and " theta " in text
    assert cli_main(["plot", str(path), "--sync", "0"]) == 0
    assert text in capsys.readouterr().out


def test_plot_unwritable_output(run31, tmp_path):
    path, _ = run31
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="file"):
        bode_png(path, blocker / "b.png")


# ---------------------------------------------------------------------------------------
# export


@pytest.mark.parametrize("split", [False, True])
def test_netcdf_round_trip(run31, tmp_path, split):
    path, _ = run31
    out = to_netcdf(path, tmp_path / "run.nc", split_complex=split)
    assert out == tmp_path / "run.nc" and out.is_file()
    back = open_netcdf(out)
    orig = open_run(path).load()
    assert set(back.data_vars) == set(orig.data_vars)
    for name in orig.variables:
        a, b = orig[name].values, back[name].values
        if a.dtype.kind in "TUO":
            assert [str(x) for x in np.ravel(a)] == [str(x) for x in np.ravel(b)], name
        else:
            assert a.dtype == b.dtype, name
            np.testing.assert_array_equal(a, b, err_msg=name)
        assert back[name].dims == orig[name].dims
    assert back.attrs["versions"] == orig.attrs["versions"]
    assert back.attrs["sweep_text"] == orig.attrs["sweep_text"] and back.attrs["status"] == "completed"
    assert list(back.attrs["overrides"]) == orig.attrs["overrides"]
    if split:
        import h5py

        with h5py.File(out) as h:
            assert "interface_displacement_real" in h and "interface_displacement" not in h


def test_uff_rotation_direction_is_the_right_handed_axis_of_a_positive_slope():
    """θ = du/dx with x along the beam and u along +Z: the small rotation vector ω that turns
    the axis x̂ into x̂ + θ ẑ solves ω × x̂ = θ ẑ, i.e. ω = −θ ŷ — UFF 58 direction −5 (−Y
    rotation) for a positive θ/F, not +5."""
    theta = 1e-3
    omega = -theta * np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(np.cross(omega, [1.0, 0.0, 0.0]), [0.0, 0.0, theta])
    codes = {(+1, "Y"): 5, (-1, "Y"): -5}  # UFF 58 record 6 field 7: rotations 4..6, negative axes -4..-6
    assert codes[(int(np.sign(omega[1])), "Y")] == -5


def test_uff_readable_by_pyuff(run31, updown, tmp_path):
    pyuff = pytest.importorskip("pyuff")
    path, recs = run31
    out = to_uff(path, tmp_path / "run.uff")
    sets = pyuff.UFF(str(out)).read_sets()
    sets = sets if isinstance(sets, list) else [sets]
    assert len(sets) == 4  # measured u, theta; reference u, theta
    ds = open_run(path)
    conv = ds["converged"].values & ds["done"].values
    for st, (src, j) in zip(sets, [("measured", 0), ("measured", 1), ("reference", 0), ("reference", 1)]):
        assert st["type"] == 58 and st["func_type"] == 4
        assert st["rsp_dir"] == (3 if j == 0 else -5) and st["ref_dir"] == 3
        mask = conv if src == "measured" else ds["done"].values
        np.testing.assert_allclose(st["x"], GRID[mask], rtol=1e-5)
        np.testing.assert_allclose(st["data"], frf(ds, src).values[mask, j], rtol=1e-10)
    # up-down: one record per leg, monotone abscissa
    sets = pyuff.UFF(str(to_uff(updown, tmp_path / "ud.uff", include_reference=False))).read_sets()
    sets = sets if isinstance(sets, list) else [sets]
    assert len(sets) == 4 and all(np.all(np.diff(s["x"]) > 0) for s in sets)


def test_uff_without_pyuff_says_how_to_install(run31, tmp_path, monkeypatch):
    path, _ = run31
    monkeypatch.setitem(sys.modules, "pyuff", None)
    with pytest.raises(UserError, match=r"pip install hbtest\[uff\]"):
        to_uff(path, tmp_path / "x.uff")


def test_export_cli_and_errors(run31, tmp_path, capsys):
    path, _ = run31
    assert cli_main(["export", str(path), "--netcdf", str(tmp_path / "a.nc")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "a.nc")
    assert cli_main(["export", str(tmp_path / "nope.zarr"), "--netcdf", str(tmp_path / "b.nc")]) == 2
    assert "nope.zarr" in capsys.readouterr().err
    notastore = tmp_path / "plain"
    notastore.mkdir()
    assert cli_main(["export", str(notastore), "--netcdf", str(tmp_path / "b.nc")]) == 2
    assert "not an hbtest run store" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="file"):
        to_netcdf(path, blocker / "x.nc")
    with pytest.raises(UserError, match="is a directory"):
        to_netcdf(path, tmp_path)
    assert cli_main(["export", str(path)]) == 2
    assert "--netcdf" in capsys.readouterr().err


def test_bode_band_is_two_standard_uncertainties(run31):
    """The shaded band around the measured magnitude spans |H| +- 2 u_|H| of
    frf_uncertainty, and the legend says what it is."""
    from matplotlib.collections import PolyCollection

    from hbtest.analysis.frf import frf_uncertainty
    from hbtest.analysis.plot import BAND_FACTOR, bode_figure

    ds = open_run(run31[0]).load()
    unc = frf_uncertainty(ds)
    fig = bode_figure(ds)
    ax = fig.axes[0]  # |u/F|
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 1
    conv = ds["converged"].values & ds["done"].values
    mag = np.abs(unc["H"].sel(dof="u").values[conv])
    um = unc["u_magnitude"].sel(dof="u").values[conv]
    assert np.all(um > 0)
    y = bands[0].get_paths()[0].vertices[:, 1]
    assert y.max() == pytest.approx(np.max(mag + BAND_FACTOR * um), rel=1e-9)
    assert y.min() == pytest.approx(np.min(mag - BAND_FACTOR * um), rel=1e-9)
    (legend,) = fig.legends  # the figure's, beneath the panels: it covers no measured point
    labels = [t.get_text() for t in legend.get_texts()]
    assert any(lab.startswith(f"±{BAND_FACTOR:g}σ band") for lab in labels)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    box = legend.get_window_extent(renderer)
    assert not any(box.overlaps(a.get_window_extent(renderer)) for a in fig.axes)


def test_the_dense_exact_curve_is_the_stored_reference_at_the_points_and_peaks_between_them(tmp_path):
    """The Bode plot's exact curve (the twin's closed form rebuilt from the store's texts) equals
    the reference the sweep stored at every point (the same closed form: to rounding), and on a
    grid of 18 and 19 Hz around mode 2 (18.53 Hz) it finds a peak higher than either point's."""
    from hbtest.analysis.frf import dense_exact_frf, exact_frf, frf
    from hbtest.config import load_sweep
    from hbtest.sweep.runner import run

    over = ["sweep.start_hz=18.0", "sweep.stop_hz=19.0", "sweep.points=2"]
    ds = run(load_sweep(Path(__file__).resolve().parents[1] / "sweeps" / "paper-cantilever.toml", over), tmp_path / "c.zarr", plot=False,
             overrides=over).load()
    at_points = exact_frf(ds, ds.frequency.values)
    np.testing.assert_allclose(at_points, frf(ds, "reference").values, rtol=1e-12)
    f, H = dense_exact_frf(ds)
    assert f[0] == 18.0 and f[-1] == 19.0 and H.shape == (f.size, 2)
    assert np.abs(H[:, 0]).max() > 1.5 * np.abs(at_points[:, 0]).max()  # mode 2 at 18.53 Hz: between the two points

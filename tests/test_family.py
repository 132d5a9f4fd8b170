"""Stepped-force families (``sweep.force_levels``): configuration, the store's layout, the
backbone's peak interpolation, and a family on the twin with a linear structure — every
level's receptance the same to the noise, the backbone vertical at the emulated structure's
exact resonance — its resume across a level boundary, its plot and report."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.optimize
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.cli import main
from hbtest.config import load_rig, load_sweep
from hbtest.errors import ConfigError
from hbtest.analysis.backbone import backbone, has_levels, peak_parabola
from hbtest.sweep.stepped import slot_amplitudes, slot_legs, slot_levels
from hbtest.analysis.frf import frf, frf_uncertainty
from hbtest.rig import open_rig
from hbtest.store import RunStore
from hbtest.sweep.runner import resume, run

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
PAPER = SWEEPS / "paper-cantilever.toml"
LEVELS = [0.01, 0.02, 0.03]
GRID = ["sweep.start_hz=18.3", "sweep.stop_hz=18.8", "sweep.points=6"]
# the harsh-mains twin: at 10 mN the lab-calibrated twin's noise leaves the hbtest profile short of some points
FAMILY = GRID + [f"sweep.force_levels={LEVELS}", "rig=../instruments/virtual-cantilever-harsh-mains.toml"]
#: the backbone's peak frequency against the exact resonance: a tenth of the 0.1 Hz grid step
#: (the parabola through three points of a 0.3 Hz wide resonance is biased by ~5 mHz; noise 2 mHz)
PEAK_TOLERANCE_HZ = 0.01


def exact_resonance(cfg, lo, hi) -> float:
    """Frequency of the largest |u_1| of the twin's emulated (joined, linear) structure, by a
    bounded scalar search on its exact response (independent of the sweep's grid)."""
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides))
    try:
        ns = cfg.numerical.numerical_substructure()
        F = cfg.excitation.force_vector(ns)
        r = scipy.optimize.minimize_scalar(lambda f: -abs(rig.emulated_interface_response(ns.substructure, F, f, np.array([1]))[0, 0]),
                                           bounds=(lo, hi), method="bounded", options=dict(xatol=1e-7))
        return float(r.x)
    finally:
        rig.close()


# ---------------------------------------------------------------------------------------
# configuration and layout


def test_force_levels_tile_the_grid_in_test_order_with_legs_and_amplitudes():
    cfg = load_sweep(PAPER, GRID + ["sweep.direction='up-down'", "sweep.force_levels=[0.01, 0.03]"])
    g = cfg.sweep.grid_hz
    assert g.size == 11  # up-down over 6 points
    np.testing.assert_array_equal(cfg.sweep.frequencies_hz, np.concatenate([g, g]))
    np.testing.assert_array_equal(slot_levels(cfg.sweep), np.repeat([0, 1], 11))
    np.testing.assert_array_equal(slot_amplitudes(cfg.sweep, cfg.excitation.amplitude), np.repeat([0.01, 0.03], 11))
    # two legs per level (up, down), numbered on across the levels
    np.testing.assert_array_equal(slot_legs(cfg.sweep), np.repeat([0, 1, 2, 3], [6, 5, 6, 5]))
    plain = load_sweep(PAPER, GRID)
    np.testing.assert_array_equal(slot_amplitudes(plain.sweep, plain.excitation.amplitude), np.full(6, plain.excitation.amplitude))


@pytest.mark.parametrize("bad, key", [("sweep.force_levels=[0.01, 0.01]", "force_levels"), ("sweep.force_levels=[0.01, -0.02]", "force_levels"),
                                      ("sweep.max_harmonic=3", "max_harmonic")])
def test_bad_family_fields_name_the_key(bad, key):
    with pytest.raises(ConfigError, match=key):
        load_sweep(PAPER, [bad])


# ---------------------------------------------------------------------------------------
# peak interpolation


@settings(max_examples=60, deadline=None)
@given(f0=st.floats(10.0, 30.0), c=st.floats(0.1, 10.0), a0=st.floats(1.0, 5.0), h=st.floats(0.01, 0.5), shift=st.floats(-0.49, 0.49))
def test_peak_parabola_recovers_the_vertex_of_a_sampled_parabola(f0, c, a0, h, shift):
    f = f0 + h * (np.arange(-3, 4) + shift)
    a = a0 - c * (f - f0) ** 2
    fp, ap, inner = peak_parabola(f, a)
    assert inner
    assert fp == pytest.approx(f0, abs=1e-9 * max(1.0, f0) / min(1.0, c * h * h) + 1e-9)
    assert ap == pytest.approx(a0, rel=1e-9)


def test_peak_parabola_at_the_band_edge_takes_the_highest_point():
    f = np.array([1.0, 2.0, 3.0, 4.0])
    fp, ap, inner = peak_parabola(f, f**2)  # still rising at the top: no interior peak
    assert (fp, ap, inner) == (4.0, 16.0, False)
    with pytest.raises(ValueError):
        peak_parabola(f[:2], f[:2])


# ---------------------------------------------------------------------------------------
# a linear family on the twin


@pytest.fixture(scope="module")
def linear_family(tmp_path_factory):
    path = tmp_path_factory.mktemp("family") / "lin.zarr"
    cfg = load_sweep(PAPER, FAMILY)
    ds = run(cfg, path, plot=True, overrides=FAMILY).load()
    return cfg, path, ds


def test_linear_family_store_layout(linear_family):
    cfg, path, ds = linear_family
    assert has_levels(ds)
    assert bool(ds.converged.all()) and ds.sizes["frequency"] == 18
    np.testing.assert_array_equal(ds.force_level.values, np.repeat(LEVELS, 6))
    np.testing.assert_array_equal(ds.leg.values, np.repeat([0, 1, 2], 6))
    np.testing.assert_allclose(np.abs(ds.external_force.sel(harmonic=1).values), np.repeat(LEVELS, 6), rtol=1e-12)
    assert path.with_name("lin-family.png").is_file() and path.with_name("lin-bode.png").is_file()


def test_linear_family_receptances_coincide_to_the_noise(linear_family):
    """u/F of every level at every grid point: the same to within 4 combined standard
    uncertainties (measured noise + final residual), and each within 2 % of the exact one
    (1 % at the paper's 0.03 N: the lower levels have the same noise on a smaller motion)."""
    _, _, ds = linear_family
    H = frf(ds, "measured").sel(dof="u").values.reshape(3, 6)
    Href = frf(ds, "reference").sel(dof="u").values.reshape(3, 6)
    u = frf_uncertainty(ds)["u_magnitude"].sel(dof="u").values.reshape(3, 6)
    np.testing.assert_allclose(Href, np.broadcast_to(Href[0], Href.shape), rtol=1e-12)  # the exact receptance does not depend on F
    assert np.all(np.abs(H - Href) < 0.02 * np.abs(Href))
    assert np.all(np.abs(H[2] - Href[2]) < 0.01 * np.abs(Href[2]))
    for a in range(3):
        for b in range(a + 1, 3):
            assert np.all(np.abs(np.abs(H[a]) - np.abs(H[b])) < 4 * np.hypot(u[a], u[b])), (a, b)


def test_linear_backbone_is_vertical_at_the_exact_resonance(linear_family):
    cfg, _, ds = linear_family
    bb = backbone(ds)
    f_exact = exact_resonance(cfg, 18.3, 18.8)
    np.testing.assert_array_equal(bb.force_n, LEVELS)
    assert bb.interior.all() and (bb.n_points == 6).all()
    assert np.all(np.abs(bb.frequency_hz - f_exact) < PEAK_TOLERANCE_HZ), (bb.frequency_hz, f_exact)
    assert np.ptp(bb.frequency_hz) < PEAK_TOLERANCE_HZ / 2  # vertical: the peak does not move with F
    np.testing.assert_allclose(bb.amplitude / bb.force_n, bb.amplitude[0] / bb.force_n[0], rtol=0.01)  # amplitude ∝ F


def test_report_cli_text_and_json(linear_family, capsys):
    import json

    _, path, _ = linear_family
    assert main(["report", str(path), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["converged"] == 18 and len(rep["backbone"]["force_n"]) == 3
    assert {r["variable"] for r in rep["sync"]["rows"]} == {"u", "theta", "T", "M"}
    assert main(["report", str(path)]) == 0
    text = capsys.readouterr().out
    assert "sync metrics over 18 converged points" in text and "backbone" in text
    assert main(["report", str(path.with_name("missing.zarr"))]) == 2


def test_plot_cli_draws_the_family(linear_family, tmp_path, capsys):
    _, path, _ = linear_family
    assert main(["plot", str(path), "--out", str(tmp_path)]) == 0
    assert (tmp_path / "lin-family.png").is_file()
    assert "lin-family.png" in capsys.readouterr().out


def test_family_resumes_across_a_level_boundary(tmp_path, linear_family):
    """Interrupted right after the last point of the first level: resume starts the second
    level from the scaled voltages of the first and ends with the same family."""
    _, _, full = linear_family
    over = GRID[:2] + ["sweep.points=3", "sweep.force_levels=[0.01, 0.03]", FAMILY[-1]]  # the harsh-mains twin
    cfg = load_sweep(PAPER, over)
    path = tmp_path / "r.zarr"

    def stop_after_level_0(ev):
        if type(ev).__name__ == "PointFinished" and ev.index == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, path, plot=False, overrides=over, progress=stop_after_level_0)
    assert RunStore.open(path).done().tolist() == [True] * 3 + [False] * 3
    ds = resume(path, plot=False).load()
    assert bool(ds.done.all()) and bool(ds.converged.all()) and ds.attrs["status"] == "completed"
    np.testing.assert_array_equal(ds.force_level.values, np.repeat([0.01, 0.03], 3))
    H = frf(ds, "measured").sel(dof="u").values
    Href = frf(ds, "reference").sel(dof="u").values
    assert np.all(np.abs(H - Href) < 0.01 * np.abs(Href))

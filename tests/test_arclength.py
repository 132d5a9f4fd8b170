"""Pseudo-arclength continuation of the hybrid test (hbtest.sweep.arclength): the shared
bordered math and the fold interpolant against exact answers, the config keys, the store's
open slots, and the trace on the twin against the joined structure's exact harmonic balance
(sweeps/cubic-interface.toml: a cubic spring at the interface on the numerical side).

The end-to-end acceptance over the whole band (both folds) is in
tests/test_arclength_folds.py (slow); here a short trace below the folds runs in the default
suite, with an interruption and a resume."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.analysis import frf

sys.path.insert(0, str(Path(__file__).parent))

from test_store import make_record, new_store  # noqa: E402

from hbtest.analysis.plot import bode_figure, convergence_png  # noqa: E402
from hbtest.config import load_sweep  # noqa: E402
from hbtest.errors import ConfigError, UserError  # noqa: E402
from hbtest.events import PointFinished  # noqa: E402
from hbtest.numerical.continuation import bordered_step, bordered_tangent  # noqa: E402
from hbtest.store import RunStore, open_run  # noqa: E402
from hbtest.sweep.arclength import CONTINUATIONS, ArclengthSettings, chord_checked_tangent, hermite_extremum  # noqa: E402
from hbtest.sweep.arclength.reference import curve_errors as reference_errors  # noqa: E402
from hbtest.sweep.arclength.reference import nearest_on_curve  # noqa: E402
from hbtest.sweep.arclength.runner import settings_from  # noqa: E402
from hbtest.sweep.arclength.twin import twin_joined  # noqa: E402
from hbtest.sweep.runner import exit_code, resume, run  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CUBIC = REPO / "sweeps" / "cubic-interface.toml"


# -- shared math ----------------------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 3.0), st.floats(-math.pi, math.pi))
def test_bordered_tangent_and_step_on_a_circle(radius, angle):
    """On R(z) = |z|^2 - r^2 the tangent is orthogonal to the gradient, unit, oriented along
    the previous one; a bordered step from a point off the circle lands on it to second
    order (Newton)."""
    z = radius * np.array([math.cos(angle), math.sin(angle)])
    J = 2 * z[None, :]
    prev = np.array([-math.sin(angle), math.cos(angle)]) + 0.3 * np.array([math.cos(angle), math.sin(angle)])
    t = bordered_tangent(J, prev)
    assert abs(np.linalg.norm(t) - 1) < 1e-12 and abs(J @ t)[0] < 1e-9 * radius and t @ prev > 0
    zz = z * 1.01
    dz = bordered_step(2 * zz[None, :], t, np.array([zz @ zz - radius**2]), 0.0)
    assert abs(np.linalg.norm(zz + dz) - radius) < 1e-4 * radius  # from 1e-2 radius off


@settings(max_examples=50, deadline=None)
@given(st.floats(0.01, 1.0), st.floats(0.05, 0.95), st.floats(-2.0, 2.0), st.floats(0.5, 3.0))
def test_hermite_extremum_is_exact_for_a_cubic(ds, x_star, f0, a):
    """For f(s) a cubic with a maximum at s* in (0, ds), the Hermite interpolant through the
    ends and their slopes is f itself: the returned fold frequency is f(s*)."""
    s_star = x_star * ds
    c = 0.2 * a / ds  # f'(s) = a (1 - s/s*) (1 + c s): one root in [0, ds]

    def df(s):
        return a * (1 - s / s_star) * (1 + c * s)

    def f(s):
        return f0 + a * (s + (c - 1 / s_star) * s**2 / 2 - c * s**3 / (3 * s_star))

    assert hermite_extremum(f(0), f(ds), df(0), df(ds), ds) == pytest.approx(f(s_star), rel=1e-9, abs=1e-12)


@settings(max_examples=50, deadline=None)
@given(st.floats(0.1, 3.0), st.floats(-math.pi, math.pi), st.floats(0.01, 0.5), st.floats(0.6, 2.0))
def test_chord_check_keeps_a_curve_tangent_and_replaces_a_bent_one(radius, angle, turn, bend):
    """On a circle, the exact tangent at the end of an arc that turns by ``turn`` (<= 0.5 rad)
    is ``turn / 2`` from the chord: kept under the limit of 0.5 rad; a tangent bent by
    ``bend`` (> the limit) away from the chord is replaced by the unit chord, and the angle it
    had is returned; a chord shorter than ``min_chord`` is not used: the previous tangent is
    the reference then."""
    def on(a):
        return radius * np.array([math.cos(a), math.sin(a)])

    z0, z = on(angle), on(angle + turn)
    t = np.array([-math.sin(angle + turn), math.cos(angle + turn)])
    kept, bent = chord_checked_tangent(z0, z, t, 0.5)
    assert bent is None and kept is t
    chord = (z - z0) / np.linalg.norm(z - z0)
    assert math.acos(np.clip(chord @ t, -1, 1)) == pytest.approx(turn / 2, rel=1e-6, abs=1e-9)
    c, s_ = math.cos(bend), math.sin(bend)
    off = np.array([c * chord[0] - s_ * chord[1], s_ * chord[0] + c * chord[1]])  # the chord turned by bend
    taken, bent = chord_checked_tangent(z0, z, off, 0.5)
    assert bent == pytest.approx(bend, rel=1e-6) and np.allclose(taken, chord, atol=1e-12)
    assert np.linalg.norm(taken) == pytest.approx(1.0, rel=1e-12)
    # a chord shorter than min_chord is no evidence: without the previous tangent the bent
    # one is kept; with it, the previous one replaces a turn beyond the limit, not the curve's
    short = float(np.linalg.norm(z - z0))
    kept, bent = chord_checked_tangent(z0, z, off, 0.5, min_chord=1.01 * short)
    assert bent is None and kept is off
    t_prev = np.array([-math.sin(angle), math.cos(angle)])
    kept, bent = chord_checked_tangent(z0, z, t, 0.5, 1.01 * short, t_prev)
    assert bent is None and kept is t
    taken, bent = chord_checked_tangent(z0, z, off, 0.5, 1.01 * short, t_prev)
    assert np.allclose(taken, t_prev, atol=0) and bent == pytest.approx(math.acos(np.clip(t_prev @ off, -1, 1)), rel=1e-12)


# -- configuration ----------------------------------------------------------------------------

def test_config_default_is_stepped_and_the_cubic_sweep_traces_by_arclength():
    cfg = load_sweep(REPO / "sweeps" / "paper-cantilever.toml")
    assert cfg.sweep.continuation == "stepped" and "stepped" in CONTINUATIONS
    cub = load_sweep(CUBIC)
    assert cub.sweep.continuation == "arclength" and cub.sweep.max_points == 200
    s = settings_from(cub)
    d = ArclengthSettings()
    assert (s.initial_step, s.min_step, s.max_step, s.max_points) == (d.initial_step, d.min_step, d.max_step, 200)


@pytest.mark.parametrize("override, key", [
    ("sweep.continuation=spiral", "sweep.continuation"),
    ("sweep.arclength_step=1.0", "sweep.arclength_step"),
    ("sweep.arclength_min_step=0", "sweep.arclength_min_step"),
    ("sweep.max_points=1", "sweep.max_points"),
    ("sweep.direction=up-down", "sweep.direction"),
])
def test_config_refuses_bad_arclength_keys_naming_file_and_key(override, key):
    with pytest.raises(ConfigError) as err:
        load_sweep(CUBIC, [override])
    assert key in str(err.value) and "cubic-interface.toml" in str(err.value)


# -- store: open slots ------------------------------------------------------------------------

def test_open_slots_take_their_frequency_when_written(tmp_path):
    orders = (1, 3)
    store = new_store(tmp_path / "s.zarr", np.full(4, np.nan), orders)
    assert store.attrs["open_slots"] is True
    store.write_point(0, make_record(18.0, orders, 1))
    store.write_point(1, make_record(17.5, orders, 2))  # a trace may go back in frequency
    ds = open_run(store.path)
    f = ds["frequency"].values
    assert f[0] == 18.0 and f[1] == 17.5 and np.isnan(f[2:]).all()
    assert list(ds["leg"].values) == [0, 0, 0, 0]
    assert RunStore.open(store.path).read_point(1).frequency_hz == 17.5
    store.check_compatible(frequencies_hz=np.full(4, np.nan))  # open slots fit any trace
    with pytest.raises(UserError, match="frequencies differ"):
        store.check_compatible(frequencies_hz=np.full(5, np.nan))
    with pytest.raises(ValueError, match="does not belong"):  # a finished slot keeps its frequency
        store.write_point(1, make_record(17.6, orders, 3))
    # the Bode plot draws an arclength trace in trace order, a grid sorted by frequency
    store.write_point(2, make_record(17.8, orders, 5))

    def drawn(ds):
        fig = bode_figure(ds)
        return next(ln for ln in fig.axes[0].lines if "measured" in str(ln.get_label())).get_xdata()

    np.testing.assert_array_equal(drawn(open_run(store.path)), [17.5, 17.8, 18.0])
    store.set_attrs(continuation="arclength")
    np.testing.assert_array_equal(drawn(open_run(store.path)), [18.0, 17.5, 17.8])
    grid = new_store(tmp_path / "g.zarr", [1.0, 2.0], orders)
    assert grid.attrs["open_slots"] is False
    with pytest.raises(ValueError, match="does not belong"):
        grid.write_point(0, make_record(1.5, orders, 4))


# -- the trace on the twin --------------------------------------------------------------------

def reference(cfg, seed):
    """The exact joined structure of the twin (:func:`twin_joined`)."""
    return twin_joined(cfg, seed)


def curve_errors(ds, cfg, joined, fv):
    """Per traced point, against the nearest exact point (:func:`hbtest.sweep.arclength.reference.curve_errors`)."""
    return reference_errors(ds, cfg.sweep.harmonics, cfg.sweep.stop_hz - cfg.sweep.start_hz, joined, fv)


def test_nearest_on_curve_returns_an_exact_point_near_the_measured_one():
    """From a 1 % perturbed exact state the projection comes back to the exact curve: the
    same-frequency harmonic balance at the frequency it returns."""
    cfg = load_sweep(CUBIC)
    joined, fv = reference(cfg, 1)
    sol = joined.solve(17.0, cfg.sweep.harmonics, force_vector=fv)
    U, f = nearest_on_curve(joined, fv, 17.0, cfg.sweep.harmonics, sol.coefficients[:2] * 1.01, 4.0)
    assert abs(f - 17.0) < 0.05
    at_f = joined.solve(f, cfg.sweep.harmonics, force_vector=fv, start=sol.state)
    np.testing.assert_allclose(U, at_f.coefficients[:2], rtol=0, atol=1e-6 * np.abs(U).max())


def test_short_trace_on_the_twin_converges_matches_the_exact_curve_and_resumes(tmp_path):
    """16.0-16.5 Hz of sweeps/cubic-interface.toml by arclength on the twin, interrupted after
    the third point and resumed: every point converged, the trace continues from the last
    finished point (the finished slots untouched), ends past the band, and every point lies
    within 1 % of the joined structure's exact harmonic balance (harmonics 1 and 3)."""
    # on the harsh-mains twin, where the trace passes 16.5 Hz within 100 slots: the step control
    # follows the noise, and the slots used spread widely (uninterrupted, seeds 1-4: 29, 25, 62,
    # 33; this test's interrupted and resumed seed 1: 35, 32 on OpenBLAS Sandybridge); on the lab-calibrated twin it takes
    # smaller steps and used all 80 at seed 1 (noted, not yet investigated)
    over = ["sweep.stop_hz=16.5", "sweep.max_points=100", "output.plot=false",
            "rig=../instruments/virtual-cantilever-harsh-mains.toml"]
    cfg = load_sweep(CUBIC, over)
    path = tmp_path / "arc.zarr"

    def progress(ev):
        if isinstance(ev, PointFinished) and ev.n == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(cfg, path, progress=progress, seed=1, overrides=over)
    first = open_run(path)
    assert first.attrs["status"] == "interrupted" and first.attrs["continuation"] == "arclength"
    done0 = np.asarray(first["done"].values, dtype=bool)
    assert done0[:3].all() and not done0[3:].any()
    written = first["written_utc"].values[:3].copy()
    ds = resume(path, seed=1, plot=False)
    assert ds.attrs["status"] == "completed" and ds.attrs["trace_finished"] is True
    done = np.asarray(ds["done"].values, dtype=bool)
    n = int(done.sum())
    assert done[:n].all() and not done[n:].any() and 5 <= n < 100
    np.testing.assert_array_equal(ds["written_utc"].values[:3], written)
    assert np.asarray(ds["converged"].values)[:n].all() and exit_code(ds) == 0
    f = ds["frequency"].values[:n]
    # no fold below the folds; the trace ends on its first point past the band's end (16.5 Hz), so
    # f[-1] - 16.5 is a last step's overshoot (the threshold audit's 'spread' of it is no margin)
    assert f[0] == 16.0 and np.all(np.diff(f) > 0) and f[-1] > 16.5
    assert not ds.attrs.get("folds_hz")
    joined, fv = reference(cfg, 1)
    err = curve_errors(ds, cfg, joined, fv)
    assert err[:, :2].max() < 0.01, err
    # the stored reference is on the traced branch (Newton from the measured state at the
    # point's frequency): far from folds it is the same-frequency exact point, within 1 %
    rel = np.abs(frf.relative_error(ds).values[:n])
    assert np.all(np.isfinite(rel)) and rel.max() < 0.01, rel
    # readers cope with the open slots: the plots draw the traced points only, in trace order
    fig = bode_figure(ds)
    line = next(ln for ln in fig.axes[0].lines if "measured" in str(ln.get_label()))
    np.testing.assert_array_equal(line.get_xdata(), f)
    assert convergence_png(path).is_file()

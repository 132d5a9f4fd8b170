"""The twin's demand scatter (``[virtual.demand_scatter]``, hbtest.rig.virtual.scatter).

Evidence: exact equality with a twin without it driven at the offset demand (the offset is the
only difference, and its random stream leaves the sensor noise alone); the offsets' statistics
against the model (s.d. per coefficient, lag-1 correlation) over many changes; the rules
(unchanged demand keeps its offset, zero demand gets none, the limit is never passed).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hbtest.config import load_rig
from hbtest.errors import ConfigError
from hbtest.rig.virtual.rig import VirtualRig
from hbtest.rig.virtual.scatter import DemandScatter, DemandScatterSpec

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
SCATTER = ["virtual.demand_scatter.sd_v=[0.01, 0.004]", "virtual.demand_scatter.correlation=0.3"]


def test_the_offset_is_the_only_difference():
    """A twin with the scatter driven at V records exactly what the same twin without it
    records when driven at V plus the offset an identical DemandScatter draws."""
    with_s = VirtualRig(load_rig(RIG, SCATTER), seed=3)
    plain = VirtualRig(load_rig(RIG, ["virtual.demand_scatter.sd_v=[0, 0]"]), seed=3)
    twin_scatter = DemandScatter(DemandScatterSpec((0.01, 0.004), 0.3), 3)
    for k, f in enumerate((17.0, 17.0, 17.5)):
        V = np.array([[0.8 + 0.3j * k], [0.2 - 0.1j]])
        with_s.set_demand(f, V, [1])
        plain.set_demand(f, twin_scatter.applied(f, V, np.array([1]), 5.0), [1])
        a, b = with_s.acquire(3), plain.acquire(3)
        for ch in a.data:
            np.testing.assert_array_equal(a.data[ch], b.data[ch])
        np.testing.assert_array_equal(with_s.demand.voltage, V)  # the rig reports what was commanded


def test_offsets_have_the_stated_spread_and_memory():
    sd, rho = np.array([0.02, 0.005]), 0.3
    s = DemandScatter(DemandScatterSpec(tuple(sd), rho), 11)
    V, orders = np.array([[1.0 + 0j], [0.5 + 0j]]), np.array([1])
    d = []
    for k in range(4000):
        d.append(s.applied(17.0 + 1e-4 * k, V, orders, 5.0)[:, 0] - V[:, 0])
    d = np.array(d)
    parts = np.concatenate([d.real, d.imag])  # 8000 draws per actuator
    # the s.d. of a sample s.d. of n = 8000 correlated (rho 0.3) draws is ~1.1 % : 5 % is 4.5 of them
    np.testing.assert_allclose(parts.std(axis=0), sd, rtol=0.05)
    lag1 = np.mean(d.real[1:] * d.real[:-1], axis=0) / np.var(d.real, axis=0)
    np.testing.assert_allclose(lag1, rho, atol=0.07)  # s.d. of the estimate ~0.016


def test_unchanged_demand_keeps_its_offset_and_quiet_stays_quiet():
    s = DemandScatter(DemandScatterSpec((0.01, 0.01), 0.0), 5)
    orders = np.array([1, 3])
    V = np.array([[1.0, 0.1j], [0.5, 0.0]])
    a = s.applied(17.0, V, orders, 5.0)
    np.testing.assert_array_equal(s.applied(17.0, V.copy(), orders, 5.0), a)
    np.testing.assert_array_equal(a[:, 1], V[:, 1])  # the fundamental only
    assert not np.array_equal(s.applied(17.1, V, orders, 5.0), a)  # a new frequency is a change
    zero = np.zeros_like(V)
    np.testing.assert_array_equal(s.applied(17.0, zero, orders, 5.0), zero)
    at_limit = np.array([[4.9999 + 0j, 0], [0.1, 0]])
    for k in range(50):  # never beyond the limit: the offset is dropped there
        out = s.applied(17.0 + k, at_limit, orders, 5.0)
        assert np.max(np.sum(np.abs(out), axis=1)) <= 5.0


@pytest.mark.parametrize(
    "override, key",
    [
        ("virtual.demand_scatter.sd_v=[0.01]", "virtual.demand_scatter.sd_v"),
        ("virtual.demand_scatter.sd_v=[0.01, -1]", "virtual.demand_scatter.sd_v"),
        ("virtual.demand_scatter.sd_v=[2, 0]", "virtual.demand_scatter.sd_v"),
        ("virtual.demand_scatter.correlation=1", "virtual.demand_scatter.correlation"),
        ("virtual.demand_scatter.sdv=1", "virtual.demand_scatter"),
    ],
)
def test_bad_scatter_keys_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_rig(RIG, ["virtual.demand_scatter.sd_v=[0.01, 0.01]", override])


def test_the_reference_twin_carries_the_lab_scatter_and_zero_or_absent_is_none():
    assert load_rig(RIG).spec.demand_scatter == DemandScatterSpec((3e-4, 3e-4), 0.25)
    assert load_rig(RIG, ["virtual.demand_scatter.sd_v=[0, 0]"]).spec.demand_scatter is None
    assert load_rig(ROOT / "instruments" / "virtual-cantilever-harsh-mains.toml").spec.demand_scatter is None


@pytest.mark.slow
def test_published_profile_iterates_as_in_the_lab_on_the_scattering_twin(monkeypatch):
    """On the reference twin, with the lab-fitted scatter, the published profile converges in a
    median number of evaluations within a factor 2 of the lab's (seed 1: 7 against 11; seeds 1-4
    of the benchmark: 7, 9, 7, 9, README "Two solver profiles"; without the scatter: 4, 0.36x).
    It converges at 28/31 points here: seed 1 clips its sensors at 18.5-18.7 Hz, right after
    the resonance (seeds 2-4: 31, 30, 30) — short of the 30/31 we aim at."""
    import importlib.util
    import json

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # twin_vs_lab imports rig_time
    spec = importlib.util.spec_from_file_location("twin_vs_lab", ROOT / "benchmarks" / "twin_vs_lab.py")
    b = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(b)
    lab = json.loads(b.ITERATIONS.read_text())
    t = b.twin_iterations(RIG, 1, lab["affine"]["demand_spread_v_median"])
    assert t["converged"] >= 28
    ratio = t["evaluations_median_all_points"] / lab["evaluations_median_all_points"]
    assert 0.5 <= ratio <= 2.0, ratio


def _paper_on_the_scattering_twin(monkeypatch, points: int, seed: int):
    """The hbtest profile's paper sweep (``points`` points) on the reference twin (the lab's
    scatter in it), as ``benchmarks/rig_time.py`` runs it: (outcomes, max FRF error, calibration)."""
    import importlib.util

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("rig_time", ROOT / "benchmarks" / "rig_time.py")
    rt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rt)
    cfg, _, outs, refs, _, _ = rt.run_profile(ROOT / "sweeps" / "paper-cantilever.toml", "hbtest", points, seed)
    return outs, rt.frf_error(cfg, outs, refs), rt.uncertainty_calibration(cfg, outs, refs)


def test_hbtest_profile_converges_on_the_scattering_twin_within_its_accuracy(monkeypatch):
    """With the lab's scatter every point of a 7-point paper sweep converges within 1 % of the
    exact structure, and the errors are of the size the points state (rms over stated 0.4-1.6:
    a scatter counted in full would state 2-5x the error; seeds 1-4 of both benchmark sweeps:
    docs/profiles.md). What the between-evaluation variance does to one pool is tested on exact
    data in tests/test_pool_scatter.py. Whether points stall without it is not a property of the
    sweep: without it 8 of 28 points stalled over seeds 1-4 (AVX-512 numpy), none of 7 at seed 1
    on AVX2 numpy and none of 21 over seeds 1001-1003 (the threshold audit's seed shift), so the
    counterfactual is not asserted here."""
    outs, frf, calibration = _paper_on_the_scattering_twin(monkeypatch, 7, 1)
    assert all(o.converged for o in outs), [o.message for o in outs if not o.converged]
    assert frf <= 0.01
    assert 0.4 <= calibration <= 1.6, calibration


@pytest.mark.slow
def test_a_scattering_point_keeps_averaging_instead_of_stalling(tmp_path):
    """Mode 3's sweep across the mains (sweeps/paper-mode3-mains.toml) with the lab's scatter: the
    point moved off 50 Hz needs ~16 evaluations, its pooled noise falling as 1 / sqrt(evaluations),
    slower than ``progress_fraction`` asks of three; counted as progress where the evaluations
    scatter, every point converges (before: that point stalled after 26 iterations "at its noise
    floor")."""
    from hbtest.config import load_sweep
    from hbtest.sweep.runner import run

    lab = load_rig(RIG).spec.demand_scatter  # the reference twin's, on this sweep's harsh-mains twin
    scatter = [f"virtual.demand_scatter.sd_v={list(lab.sd)}", f"virtual.demand_scatter.correlation={lab.rho}"]
    cfg = load_sweep(ROOT / "sweeps" / "paper-mode3-mains.toml", [f"rig_set={scatter!r}"])
    ds = run(cfg, tmp_path / "m.zarr", plot=False)
    assert bool(np.all(ds["converged"].values)), ds["message"].values

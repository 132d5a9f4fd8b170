"""Solver profiles: the published profile reproduces the authors' ``BroydenMethod.m`` rule by
rule (on an exactly linear stand-in loop whose answers are known), and on the twin; the rig-time
breakdown of a point adds up."""

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hbtest.config import load_rig, load_sweep
from hbtest.point import HbtestCarry, PointLoop, PointSettings, PublishedCarry, PublishedProfile, get_profile
from hbtest.rig import open_rig

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
#: no noise, no mains and no demand scatter (its offsets make the applied demand differ from
#: the commanded one the exact steady states are computed at)
QUIET_RIG = [
    "rig_set=['virtual.noise.laser_rms_um=0.0', 'virtual.noise.gauge_rms_microstrain=0.0', 'virtual.mains.amplitude_microstrain=0.0', "
    "'virtual.demand_scatter.sd_v=[0, 0]']",
]


class LinearLoop:
    """A stand-in for :class:`PointLoop` with an exactly linear rig: the residual in the
    published profile's transducer basis at voltages V is ``A V + c - F_e`` [N]. Records every
    evaluation (V, kind)."""

    def __init__(self, A, c, F_e, max_iterations=100, jitter=0.0):
        self.A, self.c, self.jitter = A, c, jitter
        self.num = SimpleNamespace(F_e=F_e, frequency_hz=1.0)
        self.n_act, self.p = 2, A.shape[1] // 2
        self.s = SimpleNamespace(max_iterations=max_iterations, rotation_length=0.1)
        self.calls = []

    def force_residual(self, num, meas):
        """The packed (T, M / rotation_length) residual whose transducer forces
        ``[T + M / l; -M / l]`` are ``force - F_e``."""
        R = np.asarray(meas.force, dtype=float).reshape(-1) - num.F_e
        front, back = R[: self.p], R[self.p :]
        return np.concatenate([front + back, -back * PublishedProfile.transducer_spacing_m / self.s.rotation_length])

    def evaluate(self, num, V, transient_tol=None, kind="iteration"):
        V = np.asarray(V, float).copy()
        self.calls.append((V, kind))
        wobble = self.jitter * np.sin(len(self.calls) + np.arange(V.size))  # deterministic "noise"
        return SimpleNamespace(V=V, meas=SimpleNamespace(force=self.A @ V + self.c + wobble), overrange=(), kind=kind)

    def start_voltage(self, carry):
        return carry.solutions[-1][1].copy() if carry.solutions else np.zeros(self.A.shape[1])

    def result(self, e, converged, iterations, reason):
        return SimpleNamespace(final=e, converged=converged, iterations=iterations, reason=reason)


def _linear(seed=0, n=4):
    rng = np.random.default_rng(seed)
    A = -0.1 * (np.eye(n) + 0.1 * rng.normal(size=(n, n)))  # N/V, near the scaled identity's sign
    F_e = np.r_[0.05, np.zeros(n - 1)]
    return A, np.zeros(n), F_e


def test_published_defaults_are_the_authors_lab_settings():
    p = PublishedProfile()
    assert p.name == "published" and isinstance(get_profile("published"), PublishedProfile)
    assert p.tolerance_n == 0.0016 and p.max_change_rate == 1.0 and p.line_search is False
    assert (p.read_periods, p.min_reads, p.settle_change_n) == (10, 30, 0.0013)  # 1.3 mN: the lab's settle traces
    assert (p.read_pause_s, p.transducer_spacing_m) == (0.625, 0.1116)
    assert p.line_search_fractions == (1 / 3, 2 / 3, 1.0)
    # the re-measure rule of the lab files holding most points (tests/data/lab_iteration_stats.json,
    # written by scripts/lab_iteration_stats.py from the replay of the lab's steps)
    rule = json.loads((ROOT / "tests" / "data" / "lab_iteration_stats.json").read_text())["remeasure"]["majority"]
    assert (p.remeasure_every, p.remeasure_if_rose) == (rule["every"], rule["if_rose"]) == (15, False)
    assert 2 * rule["points"] > rule["later_points"]
    assert (p.fd_min_step_v, p.fd_relative_step) == (0.05, 0.15) and p.iteration_count_offset == 1
    # their read loop: 10-period reads, at least 30, settled below 1.3 mN of change, mains kept
    r = p.window_rule(None)
    assert not r.reject_mains and not r.fit_transient
    assert r.initial_window() == r.next_window(10, 1.0, 1.0) == 10 and r.min_windows == 30
    assert r.settle_on_force and r.max_windows() == 100
    assert r.settled(0.00129, None, 1.0, 1.0) and not r.settled(0.0013, None, 0.0, 1.0)
    assert r.gap_periods(16.0) == pytest.approx(0.0) and r.gap_periods(18.5) == 2.0


def test_first_point_starts_from_zero_with_a_half_volt_step_and_no_measurement_at_zero():
    A, c, F_e = _linear()
    loop = LinearLoop(A, c, F_e)
    carry = PublishedCarry()
    out = PublishedProfile().run(loop, loop.num, carry, [])
    V1, kind = loop.calls[0]
    np.testing.assert_allclose(V1, [-0.5, 0, 0, 0])  # -0.5 V on the forcing coefficient
    assert kind == "iteration"
    assert out.converged and out.reason == "converged"
    R = A @ out.final.V + c - F_e
    assert np.linalg.norm(R) <= 0.0016
    # iterations as the paper counts them: steps + 1
    assert out.iterations == len(loop.calls) + 1


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_every_step_is_at_most_the_first_step_of_the_point(seed):
    A, c, F_e = _linear(seed)
    loop = LinearLoop(A, c, F_e)
    PublishedProfile().run(loop, loop.num, PublishedCarry(), [])
    Vs = [np.zeros(4)] + [v for v, _ in loop.calls]
    steps = np.linalg.norm(np.diff(Vs, axis=0), axis=1)
    assert steps[0] == pytest.approx(0.5)
    assert np.all(steps <= 0.5 * (1 + 1e-12))


@given(seed=st.integers(0, 1000), scale=st.floats(0.01, 100))
def test_step_limit_scales_to_the_first_step_norm_keeping_direction(seed, scale):
    rng = np.random.default_rng(seed)
    dX0, dX = rng.normal(size=4), scale * rng.normal(size=4)
    out = PublishedProfile().limited(dX, dX0)
    assert np.linalg.norm(out) <= np.linalg.norm(dX0) * (1 + 1e-12)
    assert np.allclose(out / np.linalg.norm(out), dX / np.linalg.norm(dX))
    if np.linalg.norm(dX) <= np.linalg.norm(dX0):
        assert np.array_equal(out, dX)


def test_line_search_when_on_fires_at_steps_1_11_21_and_remeasures_at_the_best():
    class WithLineSearch(PublishedProfile):  # a variant is a subclass
        line_search = True
        tolerance_n = 1e-12  # never converge: run the full step budget

    A, c, F_e = _linear(3)
    loop = LinearLoop(A, c, F_e, max_iterations=25, jitter=1e-3)
    WithLineSearch().run(loop, loop.num, PublishedCarry(), [])
    kinds = [k for _, k in loop.calls]
    # at step 1, 11, 21: three trials then the step; other steps: the step alone
    assert kinds[:4] == ["line_search"] * 3 + ["iteration"]
    steps = [i for i, k in enumerate(kinds) if k == "iteration"]
    searched = [n + 1 for n, i in enumerate(steps) if i >= 3 and kinds[i - 1] == "line_search"]
    assert searched == [1, 11, 21]
    # the trials are 1/3, 2/3, 1 of one step from the same voltages; the step lands on the best
    (t1, _), (t2, _), (t3, _), (v, _) = loop.calls[:4]
    np.testing.assert_allclose(t2, 2 * t1, atol=1e-12)  # from X0 = 0
    np.testing.assert_allclose(t3, 3 * t1, atol=1e-12)
    norms = [np.linalg.norm(A @ t + c + 1e-3 * np.sin(i + 1 + np.arange(4)) - F_e)  # the transducer-basis residual
             for i, t in enumerate((t1, t2, t3))]
    np.testing.assert_allclose(v, (t1, t2, t3)[int(np.argmin(norms))])


def test_finite_difference_remeasure_uses_their_steps_and_inverts_the_exact_jacobian():
    A, c, F_e = _linear(5)
    loop = LinearLoop(A, c, F_e)
    p = PublishedProfile()
    X = np.array([1.0, -2.0, 0.1, 0.0])
    np.testing.assert_allclose(p.fd_steps(X), [0.15, 0.05, 0.05, 0.05])
    e = loop.evaluate(loop.num, X)
    history = []
    H = p.remeasure(loop, loop.num, e, A @ X + c - F_e, history)
    np.testing.assert_allclose(H, np.linalg.inv(A), rtol=1e-9)
    assert [h.kind for h in history] == ["finite_difference"] * 4
    np.testing.assert_allclose([np.max(h.V - X) for h in history], p.fd_steps(X))


class _Released(PublishedProfile):
    """The released file's rule: every 20th step, when the residual rose above 2 x tolerance."""

    remeasure_every = 20
    remeasure_if_rose = True


@pytest.mark.parametrize("profile, rise_at, first_fd, count", [
    (PublishedProfile, None, 14, 4),   # the lab's majority: right after the 14th step, risen or not
    (_Released, 19, 19, 4),            # released: after the 19th step, which raised the residual
    (_Released, None, None, 0),        # released, nothing rose: never
])
def test_finite_difference_remeasure_replaces_the_update_at_its_step(profile, rise_at, first_fd, count):
    # step counts start at 1, so the n-th multiple follows the (n-1)-th step
    A, c, F_e = _linear(7)

    class Rising(LinearLoop):
        def evaluate(self, num, V, transient_tol=None, kind="iteration"):
            e = super().evaluate(num, V, transient_tol, kind)
            if kind == "iteration" and sum(k == "iteration" for _, k in self.calls) == rise_at:
                e.meas.force = e.meas.force + 1.0  # a disturbance: |R| rises
            return e

    class Never(profile):
        tolerance_n = 1e-12

    loop = Rising(A, c, F_e, max_iterations=20, jitter=1e-3)
    Never().run(loop, loop.num, PublishedCarry(), [])
    kinds = [k for _, k in loop.calls]
    assert kinds.count("finite_difference") == count
    if first_fd is not None:
        assert kinds.index("finite_difference") == first_fd


def test_a_clipped_evaluation_stops_the_point_and_updates_nothing():
    """An evaluation with a sensor over range (a safety stop of ours, not in theirs) ends the
    point as ``overrange`` and leaves the carried inverse Jacobian as the last good evaluation
    left it: the next point does not step with an update from a clipped record, and measures
    its inverse Jacobian afresh at its start."""
    A, c, F_e = _linear(3)

    class Clipping(LinearLoop):
        def evaluate(self, num, V, transient_tol=None, kind="iteration"):
            e = super().evaluate(num, V, transient_tol, kind)
            if kind == "iteration" and sum(k == "iteration" for _, k in self.calls) == 3:
                e.meas.force = e.meas.force + 10.0  # what a clipped record reads
                e.overrange = ("g1",)
            return e

    class Never(PublishedProfile):
        tolerance_n = 1e-12

    loop, clean = Clipping(A, c, F_e, max_iterations=20), LinearLoop(A, c, F_e, max_iterations=2)
    carry, ref = PublishedCarry(), PublishedCarry()
    out = Never().run(loop, loop.num, carry, [])
    Never().run(clean, clean.num, ref, [])  # the same two good steps, then the limit
    assert out.reason == "overrange" and sum(k == "iteration" for _, k in loop.calls) == 3
    np.testing.assert_array_equal(carry.H, ref.H)
    # the next point starts with their finite-difference re-measure of H (the carried one
    # stepped the rig out of range), then steps as usual
    carry.solutions.append((1.0, np.zeros(A.shape[1]), None))
    n = len(loop.calls)
    Never().run(loop, loop.num, carry, [])
    assert [k for _, k in loop.calls[n:n + 1 + A.shape[1]]] == ["start"] + ["finite_difference"] * A.shape[1]
    assert not carry.clipped


def test_a_clipped_evaluation_is_never_converged_however_small_its_residual():
    """A clipped record that happens to read the solution (residual zero) is still a clipped
    record: the point stops ``overrange``, not ``converged``."""
    A, c, F_e = _linear(4)

    class ClippedAtTheAnswer(LinearLoop):
        def evaluate(self, num, V, transient_tol=None, kind="iteration"):
            e = super().evaluate(num, V, transient_tol, kind)
            if kind == "iteration":
                e.meas.force = num.F_e.copy()  # reads exactly the demanded force
                e.overrange = ("l2",)
            return e

    loop = ClippedAtTheAnswer(A, c, F_e, max_iterations=20)
    out = PublishedProfile().run(loop, loop.num, PublishedCarry(), [])
    assert out.reason == "overrange" and not out.converged


def _twin_loop(overrides=()):
    cfg = load_sweep(PAPER, ["solver.profile=published", *QUIET_RIG, *overrides])
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=3)
    ns = cfg.numerical.substructure()
    return cfg, PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))


def test_published_converges_on_the_quiet_twin_with_their_read_loop():
    cfg, loop = _twin_loop()
    carry = PublishedCarry()
    outs = [loop.run(f, carry) for f in (17.0, 17.3, 17.6)]
    assert all(o.converged for o in outs)
    for o in outs:
        for e in o.history:
            # at least 30 reads of 10 periods after the ramp
            assert e.windows >= 30 and e.averaging_periods == pytest.approx(10, rel=1e-3)  # whole samples
            assert e.periods >= 300 * (1 - 1e-3)
    assert np.median([o.iterations for o in outs]) <= 15


def test_breakdown_adds_up_to_the_rig_time_of_the_point():
    # the harsh-mains twin: its second point needs no Jacobian restart (on the lab-calibrated
    # twin, whose front gauge is 3x noisier, seed 4 restarts at 18.1 Hz)
    cfg = load_sweep(PAPER, ["rig=../instruments/virtual-cantilever-harsh-mains.toml"])
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=4)
    ns = cfg.numerical.substructure()
    loop = PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))
    carry = HbtestCarry()
    for f in (18.0, 18.1):
        t0 = rig.elapsed_s
        out = loop.run(f, carry)
        b = out.breakdown()
        assert b["total"] == pytest.approx((rig.elapsed_s - t0) * f)
        assert b["ramp"] + b["settling"] + b["averaging"] + b["other"] == pytest.approx(b["total"])
        by_kind = b["start"] + b["iteration"] + b["line_search"] + b["finite_difference"]
        assert by_kind == pytest.approx(sum(e.periods for e in out.history))
        assert b["ramp"] == pytest.approx(len(out.history) * cfg.solver.ramp_periods, rel=2e-3)  # whole samples
        assert b["evaluations"] == len(out.history) and b["start"] > 0
    assert b["finite_difference"] == 0  # the Jacobian is carried to the second point


def test_hbtest_evaluation_fits_through_the_transient_on_the_twin():
    cfg = load_sweep(PAPER, [*QUIET_RIG])
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=5)
    ns = cfg.numerical.substructure()
    loop = PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))
    from hbtest.point import NumericalSide

    num = NumericalSide.build(ns, cfg.excitation.force_vector(ns), 18.4, loop.orders)
    loop.evaluate(num, np.array([0.4, 0.1, -0.2, 0.3]))
    V = np.array([0.1, -0.3, 0.25, 0.0])
    e = loop.evaluate(num, V)  # a step in demand: no waiting for the transient
    exact = rig.steady_state(18.4, loop.unpack_voltage(V), loop.orders)
    assert e.settled and e.windows == 1
    assert e.periods <= cfg.solver.ramp_periods + cfg.test.averaging_periods * 4 + 1
    np.testing.assert_allclose(e.meas.displacement, exact.displacement, rtol=1e-4)
    np.testing.assert_allclose(e.meas.force, exact.force, rtol=1e-3)


def test_hbtest_stops_early_as_stalled_at_the_noise_floor_and_says_so():
    """A tolerance far below what the noise allows: no iteration can get there, so the point
    stops with ``stalled`` after a Jacobian restart, long before ``max_iterations``, and the
    message names the noise floor and the harmonic (never burn the budget blindly)."""
    # the harsh-mains twin (on the lab-calibrated one, seed 3 stalls after 26 iterations)
    cfg = load_sweep(PAPER, ["test.tolerance_mm=1e-6", "test.accuracy=0", "rig=../instruments/virtual-cantilever-harsh-mains.toml"])
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=3)
    ns = cfg.numerical.substructure()
    loop = PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))
    out = loop.run(18.0, HbtestCarry())
    assert out.reason == "stalled" and not out.converged
    assert out.iterations < cfg.test.max_iterations / 4
    assert "noise floor" in out.message and "harmonic 1" in out.message
    assert out.final.norm < 10 * out.final.noise  # it really is at its noise floor

"""The path pool and the curvature step control of the hybrid arclength continuation
(hbtest.sweep.arclength.continuation), and the stepped sweep's fresh start after a jump
(hbtest.sweep.stepped.FamilyRunner), against exact answers: which evaluations a pool takes,
the step a circle of known radius asks for, and what a point that lost its branch records."""

from __future__ import annotations

import math
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from hbtest.point.loop import PointOutcome
from hbtest.sweep.arclength import ArclengthSettings, HybridArclength
from hbtest.sweep.stepped import JUMP_REASONS, FamilyRunner


def tracer(**settings) -> HybridArclength:
    """A tracer without a rig: only its step control and its path pool's selection."""
    t = object.__new__(HybridArclength)
    t.s = replace(ArclengthSettings(), **settings)
    t.h, t.not_affine, t.bank = t.s.initial_step, 0, []
    return t


@pytest.mark.parametrize("radius, h", [(0.05, 0.01), (0.5, 0.01), (2.0, 0.04), (0.2, 0.003)])
def test_next_step_turns_the_tangent_by_the_target_angle_on_a_circle(radius, h):
    """On a circle of radius R a step h turns the tangent by h / R: the next step is the one
    that turns it by ``turn_angle`` (h' = turn_angle R), within [min_factor, max_factor] h."""
    t = tracer()
    a = h / radius
    t0, t1 = np.array([0.0, 1.0]), np.array([-math.sin(a), math.cos(a)])
    factor, note = t._step_factor(t0, t1)
    want = min(max(t.s.turn_angle * radius / h, t.s.min_factor), t.s.max_factor)
    assert factor == pytest.approx(want, rel=1e-9) and note == ""
    t.not_affine = 3  # the path pool dropped evaluations: shorter, and said
    factor, note = t._step_factor(t0, t1)
    assert factor == pytest.approx(min(want, t.s.min_factor), rel=1e-9) and "did not hold over 3" in note


def test_path_pool_takes_the_nearest_within_the_radius_with_the_newest_last():
    t = tracer(pool_radius=1.5, pool_max=4)
    t.h = 0.1  # radius 0.15
    evs = [object() for _ in range(7)]
    zs = [np.array([0.0, d]) for d in (0.3, 0.14, 0.01, 0.05, 0.149, 0.2, 0.0)]
    t.bank = list(zip(zs, evs))
    newest = evs[-1]
    near = t._near(zs[-1], newest)
    # within 0.15: 0.14, 0.01, 0.05, 0.149; the 3 nearest (pool_max - 1) in the order measured
    assert [e for _, e in near] == [evs[1], evs[2], evs[3], newest]
    assert near[-1][1] is newest
    # a step far below the points' own noise: the radius stops at pool_min_radius (0.02: the
    # evaluations at 0.01 and 0.0 of the newest, not the one at 0.05)
    t.h = 1e-9
    assert t.s.pool_min_radius == 0.02
    assert [e for _, e in t._near(zs[-1], newest)] == [evs[2], newest]


@pytest.mark.parametrize("h, move, beyond", [(0.05, 0.04, False), (0.05, 0.06, True), (0.001, 0.015, False),
                                             (0.001, 0.03, True), (0.04, 0.039, False)])
def test_a_corrector_beyond_its_trust_region_is_refused(h, move, beyond):
    """The trust region: ``corrector_trust`` steps from the prediction, at least that many
    ``pool_min_radius`` (the noise); a move beyond it is given in steps, within it None."""
    t = tracer(corrector_trust=1.0, pool_min_radius=0.02)
    z_pred = np.array([0.3, 4.8])
    direction = np.array([0.6, -0.8])
    got = t._beyond_trust(z_pred + move * direction, z_pred, h)
    assert (got is not None) == beyond
    if beyond:
        assert got == pytest.approx(move / h, rel=1e-12)
    t.trust_notes = [1.2, 14.8]
    assert "2 corrector(s) would have moved 1.2, 14.8 steps" in t._trust_note()


class FakeLoop:
    """``run`` from a fresh carry converges, from a carried one stops with ``reason``."""

    def __init__(self, reason: str):
        self.reason, self.calls = reason, []

    def new_carry(self):
        return SimpleNamespace(solutions=[], fresh=True)

    def run(self, f, carry):
        self.calls.append(carry)
        ok = getattr(carry, "fresh", False)
        return PointOutcome(f, None, ok, 3, 100.0 if ok else 40.0, [], "converged" if ok else "no progress",
                            "converged" if ok else self.reason)


@pytest.mark.parametrize("reason", ["stalled", "iteration_limit", "trip", "overrange", "voltage_limit"])
def test_a_point_that_lost_its_branch_restarts_fresh_and_says_so(reason):
    runner = object.__new__(FamilyRunner)
    runner.loop = FakeLoop(reason)
    carried = SimpleNamespace(solutions=[(19.5, None, None)])
    out = runner.loop.run(19.6, carried)
    got, carry = runner._fresh_after_jump(19.6, out, carried)
    if reason not in JUMP_REASONS:  # a trip, a sensor over range, the voltage limit: no jump
        assert got is out and carry is carried and len(runner.loop.calls) == 1
        return
    assert got.converged and carry.fresh and len(runner.loop.calls) == 2
    assert got.rig_periods == 140.0  # both attempts are the point's rig time
    assert "restarted from a fresh start" in got.message and reason in got.message
    # from a fresh carry already (the first point, or one after a restart): nothing to restart
    runner.loop = FakeLoop(reason)
    first = SimpleNamespace(solutions=[])
    out = PointOutcome(16.0, None, False, 3, 1.0, [], "no progress", reason)
    assert runner._fresh_after_jump(16.0, out, first) == (out, first)

"""The digitiser ranges that follow the signal (hbtest.rig.scpi.ranging): exact ranges from a
record's peak, the hysteresis, the ceiling after a demand change and after a clip on a narrowed
channel, and as properties: a range never below what the last record needs, never above the
rig file's."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.rig.scpi.ranging import MIN_RANGE_V, NARROW_BELOW, ChannelRanges


def test_a_range_is_twice_the_headroom_times_the_peak_rounded_up_to_two_digits():
    r = ChannelRanges({1: 24.0, 2: 24.0}, {1: 0.0, 2: 0.5}, headroom=1.5)
    assert r.changes() == {}  # the rig file's ranges are what the digitiser has
    r.follow({1: np.array([-1.137, 0.2]), 2: np.array([0.5, 1.5])})  # channel 2: peak 1 V about its 0.5 V offset
    assert r.changes() == {1: 3.5, 2: 3.0}  # 3 x 1.137 = 3.411 -> 3.5
    assert r.changes() == {}  # taken as sent
    r.follow({1: np.array([1.0]), 2: np.array([1.4])})  # 3.0 > 0.8 x 3.5: kept; 2.7 > 0.8 x 3.0: kept
    assert r.changes() == {}
    r.follow({1: np.array([0.9]), 2: np.array([0.5 + 1e-6])})  # 2.7 <= 2.8: narrowed; channel 2 at its offset: the floor
    assert r.changes() == {1: 2.7, 2: MIN_RANGE_V}


def test_a_demand_change_and_a_clip_on_a_narrowed_channel_go_back_to_the_ceiling():
    r = ChannelRanges({1: 24.0, 2: 10.0}, {1: 0.0, 2: 0.0}, headroom=2.0)
    r.follow({1: np.array([1.0]), 2: np.array([1.0])})
    assert r.changes() == {1: 4.0, 2: 4.0}
    assert r.widen_clipped(frozenset({2})) is True
    assert r.changes() == {2: 10.0}
    assert r.widen_clipped(frozenset({2})) is False  # clipped at its ceiling: over-range, not taken again
    r.scale(math.inf)  # a new frequency: every channel at its ceiling
    assert r.changes() == {1: 24.0}


def test_a_demand_change_scales_the_ranges_by_its_bound_on_the_motion():
    r = ChannelRanges({1: 24.0, 2: 24.0}, {1: 0.0, 2: 0.0}, headroom=1.5)
    r.scale(1.0)  # nothing recorded yet: the ceilings
    assert r.changes() == {}
    r.follow({1: np.array([1.0]), 2: np.array([2.0])})
    assert r.changes() == {1: 3.0, 2: 6.0}
    r.scale(1.0)  # a stop: a free decay of the motion recorded
    assert r.changes() == {}
    r.scale(1.25)  # e.g. |V'| = 1.1 |V|, |V' - V| = 0.15 |V|
    assert r.changes() == {1: 3.8, 2: 7.5}  # 3.75 -> 3.8 (two digits, up)
    r.scale(5.0)
    assert r.changes() == {1: 15.0, 2: 24.0}  # 30 V: the ceiling


def test_headroom_zero_keeps_the_rig_files_ranges():
    r = ChannelRanges({1: 24.0}, {1: 0.0}, headroom=0.0)
    r.follow({1: np.array([0.01])})
    assert r.changes() == {} and r.widen_clipped(frozenset({1})) is False


@settings(max_examples=300, deadline=None)
@given(st.floats(1.1, 5.0), st.floats(0.5, 40.0), st.lists(st.floats(0.0, 30.0), min_size=1, max_size=6))
def test_a_range_holds_the_last_peak_with_its_headroom_within_the_ceiling(headroom, ceiling, peaks):
    r = ChannelRanges({1: ceiling}, {1: 0.0}, headroom=headroom)
    for p in peaks:
        before = r.present[1]
        r.follow({1: np.array([p, -0.5 * p])})
        r.changes()
        now = r.present[1]
        assert MIN_RANGE_V <= now <= ceiling
        assert now >= min(ceiling, 2 * headroom * p * (1 - 1e-12))  # never narrower than the record needs
        assert now == before or now > before or now <= NARROW_BELOW * before + 1e-12  # hysteresis
        assert now <= max(before, min(ceiling, 2 * headroom * p * 1.1 + MIN_RANGE_V))  # no wider than needed

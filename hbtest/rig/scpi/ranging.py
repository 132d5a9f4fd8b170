"""Digitiser channel ranges that follow the signal (the ``[digitiser] autorange_headroom`` key).

Units: volts (full-scale ranges of 8 divisions, centred on each channel's offset). A channel's
range in the rig file is its **ceiling**: the widest range the channel uses, chosen from
``hbtest design``'s predicted peaks so that even a transient stays on screen. A digitiser
quantises to a fixed fraction of its range (12 bits in high-resolution acquisition: range /
4096), so a laser signal of 1 V on a 24 V range carries steps 24x coarser than it needs, and
their noise (step / sqrt(12) rms) is averaged away only by more periods of rig time.

With ``headroom`` > 0 a channel's range follows its own records, as a lab's operator sets a
scope's vertical scale to the trace: after every record the range for the next one is
``2 * headroom * peak`` (``peak`` the record's largest ``|v - offset|``), rounded up to two
significant digits, at least :data:`MIN_RANGE_V` and at most the ceiling; a range is only
narrowed when that is at most :data:`NARROW_BELOW` of the present one (no command churn).
A demand change scales the ranges (:meth:`ChannelRanges.scale`): on a linear rig at one
frequency the motion after a change from ``V`` to ``V'`` (per actuator, the sum of the
harmonics' magnitudes) is the new steady state plus the transient of the change, bounded by the
last record's peak times ``factor = max over actuators of (|V'| + |V' - V|) / |V|``; the next
record's range is ``2 * headroom`` times that. A new frequency, new harmonics or a demand from
zero (``factor`` infinite) put every channel back at its ceiling. A stop (``V' = 0``: factor 1)
keeps the ranges: the free decay of the motion the last record saw, which is what the rig's
identification records (:mod:`hbtest.rig.identify`). On the 24 V ranges the bare-beam twin's
lasers (1.07 mV rms noise, a fifth of a step) were quantised undithered there, and the
identification found lightly damped modes that are not there (16.8-42.9 Hz, damping 1-5 %: in
4 of the 9 bare-beam sweeps' identifications on the bench kept from rounds 17-19, none in the
12 on box, helic and redpitaya); the point loop's fits then carried them (bare seed 1: 103
evaluations at the record cap against 61 in-process).

A record clipped on a channel narrowed below its ceiling (a rig that is not linear, or a bound
that the actuators' phases beat) is taken again with that channel at the ceiling
(:meth:`ChannelRanges.widen_clipped`); a channel clipped *at* its ceiling is over-range,
reported as before.

Nothing here changes what a record means: every record's volts are scaled by its own
preamble. ``headroom = 0`` keeps every channel at the rig file's range (no range command after
setup).
"""

from __future__ import annotations

import math

__all__ = ["ChannelRanges", "MIN_RANGE_V", "NARROW_BELOW"]

MIN_RANGE_V = 8e-3  # the InfiniiVision's smallest full-scale range at 1 Mohm (1 mV/div)
NARROW_BELOW = 0.8  # a range is narrowed only to at most this fraction of the present one


def _round_up(x: float, digits: int = 2) -> float:
    """``x`` > 0 rounded up to ``digits`` significant digits (3.41 -> 3.5)."""
    scale = 10.0 ** (math.floor(math.log10(x)) - digits + 1)
    return float(f"{math.ceil(x / scale - 1e-9) * scale:.{digits}g}")


class ChannelRanges:
    """The present full-scale range [V] of each digitiser channel, between its ceiling (the rig
    file's ``range_v``) and :data:`MIN_RANGE_V`. The rig sends :meth:`changes` before a record
    and reports each record to :meth:`widen_clipped` and :meth:`follow`."""

    def __init__(self, ceilings: dict[int, float], offsets: dict[int, float], headroom: float):
        self.ceiling = dict(ceilings)
        self.offset = dict(offsets)
        self.headroom = float(headroom)
        self.present = dict(ceilings)  # what the digitiser has
        self.wanted = dict(ceilings)  # what the next record should have
        self.peak: dict[int, float] = {}  # each channel's largest |v - offset| in the last record [V]

    def changes(self) -> dict[int, float]:
        """The channels whose range must change before the next record, and to what [V];
        taken as sent."""
        out = {c: r for c, r in self.wanted.items() if r != self.present[c]}
        self.present.update(out)
        return out

    def scale(self, factor: float) -> None:
        """A demand change whose motion is bounded by ``factor`` times the last record's (module
        docstring; ``math.inf``: unknown, every channel at its ceiling)."""
        for c in self.wanted:
            self._want(c, self.peak.get(c, math.inf) * factor)

    def widen_clipped(self, clipped) -> bool:
        """``clipped``: channels with a clipped sample in the record just taken. True when one of
        them was narrowed below its ceiling: it is put back there and the record must be taken
        again."""
        narrowed = [c for c in clipped if self.present[c] < self.ceiling[c]]
        for c in narrowed:
            self.wanted[c] = self.ceiling[c]
        return bool(narrowed)

    def follow(self, volts: dict) -> None:
        """Size the next record's ranges from this record's ``volts`` per channel [V]."""
        for c, v in volts.items():
            self.peak[c] = max(abs(float(v.max()) - self.offset[c]), abs(float(v.min()) - self.offset[c])) if v.size else 0.0
            self._want(c, self.peak[c])

    def _want(self, c: int, peak: float) -> None:
        """The next record's range of channel ``c`` for a signal of ``peak`` [V] about its offset
        (``math.inf``: the ceiling), with the hysteresis of :data:`NARROW_BELOW`."""
        if self.headroom <= 0 or not math.isfinite(peak):
            self.wanted[c] = self.ceiling[c]
            return
        want = min(self.ceiling[c], _round_up(max(2.0 * self.headroom * peak, MIN_RANGE_V)))
        self.wanted[c] = want if want > self.present[c] or want <= NARROW_BELOW * self.present[c] else self.present[c]

"""How long the measuring part measures one evaluation: the window rules a profile hands the
point loop once, as frozen values (:meth:`hbtest.point.base.SolverProfile.window_rule`). The
loop calls a rule, never the profile. Periods are forcing periods; noises, norms and
tolerances are displacement-form residual figures [m] unless a field says otherwise.

- :class:`FixedWindows` — the plain rule (windows of ``averaging_periods`` until settled);
- :class:`Reads` — the published profile's read loop (their ``ResidualSG``);
- :class:`NoiseSized` — the hbtest profile's noise-sized windows and transient-fit records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["WindowRule", "FixedWindows", "Reads", "NoiseSized"]


@runtime_checkable
class WindowRule(Protocol):
    """How long the measuring part measures one evaluation: a frozen value the profile hands
    the loop once (:meth:`SolverProfile.window_rule`). Periods are forcing periods; noises,
    norms and tolerances are displacement-form residual figures [m]."""

    @property
    def reject_mains(self) -> bool:
        """Estimate and subtract the known mains frequencies in the harmonic fit."""

    @property
    def fit_transient(self) -> bool:
        """Fit the steady state through the transient (known modes) instead of waiting, where
        the rig offers raw records and its modes."""

    @property
    def min_windows(self) -> int:
        """Least number of windows of a waiting evaluation (the settling check needs two)."""

    @property
    def settle_on_force(self) -> bool:
        """Settle on the change of the force-form residual [N] instead of the displacement form."""

    def initial_window(self) -> int: ...

    def max_windows(self) -> int: ...

    def first_record(self, window: int) -> int: ...

    def next_window(self, window: int, noise: float, transient_tol: float) -> int: ...

    def record_periods(self, total: int, noise: float, norm: float, transient_tol: float,
                       noise_target: float | None) -> int: ...

    def settled(self, d: float, prev_d: float | None, noise: float, transient_tol: float) -> bool: ...

    def gap_periods(self, frequency_hz: float) -> float:
        """Periods the rig runs unread before each window (0: windows back to back)."""

    def settle_basis(self, change: np.ndarray, p: int, rotation_length: float) -> np.ndarray:
        """The packed force-residual change (T rows, then M / ``rotation_length`` rows, ``p``
        of each) in the basis whose 2-norm ``settle_on_force`` judges."""


def transducer_forces(r: np.ndarray, p: int, rotation_length: float, spacing_m: float) -> np.ndarray:
    """The packed force residual ``r`` (``p`` rows of T [N], then ``p`` of M / ``rotation_length``
    [N]) as the forces at two transducers ``spacing_m`` apart, front ``T + M / l`` then back
    ``-M / l`` [N] (the authors' ``T2N'``, ``BroydenMethod.m`` l.846; ``rot = (u1 - u2) / l``,
    l.608-609; docs/method.md)."""
    m = r[p:] * (rotation_length / spacing_m)
    return np.concatenate([r[:p] + m, -m])


class _BackToBack:
    """Windows read back to back, settling judged in the residual's own basis."""

    def gap_periods(self, frequency_hz: float) -> float:
        return 0.0

    def settle_basis(self, change: np.ndarray, p: int, rotation_length: float) -> np.ndarray:
        return change


@dataclass(frozen=True)
class FixedWindows(_BackToBack):
    """The plain rule: windows of ``averaging_periods``, at least ``min_windows`` and at most
    ``most`` of them, settled when the residual changes by less than the transient tolerance
    between two windows; no transient fit, no mains rejection."""

    averaging_periods: int
    most: int
    min_window_periods: int
    min_windows: int = 2
    reject_mains: bool = False
    fit_transient: bool = False
    settle_on_force: bool = False

    def initial_window(self) -> int:
        return int(self.averaging_periods)

    def max_windows(self) -> int:
        return int(self.most)

    def first_record(self, window: int) -> int:
        return max(int(window), int(self.min_window_periods))

    def next_window(self, window: int, noise: float, transient_tol: float) -> int:
        return window

    def record_periods(self, total, noise, norm, transient_tol, noise_target) -> int:
        return self.next_window(total, noise, transient_tol)

    def settled(self, d, prev_d, noise, transient_tol) -> bool:
        return d < transient_tol


@dataclass(frozen=True)
class Reads:
    """Their read loop as a window rule: reads of ``read_periods`` periods, at least
    ``min_windows``, at most ``most``, settled when the force residual changes by less than
    ``settle_change_n`` [N] between two reads. Mains are not rejected; no transient fit."""

    read_periods: int
    min_windows: int
    most: int
    settle_change_n: float
    reject_mains: bool = False
    fit_transient: bool = False
    settle_on_force: bool = True
    #: each read starts this long after the last [s]; the rest of the pause beyond the read,
    #: in whole periods, runs unread (0: reads back to back)
    read_pause_s: float = 0.0
    #: judge settling on the forces at two transducers this far apart [m] (None: on T, M / l)
    transducer_spacing_m: float | None = None

    def gap_periods(self, frequency_hz: float) -> float:
        """Whole periods waited unread before each read: the pause minus the averaged periods."""
        return float(max(0, round(self.read_pause_s * frequency_hz) - self.read_periods))

    def settle_basis(self, change: np.ndarray, p: int, rotation_length: float) -> np.ndarray:
        if self.transducer_spacing_m is None:
            return change
        return transducer_forces(change, p, rotation_length, self.transducer_spacing_m)

    def initial_window(self) -> int:
        return int(self.read_periods)

    def max_windows(self) -> int:
        return int(self.most)

    def first_record(self, window: int) -> int:
        return int(self.read_periods)

    def next_window(self, window: int, noise: float, transient_tol: float) -> int:
        return int(self.read_periods)

    def record_periods(self, total, noise, norm, transient_tol, noise_target) -> int:
        return int(self.read_periods)

    def settled(self, d, prev_d, noise, transient_tol) -> bool:
        return d < self.settle_change_n


@dataclass(frozen=True)
class NoiseSized(_BackToBack):
    """The hbtest profile's window rule: windows sized so the residual noise is
    ``noise_fraction`` of the transient tolerance (within ``min_window_periods`` and
    ``max_window_factor`` x ``averaging_periods``), settled when the change is within the
    tolerance or ``settle_sigmas`` noise deviations and the extrapolated geometric decay
    agrees; fitted records grow to the noise target or until the residual stands ``far_snr``
    deviations out (with ``far_ceiling`` [m] on that target's noise: multi-harmonic tests),
    within ``max_record_factor`` x ``averaging_periods``. Mains are rejected; the steady state
    is fitted through the transient where the rig allows."""

    min_window_periods: int
    averaging_periods: int
    most: int
    noise_fraction: float
    max_window_factor: float
    settle_sigmas: float
    max_decay_ratio: float
    far_snr: float
    far_ceiling: float
    max_record_factor: float
    min_windows: int = 2
    reject_mains: bool = True
    fit_transient: bool = True
    settle_on_force: bool = False

    def initial_window(self) -> int:
        return int(self.min_window_periods)

    def max_windows(self) -> int:
        return int(self.most)

    def first_record(self, window: int) -> int:
        return int(self.min_window_periods)

    def next_window(self, window: int, noise: float, transient_tol: float) -> int:
        # noise variance scales as 1/n: size the window so the noise is the wanted fraction
        want = window * (noise / (self.noise_fraction * transient_tol)) ** 2
        return int(np.clip(np.ceil(want), self.min_window_periods, self.max_window_factor * self.averaging_periods))

    def record_periods(self, total, noise, norm, transient_tol, noise_target) -> int:
        """Grow until the residual noise meets the target (``noise_target`` or the window
        rule's fraction of ``transient_tol``), or until the residual stands ``far_snr`` noise
        standard deviations out (far from the solution), within the window bounds."""
        target = self.noise_fraction * transient_tol if noise_target is None else noise_target
        target = max(target, min(norm / self.far_snr, self.far_ceiling))
        want = total * (noise / target) ** 2
        return int(np.clip(np.ceil(want), self.min_window_periods, self.max_record_factor * self.averaging_periods))

    def settled(self, d, prev_d, noise, transient_tol) -> bool:
        limit = max(transient_tol, self.settle_sigmas * np.sqrt(2.0) * noise)
        ok = d < limit
        if ok and prev_d is not None and prev_d > 0:
            # geometric decay: what is left of the transient is about d q / (1 - q)
            q = min(d / prev_d, self.max_decay_ratio)
            ok = d * q / (1 - q) < limit
        return ok

"""The solver-profile base class and the registry of profiles by name (the sweep file's
``solver.profile``). Concrete profiles live in :mod:`hbtest.point.profiles`."""

from __future__ import annotations

import abc

__all__ = ["SolverProfile", "PROFILES", "register_profile", "get_profile"]


class SolverProfile(abc.ABC):
    """Base class: window sizing, settling rule, mains rejection and the iteration."""

    name = ""
    #: estimate and subtract the known mains frequencies in the harmonic fit
    reject_mains = False
    #: least number of windows of an evaluation (the settling check needs two)
    min_settle_windows = 2
    #: fit the steady state through the transient (known modes) instead of waiting, where
    #: the rig offers raw records and its modes (:meth:`PointLoop.evaluate_through_transient`)
    fit_transient = False

    def max_windows(self, s) -> int:
        """Most windows of one evaluation (settled or not)."""
        return int(s.max_settle_windows)

    def settle_distance(self, loop, num, prev, cur) -> float:
        """Change between two successive windows, each ``(measurement, displacement-form
        residual R)``: by default the convergence norm of the change of R [m]."""
        return loop.norm(cur[1] - prev[1])

    def read_gap_periods(self, frequency_hz: float) -> float:
        """Periods the rig runs unread before each window (0: windows back to back)."""
        return 0.0

    def initial_window(self, s) -> int:
        """Periods of the first averaging window."""
        return int(s.averaging_periods)

    def next_window(self, window: int, noise: float, transient_tol: float, s) -> int:
        """Periods of the next window, given the residual noise of the last [m]."""
        return window

    def first_record(self, loop) -> int:
        """Periods of the first record of a transient-fit evaluation."""
        return max(int(loop.window), int(loop.s.min_window_periods))

    def record_periods(self, loop, total: int, noise: float, norm: float, transient_tol: float, noise_target: float | None) -> int:
        """Periods the growing record of a transient-fit evaluation should reach, given the
        ``total`` so far, its residual noise and residual norm [m]; ``noise_target`` [m] from
        the profile when it sized this evaluation itself (None: the window rule)."""
        return self.next_window(total, noise, transient_tol, loop.s)

    def settled(self, d: float, prev_d: float | None, noise: float, transient_tol: float) -> bool:
        """Is the response settled, given the residual change ``d`` between the last two
        windows (and ``prev_d`` before that)?"""
        return d < transient_tol

    @abc.abstractmethod
    def run(self, loop, num, carry, history: list):
        """Iterate one point; append every rig evaluation to ``history``."""


PROFILES: dict[str, type[SolverProfile]] = {}


def register_profile(cls: type[SolverProfile]) -> type[SolverProfile]:
    """Class decorator: make a profile available under ``cls.name``."""
    PROFILES[cls.name] = cls
    return cls


def get_profile(name: str) -> SolverProfile:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown solver profile {name!r}; known: {', '.join(PROFILES)}") from None



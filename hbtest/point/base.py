"""What a solver profile is, and the registry of profiles by name (the sweep file's
``solver.profile``).

A point flows one way (``docs/architecture.md``, "One point"): :meth:`PointLoop.run
<hbtest.point.loop.PointLoop.run>` calls the profile's :meth:`SolverProfile.run` once; the
profile calls the measuring part (:class:`~hbtest.point.loop.PointLoop`: apply, settle or fit
through the transient, reduce, residual, pool) and returns a :class:`PointResult`; the loop
builds the frozen :class:`~hbtest.point.loop.PointOutcome` from it. The measuring part never
calls the profile: how long it measures is a frozen :class:`WindowRule` the profile hands it
when the loop is built (:meth:`SolverProfile.window_rule`; the rules: :mod:`hbtest.point.windows`).

Each profile keeps what it carries from one point to the next in its own typed state (a
:class:`Carried` subclass made by :meth:`SolverProfile.new_carry`). Concrete profiles:
:mod:`hbtest.point.published`, :mod:`hbtest.point.hbtest`; a third profile is a new module with
a registered class.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import numpy as np

from .windows import FixedWindows, WindowRule

__all__ = ["SolverProfile", "PROFILES", "register_profile", "get_profile", "PointResult", "Carried", "WindowRule",
           "FixedWindows", "PoolingProfile"]


@dataclass(frozen=True)
class PointResult:
    """What a profile returns for one point: the evaluation it reports (``final``; None when
    the rig tripped before any), whether it converged, the iterations it counts, why it
    stopped (one of :data:`hbtest.point.loop.STOP_REASONS`) and a message for a person.

    A profile that reports the point at an estimate the rig did not hold (the hbtest
    profile's pooled-fit solution) also gives ``applied``, the last evaluation the rig held,
    ``solution_offset`` |U* - U_P(applied)| and the stated standard uncertainties [m, weighted
    norm] (:class:`hbtest.point.loop.PointOutcome` documents each), and ``measured``, the last
    raw evaluation (before pooling) when ``final`` is not it."""

    final: Any
    converged: bool
    iterations: int
    reason: str
    message: str
    applied: Any = None
    solution_offset: float = 0.0
    uncertainty: float = float("nan")
    noise_uncertainty: float = float("nan")
    uncertainty_with_jacobian: float = float("nan")
    measured: Any = None


@dataclass
class Carried:
    """What every profile hands from one point to the next: the converged solutions
    ``(frequency_hz, V packed, Y packed)`` in order, and where to start when there is none
    yet (``start_V``: a resumed sweep, a force family's next level). A profile's own state is
    a subclass of this (:meth:`SolverProfile.new_carry`)."""

    solutions: list = field(default_factory=list)
    start_V: np.ndarray | None = None


@runtime_checkable
class PoolingProfile(Protocol):
    """A profile that pools a point's evaluations (:meth:`PointLoop.pool
    <hbtest.point.loop.PointLoop.pool>`) and judges each harmonic on its own scale; other
    loops that iterate on the measuring part (the arclength corrector) follow it when the
    point loop's profile declares this."""

    #: prior standard deviation of the rig Jacobian's entries in a pool, as a fraction of the
    #: largest entry of its row
    pool_prior_fraction: float

    def noise_target(self, r_target: float, pooled_noise: float, solve: bool = False) -> float: ...

    def harmonics_balanced(self, loop, num, e) -> bool: ...

    def between_limit(self, loop, solve: bool) -> float: ...


C = TypeVar("C", bound=Carried)


class SolverProfile(abc.ABC, Generic[C]):
    """A way of iterating one point: its window rule, its carried state (``C``) and its
    iteration."""

    name = ""
    #: estimate and subtract the known mains frequencies in the harmonic fit (the window rule
    #: carries it to the measuring part; re-reduction of a stored run asks the profile)
    reject_mains = False

    def window_rule(self, s) -> WindowRule:
        """The frozen window rule of this profile under the point settings ``s``."""
        return FixedWindows(s.averaging_periods, s.max_settle_windows, s.min_window_periods,
                            reject_mains=self.reject_mains)

    @abc.abstractmethod
    def new_carry(self, start_V: np.ndarray | None = None) -> C:
        """The state a sweep carries along its points, empty (``start_V``: see :class:`Carried`)."""

    @abc.abstractmethod
    def run(self, loop, num, carry: C, history: list) -> PointResult:
        """Iterate one point on the measuring part ``loop`` at the numerical side ``num``;
        append every rig evaluation to ``history``; update ``carry`` for the next point."""


PROFILES: dict[str, type[SolverProfile[Any]]] = {}


def register_profile(cls: type[SolverProfile[Any]]) -> type[SolverProfile[Any]]:
    """Class decorator: make a profile available under ``cls.name``."""
    PROFILES[cls.name] = cls
    return cls


def get_profile(name: str) -> SolverProfile[Any]:
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(f"unknown solver profile {name!r}; known: {', '.join(PROFILES)}") from None

"""Structured progress events. Long-running library functions (a sweep, a campaign) report
through a callback ``progress(event)`` instead of printing; the CLI renders the events
(:mod:`hbtest.commands.render`), a notebook or a campaign can consume them as data.

Units: frequencies in Hz, residual norms in metres, rig time in forcing periods and seconds.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = [
    "Event", "RunStarted", "LockTakenOver", "PointFinished", "StopRequested", "RunFinished", "PlotWritten", "Notice",
    "PointMoved", "StepStarted", "StepFinished",
]


@dataclass(frozen=True)
class Event:
    """Base class of every progress event."""

    def to_dict(self) -> dict:
        return {"event": type(self).__name__, **asdict(self)}


@dataclass(frozen=True)
class RunStarted(Event):
    name: str
    store: str
    rig: str
    profile: str
    n_todo: int
    n_total: int
    seed: int | None = None


@dataclass(frozen=True)
class LockTakenOver(Event):
    """The store's lock file was left behind by a writer that is no longer running."""

    store: str
    holder: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PointFinished(Event):
    n: int  # 1-based count among the points of this run
    of: int
    index: int  # slot in the store
    frequency_hz: float
    iterations: int
    residual_norm: float
    rig_periods: float
    converged: bool
    reason: str
    message: str


@dataclass(frozen=True)
class StopRequested(Event):
    """A signal asked the run to stop (``immediate``: abort the current point)."""

    signal: str
    immediate: bool


@dataclass(frozen=True)
class RunFinished(Event):
    status: str  # running | completed | interrupted | failed (as in the store)
    store: str
    n_points: int
    n_done: int
    n_converged: int
    reasons: dict = field(default_factory=dict)  # stop_reason -> count, over the done points
    wall_seconds: float = 0.0
    message: str = ""


@dataclass(frozen=True)
class PlotWritten(Event):
    path: str


@dataclass(frozen=True)
class Notice(Event):
    """Anything else worth a line (e.g. a design warning before a run)."""

    text: str


@dataclass(frozen=True)
class PointMoved(Event):
    """The sweep runs a point at another frequency than asked (a forcing harmonic on a mains
    multiple, :mod:`hbtest.design.mains`); the store keeps both (``frequency_requested``,
    ``point_note``)."""

    index: int  # slot in the store
    requested_hz: float
    applied_hz: float
    note: str


@dataclass(frozen=True)
class StepStarted(Event):
    """A step of a multi-step rig procedure (``hbtest twin``) starts; ``bound_s``: the most rig
    time [s] it takes."""

    step: str
    index: int  # 1-based
    of: int
    bound_s: float
    text: str = ""


@dataclass(frozen=True)
class StepFinished(Event):
    """A step of a multi-step rig procedure ended after ``rig_s`` [s] of rig time."""

    step: str
    rig_s: float
    text: str = ""

"""Progress events of a campaign (subclasses of :class:`hbtest.events.Event`), rendered by
``hbtest campaign``. Times in seconds (wall clock of the campaign process)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..events import Event

__all__ = ["CampaignStarted", "CaseFinished", "CampaignFinished"]


@dataclass(frozen=True)
class CampaignStarted(Event):
    name: str
    store: str
    kind: str
    n_cases: int
    n_todo: int  # cases this run executes (the rest were finished by an earlier run)
    workers: int  # worker threads of the engine (0: serial, in this process)
    scheduler: str  # "serial", "LocalCluster" or the scheduler's address


@dataclass(frozen=True)
class CaseFinished(Event):
    case: int
    status: str  # done | failed
    error: str
    wall_seconds: float  # of this case, on its worker
    n_finished: int  # cases finished by this run (done + failed)
    n_todo: int
    n_running: int  # cases on workers now (at most the engine's threads)
    n_failed: int  # failed cases of this run
    eta_seconds: float  # remaining cases at this run's rate so far (NaN before the first)
    figures: dict = field(default_factory=dict)


@dataclass(frozen=True)
class CampaignFinished(Event):
    status: str  # completed | interrupted
    store: str
    n_cases: int
    n_done: int  # over the whole store: cases finished without error
    n_failed: int
    wall_seconds: float

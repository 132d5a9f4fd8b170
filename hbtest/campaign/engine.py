"""Running a campaign: every case one task on ``dask.distributed`` (or serially in this
process), results written by the campaign process into one campaign store.

- **Engine.** ``workers=0``: serial, in this process (no dask; the reference a distributed
  run must reproduce). Otherwise a ``distributed.Client``: on the scheduler at ``scheduler``
  (an address such as ``tcp://host:8786``; its workers must import the same hbtest and see
  the campaign's files at the same paths), or on a ``LocalCluster`` of ``workers`` worker
  processes (threads with ``processes=False``) of one thread each. Each case is one task
  (:func:`hbtest.campaign.run_case`), submitted with ``pure=False`` and ``retries=0``.
- **One writer.** The campaign process holds the campaign store's lock and writes each case's
  region as its result comes back (see :mod:`hbtest.campaign.store`); tasks never write it.
  A sweep case writes its own run store, temporary or kept under ``<store>.runs/``.
- **Resume.** Running the same campaign file into an existing store runs only the cases not
  finished (a store made from another campaign, base sweep or rig text is refused; give
  ``overwrite``). ``retry_failed`` also reruns the failed cases.
- **Failures.** A case's own error (a bad override, a limit, a numerical failure) is recorded
  with it and the other cases go on; a task lost with its worker is recorded as failed with
  the scheduler's error.
- **Interruption.** Ctrl+C (KeyboardInterrupt) cancels the outstanding tasks, marks the store
  ``interrupted`` and re-raises; a killed campaign process leaves every finished case intact.
- **Determinism.** A case's result depends only on the case (its overrides and rig seed):
  the store of a distributed run equals a serial run's except the provenance variables
  ``wall_seconds``, ``worker``, ``finished_utc``.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..events import LockTakenOver
from ..store import StoreLock
from .cases import expand_cases
from .events import CampaignFinished, CampaignStarted, CaseFinished
from .store import CampaignStore
from .task import run_case

__all__ = ["run_campaign", "campaign_exit_code", "DASK_MISSING"]

#: dask settings of a LocalCluster's workers. The nanny's default MALLOC_TRIM_THRESHOLD_ fixes
#: glibc's mmap threshold at 128 kB, so every array above it is mapped, zero-filled and unmapped
#: again: a case's numerics ran ~1.4x slower in a worker than in the campaign process (a
#: 4-case profile: the twin's eigen-refinement 0.8 s in-process, 5.1 s on a worker). The
#: worker's sampling profiler (every 10 ms, walking every thread's stack) is off: nobody reads it
LOCAL_WORKER_CONFIG = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None, "distributed.worker.profile.enabled": False}

DASK_MISSING = 'dask.distributed is not installed; install the campaign extra: pip install -e ".[campaign]" (or use --workers 0, serial)'


def _provenance(cfg) -> dict:
    """What the store records about the campaign's inputs (checked again on resume)."""
    from ..config import load_rig, load_sweep

    base = load_sweep(cfg.base, cfg.overrides)
    rig = load_rig(base.rig_path, tuple(base.rig_overrides) + tuple(cfg.rig_overrides))
    return dict(
        campaign_name=cfg.name, campaign_text=cfg.source.text, campaign_sha256=cfg.source.sha256,
        campaign_path=str(Path(cfg.source.path).resolve()), description=cfg.description, kind=cfg.kind,
        base_path=str(Path(cfg.base).resolve()), base_text=base.source.text, base_sha256=base.source.sha256,
        rig_path=str(Path(base.rig_path).resolve()), rig_text=rig.source.text, rig_sha256=rig.source.sha256,
        seed=cfg.seed, draws=cfg.draws, rig_seed_policy=cfg.rig_seed, analysis=dict(cfg.analysis), keep_runs=cfg.keep_runs,
    )


def _open_or_create(path: Path, cfg, cases, overwrite: bool) -> CampaignStore:
    prov = _provenance(cfg)
    if path.exists() and not overwrite:
        store = CampaignStore.open(path)
        a = store.attrs
        for key, what in (("campaign_sha256", "campaign file"), ("base_sha256", "base sweep file"), ("rig_sha256", "rig file")):
            if a.get(key) != prov[key]:
                raise UserError(f"{path}: made from another {what} text ({prov[key.replace('sha256', 'path')]} changed since);"
                                " give --overwrite to start again, or another --store")
        if store.n_cases != len(cases) or not store.same_plan(cases, cfg.figures, prov):
            raise UserError(f"{path}: holds other cases than this campaign's (changed --set, seed or figures?);"
                            " give --overwrite to start again, or another --store")
        return store
    return CampaignStore.create(path, cases, cfg.figures, prov, overwrite=overwrite)


def _eta(t0: float, n_finished: int, n_todo: int) -> float:
    if n_finished == 0:
        return float("nan")
    return (time.monotonic() - t0) / n_finished * (n_todo - n_finished)


class _Tally:
    def __init__(self, store: CampaignStore, n_todo: int, say):
        self.store, self.n_todo, self.say = store, n_todo, say
        self.t0 = time.monotonic()
        self.n_finished = 0
        self.n_failed = 0

    def record(self, result: dict, running: int) -> None:
        self.store.write_case(result)
        self.n_finished += 1
        self.n_failed += result["status"] == "failed"
        self.say(CaseFinished(int(result["index"]), result["status"], result["error"], float(result["wall_seconds"]), self.n_finished,
                              self.n_todo, running, self.n_failed, _eta(self.t0, self.n_finished, self.n_todo), dict(result["figures"])))


def _serial(todo, tally: _Tally) -> None:
    for case in todo:
        tally.record(run_case(case), running=0)


def _lost(case, exc) -> dict:
    """The result of a task the scheduler could not run (worker died, cancelled)."""
    from ..store.provenance import utc_now

    text = " ".join(str(exc).split())
    return dict(index=case.index, status="failed", error=f"task lost: {type(exc).__name__}: {text}".rstrip(": "),
                figures={k: float("nan") for k in case.figures}, wall_seconds=float("nan"), worker="", finished_utc=utc_now(), run_store="")


def _client(scheduler, workers: int | None, processes: bool):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserError(DASK_MISSING) from None
    import logging

    if scheduler:
        try:
            return Client(scheduler, timeout="10s"), None, str(scheduler)
        except (OSError, TimeoutError) as e:
            raise UserError(f"--scheduler {scheduler}: cannot connect ({' '.join(str(e).split())})") from None
    import dask

    n = int(workers) if workers else (os.cpu_count() or 1)
    with dask.config.set(LOCAL_WORKER_CONFIG):
        cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=processes, dashboard_address=None,
                               silence_logs=logging.ERROR)
    return Client(cluster), cluster, "LocalCluster"


def _distributed(todo, tally: _Tally, client) -> None:
    from distributed import as_completed

    token = uuid.uuid4().hex[:8]
    by_key = {}
    futures = []
    for case in todo:
        f = client.submit(run_case, case, key=f"hbtest-case-{case.index}-{token}", pure=False, retries=0)
        by_key[f.key] = case
        futures.append(f)
    threads = max(1, sum(client.nthreads().values()))
    outstanding = len(futures)
    try:
        for f in as_completed(futures):
            outstanding -= 1
            case = by_key[f.key]
            try:
                result = f.result()
            except Exception as e:  # noqa: BLE001 - the task was lost (worker died...): record it, go on
                result = _lost(case, e)
            f.release()
            tally.record(result, running=min(outstanding, threads))
    except BaseException:
        client.cancel([f for f in futures if not f.done()])
        raise


def run_campaign(cfg, store_path, *, workers: int | None = None, scheduler: str | None = None, processes: bool = True,
                 client=None, progress=None, overwrite: bool = False, retry_failed: bool = False):
    """Run the campaign ``cfg`` (:func:`hbtest.config.load_campaign`) into ``store_path``;
    returns the store's dataset. ``workers``: 0 serial in this process; else the number of
    LocalCluster workers (default: the CPU count). ``scheduler``: address of an existing
    scheduler (then ``workers`` is ignored). ``client``: an existing ``distributed.Client``
    to use (not closed here). ``progress``: receives :mod:`hbtest.campaign.events` events.
    See the module docstring for resume, failures and interruption."""
    say = progress or (lambda event: None)
    path = Path(store_path)
    if not str(store_path).strip():
        raise UserError("--store: empty path; give a directory name such as runs/NAME.zarr")
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is a file, not a campaign store; choose another --store path")
    runs_dir = path.with_name(path.name + ".runs") if cfg.keep_runs else None
    cases = expand_cases(cfg, runs_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path.parent}: cannot create the store's directory ({e.strerror or e})") from None
    if workers is not None and workers < 0:
        raise UserError(f"--workers must be 0 (serial) or more, got {workers}")
    with StoreLock(path) as lock:
        if lock.taken_over:
            say(LockTakenOver(str(path), lock.taken_over))
        store = _open_or_create(path, cfg, cases, overwrite)
        finished = store.finished()
        failed = store.statuses() == "failed"
        todo = [c for c in cases if not finished[c.index] or (retry_failed and failed[c.index])]
        engine = None
        status = "interrupted"
        t0 = time.monotonic()
        try:
            if todo and workers != 0:
                engine = (client, None, "Client") if client is not None else _client(scheduler, workers, processes)
            n_threads = 0 if engine is None else sum(engine[0].nthreads().values())
            say(CampaignStarted(cfg.name, str(path), cfg.kind, len(cases), len(todo), n_threads, "serial" if engine is None else engine[2]))
            store.set_status("running")
            tally = _Tally(store, len(todo), say)
            if engine is None:
                _serial(todo, tally)
            else:
                _distributed(todo, tally, engine[0])
            status = "completed"
        finally:
            if engine is not None and client is None:
                engine[0].close()
                if engine[1] is not None:
                    engine[1].close()
            try:
                store.set_status(status, wall_seconds=round(time.monotonic() - t0, 3))
            except OSError:
                pass  # the finished flags still tell what is done
        statuses = store.statuses()
        say(CampaignFinished(status, str(path), len(cases), int(np.sum(statuses == "done")), int(np.sum(statuses == "failed")),
                             round(time.monotonic() - t0, 3)))
        return store.dataset()


def campaign_exit_code(ds) -> int:
    """0 every case done; 1 some case failed or unfinished; 130 interrupted."""
    if ds.attrs.get("status") == "interrupted":
        return 130
    status = np.asarray(ds["status"].values, dtype=object)
    return 0 if bool(np.all(status == "done")) else 1



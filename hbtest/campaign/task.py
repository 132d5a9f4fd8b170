"""One campaign case, run on a worker (a dask task, or in the campaign process when serial).

:func:`run_case` never raises for a case's own failure (a bad override, a rig limit, a
numerical error): it returns the error as text, so one failed case never stops the others and
a task is never retried by the scheduler for it. It returns a plain dict (picklable): the
case's index, ``status`` (``done`` / ``failed``), ``error``, the figures, ``wall_seconds``,
``worker`` (host:pid) and ``finished_utc``.

Each sweep case writes its own run store (:func:`hbtest.sweep.runner.run` takes that store's lock):
``case.run_store`` when the campaign keeps them (``keep_runs``), else a temporary store in a
fresh temporary folder, removed when the case ends.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

__all__ = ["run_case"]


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def _load(case):
    from ..config import load_sweep

    cfg = load_sweep(case.base, case.sweep_overrides)
    if case.rig_overrides:
        cfg = dataclasses.replace(cfg, rig_overrides=tuple(cfg.rig_overrides) + tuple(case.rig_overrides))
    return cfg


def _check_completed(ds) -> None:
    """A sweep stopped by Ctrl+C (serial campaign: the sweep's own signal handling) stops the
    campaign, the case left unfinished; one stopped by its rig (``on_trip = "stop"``...) is
    a failed case."""
    if ds.attrs.get("status") == "completed":
        return
    if ds.attrs.get("stop_cause") == "signal":
        raise KeyboardInterrupt
    raise RuntimeError(f"the sweep stopped: {ds.attrs.get('stop_message') or ds.attrs.get('status')}")


def _execute(case, store_path: Path) -> dict:
    cfg = _load(case)
    if case.kind == "sweep":
        from ..config import load_rig
        from ..sweep.runner import run

        load_rig(cfg.rig_path, cfg.rig_overrides)  # a bad rig override fails here, before anything runs
        ds = run(cfg, store_path, overwrite=True, seed=case.rig_seed, plot=False, overrides=case.sweep_overrides)
        _check_completed(ds)
        from .figures import sweep_figures

        return sweep_figures(ds)
    if case.kind == "classical":
        from ..realtime.classical import compare_sweep
        from .figures import classical_figures

        a = case.analysis
        result = compare_sweep(cfg, float(a["delay_ms"]) * 1e-3, dt=float(a["dt_ms"]) * 1e-3, duration=float(a["duration_s"]),
                               actuator_hz=float(a["actuator_hz"]) or None, store_path=store_path, overwrite=True,
                               seed=case.rig_seed, overrides=case.sweep_overrides)
        return classical_figures(result)
    from .figures import stability_figures

    return stability_figures(cfg, case.analysis)


def run_case(case) -> dict:
    """Run one :class:`hbtest.campaign.Case`; see the module docstring for the result."""
    from ..store.provenance import utc_now

    t0 = time.monotonic()
    tmp = None
    if case.run_store is None:
        tmp = tempfile.mkdtemp(prefix=f"hbtest-case-{case.index}-")
        store_path = Path(tmp) / "run.zarr"
    else:
        store_path = Path(case.run_store)
    status, error, figures = "done", "", {}
    try:
        figures = _execute(case, store_path)
    except Exception as e:  # noqa: BLE001 - a case's failure is data of the campaign, recorded with its error
        status, error = "failed", _one_line(e)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return dict(index=case.index, status=status, error=error, figures={k: float(figures.get(k, float("nan"))) for k in case.figures},
                wall_seconds=round(time.monotonic() - t0, 3), worker=f"{socket.gethostname()}:{os.getpid()}",
                finished_utc=utc_now(), run_store="" if case.run_store is None or status != "done" else str(case.run_store))

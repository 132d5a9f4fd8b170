"""A frequency sweep: points in order, continuation between them, one store slot per point,
progress events, safe interruption and resume (docs/method.md §2).

Safety and data (what a run guarantees):

- **One writer.** A run holds the store's lock (:class:`hbtest.store.StoreLock`) from before
  the rig is opened until the store is final; a second writer gets :class:`StoreBusy`.
- **Nothing lost.** ``--overwrite`` writes the new store beside the old and swaps it in only
  once complete; the rig is opened before the store is created, so an unreachable rig leaves
  any existing store untouched. Every finished point is written before the next starts.
- **Signals.** Ctrl+C once: finish the current point, write it, ramp the rig to zero, mark
  the store ``interrupted``. Ctrl+C twice, or SIGTERM: abort the current point at once (rig
  to safe state), mark ``interrupted``. A killed run (SIGKILL) leaves every finished point
  intact; ``hbtest resume STORE`` redoes only the points whose ``done`` flag is not set, from
  the sweep and rig texts and the seed kept in the store.
- **Faults.** An instrument fault or lost connection mid-run ramps the rig down where it can
  still be reached (a box's watchdog does it otherwise), marks the store ``interrupted`` with
  the reason, and raises :class:`~hbtest.errors.RigFault`; a store write failure (disk full)
  marks it ``interrupted`` where possible and raises :class:`~hbtest.errors.StoreWriteError`.
  A trip of the rig's safety layer or an over-range ends the point (recorded with its
  ``stop_reason``); the sweep goes on or stops as ``sweep.on_trip`` / ``sweep.on_overrange``
  say.
- **Exit status** (:func:`exit_code`): 0 every point converged; 1 completed with
  non-converged points; 3 stopped by the rig; 4 store write failure; 130 interrupted.
"""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from ..config import SweepConfig, load_rig, load_sweep
from ..errors import InstrumentError, LimitExceeded, RigFault, StoreWriteError, Terminated, UserError
from ..events import (
    LockTakenOver,
    Notice,
    PlotWritten,
    PointFinished,
    PointMoved,
    RunFinished,
    RunStarted,
    StopRequested,
)
from ..method import harmonics
from ..method.harmonics import NYQUIST_MARGIN
from ..point import PointOutcome, PointSettings
from ..rig import open_rig
from ..rig.capabilities import ExactReference, Trips
from ..store import PointRecord, RunStore, SlotWriteError, StoreLock

__all__ = ["run", "resume", "point_record", "exit_code", "check_run", "EXIT_CODES", "MAX_RECORD_BYTES", "MAX_POINTS"]

#: exit status of a sweep command by outcome (documented in the README)
EXIT_CODES = {"converged": 0, "not_converged": 1, "user_error": 2, "rig": 3, "store": 4, "signal": 130}

#: the largest single acquisition a run may ask of the rig (all channels, float64) [bytes]
MAX_RECORD_BYTES = 1 << 30
#: the most frequency points one store holds (one chunk file per variable and point)
MAX_POINTS = 20000


class _Stop:
    """Signal policy: the first SIGINT stops after the current point; a second SIGINT raises
    KeyboardInterrupt; SIGTERM raises :class:`Terminated` at once."""

    def __init__(self, progress):
        self.requested = False
        self.progress = progress

    def sigint(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        if self.progress:
            self.progress(StopRequested("SIGINT", immediate=False))

    def sigterm(self, signum, frame):
        if self.progress:
            self.progress(StopRequested("SIGTERM", immediate=True))
        raise Terminated


@contextmanager
def _signals(policy: _Stop):
    try:
        old_int = signal.signal(signal.SIGINT, policy.sigint)
        old_term = signal.signal(signal.SIGTERM, policy.sigterm)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term)


def history_capacity(max_iterations: int, n_actuators: int, orders) -> int:
    """Rows of per-point history the store must hold: every rig evaluation is recorded, and
    besides one per iteration there are finite-difference Jacobians (one evaluation per packed
    voltage, at most once per three iterations) and line-search trials (two extra every 10th
    iteration of the published profile)."""
    n_v = n_actuators * harmonics.packed_size(orders)
    return (max_iterations + 1) * (1 + n_v) + 1


def check_run(cfg: SweepConfig, rig_cfg) -> None:
    """Refuse, before anything runs, a sweep the rig cannot do or the machine cannot hold:
    harmonics at or near the rig's Nyquist frequency, acquisitions too large for memory,
    more points than a store holds. Each refusal names the file and key and says why."""
    from ..errors import ConfigError
    from .stepped import store_orders

    src = cfg.source.path
    fs = rig_cfg.sample_rate_hz
    kmax = max(store_orders(cfg.sweep, fs))
    top = kmax * cfg.sweep.stop_hz
    if top >= fs / NYQUIST_MARGIN:
        raise ConfigError(
            src, "sweep.stop_hz",
            f"harmonic {kmax} of {cfg.sweep.stop_hz:g} Hz is {top:g} Hz, at or above the usable limit {fs / NYQUIST_MARGIN:g} Hz"
            f" (sample rate {fs:g} Hz / {NYQUIST_MARGIN}) of rig {rig_cfg.source.path}",
        )
    n_ch = max(1, len(rig_cfg.sensors.channels))
    window = 4 * cfg.test.averaging_periods  # the longest window a profile asks for
    record = window * fs / cfg.sweep.start_hz * n_ch * 8
    if record > MAX_RECORD_BYTES:
        raise ConfigError(
            src, "sweep.start_hz",
            f"{cfg.sweep.start_hz:g} Hz is too low for this rig: one window of up to {window} periods at {fs:g} samples/s"
            f" is {record / 2**30:.1f} GiB of samples (limit {MAX_RECORD_BYTES / 2**30:g} GiB); raise start_hz or lower test.averaging_periods",
        )
    if cfg.numerical.nonlinear and cfg.test.residual != "force":
        raise ConfigError(
            src, "test.residual",
            "a nonlinear numerical substructure needs the force form (test.residual = \"force\"): the displacement form"
            " needs U_N(F_P), which a hardening or contact structure may not reach from zero load",
        )
    if cfg.sweep.frequencies_hz.size > MAX_POINTS:
        raise ConfigError(
            src, "sweep.points",
            f"{cfg.sweep.frequencies_hz.size} points (all force levels) exceed the {MAX_POINTS} one store holds (each point is one chunk file per variable); split the band into several sweeps",
        )
    if not _gridded(cfg) and cfg.sweep.max_points > MAX_POINTS:
        raise ConfigError(src, "sweep.max_points", f"{cfg.sweep.max_points} slots exceed the {MAX_POINTS} one store holds")


def point_record(out: PointOutcome, orders, n_act: int, external_amplitude: float, reference=None, *,
                 n_ch: int | None = None, requested_hz=None, note: str = "") -> PointRecord:
    """Everything measured at a point, in the store's shapes (NaN where a point ended before
    any measurement, e.g. a trip on its first demand). ``n_ch``: channels of the rig layout
    (the per-evaluation raw channel coefficients are recorded; None: not recorded)."""
    orders = np.asarray(orders)
    p = harmonics.packed_size(orders)
    nh = orders.size
    ext = np.where(orders == 1, external_amplitude, 0.0).astype(complex)
    H = out.history
    e = out.final
    cnan = np.full((2, nh), complex(np.nan, np.nan))
    fnan = np.full((2, nh), np.nan)

    def volt(V):
        return harmonics.unpack(V.reshape(n_act, p), orders)

    from ..calibration.resolve import history_channels

    hc = history_channels(H, n_ch, nh)
    return PointRecord(
        frequency_hz=out.frequency_hz,
        interface_displacement=e.meas.displacement if e else cnan,
        interface_force=e.meas.force if e else cnan,
        numerical_displacement=e.U_N if e else cnan,
        external_force=ext,
        voltage=volt(e.V) if e else np.full((n_act, nh), complex(np.nan, np.nan)),
        interface_displacement_variance=e.meas.displacement_variance if e else fnan,
        interface_force_variance=e.meas.force_variance if e else fnan,
        converged=bool(out.converged),
        iterations=int(out.iterations),
        # the residual the rig last held (the reported state may be the pooled fit's solution
        # next to it: solution_offset says how far)
        residual_norm=float((out.applied or e).norm) if e else float("nan"),
        rig_periods=float(out.rig_periods),
        history_voltage=np.stack([volt(h.V) for h in H]) if H else np.zeros((0, n_act, nh), complex),
        history_residual=np.stack([h.R for h in H]) if H else np.zeros((0, 2, nh), complex),
        history_residual_norm=np.array([h.norm for h in H]),
        history_periods=np.array([h.periods for h in H]),
        reference_interface_displacement=reference,
        message=out.message,
        stop_reason=out.reason,
        raw_record=getattr(e, "acq", None),  # the final window's raw samples, where the rig gave them
        excluded_energy_fraction=out.excluded_energy_fraction,
        # raw channel coefficients of every evaluation (hbtest reduce re-solves with them)
        history_channel_coefficients=hc[0],
        history_channel_variance=hc[1],
        frequency_requested=requested_hz,
        point_note=note,
        solution_offset=float(out.solution_offset),
        displacement_uncertainty=float(out.uncertainty_with_jacobian),
    )


def _store_attrs(cfg: SweepConfig, rig_cfg, overrides, seed) -> dict:
    attrs = dict(
        sweep_text=cfg.source.text,
        sweep_sha256=cfg.source.sha256,
        sweep_path=str(Path(cfg.source.path).resolve()),
        rig_text=rig_cfg.source.text,
        rig_sha256=rig_cfg.source.sha256,
        rig_path=str(Path(rig_cfg.source.path).resolve()),
        rig_identity=rig_cfg.identity,
        rig_overrides=list(cfg.rig_overrides),
        overrides=list(overrides),
        profile=cfg.solver.profile,
        continuation=cfg.sweep.continuation,
        tolerance_m=cfg.test.tolerance,
        seed=seed,
        sensor_layout=json.dumps(rig_cfg.sensors.to_dict()),  # the calibration the reduction used
    )
    if rig_cfg.sensors.calibration:  # keep the applied calibration record itself, not only its path
        from types import SimpleNamespace

        from ..analysis.frf import store_calibration_record

        rec = store_calibration_record(SimpleNamespace(attrs=attrs))
        attrs["calibration_record"] = json.dumps(rec.to_dict())
    return attrs


def _rig_seed(rig) -> int | None:
    seed = rig.describe().details.get("seed")
    return None if seed is None else int(seed)


@runtime_checkable
class _CountsRecords(Protocol):
    """A rig that counts what its link did to records (retaken, lost, dropped: the helic kind)."""

    counters: dict


def _rig_counters(rig) -> dict:
    """``rig_counters`` (JSON) for the store's attributes, when the rig keeps counters."""
    return {"rig_counters": json.dumps(rig.counters)} if isinstance(rig, _CountsRecords) else {}


def _rig_identification(rig) -> dict:
    """``identification`` (JSON) for the store's attributes when the point loop fitted through
    the transient with modes from an identification record (a hardware kind's ``[identify]``,
    :class:`~hbtest.rig.identification.IdentifiedModes`): the record the fits used, where it is
    kept, and the rig time this run spent measuring it (0: reused from the file). The twin's
    own modes need no record (no attribute)."""
    from ..rig.identification import IdentifiedModes

    if not isinstance(rig, IdentifiedModes) or rig.identification is None:
        return {}
    doc = dict(rig.identification.to_dict(), record=str(rig.identification_path), spent_s=float(rig.identification_s or 0.0))
    return {"identification": json.dumps(doc)}


class UnexpectedFault(UserError):
    """An exception hbtest did not expect stopped the run (its store is marked interrupted with
    the reason); the CLI prints one line and exits 3."""

    exit_code = 3


def _close(rig) -> str:
    """Close the rig (safe state first) with SIGINT/SIGTERM held until the outputs are off; a
    rig that cannot be reached any more is reported, not raised (its own watchdog ramps it
    down): :func:`hbtest.rig.safe_stop.close_rig_safely`."""
    from ..rig.safe_stop import close_rig_safely

    return close_rig_safely(rig)


def _stepped(cfg: SweepConfig, store: RunStore, runner, write, say):
    """The frequency grid, point after point (continuation ``stepped``): each unfinished slot
    at its (applied) frequency and force level, starting from the previous solution
    (:class:`hbtest.sweep.stepped.FamilyRunner`). Returns the stop of ``write`` (status, cause,
    reason) or None."""
    done = store.done()
    todo = [i for i in range(store.n_points) if not done[i]]
    carry = runner.seed(todo[0]) if todo else runner.loop.new_carry()
    for n, i in enumerate(todo, 1):
        out, carry = runner.run(i, carry)
        stop = write(i, out, n, len(todo))
        if stop:
            return stop
    return None


def _trace(cfg: SweepConfig, store: RunStore, runner, write, say):
    from .arclength.runner import trace_into_store

    return trace_into_store(cfg, store, runner.loop, write, say)


def _grid_slots(cfg: SweepConfig, plan) -> np.ndarray:
    return plan.applied_hz  # the grid of every force level, a point on a mains multiple moved off it


def _open_slots(cfg: SweepConfig, plan) -> np.ndarray:
    return np.full(cfg.sweep.max_points, np.nan)


#: how the curve is traced, by ``sweep.continuation``: (the store's slot frequencies from the
#: config and the mains plan — NaN for a slot whose frequency is written as traced —, the
#: driver running the unfinished points: ``driver(cfg, store, runner, write, say)``;
#: ``write(slot, outcome, n, of)`` records a point and returns a stop (status, cause, reason)
#: or None)
CONTINUATION_PATHS = {
    "stepped": (_grid_slots, _stepped),
    "arclength": (_open_slots, _trace),
}


def _design(cfg: SweepConfig, store: RunStore, runner, write, say):
    from .strategy import run_design

    return run_design(cfg, store, runner.loop, write, say)


def _gridded(cfg: SweepConfig) -> bool:
    """The sweep runs the file's frequency grid (not an arclength trace or an adaptive strategy)."""
    return cfg.sweep.continuation == "stepped" and cfg.sweep.strategy == "grid"


def _path(cfg: SweepConfig):
    """The (slots, driver) pair of a sweep: an adaptive ``sweep.strategy`` (:mod:`hbtest.sweep.strategy`,
    open slots) or its continuation's (:data:`CONTINUATION_PATHS`)."""
    return (_open_slots, _design) if cfg.sweep.strategy != "grid" else CONTINUATION_PATHS[cfg.sweep.continuation]


def _execute(cfg: SweepConfig, store: RunStore, rig, progress) -> str:
    """Run the unfinished points of ``store`` on the open ``rig``. Returns the final status;
    raises RigFault / StoreWriteError / KeyboardInterrupt after marking the store."""
    say = progress or (lambda *_: None)
    ns = cfg.numerical.numerical_substructure()  # linear, or nonlinear elements by AFT harmonic balance
    F = cfg.excitation.force_vector(ns)
    desc = rig.describe()
    requested, notes = _requested(cfg, store, desc)
    run = _RunState()
    t_wall = time.monotonic()
    store.set_status("running", rig_reported_identity=desc.identity, stop_cause="", stop_message="")
    policy = _Stop(progress)
    try:
        with _signals(policy), store.writing_behind():  # the points written on the store's writer thread
            write = _PointWriter.start(cfg, store, rig, ns, F, desc, requested, notes, policy, progress, run)
            stop = _path(cfg)[1](cfg, store, write.runner, write, say)
        run.status, run.cause, run.reason = stop or ("completed", "", "")
    except SlotWriteError as e:  # a point's write failed on the writer thread (seen by a read between points, or on leaving)
        _store_failed(store, run, e.index, e)
    except (InstrumentError, LimitExceeded) as e:
        run.status, run.cause = "interrupted", "rig"
        run.reason = f"{e}{_close(rig)}"
        raise RigFault(f"{run.reason}; the store {store.path} is resumable once the rig is back: hbtest resume {store.path}") from None
    except KeyboardInterrupt as e:
        run.status, run.cause = "interrupted", "signal"
        run.reason = ("stopped by SIGTERM" if isinstance(e, Terminated) else "stopped by Ctrl+C during a point") + _close(rig)
        raise
    except UserError as e:
        if run.cause != "store":  # a store write marked itself; anything else mid-run is marked here
            run.status, run.cause, run.reason = "interrupted", "error", f"{e}{_close(rig)}"
        raise
    except Exception as e:  # noqa: BLE001 - a fault of hbtest itself: one line, the store resumable
        run.status, run.cause, run.reason = "interrupted", "error", f"unexpected {type(e).__name__}: {e}{_close(rig)}"
        raise UnexpectedFault(f"{run.reason}; the store {store.path} is interrupted and resumable: hbtest resume {store.path}") from None
    finally:
        try:
            store.set_status(run.status, wall_seconds=round(time.monotonic() - t_wall, 3), stop_cause=run.cause,
                             stop_message=run.reason, **_rig_counters(rig), **_rig_identification(rig))
        except OSError:
            pass  # the disk refused even the status; the done flags still tell what is finished
    return run.status


def _store_failed(store: RunStore, run: "_RunState", i: int, e: OSError):
    """Mark the run stopped by the store and raise the one-line StoreWriteError: the write of
    point ``i`` failed (on the writer thread: :class:`~hbtest.store.SlotWriteError` names it)."""
    f = float(store.frequencies_hz[i])
    run.status, run.cause, run.reason = "interrupted", "store", f"cannot write point {i} ({f:g} Hz) to {store.path}: {e.strerror or e}"
    raise StoreWriteError(f"{store.path}: {run.reason.split(': ', 1)[-1]}; the run stopped, free the space and `hbtest resume {store.path}`") from None


@dataclass
class _RunState:
    """How the run ends: ``status`` (a store status), ``cause`` and ``reason`` (stored as
    ``stop_cause`` / ``stop_message``); a failed store write marks itself here."""

    status: str = "failed"
    cause: str = ""
    reason: str = ""


def _requested(cfg: SweepConfig, store: RunStore, desc) -> tuple[np.ndarray, list[str]]:
    """(frequency the sweep file asked for, note of the mains plan) of every slot (NaN and ""
    for an arclength trace's open slots)."""
    from ..design import plan_mains

    freqs = store.frequencies_hz  # as applied (a point moved off a mains multiple; NaN: an open arclength slot)
    if not _gridded(cfg):
        return np.full(freqs.size, np.nan), [""] * freqs.size
    plan = plan_mains(cfg, desc.sensors)
    notes = [n if np.isclose(a, f, rtol=1e-12) else "" for n, a, f in zip(plan.notes, plan.applied_hz, freqs)]
    return cfg.sweep.frequencies_hz, notes


class _PointWriter:
    """Writes each finished point (the path's ``write(i, outcome, n, of)``): the stop explained,
    the exact reference, the record, the event; returns why the sweep stops, or None."""

    def __init__(self, cfg, store, rig, ns, desc, runner, reference, trace_ref, requested, notes, policy, say, run):
        self.cfg, self.store, self.rig, self.ns, self.desc, self.runner = cfg, store, rig, ns, desc, runner
        self.reference, self.trace_ref, self.requested, self.notes = reference, trace_ref, requested, notes
        self.policy, self.say, self.run = policy, say, run

    @classmethod
    def start(cls, cfg, store, rig, ns, F, desc, requested, notes, policy, progress, run) -> "_PointWriter":
        """The writer of this run, its references set up and the start announced."""
        from .stepped import FamilyRunner

        say = progress or (lambda *_: None)
        done = store.done()
        # the twin's exact reference of the emulated structure (linear closed form, or
        # harmonic balance of the joined nonlinear structure continued along the sweep)
        reference = rig.sweep_reference(ns) if isinstance(rig, ExactReference) else None
        # force levels, active harmonics (auto), sync metrics: hbtest.sweep.stepped
        runner = FamilyRunner(cfg, store, rig, ns, F, PointSettings.from_config(cfg), progress)
        trace_ref = None
        if not _gridded(cfg) and reference is not None:
            from .arclength.reference import TraceReference

            # an arclength trace turns at folds: its reference follows the measured branch
            trace_ref = TraceReference(rig.ps_substructure, ns, F) if TraceReference.applies(rig, ns) else None
        say(RunStarted(cfg.name, str(store.path), desc.identity, cfg.solver.profile, int((~done).sum()), done.size, store.attrs.get("seed")))
        freqs = store.frequencies_hz
        for i in np.flatnonzero(~done):
            if _gridded(cfg) and freqs[i] != requested[i]:
                say(PointMoved(int(i), float(requested[i]), float(freqs[i]), notes[i]))
            elif notes[i]:
                say(Notice(f"warning: point {i + 1}: {notes[i]}"))
        return cls(cfg, store, rig, ns, desc, runner, reference, trace_ref, requested, notes, policy, say, run)

    def __call__(self, i: int, out, n: int, of: int):
        from ..design import explain_stop

        cfg, store, runner, run = self.cfg, self.store, self.runner, self.run
        f = float(out.frequency_hz)
        orders = np.asarray(runner.active)
        out = replace(out, message=explain_stop(out.message, out.reason, f, orders, self.desc.sensors,
                                                cfg.test.averaging_periods, [h.norm for h in out.history]))
        if self.trace_ref is not None:
            ref = self.trace_ref(f, orders, out.final.meas.displacement if out.final is not None else None)
        else:
            ref = self.reference(self.ns.substructure, runner.force_vector, f, orders) if self.reference is not None else None
        gridded = _gridded(cfg)
        rec = point_record(out, orders, runner.n_act, float(runner.amps[i]) if gridded else cfg.excitation.amplitude, ref,
                           n_ch=len(store.evaluation_channels) or None,
                           requested_hz=float(self.requested[i]) if gridded else None, note=self.notes[i])
        try:
            store.write_point(i, runner.finish(i, out, rec))
        except OSError as e:
            _store_failed(store, run, e.index if isinstance(e, SlotWriteError) else i, e)
        self.say(PointFinished(n, of, i, f, out.iterations, float((out.applied or out.final).norm) if out.final else float("nan"),
                               float(out.rig_periods), bool(out.converged), out.reason, out.message))
        stop_on = {"trip": cfg.sweep.on_trip, "overrange": cfg.sweep.on_overrange}.get(out.reason)
        if out.reason == "trip" and stop_on != "stop" and isinstance(self.rig, Trips):
            self.rig.clear_trip()  # the point is recorded as tripped; go on with the next
        if stop_on == "stop":
            return "interrupted", "rig", f"point at {f:g} Hz: {out.message} (sweep.on_{out.reason} = \"stop\")"
        if self.policy.requested:
            return "interrupted", "signal", "stopped by Ctrl+C after a finished point"
        return None


def _summary(store: RunStore, status: str, wall: float) -> RunFinished:
    ds = store.dataset()
    done, conv = _traced(ds)
    reasons = Counter(str(r) for r, d in zip(ds["stop_reason"].values, np.asarray(ds["done"].values, dtype=bool)) if d)
    a = store.attrs
    n = int(done.size) if not a.get("open_slots") else int(done.sum())
    return RunFinished(status, str(store.path), n, int(done.sum()), int(conv.sum()), dict(reasons), wall, str(a.get("stop_message", "")))


def _traced(ds):
    """(done, converged) flags of the run's points: every slot of a grid; of an arclength
    store (open slots) only the slots traced (an unused open slot is not a missing point)."""
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    if ds.attrs.get("open_slots"):
        return done[done], conv[done]
    return done, conv


def _finish(cfg, store: RunStore, rig, progress, plot):
    t0 = time.monotonic()
    try:
        status = _execute(cfg, store, rig, progress)
    finally:
        if rig is not None:
            _close(rig)
    if (cfg.output.plot if plot is None else plot) and status in ("completed", "interrupted"):
        from ..analysis.plot import bode_png

        png = bode_png(store.path)
        if progress:
            progress(PlotWritten(str(png)))
        from ..analysis.backbone import has_levels
        from ..analysis.plot import family_png

        if has_levels(store.dataset()):
            png = family_png(store.path)
            if progress:
                progress(PlotWritten(str(png)))
    if progress:
        progress(_summary(store, status, round(time.monotonic() - t0, 3)))
    return store.dataset()


def _open_rig(rig_cfg, seed):
    rig = open_rig(rig_cfg, seed=seed)
    return rig, _rig_seed(rig)


def run(cfg: SweepConfig, store_path=None, progress=None, overwrite: bool = False, seed=None, plot: bool | None = None,
        overrides=()):
    """Run a sweep into a new store (default: the sweep file's ``output.store``). Returns the
    store's dataset. Writes the Bode plot next to the store unless ``plot`` is False.
    ``progress``: a callable receiving :mod:`hbtest.events` events. ``overrides``: the ``--set``
    items ``cfg`` was loaded with (kept for resume). ``seed``: of a virtual rig (default: its
    file's); the seed in force is recorded in the store."""
    rig_cfg = load_rig(cfg.rig_path, cfg.rig_overrides)
    check_run(cfg, rig_cfg)
    from ..design import preflight

    plan, design_lines = preflight(cfg, rig_cfg)  # before the rig runs: mains decisions, predicted clips
    if progress:
        for line in design_lines:
            progress(Notice(line))
    path = Path(store_path) if store_path is not None else cfg.output.store
    if not str(store_path if store_path is not None else path).strip():
        raise UserError("--store: empty path; give a directory name such as runs/NAME.zarr")
    _prepare_parent(path)
    with StoreLock(path) as lock:
        if lock.taken_over and progress:
            progress(LockTakenOver(str(path), lock.taken_over))
        rig, used_seed = _open_rig(rig_cfg, seed)
        try:
            from .stepped import slot_amplitudes, slot_legs, store_orders

            orders = store_orders(cfg.sweep, rig_cfg.sample_rate_hz)
            store = RunStore.create(
                path,
                frequencies_hz=_path(cfg)[0](cfg, plan),
                harmonics=orders,
                actuators=rig_cfg.actuators,
                max_iterations=history_capacity(cfg.test.max_iterations, len(rig_cfg.actuators), orders) - 1,
                legs=slot_legs(cfg.sweep) if _gridded(cfg) else None,
                force_levels=slot_amplitudes(cfg.sweep, cfg.excitation.amplitude) if cfg.sweep.force_levels else None,
                sync=True,
                harmonic_active=True,
                attrs=_store_attrs(cfg, rig_cfg, overrides, used_seed),
                overwrite=overwrite,
                reference=isinstance(rig, ExactReference),
                raw_records=_raw_capacity(cfg, rig_cfg),
                channels=rig_cfg.sensors.channel_names,
                design=cfg.sweep.strategy != "grid",
            )
        except BaseException:
            _close(rig)
            raise
        return _finish(cfg, store, rig, progress, plot)


def _raw_capacity(cfg: SweepConfig, rig_cfg):
    """The store's raw-record allocation, or None (``output.raw_records``; default on for
    hardware rigs, off for the twin)."""
    want = cfg.output.raw_records if cfg.output.raw_records is not None else rig_cfg.kind != "virtual"
    if not want:
        return None
    from ..analysis.reduce import raw_record_capacity

    return raw_record_capacity(rig_cfg.sensors, (cfg.sweep.start_hz, cfg.sweep.stop_hz), 4 * cfg.test.averaging_periods, rig_cfg.sample_rate_hz)


def _prepare_parent(path: Path) -> None:
    """The store's folder exists and is a writable directory (for the lock file beside it)."""
    import os

    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is a file, not a run store; choose another --store path")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path.parent}: cannot create the store's directory ({e.strerror or e})") from None
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"{path.parent}: directory is not writable; cannot write the run store {path.name}")


def resume(store_path, progress=None, seed=None, plot: bool | None = None):
    """Finish an interrupted or killed run: redo only the points not marked done, with the
    sweep and rig definitions and the seed kept verbatim in the store. Refuses (one line) a
    store another process writes, an older store schema or hbtest release, a read-only store,
    or a rig that reports another identity than the one the store was measured on."""
    path = Path(store_path)
    store = RunStore.open(path)
    store.check_resumable()
    with StoreLock(path) as lock:
        if lock.taken_over and progress:
            progress(LockTakenOver(str(path), lock.taken_over))
        a = store.attrs
        try:
            cfg = load_sweep(a["sweep_path"], a.get("overrides", ()), text=a["sweep_text"])
            rig_cfg = load_rig(a["rig_path"], a.get("rig_overrides", ()), text=a["rig_text"])
        except KeyError as e:
            raise UserError(f"{store_path}: not a store written by 'hbtest sweep' (missing attribute {e})") from None
        from ..design import plan_mains
        from .stepped import store_orders

        orders = store_orders(cfg.sweep, rig_cfg.sample_rate_hz)
        store.check_compatible(
            # a store written before the mains plan (no point notes) ran its grid as asked
            frequencies_hz=(_path(cfg)[0](cfg, plan_mains(cfg, rig_cfg.sensors))
                            if "frequency_requested" in store.variables or not _gridded(cfg) else cfg.sweep.frequencies_hz),
            harmonics=orders, actuators=rig_cfg.actuators,
            max_iterations=history_capacity(cfg.test.max_iterations, len(rig_cfg.actuators), orders) - 1,
        )
        stored_seed = a.get("seed")
        rig, _ = _open_rig(rig_cfg, stored_seed if seed is None else seed)
        measured_on = a.get("rig_reported_identity")
        now = rig.describe().identity
        if measured_on and now != measured_on:
            _close(rig)
            raise UserError(f"{store_path}: measured on rig {measured_on!r}, but the rig now reports {now!r}; resume on the same rig")
        return _finish(cfg, store, rig, progress, plot)


def exit_code(ds) -> int:
    """The command's exit status for a finished run (see :data:`EXIT_CODES`)."""
    status = ds.attrs.get("status")
    if status == "completed":
        done, conv = _traced(ds)
        return EXIT_CODES["converged"] if bool(np.all(conv[done])) and done.all() else EXIT_CODES["not_converged"]
    if status == "interrupted":
        return EXIT_CODES.get(ds.attrs.get("stop_cause") or "signal", EXIT_CODES["signal"])
    return 1

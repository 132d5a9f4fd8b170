"""Terminal rendering of :mod:`hbtest.events` (the library emits events; commands print)."""

from __future__ import annotations

import sys

from ..events import (
    Event,
    LockTakenOver,
    Notice,
    PlotWritten,
    PointFinished,
    PointMoved,
    RunFinished,
    RunStarted,
    StepFinished,
    StepStarted,
    StopRequested,
)

__all__ = ["render", "printer"]


def render(ev: Event) -> str | None:
    """One or more lines for an event (None: nothing to show)."""
    if isinstance(ev, RunStarted):
        seed = f", seed {ev.seed}" if ev.seed is not None else ""
        return (
            f"hbtest: {ev.name}: {ev.n_todo} of {ev.n_total} points on rig '{ev.rig}', profile {ev.profile}{seed}, store {ev.store}\n"
            f"{'point':>7} {'f [Hz]':>9} {'iter':>5} {'|R| [mm]':>10} {'rig periods':>12} {'rig s':>7}  status"
        )
    if isinstance(ev, PointFinished):
        state = "converged" if ev.converged else f"NOT converged ({ev.reason}): {ev.message}"
        return (
            f"{ev.n:>3}/{ev.of:<3} {ev.frequency_hz:>9.4f} {ev.iterations:>5d} {ev.residual_norm * 1e3:>10.5f}"
            f" {ev.rig_periods:>12.1f} {ev.rig_periods / ev.frequency_hz:>7.1f}  {state}"
        )
    if isinstance(ev, StopRequested):
        return "\nhbtest: stopping now (SIGTERM)" if ev.immediate else "\nhbtest: stopping after this point (Ctrl+C again to end the point now; the outputs are ramped down either way)"
    if isinstance(ev, LockTakenOver):
        h = ev.holder
        return f"hbtest: note: {ev.store} was last written by pid {h.get('pid', '?')} on {h.get('host', '?')}, which is no longer running; taking it over"
    if isinstance(ev, PlotWritten):
        return f"hbtest: Bode plot {ev.path}"
    if isinstance(ev, RunFinished):
        bad = ev.n_done - ev.n_converged
        head = f"hbtest: {ev.status}: {ev.n_converged}/{ev.n_points} points converged"
        if ev.n_done < ev.n_points:
            head += f", {ev.n_points - ev.n_done} not run"
        if bad:
            why = ", ".join(f"{k} {v}" for k, v in sorted(ev.reasons.items()) if k != "converged")
            head += f"; {bad} NOT converged ({why})"
        if ev.message:
            head += f"; {ev.message}"
        return head + f"; store {ev.store}"
    if isinstance(ev, Notice):
        return f"hbtest: {ev.text}"
    if isinstance(ev, StepStarted):
        return f"hbtest: step {ev.index}/{ev.of} {ev.step}: at most {ev.bound_s:.0f} s of rig time{': ' + ev.text if ev.text else ''}"
    if isinstance(ev, StepFinished):
        return f"hbtest:   {ev.step} done in {ev.rig_s:.1f} s of rig time{': ' + ev.text if ev.text else ''}"
    if isinstance(ev, PointMoved):
        return f"hbtest: warning: point {ev.index + 1} runs at {ev.applied_hz:.6g} Hz instead of {ev.requested_hz:g} Hz: {ev.note}"
    return None


def printer(stream=None):
    """A ``progress`` callback printing rendered events (progress lines to stdout, stop
    notices to stderr)."""

    def show(ev: Event) -> None:
        line = render(ev)
        if line is None:
            return
        out = sys.stderr if isinstance(ev, (StopRequested, LockTakenOver)) else (stream or sys.stdout)
        print(line, file=out, flush=True)

    return show

"""The ``arclength`` path of a sweep (:data:`hbtest.sweep.runner.CONTINUATION_PATHS`): trace the
curve with :class:`~hbtest.sweep.arclength.HybridArclength` into the store's open slots, one
point per slot in trace order, and resume an interrupted trace from its last finished point.

Store: ``sweep.max_points`` open slots (frequency NaN until written); group attributes
``folds_hz`` (fold frequencies in the order met [Hz], updated as each fold is confirmed) and
``trace_finished`` (the trace left the band or stalled: nothing left to resume). A resumed
trace continues after the last finished slot in a row from the start: it re-measures the state
and the rig Jacobian there and takes the direction of the last secant.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ...events import Notice
from ...method import harmonics
from .continuation import HybridArclength
from .settings import ArclengthSettings

__all__ = ["settings_from", "trace_into_store"]


def settings_from(cfg) -> ArclengthSettings:
    """The step control a sweep file asks for (``sweep.arclength_*``, ``sweep.max_points``)."""
    sw = cfg.sweep
    return dataclasses.replace(ArclengthSettings(), initial_step=sw.arclength_step, min_step=sw.arclength_min_step,
                               max_step=sw.arclength_max_step, max_points=sw.max_points)


def trace_into_store(cfg, store, loop, write, say):
    """Run (or continue) the trace; ``write(slot, outcome, n, of)`` records a point (see
    :data:`hbtest.sweep.runner.CONTINUATION_PATHS`). Returns its stop, or None."""
    n_slots = store.n_points
    if store.attrs.get("trace_finished"):
        return None
    done = store.done()
    k = int(np.argmin(done)) if not done.all() else n_slots  # finished slots in a row
    if k >= n_slots:
        return None
    sw = cfg.sweep
    direction = -1 if sw.direction == "down" else 1
    tracer = HybridArclength(loop, (sw.start_hz, sw.stop_hz), direction, settings_from(cfg))
    folds = [float(f) for f in (store.attrs.get("folds_hz") or [])]
    orders = np.asarray(sw.harmonics)
    if k == 0:
        pt = tracer.start()
    else:
        last = [store.read_point(i) for i in range(max(0, k - 2), k)]
        V = [harmonics.pack(r.voltage, orders).reshape(-1) for r in last]
        tracer.resume(V, [r.frequency_hz for r in last], float(store.frequencies_hz[0]), n_folds=len(folds))
        pt = tracer.step()
    i = k
    while True:
        stop = write(i, pt.outcome, i - k + 1, n_slots - k)
        if pt.fold_hz is not None:
            folds.append(pt.fold_hz)
            store.set_attrs(folds_hz=folds)
            say(Notice(f"fold {len(folds)} at {pt.fold_hz:.4f} Hz (df/ds changed sign; slot {i})"))
        if tracer.finished:
            store.set_attrs(trace_finished=True)
        if stop:
            return stop
        if tracer.finished:
            return None
        if i + 1 >= n_slots:
            say(Notice(f"arclength trace stopped at {pt.outcome.frequency_hz:.4f} Hz: all {n_slots} slots used (sweep.max_points)"))
            store.set_attrs(trace_finished=True)
            return None
        i += 1
        pt = tracer.step()

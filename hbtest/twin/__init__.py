"""A virtual twin of the user's own rig, measured from the rig itself (``hbtest twin``).

``measure`` (:mod:`.measure`): zero-demand records, free decays, channel gains and lags, repeated
evaluations at fixed demands, through the :class:`hbtest.rig.Rig` protocol only, each step
announced with its bounded rig time and reported with the rig time it took. ``fit`` (:mod:`.fit`):
the statistics -> twin parameters with standard uncertainties. ``write`` (:mod:`.write`): a
``virtual`` rig file whose every fitted value carries a comment naming its measurement and
uncertainty. ``check`` (:mod:`.check`): the same statistics on two rigs, side by side.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..events import Notice, StepFinished, StepStarted
from .fit import Quantity, fit_channels, fit_modes, fit_quiet, fit_scatter
from .measure import (
    SETTLE_TIME_CONSTANTS,
    TwinSettings,
    measure_channels,
    measure_decays,
    measure_quiet,
    measure_scatter,
    settle_s,
)

__all__ = ["TwinSettings", "Quantity", "measure", "fit_record", "fit_mechanics", "STEPS", "bound_s"]

STEPS = ("quiet", "decays", "channels", "scatter")
#: the channel step's settling should reach exp(-14) (1e-6) of a transient (a phase of 1e-6 rad)
CHANNEL_SETTLE_TIME_CONSTANTS = 14.0


def bound_s(rig, settings: TwinSettings) -> float:
    """The most rig time [s] :func:`measure` takes on ``rig``."""
    return float(sum(settings.bounds_s(len(rig.describe().actuators)).values()))


def measure(rig, physical, settings: TwinSettings = TwinSettings(), progress=None) -> dict:
    """Every measurement of the twin on ``rig`` (``physical``: the rig file's ``[physical]``
    beam, for the channel fit): the JSON record (statistics per step, rig time per step)."""
    emit = progress or (lambda ev: None)
    desc = rig.describe()
    bounds = settings.bounds_s(len(desc.actuators))
    layout = desc.sensors
    record: dict = {"rig": desc.identity, "kind": desc.kind, "rig_time_s": {}}

    def step(i: int, name: str, run):
        emit(StepStarted(name, i + 1, len(STEPS), bounds[name]))
        t0 = rig.elapsed_s
        record[name] = run()
        record["rig_time_s"][name] = float(rig.elapsed_s - t0)
        emit(StepFinished(name, record["rig_time_s"][name]))

    step(0, "quiet", lambda: measure_quiet(rig, layout, settings))
    mains_hz = float(np.mean([r["mains_hz"] for r in record["quiet"]["records"]]))
    layout = layout.with_channels({}, mains_hz=mains_hz)
    step(1, "decays", lambda: measure_decays(rig, settings))
    slow = settle_s(record["decays"], replace(settings, scatter_settle_s=0.0, scatter_settle_max_s=np.inf)) / SETTLE_TIME_CONSTANTS
    if CHANNEL_SETTLE_TIME_CONSTANTS * slow > settings.channels.settle_s:
        emit(Notice(f"twin: the channel step settles {settings.channels.settle_s:g} s after each change of demand, less than"
                    f" {CHANNEL_SETTLE_TIME_CONSTANTS:g} time constants of the slowest measured mode ({slow:.2g} s): its gains and lags may carry the transient"))
    step(2, "channels", lambda: measure_channels(rig, physical, layout, settings))
    step(3, "scatter", lambda: measure_scatter(rig, layout, settings, settle_s(record["decays"], settings)))
    record["rig_time_s"]["total"] = float(sum(record["rig_time_s"].values()))
    return record


def fit_record(record: dict, layout, drift_prior_hz: float) -> tuple[dict, list[Quantity]]:
    """The twin's parameters (for :mod:`.write`) and every fitted :class:`Quantity` from a
    :func:`measure` record; ``layout``: the rig file's nominal sensors; ``drift_prior_hz``: the
    mains drift taken from the rig file or the reference (not identifiable within the command)."""
    factors, q = fit_channels(record["channels"], layout)
    quiet, qq = fit_quiet(record["quiet"], layout, factors, drift_prior_hz)
    scatter, qs = fit_scatter(record["scatter"])
    modes, qm = fit_modes(record["decays"])
    params = {"factors": factors, "quiet": quiet, "scatter": scatter, "modes": modes,
              "skews_us": {n: v["skew_us"] for n, v in record["channels"]["values"].items()}}
    return params, q + qq + qs + qm


def fit_mechanics(params: dict, quantities: list, spec, layout) -> tuple[dict, list[Quantity], dict] | None:
    """The template ``spec``'s clamp fitted to the measured modes of :func:`fit_record`
    (:func:`hbtest.twin.mechanics.fit_clamp`), or None when fewer modes were measured than
    the clamp has fitted values (the template's clamp is then kept, and the twin says so)."""
    from .mechanics import FITTED, fit_clamp

    modes = params["modes"]
    if len(modes) <= len(FITTED):
        return None
    qd = {q.key: q for q in quantities}
    uf = [qd[f"modes.{i + 1}.frequency_hz"].u or 0.0 for i in range(len(modes))]
    uz = [qd[f"modes.{i + 1}.damping_ratio"].u or 0.0 for i in range(len(modes))]
    return fit_clamp(spec, layout, modes, uf, uz)

"""Re-reduction (``hbtest reduce``): recompute a run's interface quantities from the raw sample
records of its final acquisition windows with another calibration, writing a new store.

What it gives: the interface displacement ``(u, theta)`` [m, rad], forces ``(T, M)`` [N, N m]
and their variances of the physical state each point's run ended in, reduced with the new
calibration (:func:`hbtest.sensors.measure_interface`), plus the compatibility residual
``U_P - U_N`` that state has under it. What it does not give: the hybrid solution a re-run
with the new calibration would converge to — the rig was driven to compatibility as the OLD
calibration measured it, so after a calibration change the state is not the hybrid solution
(``numerical_displacement`` is kept as stored; the residual shows how far off the state is).
Re-running the sweep is the remedy when the residual is above the tolerance.

The new store records both calibrations: ``sensor_layout`` (the new one, what the stored
interface quantities were reduced with), ``sensor_layout_original`` (the run's),
``calibration_record`` (the record applied) and ``reduced_from`` (the source store's path).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from ..errors import UserError
from ..sensors import FORCE_METHODS, SensorLayout, measure_interface
from .record import CalibrationRecord, apply_calibration

__all__ = ["ReducedPoint", "reduce_store", "raw_record_capacity", "RAW_RECORD_MARGIN"]

#: extra samples allocated per raw record beyond the longest window (rounding of fs / f)
RAW_RECORD_MARGIN = 8


def raw_record_capacity(layout, frequencies_hz, max_periods: int, sample_rate_hz: float) -> tuple:
    """``raw_records`` argument of :meth:`hbtest.store.RunStore.create` for a sweep whose
    acquisitions span at most ``max_periods`` periods: (channel names, samples of the longest
    window at the lowest frequency + :data:`RAW_RECORD_MARGIN`)."""
    f_min = float(np.min(np.asarray(frequencies_hz, dtype=float)))
    return tuple(layout.channel_names), int(np.ceil(max_periods * sample_rate_hz / f_min)) + RAW_RECORD_MARGIN


@dataclasses.dataclass(frozen=True)
class ReducedPoint:
    """One re-reduced point: slot index, frequency [Hz], the residual norm [m] of the state
    under the new calibration (displacement form, ``|U_P - U_N|`` over DOFs and harmonics)."""

    index: int
    frequency_hz: float
    residual_norm: float


def reduce_store(src, record: CalibrationRecord, out, *, method: str = "segment", reject_mains: bool | None = None,
                 overwrite: bool = False) -> list[ReducedPoint]:
    """Re-reduce every finished point of the store ``src`` that has a raw record, with the
    run's sensor layout calibrated by ``record``; write the store ``out``. ``method``: the
    force reconstruction (:data:`hbtest.sensors.FORCE_METHODS`); ``reject_mains``: default
    that of the run's solver profile. A store without raw records is a :class:`UserError`."""
    from ..point import get_profile
    from ..store import RunStore

    if method not in FORCE_METHODS:
        raise UserError(f"unknown force reconstruction {method!r}; use one of {', '.join(FORCE_METHODS)}")
    store = RunStore.open(src)
    if not store.raw_channels:
        raise UserError(f"{src}: the store has no raw records (the sweep ran without output.raw_records); nothing to re-reduce")
    attrs = dict(store.attrs)
    if not attrs.get("sensor_layout"):
        raise UserError(f"{src}: the store does not record its sensor layout (sensor_layout attribute); cannot re-reduce")
    original = SensorLayout.from_dict(attrs["sensor_layout"])
    layout = apply_calibration(original, record)
    if reject_mains is None:
        try:
            reject_mains = bool(get_profile(str(attrs.get("profile"))).reject_mains)
        except ValueError:  # an unknown profile: average the mains only
            reject_mains = False
    new_attrs = {k: v for k, v in attrs.items() if k not in ("hbtest_store", "schema_version", "status", "created_utc", "updated_utc", "finished_utc")}
    new_attrs.update(
        sensor_layout=json.dumps(layout.to_dict()),
        sensor_layout_original=attrs["sensor_layout"],
        calibration_record=json.dumps(record.to_dict()),
        reduced_from=str(store.path.resolve()),
        reduction_force_method=method,
        reduction_reject_mains=bool(reject_mains),
    )
    new = RunStore.create(out, frequencies_hz=store.frequencies_hz, harmonics=store.harmonics, actuators=store.actuators,
                          max_iterations=store.max_iterations, attrs=new_attrs, overwrite=overwrite, reference=store.has_reference,
                          raw_records=(store.raw_channels, store.raw_max_samples))
    orders = np.asarray(store.harmonics)
    done = store.done()
    result = []
    for i in range(store.n_points):
        if not done[i]:
            continue
        rec = store.read_point(i)
        acq = store.read_raw(i)
        if acq is None:
            continue
        meas = measure_interface(acq, layout, orders, method, reject_mains=reject_mains)
        resid = meas.displacement - rec.numerical_displacement
        norm = float(np.linalg.norm(resid))
        new.write_point(i, dataclasses.replace(
            rec, interface_displacement=meas.displacement, interface_force=meas.force,
            displacement_variance=meas.displacement_variance, force_variance=meas.force_variance,
            residual_norm=norm, raw_record=acq,
            message=(rec.message + "; " if rec.message else "") + f"re-reduced with {record.identification}",
        ))
        result.append(ReducedPoint(i, float(store.frequencies_hz[i]), norm))
    new.set_status(str(attrs.get("status", "completed")) if attrs.get("status") in ("completed", "interrupted", "failed") else "completed")
    return result

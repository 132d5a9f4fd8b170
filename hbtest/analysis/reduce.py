"""Re-reduction (``hbtest reduce``): recompute a run's results with another calibration, writing
a new store. Two modes, per point:

- **hybrid re-solution** (stores that keep every evaluation's raw channel coefficients,
  ``history_channel_coefficients``; every sweep of this hbtest): the hybrid solution a re-run
  of the sweep with the new calibration converges to, from an affine fit of the physical
  side over the point's evaluations (:mod:`hbtest.calibration.resolve`). The new store's
  ``voltage`` is the solved voltage, ``interface_*`` the fitted model there,
  ``numerical_displacement`` the numerical side's answer, ``converged`` whether the residual
  left is below the sweep's tolerance; the group attribute ``reduction`` lists per point the
  method (:data:`hbtest.calibration.resolve.RESOLVE_METHODS`), the evaluations used and the
  extrapolation ``|dV|`` / spread of the measured voltages.
- **final-window re-reduction** (older stores with raw records only): described below.

Final-window re-reduction gives the interface displacement ``(u, theta)`` [m, rad], forces ``(T, M)`` [N, N m]
and their variances of the physical state each point's run ended in, reduced with the new
calibration (:func:`hbtest.method.sensors.measure_interface`), plus the compatibility residual
``U_P - U_N`` that state has under it. What it does not give: the hybrid solution a re-run
with the new calibration would converge to — the rig was driven to compatibility as the OLD
calibration measured it, so after a calibration change the state is not the hybrid solution
(``numerical_displacement`` is kept as stored; the residual shows how far off the state is).
Re-running the sweep is the remedy when the residual is above the tolerance.

The new store records both calibrations: ``sensor_layout`` (the new one, what the stored
interface quantities were reduced with), ``sensor_layout_original`` (the source store's),
``calibration_record`` (the record applied), ``calibration_record_original`` (the source's,
when it had one) and ``reduced_from`` (the source store's path).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from ..calibration.record import CalibrationRecord, apply_calibration
from ..errors import UserError
from ..method.sensors import FORCE_METHODS, SensorLayout, measure_interface

__all__ = ["ReducedPoint", "reduce_store", "raw_record_capacity", "RAW_RECORD_MARGIN", "REDUCTION_MODES"]

#: ``hybrid``: re-solved from every evaluation's channel coefficients; ``final_window``: the
#: final raw record re-reduced (the state, not the re-run's solution)
REDUCTION_MODES = ("hybrid", "final_window")

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
    """One re-reduced point: slot index, frequency [Hz], the residual norm [m] left under the
    new calibration (displacement form, ``|U_P - U_N|`` over DOFs and harmonics; ~0 for a
    re-solved point), the mode (:data:`REDUCTION_MODES`), and for a re-solved point the method
    (:data:`hbtest.calibration.resolve.RESOLVE_METHODS`), the evaluations used, ``|dV|`` [V]
    and the extrapolation ratio (NaN where not applicable)."""

    index: int
    frequency_hz: float
    residual_norm: float
    mode: str = "final_window"
    method: str = ""
    n_evaluations: int = 0
    voltage_change: float = float("nan")
    extrapolation: float = float("nan")
    extrapolated: bool = False


def _sweep_models(attrs):
    """(sweep config, numerical substructure, external force vector, PS model or None) from
    the store's verbatim texts, or None when the store has no sweep text."""
    from ..config import load_rig, load_sweep
    from ..method.substructure import Substructure

    if not attrs.get("sweep_text") or not attrs.get("sweep_path"):
        return None
    cfg = load_sweep(attrs["sweep_path"], attrs.get("overrides") or (), text=attrs["sweep_text"])
    ns = cfg.numerical.numerical_substructure()
    F = cfg.excitation.force_vector(ns)
    ps_beam = cfg.design_ps
    if ps_beam is None and attrs.get("rig_text") and attrs.get("rig_path"):
        try:
            ps_beam = load_rig(attrs["rig_path"], attrs.get("rig_overrides") or (), text=attrs["rig_text"]).physical
        except UserError:  # provenance text the current rig kinds cannot read: no PS model
            ps_beam = None
    ps = None
    if ps_beam is not None:
        ps = Substructure(ps_beam.build(left="free", right="free", x_offset=cfg.numerical.beam.length), ("u0", "theta0"))
    return cfg, ns, F, ps


def reduce_store(src, record: CalibrationRecord, out, *, method: str | None = None, reject_mains: bool | None = None,
                 overwrite: bool = False, ps_model_uncertainty: float | None = None) -> list[ReducedPoint]:
    """Re-reduce every finished point of the store ``src`` with the source's sensor layout
    calibrated by ``record``; write the store ``out``. Points with per-evaluation channel
    coefficients are re-solved (mode ``hybrid``), others with a raw record re-reduced from it
    (mode ``final_window``). ``method``: the force reconstruction
    (:data:`hbtest.method.sensors.FORCE_METHODS`; default the sweep's, else ``segment``);
    ``reject_mains``: for final-window re-reduction, default that of the run's solver profile;
    ``ps_model_uncertainty``: relative standard uncertainty of the PS model on the
    ``model_jacobian`` path (default :data:`hbtest.calibration.resolve.PS_MODEL_UNCERTAINTY`).
    A store with neither is a :class:`UserError`."""
    from ..calibration.resolve import PS_MODEL_UNCERTAINTY
    from ..store import RunStore

    if ps_model_uncertainty is None:
        ps_model_uncertainty = PS_MODEL_UNCERTAINTY

    store = RunStore.open(src)
    if not store.raw_channels and not store.evaluation_channels:
        raise UserError(f"{src}: the store has no raw records and no per-evaluation channel coefficients (written by an older hbtest"
                        " or without output.raw_records); re-run the sweep with this hbtest to re-reduce it")
    attrs = dict(store.attrs)
    if not attrs.get("sensor_layout"):
        raise UserError(f"{src}: the store does not record its sensor layout (sensor_layout attribute); cannot re-reduce")
    models = _sweep_models(attrs) if store.evaluation_channels else None
    if method is None:
        method = models[0].test.force_reconstruction if models else "segment"
    if method not in FORCE_METHODS:
        raise UserError(f"unknown force reconstruction {method!r}; use one of {', '.join(FORCE_METHODS)}")
    original = SensorLayout.from_dict(attrs["sensor_layout"])
    layout = apply_calibration(original, record)
    if reject_mains is None:
        reject_mains = _profile_rejects_mains(attrs)
    new_attrs = _reduced_attrs(attrs, store, layout, record, method, reject_mains, ps_model_uncertainty)
    warnings = []
    if store.evaluation_channels and tuple(layout.mains_frequencies) != tuple(original.mains_frequencies):
        warnings.append(f"the record changes the mains frequency ({original.mains_hz:g} -> {layout.mains_hz:g} Hz): the run's harmonic fits"
                        f" rejected {original.mains_hz:g} Hz and channel coefficients cannot be refitted, so the mains' leakage stays in"
                        " the re-solved points; re-run the sweep if it matters")
    new = RunStore.create(out, frequencies_hz=store.frequencies_hz, harmonics=store.harmonics, actuators=store.actuators,
                          max_iterations=store.max_iterations, attrs=new_attrs, overwrite=overwrite, reference="reference_interface_displacement" in store.variables,
                          raw_records=(store.raw_channels, store.raw_max_samples) if store.raw_channels else None,
                          channels=store.evaluation_channels or None)
    done = store.done()
    result = []
    for i in range(store.n_points):
        if not done[i]:
            continue
        rec = store.read_point(i)
        acq = store.read_raw(i)
        if models is not None and rec.history_channel_coefficients is not None:
            result.append(_resolve_slot(store, new, i, rec, acq, models, layout, record, method, ps_model_uncertainty))
        elif acq is not None:
            result.append(_rereduce_slot(store, new, i, rec, acq, layout, record, method, reject_mains))
    new.set_attrs(reduction=[dataclasses.asdict(p) for p in result], reduction_warnings=warnings)
    new.set_status(str(attrs.get("status", "completed")) if attrs.get("status") in ("completed", "interrupted", "failed") else "completed")
    return result


def _profile_rejects_mains(attrs: dict) -> bool:
    """Whether the run's solver profile rejects the mains in its harmonic fits."""
    from ..point import get_profile

    try:
        return bool(get_profile(str(attrs.get("profile"))).reject_mains)
    except ValueError:  # an unknown profile: average the mains only
        return False


def _reduced_attrs(attrs: dict, store, layout, record: CalibrationRecord, method: str, reject_mains: bool,
                   ps_model_uncertainty: float) -> dict:
    """The re-reduced store's attributes: the source's, with the new layout and the reduction's settings."""
    new_attrs = {k: v for k, v in attrs.items() if k not in ("hbtest_store", "schema_version", "status", "created_utc", "updated_utc", "finished_utc",
                                                              "calibration_record_original", "reduction")}
    new_attrs.update(
        sensor_layout=json.dumps(layout.to_dict()),
        sensor_layout_original=attrs["sensor_layout"],
        calibration_record=json.dumps(record.to_dict()),
        reduced_from=str(store.path.resolve()),
        reduction_force_method=method,
        reduction_reject_mains=bool(reject_mains),
        reduction_ps_model_uncertainty=float(ps_model_uncertainty),
    )
    if attrs.get("calibration_record"):
        new_attrs["calibration_record_original"] = attrs["calibration_record"]
    return new_attrs


def _resolve_slot(store, new, i: int, rec, acq, models, layout, record: CalibrationRecord, method: str,
                  ps_model_uncertainty: float) -> ReducedPoint:
    """Slot ``i`` re-solved from its per-evaluation channel coefficients (mode ``hybrid``)."""
    from ..calibration.resolve import resolve_point
    from ..point import NumericalSide

    f = float(store.frequencies_hz[i])
    orders = np.asarray(store.harmonics)
    cfg, ns, F, ps = models
    num = NumericalSide.build(ns, F, f, orders)
    r = resolve_point(voltages=rec.history_voltage, coefficients=rec.history_channel_coefficients, variance=rec.history_channel_variance,
                      channel_names=store.evaluation_channels, layout=layout, frequency_hz=f, orders=orders, method=method, num=num,
                      residual_form=cfg.test.residual, rotation_length=cfg.test.rotation_length, ps_model=ps,
                      ps_model_uncertainty=ps_model_uncertainty)
    note = f"re-solved with {record.identification}: {r.method} over {r.n_evaluations} evaluation(s)"
    if np.isfinite(r.extrapolation):
        note += f", |dV| = {r.voltage_change:.3g} V ({r.extrapolation:.2g} x the measured spread)"
    if r.extrapolated:
        note += " — EXTRAPOLATED beyond the measured voltages"
    new.write_point(i, dataclasses.replace(
        rec, interface_displacement=r.displacement, interface_force=r.force, numerical_displacement=r.numerical_displacement,
        voltage=r.voltage, interface_displacement_variance=r.displacement_variance, interface_force_variance=r.force_variance,
        residual_norm=r.residual_norm, converged=bool(r.method != "state_only" and r.residual_norm <= cfg.test.tolerance),
        raw_record=acq, message=note,
    ))
    return ReducedPoint(i, f, r.residual_norm, "hybrid", r.method, r.n_evaluations, r.voltage_change, r.extrapolation, r.extrapolated)


def _rereduce_slot(store, new, i: int, rec, acq, layout, record: CalibrationRecord, method: str,
                   reject_mains: bool) -> ReducedPoint:
    """Slot ``i`` re-reduced from its raw final window (mode ``final_window``)."""
    meas = measure_interface(acq, layout, np.asarray(store.harmonics), method, reject_mains=reject_mains)
    resid = meas.displacement - rec.numerical_displacement
    norm = float(np.linalg.norm(resid))
    new.write_point(i, dataclasses.replace(
        rec, interface_displacement=meas.displacement, interface_force=meas.force,
        interface_displacement_variance=meas.displacement_variance, interface_force_variance=meas.force_variance,
        residual_norm=norm, raw_record=acq,
        message=(rec.message + "; " if rec.message else "") + f"re-reduced with {record.identification}",
    ))
    return ReducedPoint(i, float(store.frequencies_hz[i]), norm)

"""Sensor calibration: versioned calibration records (:mod:`.record`) that replace a
rig file's nominal sensor values for the reduction, and procedures a lab runs on its rig
through the :class:`hbtest.rig.Rig` protocol (:mod:`.procedures`: mains frequency from a
zero-demand record; channel gain and lag relative to the reference laser from the physical
substructure's beam model). ``hbtest calibrate RIGFILE`` runs them and writes a record; a rig
file uses it with ``[sensors] calibration = "record.json"``. ``hbtest reduce`` re-solves a run with
another record (:mod:`.reduce`, :mod:`.resolve`).

Units: as the rig file keys the values replace (``scale_per_v`` per V, ``skew_us`` µs,
``mains_hz`` Hz); uncertainties are standard uncertainties (one sigma) in the same units.
"""

from __future__ import annotations

from datetime import datetime, timezone

from .procedures import (
    PROCEDURES,
    ChannelSettings,
    MainsSettings,
    ProcedureResult,
    beam_strain_per_motion,
    calibrate_channels,
    calibrate_mains,
)
from .record import (
    CALIBRATION_VERSION,
    CHANNEL_VALUES,
    CalibrationRecord,
    apply_calibration,
    load_calibration,
    save_calibration,
)
from .resolve import RESOLVE_METHODS, Resolved, resolve_point
from .uncertainty import calibration_perturbations

__all__ = [
    "CALIBRATION_VERSION",
    "CHANNEL_VALUES",
    "CalibrationRecord",
    "apply_calibration",
    "load_calibration",
    "save_calibration",
    "PROCEDURES",
    "ProcedureResult",
    "MainsSettings",
    "ChannelSettings",
    "calibrate_mains",
    "calibrate_channels",
    "beam_strain_per_motion",
    "run_calibration",
    "combine",
    "calibration_perturbations",
    "RESOLVE_METHODS",
    "Resolved",
    "resolve_point",
]


def combine(results, rig_identity: str, date_utc: str | None = None) -> CalibrationRecord:
    """One :class:`CalibrationRecord` from procedure results (later results win per value)."""
    values: dict = {}
    unc: dict = {}
    details: dict = {}
    for r in results:
        for tgt, src in ((values, r.values), (unc, r.standard_uncertainty)):
            for k, v in src.items():
                if k == "channels":
                    for name, cv in v.items():
                        tgt.setdefault("channels", {}).setdefault(name, {}).update(cv)
                else:
                    tgt[k] = v
        details.update(r.details)
    date = date_utc or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return CalibrationRecord(date, tuple(r.procedure for r in results), rig_identity, values, unc, details)


def run_calibration(rig, physical, procedures=PROCEDURES, mains: MainsSettings = MainsSettings(),
                    channels: ChannelSettings = ChannelSettings(), date_utc: str | None = None) -> CalibrationRecord:
    """Run ``procedures`` (in the order of :data:`PROCEDURES`: the mains first, so the channel
    fits reject the calibrated mains) on ``rig`` and combine them into one record."""
    unknown = set(procedures) - set(PROCEDURES)
    if unknown:
        from ..errors import UserError

        raise UserError(f"unknown calibration procedure {sorted(unknown)[0]!r}; choose from {', '.join(PROCEDURES)}")
    desc = rig.describe()
    layout = desc.sensors
    results = []
    if "mains" in procedures:
        r = calibrate_mains(rig, layout, mains)
        results.append(r)
        layout = layout.with_channels({}, mains_hz=r.values["mains_hz"])
    if "channels" in procedures:
        results.append(calibrate_channels(rig, physical, layout, channels))
    return combine(results, desc.identity, date_utc)

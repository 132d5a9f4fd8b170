"""Calibration records: versioned JSON documents of calibrated sensor values and their standard
uncertainties, and how they replace a layout's nominal values for the reduction.

Document (``hbtest_calibration`` = :data:`CALIBRATION_VERSION`)::

    {"hbtest_calibration": 1, "date_utc": "2026-11-23T19:00:00Z",
     "procedure": ["mains", "channels"], "rig_identity": "...",
     "values": {"mains_hz": 50.2,
                "channels": {"g1": {"scale_per_v": 2.04e-05, "skew_us": 0.1}, ...}},
     "standard_uncertainty": {"mains_hz": 1e-05,
                "channels": {"g1": {"scale_per_v": 2e-09, "skew_us": 0.8}, ...}},
     "details": {...}}

Units are those of the rig file keys they replace: ``scale_per_v`` [physical unit per V],
``skew_us`` [µs], ``mains_hz`` [Hz]. A value absent from ``values`` keeps its nominal value.
``details`` is free-form (per-frequency gains and lags, the reference channel, settings).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError

__all__ = ["CALIBRATION_VERSION", "CHANNEL_VALUES", "CalibrationRecord", "load_calibration", "save_calibration", "apply_calibration"]

CALIBRATION_VERSION = 1
#: per-channel calibrated values -> (ChannelSpec field, factor from the record's unit to SI)
CHANNEL_VALUES = {"scale_per_v": ("scale", 1.0), "skew_us": ("skew", 1e-6)}


@dataclass(frozen=True)
class CalibrationRecord:
    """One calibration: ``values`` and ``standard_uncertainty`` as in the module docstring."""

    date_utc: str
    procedure: tuple
    rig_identity: str
    values: dict
    standard_uncertainty: dict
    details: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "hbtest_calibration": CALIBRATION_VERSION,
            "date_utc": self.date_utc,
            "procedure": list(self.procedure),
            "rig_identity": self.rig_identity,
            "values": self.values,
            "standard_uncertainty": self.standard_uncertainty,
            "details": self.details,
        }

    @property
    def identification(self) -> str:
        """A short label (procedures, rig, date) recorded in the layout it calibrates."""
        return f"{'+'.join(self.procedure)} on {self.rig_identity!r} at {self.date_utc}"

    @classmethod
    def from_dict(cls, doc: dict, source: str = "calibration") -> "CalibrationRecord":
        """Validate and build; every problem is a :class:`UserError` naming ``source`` and the field."""
        if not isinstance(doc, dict):
            raise UserError(f"{source}: not a calibration record (a JSON object expected)")
        ver = doc.get("hbtest_calibration")
        if ver != CALIBRATION_VERSION:
            raise UserError(f"{source}: hbtest_calibration: version {ver!r} not supported (this hbtest reads {CALIBRATION_VERSION})")
        for key in ("date_utc", "rig_identity"):
            if not isinstance(doc.get(key), str):
                raise UserError(f"{source}: {key}: missing or not a string")
        proc = doc.get("procedure")
        proc = (proc,) if isinstance(proc, str) else proc
        if not isinstance(proc, (list, tuple)) or not all(isinstance(p, str) for p in proc):
            raise UserError(f"{source}: procedure: must be a string or a list of strings")
        for part in ("values", "standard_uncertainty"):
            d = doc.get(part)
            if not isinstance(d, dict):
                raise UserError(f"{source}: {part}: missing or not an object")
            _check_values(d, f"{source}: {part}", uncertainty=part != "values")
        return cls(doc["date_utc"], tuple(proc), doc["rig_identity"], doc["values"], doc["standard_uncertainty"], dict(doc.get("details") or {}))


def _number(v, where: str, positive: bool = False) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise UserError(f"{where}: must be a finite number, got {v!r}")
    if positive and not v > 0:
        raise UserError(f"{where}: must be positive, got {v!r}")
    return float(v)


def _check_values(d: dict, where: str, uncertainty: bool) -> None:
    for key, v in d.items():
        if key == "mains_hz":
            _number(v, f"{where}.mains_hz", positive=not uncertainty)
        elif key == "channels":
            if not isinstance(v, dict):
                raise UserError(f"{where}.channels: must be an object (channel name -> values)")
            for name, vals in v.items():
                if not isinstance(vals, dict):
                    raise UserError(f"{where}.channels.{name}: must be an object")
                for k, x in vals.items():
                    if k not in CHANNEL_VALUES:
                        raise UserError(f"{where}.channels.{name}.{k}: unknown value (known: {', '.join(CHANNEL_VALUES)})")
                    _number(x, f"{where}.channels.{name}.{k}", positive=k == "scale_per_v" and not uncertainty)
        else:
            raise UserError(f"{where}.{key}: unknown value (known: mains_hz, channels)")


def load_calibration(path) -> CalibrationRecord:
    """Read a calibration record (JSON); a missing/invalid file is a :class:`UserError`."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except OSError as e:
        raise UserError(f"{p}: cannot read the calibration record: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{p}: not JSON: {e}") from None
    return CalibrationRecord.from_dict(doc, str(p))


def save_calibration(record: CalibrationRecord, path) -> Path:
    """Write ``record`` as indented JSON to ``path``; returns the path."""
    p = Path(path)
    p.write_text(json.dumps(record.to_dict(), indent=2) + "\n")
    return p


def apply_calibration(layout, record: CalibrationRecord):
    """The :class:`~hbtest.method.sensors.SensorLayout` with the record's values in place of the
    nominal ones (``layout.calibration`` = the record's identification). A channel the layout
    does not have is a :class:`UserError`."""
    vals = record.values
    changes = {}
    for name, cv in (vals.get("channels") or {}).items():
        if name not in layout.channel_names:
            raise UserError(f"calibration record ({record.identification}): channel {name!r} is not in the layout ({', '.join(layout.channel_names)})")
        changes[name] = {CHANNEL_VALUES[k][0]: float(x) * CHANNEL_VALUES[k][1] for k, x in cv.items()}
    extra: dict[str, object] = {"calibration": record.identification}
    if "mains_hz" in vals:
        extra["mains_hz"] = float(vals["mains_hz"])
    return layout.with_channels(changes, **extra)

"""Identification records: a rig's modes measured from its own free decays
(:func:`hbtest.rig.identify.free_decay_modes`), kept in a versioned JSON document beside the
rig file (as a calibration record is), reused across connections and sweeps, and measured
again when the rig reports another identity, the experiment's settings change, or the user
asks (``hbtest rig identify FILE``).

Document (``hbtest_identification`` = :data:`IDENTIFICATION_VERSION`)::

    {"hbtest_identification": 1, "date_utc": "2026-11-28T17:00:00Z",
     "rig": {"identity": "lab cantilever rig ...", "kind": "scpi",
             "instruments": {"generator": "Agilent Technologies,33522B,...", ...}},
     "experiment": {"voltage_v": 2.5, "band_hz": 150.0, "decay_s": 1.5, "orders": 24},
     "rig_time_s": 4.52,
     "modes": [{"re": -1.79, "im": 17.9, "frequency_hz": 2.86, "damping_ratio": 0.0995}, ...]}

``modes``: eigenvalues [rad/s], one per conjugate pair with Im >= 0, as
:meth:`hbtest.rig.capabilities.KnownModes.modes` gives them (``re``/``im`` exact: JSON numbers
round-trip a float64; ``frequency_hz`` = |lambda| / 2 pi and ``damping_ratio`` = -Re / |lambda|
are for the reader). ``rig``: :func:`rig_identity` of the rig measured — the rig file's
``[rig].identity`` and kind, and what the instruments say of themselves (``*IDN?`` and the
like). A record is *valid for* a rig when both agree and the experiment's settings are the rig
file's ``[identify]`` ones (:meth:`IdentificationRecord.valid_for`).

A rig kind offers :class:`~hbtest.rig.capabilities.KnownModes` when its rig file has an
``[identify]`` table by mixing in :class:`IdentifiedModes` (e.g. ``class
IdentifyingBoxRig(IdentifiedModes, BoxRig)``): its first :meth:`~IdentifiedModes.modes` call of
a connection reads the record when valid (no rig time), otherwise runs the experiment (rig
time, outputs left at zero demand) and writes the record. :func:`identify` is the same for any
rig and settings (``hbtest rig identify``, the twin command).
"""

from __future__ import annotations

import datetime
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config.section import IdentifySpec
from ..errors import UserError
from .identify import free_decay_modes

__all__ = ["IDENTIFICATION_VERSION", "INSTRUMENT_DETAILS", "IdentificationRecord", "rig_identity", "load_identification",
           "save_identification", "identify", "identification_on_file", "IdentifiedModes"]

IDENTIFICATION_VERSION = 1
#: the entries of :attr:`hbtest.rig.RigDescription.details` in which a rig kind reports what its
#: instruments say of themselves: ``idn`` (box, helic), ``generator`` and ``digitiser`` (scpi),
#: ``boards`` (redpitaya)
INSTRUMENT_DETAILS = ("idn", "generator", "digitiser", "boards")


def rig_identity(description) -> dict:
    """What identifies the rig a :class:`~hbtest.rig.RigDescription` describes: the rig file's
    identity and kind, and its instruments' own identities (:data:`INSTRUMENT_DETAILS`)."""
    details = description.details
    return {"identity": description.identity, "kind": description.kind,
            "instruments": {k: details[k] for k in INSTRUMENT_DETAILS if k in details}}


def _experiment(spec: IdentifySpec) -> dict:
    return {"voltage_v": spec.voltage_v, "band_hz": spec.band_hz, "decay_s": spec.decay_s, "orders": spec.orders}


@dataclass(frozen=True)
class IdentificationRecord:
    """One identification (module docstring): ``modes`` [rad/s] (complex, Im >= 0), the
    ``rig`` identity (:func:`rig_identity`), the ``experiment`` settings, its ``rig_time_s``."""

    date_utc: str
    rig: dict
    experiment: dict
    rig_time_s: float
    modes: np.ndarray

    def to_dict(self) -> dict:
        lam = np.asarray(self.modes, dtype=complex)
        return {"hbtest_identification": IDENTIFICATION_VERSION, "date_utc": self.date_utc, "rig": self.rig,
                "experiment": self.experiment, "rig_time_s": self.rig_time_s,
                "modes": [{"re": float(x.real), "im": float(x.imag), "frequency_hz": float(abs(x) / (2 * math.pi)),
                           "damping_ratio": float(-x.real / abs(x)) if x != 0 else 0.0} for x in lam]}

    def valid_for(self, identity: dict, spec: IdentifySpec) -> bool:
        """Measured on the rig ``identity`` (:func:`rig_identity`) with the settings of ``spec``."""
        return self.rig == identity and self.experiment == _experiment(spec)

    def summary(self) -> str:
        """One line: modes (frequency/damping ratio), date, rig time."""
        f = ", ".join(f"{abs(x) / (2 * math.pi):.3g} Hz" for x in self.modes)
        return f"{len(self.modes)} modes ({f}) measured {self.date_utc} in {self.rig_time_s:.2f} s of rig time"


def load_identification(path) -> IdentificationRecord:
    """Read an identification record; a missing, unreadable or other-version file is a
    :class:`~hbtest.errors.UserError` naming it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
        if doc.get("hbtest_identification") != IDENTIFICATION_VERSION:
            raise UserError(f"{path}: not an identification record of version {IDENTIFICATION_VERSION}")
        modes = np.array([complex(m["re"], m["im"]) for m in doc["modes"]], dtype=complex)
        return IdentificationRecord(str(doc["date_utc"]), dict(doc["rig"]), dict(doc["experiment"]), float(doc["rig_time_s"]), modes)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UserError(f"{path}: not a readable identification record ({type(e).__name__}: {e})") from None


def save_identification(record: IdentificationRecord, path) -> None:
    """Write ``record`` to ``path`` atomically (a temporary file renamed over it)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record.to_dict(), indent=1) + "\n")
    os.replace(tmp, path)


def identification_on_file(rig, spec: IdentifySpec) -> tuple[IdentificationRecord | None, str]:
    """The record at ``spec.record`` when it is valid for ``rig`` (else None), and why: one
    line for ``hbtest rig check``."""
    if not spec.record.exists():
        return None, f"none on file at {spec.record}: the first sweep measures it"
    try:
        rec = load_identification(spec.record)
    except UserError as e:
        return None, f"{e}: the first sweep measures it again"
    if rec.rig != rig_identity(rig.describe()):
        return None, f"{spec.record} was measured on another rig ({rec.rig}): the first sweep measures it again"
    if rec.experiment != _experiment(spec):
        return None, f"{spec.record} was measured with other [identify] settings ({rec.experiment}): the first sweep measures it again"
    return rec, f"valid, {spec.record}: {rec.summary()}"


def identify(rig, spec: IdentifySpec, again: bool = False) -> tuple[IdentificationRecord, float]:
    """The rig's identification: the record on file when valid for ``rig`` and ``again`` is
    false (no rig time), otherwise measured now by the free-decay experiment of ``spec`` (the
    outputs left at zero demand) and written to ``spec.record``. Returns the record and the rig
    time this call spent [s]."""
    if not again:
        rec, _ = identification_on_file(rig, spec)
        if rec is not None:
            return rec, 0.0
    t0 = rig.elapsed_s
    lam = free_decay_modes(rig, spec.voltage_v, spec.band_hz, spec.decay_s, spec.orders)
    spent = float(rig.elapsed_s - t0)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    rec = IdentificationRecord(date, rig_identity(rig.describe()), _experiment(spec), spent, np.asarray(lam, dtype=complex))
    save_identification(rec, spec.record)
    return rec, spent


class IdentifiedModes:
    """Mixin of a rig kind whose rig file has an ``[identify]`` table (``self.config``: its
    :class:`~hbtest.config.RigConfig`): offers :class:`~hbtest.rig.capabilities.KnownModes`.
    The first :meth:`modes` call of a connection (before the first demand of a sweep: counted in
    its rig time) reads the identification record or measures the rig (:func:`identify`).
    :attr:`identification_s`: the rig time it took [s] (0 when the record was reused)."""

    identification_s: float | None = None
    identification: IdentificationRecord | None = None

    @property
    def identification_path(self) -> Path:
        """Where the identification record is kept (``[identify] record``)."""
        return self.config.identify.record  # type: ignore[attr-defined]

    def modes(self) -> np.ndarray:
        if self.identification is None:
            self.identification, self.identification_s = identify(self, self.config.identify)  # type: ignore[attr-defined]
        return self.identification.modes

"""Shared pieces of the definition-file schema: a leaf module (imports only hbtest.errors,
numpy and the standard library) so that the config layer, the rig-kind registry and every
rig kind can use them without importing one another.

- :class:`SourceFile`: a definition file as read (path, verbatim text, SHA-256).
- :class:`Section`: typed, unit-aware access to one table of a parsed file; every key read is
  remembered and :meth:`Section.finish` reports unknown keys. Errors are
  :class:`~hbtest.errors.ConfigError` naming the file and the dotted key.
- :class:`BeamSpec` / :func:`read_beam`: a uniform Euler–Bernoulli beam table.
- :class:`RigCommon`: the fields every rig file shares (``[rig]``, ``[sensors]``,
  ``[physical]``), handed to a rig kind's parser (:mod:`hbtest.rig.registry`).
- :class:`IdentifySpec`: the optional ``[identify]`` table any rig kind may have (the
  free-decay identification of the rig's modes and where its record is kept).

Units: SI inside; a file field carries its unit in its name (``length_mm``,
``youngs_modulus_gpa``, ``sample_rate_hz``...) and is converted when read. Reading TOML text is
the job of :func:`hbtest.config.load_toml`, not of this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError

if TYPE_CHECKING:  # annotations only: the schema stays a leaf
    from ..method.sensors import SensorLayout

__all__ = ["SourceFile", "Section", "BeamSpec", "read_beam", "RigCommon", "IdentifySpec"]


@dataclass(frozen=True)
class SourceFile:
    """A definition file as read: path, verbatim text and its SHA-256 (for provenance)."""

    path: str
    text: str
    sha256: str


class Section:
    """Typed, unit-aware access to one table of a definition file. Every key read is
    remembered; :meth:`finish` reports the first unknown key."""

    def __init__(self, data: Any, source: str, prefix: str = ""):
        if not isinstance(data, dict):
            raise ConfigError(source, prefix or "(top level)", f"must be a table, got {type(data).__name__}")
        self.data, self.source, self.prefix = data, source, prefix
        self._used: set[str] = set()

    def key(self, name: str) -> str:
        return f"{self.prefix}.{name}" if self.prefix else name

    def error(self, name: str, problem: str) -> ConfigError:
        return ConfigError(self.source, self.key(name), problem)

    def has(self, name: str) -> bool:
        return name in self.data

    @property
    def used(self) -> frozenset[str]:
        """The keys read so far (present or not)."""
        return frozenset(self._used)

    def _get(self, name, default, required):
        self._used.add(name)
        if name in self.data:
            return self.data[name]
        if required:
            raise self.error(name, "missing")
        return default

    def value(self, name: str, default: Any = None, *, required: bool | None = None) -> Any:
        """The raw value of ``name`` as parsed (no type check; the caller validates and
        raises :meth:`error`). Required when no default is given."""
        return self._get(name, default, default is None if required is None else required)

    def sub(self, name: str, required: bool = True) -> "Section":
        v = self._get(name, {}, required)
        return Section(v, self.source, self.key(name))

    def subs(self, name: str) -> list["Section"]:
        """An array of tables (``[[name]]``)."""
        v = self._get(name, [], False)
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise self.error(name, "must be an array of tables")
        return [Section(x, self.source, f"{self.key(name)}[{i}]") for i, x in enumerate(v)]

    def number(self, name, default=None, *, required=None, scale=1.0, min=None, max=None, positive=False, nonnegative=False, integer=False) -> float:
        """A number (int/float, not bool) times ``scale`` (unit conversion). Bounds apply to
        the value as written in the file."""
        required = default is None if required is None else required
        v = self._get(name, default, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise self.error(name, f"must be a number, got {type(v).__name__} {v!r}")
        if integer and not (isinstance(v, int) or float(v).is_integer()):
            raise self.error(name, f"must be an integer, got {v!r}")
        if not math.isfinite(v):
            raise self.error(name, f"must be finite, got {v!r}")
        if positive and not v > 0:
            raise self.error(name, f"must be positive, got {v!r}")
        if nonnegative and v < 0:
            raise self.error(name, f"must not be negative, got {v!r}")
        if min is not None and v < min:
            raise self.error(name, f"must be >= {min}, got {v!r}")
        if max is not None and v > max:
            raise self.error(name, f"must be <= {max}, got {v!r}")
        return int(v) if integer else float(v) * scale

    def integer(self, name, default=None, **kw) -> int:
        return self.number(name, default, integer=True, **kw)

    def string(self, name, default=None, *, choices=None, required=None) -> str:
        required = default is None if required is None else required
        v = self._get(name, default, required)
        if v is None:
            return None
        if not isinstance(v, str):
            raise self.error(name, f"must be a string, got {type(v).__name__} {v!r}")
        if choices is not None and v not in choices:
            raise self.error(name, f"must be one of {', '.join(map(str, choices))}; got {v!r}")
        return v

    def boolean(self, name, default=None) -> bool:
        v = self._get(name, default, default is None)
        if not isinstance(v, bool):
            raise self.error(name, f"must be true or false, got {v!r}")
        return v

    def numbers(self, name, default=None, *, scale=1.0, length=None, positive=False, nonnegative=False, integer=False) -> tuple:
        v = self._get(name, default, default is None)
        if not isinstance(v, (list, tuple)):
            raise self.error(name, f"must be an array of numbers, got {v!r}")
        if length is not None and len(v) != length:
            raise self.error(name, f"must have {length} entries, got {len(v)}")
        out = []
        for i, x in enumerate(v):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
                raise self.error(name, f"entry {i} must be a finite number, got {x!r}")
            if integer and not float(x).is_integer():
                raise self.error(name, f"entry {i} must be an integer, got {x!r}")
            if positive and not x > 0:
                raise self.error(name, f"entry {i} must be positive, got {x!r}")
            if nonnegative and x < 0:
                raise self.error(name, f"entry {i} must not be negative, got {x!r}")
            out.append(int(x) if integer else float(x) * scale)
        return tuple(out)

    def path(self, name, base: Path, default=None) -> Path | None:
        v = self.string(name, default, required=default is None)
        if v is None:
            return None
        p = Path(v)
        return (p if p.is_absolute() else (base / p)).resolve()

    def finish(self) -> None:
        """Raise on the first key that was never read (unknown key)."""
        for k in self.data:
            if k not in self._used:
                raise self.error(k, "unknown key")


@dataclass(frozen=True)
class BeamSpec:
    """A uniform Euler–Bernoulli beam segment (SI units)."""

    length: float
    width: float
    thickness: float
    youngs_modulus: float
    density: float
    zeta_mass: float
    zeta_stiffness: float
    elements: int

    @property
    def EI(self) -> float:
        return self.youngs_modulus * self.width * self.thickness**3 / 12

    @property
    def rhoA(self) -> float:
        return self.density * self.width * self.thickness

    def build(self, left: str, right: str, x_offset: float = 0.0, extra_nodes=()):
        from ..method.structures import beam  # lazily: the schema stays a leaf

        return beam(
            self.length, self.width, self.thickness, self.youngs_modulus, self.density,
            n_elements=self.elements, zeta_mass=self.zeta_mass, zeta_stiffness=self.zeta_stiffness,
            left=left, right=right, x_offset=x_offset, extra_nodes=extra_nodes,
        )


#: the most FE elements one beam may have: dense solves and eigenproblems grow as n^3 (2000
#: elements took half an hour in ``hbtest design``), and elements much shorter than the
#: thickness leave Euler-Bernoulli theory and condition the eigenproblem badly
MAX_BEAM_ELEMENTS = 400


def _elements(sec: "Section", default: int) -> int:
    n = sec.integer("elements", default, min=1)
    if n > MAX_BEAM_ELEMENTS:
        raise sec.error("elements", f"{n} elements: at most {MAX_BEAM_ELEMENTS} per beam (dense FE solves grow as n^3 — 2000 took half an hour;"
                        " elements much shorter than the thickness leave Euler-Bernoulli theory)")
    return n


#: plausible ranges of beam fields, as written in the file: outside them the FE matrices
#: overflow or lose all precision (a 1e308 mm beam, a 1e-300 kg/m3 density)
BEAM_BOUNDS = {
    "length_mm": dict(positive=True, min=1e-3, max=1e5),
    "width_mm": dict(positive=True, min=1e-3, max=1e4),
    "thickness_mm": dict(positive=True, min=1e-3, max=1e4),
    "youngs_modulus_gpa": dict(positive=True, min=1e-6, max=1e4),
    "density_kg_m3": dict(positive=True, min=1.0, max=1e6),
    "zeta_mass_per_s": dict(nonnegative=True, max=1e4),
    "zeta_stiffness_s": dict(nonnegative=True, max=1.0),
}


def read_beam(sec: Section, default_from: BeamSpec | None = None, length_required: bool = True) -> BeamSpec:
    """Read a beam table: ``length_mm, width_mm, thickness_mm, youngs_modulus_gpa,
    density_kg_m3, zeta_mass_per_s, zeta_stiffness_s, elements``. Missing section/material keys
    fall back to ``default_from`` when given."""
    d = default_from

    def num(key, attr, scale, **kw):
        if d is not None and not sec.has(key):
            sec._used.add(key)
            return getattr(d, attr)
        return sec.number(key, scale=scale, **kw)

    length = sec.number("length_mm", scale=1e-3, **BEAM_BOUNDS["length_mm"]) if length_required or sec.has("length_mm") else None
    return BeamSpec(
        length=length,
        width=num("width_mm", "width", 1e-3, **BEAM_BOUNDS["width_mm"]),
        thickness=num("thickness_mm", "thickness", 1e-3, **BEAM_BOUNDS["thickness_mm"]),
        youngs_modulus=num("youngs_modulus_gpa", "youngs_modulus", 1e9, **BEAM_BOUNDS["youngs_modulus_gpa"]),
        density=num("density_kg_m3", "density", 1.0, **BEAM_BOUNDS["density_kg_m3"]),
        zeta_mass=num("zeta_mass_per_s", "zeta_mass", 1.0, **BEAM_BOUNDS["zeta_mass_per_s"]) if (d is not None or sec.has("zeta_mass_per_s")) else sec.number("zeta_mass_per_s", 0.0, **BEAM_BOUNDS["zeta_mass_per_s"]),
        zeta_stiffness=num("zeta_stiffness_s", "zeta_stiffness", 1.0, **BEAM_BOUNDS["zeta_stiffness_s"]) if (d is not None or sec.has("zeta_stiffness_s")) else sec.number("zeta_stiffness_s", 0.0, **BEAM_BOUNDS["zeta_stiffness_s"]),
        elements=_elements(sec, 20 if d is None else d.elements),
    )


@dataclass(frozen=True)
class RigCommon:
    """The fields every rig file shares, whatever its kind (SI units).

    identity: the rig's name for provenance (``[rig].identity``, default the file's stem);
    actuators: actuator names in the order of the voltage array (translation, rotation);
    sample_rate_hz [Hz]; voltage_limit_v [V] (peak demand per actuator);
    sensors: the :class:`~hbtest.method.sensors.SensorLayout` of ``[sensors]``;
    physical: the PS beam of the optional ``[physical]`` table (None when absent);
    path: the rig file (for error messages).
    """

    identity: str
    actuators: tuple[str, ...]
    sample_rate_hz: float
    voltage_limit_v: float
    sensors: "SensorLayout"
    physical: BeamSpec | None
    path: str


@dataclass(frozen=True)
class IdentifySpec:
    """The rig file's ``[identify]`` table (any kind that can stop its outputs and record):
    the free-decay experiment of :func:`hbtest.rig.identify.free_decay_modes` — multisine peak
    bound ``voltage_v`` [V], its band ``band_hz`` [Hz] spanned by ``orders`` harmonics (at most
    what the device generates: 16 on a HELIC-DAQ), ``decay_s`` [s] of record after each stop —
    and ``record``, the identification record (:mod:`hbtest.rig.identification`; the
    key ``record``, relative to the rig file, default ``<rig file stem>.modes.json`` beside
    it), read when valid for the rig and written when the rig is measured."""

    voltage_v: float
    record: Path
    band_hz: float = 150.0
    decay_s: float = 1.5
    orders: int = 24

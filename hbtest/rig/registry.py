"""The registry of rig kinds: what a rig file's ``[rig].kind`` may name, which top-level
tables of the file each kind owns, how it parses them and how it opens the rig.

A kind's module registers itself when imported (``KIND = register(RigKind(...))``);
:func:`get` imports the module named in :data:`KIND_MODULES` the first time a kind is asked
for, so a kind whose dependencies are missing (e.g. pyvisa for ``box``) costs nothing until a
rig file names it. This module imports only the standard library and :mod:`hbtest.errors`:
the config layer uses it without importing any rig implementation (no import cycle).

Contract of a kind (``hbtest.config.section`` for the types):

- ``parse(top: Section, common: RigCommon) -> spec``: reads ONLY the kind's own ``tables``
  (``top.sub(name)`` ... ``.finish()``) and returns a frozen dataclass; every problem is a
  :class:`~hbtest.errors.ConfigError` naming the file and the dotted key.
- ``open(rig_config: hbtest.config.RigConfig, seed: int | None) -> Rig``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

__all__ = ["RigKind", "KIND_MODULES", "KindUnavailable", "register", "get", "names"]

KIND_MODULES = {"virtual": "hbtest.rig.virtual", "box": "hbtest.rig.box", "scpi": "hbtest.rig.scpi", "helic": "hbtest.rig.helic",
                "redpitaya": "hbtest.rig.scpi.redpitaya_rig"}


@dataclass(frozen=True)
class RigKind:
    """One kind of rig. name: the rig file's ``[rig].kind`` value; tables: the top-level
    tables of the rig file this kind owns (e.g. ``("virtual",)``, ``("generator",
    "digitiser")``); parse, open: see the module docstring."""

    name: str
    tables: tuple[str, ...]
    parse: Callable
    open: Callable


class KindUnavailable(KeyError):
    """A known kind whose module cannot be imported (or does not register the kind).
    ``name``: the kind; ``reason``: the import error, as one line."""

    def __init__(self, name: str, reason: str):
        super().__init__(name)
        self.name, self.reason = name, reason

    def __str__(self) -> str:
        return f"rig kind {self.name!r} is not available: {self.reason}"


_KINDS: dict[str, RigKind] = {}


def register(kind: RigKind) -> RigKind:
    """Record ``kind`` under its name (called once at import of the kind's module) and return
    it. Registering a different kind under a name another module already registered is a
    programming error (ValueError); re-registering from the same module (a reload) replaces."""
    if not isinstance(kind, RigKind):
        raise TypeError(f"register() needs a RigKind, got {type(kind).__name__}")
    old = _KINDS.get(kind.name)
    if old is not None and old.open.__module__ != kind.open.__module__:
        raise ValueError(f"rig kind {kind.name!r} is already registered by {old.open.__module__}")
    _KINDS[kind.name] = kind
    return kind


def get(name: str) -> RigKind:
    """The kind called ``name``, importing its module (:data:`KIND_MODULES`) when it is not
    registered yet. Unknown name: KeyError; known but not importable: :class:`KindUnavailable`
    (a KeyError too) with the import error."""
    kind = _KINDS.get(name)
    if kind is not None:
        return kind
    module = KIND_MODULES.get(name)
    if module is None:
        raise KeyError(name)
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise KindUnavailable(name, f"{type(e).__name__}: {e}") from e
    kind = _KINDS.get(name)
    if kind is None:
        raise KindUnavailable(name, f"module {module} does not register it")
    return kind


def names() -> tuple[str, ...]:
    """Every known kind name (those of :data:`KIND_MODULES`, then any other registered)."""
    return tuple(KIND_MODULES) + tuple(n for n in _KINDS if n not in KIND_MODULES)

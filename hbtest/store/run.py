"""The run store: one zarr v3 store per sweep, pre-allocated, written one point at a time.

This is the one place that writes results (docs/architecture.md). Every variable is declared once,
in the schema table of :mod:`hbtest.store.variables`; this module allocates, writes and reads
from it. Everything else reads it through
:func:`open_run` / :meth:`RunStore.dataset` (lazy xarray, ``consolidated=False``).

Layout
------
Dimensions (sizes fixed at creation from the sweep definition):

- ``frequency`` — one slot per test point, in *test order* (``SweepSpec.frequencies_hz``;
  an arclength continuation allocates ``sweep.max_points`` *open* slots, NaN until their
  point is written, group attribute ``open_slots``: readers select ``done`` slots).
  The coordinate is the forcing frequency [Hz] and **may repeat** (an up-down sweep visits
  every frequency except the turning point twice). It is a non-unique index: select slots by
  position (``isel``) or through the companion coordinates ``point(frequency)`` (0..n-1, the
  test index, unique) and ``leg(frequency)`` (0 for the first monotone run, 1 after the first
  reversal of direction, ...). ``ds.sel(frequency=f)`` returns every visit of ``f``.
- ``dof`` = ``["u", "theta"]`` — interface DOFs: transverse displacement u [m], rotation
  θ [rad]; the conjugate forces are the shear T [N] and the moment M [N·m].
- ``harmonic`` — the harmonic orders solved (docs/method.md §0 coefficient convention,
  ``X_k = a_k - i b_k``; order 0 is the DC value, real).
- ``actuator`` — actuator names of the rig.
- ``iteration`` — 0..max_iterations (0 = the evaluation at the starting voltage).

Every data variable has ``frequency`` as its first dimension and is chunked with one slot per
chunk along it, so writing a point touches only that point's chunk files (zarr 3's local
store writes each file atomically, temp file + rename). Unwritten slots read as the zarr
``fill_value``: NaN (complex ``nan+nanj``) for floating/complex variables, ``-1`` for
integers, ``False`` for booleans, ``""`` for strings. A measured exact zero is stored and
reads back as 0, distinct from NaN. The authority on whether a slot holds a finished point is
``done``, written *after* the point's data: a process killed at any moment leaves every
finished point intact and at most one half-written point with ``done == False``, which a
resumed run simply rewrites (:meth:`RunStore.write_point`).

Raw records (schema 3, optional: a store created with ``raw_records``): dimensions
``channel`` (names) and ``sample``; ``raw_samples`` [V] (frequency, channel, sample) holds the
final acquisition window of each point (``raw_length`` valid samples from demand time
``raw_time_start`` at ``raw_sample_rate``, ``raw_periods`` whole periods), the input of
``hbtest reduce`` (:mod:`hbtest.analysis.reduce`). Stores of schema 1-2 have none and stay
readable.

Sync metrics and families (optional, absent from older stores): a store created with
``sync`` holds ``numerical_force`` (frequency, dof, harmonic) [N, N m], the NS counterpart of
``interface_force``, and ``sync_amplitude_ratio`` [1] / ``sync_phase_deg`` [deg] over
(frequency, ``variable`` = u, theta, T, M, harmonic) (:mod:`hbtest.method.ps_ns_sync`); with
``harmonic_active`` the boolean (frequency, harmonic) of the orders each point balanced
(``sweep.harmonics = "auto"``: the others are NaN); a stepped-force family has the per-slot
coordinate ``force_level`` [N] (:mod:`hbtest.sweep.stepped`).
Evaluation records (optional: a store created with ``channels``): dimension ``channel``
(names, the rig layout's order); ``history_channel_coefficients`` [V] and
``history_channel_variance`` [V^2] (frequency, iteration, channel, harmonic) hold the RAW
channel coefficients (before calibration and lag correction) of every evaluation of a point,
row for row with ``history_voltage``: what ``hbtest reduce`` needs to re-solve the hybrid
problem with another calibration (:mod:`hbtest.calibration.resolve`). Older stores have none.

Group attributes: ``hbtest_store`` (= ``"run"``), ``schema_version``, the verbatim sweep and
rig definition texts with their SHA-256 and paths, ``rig_identity``, ``overrides``,
``profile``, ``versions`` (python and package versions), ``git_commit`` / ``git_dirty``
(``None`` outside a git checkout), ``created_utc`` / ``updated_utc`` / ``finished_utc``
(ISO 8601, UTC) and ``status`` (``running | completed | interrupted | failed``).
Every variable carries ``units`` and ``long_name``; variables over ``dof`` carry ``units``
as ``"m | rad"`` (etc.) and the per-DOF list ``dof_units``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UserError
from .provenance import git_state, package_versions
from .provenance import jsonable as _jsonable
from .provenance import utc_now as _utc_now
from .slots import SlotWriter
from .variables import (
    DESIGN_VARIABLES,
    EVALUATION_VARIABLES,
    NONE_MEANS_ABSENT,
    RAW_VARIABLES,
    SYNC_VARIABLES,
    VARIABLES,
    PointRecord,
    Var,
)

__all__ = [
    "PointRecord",
    "RunStore",
    "open_run",
    "STATUSES",
    "DOFS",
    "SCHEMA_VERSION",
    "RAW_VARIABLES",
    "SYNC_VARIABLES",
    "EVALUATION_VARIABLES",
    "DESIGN_VARIABLES",
    "tolerance_from_attrs",
]

SCHEMA_VERSION = 3  # 2: stop_reason per point; 3: optional raw records (raw_*)
STATUSES = ("running", "completed", "interrupted", "failed")
DOFS = ("u", "theta")
_MARKER = "run"



def sweep_legs(f: np.ndarray) -> np.ndarray:
    """Sweep leg of each slot (int8): increments when the direction of the frequency steps
    reverses; equal neighbours and open slots (NaN) continue the leg."""
    leg = np.zeros(f.size, dtype=np.int8)
    direction = 0
    current = 0
    for i in range(1, f.size):
        step = np.sign(f[i] - f[i - 1])
        if step == 0 or not np.isfinite(step):  # open slots (NaN) continue the leg
            leg[i] = current
            continue
        if direction != 0 and step != direction:
            current += 1
        direction = step
        leg[i] = current
    return leg


def _is_store(path: Path) -> bool:
    meta = path / "zarr.json"
    if not meta.is_file():
        return False
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return doc.get("node_type") == "group" and doc.get("attributes", {}).get("hbtest_store") == _MARKER


def _check_layout(path: Path) -> None:
    """UserError unless every variable folder holds array metadata and every variable of the
    store's schema is present — checked before zarr reads the store (zarr on a broken
    layout raises deep errors and leaves asyncio noise on stderr)."""
    try:
        schema = int(json.loads((path / "zarr.json").read_text(encoding="utf-8"))["attributes"].get("schema_version", 1))
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{path}: damaged hbtest run store (unreadable group metadata)") from None
    present = set()
    for sub in sorted(p for p in path.iterdir() if p.is_dir()):
        meta = sub / "zarr.json"
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
            ok = isinstance(doc, dict) and doc.get("node_type") == "array"
        except (OSError, ValueError):
            ok = False
        if not ok:
            raise UserError(f"{path}: damaged hbtest run store (variable {sub.name!r}: its {meta.name} is missing or not array metadata)")
        present.add(sub.name)
    required = [v.name for v in VARIABLES if not v.may_lack and v.since <= schema]
    missing = [n for n in required + ["frequency", "harmonic", "actuator", "iteration"] if n not in present]
    if missing:
        raise UserError(f"{path}: damaged hbtest run store (missing variable(s) {', '.join(missing)})")


def tolerance_from_attrs(attrs: dict) -> tuple[float | None, str]:
    """(convergence tolerance, residual form) of a run: ``tolerance_m`` (or
    ``residual_tolerance``) from the attributes when the sweep code stored it, else ``[test] tolerance_mm`` of the verbatim
    sweep text with the run's ``--set`` overrides applied (default 0.02 mm, docs/method.md §2).
    Returns (None, form) when the sweep text cannot be read."""
    form = str(attrs.get("residual_form", "")) or None
    tol = attrs.get("tolerance_m", attrs.get("residual_tolerance"))
    doc = None
    text = attrs.get("sweep_text")
    if text:
        from ..config import load_toml

        try:
            doc, _ = load_toml("store", attrs.get("overrides") or [], text=text)
        except Exception:  # provenance text only: never fail a plot on it
            doc = None
    test = doc.get("test", {}) if isinstance(doc, dict) else {}
    if form is None:
        form = test.get("residual", "displacement") if isinstance(test, dict) else "displacement"
    if tol is None and doc is not None:
        mm = test.get("tolerance_mm", 0.02) if isinstance(test, dict) else 0.02
        try:
            tol = float(mm) * 1e-3
        except (TypeError, ValueError):
            tol = None
    return (None if tol is None else float(tol)), str(form)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchange two paths (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    platform or file system cannot."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    AT_FDCWD, RENAME_EXCHANGE = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) == 0


def _swap_in(new: Path, path: Path) -> None:
    """Put the complete store ``new`` at ``path`` and delete what was there. With an atomic
    exchange there is no moment without a store at ``path``; elsewhere the old store is first
    renamed aside (a crash between the two renames leaves it at ``.NAME.old-PID``)."""
    if _exchange(new, path):
        shutil.rmtree(new)
        return
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    os.rename(path, old)
    os.rename(new, path)
    shutil.rmtree(old)


def _history_rows(rec: PointRecord, history: list[Var]) -> int:
    """The number of evaluations ``rec`` holds: its history arrays (those given) agree on it."""
    rows = {v.name: int(np.shape(getattr(rec, v.name))[0]) for v in history if getattr(rec, v.name) is not None}
    if len(set(rows.values())) > 1:
        raise ValueError("history arrays disagree on the number of iterations: "
                         + ", ".join(f"{k} {n}" for k, n in rows.items()))
    return rows.get("history_voltage", 0)


def _checked_axes(frequencies_hz, harmonics, actuators, max_iterations):
    """(frequencies, harmonic orders, actuator names, iteration rows) of a new store, checked."""
    f = np.asarray(frequencies_hz, dtype=float)
    if f.ndim != 1 or f.size == 0 or np.any(np.isinf(f)) or np.any(f[np.isfinite(f)] <= 0):
        raise ValueError("frequencies_hz must be a non-empty 1-D array of positive frequencies (NaN: an open slot)")
    h = np.asarray(harmonics, dtype=int)
    if h.ndim != 1 or h.size == 0 or np.any(h < 0) or len(set(h.tolist())) != h.size:
        raise ValueError(f"harmonics must be distinct non-negative orders, got {harmonics!r}")
    act = [str(a) for a in actuators]
    if not act or len(set(act)) != len(act) or not all(act):
        raise ValueError(f"actuators must be distinct non-empty names, got {actuators!r}")
    if int(max_iterations) != max_iterations or max_iterations < 0:
        raise ValueError("max_iterations must be a non-negative integer")
    return f, h, act, int(max_iterations) + 1


def _creation_target(path: Path, overwrite: bool) -> tuple[Path, bool]:
    """(where to write the new store, whether it replaces one at ``path``); UserError naming the
    path when it cannot be written or holds something that is not a run store."""
    if not str(path) or str(path) in (".", ".."):
        raise UserError(f"{str(path)!r}: not a usable store path (give a directory name such as runs/NAME.zarr)")
    replace = False
    if path.exists() or path.is_symlink():
        if not overwrite:
            raise UserError(f"{path}: a run store already exists there (use --store PATH, `hbtest resume` it, or --overwrite)")
        if not (_is_store(path) or (path.is_dir() and not path.is_symlink() and not any(path.iterdir()))):
            raise UserError(f"{path}: exists and is not an hbtest run store; refusing to overwrite it")
        replace = True
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{path.parent}: cannot create the store's directory ({e.strerror or e})") from None
    if not path.parent.is_dir():
        raise UserError(f"{path.parent}: is not a directory; cannot create the run store {path.name}")
    if not os.access(path.parent, os.W_OK):
        raise UserError(f"{path.parent}: directory is not writable; cannot create the run store {path.name}")
    # with --overwrite the new store is written beside the old one and swapped in only
    # once it is complete: an interruption leaves the old store or the new one
    target = path.with_name(f".{path.name}.new-{os.getpid()}") if replace else path
    if replace and target.exists():
        shutil.rmtree(target)
    return target, replace


def _axis_coords(f, h, act, ni: int, legs) -> dict:
    """The coordinates every store has: frequency, point, leg, dof, harmonic, actuator, iteration."""
    leg_values = sweep_legs(f) if legs is None else np.asarray(legs, dtype=np.int64)
    if leg_values.shape != f.shape:
        raise ValueError("legs must give a leg for every frequency slot")
    return {
        "frequency": ("frequency", f, {"units": "Hz", "long_name": "forcing frequency, in test order (may repeat: index by position or by point)"}),
        "point": ("frequency", np.arange(f.size, dtype=np.int64), {"units": "1", "long_name": "test index of the slot"}),
        "leg": ("frequency", leg_values, {"units": "1", "long_name": "sweep leg: 0 first monotone run, +1 at each reversal of direction"}),
        "dof": ("dof", np.array(DOFS, dtype=object), {"long_name": "interface DOF: u transverse displacement [m], theta rotation [rad]"}),
        "harmonic": ("harmonic", h.astype(np.int64), {"units": "1", "long_name": "harmonic order k (X_k = a_k - i b_k)"}),
        "actuator": ("actuator", np.array(act, dtype=object), {"long_name": "actuator name"}),
        "iteration": ("iteration", np.arange(ni, dtype=np.int64), {"units": "1", "long_name": "solver iteration (0 = starting voltage)"}),
    }


def _option_coords(f, sizes: dict, *, raw_records, channels, sync: bool, force_levels) -> dict:
    """The coordinates of the optional dimensions (channel, variable, force_level), in that
    order; adds their sizes to ``sizes``."""
    coords: dict = {}
    if raw_records is not None:
        raw_names, raw_max = [str(c) for c in raw_records[0]], int(raw_records[1])
        if not raw_names or len(set(raw_names)) != len(raw_names) or raw_max < 1:
            raise ValueError(f"raw_records must be (distinct channel names, max_samples >= 1), got {raw_records!r}")
        sizes.update(channel=len(raw_names), sample=raw_max)
        coords["channel"] = ("channel", np.array(raw_names, dtype=object), {"long_name": "acquisition channel (raw records)"})
    if channels is not None:
        names = [str(c) for c in channels]
        if not names or len(set(names)) != len(names) or ("channel" in coords and list(coords["channel"][1]) != names):
            raise ValueError(f"channels must be distinct names (those of raw_records when both are given), got {channels!r}")
        sizes["channel"] = len(names)
        coords["channel"] = ("channel", np.array(names, dtype=object), {"long_name": "acquisition channel"})
    if sync:
        from ..method.ps_ns_sync import VARIABLES as _SYNC_VARIABLES

        sizes["variable"] = len(_SYNC_VARIABLES)
        coords["variable"] = ("variable", np.array(_SYNC_VARIABLES, dtype=object), {"long_name": "interface variable of the sync metrics: u [m], theta [rad], shear T [N], moment M [N m]"})
    if force_levels is not None:
        lv = np.asarray(force_levels, dtype=float)
        if lv.shape != f.shape or not np.all(np.isfinite(lv)) or np.any(lv <= 0):
            raise ValueError("force_levels must give a positive amplitude for every frequency slot")
        coords["force_level"] = ("frequency", lv, {"units": "N", "long_name": "external force amplitude of the slot's level (stepped-force family)"})
    return coords


def _allocation(n: int, sizes: dict, options: dict) -> tuple[dict, dict]:
    """(data variables, zarr encoding) of a new store: every table variable its options
    allocate, filled, one slot per chunk along ``frequency``."""
    data_vars, encoding = {}, {}
    for var in VARIABLES:
        if var.when is not None and not options[var.when]:
            continue
        shape = (n,) + tuple(sizes[d] for d in var.dims)
        # zero-stride template: nothing is allocated and, since it equals the fill value,
        # zarr writes no chunk for it
        template = np.broadcast_to(np.array(var.fill, dtype=var.dtype), shape)
        data_vars[var.name] = (("frequency",) + var.dims, template, var.attrs())
        encoding[var.name] = {"chunks": (1,) + shape[1:], "fill_value": var.fill}
    return data_vars, encoding


def consolidate(path) -> None:
    """Write the store's consolidated metadata (every array's metadata in the root
    ``zarr.json``), so ``xr.open_zarr(path)`` as a user types it opens it without a warning.
    The arrays are allocated whole when the store is created and never change shape, and a
    root attribute update keeps the consolidated entry: the metadata stays valid while points
    are written and on resume. Consolidated after creation and at every final status (a store
    written before consolidation gets it when a resume ends). zarr warns that consolidated
    metadata is not in the v3 specification yet; xarray reads it, and readers that do not fall
    back to the arrays' own metadata."""
    import warnings

    import zarr

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
        zarr.consolidate_metadata(str(path))


def _write_new(ds, encoding: dict, target: Path, replaces: Path | None) -> None:
    """Write the new store at ``target`` and, when it ``replaces`` one, swap it in there."""
    try:
        ds.to_zarr(str(target), mode="w-", zarr_format=3, consolidated=False, encoding=encoding)
        consolidate(target)
    except OSError as e:
        shutil.rmtree(target, ignore_errors=True)
        raise UserError(f"{replaces or target}: cannot write the run store ({e.strerror or e})") from None
    if replaces is not None:
        _swap_in(target, replaces)


def _root_attrs(attrs: dict, f: np.ndarray) -> dict:
    """The group attributes of a new store: marker, schema, provenance, status, then ``attrs``."""
    commit, dirty = git_state()
    now = _utc_now()
    root_attrs = {
        "hbtest_store": _MARKER,
        "schema_version": SCHEMA_VERSION,
        "title": "hbtest run",
        "status": "running",
        "created_utc": now,
        "updated_utc": now,
        "versions": package_versions(),
        "git_commit": commit,
        "git_dirty": dirty,
    }
    for key in ("sweep_text", "sweep_sha256", "sweep_path", "rig_text", "rig_sha256", "rig_path", "rig_identity", "profile"):
        root_attrs[key] = None
    root_attrs["overrides"] = []
    # NaN frequencies are open slots (arclength continuation): each gets its frequency
    # when its point is written (write_point)
    root_attrs["open_slots"] = bool(np.isnan(f).any())
    root_attrs.update(_jsonable(dict(attrs)))
    root_attrs["hbtest_store"] = _MARKER
    root_attrs["schema_version"] = SCHEMA_VERSION
    root_attrs.setdefault("status", "running")
    if root_attrs["status"] not in STATUSES:
        raise ValueError(f"status must be one of {STATUSES}")
    return root_attrs


class RunStore:
    """A run store on disk (see the module docstring for the schema).

    Create it once per run with :meth:`create`, reopen it (resume, analysis) with
    :meth:`open`. Only :meth:`write_point`, :meth:`set_status` and :meth:`set_attrs` write."""

    def __init__(self, path: Path):
        self.path = Path(path)
        import zarr

        g: Any = zarr.open_group(str(self.path), mode="r")  # zarr's types do not tell arrays from groups
        keys = set(g.array_keys())
        self.frequencies_hz = np.asarray(g["frequency"][...], dtype=float)
        self.harmonics = tuple(int(k) for k in g["harmonic"][...])
        self.actuators = tuple(str(a) for a in g["actuator"][...])
        self.max_iterations = int(g["iteration"].shape[0]) - 1
        self.schema_version = int(g.attrs.get("schema_version", 1))
        #: open slots (NaN frequencies, written with their points): set when the store is created
        self.open_slots = bool(g.attrs.get("open_slots", False))
        #: the points' writes (on a writer thread within :meth:`writing_behind`); every
        #: reader waits for them (:meth:`flush`)
        self._slots = SlotWriter(self.path)
        #: the store's arrays: an optional variable (``Var.may_lack``) is written where it is here
        self.variables = frozenset(keys)
        channels = tuple(str(c) for c in g["channel"][...]) if "channel" in keys else ()
        self.raw_channels = channels if "raw_samples" in keys else ()
        self.raw_max_samples = int(g["raw_samples"].shape[-1]) if self.raw_channels else 0
        self.evaluation_channels = channels if set(EVALUATION_VARIABLES) <= keys else ()
        #: the size of every dimension after ``frequency``
        self.sizes: dict[str, int] = {d: int(g[d].shape[0]) for d in ("dof", "harmonic", "actuator", "iteration", "variable", "channel")
                      if d in keys}
        if self.raw_channels:
            self.sizes["sample"] = self.raw_max_samples

    @property
    def n_points(self) -> int:
        return int(self.frequencies_hz.size)

    # -- creation ------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        path,
        *,
        frequencies_hz,
        harmonics,
        actuators,
        max_iterations: int,
        attrs: dict,
        overwrite: bool = False,
        reference: bool = True,
        raw_records: tuple | None = None,
        legs=None,
        force_levels=None,
        sync: bool = False,
        harmonic_active: bool = False,
        channels=None,
        design: bool = False,
    ) -> "RunStore":
        """Pre-allocate a store for a sweep. ``attrs`` (sweep_text, sweep_sha256, sweep_path,
        rig_text, rig_sha256, rig_path, rig_identity, overrides, profile, and anything else
        JSON-serialisable, e.g. ``residual_tolerance``/``residual_form``) are stored with the
        versions, git state and timestamps. ``reference=False`` omits
        ``reference_interface_displacement`` (rigs without an emulated truth).
        ``raw_records = (channel_names, max_samples)`` allocates the raw-record variables
        (:data:`RAW_VARIABLES`: the final acquisition window of each point, for
        re-reduction with another calibration; chunked one point per chunk, compressed).
        ``legs``: the leg of every slot (default: from the reversals of the frequency list);
        ``force_levels``: the external force amplitude [N] of every slot, stored as the
        coordinate ``force_level`` (a stepped-force family, :mod:`hbtest.sweep.stepped`).
        ``sync`` allocates :data:`SYNC_VARIABLES` (``numerical_force`` and the sync metrics
        over the dimension ``variable`` = u, theta, T, M; :mod:`hbtest.method.ps_ns_sync`);
        ``harmonic_active`` the per-point mask of balanced orders (``sweep.harmonics = "auto"``).
        ``channels`` (the rig layout's channel names) allocates the per-evaluation raw channel
        coefficients (:data:`EVALUATION_VARIABLES`); with ``raw_records`` too, the names agree.
        ``design`` allocates :data:`DESIGN_VARIABLES` (an adaptive ``sweep.strategy``). Each
        option allocates the table's variables declaring it (``Var.when``).

        An existing store is replaced only with ``overwrite=True``, and only if it is an hbtest
        run store or an empty directory (never an arbitrary directory)."""
        import xarray as xr

        path = Path(path)
        f, h, act, ni = _checked_axes(frequencies_hz, harmonics, actuators, max_iterations)
        target, replace = _creation_target(path, overwrite)
        sizes = {"dof": 2, "harmonic": h.size, "actuator": len(act), "iteration": ni}
        coords = _axis_coords(f, h, act, ni, legs)
        coords.update(_option_coords(f, sizes, raw_records=raw_records, channels=channels, sync=sync,
                                     force_levels=force_levels))
        options = {"reference": reference, "raw_records": raw_records is not None, "sync": sync,
                   "harmonic_active": harmonic_active, "channels": channels is not None, "design": design}
        data_vars, encoding = _allocation(f.size, sizes, options)
        ds = xr.Dataset(data_vars, coords=coords, attrs=_root_attrs(attrs, f))
        _write_new(ds, encoding, target, path if replace else None)
        return cls(path)

    @classmethod
    def open(cls, path) -> "RunStore":
        """Open an existing store (UserError if it is missing or is not an hbtest run store)."""
        path = Path(path)
        if not path.exists():
            raise UserError(f"{path}: run store not found")
        if not _is_store(path):
            raise UserError(f"{path}: not an hbtest run store (no zarr group with hbtest attributes)")
        _check_layout(path)
        try:
            with warnings.catch_warnings():  # zarr warns about folders it does not recognise
                warnings.simplefilter("ignore")
                return cls(path)
        except Exception as e:  # damaged beyond the layout check
            raise UserError(f"{path}: damaged hbtest run store ({' '.join(str(e).split())})") from None

    def check_resumable(self) -> None:
        """UserError (naming the store) unless this hbtest can continue writing the store:
        same store schema, same hbtest release line, a writable directory."""
        from .. import __version__

        if self.schema_version != SCHEMA_VERSION:
            raise UserError(
                f"{self.path}: written by an older hbtest (store schema {self.schema_version}, this hbtest writes {SCHEMA_VERSION});"
                " it can be plotted and exported but not resumed — rerun the sweep into a new store"
            )
        written = str(self.attrs.get("versions", {}).get("hbtest", ""))
        if written and written.split(".")[:2] != __version__.split(".")[:2]:
            raise UserError(f"{self.path}: written by hbtest {written}, this is hbtest {__version__}; resume it with hbtest {written}")
        for p in (self.path, self.path / "zarr.json", self.path / "done"):
            if p.exists() and not os.access(p, os.W_OK):
                raise UserError(f"{self.path}: the store is read-only ({p.name} is not writable); copy it somewhere writable to resume it")

    def check_compatible(self, *, frequencies_hz=None, harmonics=None, actuators=None, max_iterations=None) -> None:
        """UserError (naming the store) unless the store was allocated for this frequency
        list / harmonic orders / actuators / iteration cap — the check before a resume."""
        problems = []
        if frequencies_hz is not None:
            f = np.asarray(frequencies_hz, dtype=float)
            known = np.isfinite(f)  # NaN asked: an open slot, any frequency
            if f.shape != self.frequencies_hz.shape or not np.allclose(f[known], self.frequencies_hz[known], rtol=1e-12, atol=0):
                problems.append(f"frequencies differ ({self.n_points} slots {self.frequencies_hz[0]:g}..{self.frequencies_hz[-1]:g} Hz stored, {f.size} points {f[0]:g}..{f[-1]:g} Hz asked)" if f.size else "frequencies differ")
        if harmonics is not None and tuple(int(k) for k in harmonics) != self.harmonics:
            problems.append(f"harmonics differ (stored {list(self.harmonics)}, asked {list(harmonics)})")
        if actuators is not None and tuple(str(a) for a in actuators) != self.actuators:
            problems.append(f"actuators differ (stored {list(self.actuators)}, asked {list(actuators)})")
        if max_iterations is not None and int(max_iterations) > self.max_iterations:
            problems.append(f"max_iterations {max_iterations} exceeds the {self.max_iterations} the store was allocated for")
        if problems:
            raise UserError(f"{self.path}: cannot continue this run store: " + "; ".join(problems))

    # -- writing -------------------------------------------------------------------------

    def write_point(self, index: int, rec: PointRecord) -> None:
        """Write one point into slot ``index``: all data first, then the ``done`` flag. A slot
        already marked done is first marked not-done, so ``done`` never vouches for a partly
        rewritten slot (:class:`hbtest.store.slots.SlotWriter`: one trip to zarr's event loop;
        within :meth:`writing_behind`, on the store's writer thread: this returns when the point
        is handed over and raises :class:`~hbtest.store.slots.SlotWriteError`, an OSError naming
        its slot, when an earlier point's write failed)."""
        if not 0 <= int(index) < self.n_points:
            raise IndexError(f"slot {index} outside 0..{self.n_points - 1}")
        index = int(index)
        f_slot = self.frequencies_hz[index]
        if self.open_slots and not self.done()[index]:
            self._write_frequency(index, float(rec.frequency_hz))
        elif not np.isclose(float(rec.frequency_hz), f_slot, rtol=1e-9, atol=0.0):
            raise ValueError(f"record at {rec.frequency_hz} Hz does not belong in slot {index} ({f_slot} Hz)")
        self._slots.write(index, self.point_values(rec), flag="done")

    def point_values(self, rec: PointRecord) -> dict:
        """The value of every per-point variable this store holds (``done`` and the design
        variables aside), in the store's shapes and dtypes: the table's record variables
        (:data:`VARIABLES`), the raw record's and the store's bookkeeping. ValueError on a shape
        the store was not allocated for."""
        values = {}
        for var in VARIABLES:
            if var.source != "record":
                continue
            if var.name in self.variables:
                values[var.name] = self._record_value(var, rec)
            elif var.strict and getattr(rec, var.name) is not None:
                raise ValueError(f"{self.path}: store was created without {var.name}")
        rows = _history_rows(rec, [v for v in VARIABLES if v.history and v.name in values])
        if self.raw_channels:
            values.update(self._raw_values(rec.raw_record))
        values["written_utc"] = np.float64(_dt.datetime.now(_dt.timezone.utc).timestamp())
        values["history_length"] = np.int32(rows)
        return values

    def _record_value(self, var: Var, rec: PointRecord):
        """One record variable in the store's shape and dtype (a history padded with its fill)."""
        value = getattr(rec, var.name)
        shape = tuple(self.sizes[d] for d in var.dims)
        if value is None:
            return var.missing(rec, shape)
        if not var.dims:
            return var.scalar(value)
        a = np.asarray(value, dtype=var.dtype)
        if not var.history:
            if a.shape != shape:
                raise ValueError(f"{var.name}: expected shape {shape}, got {a.shape}")
            return a
        if a.ndim != len(shape) or a.shape[1:] != shape[1:]:
            raise ValueError(f"{var.name}: expected shape (n_iter, {', '.join(map(str, shape[1:]))}), got {a.shape}")
        if a.shape[0] > shape[0]:
            raise ValueError(f"{var.name}: {a.shape[0]} iterations recorded, the store holds {shape[0]} (max_iterations + 1)")
        out = np.full(shape, var.fill, dtype=var.dtype)
        out[: a.shape[0]] = a
        return out

    def write_design(self, index: int, reason: str | None = None, **estimate) -> None:
        """Write the adaptive strategy's variables of slot ``index`` (:data:`DESIGN_VARIABLES`
        without the ``design_`` prefix: ``reason`` and the running estimate's floats); the
        others of the slot are left as they are."""
        values: dict[str, object] = {} if reason is None else {"design_reason": np.array(str(reason), dtype=object)}
        values.update({f"design_{k}": np.float64(v) for k, v in estimate.items()})
        unknown = [k for k in values if k not in DESIGN_VARIABLES or k not in self.variables]
        if unknown:
            raise ValueError(f"{self.path}: no design variable(s) {', '.join(unknown)} in this store")
        self._slots.write(int(index), values)

    def _raw_values(self, acq) -> dict:
        """The raw-record variables of one point from an acquisition (NaN/-1 when None)."""
        out = np.full((len(self.raw_channels), self.raw_max_samples), np.nan)
        if acq is None:
            return {"raw_samples": out, "raw_time_start": np.float64(np.nan), "raw_sample_rate": np.float64(np.nan),
                    "raw_length": np.int32(-1), "raw_periods": np.int32(-1)}
        t = np.asarray(acq.t, dtype=float)
        if t.size > self.raw_max_samples:
            raise ValueError(f"raw record of {t.size} samples exceeds the {self.raw_max_samples} the store was allocated for")
        missing = [c for c in self.raw_channels if c not in acq.data]
        if missing:
            raise ValueError(f"raw record lacks channel(s) {', '.join(missing)}")
        for i, c in enumerate(self.raw_channels):
            out[i, : t.size] = np.asarray(acq.data[c], dtype=float)
        return {"raw_samples": out, "raw_time_start": np.float64(t[0]), "raw_sample_rate": np.float64(acq.sample_rate_hz),
                "raw_length": np.int32(t.size), "raw_periods": np.int32(acq.n_periods)}

    def read_raw(self, index: int):
        """The raw record of slot ``index`` as an :class:`hbtest.rig.Acquisition` (sample times
        ``t_0 + n / fs``), or None when the store has no raw records or the slot none."""
        from ..rig import Acquisition

        if not self.raw_channels:
            return None
        ds = self.dataset()[list(RAW_VARIABLES)].isel(frequency=int(index)).load()
        n = int(ds["raw_length"])
        if n < 1:
            return None
        fs = float(ds["raw_sample_rate"])
        t = float(ds["raw_time_start"]) + np.arange(n) / fs
        data = {c: ds["raw_samples"].values[i, :n] for i, c in enumerate(self.raw_channels)}
        return Acquisition(t=t, data=data, frequency_hz=float(self.frequencies_hz[int(index)]), sample_rate_hz=fs,
                           n_periods=int(ds["raw_periods"]), elapsed_s=float("nan"))

    @contextmanager
    def writing_behind(self):
        """Within it, :meth:`write_point` and :meth:`write_design` hand their slot to the
        store's writer thread and return (the next point is computed while zarr writes); the
        readers (:meth:`done`, :attr:`attrs`, :meth:`dataset`, :meth:`read_point`) wait for it
        first. On leaving, every slot handed over is on disk; leaving normally, a failed write
        is raised (:class:`~hbtest.store.slots.SlotWriteError`); leaving by an exception, that
        exception goes on (a failed slot's ``done`` stays False either way)."""
        self._slots.background = True
        try:
            yield self
        except BaseException:
            self._slots.background = False
            self._slots.drain()
            raise
        self._slots.background = False
        self.flush()

    def flush(self) -> None:
        """Wait until every point handed to the writer thread is on disk; raises the first
        failed write (:class:`~hbtest.store.slots.SlotWriteError`, once)."""
        self._slots.flush()

    def set_status(self, status: str, **attrs) -> None:
        """Set the run status (``running | completed | interrupted | failed``) and any extra
        attributes (e.g. ``message=...``); stamps ``updated_utc`` and, for a final status,
        ``finished_utc``."""
        import zarr

        if status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
        now = _utc_now()
        new = _jsonable(dict(attrs))
        new["status"] = status
        new["updated_utc"] = now
        if status != "running":
            new["finished_utc"] = now
        g = zarr.open_group(str(self.path), mode="r+")
        g.attrs.update(new)
        if status != "running":
            consolidate(self.path)

    def set_attrs(self, **attrs) -> None:
        """Add or replace group attributes (JSON-able values, e.g. an analysis result such
        as ``modal_fit``) without touching the status; stamps ``updated_utc``. The caller
        holds the store lock (:class:`hbtest.store.StoreLock`)."""
        import zarr

        reserved = {"hbtest_store", "schema_version", "status"} & set(attrs)
        if reserved:
            raise ValueError(f"set_attrs cannot change {', '.join(sorted(reserved))}")
        new = _jsonable(dict(attrs))
        new["updated_utc"] = _utc_now()
        g = zarr.open_group(str(self.path), mode="r+")
        g.attrs.update(new)

    # -- reading -------------------------------------------------------------------------

    def _write_frequency(self, index: int, frequency_hz: float) -> None:
        """The frequency coordinate of an open slot, written before the point's data (an
        interrupted write leaves it with ``done == False``: a resumed run rewrites both)."""
        import zarr

        if not (np.isfinite(frequency_hz) and frequency_hz > 0):
            raise ValueError(f"slot {index}: frequency {frequency_hz!r} is not a positive number")
        g: Any = zarr.open_group(str(self.path), mode="r+")
        g["frequency"][index] = frequency_hz
        self.frequencies_hz[index] = frequency_hz

    def done(self) -> np.ndarray:
        """``done`` flag of every slot, read fresh from disk (after :meth:`flush`)."""
        import zarr

        self.flush()
        g: Any = zarr.open_group(str(self.path), mode="r")
        return np.asarray(g["done"][...], dtype=bool)

    @property
    def attrs(self) -> dict:
        """The group attributes, read fresh from disk (after :meth:`flush`)."""
        import zarr

        self.flush()
        return dict(zarr.open_group(str(self.path), mode="r").attrs)

    def dataset(self):
        """The whole store as a lazy :class:`xarray.Dataset` (after :meth:`flush`)."""
        self.flush()
        return _open(self.path)

    def read_point(self, index: int) -> PointRecord:
        """The record written in slot ``index`` (histories trimmed to their recorded length; a
        variable the store lacks keeps the record's default). Raises ``ValueError`` for a slot that
        is not done."""
        index = int(index)
        ds = self.dataset().isel(frequency=index).load()
        if not bool(ds["done"]):
            raise ValueError(f"slot {index} of {self.path} holds no finished point")
        n = int(ds["history_length"])
        stored = {var.name: _read_value(var, ds[var.name].values, n) for var in VARIABLES
                  if var.source == "record" and var.name in self.variables}
        return PointRecord(frequency_hz=float(ds["frequency"]), **stored)


def _read_value(var: Var, a: np.ndarray, rows: int):
    """A stored value of one slot as the record holds it: a scalar as a Python value, a history
    trimmed to ``rows``, an optional array holding only NaN as None."""
    if var.history:
        a = a[:rows]
    if not var.dims:
        return {"b": bool, "i": int, "f": float, "s": str}[var.kind](a)
    if var.name in NONE_MEANS_ABSENT and var.kind in "cf" and np.all(np.isnan(a)):
        return None
    return a


def _open(path):
    import xarray as xr

    return xr.open_zarr(str(path), consolidated=False, chunks=None, zarr_format=3)


def open_run(path):
    """Open a run store as a lazy :class:`xarray.Dataset` (UserError if missing / not a store)."""
    store = RunStore.open(path)
    return store.dataset()

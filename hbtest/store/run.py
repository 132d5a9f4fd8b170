"""The run store: one zarr v3 store per sweep, pre-allocated, written one point at a time.

This is the one place that writes results (docs/architecture.md). Everything else reads it through
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
``hbtest reduce`` (:mod:`hbtest.calibration.reduce`). Stores of schema 1-2 have none and stay
readable.

Sync metrics and families (optional, absent from older stores): a store created with
``sync`` holds ``numerical_force`` (frequency, dof, harmonic) [N, N m], the NS counterpart of
``interface_force``, and ``sync_amplitude_ratio`` [1] / ``sync_phase_deg`` [deg] over
(frequency, ``variable`` = u, theta, T, M, harmonic) (:mod:`hbtest.sync`); with
``harmonic_active`` the boolean (frequency, harmonic) of the orders each point balanced
(``sweep.harmonics = "auto"``: the others are NaN); a stepped-force family has the per-slot
coordinate ``force_level`` [N] (:mod:`hbtest.family`).
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import UserError
from .provenance import git_state, package_versions
from .provenance import jsonable as _jsonable
from .provenance import utc_now as _utc_now

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
_CNAN = complex(np.nan, np.nan)


@dataclass
class PointRecord:
    """Everything measured at one frequency point (SI units, harmonic orders on the last axis
    in the store's ``harmonic`` order). History arrays hold one row per solver iteration,
    row 0 being the starting voltage; at most ``max_iterations + 1`` rows."""

    frequency_hz: float
    interface_displacement: np.ndarray  # (2, n_orders) complex [m, rad]
    interface_force: np.ndarray  # (2, n_orders) complex [N, N m]
    numerical_displacement: np.ndarray  # (2, n_orders) complex
    external_force: np.ndarray  # (n_orders,) complex [N]
    voltage: np.ndarray  # (n_actuators, n_orders) complex [V]
    displacement_variance: np.ndarray  # (2, n_orders) real
    force_variance: np.ndarray  # (2, n_orders) real
    converged: bool
    iterations: int
    residual_norm: float
    rig_periods: float
    history_voltage: np.ndarray  # (n_iter, n_actuators, n_orders) complex
    history_residual: np.ndarray  # (n_iter, 2, n_orders) complex
    history_residual_norm: np.ndarray  # (n_iter,)
    history_periods: np.ndarray  # (n_iter,) forcing periods spent on each iteration
    reference_interface_displacement: np.ndarray | None = None  # (2, n_orders) complex
    message: str = ""  # why it stopped (for a person)
    stop_reason: str = ""  # why it stopped (one of hbtest.point.STOP_REASONS)
    # fraction of the power of the measured PS interface displacement in harmonics *not*
    # solved for (from the residual of the harmonic fit), per DOF; None when not measured
    excluded_energy_fraction: np.ndarray | None = None  # (2,) real
    # the raw sample record of the point's final acquisition window (an hbtest.rig.Acquisition:
    # t [s, demand time base], data channel -> raw volts, n_periods); stored only by a store
    # created with raw records (:meth:`RunStore.create` ``raw_records``)
    raw_record: object | None = None
    # the NS counterpart of interface_force: F_P*(U_P), the interface force under which the
    # numerical substructure moves by the measured U_P (hbtest.sync); None: not computed
    numerical_force: np.ndarray | None = None  # (2, n_orders) complex [N, N m]
    # sync metrics over hbtest.sync.VARIABLES (u, theta, T, M): |PS|/|NS| and arg(PS/NS) [deg]
    sync_amplitude_ratio: np.ndarray | None = None  # (4, n_orders) real
    sync_phase_deg: np.ndarray | None = None  # (4, n_orders) real
    # which orders the point balanced (sweep.harmonics = "auto"); None: all
    harmonic_active: np.ndarray | None = None  # (n_orders,) bool
    # raw channel coefficients [V] and their variances [V^2] of every evaluation, (n_iter,
    # n_channels, n_orders), rows as history_voltage; stored only by a store created with
    # ``channels`` (:meth:`RunStore.create`)
    history_channel_coefficients: np.ndarray | None = None
    history_channel_variance: np.ndarray | None = None
    # the frequency the sweep file asked for when the point ran elsewhere (a forcing harmonic
    # on a mains multiple: hbtest.design.mains), and why; None / "" = run where asked
    frequency_requested: float | None = None
    point_note: str = ""
    solution_offset: float = 0.0
    # standard uncertainty of the reported interface displacement [m, weighted norm]; NaN:
    # not stated (hbtest.point.PointOutcome.uncertainty_with_jacobian)
    displacement_uncertainty: float = float("nan")


# ---------------------------------------------------------------------------------------
# schema: name -> (dims after "frequency", kind, units, long_name)
# kind: c = complex128, f = float64, i = int32, b = bool, s = string

_SCHEMA: dict[str, tuple[tuple[str, ...], str, str, str]] = {
    "interface_displacement": (("dof", "harmonic"), "c", "m | rad", "interface displacement measured on the physical substructure (u, theta)"),
    "interface_force": (("dof", "harmonic"), "c", "N | N m", "interface force measured on the physical substructure (shear T conjugate to u, moment M to theta)"),
    "numerical_displacement": (("dof", "harmonic"), "c", "m | rad", "interface displacement demanded by the numerical substructure, D_N^-1 (F_ext - F_P)"),
    "external_force": (("harmonic",), "c", "N", "external force on the numerical substructure"),
    "voltage": (("actuator", "harmonic"), "c", "V", "actuator voltage coefficients of the point's solution (the last demand, or the pooled fit's solution next to it: see solution_offset)"),
    "interface_displacement_variance": (("dof", "harmonic"), "f", "m2 | rad2", "variance of the mean of the measured displacement coefficients, E|X - EX|^2 / n_periods"),
    "interface_force_variance": (("dof", "harmonic"), "f", "N2 | N2 m2", "variance of the mean of the measured force coefficients, E|X - EX|^2 / n_periods"),
    "reference_interface_displacement": (("dof", "harmonic"), "c", "m | rad", "exact interface displacement of the emulated structure (virtual rigs only; NaN otherwise)"),
    "excluded_energy_fraction": (("dof",), "f", "1", "fraction of the measured interface displacement power in harmonics not solved for (NaN when not measured)"),
    "converged": ((), "b", "1", "residual norm fell below the tolerance"),
    "iterations": ((), "i", "1", "solver iterations used (-1: slot not written)"),
    "residual_norm": ((), "f", "m", "norm of the final residual (displacement form unless the sweep says otherwise)"),
    "rig_periods": ((), "f", "1", "forcing periods the rig ran for this point, settling included"),
    "message": ((), "s", "", "why the point stopped, for a person"),
    "stop_reason": ((), "s", "", "why the point stopped: converged | iteration_limit | voltage_limit | overrange | trip | stalled"),
    "written_utc": ((), "f", "s", "POSIX time (UTC) at which the point was written"),
    "history_voltage": (("iteration", "actuator", "harmonic"), "c", "V", "actuator voltage per iteration"),
    "history_residual": (("iteration", "dof", "harmonic"), "c", "m | rad", "residual R = U_P - U_N per iteration"),
    "history_residual_norm": (("iteration",), "f", "m", "residual norm per iteration"),
    "history_periods": (("iteration",), "f", "1", "forcing periods spent on each iteration"),
    "history_length": ((), "i", "1", "number of valid rows of the history variables (-1: slot not written)"),
    "done": ((), "b", "1", "the point is completely written (written last)"),
    # (hbtest.sync, hbtest.family): optional, absent from older stores
    "numerical_force": (("dof", "harmonic"), "c", "N | N m", "NS counterpart of interface_force: F_P*(U_P), the interface force under which the numerical substructure moves by the measured displacement"),
    "sync_amplitude_ratio": (("variable", "harmonic"), "f", "1", "sync metric |PS|/|NS| per interface variable (u, theta, T, M) and harmonic (hbtest.sync)"),
    "sync_phase_deg": (("variable", "harmonic"), "f", "deg", "sync metric arg(PS/NS) per interface variable and harmonic, positive: PS leads (hbtest.sync)"),
    "harmonic_active": (("harmonic",), "b", "1", "the harmonic was balanced at this point (sweep.harmonics = \"auto\"; inactive orders are NaN)"),
    # optional (stores written before them lack them): a point moved off a mains coincidence
    "frequency_requested": ((), "f", "Hz", "frequency the sweep file asked for (the coordinate holds the one applied)"),
    "point_note": ((), "s", "", "what the sweep decided at this point before running it (e.g. moved off a mains multiple)"),
    # optional: the point is the solution of its pooled affine fit next to the last demand
    "solution_offset": ((), "f", "m", "distance of the reported interface displacement from the last one measured, |U* - U_P(last demand)| (weighted norm; 0: reported as measured)"),
    "displacement_uncertainty": ((), "f", "m", "standard uncertainty of the reported interface displacement (weighted norm |(u, l theta)| over the solved harmonics, l = test.rotation_length): the measured noise propagated through the solution, the fitted rig Jacobian's own uncertainty included; NaN: not stated"),
    # raw records (schema 3; only in a store created with raw_records): re-reduction input
    "raw_samples": (("channel", "sample"), "f", "V", "raw channel samples of the final acquisition window (valid: the first raw_length)"),
    "raw_time_start": ((), "f", "s", "demand time of the first raw sample"),
    "raw_sample_rate": ((), "f", "Hz", "sample rate of the raw record"),
    "raw_length": ((), "i", "1", "number of valid raw samples (-1: none recorded)"),
    "raw_periods": ((), "i", "1", "whole forcing periods in the raw record"),
    # evaluation records (only in a store created with channels): hybrid re-reduction input
    "history_channel_coefficients": (("iteration", "channel", "harmonic"), "c", "V", "raw channel coefficients (before calibration and lag correction) of every evaluation"),
    "history_channel_variance": (("iteration", "channel", "harmonic"), "f", "V2", "variance of the mean of the raw channel coefficients of every evaluation"),
    # adaptive strategies (hbtest.strategy; only in a store created with design): why each
    # frequency was chosen and the running estimate after the point
    "design_reason": ((), "s", "", "why the adaptive strategy chose this frequency (sweep.strategy)"),
    "design_frequency_hz": ((), "f", "Hz", "running estimate of the target mode's undamped natural frequency after this point"),
    "design_damping_ratio": ((), "f", "1", "running estimate of the target mode's viscous damping ratio after this point"),
    "design_modal_constant": ((), "f", "1/kg | rad/(N s2)", "running estimate of the target mode's modal constant |A| (sweep.target.dof) after this point"),
    "design_frequency_ci_rel": ((), "f", "1", "relative half-width of the natural frequency's interval (sweep.target.confidence) after this point"),
    "design_damping_ci_rel": ((), "f", "1", "relative half-width of the damping ratio's interval after this point"),
    "design_modal_constant_ci_rel": ((), "f", "1", "relative half-width of the modal constant's interval after this point"),
    "design_curve_uncertainty": ((), "f", "1", "curve strategy: largest relative half-width of the fitted FRF curve's interval over the band after this point"),
}
#: the adaptive-strategy variables (present together or not at all; :meth:`RunStore.create` ``design``)
DESIGN_VARIABLES = ("design_reason", "design_frequency_hz", "design_damping_ratio", "design_modal_constant",
                    "design_frequency_ci_rel", "design_damping_ci_rel", "design_modal_constant_ci_rel", "design_curve_uncertainty")
#: the raw-record variables (present together or not at all)
RAW_VARIABLES = ("raw_samples", "raw_time_start", "raw_sample_rate", "raw_length", "raw_periods")
#: the sync variables (present together or not at all; :meth:`RunStore.create` ``sync``)
SYNC_VARIABLES = ("numerical_force", "sync_amplitude_ratio", "sync_phase_deg")
#: the per-evaluation channel-coefficient variables (present together or not at all)
EVALUATION_VARIABLES = ("history_channel_coefficients", "history_channel_variance")
_DOF_UNITS = {
    "m | rad": ["m", "rad"],
    "N | N m": ["N", "N m"],
    "m2 | rad2": ["m2", "rad2"],
    "N2 | N2 m2": ["N2", "N2 m2"],
}
_DTYPE = {"c": np.complex128, "f": np.float64, "i": np.int32, "b": np.bool_, "s": object}
_FILL = {"c": _CNAN, "f": np.nan, "i": -1, "b": False, "s": ""}


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


#: variables a store may lack: the reference exists for virtual rigs only; later schemas added some
_OPTIONAL = {"reference_interface_displacement", "frequency_requested", "point_note", "solution_offset", "displacement_uncertainty", *RAW_VARIABLES, *EVALUATION_VARIABLES,
             *SYNC_VARIABLES, "harmonic_active", *DESIGN_VARIABLES}
_ADDED_IN_SCHEMA = {"stop_reason": 2, **{n: 3 for n in RAW_VARIABLES}}


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
    required = [n for n in _SCHEMA if n not in _OPTIONAL and _ADDED_IN_SCHEMA.get(n, 1) <= schema]
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


class RunStore:
    """A run store on disk (see the module docstring for the schema).

    Create it once per run with :meth:`create`, reopen it (resume, analysis) with
    :meth:`open`. Only :meth:`write_point`, :meth:`set_status` and :meth:`set_attrs` write."""

    def __init__(self, path: Path):
        self.path = Path(path)
        import zarr

        g = zarr.open_group(str(self.path), mode="r")
        self.frequencies_hz = np.asarray(g["frequency"][...], dtype=float)
        self.harmonics = tuple(int(k) for k in g["harmonic"][...])
        self.actuators = tuple(str(a) for a in g["actuator"][...])
        self.max_iterations = int(g["iteration"].shape[0]) - 1
        self.has_reference = "reference_interface_displacement" in g.array_keys()
        self.has_point_notes = "frequency_requested" in g.array_keys()  # optional, see _OPTIONAL
        self.has_solution_offset = "solution_offset" in g.array_keys()  # optional, see _OPTIONAL
        self.has_displacement_uncertainty = "displacement_uncertainty" in g.array_keys()  # optional, see _OPTIONAL
        self.schema_version = int(g.attrs.get("schema_version", 1))
        self.raw_channels = tuple(str(c) for c in g["channel"][...]) if "raw_samples" in g.array_keys() else ()
        self.raw_max_samples = int(g["raw_samples"].shape[-1]) if self.raw_channels else 0
        self.variables = frozenset(g.array_keys())
        keys = set(g.array_keys())
        self.evaluation_channels = tuple(str(c) for c in g["channel"][...]) if set(EVALUATION_VARIABLES) <= keys else ()

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
        coordinate ``force_level`` (a stepped-force family, :mod:`hbtest.family`).
        ``sync`` allocates :data:`SYNC_VARIABLES` (``numerical_force`` and the sync metrics
        over the dimension ``variable`` = u, theta, T, M; :mod:`hbtest.sync`);
        ``harmonic_active`` the per-point mask of balanced orders (``sweep.harmonics = "auto"``).
        ``channels`` (the rig layout's channel names) allocates the per-evaluation raw channel
        coefficients (:data:`EVALUATION_VARIABLES`); with ``raw_records`` too, the names agree.
        ``design`` allocates :data:`DESIGN_VARIABLES` (an adaptive ``sweep.strategy``).

        An existing store is replaced only with ``overwrite=True``, and only if it is an hbtest
        run store or an empty directory (never an arbitrary directory)."""
        import xarray as xr

        path = Path(path)
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
        max_iterations = int(max_iterations)

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

        n, nh, na, ni = f.size, h.size, len(act), max_iterations + 1
        from ..sync import VARIABLES as _SYNC_VARIABLES

        sizes = {"dof": 2, "harmonic": nh, "actuator": na, "iteration": ni}
        family_coords = {}
        if sync:
            sizes["variable"] = len(_SYNC_VARIABLES)
            family_coords["variable"] = ("variable", np.array(_SYNC_VARIABLES, dtype=object), {"long_name": "interface variable of the sync metrics: u [m], theta [rad], shear T [N], moment M [N m]"})
        if force_levels is not None:
            lv = np.asarray(force_levels, dtype=float)
            if lv.shape != f.shape or not np.all(np.isfinite(lv)) or np.any(lv <= 0):
                raise ValueError("force_levels must give a positive amplitude for every frequency slot")
            family_coords["force_level"] = ("frequency", lv, {"units": "N", "long_name": "external force amplitude of the slot's level (stepped-force family)"})
        leg_values = sweep_legs(f) if legs is None else np.asarray(legs, dtype=np.int64)
        if leg_values.shape != f.shape:
            raise ValueError("legs must give a leg for every frequency slot")
        raw_coords = {}
        if raw_records is not None:
            raw_names, raw_max = [str(c) for c in raw_records[0]], int(raw_records[1])
            if not raw_names or len(set(raw_names)) != len(raw_names) or raw_max < 1:
                raise ValueError(f"raw_records must be (distinct channel names, max_samples >= 1), got {raw_records!r}")
            sizes.update(channel=len(raw_names), sample=raw_max)
            raw_coords["channel"] = ("channel", np.array(raw_names, dtype=object), {"long_name": "acquisition channel (raw records)"})
        if channels is not None:
            names = [str(c) for c in channels]
            if not names or len(set(names)) != len(names) or ("channel" in raw_coords and list(raw_coords["channel"][1]) != names):
                raise ValueError(f"channels must be distinct names (those of raw_records when both are given), got {channels!r}")
            sizes["channel"] = len(names)
            raw_coords["channel"] = ("channel", np.array(names, dtype=object), {"long_name": "acquisition channel"})
        data_vars = {}
        encoding = {}
        for name, (dims, kind, units, long_name) in _SCHEMA.items():
            if name == "reference_interface_displacement" and not reference:
                continue
            if name in RAW_VARIABLES and raw_records is None:
                continue
            if (name in SYNC_VARIABLES and not sync) or (name == "harmonic_active" and not harmonic_active):
                continue
            if name in EVALUATION_VARIABLES and channels is None:
                continue
            if name in DESIGN_VARIABLES and not design:
                continue
            shape = (n,) + tuple(sizes[d] for d in dims)
            fill = _FILL[kind]
            # zero-stride template: nothing is allocated and, since it equals the fill value,
            # zarr writes no chunk for it
            arr = np.broadcast_to(np.array(fill, dtype=_DTYPE[kind]), shape)
            va = {"units": units, "long_name": long_name}
            if units in _DOF_UNITS:
                va["dof_units"] = _DOF_UNITS[units]
            data_vars[name] = (("frequency",) + dims, arr, va)
            encoding[name] = {"chunks": (1,) + shape[1:], "fill_value": fill}

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

        ds = xr.Dataset(
            data_vars,
            coords={
                "frequency": ("frequency", f, {"units": "Hz", "long_name": "forcing frequency, in test order (may repeat: index by position or by point)"}),
                "point": ("frequency", np.arange(n, dtype=np.int64), {"units": "1", "long_name": "test index of the slot"}),
                "leg": ("frequency", leg_values, {"units": "1", "long_name": "sweep leg: 0 first monotone run, +1 at each reversal of direction"}),
                "dof": ("dof", np.array(DOFS, dtype=object), {"long_name": "interface DOF: u transverse displacement [m], theta rotation [rad]"}),
                "harmonic": ("harmonic", h.astype(np.int64), {"units": "1", "long_name": "harmonic order k (X_k = a_k - i b_k)"}),
                "actuator": ("actuator", np.array(act, dtype=object), {"long_name": "actuator name"}),
                "iteration": ("iteration", np.arange(ni, dtype=np.int64), {"units": "1", "long_name": "solver iteration (0 = starting voltage)"}),
                **raw_coords,
                **family_coords,
            },
            attrs=root_attrs,
        )
        try:
            ds.to_zarr(str(target), mode="w-", zarr_format=3, consolidated=False, encoding=encoding)
        except OSError as e:
            shutil.rmtree(target, ignore_errors=True)
            raise UserError(f"{path}: cannot write the run store ({e.strerror or e})") from None
        if replace:
            _swap_in(target, path)
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

    def _region_write(self, ds, index: int) -> None:
        ds.to_zarr(str(self.path), mode="r+", region={"frequency": slice(index, index + 1)}, consolidated=False)

    def write_point(self, index: int, rec: PointRecord) -> None:
        """Write one point into slot ``index``: all data first (one region write), then the
        ``done`` flag (a second region write). A slot already marked done is first marked
        not-done, so ``done`` never vouches for a partly rewritten slot."""
        import xarray as xr

        if not 0 <= int(index) < self.n_points:
            raise IndexError(f"slot {index} outside 0..{self.n_points - 1}")
        index = int(index)
        f_slot = self.frequencies_hz[index]
        if self.attrs.get("open_slots") and not self.done()[index]:
            self._write_frequency(index, float(rec.frequency_hz))
        elif not np.isclose(float(rec.frequency_hz), f_slot, rtol=1e-9, atol=0.0):
            raise ValueError(f"record at {rec.frequency_hz} Hz does not belong in slot {index} ({f_slot} Hz)")
        nh, na, ni = len(self.harmonics), len(self.actuators), self.max_iterations + 1

        def arr(value, shape, kind, name):
            a = np.asarray(value, dtype=_DTYPE[kind])
            if a.shape != shape:
                raise ValueError(f"{name}: expected shape {shape}, got {a.shape}")
            return a

        def hist(value, shape, kind, name):
            a = np.asarray(value, dtype=_DTYPE[kind])
            if a.ndim != len(shape) + 1 or a.shape[1:] != shape:
                raise ValueError(f"{name}: expected shape (n_iter, {', '.join(map(str, shape))}), got {a.shape}")
            if a.shape[0] > ni:
                raise ValueError(f"{name}: {a.shape[0]} iterations recorded, the store holds {ni} (max_iterations + 1)")
            out = np.full((ni,) + shape, _FILL[kind], dtype=_DTYPE[kind])
            out[: a.shape[0]] = a
            return out, a.shape[0]

        hv, n1 = hist(rec.history_voltage, (na, nh), "c", "history_voltage")
        hr, n2 = hist(rec.history_residual, (2, nh), "c", "history_residual")
        hn, n3 = hist(rec.history_residual_norm, (), "f", "history_residual_norm")
        hp, n4 = hist(rec.history_periods, (), "f", "history_periods")
        if len({n1, n2, n3, n4}) != 1:
            raise ValueError(f"history arrays disagree on the number of iterations: {n1}, {n2}, {n3}, {n4}")
        values = {
            "interface_displacement": arr(rec.interface_displacement, (2, nh), "c", "interface_displacement"),
            "interface_force": arr(rec.interface_force, (2, nh), "c", "interface_force"),
            "numerical_displacement": arr(rec.numerical_displacement, (2, nh), "c", "numerical_displacement"),
            "external_force": arr(rec.external_force, (nh,), "c", "external_force"),
            "voltage": arr(rec.voltage, (na, nh), "c", "voltage"),
            "interface_displacement_variance": arr(rec.displacement_variance, (2, nh), "f", "displacement_variance"),
            "interface_force_variance": arr(rec.force_variance, (2, nh), "f", "force_variance"),
            "excluded_energy_fraction": (
                np.full(2, np.nan) if rec.excluded_energy_fraction is None else arr(rec.excluded_energy_fraction, (2,), "f", "excluded_energy_fraction")
            ),
            "converged": np.bool_(bool(rec.converged)),
            "iterations": np.int32(int(rec.iterations)),
            "residual_norm": np.float64(rec.residual_norm),
            "rig_periods": np.float64(rec.rig_periods),
            "message": np.array(str(rec.message or ""), dtype=object),
            "stop_reason": np.array(str(rec.stop_reason or ""), dtype=object),
            "written_utc": np.float64(_dt.datetime.now(_dt.timezone.utc).timestamp()),
            "history_voltage": hv,
            "history_residual": hr,
            "history_residual_norm": hn,
            "history_periods": hp,
            "history_length": np.int32(n1),
        }
        if self.has_point_notes:
            values["frequency_requested"] = np.float64(rec.frequency_hz if rec.frequency_requested is None else rec.frequency_requested)
            values["point_note"] = np.array(str(rec.point_note or ""), dtype=object)
        if self.has_solution_offset:
            values["solution_offset"] = np.float64(rec.solution_offset)
        if self.has_displacement_uncertainty:
            values["displacement_uncertainty"] = np.float64(rec.displacement_uncertainty)
        if self.has_reference:
            ref = rec.reference_interface_displacement
            values["reference_interface_displacement"] = np.full((2, nh), _CNAN) if ref is None else arr(ref, (2, nh), "c", "reference_interface_displacement")
        elif rec.reference_interface_displacement is not None:
            raise ValueError(f"{self.path}: store was created without reference_interface_displacement")
        if self.raw_channels:
            values.update(self._raw_values(rec.raw_record))
        opt = {
            "numerical_force": (rec.numerical_force, (2, nh), "c"),
            "sync_amplitude_ratio": (rec.sync_amplitude_ratio, (4, nh), "f"),
            "sync_phase_deg": (rec.sync_phase_deg, (4, nh), "f"),
        }
        for name, (v, shape, kind) in opt.items():
            if name in self.variables:
                values[name] = np.full(shape, _FILL[kind], dtype=_DTYPE[kind]) if v is None else arr(v, shape, kind, name)
        if "harmonic_active" in self.variables:
            values["harmonic_active"] = np.ones(nh, dtype=bool) if rec.harmonic_active is None else arr(rec.harmonic_active, (nh,), "b", "harmonic_active")
        if self.evaluation_channels:
            nc = len(self.evaluation_channels)
            for name in EVALUATION_VARIABLES:
                kind = _SCHEMA[name][1]
                got = getattr(rec, name)
                if got is None:
                    values[name] = np.full((ni, nc, nh), _FILL[kind], dtype=_DTYPE[kind])
                    continue
                values[name], n5 = hist(got, (nc, nh), kind, name)
                if n5 != n1:
                    raise ValueError(f"{name}: {n5} evaluations recorded, history_voltage has {n1}")
        data = xr.Dataset({k: (("frequency",) + _SCHEMA[k][0], np.asarray(v)[None, ...]) for k, v in values.items()})
        flag = lambda v: xr.Dataset({"done": (("frequency",), np.array([v], dtype=bool))})  # noqa: E731
        if self.done()[index]:
            self._region_write(flag(False), index)
        self._region_write(data, index)
        self._region_write(flag(True), index)

    def write_design(self, index: int, reason: str | None = None, **estimate) -> None:
        """Write the adaptive strategy's variables of slot ``index`` (:data:`DESIGN_VARIABLES`
        without the ``design_`` prefix: ``reason`` and the running estimate's floats); the
        others of the slot are left as they are."""
        import xarray as xr

        values = {} if reason is None else {"design_reason": np.array(str(reason), dtype=object)}
        values.update({f"design_{k}": np.float64(v) for k, v in estimate.items()})
        unknown = [k for k in values if k not in DESIGN_VARIABLES or k not in self.variables]
        if unknown:
            raise ValueError(f"{self.path}: no design variable(s) {', '.join(unknown)} in this store")
        data = xr.Dataset({k: (("frequency",), np.asarray(v)[None]) for k, v in values.items()})
        self._region_write(data, int(index))

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
        zarr.open_group(str(self.path), mode="r+")["frequency"][index] = frequency_hz
        self.frequencies_hz[index] = frequency_hz

    def done(self) -> np.ndarray:
        """``done`` flag of every slot, read fresh from disk."""
        import zarr

        g = zarr.open_group(str(self.path), mode="r")
        return np.asarray(g["done"][...], dtype=bool)

    @property
    def attrs(self) -> dict:
        """The group attributes, read fresh from disk."""
        import zarr

        return dict(zarr.open_group(str(self.path), mode="r").attrs)

    def dataset(self):
        """The whole store as a lazy :class:`xarray.Dataset`."""
        return _open(self.path)

    def read_point(self, index: int) -> PointRecord:
        """The record written in slot ``index`` (histories trimmed to their recorded length).
        Raises ``ValueError`` for a slot that is not done."""
        index = int(index)
        ds = self.dataset().isel(frequency=index).load()
        if not bool(ds["done"]):
            raise ValueError(f"slot {index} of {self.path} holds no finished point")
        n = int(ds["history_length"])
        ref = ds["reference_interface_displacement"].values if self.has_reference else None
        if ref is not None and np.all(np.isnan(ref)):
            ref = None
        ex = ds["excluded_energy_fraction"].values
        return PointRecord(
            frequency_hz=float(ds["frequency"]),
            interface_displacement=ds["interface_displacement"].values,
            interface_force=ds["interface_force"].values,
            numerical_displacement=ds["numerical_displacement"].values,
            external_force=ds["external_force"].values,
            voltage=ds["voltage"].values,
            displacement_variance=ds["interface_displacement_variance"].values,
            force_variance=ds["interface_force_variance"].values,
            converged=bool(ds["converged"]),
            iterations=int(ds["iterations"]),
            residual_norm=float(ds["residual_norm"]),
            rig_periods=float(ds["rig_periods"]),
            history_voltage=ds["history_voltage"].values[:n],
            history_residual=ds["history_residual"].values[:n],
            history_residual_norm=ds["history_residual_norm"].values[:n],
            history_periods=ds["history_periods"].values[:n],
            reference_interface_displacement=ref,
            message=str(ds["message"].values),
            stop_reason=str(ds["stop_reason"].values) if "stop_reason" in ds else "",
            excluded_energy_fraction=None if np.all(np.isnan(ex)) else ex,
            **{name: (ds[name].values[:n] if name in ds and not np.all(np.isnan(ds[name].values[:n])) else None) for name in EVALUATION_VARIABLES},
            frequency_requested=float(ds["frequency_requested"]) if self.has_point_notes else None,
            point_note=str(ds["point_note"].values) if self.has_point_notes else "",
            solution_offset=float(ds["solution_offset"]) if self.has_solution_offset else 0.0,
            displacement_uncertainty=float(ds["displacement_uncertainty"]) if self.has_displacement_uncertainty else float("nan"),
        )


def _open(path):
    import xarray as xr

    return xr.open_zarr(str(path), consolidated=False, chunks=None, zarr_format=3)


def open_run(path):
    """Open a run store as a lazy :class:`xarray.Dataset` (UserError if missing / not a store)."""
    store = RunStore.open(path)
    return store.dataset()

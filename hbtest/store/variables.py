"""The run store's variables, declared once: the schema table and the point record.

Every per-point variable of a run store is one :class:`Var` row of :data:`VARIABLES`: its name,
dimensions after ``frequency``, dtype (``kind``), fill value, units and long name, which
:meth:`hbtest.store.RunStore.create` option allocates it (``when``), whether older stores may lack
it (``optional``, ``since``) and what a record's ``None`` stands for. Everything else is derived
from the table: the store's allocation (:meth:`RunStore.create`), the layout check, the write
(:meth:`RunStore.write_point` iterates the table), the read-back (:meth:`RunStore.read_point`)
and the spreading of a point measured on fewer harmonic orders (:func:`expand_record`).
:class:`PointRecord` holds one field per variable whose ``source`` is the record, named as the
store's variable (``tests/test_store.py`` checks that the two agree), plus the point's
frequency and its raw acquisition (the source of the raw-record variables).

Kinds: ``c`` complex128 (fill ``nan+nanj``), ``f`` float64 (NaN), ``i`` int32 (-1), ``b`` bool
(False), ``s`` string (""). Sources: ``record`` (a :class:`PointRecord` field of the same name),
``raw`` (from the record's raw acquisition), ``store`` (the store's own bookkeeping:
``written_utc``, ``history_length``, ``done``), ``design`` (:meth:`RunStore.write_design`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

__all__ = [
    "Var", "VARIABLES", "SCHEMA", "PointRecord", "RECORD_VARIABLES", "RAW_VARIABLES", "SYNC_VARIABLES",
    "EVALUATION_VARIABLES", "DESIGN_VARIABLES", "CREATE_OPTIONS", "expand_record",
]

CNAN = complex(np.nan, np.nan)
DTYPE = {"c": np.complex128, "f": np.float64, "i": np.int32, "b": np.bool_, "s": object}
FILL = {"c": CNAN, "f": np.nan, "i": -1, "b": False, "s": ""}
#: units over ``dof`` -> the per-DOF list stored as the attribute ``dof_units``
DOF_UNITS = {
    "m | rad": ["m", "rad"],
    "N | N m": ["N", "N m"],
    "m2 | rad2": ["m2", "rad2"],
    "N2 | N2 m2": ["N2", "N2 m2"],
}
#: the :meth:`RunStore.create` options that allocate optional variables (``Var.when``)
CREATE_OPTIONS = ("reference", "raw_records", "sync", "harmonic_active", "channels", "design")


@dataclass(frozen=True)
class Var:
    """One store variable (see the module docstring).

    ``when``: the :meth:`RunStore.create` option that allocates it (None: every store).
    ``optional``: stores written before it lack it (readers and resumes tolerate its absence).
    ``since``: the schema version from which every store holds it.
    ``if_none``: what a record's None stands for: ``fill`` (the fill value), ``all`` (every order
    true), ``frequency`` (the point's own frequency).
    ``inactive``: its value at a harmonic order the point did not balance (None: the fill).
    ``strict``: a record value for it is refused by a store created without it."""

    name: str
    dims: tuple[str, ...]
    kind: str
    units: str
    long_name: str
    when: str | None = None
    source: str = "record"
    optional: bool = False
    since: int = 1
    if_none: str = "fill"
    inactive: complex | None = None
    strict: bool = False

    @property
    def dtype(self):
        return DTYPE[self.kind]

    @property
    def fill(self):
        return FILL[self.kind]

    @property
    def history(self) -> bool:
        """One row per evaluation of the point (first dimension ``iteration``)."""
        return self.dims[:1] == ("iteration",)

    @property
    def may_lack(self) -> bool:
        """A store may lack it (allocated by an option, or added after older stores)."""
        return self.when is not None or self.optional

    def attrs(self) -> dict:
        """The variable's attributes: ``units``, ``long_name`` (and ``dof_units`` over ``dof``)."""
        out: dict[str, object] = {"units": self.units, "long_name": self.long_name}
        if self.units in DOF_UNITS:
            out["dof_units"] = DOF_UNITS[self.units]
        return out

    def missing(self, rec: PointRecord, shape: tuple[int, ...]):
        """The value written for a record's None (see ``if_none``)."""
        if self.if_none == "all":
            return np.ones(shape, dtype=self.dtype)
        if self.if_none == "frequency":
            return np.float64(rec.frequency_hz)
        return np.full(shape, self.fill, dtype=self.dtype)

    def scalar(self, value):
        """A point's scalar value in the store's dtype."""
        if self.kind == "s":
            return np.array(str(value or ""), dtype=object)
        if self.kind == "b":
            return np.bool_(bool(value))
        if self.kind == "i":
            return np.int32(int(value))
        return np.float64(value)


#: the schema table, in the store's order
VARIABLES: tuple[Var, ...] = (
    Var("interface_displacement", ('dof', 'harmonic'), 'c', 'm | rad',
        'interface displacement measured on the physical substructure (u, theta)'),
    Var("interface_force", ('dof', 'harmonic'), 'c', 'N | N m',
        'interface force measured on the physical substructure (shear T conjugate to u, moment M to theta)'),
    Var("numerical_displacement", ('dof', 'harmonic'), 'c', 'm | rad',
        'interface displacement demanded by the numerical substructure, D_N^-1 (F_ext - F_P)'),
    Var("external_force", ('harmonic',), 'c', 'N',
        'external force on the numerical substructure',
        inactive=0j),
    Var("voltage", ('actuator', 'harmonic'), 'c', 'V',
        "actuator voltage coefficients of the point's solution (the last demand, or the pooled fit's solution next "
        'to it: see solution_offset)'),
    Var("interface_displacement_variance", ('dof', 'harmonic'), 'f', 'm2 | rad2',
        'variance of the mean of the measured displacement coefficients, E|X - EX|^2 / n_periods'),
    Var("interface_force_variance", ('dof', 'harmonic'), 'f', 'N2 | N2 m2',
        'variance of the mean of the measured force coefficients, E|X - EX|^2 / n_periods'),
    Var("reference_interface_displacement", ('dof', 'harmonic'), 'c', 'm | rad',
        'exact interface displacement of the emulated structure (virtual rigs only; NaN otherwise)',
        when='reference', strict=True),
    Var("excluded_energy_fraction", ('dof',), 'f', '1',
        'fraction of the measured interface displacement power in harmonics not solved for (NaN when not measured)'),
    Var("converged", (), 'b', '1',
        'residual norm fell below the tolerance'),
    Var("iterations", (), 'i', '1',
        'solver iterations used (-1: slot not written)'),
    Var("residual_norm", (), 'f', 'm',
        'norm of the final residual (displacement form unless the sweep says otherwise)'),
    Var("rig_periods", (), 'f', '1',
        'forcing periods the rig ran for this point, settling included'),
    Var("message", (), 's', '',
        'why the point stopped, for a person'),
    Var("stop_reason", (), 's', '',
        'why the point stopped: converged | iteration_limit | voltage_limit | overrange | trip | stalled',
        since=2),
    Var("written_utc", (), 'f', 's',
        'POSIX time (UTC) at which the point was written',
        source='store'),
    Var("history_voltage", ('iteration', 'actuator', 'harmonic'), 'c', 'V',
        'actuator voltage per iteration'),
    Var("history_residual", ('iteration', 'dof', 'harmonic'), 'c', 'm | rad',
        'residual R = U_P - U_N per iteration'),
    Var("history_residual_norm", ('iteration',), 'f', 'm',
        'residual norm per iteration'),
    Var("history_periods", ('iteration',), 'f', '1',
        'forcing periods spent on each iteration'),
    Var("history_length", (), 'i', '1',
        'number of valid rows of the history variables (-1: slot not written)',
        source='store'),
    Var("done", (), 'b', '1',
        'the point is completely written (written last)',
        source='store'),
    Var("numerical_force", ('dof', 'harmonic'), 'c', 'N | N m',
        'NS counterpart of interface_force: F_P*(U_P), the interface force under which the numerical substructure '
        'moves by the measured displacement',
        when='sync'),
    Var("sync_amplitude_ratio", ('variable', 'harmonic'), 'f', '1',
        'sync metric |PS|/|NS| per interface variable (u, theta, T, M) and harmonic (hbtest.method.ps_ns_sync)',
        when='sync'),
    Var("sync_phase_deg", ('variable', 'harmonic'), 'f', 'deg',
        'sync metric arg(PS/NS) per interface variable and harmonic, positive: PS leads (hbtest.method.ps_ns_sync)',
        when='sync'),
    Var("measured_interface_displacement", ('dof', 'harmonic'), 'c', 'm | rad',
        'interface displacement of the last measured state (the last demand as measured, before any pooling; '
        'interface_displacement may be an estimate next to it: solution_offset)',
        when='sync', optional=True),
    Var("measured_interface_force", ('dof', 'harmonic'), 'c', 'N | N m',
        'interface force of the last measured state (as measured_interface_displacement)',
        when='sync', optional=True),
    Var("measured_sync_amplitude_ratio", ('variable', 'harmonic'), 'f', '1',
        'sync metric |PS|/|NS| of the last measured state per interface variable and harmonic (hbtest.method.ps_ns_sync)',
        when='sync', optional=True),
    Var("measured_sync_phase_deg", ('variable', 'harmonic'), 'f', 'deg',
        'sync metric arg(PS/NS) of the last measured state, positive: PS leads (hbtest.method.ps_ns_sync)',
        when='sync', optional=True),
    Var("harmonic_active", ('harmonic',), 'b', '1',
        'the harmonic was balanced at this point (sweep.harmonics = "auto"; inactive orders are NaN)',
        when='harmonic_active', if_none='all'),
    Var("frequency_requested", (), 'f', 'Hz',
        'frequency the sweep file asked for (the coordinate holds the one applied)',
        optional=True, if_none='frequency'),
    Var("point_note", (), 's', '',
        'what the sweep decided at this point before running it (e.g. moved off a mains multiple)',
        optional=True),
    Var("solution_offset", (), 'f', 'm',
        'distance of the reported interface displacement from the last one measured, |U* - U_P(last demand)| '
        '(weighted norm; 0: reported as measured)',
        optional=True),
    Var("displacement_uncertainty", (), 'f', 'm',
        'standard uncertainty of the reported interface displacement (weighted norm |(u, l theta)| over the solved '
        'harmonics, l = test.rotation_length): the measured noise propagated through the solution, the fitted rig '
        "Jacobian's own uncertainty included; NaN: not stated",
        optional=True),
    Var("raw_samples", ('channel', 'sample'), 'f', 'V',
        'raw channel samples of the final acquisition window (valid: the first raw_length)',
        when='raw_records', source='raw', since=3),
    Var("raw_time_start", (), 'f', 's',
        'demand time of the first raw sample',
        when='raw_records', source='raw', since=3),
    Var("raw_sample_rate", (), 'f', 'Hz',
        'sample rate of the raw record',
        when='raw_records', source='raw', since=3),
    Var("raw_length", (), 'i', '1',
        'number of valid raw samples (-1: none recorded)',
        when='raw_records', source='raw', since=3),
    Var("raw_periods", (), 'i', '1',
        'whole forcing periods in the raw record',
        when='raw_records', source='raw', since=3),
    Var("history_channel_coefficients", ('iteration', 'channel', 'harmonic'), 'c', 'V',
        'raw channel coefficients (before calibration and lag correction) of every evaluation',
        when='channels'),
    Var("history_channel_variance", ('iteration', 'channel', 'harmonic'), 'f', 'V2',
        'variance of the mean of the raw channel coefficients of every evaluation',
        when='channels'),
    Var("design_reason", (), 's', '',
        'why the adaptive strategy chose this frequency (sweep.strategy)',
        when='design', source='design'),
    Var("design_frequency_hz", (), 'f', 'Hz',
        "running estimate of the target mode's undamped natural frequency after this point",
        when='design', source='design'),
    Var("design_damping_ratio", (), 'f', '1',
        "running estimate of the target mode's viscous damping ratio after this point",
        when='design', source='design'),
    Var("design_modal_constant", (), 'f', '1/kg | rad/(N s2)',
        "running estimate of the target mode's modal constant |A| (sweep.target.dof) after this point",
        when='design', source='design'),
    Var("design_frequency_ci_rel", (), 'f', '1',
        "relative half-width of the natural frequency's interval (sweep.target.confidence) after this point",
        when='design', source='design'),
    Var("design_damping_ci_rel", (), 'f', '1',
        "relative half-width of the damping ratio's interval after this point",
        when='design', source='design'),
    Var("design_modal_constant_ci_rel", (), 'f', '1',
        "relative half-width of the modal constant's interval after this point",
        when='design', source='design'),
    Var("design_curve_uncertainty", (), 'f', '1',
        "curve strategy: largest relative half-width of the fitted FRF curve's interval over the band after this "
        'point',
        when='design', source='design'),
)
SCHEMA: dict[str, Var] = {v.name: v for v in VARIABLES}


def _names(**match) -> tuple[str, ...]:
    return tuple(v.name for v in VARIABLES if all(getattr(v, k) == x for k, x in match.items()))


#: the variables a :class:`PointRecord` carries, one field each
RECORD_VARIABLES = _names(source="record")
#: the raw-record variables (present together or not at all; :meth:`RunStore.create` ``raw_records``)
RAW_VARIABLES = _names(when="raw_records")
#: the sync variables (allocated together by :meth:`RunStore.create` ``sync``; stores written before the
#: ``measured_*`` ones lack those)
SYNC_VARIABLES = _names(when="sync")
#: the per-evaluation channel-coefficient variables (present together or not at all)
EVALUATION_VARIABLES = _names(when="channels")
#: the adaptive-strategy variables (present together or not at all; :meth:`RunStore.create` ``design``)
DESIGN_VARIABLES = _names(when="design")


@dataclass
class PointRecord:
    """Everything measured at one frequency point, one field per store variable of source
    ``record`` (:data:`VARIABLES` holds their dimensions, units and meaning), plus
    ``frequency_hz`` (the slot's coordinate) and ``raw_record`` (an :class:`hbtest.rig.Acquisition`
    of the final window, the source of :data:`RAW_VARIABLES`; kept only by a store created with
    raw records). SI units, harmonic orders on the last axis in the store's ``harmonic`` order;
    history arrays hold one row per evaluation, row 0 the starting voltage, at most
    ``max_iterations + 1`` rows. A None field is written as the variable declares (``Var.if_none``)."""

    frequency_hz: float
    interface_displacement: np.ndarray
    interface_force: np.ndarray
    numerical_displacement: np.ndarray
    external_force: np.ndarray
    voltage: np.ndarray
    interface_displacement_variance: np.ndarray
    interface_force_variance: np.ndarray
    converged: bool
    iterations: int
    residual_norm: float
    rig_periods: float
    history_voltage: np.ndarray
    history_residual: np.ndarray
    history_residual_norm: np.ndarray
    history_periods: np.ndarray
    reference_interface_displacement: np.ndarray | None = None
    message: str = ""
    stop_reason: str = ""
    excluded_energy_fraction: np.ndarray | None = None
    raw_record: object | None = None
    numerical_force: np.ndarray | None = None
    sync_amplitude_ratio: np.ndarray | None = None
    sync_phase_deg: np.ndarray | None = None
    harmonic_active: np.ndarray | None = None
    measured_interface_displacement: np.ndarray | None = None
    measured_interface_force: np.ndarray | None = None
    measured_sync_amplitude_ratio: np.ndarray | None = None
    measured_sync_phase_deg: np.ndarray | None = None
    history_channel_coefficients: np.ndarray | None = None
    history_channel_variance: np.ndarray | None = None
    frequency_requested: float | None = None
    point_note: str = ""
    solution_offset: float = 0.0
    displacement_uncertainty: float = float("nan")


#: record fields that are not store variables: the slot's coordinate and the raw acquisition
RECORD_EXTRAS = ("frequency_hz", "raw_record")
#: record fields whose None means "not measured" (read back as None when the slot holds only fill)
NONE_MEANS_ABSENT = frozenset(f.name for f in fields(PointRecord) if f.default is None)


def expand_record(rec: PointRecord, active, orders) -> PointRecord:
    """``rec`` measured on the ``active`` orders, spread over the store's ``orders``: every
    variable over ``harmonic`` gets its ``Var.inactive`` value (default the fill) at the orders
    not balanced; ``harmonic_active`` says which were."""
    from dataclasses import replace

    active = [int(k) for k in active]
    orders = [int(k) for k in orders]
    if active == orders:
        return rec
    idx = [orders.index(k) for k in active]
    changes: dict[str, np.ndarray] = {}
    for var in VARIABLES:
        if var.source != "record" or var.dims[-1:] != ("harmonic",):
            continue
        value = getattr(rec, var.name)
        if value is None and var.if_none == "all":
            value = np.ones(len(active), dtype=var.dtype)
        if value is None or np.asarray(value).shape[-1] != len(active):
            continue
        value = np.asarray(value)
        fill = var.fill if var.inactive is None else var.inactive
        out = np.full(value.shape[:-1] + (len(orders),), fill, dtype=var.dtype)
        out[..., idx] = value.real if var.kind == "f" and np.iscomplexobj(value) else value
        changes[var.name] = out
    return replace(rec, **changes)  # type: ignore[arg-type]  # every name is an array field

"""One frequency point of the iterative hybrid test (docs/method.md §2): the machinery.

Apply a demand, settle, measure the PS interface through the sensors, form the residual
against the numerical substructure. *How* the voltages are iterated (Jacobian, steps, windows,
stopping) is a solver profile (:mod:`hbtest.point.profiles`); this module only measures and
offers the operations profiles are built from. Only the :class:`~hbtest.rig.Rig` protocol and
the declared capabilities (:mod:`hbtest.rig.capabilities`) are used: a virtual twin and real
hardware look the same. A rig that averages on the device (``DeviceAveraging``) is used
through that capability, raw samples otherwise.

Residual (per harmonic k of the solved orders):
- displacement form ``R_k = U_P - D_N(ikW)^-1 (F_e - F_P)`` [m, rad];
- force form ``D_N U_P + F_P - F_e`` [N, N m] (the same equation scaled by D_N).
The *convergence norm* is always the displacement form, with rotations weighted by
``rotation_length`` so that it is in metres: ``|R| = sqrt(sum_k |R_u,k|^2 + l^2 |R_th,k|^2)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import RigTrip
from ..method import broyden, estimators, harmonics
from ..method.sensors import (
    EXCLUDED_MAX_ORDER,
    InterfaceMeasurement,
    excluded_energy_fraction,
    measure_interface,
    measure_interface_from_coefficients,
)
from ..rig import ChannelCoefficients
from ..rig.capabilities import DeviceAveraging, KnownModes
from ..rig.safety import ADC_FULL_SCALE_FRACTION, overrange_channels, sensor_overrange_channels
from .base import Carried, PointResult, get_profile
from .numerical import NumericalSide

__all__ = ["PointSettings", "Evaluation", "PointOutcome", "Pooled", "PointLoop", "STOP_REASONS", "OVERRANGE_FRACTION",
           "EVALUATION_KINDS"]

#: why a point stopped (stored per point as ``stop_reason``)
STOP_REASONS = ("converged", "iteration_limit", "voltage_limit", "overrange", "trip", "stalled")

#: why an evaluation was measured (:attr:`Evaluation.kind`): the start of a point, a solver
#: step, a line-search trial, a finite-difference perturbation (Jacobian)
EVALUATION_KINDS = ("start", "iteration", "line_search", "finite_difference")

#: a channel whose |sample| reaches this fraction of the ADC full scale is taken as clipped
#: (:func:`hbtest.rig.safety.overrange_channels`)
OVERRANGE_FRACTION = ADC_FULL_SCALE_FRACTION
#: prior scale of a zero row of the rig Jacobian when pooling, relative to its largest entry
POOL_ROW_FLOOR = 1e-6

#: in a multi-harmonic test (more than one solved order: distortion products expected), the
#: fit through the transient also estimates DC and every harmonic up to this order (or the
#: sample rate's usable limit), then keeps the solved orders: DC and unsolved harmonics left
#: in the fit residual would be taken for noise and inflate the coefficient variances. A
#: single-harmonic test fits its orders only (as before)
FIT_MAX_ORDER = EXCLUDED_MAX_ORDER

#: the mains tracker (:meth:`PointLoop.track_mains`): a record's stated frequency uncertainty is
#: its Cramer-Rao bound times this (measured rms error / bound: 1.2-2.1 on synthetic records of
#: 0.6-20 s, tests/test_mains_tracking.py), and the mains may wander this much per second of rig
#: clock between records (the lab's: 0.036 Hz rms between consecutive points a minute or so apart)
MAINS_SD_INFLATION = 2.0
MAINS_WANDER_HZ_PER_S = 1e-3


@dataclass(frozen=True)
class PointSettings:
    """SI units. ``profile``: a name of :data:`hbtest.point.profiles.PROFILES`."""

    orders: tuple[int, ...]
    tolerance: float
    transient_tolerance: float
    averaging_periods: int
    max_iterations: int
    residual_form: str
    force_method: str
    profile: str
    max_step_v: float
    ramp_periods: float
    max_settle_windows: int
    accuracy: float = 0.0
    rotation_length: float = 0.1
    fd_step_v: float = 0.1
    min_window_periods: int = 3
    harmonic_tolerance: float = 0.0

    @classmethod
    def from_config(cls, cfg) -> "PointSettings":
        return cls(
            orders=tuple(cfg.sweep.harmonics),
            tolerance=cfg.test.tolerance,
            transient_tolerance=cfg.test.transient_tolerance,
            averaging_periods=cfg.test.averaging_periods,
            max_iterations=cfg.test.max_iterations,
            residual_form=cfg.test.residual,
            force_method=cfg.test.force_reconstruction,
            profile=cfg.solver.profile,
            max_step_v=cfg.solver.max_step_v,
            ramp_periods=cfg.solver.ramp_periods,
            max_settle_windows=cfg.solver.max_settle_windows,
            accuracy=cfg.test.accuracy,
            rotation_length=cfg.test.rotation_length,
            fd_step_v=cfg.solver.fd_step_v,
            harmonic_tolerance=cfg.test.harmonic_tolerance,
        )


@dataclass
class Evaluation:
    """One settled measurement at voltages ``V`` (packed)."""

    V: np.ndarray
    meas: InterfaceMeasurement
    U_N: np.ndarray
    R: np.ndarray  # complex displacement-form residual (2, n_orders)
    norm: float
    vector: np.ndarray  # what Broyden works on (chosen form, packed, weighted)
    Y: np.ndarray  # packed [U_P; F_P] (weighted) — the rig's output
    noise: float  # standard deviation of the residual norm from the measured variances
    periods: float  # forcing periods the rig ran for this evaluation (ramp + settling)
    windows: int
    settled: bool
    overrange: tuple = ()  # channels that reached the ADC full scale (clipped) in the last window
    clipped: bool = False  # the demand was scaled down to the rig's voltage limit
    ramp_periods: float = 0.0  # forcing periods of the ramp to this demand (part of ``periods``)
    window_periods: tuple = ()  # periods of each acquisition window, in order; the last is kept
    kind: str = "iteration"  # why it was measured: one of :data:`EVALUATION_KINDS`
    acq: object = None  # the last raw record (an Acquisition) where the rig gave samples, for the store

    @property
    def settling_periods(self) -> float:
        """Periods of the windows measured only to see the transient decay (all but the last)."""
        return float(sum(self.window_periods[:-1]))

    @property
    def averaging_periods(self) -> float:
        """Periods of the window whose coefficients are kept (the last)."""
        return float(self.window_periods[-1]) if self.window_periods else 0.0


@dataclass(frozen=True)
class PointOutcome:
    """How a point ended, built once by :meth:`PointLoop.run` from the profile's
    :class:`~hbtest.point.base.PointResult`. ``final`` is the evaluation reported (None when
    the rig tripped before any); ``reason`` one of :data:`STOP_REASONS`; ``message`` says it
    for a person."""

    frequency_hz: float
    final: Evaluation | None
    converged: bool
    iterations: int
    rig_periods: float
    history: list  # of Evaluation, one per rig evaluation (line-search/FD trials included)
    message: str
    reason: str = "converged"
    #: the last evaluation the rig held (pooled), when ``final`` is an estimate elsewhere: the
    #: solution of the point's pooled affine fit (hbtest profile); None when
    #: ``final`` is itself the last evaluation
    applied: Evaluation | None = None
    #: |U* - U_P(applied)| [m, weighted norm]: how far the reported interface state lies from
    #: the last one measured (0 when ``final`` is measured)
    solution_offset: float = 0.0
    #: stated standard uncertainty of the reported interface displacement [m, weighted norm]
    #: from the measured noise (the profile's propagation; NaN when it states none)
    uncertainty: float = float("nan")
    #: its share from the noise of the measurements alone, as if they had all been made at the
    #: reported demand (no extrapolation) [m, weighted norm]; NaN when not stated
    noise_uncertainty: float = float("nan")
    #: ``uncertainty`` with the fitted rig Jacobian's own uncertainty (the pool's posterior)
    #: propagated too, to second order
    #: (:meth:`hbtest.point.profiles.HbtestProfile.displacement_uncertainty`) [m, weighted
    #: norm]: the stored figure; ``uncertainty``, the acceptance's, runs about 15 % low
    #: because the Jacobian's weakly measured directions are off; NaN when not stated
    uncertainty_with_jacobian: float = float("nan")
    #: (u, theta): fraction of the measured interface displacement power in harmonics not
    #: solved for, from the final raw record (:func:`hbtest.method.sensors.excluded_energy_fraction`);
    #: None when the rig gave no samples (device averaging) or the point has no evaluation
    excluded_energy_fraction: np.ndarray | None = None
    #: the last evaluation as the rig measured it at the last demand (before any pooling), when
    #: ``final`` is not it; None: ``final`` is the last measurement (see :attr:`last_measured`)
    measured: Evaluation | None = None

    @property
    def last_measured(self) -> Evaluation | None:
        """The last measured state of the point: the synchronisation the paper's table
        measures (``measured``, else ``final``)."""
        return self.final if self.measured is None else self.measured

    def breakdown(self) -> dict[str, float]:
        """Where the rig time of the point went, in forcing periods. Two views of the same
        total: by phase (``ramp``, ``settling`` — windows discarded while the transient
        decays, ``averaging`` — the windows kept, ``other`` — rig time outside evaluations,
        e.g. a safe-state ramp) and by purpose (one key per :data:`EVALUATION_KINDS`:
        ``start``, ``iteration``, ``line_search``, ``finite_difference``), plus
        ``evaluations``, their count. ``ramp + settling + averaging + other == total``."""
        out = dict(ramp=0.0, settling=0.0, averaging=0.0)
        out.update({k: 0.0 for k in EVALUATION_KINDS})
        for e in self.history:
            out["ramp"] += e.ramp_periods
            out["settling"] += e.settling_periods
            out["averaging"] += e.averaging_periods
            out[e.kind] += e.periods
        out["other"] = self.rig_periods - out["ramp"] - out["settling"] - out["averaging"]
        out["total"] = self.rig_periods
        out["evaluations"] = float(len(self.history))
        return out


@dataclass(frozen=True)
class Measured:
    """Interface coefficients without noise information (for predictions)."""

    displacement: np.ndarray
    force: np.ndarray

    @property
    def displacement_variance(self):
        return np.zeros(self.displacement.shape)

    @property
    def force_variance(self):
        return np.zeros(self.force.shape)


@dataclass(frozen=True)
class Pooled:
    """What :meth:`PointLoop.pool` returns: the pooled ``evaluation``, the fitted rig
    ``jacobian`` (the prior itself when nothing was pooled) and its posterior row covariance
    ``jacobian_cov`` (the prior's, possibly None, when nothing was pooled), and the affine
    ``fit`` itself (None when nothing was pooled)."""

    evaluation: Evaluation
    jacobian: np.ndarray | None
    jacobian_cov: np.ndarray | None
    fit: estimators.AffinePool | None = None


class GrowingRecord:
    """The raw records of one evaluation fitted through its transient (:meth:`PointLoop.evaluate_through_transient`),
    growing at its end: their samples concatenated (demand times ``t``, rig clock ``clock``
    [s], channels ``x`` in the order of the first record's data), each record's mains estimate
    (with the rig clock of its end, :attr:`mains`) computed once by ``mains_of`` when it comes
    (None: not tracked), and the fit's :class:`~hbtest.method.estimators.GrowingDesign`. Every
    array is extended by the new record's values only: the same bits as concatenating all."""

    def __init__(self, mains_of=None):
        self.records: list = []
        self.mains: list = []
        self.design = estimators.GrowingDesign()
        self._mains_of = mains_of
        self.t = self.clock = self.x = None

    def append(self, a) -> None:
        """Add the raw record ``a`` (an Acquisition) after the others."""
        names = list(self.records[0].data) if self.records else list(a.data)
        # the rig clock of every sample (the record ends at ``elapsed_s``): continuous across
        # records, unlike the demand time base, for the decays and the mains regressors
        clock = a.elapsed_s - (a.t.size - np.arange(a.t.size)) / a.sample_rate_hz
        x = np.stack([np.asarray(a.data[c]) for c in names])
        if self.records:
            self.t, self.clock, self.x = np.concatenate([self.t, a.t]), np.concatenate([self.clock, clock]), np.concatenate([self.x, x], axis=1)
        else:
            self.t, self.clock, self.x = np.asarray(a.t), clock, x
        self.records.append(a)
        if self._mains_of is not None:
            self.mains.append((self._mains_of(a), float(a.elapsed_s)))


class PointLoop:
    """The measuring part of a point (apply, settle or fit through the transient, reduce,
    residual, pool, finite differences) and :meth:`run`, which hands one point to the solver
    profile named in the settings (:data:`hbtest.point.base.PROFILES`). The measuring part
    sizes its records by the profile's frozen :attr:`rule` and never calls the profile."""

    def __init__(self, rig, ns, force_vector, settings: PointSettings, progress=None):
        self.rig = rig
        self.ns = ns
        self.force_vector = force_vector
        self.s = settings
        self.profile = get_profile(settings.profile)
        self.rule = self.profile.window_rule(settings)
        self.orders = np.asarray(settings.orders, dtype=int)
        desc = rig.describe()
        self.layout = desc.sensors
        self.n_act = len(desc.actuators)
        self.voltage_limit = desc.voltage_limit_v
        self.identity = desc.identity
        self.input_range = desc.input_range_v
        self.p = harmonics.packed_size(self.orders)
        self.progress = progress
        self.window = self.rule.initial_window()
        self._scaleY: np.ndarray | None = None
        self._modes = None
        #: the tracked mains frequency (:meth:`track_mains`): (estimate [Hz], variance [Hz^2],
        #: rig clock [s] of its last record), None before the first raw record
        self._mains: tuple[float, float, float] | None = None

    # -- packing helpers -------------------------------------------------------------------
    def weights(self) -> np.ndarray:
        """Row weights of packed interface displacement vectors (u: 1, theta: l)."""
        return np.repeat([1.0, self.s.rotation_length], self.p)

    def pack2(self, X: np.ndarray) -> np.ndarray:
        return harmonics.pack(X, self.orders).reshape(-1)

    def norm(self, R: np.ndarray) -> float:
        return float(np.linalg.norm(self.weights() * self.pack2(R)))

    def unpack_voltage(self, V: np.ndarray) -> np.ndarray:
        return harmonics.unpack(V.reshape(self.n_act, self.p), self.orders)

    def output_scale(self, num: NumericalSide) -> np.ndarray:
        """Weights of the packed rig output [U_P; F_P]: displacement weights for U, and for F
        the inverse of the largest ``|D_N|`` entry at the first frequency the loop ran (fixed
        for the whole sweep, so the carried rig Jacobian keeps its meaning)."""
        if self._scaleY is None:
            scale_F = 1.0 / np.abs(num.D).max()
            self._scaleY = np.concatenate([self.weights(), np.repeat([scale_F, scale_F / self.s.rotation_length], self.p)])
        return self._scaleY

    def displacement_amplitude(self, e: Evaluation) -> float:
        """Weighted norm of the measured interface displacement [m]."""
        return float(np.linalg.norm(self.weights() * self.pack2(e.meas.displacement)))

    # -- measurement -----------------------------------------------------------------------
    def residual(self, num: NumericalSide, meas):
        """(U_N, R, Broyden vector, residual noise std [m]) of a measurement."""
        if self.s.residual_form == "force":
            RF = num.force_residual(meas.displacement, meas.force)
            vec = self.pack2(RF) * np.repeat([1.0, 1.0 / self.s.rotation_length], self.p) / np.abs(num.D).max()
            if num.is_linear:
                U_N = num.numerical_displacement(meas.force)
            else:
                # the displacement the numerical side would need for the measured force,
                # linearised at U_P: U_N = U_P - (dRF/dU)^-1 RF (U_N(F_P) may not be reachable
                # on a folding branch; the force form never needs it)
                dU = np.linalg.solve(num.force_residual_jacobian(meas.displacement), self.pack2(RF))
                U_N = meas.displacement - harmonics.unpack(dU.reshape(2, self.p), self.orders)
        else:
            U_N = num.numerical_displacement(meas.force)
        R = meas.displacement - U_N
        if self.s.residual_form != "force":
            vec = self.weights() * self.pack2(R)
        noise = float(np.sqrt(np.sum(self.residual_variance(num, meas) * np.array([[1.0], [self.s.rotation_length**2]]))))
        return U_N, R, vec, noise

    def residual_variance(self, num: NumericalSide, meas) -> np.ndarray:
        """Variance of each displacement-form residual coefficient, (2, n_orders) [m^2, rad^2]:
        ``var U + |D_N^-1|^2 var F`` per DOF and order (NaN variances count as 0)."""
        Dinv = np.linalg.inv(num.D)
        var_R = meas.displacement_variance + np.einsum("kij,jk->ik", np.abs(Dinv) ** 2, meas.force_variance)
        return np.nan_to_num(var_R, nan=0.0)

    def per_harmonic(self, num: NumericalSide, e: Evaluation) -> dict:
        """Per solved order (arrays over ``orders``, weighted as the convergence norm, metres):
        ``residual`` |R_k|, ``amplitude`` |U_P,k|, ``noise`` the standard deviation of |R_k|
        and ``amplitude_noise`` that of |U_P,k|, from the measured variances."""
        w2 = np.array([[1.0], [self.s.rotation_length**2]])
        var_U = np.nan_to_num(np.asarray(e.meas.displacement_variance, dtype=float), nan=0.0)
        return dict(
            residual=np.sqrt(np.sum(np.abs(e.R) ** 2 * w2, axis=0)),
            amplitude=np.sqrt(np.sum(np.abs(e.meas.displacement) ** 2 * w2, axis=0)),
            noise=np.sqrt(np.sum(self.residual_variance(num, e.meas) * w2, axis=0)),
            amplitude_noise=np.sqrt(np.sum(var_U * w2, axis=0)),
        )

    def track_mains(self, records) -> None:
        """Update the measured mains frequency from raw ``records`` (a mains rejection at the
        nominal ``mains_hz`` leaves a rotating bias when the lab's mains is off nominal, and the
        lab's wanders: 49.98-50.17 Hz over its runs). Each record gives an estimate by
        :func:`hbtest.method.estimators.mains_frequency` (standard uncertainty: its Cramer-Rao bound times
        ``MAINS_SD_INFLATION``); they are combined by a scalar Kalman filter whose state wanders
        ``MAINS_WANDER_HZ_PER_S`` per second of rig clock between records."""
        if self._tracks_mains():
            self._mains_update([(self._mains_of(a), float(a.elapsed_s)) for a in records])

    def _tracks_mains(self) -> bool:
        return bool(self.rule.reject_mains and self.layout.mains_frequencies)

    def _mains_of(self, a):
        """The mains estimate of one raw record (:func:`~hbtest.method.estimators.mains_frequency`)."""
        x = np.stack([np.asarray(a.data[c], dtype=float) for c in self.layout.channel_names])
        return estimators.mains_frequency(a.t, x, a.frequency_hz, self.layout.mains_hz, self.layout.mains_multiples)

    def _mains_update(self, estimates) -> None:
        """The Kalman update of :meth:`track_mains` by ``estimates``: (MainsEstimate or None, rig
        clock of its record's end [s]) in order."""
        for est, elapsed in estimates:
            if est is None or not np.isfinite(est.sd_hz):
                continue
            r = (MAINS_SD_INFLATION * est.sd_hz) ** 2
            if self._mains is None:
                self._mains = (est.frequency_hz, r, elapsed)
                continue
            f, P, t = self._mains
            P += (MAINS_WANDER_HZ_PER_S * max(elapsed - t, 0.0)) ** 2
            k = P / (P + r)
            self._mains = (f + k * (est.frequency_hz - f), (1 - k) * P, elapsed)

    @property
    def mains_estimate(self) -> tuple[float, float] | None:
        """(tracked mains frequency [Hz], its standard uncertainty [Hz]), None before any."""
        return None if self._mains is None else (self._mains[0], float(np.sqrt(self._mains[1])))

    def mains_layout(self):
        """The sensor layout with the tracked mains frequency (the nominal one before any)."""
        return self.layout if self._mains is None else replace(self.layout, mains_hz=self._mains[0])

    def _measure(self, n_periods: int):
        """One window: (InterfaceMeasurement, channels over range, raw record or None)."""
        reject = self.rule.reject_mains
        if isinstance(self.rig, DeviceAveraging):  # the device removes the tracked mains (nominal before any)
            nuisance = self.mains_layout().mains_frequencies if reject else ()
            rec = self.rig.acquire_coefficients(int(n_periods), self.orders, nuisance_hz=nuisance)
            return measure_interface_from_coefficients(rec, self.layout, self.orders, self.s.force_method), tuple(rec.overrange), None
        acq = self.rig.acquire(int(n_periods))
        self.track_mains([acq])
        meas = measure_interface(acq, self.mains_layout(), self.orders, self.s.force_method, reject_mains=reject)
        return meas, self._overrange([acq]), acq

    def transient_modes(self):
        """The system's eigenvalues [rad/s] a transient fit needs, or None when this rig does
        not offer them (:class:`~hbtest.rig.capabilities.KnownModes`). A rig that also averages
        on the device (:class:`~hbtest.rig.capabilities.DeviceAveraging`, a box with an
        identification) is then read raw: fitting through the transient saves far more rig
        time than the device's averaging saves transfer, and the host tracks the mains."""
        if not isinstance(self.rig, KnownModes):
            return None
        if self._modes is None:
            self._modes = np.asarray(self.rig.modes(), dtype=complex)
        return self._modes

    def _fit_record(self, rec: "GrowingRecord", f: float, modes):
        """Steady state of the concatenated raw records of ``rec`` (acquired after the ramp) by
        :func:`hbtest.method.estimators.fit_through_transient`: (InterfaceMeasurement, over range).

        The tracker is updated by every record of ``rec`` again, as at each of its earlier fits
        (each record's estimate computed once, when it came). That re-use is a known
        overconfidence (the same record counted at every fit of the evaluation), kept as it is:
        removing it changes the stored results."""
        records = rec.records
        names = list(records[0].data)
        t, clock, x = rec.t, rec.clock, rec.x
        if self._tracks_mains():
            self._mains_update(rec.mains)
        nuisance = self.mains_layout().mains_frequencies if self.rule.reject_mains else ()
        fit_orders = self.orders
        if np.count_nonzero(self.orders) > 1:  # FIT_MAX_ORDER: DC and unsolved harmonics too
            fs = 1.0 / float(np.median(np.diff(t)))
            top = max(min(FIT_MAX_ORDER, harmonics.max_usable_harmonic(f, fs)), int(self.orders.max()))
            fit_orders = np.array(sorted({0, *range(1, top + 1), *self.orders.tolist()}))
        keep = np.searchsorted(fit_orders, self.orders)
        tf = estimators.fit_through_transient(t, x, f, fit_orders, modes, t0=float(clock[0]), nuisance_hz=nuisance, clock=clock,
                                              design=rec.design)
        over = self._overrange(records)
        n_periods = int(sum(a.n_periods for a in records))
        out = ChannelCoefficients({c: tf.coefficients[i, keep] for i, c in enumerate(names)}, {c: tf.variance[i, keep] for i, c in enumerate(names)},
                                  self.orders, f, n_periods, records[-1].elapsed_s, over, correlation=tf.correlation)
        return measure_interface_from_coefficients(out, self.layout, self.orders, self.s.force_method), over

    def _overrange(self, records: list) -> tuple:
        """Channels clipped in any of the raw ``records``: reported by the instrument, or at
        the ADC full scale (:func:`~hbtest.rig.safety.overrange_channels`), or at the sensor's own
        output range (``full_scale_v``, :func:`~hbtest.rig.safety.sensor_overrange_channels`), sorted."""
        over: set = set()
        for a in records:
            over |= set(a.overrange) | set(overrange_channels(a.data, self.input_range))
            over |= set(sensor_overrange_channels(a.data, self.layout.channels))
        return tuple(sorted(over))

    def _apply(self, f: float, V: np.ndarray):
        """Clip ``V`` to the voltage limit and ramp the rig to it: (V, clipped, rig time before,
        rig time after the ramp) [s]."""
        V, clipped = broyden.clip_voltage(V, self.n_act, self.voltage_limit, self.orders)
        t0 = self.rig.elapsed_s
        self.rig.set_demand(f, self.unpack_voltage(V), self.orders, ramp_periods=self.s.ramp_periods)
        return V, clipped, t0, self.rig.elapsed_s

    def evaluate_through_transient(self, num: NumericalSide, V: np.ndarray, transient_tol: float | None = None, kind: str = "iteration",
                                   noise_target: float | None = None) -> Evaluation:
        """Apply ``V``, and instead of waiting for the transient, fit the steady state and the
        free decay of the system's modes together on the record that starts when the ramp
        ends (:mod:`hbtest.method.estimators`). The record grows (every period measured is kept in
        the fit) until the residual noise meets the window rule
        (:meth:`WindowRule.record_periods <hbtest.point.base.WindowRule.record_periods>` gives the periods the noise target needs;
        ``noise_target`` [m], when given, is the residual noise this evaluation must reach)."""
        transient_tol = self.s.transient_tolerance if transient_tol is None else transient_tol
        f = num.frequency_hz
        V, clipped, t0, t_ramp = self._apply(f, V)
        modes = self.transient_modes()
        rec, lengths = GrowingRecord(self._mains_of if self._tracks_mains() else None), []
        total = 0
        want = self.rule.first_record(self.window)
        windows = 0
        for windows in range(1, max(1, self.rule.max_windows()) + 1):
            tw = self.rig.elapsed_s
            rec.append(self.rig.acquire(int(want - total)))
            lengths.append((self.rig.elapsed_s - tw) * f)
            total = want
            meas, over = self._fit_record(rec, f, modes)
            U_N, R, vec, noise = self.residual(num, meas)
            want = self.rule.record_periods(total, noise, self.norm(R), transient_tol, noise_target)
            if want <= total or over:
                break
        self.window = want
        scaleY = self.output_scale(num)
        Y = scaleY * np.concatenate([self.pack2(meas.displacement), self.pack2(meas.force)])
        periods = (self.rig.elapsed_s - t0) * f
        # every window is kept in the fit: the breakdown counts them all as averaging
        return Evaluation(V.copy(), meas, U_N, R, self.norm(R), vec, Y, noise, periods, windows, True, over, clipped,
                          ramp_periods=(t_ramp - t0) * f, window_periods=(float(sum(lengths)),), kind=kind, acq=rec.records[-1])

    def evaluate(self, num: NumericalSide, V: np.ndarray, transient_tol: float | None = None, kind: str = "iteration",
                 noise_target: float | None = None) -> Evaluation:
        """Apply ``V`` (clipped to the voltage limit), settle, measure. Rig time: ramp +
        windows until the window rule judges the residual settled (default tolerance: the test's
        transient tolerance); the rule also sizes the windows, sets the least and most
        windows and says which residual's change between windows counts.
        ``kind``: why the evaluation is made (:data:`EVALUATION_KINDS`), for the rig-time
        breakdown. ``noise_target``: see :meth:`evaluate_through_transient` (only there)."""
        if self.rule.fit_transient and self.transient_modes() is not None:
            return self.evaluate_through_transient(num, V, transient_tol, kind, noise_target)
        transient_tol = self.s.transient_tolerance if transient_tol is None else transient_tol
        f = num.frequency_hz
        V, clipped, t0, t_ramp = self._apply(f, V)
        rule = self.rule
        prev, prev_d = None, None
        settled = False
        scaleY = self.output_scale(num)
        windows = 0
        lengths = []
        least = rule.min_windows
        most = max(least, rule.max_windows())
        gap = rule.gap_periods(f)
        for windows in range(1, most + 1):
            if gap > 0:
                self.rig.wait(gap)
            tw = self.rig.elapsed_s
            meas, over, acq = self._measure(self.window)
            lengths.append((self.rig.elapsed_s - tw) * f)
            U_N, R, vec, noise = self.residual(num, meas)
            self.window = rule.next_window(self.window, noise, transient_tol)
            if prev is not None:
                d = self._settle_distance(num, prev, (meas, R))
                if windows >= least and rule.settled(d, prev_d, noise, transient_tol):
                    settled = True
                    break
                prev_d = d
            prev = (meas, R)
        Y = scaleY * np.concatenate([self.pack2(meas.displacement), self.pack2(meas.force)])
        periods = (self.rig.elapsed_s - t0) * f
        return Evaluation(V.copy(), meas, U_N, R, self.norm(R), vec, Y, noise, periods, windows, settled, over, clipped,
                          ramp_periods=(t_ramp - t0) * f, window_periods=tuple(lengths), kind=kind, acq=acq)

    def _settle_distance(self, num: NumericalSide, prev, cur) -> float:
        """Change between two successive windows, each ``(measurement, displacement-form
        residual R)``: the convergence norm of the change of R [m], or with the rule's
        ``settle_on_force`` the 2-norm of the change of the force-form residual [N]."""
        if self.rule.settle_on_force:
            change = self.force_residual(num, cur[0]) - self.force_residual(num, prev[0])
            return float(np.linalg.norm(self.rule.settle_basis(change, self.p, self.s.rotation_length)))
        return self.norm(cur[1] - prev[1])

    def packed_output_variance(self, num: NumericalSide, meas) -> np.ndarray:
        """Variance of each entry of the packed, weighted rig output ``Y`` of a measurement
        (a complex coefficient's variance split evenly over its two real parts)."""
        def packed(v):
            v = np.nan_to_num(np.asarray(v, dtype=float), nan=0.0)
            h = np.where(self.orders == 0, v, v / 2)
            return self.pack2(h - 1j * h)
        return self.output_scale(num) ** 2 * np.concatenate([packed(meas.displacement_variance), packed(meas.force_variance)])

    def packed_output_correlation(self, num: NumericalSide, meas) -> np.ndarray | None:
        """Correlation matrix of the packed rig output ``Y`` of a measurement from the noise of
        its raw channels (circular complex noise; correlated across channels as the
        measurement's ``channel_correlation`` says, independent without it): the sensor
        reduction mixes channels (two lasers give u and theta, two gauges T and M), so the
        outputs' errors are correlated. First order through the reduction, which is linear in
        the channel coefficients. None when the measurement carries no raw channels."""
        raw = getattr(meas, "raw_channels", None)
        if raw is None:
            return None
        coef, var = (np.asarray(x) for x in raw)
        names = self.layout.channel_names
        if coef.shape[0] != len(names):
            return None
        f = num.frequency_hz
        scaleY = self.output_scale(num)

        def packed(c):
            rec = ChannelCoefficients({n: c[i] for i, n in enumerate(names)}, {n: var[i] for i, n in enumerate(names)},
                                      self.orders, f, 1, 0.0)
            m = measure_interface_from_coefficients(rec, self.layout, self.orders, self.s.force_method)
            return scaleY * np.concatenate([self.pack2(m.displacement), self.pack2(m.force)])

        base = packed(coef)
        rho = getattr(meas, "channel_correlation", None)
        rho = np.eye(coef.shape[0]) if rho is None else np.asarray(rho, dtype=float)
        cov = np.zeros((base.size, base.size))
        for k in range(coef.shape[1]):
            for unit in (1.0, 1j):
                sens = np.zeros((coef.shape[0], base.size))  # output change per unit of channel i
                for i in range(coef.shape[0]):
                    d = np.zeros_like(coef)
                    d[i, k] = unit
                    sens[i] = packed(coef + d) - base
                sd = np.sqrt(var[:, k] / (2.0 if self.orders[k] != 0 else 1.0))
                cov += sens.T @ (rho * np.outer(sd, sd)) @ sens
        sd = np.sqrt(np.diag(cov))
        ok = sd > 0
        corr = np.eye(base.size)
        corr[np.ix_(ok, ok)] = cov[np.ix_(ok, ok)] / np.outer(sd[ok], sd[ok])
        return corr

    def pool(self, num: NumericalSide, evaluations: list, G: np.ndarray, prior_fraction: float,
             demands=None, at=None, prior_cov=None, between: float = 0.0) -> Pooled:
        """The last of ``evaluations`` (all at this point's frequency) with its measurement
        replaced by the estimate from all of them (:func:`hbtest.method.estimators.pool_affine`:
        the rig output affine in the voltages, prior Jacobian ``G`` with entrywise standard
        deviation ``prior_fraction`` times the largest entry of its row). Rig time and
        windows stay the last evaluation's own; the estimate's ``n_periods`` counts every
        window used. Returns a :class:`Pooled`: that evaluation, the fitted rig Jacobian
        (``G`` itself when there is only one evaluation) and its posterior covariance.

        Evaluations with a sensor over range (clipped) are left out; a clipped last one is
        returned unpooled.

        ``demands`` (one row per evaluation): the coordinates the output is affine in, when
        they are not the packed voltages alone — e.g. the scaled ``(V, f)`` of an arclength
        corrector whose evaluations differ slightly in frequency (``G`` then has one column
        per coordinate). Default: each evaluation's ``V``.

        ``at``: the demand (in the coordinates of ``demands``) the estimate is made at —
        default the last evaluation's; elsewhere the returned evaluation's ``V`` is ``at``
        (a demand the rig did not hold: the affine fit's estimate there, with its variance).

        ``prior_cov`` (rows of ``G`` x coordinates x coordinates): a full prior covariance of
        each row of the Jacobian instead of ``prior_fraction``'s entrywise one (a recursive
        estimate carried from earlier points). The posterior covariance has the same shape;
        it is the prior's when nothing was pooled.

        ``between``: the largest scatter beyond their noise that is averaged (0: none, ``inf``:
        any; :func:`hbtest.method.estimators.pool_affine`, ``max_between``, scaled outputs)."""
        last = evaluations[-1]
        # clipped records (a sensor at its full scale) are no measurement: left out of the
        # fit, and a clipped last one is returned as it is (the caller stops on it)
        keep = [j for j, e in enumerate(evaluations) if not e.overrange]
        if (last.overrange and at is None) or not keep:
            return Pooled(last, G, prior_cov)
        if len(keep) < len(evaluations):
            evaluations = [evaluations[j] for j in keep]
            last = evaluations[-1]
            if demands is not None:
                demands = np.atleast_2d(np.asarray(demands, dtype=float))[keep]
        if G is None or not np.any(G) or (at is None and len(evaluations) == 1):
            # nothing to pool, or no Jacobian known yet (an all-zero G is no prior)
            return Pooled(last, G, prior_cov)
        V = np.stack([e.V for e in evaluations]) if demands is None else np.atleast_2d(np.asarray(demands, dtype=float))
        Y = np.stack([e.Y for e in evaluations])
        var = np.stack([self.packed_output_variance(num, e.meas) for e in evaluations])
        # a row of G that is zero (an output the voltages do not reach, e.g. on a noise-free
        # twin) takes the scale of the whole G, so its prior precision stays finite
        rowmax = np.max(np.abs(G), axis=1, keepdims=True)
        floor = POOL_ROW_FLOOR * max(float(np.max(np.abs(G))), np.finfo(float).tiny)
        sd = prior_fraction * np.maximum(rowmax, floor) * np.ones_like(G)
        where = V[-1] if at is None else np.asarray(at, dtype=float)
        pl = estimators.pool_affine(V, Y, var, where, G, sd, prior_cov=prior_cov, between=between > 0,
                                    max_between=between)
        meas = self._pooled_measurement(num, pl, int(sum(evaluations[j].meas.n_periods for j in pl.used)), last)
        U_N, R, vec, noise = self.residual(num, meas)
        est = replace(last, meas=meas, U_N=U_N, R=R, norm=self.norm(R), vector=vec, Y=pl.value.copy(), noise=noise)
        if at is not None and demands is None:
            est = replace(est, V=where.copy())
        return Pooled(est, pl.jacobian, pl.jacobian_cov, pl)

    def _pooled_measurement(self, num: NumericalSide, pl, n_periods: int, last: Evaluation) -> InterfaceMeasurement:
        """The interface measurement a pool estimates (:class:`hbtest.method.estimators.AffinePool`
        ``pl``: packed, weighted outputs and variances) over ``n_periods`` periods; the raw
        channels stay the ``last`` window's own (re-reduction input)."""
        n = 2 * self.p
        scaleY = self.output_scale(num)

        def unpack(v):
            return harmonics.unpack(v.reshape(2, self.p), self.orders)

        def unpack_var(v):
            u = unpack(v)
            return np.real(u) - np.imag(u)

        return InterfaceMeasurement(self.orders, unpack(pl.value[:n] / scaleY[:n]), unpack(pl.value[n:] / scaleY[n:]),
                                    unpack_var(pl.variance[:n] / scaleY[:n] ** 2),
                                    unpack_var(pl.variance[n:] / scaleY[n:] ** 2), n_periods,
                                    raw_channels=getattr(last.meas, "raw_channels", None),
                                    channel_correlation=getattr(last.meas, "channel_correlation", None))

    def force_residual(self, num: NumericalSide, meas) -> np.ndarray:
        """The force-form residual ``D_N U_P + F_P - F_e``, packed, in newtons: force rows in N,
        moment rows divided by ``rotation_length`` (the force pair at that lever, N)."""
        RF = num.force_residual(meas.displacement, meas.force)
        return self.pack2(RF) * np.repeat([1.0, 1.0 / self.s.rotation_length], self.p)

    # -- Jacobians -------------------------------------------------------------------------
    def residual_jacobian_from_G(self, num: NumericalSide, G: np.ndarray, at=None) -> np.ndarray:
        """``dR/dV = [I, D_N^-1] G`` in the weighted packed coordinates of the chosen form.
        A nonlinear numerical side needs the operating point ``at`` (a measurement with
        ``displacement``): its ``d RF / d U_P`` replaces ``D_N`` in the force form."""
        n = 2 * self.p
        scaleY = self.output_scale(num)
        GU = G[:n] / scaleY[:n, None]
        GF = G[n:] / scaleY[n:, None]
        if self.s.residual_form == "force":
            Dr = num.force_residual_jacobian(None if at is None else at.displacement)
            w = np.repeat([1.0, 1.0 / self.s.rotation_length], self.p) / np.abs(num.D).max()
            return w[:, None] * (Dr @ GU + GF)
        Dinv = harmonics.real_operator(np.linalg.inv(num.D), self.orders)
        return self.weights()[:, None] * (GU + Dinv @ GF)

    def finite_differences(self, num, base: Evaluation, history: list, transient_tol: float | None = None):
        """Perturb each packed voltage by ``fd_step_v``: returns (J_residual, G) columns."""
        m = base.V.size
        JR = np.empty((base.vector.size, m))
        G = np.empty((base.Y.size, m))
        for j, dv in enumerate(broyden.finite_difference_columns(m, self.s.fd_step_v).T):
            e = self.evaluate(num, base.V + dv, transient_tol, kind="finite_difference")
            history.append(e)
            step = e.V - base.V
            jj = int(np.argmax(np.abs(step)))
            JR[:, j] = (e.vector - base.vector) / step[jj]
            G[:, j] = (e.Y - base.Y) / step[jj]
        return JR, G

    def clip(self, V: np.ndarray) -> np.ndarray:
        return broyden.clip_voltage(V, self.n_act, self.voltage_limit, self.orders)[0]

    def start_voltage(self, carry: Carried) -> np.ndarray:
        """The last converged solution, else the carried start, else zero volts."""
        if carry.solutions:
            return carry.solutions[-1][1].copy()
        if carry.start_V is not None:
            return carry.start_V.copy()
        return np.zeros(self.n_act * self.p)

    # -- the point -------------------------------------------------------------------------
    def new_carry(self, start_V: np.ndarray | None = None) -> Carried:
        """The profile's empty carried state (``start_V``: where the first point starts)."""
        return self.profile.new_carry(start_V)

    def run(self, frequency_hz: float, carry: Carried) -> PointOutcome:
        """Run one point with the profile. A trip of the rig's safety layer ends the point
        (reason ``trip``) after the rig was ramped to its safe state; the trip stays latched
        on the rig and the caller decides whether the sweep goes on."""
        num = NumericalSide.build(self.ns, self.force_vector, frequency_hz, self.orders)
        t0 = self.rig.elapsed_s
        history: list[Evaluation] = []
        try:
            res = self.profile.run(self, num, carry, history)
        except RigTrip as e:
            self.rig.safe_state()
            res = PointResult(history[-1] if history else None, False, len(history), "trip", f"rig tripped: {e}")
        if res.converged:
            carry.solutions.append((frequency_hz, res.final.V.copy(), res.final.Y.copy()))
        return self.outcome(frequency_hz, res, history, (self.rig.elapsed_s - t0) * frequency_hz)

    def outcome(self, frequency_hz: float, res: PointResult, history: list, rig_periods: float) -> PointOutcome:
        """The frozen outcome of a point from the profile's result, its evaluations and its rig
        time [periods]; the power outside the solved harmonics from the final raw record."""
        excluded = None
        if res.final is not None and res.final.acq is not None:
            excluded = excluded_energy_fraction(res.final.acq, self.mains_layout(), self.orders, method=self.s.force_method,
                                                reject_mains=self.rule.reject_mains)
        return PointOutcome(frequency_hz, res.final, res.converged, res.iterations, rig_periods, history, res.message,
                            res.reason, res.applied, res.solution_offset, res.uncertainty, res.noise_uncertainty,
                            res.uncertainty_with_jacobian, excluded, measured=res.measured)

    def result(self, e: Evaluation, converged: bool, iterations: int, reason: str, message: str | None = None,
               **estimate) -> PointResult:
        """The result of a point that ended at evaluation ``e`` for ``reason`` (``message``:
        the profile's own account of it, e.g. what stalled; ``estimate``: the further
        :class:`~hbtest.point.base.PointResult` fields of a point reported at an estimate)."""
        if message is None:
            reason, message = self.stop_message(e, reason)
        return PointResult(e, converged, iterations, reason, message, **estimate)

    def stop_message(self, e: Evaluation, reason: str) -> tuple[str, str]:
        """``(reason, message)`` of a point that stopped at ``e``: an iteration limit reached
        with the demand clipped is the voltage limit."""
        if reason == "overrange":
            return reason, f"sensor over range (clipped): {', '.join(e.overrange)} — lower the excitation or extend the channel range"
        if reason == "iteration_limit" and e.clipped:
            return "voltage_limit", (f"voltage limit of {self.voltage_limit:g} V reached: the solution needs a larger "
                                     "demand than the rig allows")
        messages = {"converged": "converged", "iteration_limit": f"iteration limit ({self.s.max_iterations}) reached",
                    "stalled": "no progress: the residual stopped decreasing"}
        return reason, messages.get(reason, reason)

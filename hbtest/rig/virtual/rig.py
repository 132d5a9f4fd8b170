"""The virtual twin behind the :class:`hbtest.rig.Rig` protocol: the demand generator
(phase-continuous, raised-cosine ramps of frequency and coefficients together), the
acquisition clock, limits and life cycle; the simulation itself is :mod:`.engine`, the exact
truths :mod:`.reference`.

Time base (``hbtest.rig``): the demand is ``v(t) = a0 + Re sum_k V_k exp(i k 2 pi f t)`` [V]
per actuator with ``t`` the demand time; acquisitions report sample times in it. The rig clock
(:attr:`VirtualRig.elapsed_s`) is simulated time [s] since the rig was opened.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError, InstrumentError
from ...method.sensors import SensorLayout
from ...method.structures import Beam
from ...method.substructure import Substructure
from .. import Acquisition, RigDescription, check_voltage
from ..safety import normalise_demand
from . import reference
from .build import build_model_or_config_error
from .engine import MAX_CHUNK, Engine
from .model import amplifier_input, input_harmonics
from .reference import SteadyState
from .scatter import DemandScatter
from .spec import VirtualSpec

__all__ = ["Demand", "VirtualRig", "open_virtual", "MAX_CALL_SAMPLES"]

MAX_CALL_SAMPLES = 1 << 31  # samples one set_demand ramp, acquire or wait may simulate


def _sample_count(n: float, what: str) -> int:
    """``round(n)`` for a sample count ``n``, or ValueError when it is not finite or beyond
    MAX_CALL_SAMPLES (a frequency so low, or so many periods, that the call could never end)."""
    if not n <= MAX_CALL_SAMPLES:
        raise ValueError(f"{what} of {n:.4g} samples is beyond {MAX_CALL_SAMPLES} (frequency too low or too many periods)")
    return int(round(n))


@dataclass(frozen=True)
class Demand:
    """The actuator demand in force: ``frequency_hz`` (None before the first demand),
    ``voltage`` (2, n_orders) complex coefficients [V] at harmonic ``orders``."""

    frequency_hz: float | None
    voltage: np.ndarray
    orders: np.ndarray


class VirtualRig:
    """The virtual twin behind the :class:`hbtest.rig.Rig` protocol.

    ``VirtualRig(rig_config, seed=None, *, noise=True, per_sample=False)``: ``rig_config``
    from :func:`hbtest.config.load_rig` (kind "virtual"); ``seed`` overrides the file's; with
    ``noise=False`` the sensors are ideal (no white noise, no mains, no quantisation) —
    the filters, the delay and all physics stay; ``per_sample=True`` simulates every sample
    with the explicit recurrence of the friction path even without friction (slower; the same
    exact discrete solution — to check the closed-form path against).

    Protocol: :meth:`describe`, :meth:`set_demand`, :meth:`acquire`, :meth:`wait`,
    :attr:`elapsed_s` (simulated time), :meth:`safe_state`, :meth:`close`, context manager;
    :attr:`demand`: the demand in force; :meth:`apply_input`: a served instrument's output
    (no host-side limit check).
    Truth (exact, noise-free; for tests and reference data only): :meth:`steady_state`,
    :meth:`ps_dynamic_stiffness`, :meth:`emulated_interface_response`, :meth:`modes`,
    :meth:`rig_modes`, :meth:`frequency_response`, :meth:`reduction_error`; the FE beam as
    :attr:`beam` / :attr:`ps_substructure`.
    """

    def __init__(self, rig_config, seed: int | None = None, *, noise: bool = True, per_sample: bool = False):
        spec = rig_config.spec
        if not isinstance(spec, VirtualSpec):
            raise TypeError("VirtualRig needs a rig configuration of kind 'virtual'")
        self.config = rig_config
        self.spec: VirtualSpec = spec
        self.sensors: SensorLayout = rig_config.sensors  # nominal (or calibrated): what the reduction uses
        self.fs = float(rig_config.sample_rate_hz)
        self.dt = 1.0 / self.fs
        self.seed = int(spec.seed if seed is None else seed)
        self.noise = bool(noise)
        self._m = build_model_or_config_error(spec, spec.simulated_sensors(self.sensors), self.fs, rig_config.source)  # the true sensors
        if self._m.nonlinear is not None:
            _check_explicit(self._m, getattr(rig_config.source, "path", rig_config.source))
        self._engine = Engine(self._m, self.seed, noise=self.noise, per_sample=per_sample)
        self._phase = 0.0  # generator phase [rad] of the fundamental at the next sample
        self._freq: float | None = None
        self._V = np.zeros((2, 1), complex)  # applied (what the shakers get)
        self._commanded = self._V  # as set (differs from the applied by the demand scatter)
        sc = spec.demand_scatter
        self._scatter = DemandScatter(sc, self.seed) if sc is not None and self.noise else None
        self._orders = np.array([1])
        self._closed = False
        self._uk_orders = np.array([1])  # orders of the amplifier input of the constant demand
        self._uk = np.zeros((2, 1), complex)

    # -- protocol ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        return f"virtual rig {self.config.identity!r}"

    def describe(self) -> RigDescription:
        m = self._m
        kept = m.kept[np.imag(m.kept) >= 0]
        details = dict(
            seed=self.seed,
            noise=self.noise,
            source=self.config.source.path,
            sha256=self.config.source.sha256,
            actuation_delay_s=self.spec.actuation_delay,
            modal_cutoff_hz=self.spec.modal_cutoff_hz,
            fe_nodes=int(m.beam.x_nodes.size),
            modal_states=int(m.lam.size),
            modal_condition=m.max_condition,
            modes_hz=[float(abs(x) / (2 * np.pi)) for x in kept],
            modes_damping=[float(-np.real(x) / abs(x)) for x in kept],
            rig_modes_hz=[float(abs(x) / (2 * np.pi)) for x in m.rig_modes if np.imag(x) > 0],
            friction=self.spec.friction.active,
            nonlinear_amplifier=any(s.nonlinear for s in self.spec.shakers),
        )
        return RigDescription(
            identity=self.config.identity,
            kind="virtual",
            actuators=tuple(self.config.actuators),
            sample_rate_hz=self.fs,
            voltage_limit_v=self.config.voltage_limit_v,
            sensors=self.sensors,
            details=details,
            input_range_v=self.spec.noise.adc_range_v,
        )

    @property
    def elapsed_s(self) -> float:
        return self._engine.n * self.dt

    @property
    def demand(self) -> Demand:
        """The demand in force (after the last :meth:`set_demand`; zero before any)."""
        return Demand(self._freq, self._commanded.copy(), self._orders.copy())

    def _check_open(self):
        if self._closed:
            raise InstrumentError(f"{self.name} is closed")

    def set_demand(self, frequency_hz: float, voltage, orders, ramp_periods: float = 2.0) -> None:
        """Ramp (raised cosine over ``ramp_periods`` periods of the new frequency; frequency and
        coefficients together, generator phase continuous) to the new demand. Rig time passes."""
        f, V, orders = self._normal_demand(frequency_hz, voltage, orders, ramp_periods)
        check_voltage(V, orders, self.config.voltage_limit_v, self.name)
        self._drive(f, V, orders, ramp_periods)

    def apply_input(self, frequency_hz: float, voltage, orders, ramp_periods: float = 0.0) -> None:
        """What the amplifier inputs receive from an instrument the host drives (a served
        generator's output: :mod:`hbtest.serve.scpi.plant`), as :meth:`set_demand` but without
        the host's limit check (:func:`hbtest.rig.check_voltage`): the rig's
        ``voltage_limit_v`` is enforced by the host's driver before anything reaches the
        instrument, and an instrument puts out what it is told within its own limits. A
        generator's quantised waveform of a demand exactly at the limit has a peak bound
        (the sum of its harmonics' magnitudes) just above it: the real one plays it."""
        f, V, orders = self._normal_demand(frequency_hz, voltage, orders, ramp_periods)
        self._drive(f, V, orders, ramp_periods)

    def _normal_demand(self, frequency_hz, voltage, orders, ramp_periods):
        """(f, V, orders) in normal form (:func:`~hbtest.rig.safety.normalise_demand`), every
        order below the Nyquist frequency (ValueError otherwise)."""
        self._check_open()
        f, V, orders = normalise_demand(frequency_hz, voltage, orders, 2, ramp_periods)
        if max(int(orders.max()), 1) * f >= self.fs / 2:
            raise ValueError(f"harmonic {orders.max()} of {f:g} Hz lies above the Nyquist frequency {self.fs / 2:g} Hz")
        return f, V, orders

    def _drive(self, f: float, V: np.ndarray, orders: np.ndarray, ramp_periods: float) -> None:
        """The ramp to a demand in normal form (:meth:`_normal_demand`)."""
        commanded = V
        if self._scatter is not None:
            V = self._scatter.applied(f, V, orders, self.config.voltage_limit_v)
        f_old = self._freq if self._freq is not None else f
        allo = np.union1d(self._orders, orders)
        Vo = np.zeros((2, allo.size), complex)
        Vn = np.zeros((2, allo.size), complex)
        Vo[:, np.searchsorted(allo, self._orders)] = self._V
        Vn[:, np.searchsorted(allo, orders)] = V
        n_ramp = _sample_count(ramp_periods / f * self.fs, "a ramp")
        if n_ramp > 0:
            if f_old == f and not self._nonlinear and not self._engine.per_sample:
                # constant frequency, linear amplifier: the raised-cosine ramp is a sum of
                # exponentials in n, V(n) = (Vo+Vn)/2 - (Vn-Vo)/4 (e^{i pi n/N} + e^{-i pi n/N})
                om = 2 * np.pi * f * self.dt
                rot = np.exp(1j * allo * self._phase)
                mid, dif = 0.5 * (Vo + Vn) * rot, -0.25 * (Vn - Vo) * rot
                X = np.concatenate([mid, dif, dif], axis=1)
                rho = np.concatenate([1j * allo * om, 1j * (allo * om + np.pi / n_ramp), 1j * (allo * om - np.pi / n_ramp)])
                self._engine.begin_segment(X, rho)
                self._engine.advance(n_ramp, None)
                self._phase = float((self._phase + om * n_ramp) % (2 * np.pi))
            else:
                self._ramp_by_samples(f_old, f, Vo, Vn, allo, n_ramp)
        self._freq, self._V, self._commanded, self._orders = f, V, commanded, orders
        self._set_input_harmonics()
        om = 2 * np.pi * f * self.dt
        self._engine.begin_segment(self._uk * np.exp(1j * self._uk_orders * self._phase), 1j * self._uk_orders * om)

    def _ramp_by_samples(self, f_old, f, Vo, Vn, allo, n_ramp) -> None:
        """A ramp that changes the frequency (or passes the amplifier polynomial): demand
        generated sample by sample, phase accumulated, simulated with the sample recurrence."""
        self._engine.end_segment()
        done = 0
        while done < n_ramp:
            n = min(MAX_CHUNK, n_ramp - done)
            w = 0.5 * (1 - np.cos(np.pi * (done + np.arange(n)) / n_ramp))
            fk = f_old + w * (f - f_old)
            ph = self._phase + 2 * np.pi * self.dt * np.concatenate([[0.0], np.cumsum(fk[:-1])])
            coef = Vo[:, :, None] + w[None, None, :] * (Vn - Vo)[:, :, None]
            v = np.real(np.einsum("aon,on->an", coef, np.exp(1j * np.multiply.outer(allo, ph))))
            self._engine.run(amplifier_input(self.spec.shakers, v), outputs=False)
            self._phase = float((ph[-1] + 2 * np.pi * self.dt * fk[-1]) % (2 * np.pi))
            done += n

    def _set_input_harmonics(self) -> None:
        """Harmonics of the amplifier input (after the polynomial) of the constant demand."""
        if self._nonlinear:
            deg = 3 if any(s.cubic != 0 for s in self.spec.shakers) else 2
            ks = np.arange(deg * int(self._orders.max()) + 1)
        else:
            ks = self._orders
        self._uk_orders = ks
        self._uk = input_harmonics(self.spec.shakers, self._V, self._orders, ks)

    def _constant(self, n: int, record: bool):
        """Simulate ``n`` samples of the current (constant) demand; returns (t, volts) with
        ``volts`` (n_ch, n) the raw channel volts (layout order) when ``record``, else None."""
        f = self._freq
        t0 = self._phase / (2 * np.pi * f)
        y = self._engine.record(n) if record else self._engine.advance(n, None)
        self._phase = float((self._phase + 2 * np.pi * f * self.dt * n) % (2 * np.pi))
        return t0 + np.arange(n) * self.dt, y

    def wait(self, n_periods: float) -> None:
        self._check_open()
        self._require_demand()
        n = _sample_count(float(n_periods) * self.fs / self._freq, "a wait")
        if n > 0:
            self._constant(n, record=False)

    def acquire(self, n_periods: int) -> Acquisition:
        self._check_open()
        self._require_demand()
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        n_periods = int(n_periods)
        f = self._freq
        n = _sample_count(n_periods * self.fs / f, "a record")
        t, volts = self._constant(n, record=True)
        data = {c: volts[i] for i, c in enumerate(self.sensors.channel_names)}
        return Acquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=self.fs, n_periods=n_periods, elapsed_s=self.elapsed_s)

    def acquire_samples(self, n_samples: int) -> Acquisition:
        """Record ``n_samples`` samples (not necessarily whole periods; ``n_periods`` is the
        whole periods they cover) — the samples :meth:`acquire` gives when ``n_samples`` is
        its sample count. For a served device that streams by sample count (hbtest.rig.helic)."""
        self._check_open()
        self._require_demand()
        n = int(n_samples)
        if n < 1:
            raise ValueError(f"n_samples must be positive, got {n_samples!r}")
        f = self._freq
        t, volts = self._constant(n, record=True)
        data = {c: volts[i] for i, c in enumerate(self.sensors.channel_names)}
        return Acquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=self.fs, n_periods=int(n * f / self.fs),
                           elapsed_s=self.elapsed_s)

    def safe_state(self, ramp_periods: float = 2.0) -> None:
        """Ramp all outputs to zero (at the current frequency)."""
        self._check_open()
        if self._freq is None or not np.any(self._V != 0):
            return
        self.set_demand(self._freq, np.zeros_like(self._V), self._orders, ramp_periods)

    def close(self) -> None:
        if self._closed:
            return
        self.safe_state()
        self._closed = True

    def __enter__(self) -> "VirtualRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _require_demand(self):
        if self._freq is None:
            raise RuntimeError(f"{self.name}: set_demand() first (no frequency yet)")

    @property
    def _nonlinear(self) -> bool:
        return any(s.nonlinear for s in self.spec.shakers)

    # -- the truth (exact, noise-free; hbtest.rig.virtual.reference) ---------------------

    @property
    def model(self):
        """The twin's :class:`~hbtest.rig.virtual.model.Model` (read-only; for its exact
        references)."""
        return self._m

    @property
    def beam(self) -> Beam:
        """The twin's PS beam (FE model, node 0 at the interface)."""
        return self._m.beam

    @property
    def ps_substructure(self) -> Substructure:
        """The PS beam as a substructure with interface (u0, theta0)."""
        return reference.ps_substructure(self._m)

    @property
    def ps_is_linear(self) -> bool:
        """The PS beam carries no nonlinear element (``[[virtual.nonlinear]]``)."""
        return not bool(self._m.spec.nonlinear)

    def ps_dynamic_stiffness(self, s) -> np.ndarray:
        """``D_P(s)``: the twin's PS beam condensed on its interface (u0, theta0), shape
        (*s.shape, 2, 2): ``D_P [u, theta] = [T, M]``."""
        return self.ps_substructure.dynamic_stiffness(s)

    def modes(self) -> np.ndarray:
        """Eigenvalues [rad/s] of the simulated structural/electrical modes (one per conjugate
        pair, Im >= 0), sorted by modulus; free decays follow ``exp(lambda t)``."""
        k = self._m.kept
        return k[np.imag(k) >= 0]

    def rig_modes(self) -> np.ndarray:
        """Eigenvalues [rad/s] of the rig alone (clamp on its springs with the shakers, beam
        removed), Im >= 0."""
        r = self._m.rig_modes
        return r[np.imag(r) >= 0]

    def steady_state(self, frequency_hz: float, voltage, orders, output_orders=None) -> SteadyState:
        """Exact periodic steady state for the demand ``voltage`` (2, n_orders) at
        ``frequency_hz``: :func:`hbtest.rig.virtual.reference.steady_state`."""
        return reference.steady_state(self._m, frequency_hz, voltage, orders, output_orders)

    def emulated_interface_response(self, ns: Substructure, force_vector, frequency_hz: float, orders) -> np.ndarray:
        """Exact interface displacement (2, n_orders) of ``ns`` joined to the twin's PS beam:
        :func:`hbtest.rig.virtual.reference.emulated_interface_response`."""
        return reference.emulated_interface_response(self._m, ns, force_vector, frequency_hz, orders)

    def sweep_reference(self, ns):
        """The exact reference a sweep stores for the numerical substructure ``ns``, a callable
        ``(substructure, force_vector, frequency_hz, orders) -> (2, n_orders)``: the linear
        closed form (:meth:`emulated_interface_response`) when both sides are linear, else a
        :class:`~hbtest.rig.virtual.emulated.SweepReference` (harmonic balance of the joined
        nonlinear structure, continued along the sweep; imported when a sweep asks)."""
        if self.ps_is_linear and getattr(ns, "is_linear", True):
            return self.emulated_interface_response
        from .emulated import SweepReference

        return SweepReference(self._m, ns)

    def frequency_response(self, frequency_hz, reduced: bool = False) -> np.ndarray:
        """Transfer (channels in layout order [physical units], 2 actuators [per V]) at ``frequency_hz``:
        :func:`hbtest.rig.virtual.reference.frequency_response`."""
        return reference.frequency_response(self._m, frequency_hz, reduced)

    def reduction_error(self, frequencies_hz) -> float:
        """Largest relative error of the simulated modal model against the full model:
        :func:`hbtest.rig.virtual.reference.reduction_error`."""
        return reference.reduction_error(self._m, frequencies_hz)


def _check_explicit(model, source) -> None:
    """A ConfigError naming the element key when an element is too stiff (or too steep) for
    its explicit time stepping (:meth:`~hbtest.rig.virtual.model.NonlinearTerms.explicit_numbers`)."""
    S = model.nonlinear.substeps
    for i, key, check, number, limit in model.nonlinear.explicit_numbers():
        if number <= limit:
            continue
        if check == "substeps":
            need = int(np.ceil(S * np.sqrt(number / limit)))
            problem = (f"too stiff for its explicit force at {model.fs:g} Hz with nonlinear_substeps = {S}"
                       f" ({number:.3g} > {limit:g}): raise [virtual].nonlinear_substeps to about {need} or soften the element")
        else:
            problem = (f"too stiff for the explicit static correction of the modes above modal_cutoff_hz ({number:.3g} > {limit:g}):"
                       " raise [virtual].modal_cutoff_hz or soften the element")
        raise ConfigError(source, f"virtual.nonlinear[{i}].{key}", problem)


def open_virtual(rig_config, seed: int | None = None) -> VirtualRig:
    """The virtual kind's ``open`` (:class:`hbtest.rig.registry.RigKind`)."""
    return VirtualRig(rig_config, seed=seed)

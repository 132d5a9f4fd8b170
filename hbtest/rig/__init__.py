"""The ``Rig`` protocol: everything above this package (point loop, sweep, classical tests)
talks to a rig only through it, so a virtual twin and real instruments are interchangeable.

Time base: the demand is ``v(t) = a0 + Re sum_k V_k exp(i k 2 pi f t)`` per actuator, with
``t`` the rig's demand time (continuous across calls; the rig keeps the phase of its
generator continuous when the frequency changes and reports ``t`` so that the formula holds
for the demand in force during an acquisition). Acquisitions return raw channel volts; the
calibration lives in the rig's :class:`~hbtest.method.sensors.SensorLayout`.

Kinds of rig (``[rig].kind`` of a rig file: virtual, box, scpi, helic, redpitaya) are registered in
:mod:`hbtest.rig.registry`; :func:`open_rig` opens the one a parsed rig file names. A rig that
averages on the device declares it by offering ``acquire_coefficients`` (the
:class:`~hbtest.rig.capabilities.DeviceAveraging` protocol; the point loop uses it when
offered, raw samples otherwise); the other optional capabilities (known modes, trips, exact
reference, known physical side) are the small protocols of :mod:`hbtest.rig.capabilities`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..method.sensors import SensorLayout
from . import registry
from .safety import LIMIT_TOLERANCE, peak_bound

__all__ = ["Acquisition", "ChannelCoefficients", "RigDescription", "Rig", "check_voltage", "open_rig"]


@dataclass(frozen=True)
class Acquisition:
    """A record of whole forcing periods.

    t: sample times [s] in the demand time base (see module docstring);
    data: channel name -> raw samples [V] (ADC units);
    frequency_hz, sample_rate_hz; n_periods: whole forcing periods in the record;
    elapsed_s: the rig's clock [s] at the end of the record (since the rig was opened).
    """

    t: np.ndarray
    data: dict[str, np.ndarray]
    frequency_hz: float
    sample_rate_hz: float
    n_periods: int
    elapsed_s: float
    overrange: tuple[str, ...] = ()  # channels the instrument itself reported clipped in the record


@dataclass(frozen=True)
class ChannelCoefficients:
    """Per-channel harmonic coefficients averaged on the device over n whole periods, in the
    hbtest.method.harmonics convention (X_k = a_k - i b_k, DC real), in RAW channel volts (before the
    layout's scale/offset and before lag correction) — i.e. exactly what harmonics.fit of the raw
    samples over the same record gives (with nuisance_hz removed when asked)."""

    coefficients: dict[str, np.ndarray]  # channel -> complex (n_orders,)
    variance: dict[str, np.ndarray]  # channel -> variance of the mean (n_orders,), as HarmonicFit.variance
    orders: np.ndarray
    frequency_hz: float
    n_periods: int
    elapsed_s: float
    overrange: tuple[str, ...] = ()  # channels that reached ADC full scale in the record
    epoch: int | None = None  # demand epoch the record belongs to
    correlation: np.ndarray | None = None  # (channels, channels) noise correlation, dict order; None: independent


# a rig that averages on the device offers acquire_coefficients: hbtest.rig.capabilities.DeviceAveraging


@dataclass(frozen=True)
class RigDescription:
    """What a rig says about itself: identity (for provenance), actuators (names, in the order
    of the voltage array), sensor layout with calibration, voltage limit [V], sample rate, and
    the acquisition's input range [V] (a sample at full scale means a clipped channel)."""

    identity: str
    kind: str  # the rig file's [rig].kind: "virtual" | "box" | "scpi" (hbtest.rig.registry)
    actuators: tuple[str, ...]
    sample_rate_hz: float
    voltage_limit_v: float
    sensors: SensorLayout
    details: dict = field(default_factory=dict)
    input_range_v: float | None = None  # ADC full scale (+/-) of every channel, if known


@runtime_checkable
class Rig(Protocol):
    """Protocol of a hybrid-test rig (virtual or real)."""

    def describe(self) -> RigDescription:
        """Channels, calibration, limits and identity."""

    def set_demand(self, frequency_hz: float, voltage: np.ndarray, orders, ramp_periods: float = 2.0) -> None:
        """Change the actuator demand to complex voltage coefficients ``voltage`` [V], shape
        (n_actuators, n_orders) for harmonic ``orders`` (0 = DC), at ``frequency_hz``. The
        change is applied smoothly over ``ramp_periods`` forcing periods (rig time passes).
        Raises :class:`hbtest.errors.LimitExceeded` if the peak voltage would exceed the limit."""

    def acquire(self, n_periods: int) -> Acquisition:
        """Record ``n_periods`` whole forcing periods of all channels (rig time passes)."""

    def wait(self, n_periods: float) -> None:
        """Let ``n_periods`` forcing periods pass without recording."""

    @property
    def elapsed_s(self) -> float:
        """Rig clock [s] since the rig was opened (simulated time for a virtual rig)."""

    def safe_state(self) -> None:
        """Ramp all outputs to zero."""

    def close(self) -> None:
        """Safe state, then release the instruments."""

    def __enter__(self) -> "Rig": ...

    def __exit__(self, *exc) -> None: ...


def check_voltage(voltage: np.ndarray, orders, limit_v: float, who: str) -> None:
    """Raise :class:`~hbtest.errors.LimitExceeded` when the demand could exceed ``limit_v``
    [V] on any actuator (the peak bound :func:`hbtest.rig.safety.peak_bound`, with the
    rounding slack :data:`~hbtest.rig.safety.LIMIT_TOLERANCE`); a driver calls it before
    sending. :func:`hbtest.rig.safety.check_demand` is the per-actuator form naming each."""
    from ..errors import LimitExceeded

    peak = peak_bound(voltage, orders)
    if np.any(peak > limit_v * (1 + LIMIT_TOLERANCE)):
        raise LimitExceeded(f"{who}: demand of {peak.max():.3g} V exceeds the voltage limit of {limit_v:g} V")


def open_rig(rig_config, seed: int | None = None) -> Rig:
    """The rig a parsed rig file (:func:`hbtest.config.load_rig`) describes: its kind's
    ``open(rig_config, seed)`` from :mod:`hbtest.rig.registry`."""
    return registry.get(rig_config.kind).open(rig_config, seed)

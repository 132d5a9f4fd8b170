"""Hardware safety rules, in one place: demand limits, channel limits, the latched trip, the
ramp-down schedule and the watchdog. Every rig kind that drives hardware (the box client and
server, the SCPI drivers) uses these functions, so the rules cannot drift apart.

Units: volts at the actuator demand (amplifier input) and raw channel volts (ADC units);
physical channel limits (metres, strain) are converted to raw-volt windows through the
channel's calibration ``physical = raw * scale + offset`` (scale > 0).

Demand convention (:mod:`hbtest.method.harmonics`): per actuator ``v(t) = a0 + Re sum_k V_k
exp(i k Omega t)``. Its peak is bounded by ``|a0| + sum_k |V_k|`` (triangle inequality; equal
for a single harmonic). The bound is what is checked: a demand is refused when the bound
exceeds the limit, so no waveform beyond the limit is ever generated.

Ramps: a change of demand from ``V_old`` to ``V_new`` passes through the coefficients
``(1 - w) V_old + w V_new`` with the raised-cosine weight ``w(n) = (1 - cos(pi n / N)) / 2``
in [0, 1]. The peak bound of a convex combination never exceeds the larger of the two ends'
bounds, so a ramp between two admissible demands stays admissible at every sample, whatever
the frequency does meanwhile.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ..errors import LimitExceeded

__all__ = [
    "normalise_demand",
    "RAMP_DOWN_PERIODS",
    "LIMIT_TOLERANCE",
    "ADC_FULL_SCALE_FRACTION",
    "TRIP_VOLTAGE",
    "TRIP_CHANNEL",
    "TRIP_WATCHDOG",
    "TRIP_LINK",
    "TRIP_REASONS",
    "Limits",
    "peak_bound",
    "check_demand",
    "ramp_weights",
    "ramp_coefficients",
    "channel_window",
    "channel_violations",
    "overrange_channels",
    "sensor_overrange_channels",
    "Trip",
    "Watchdog",
]

RAMP_DOWN_PERIODS = 2.0  # forcing periods of the ramp to zero after a trip, a watchdog or a disarm
LIMIT_TOLERANCE = 1e-12  # relative slack of the voltage check (rounding of a demand exactly at the limit)
ADC_FULL_SCALE_FRACTION = 0.999  # a sample at this fraction of the input range counts as clipped

# trip codes (also the box protocol's device-specific error numbers, instruments/README.md)
TRIP_VOLTAGE = 301  # a demand beyond an actuator's voltage limit reached the box
TRIP_CHANNEL = 302  # a measured channel left its window (displacement, strain, current)
TRIP_WATCHDOG = 303  # the host sent nothing for longer than the watchdog time while armed
TRIP_LINK = 304  # the connection dropped while armed
TRIP_REASONS = {
    TRIP_VOLTAGE: "voltage limit",
    TRIP_CHANNEL: "channel limit",
    TRIP_WATCHDOG: "watchdog (host silent)",
    TRIP_LINK: "connection lost while armed",
}


@dataclass(frozen=True)
class Limits:
    """Limits of a rig. ``voltage_v``: peak demand per actuator [V]; ``channels``: channel name
    -> (low, high) window in raw volts (a sample outside trips)."""

    voltage_v: tuple[float, ...]
    channels: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.voltage_v or not all(v > 0 and math.isfinite(v) for v in self.voltage_v):
            raise ValueError(f"voltage limits must be positive and finite, got {self.voltage_v!r}")
        for name, (lo, hi) in self.channels.items():
            if not lo < hi:
                raise ValueError(f"channel {name}: empty window ({lo!r}, {hi!r})")


def normalise_demand(frequency_hz, voltage, orders, n_actuators: int, ramp_periods: float = 0.0):
    """The one check of a demand's form every rig does before anything else: returns
    ``(f, V, orders)`` with V complex (n_actuators, n_orders) and its DC entries real.
    ValueError (a programming error, not a user's) for a wrong shape, orders that are not
    distinct non-negative integers, a frequency that is not positive and finite, a negative
    ramp or non-finite voltages."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    V = np.asarray(voltage, dtype=complex)
    if V.ndim == 1:
        V = V[:, None]
    if V.shape != (n_actuators, orders.size):
        raise ValueError(f"voltage must have shape ({n_actuators}, {orders.size}) (actuators x orders), got {V.shape}")
    if orders.size == 0 or np.any(orders < 0) or len(set(orders.tolist())) != orders.size:
        raise ValueError(f"harmonic orders must be distinct non-negative integers, got {orders.tolist()}")
    f = float(frequency_hz)
    if not (f > 0 and np.isfinite(f)):
        raise ValueError(f"frequency must be positive, got {frequency_hz!r}")
    if not ramp_periods >= 0:
        raise ValueError("ramp_periods must be non-negative")
    if not np.all(np.isfinite(V)):
        raise ValueError("voltage must be finite")
    V = V.copy()
    V[:, orders == 0] = np.real(V[:, orders == 0])
    return f, V, orders


def peak_bound(voltage, orders=None) -> np.ndarray:
    """Upper bound of the peak ``|v(t)|`` per actuator [V]: ``|a0| + sum_k |V_k|``.
    ``voltage``: complex (n_actuators, n_orders)."""
    return np.abs(np.asarray(voltage)).sum(axis=-1)


def check_demand(voltage, orders, limits: Limits, who: str, actuators=None) -> None:
    """Raise :class:`~hbtest.errors.LimitExceeded` (one line naming ``who`` and the actuator)
    when the demand could exceed a voltage limit, or is not finite. Call it before sending."""
    V = np.asarray(voltage)
    if not np.all(np.isfinite(V)):
        raise LimitExceeded(f"{who}: demand is not finite")
    peak = np.atleast_1d(peak_bound(V))
    lim = np.asarray(limits.voltage_v, dtype=float)
    if lim.size == 1:
        lim = np.full(peak.shape, lim[0])
    if peak.shape != lim.shape:
        raise LimitExceeded(f"{who}: demand for {peak.size} actuators, limits for {lim.size}")
    over = np.flatnonzero(peak > lim * (1 + LIMIT_TOLERANCE))
    if over.size:
        j = int(over[np.argmax(peak[over] / lim[over])])
        name = actuators[j] if actuators is not None else f"actuator {j + 1}"
        raise LimitExceeded(f"{who}: demand of {peak[j]:.4g} V on {name} exceeds its voltage limit of {lim[j]:g} V")


def ramp_weights(n_samples: int) -> np.ndarray:
    """Raised-cosine ramp weights ``w(n) = (1 - cos(pi n / N)) / 2`` for n = 0..N (both ends),
    rising from 0 to 1; ``N = 0`` gives ``[1]`` (a step)."""
    n = int(n_samples)
    if n <= 0:
        return np.ones(1)
    return 0.5 * (1 - np.cos(np.pi * np.arange(n + 1) / n))


def ramp_coefficients(v_old, v_new, weights) -> np.ndarray:
    """Coefficients along a ramp: ``(1 - w) V_old + w V_new`` for each weight, shape
    (n_weights, *V.shape). Orders missing from one end are zero there (same shapes expected)."""
    a, b = np.asarray(v_old), np.asarray(v_new)
    w = np.asarray(weights, dtype=float).reshape((-1,) + (1,) * a.ndim)
    return (1 - w) * a + w * b


def channel_window(scale: float, offset: float, limit: float) -> tuple[float, float]:
    """Raw-volt window of a channel whose physical value must stay within ``+/- limit``
    (``physical = raw * scale + offset``, ``scale > 0``)."""
    if not scale > 0 or not limit > 0:
        raise ValueError("channel_window needs a positive scale and limit")
    return ((-limit - offset) / scale, (limit - offset) / scale)


def channel_violations(data: dict, windows: dict) -> list[tuple[str, float, float, float]]:
    """Channels of a record (name -> raw samples [V]) that left their window: a list of
    (name, worst sample, low, high), worst first."""
    out = []
    for name, (lo, hi) in windows.items():
        x = data.get(name)
        if x is None or len(x) == 0:
            continue
        x = np.asarray(x)
        mn, mx = float(x.min()), float(x.max())
        if mn < lo or mx > hi:
            worst = mn if (lo - mn) / (hi - lo) > (mx - hi) / (hi - lo) else mx
            out.append((name, worst, lo, hi))
    return out


def overrange_channels(data: dict, input_range_v: float | None) -> tuple[str, ...]:
    """Channels whose record reached the ADC full scale (clipped)."""
    if not input_range_v:
        return ()
    return tuple(n for n, x in data.items() if len(x) and float(np.max(np.abs(x))) >= ADC_FULL_SCALE_FRACTION * input_range_v)


def sensor_overrange_channels(data: dict, channels) -> tuple[str, ...]:
    """Channels whose record reached their sensor's own output range (``full_scale_v`` of a
    :class:`~hbtest.method.sensors.ChannelSpec`; those without one are not judged here): a
    laser whose analogue output saturates below the digitiser's range clips unseen by it."""
    scale = {c.name: c.full_scale_v for c in channels if c.full_scale_v}
    return tuple(n for n, x in data.items()
                 if n in scale and len(x) and float(np.max(np.abs(x))) >= ADC_FULL_SCALE_FRACTION * scale[n])


class Trip:
    """A latched trip: the first cause is kept until :meth:`clear`."""

    def __init__(self):
        self.code = 0
        self.reason = ""

    @property
    def active(self) -> bool:
        return self.code != 0

    def trip(self, code: int, reason: str) -> bool:
        """Latch ``code``/``reason`` unless already tripped; True when this call tripped."""
        if self.code:
            return False
        self.code, self.reason = int(code), str(reason)
        return True

    def clear(self) -> None:
        self.code, self.reason = 0, ""


class Watchdog:
    """Host-silence timer: :meth:`feed` on every command from the host; :meth:`expired` once
    more than ``timeout_s`` passed since (``timeout_s = 0``: disabled). ``clock``: seconds."""

    def __init__(self, timeout_s: float, clock=time.monotonic):
        if not timeout_s >= 0 or not math.isfinite(timeout_s):
            raise ValueError(f"watchdog time must be >= 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.clock = clock
        self.last = clock()

    @property
    def enabled(self) -> bool:
        return self.timeout_s > 0

    def feed(self) -> None:
        self.last = self.clock()

    def silent_s(self) -> float:
        return self.clock() - self.last

    def expired(self) -> bool:
        return self.enabled and self.silent_s() > self.timeout_s

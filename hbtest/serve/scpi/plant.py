"""The plant between the simulated instruments: the virtual twin, driven by what the generator's
outputs put out, sampled by the scope, on the wall clock.

Cabling (as ``instruments/lab-33500b-scope.toml``): generator channel ``c`` drives the twin's
actuator ``c - 1``; scope channel ``k`` sees the twin's sensor channel ``k - 1`` (layout order:
l1, l2, g1, g2) as raw volts.

Time: the twin runs in real time — before anything changes or is recorded, the twin is advanced
to the wall-clock time since the first demand (:meth:`Plant.advance`), so a host that sleeps
lets the structure settle exactly as long as it slept, and a record takes as long as it covers.

Demand: each generator channel reports its output as a Fourier series of the twin's generator
phase ``theta`` (``v = a0 + Re sum_k V_k exp(i k theta)`` [V], ``hbtest.method.harmonics``), and the
plant passes the sum to the twin as one step (``ramp_periods = 0``: a generator switches at
once) as the amplifiers' input (:meth:`~hbtest.rig.virtual.VirtualRig.apply_input`): the rig's
voltage limit is the host driver's to enforce, not the plant's — a demand at the limit, whose
quantised waveform's harmonics sum to a hair above it, is played, not refused. The twin has one fundamental: the frequency of channel 1 (of channel 2 when channel 1's
output is off). Units: volts, seconds, hertz, radians.
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np

__all__ = ["ChannelOutput", "Plant"]

MAX_ORDERS = 24  # harmonics of one channel passed to the twin (largest first)
ORDER_RTOL = 1e-9  # a harmonic below this fraction of the largest is dropped


class ChannelOutput:
    """What one generator channel puts out: frequency [Hz], orders, complex coefficients [V]
    on the twin's phase (None = output off)."""

    def __init__(self, frequency_hz: float, orders: np.ndarray, coefficients: np.ndarray):
        self.frequency_hz = float(frequency_hz)
        self.orders = np.asarray(orders, dtype=int)
        self.coefficients = np.asarray(coefficients, dtype=complex)


def waveform_harmonics(samples: np.ndarray, fs_plant: float, frequency_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """One period of a waveform [V] (points equally spaced, point 0 at phase 0) -> (orders,
    complex coefficients): its Fourier series below the plant's Nyquist frequency, the largest
    :data:`MAX_ORDERS` kept (the generator's interpolation filter passes the band below
    points / 2)."""
    N = samples.size
    X = np.fft.rfft(samples) / N
    kmax = min(N // 2 - 1, int((fs_plant / 2 * 0.9) // frequency_hz))
    coef = np.concatenate([[X[0].real], 2 * X[1 : kmax + 1]])
    mag = np.abs(coef)
    keep = np.flatnonzero(mag > ORDER_RTOL * max(mag.max(), 1e-300))
    keep = keep[np.argsort(-mag[keep])][:MAX_ORDERS]
    keep = np.sort(keep) if keep.size else np.array([1])
    return keep, coef[keep]


class Plant:
    """The twin on the wall clock, shared (thread-safe) by the simulated instruments."""

    def __init__(self, twin, clock=time.monotonic):
        self.twin = twin
        self.fs = float(twin.fs)
        self._clock = clock
        self.lock = threading.RLock()
        self._wall0: float | None = None  # wall time of the first demand
        self._sim0 = 0.0
        self._outputs: dict[int, ChannelOutput | None] = {1: None, 2: None}
        self.events: list[str] = []  # notable things the plant saw (default waveform on an output...)

    @property
    def frequency_hz(self) -> float | None:
        return self.twin.demand.frequency_hz

    def phase_now(self) -> float:
        """The twin's generator phase [rad] now (the twin advanced to the wall clock first)."""
        with self.lock:
            self.advance()
            return float(self.twin._phase)

    def phase_at(self, t: float | None) -> float:
        """The twin's generator phase [rad] at wall-clock time ``t`` [s, ``clock``] — a moment
        just past (a command's arrival; the phase runs on at the demand frequency since), now
        when None."""
        with self.lock:
            phase = self.phase_now()
            f = self.frequency_hz
            if t is None or f is None or self._wall0 is None:
                return phase
            return float((phase + 2 * np.pi * f * (t - self.wall_at_twin_now())) % (2 * np.pi))

    def advance(self) -> None:
        """Run the twin up to now (wall clock)."""
        with self.lock:
            f = self.frequency_hz
            if self._wall0 is None or f is None:
                return
            target = self._sim0 + (self._clock() - self._wall0)
            lag = target - self.twin.elapsed_s
            if lag * self.fs >= 1:
                self.twin.wait(lag * f)

    def set_output(self, channel: int, out: ChannelOutput | None) -> None:
        """Channel ``channel``'s output changes now."""
        with self.lock:
            self.advance()
            self._outputs[channel] = out
            live = [o for c, o in sorted(self._outputs.items()) if o is not None]
            if not live:
                if self.frequency_hz is not None:
                    self.twin.apply_input(self.frequency_hz, np.zeros((2, 1)), [1])
                return
            f = live[0].frequency_hz
            orders = np.union1d(np.array([0]), np.concatenate([o.orders for o in live]))
            V = np.zeros((2, orders.size), complex)
            for c, o in self._outputs.items():
                if o is not None and math.isclose(o.frequency_hz, f, rel_tol=1e-9):
                    V[c - 1, np.searchsorted(orders, o.orders)] += o.coefficients
            if self._wall0 is None:
                self._wall0, self._sim0 = self._clock(), self.twin.elapsed_s
            below = orders * f < self.fs / 2  # the twin samples at fs: content above its Nyquist frequency
            self.twin.apply_input(f, V[:, below], orders[below])  # (DAC images) is left out

    def wall_at_twin_now(self) -> float:
        """The wall-clock time [s, ``clock``] the twin has been simulated up to."""
        with self.lock:
            if self._wall0 is None:
                return self._clock()
            return self._wall0 + (self.twin.elapsed_s - self._sim0)

    def record_after(self, lead_s: float, sync_phase: float, pre_s: float, span_s: float):
        """Samples around the first Sync edge (twin phase ``sync_phase``) at least ``lead_s``
        [s] from now: returns (times [s] relative to that edge, volts (channels, samples)) over
        ``[-pre_s, span_s - pre_s)``; the twin is simulated up to the window's end (the scope
        answers ``*OPC?`` when the wall clock gets there). None when nothing drives the plant."""
        with self.lock:
            self.advance()
            f = self.frequency_hz
            if f is None:
                return None
            T, dt = 1.0 / f, 1.0 / self.fs
            t_now = float(self.twin._phase) / (2 * np.pi * f)
            t_edge = sync_phase / (2 * np.pi * f)
            trig = t_edge + math.ceil((t_now + lead_s - t_edge) / T - 1e-12) * T
            n = int(math.ceil((trig - pre_s + span_s - t_now) / dt)) + 1
            _, volts = self.twin._constant(n, record=True)
            t = t_now + np.arange(n) * dt
            keep = (t >= trig - pre_s) & (t < trig - pre_s + span_s)
            return t[keep] - trig, np.asarray(volts)[:, keep]

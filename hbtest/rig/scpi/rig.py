"""``ScpiRig``: a two-channel arbitrary waveform generator and a digitiser composed into one
:class:`hbtest.rig.Rig` by the rig file (kind ``scpi``; see ``instruments/lab-33500b-scope.toml``).

Units: volts, hertz, seconds. Demand convention: per actuator
``v(t) = a0 + Re sum_k V_k exp(i k 2 pi f t)`` (``hbtest.method.harmonics``: ``X_k = a_k - i b_k``).

How a demand reaches an actuator
--------------------------------
Each actuator is one generator channel. Its AC part is one period of the multisine sampled at
``arb_points`` points, ``w[n] = Re sum_{k>=1} V_k exp(2 pi i k n / N)``, uploaded as DAC codes
``round(32767 w[n] / P)`` with ``P = max |w[n]|``; the amplitude is ``2 P`` [Vpp], the offset
is ``a0`` and the sample rate is ``N f`` so one waveform is exactly one period. Before anything
is written the peak bound ``|a0| + max(sum_k |V_k|, 1 mV)`` is checked against the actuator's
limit (:class:`hbtest.errors.LimitExceeded`, nothing sent); the written amplitude and offset
are rounded toward zero and changed in the order that keeps ``|offset| + amplitude/2`` within
the limit at every intermediate state, and the generator's own limits (``VOLT:LIM``) are set
before the output is ever switched on. A demand change is a sequence of ``n`` steps over the
ramp (``V_prev + (V - V_prev) j / n``, one waveform upload + level change per step, at most
``max_ramp_steps``, one per ``ramp_step_s``): every step is a convex combination of two
checked demands, so every step is within the limit too.

Synchronisation (which cable goes where)
----------------------------------------
- generator CH1/CH2 outputs -> the actuators' amplifier inputs (high impedance: the generator
  is set to ``OUTP:LOAD INF`` so the volts written are the volts at the amplifier);
- generator **Sync** output (``OUTP:SYNC:SOUR CH<sync_channel>``) -> digitiser **EXT TRIG**
  input: the Sync edge rises at point 0 of the arbitrary waveform, i.e. at phase 0 of the
  demand (``t = m / f``); after every waveform change both channels are restarted together
  (``FUNC:ARB:SYNC``) so both actuators and the Sync edge share that phase 0;
- the digitiser triggers on that rising edge in NORMAL sweep (never auto), with the record
  starting at the trigger, so its sample times after the trigger are demand times modulo whole
  periods. The fixed latency between the true phase 0 and the trigger (Sync output delay,
  cable, trigger path) is ``trigger_delay_s`` of the rig file: a sample at ``t_rel`` after the
  trigger is at demand time ``t_rel + trigger_delay_s``;
- recommended: generator 10 MHz Ref Out -> digitiser 10 MHz Ref In (``:TIM:REFC ON`` on the
  scope), so the sample clock does not drift against the demand within a record (20 ppm is
  4 mrad after 2 s at 17 Hz).

Phase continuity: a waveform change restarts both channels at point 0, so the driver uploads the
new waveform rotated by the demand phase ``theta`` of a target time, and sends the restart so
that it lands when the old waveform is at ``theta`` (at the target or whole periods of the old
waveform later, whatever delayed the host: :meth:`ScpiRig._restart`): no phase jump excites the
structure, and the Sync edge then marks demand phase ``theta``.

Acquisitions report ``t`` as ``m T + theta / (2 pi f) + t_rel + trigger_delay_s`` with ``m T`` the last whole
period at or before the trigger on the rig's wall clock (:attr:`ScpiRig.elapsed_s`, seconds
since open); the demand formula holds for any whole number of periods, so ``t`` is in the
demand time base. Over-range (a clipped digitiser sample) is reported per sensor channel in
:attr:`ScpiAcquisition.overrange`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...errors import InstrumentError, LimitExceeded
from .. import Acquisition, RigDescription
from ..identification import IdentifiedModes
from .keysight33500b import DAC_FULL_SCALE, MIN_AMPLITUDE_VPP, Keysight33500B
from .ranging import ChannelRanges

__all__ = ["ScpiRig", "IdentifyingScpiRig", "ScpiAcquisition", "synthesise", "record_window", "edge_index",
           "RECORD_SLACK_SAMPLES"]

RECORD_SLACK_SAMPLES = 4  # the digitiser records this many samples more than the periods asked
LIMIT_RTOL = 1e-12  # float slack of the peak check (as hbtest.rig.check_voltage); writes round toward zero
ZERO_PEAK_V = 1e-12  # an AC part below this is "no AC" (all-zero waveform)
RESTART_ALLOWANCE = 2.0  # the upload allowance: this many times the running upload time [s] ...
RESTART_MIN_S = 0.008  # ... and at least this (a miss costs a whole period of the old waveform)
EDGE_SLACK = 0.3  # of a period: a record's edge may lie this much after its upper bound (edges placed late)
AMBIGUOUS_FRACTION = 0.25  # of a period: an earlier edge this long after arming makes a record's edge ambiguous
MAX_EDGE_RETAKES = 2  # a record with an ambiguous edge is taken again at most this many times
LAND_GUARD_S = 0.001  # [s] added to a restart's landing bracket (clock reads around the writes)
LATE_RESTART_FRACTION = 0.05  # a restart burst answered later than this fraction of a period is counted late
MAX_LATE_WAKES = 3  # a host that wakes this late for a restart waits a period more, at most this many times


@dataclass(frozen=True)
class ScpiAcquisition(Acquisition):
    """An :class:`~hbtest.rig.Acquisition` plus ``overrange``: the sensor channels with a
    clipped sample (ADC full scale) in the record."""

    overrange: tuple[str, ...] = ()


def synthesise(coefficients: np.ndarray, orders, points: int, theta: float = 0.0) -> tuple[np.ndarray, float, float]:
    """One actuator's demand -> (int16 DAC codes of one period, amplitude [Vpp], offset [V]).
    ``coefficients``: complex, one per order (``X_0 = a0`` real); point 0 is demand phase
    ``theta`` [rad] of the fundamental."""
    orders = np.asarray(orders, dtype=int)
    c = np.asarray(coefficients, dtype=complex)
    a0 = float(np.real(c[orders == 0].sum()))
    n = np.arange(points)
    w = np.zeros(points)
    for k, X in zip(orders, c):
        if k > 0 and X != 0:
            w += np.real(X * np.exp(1j * k * (2 * np.pi * n / points + theta)))
    peak = float(np.abs(w).max())
    if peak < ZERO_PEAK_V:
        return np.zeros(points, dtype=np.int16), MIN_AMPLITUDE_VPP, a0
    codes = np.clip(np.rint(w / peak * DAC_FULL_SCALE), -DAC_FULL_SCALE, DAC_FULL_SCALE).astype(np.int16)
    return codes, 2.0 * peak, a0


def record_window(t_rel: np.ndarray, need: float) -> tuple[np.ndarray | None, float]:
    """The samples of a record (times ``t_rel`` [s] after the demand's phase 0) that hold the
    ``need`` [s] asked for: from the first sample at or after 0 through the first sample at or
    after ``need`` (one sample past the end, so ``n`` whole periods are never one sample short
    however the sample grid falls against the trigger). Returns (mask, sample step [s]), or
    (None, step) when the record ends before ``need``."""
    t_rel = np.asarray(t_rel, dtype=float)
    dt = float(np.median(np.diff(t_rel))) if t_rel.size > 1 else float(need)
    after = np.flatnonzero(t_rel >= 0)
    end = np.flatnonzero(t_rel >= need - 1e-9 * dt)
    if after.size == 0 or end.size == 0:
        return None, dt
    keep = np.zeros(t_rel.size, dtype=bool)
    keep[after[0] : end[0] + 1] = True
    return keep, dt


def edge_index(upper_s: float, lower_s: float, t_land_s: float, f: float, tolerance_s: float = 0.0) -> int:
    """Which Sync edge a record triggered on: edges at ``t_land_s + k / f`` (``k >= 0``, the
    restart's intended landing on the host clock [s], within ``tolerance_s``), the trigger edge
    at or before ``upper_s`` (the record's reply came after its last sample) and not before
    ``lower_s`` (the scope was armed after the host sent ``:DIGitize``). Host and instrument
    delays only make ``upper_s`` later, so the latest edge at or before ``upper_s`` is taken
    (with 0.3 period of slack: the edges given may be late by up to that, e.g. placed by a
    record whose reply was slow), then the first one not before ``lower_s``: correct while the
    reply's delay less the edges' lateness stays under 0.7 of a period (rounding to the nearest
    edge, as before, miscounted a record whose reply came half a period late)."""
    k = max(0, math.floor((upper_s - t_land_s) * f + EDGE_SLACK))
    while t_land_s + k / f < lower_s - tolerance_s and t_land_s + (k + 1) / f <= upper_s + tolerance_s:
        k += 1
    return k


class ScpiRig:
    """A generator (actuators) + digitiser (sensors) rig. ``clock``/``sleep`` default to the
    wall clock (tests pass fakes so ramps take no time)."""

    def __init__(self, rig_config, generator: Keysight33500B, digitiser, clock=time.monotonic, sleep=time.sleep):
        self.config = rig_config
        self.spec = rig_config.spec
        self.gen = generator
        self.dig = digitiser
        self._clock, self._sleep = clock, sleep
        self._t_open = clock()
        self.actuators = tuple(rig_config.actuators)
        gch = {c.actuator: c for c in self.spec.generator.channels}
        self._gen_channels = [gch[a] for a in self.actuators]
        self._dig_channels = list(self.spec.digitiser.channels)
        self._freq: float | None = None
        self._orders = None
        self._V = None
        self._armed = False
        self._closed = False
        self._record = None
        self._theta, self._t_sync, self._f_sync = 0.0, None, 0.0  # demand phase at the last restart
        self._restart_latency_s = 0.02  # upload allowance: from computing a waveform to its restart [s] (running)
        self._burst_latency_s = 0.0  # from sending the restart burst to its landing [s] (running, half the bracket)
        #: what the link did to the demand: restart bursts answered late (their landing only bracketed),
        #: whole periods of the old waveform waited because the uploads outlasted their allowance, records
        #: taken again because the host's bounds left two Sync edges possible
        #: records taken again because a channel narrowed by the ranging clipped (:mod:`.ranging`)
        self.counters = {"late_restarts": 0, "restart_periods_waited": 0, "records_retaken_edge": 0, "records_retaken_range": 0}
        self._edges_placed = True  # the first record after a restart has placed its Sync edges on the clock
        self._t_land, self._t_ref, self._land_tolerance_s = None, 0.0, 0.0  # intended landing, placed grid, bracket
        self._idn = {"generator": generator.identify(), "digitiser": digitiser.identify()}
        generator.setup()
        digitiser.setup(self.spec.digitiser.trigger_level_v)
        for c in self._dig_channels:
            digitiser.configure_channel(c.channel, c.range_v, c.offset_v)
        self._ranges = ChannelRanges({c.channel: c.range_v for c in self._dig_channels},
                                     {c.channel: c.offset_v for c in self._dig_channels}, self.spec.digitiser.autorange_headroom)

    # -- Rig protocol -------------------------------------------------------------------
    def describe(self) -> RigDescription:
        cfg = self.config
        details = {
            "generator": self._idn["generator"],
            "digitiser": self._idn["digitiser"],
            "actuator_channels": {c.actuator: c.channel for c in self._gen_channels},
            "actuator_limits_v": {c.actuator: c.voltage_limit_v for c in self._gen_channels},
            "sensor_channels": {c.sensor: c.channel for c in self._dig_channels},
            "sensor_ranges_v": {c.sensor: c.range_v for c in self._dig_channels},  # the ceilings when autoranged
            "autorange_headroom": self.spec.digitiser.autorange_headroom,
            "trigger_delay_s": self.spec.digitiser.trigger_delay_s,
        }
        return RigDescription(
            identity=cfg.identity, kind="scpi", actuators=self.actuators, sample_rate_hz=cfg.sample_rate_hz,
            voltage_limit_v=cfg.voltage_limit_v, sensors=cfg.sensors, details=details, input_range_v=None,
        )

    @property
    def channel_ranges_v(self) -> dict[str, float]:
        """Each sensor's present digitiser range [V full scale] (its ``range_v`` unless autoranged)."""
        return {c.sensor: self._ranges.present[c.channel] for c in self._dig_channels}

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._t_open

    def _check_open(self):
        if self._closed:
            raise InstrumentError(f"{self.config.identity}: rig is closed")

    def check_demand(self, frequency_hz: float, voltage: np.ndarray, orders) -> np.ndarray:
        """Validate a demand and its peak bound per actuator; returns it as complex
        (n_actuators, n_orders). Raises LimitExceeded (nothing is sent)."""
        orders = np.asarray(orders, dtype=int)
        V = np.asarray(voltage, dtype=complex)
        if V.shape != (len(self.actuators), orders.size):
            raise ValueError(f"voltage must have shape ({len(self.actuators)}, {orders.size}), got {V.shape}")
        if not (np.isfinite(frequency_hz) and frequency_hz > 0) or not np.all(np.isfinite(V)):
            raise ValueError("frequency and voltages must be finite (frequency > 0)")
        points = self.spec.generator.arb_points
        if orders.max(initial=0) * 8 > points:
            raise ValueError(f"harmonic {orders.max()} needs arb_points >= {8 * orders.max()} (have {points})")
        for i, c in enumerate(self._gen_channels):
            dc = np.abs(V[i, orders == 0]).sum()
            ac = np.abs(V[i, orders > 0]).sum()
            peak = dc + max(ac, MIN_AMPLITUDE_VPP / 2)
            if peak > c.voltage_limit_v * (1 + LIMIT_RTOL):
                raise LimitExceeded(
                    f"{self.config.identity}: actuator {c.actuator!r}: demand peak {peak:.4g} V exceeds its limit of {c.voltage_limit_v:g} V"
                )
        return V

    def set_demand(self, frequency_hz: float, voltage: np.ndarray, orders, ramp_periods: float = 2.0) -> None:
        self._check_open()
        V = self.check_demand(frequency_hz, voltage, orders)
        orders = np.asarray(orders, dtype=int)
        self._ranges.scale(self._motion_factor(frequency_hz, V, orders))
        if not self._armed:
            self._arm(frequency_hz)
            prev = np.zeros_like(V)
        elif self._orders is not None and np.array_equal(self._orders, orders):
            prev = self._V
        else:  # re-expressed on the new orders: orders not carried over start from zero
            prev = np.zeros_like(V)
            for j, k in enumerate(orders):
                hit = np.flatnonzero(self._orders == k)
                if hit.size:
                    prev[:, j] = self._V[:, hit[0]]
        g = self.spec.generator
        ramp_s = max(float(ramp_periods), 0.0) / frequency_hz
        steps = 1 if ramp_s <= 0 else int(min(g.max_ramp_steps, max(1, math.ceil(ramp_s / g.ramp_step_s))))
        for j in range(1, steps + 1):
            self._apply(frequency_hz, prev + (V - prev) * (j / steps), orders)
            self._freq, self._orders, self._V = frequency_hz, orders, prev + (V - prev) * (j / steps)
            if ramp_s > 0:
                self._sleep(ramp_s / steps)
        self._V = V.copy()

    def _motion_factor(self, frequency_hz: float, V: np.ndarray, orders: np.ndarray) -> float:
        """How much larger than the last record's the motion after a change to ``V`` can be
        (:meth:`hbtest.rig.scpi.ranging.ChannelRanges.scale`): per actuator ``(|V| + |V - V_prev|)
        / |V_prev|`` (sums of the harmonics' magnitudes), the largest; 1 for a stop (zero demand:
        only a free decay follows, at any frequency); ``inf`` at a new frequency or harmonics,
        from zero, or before the first demand."""
        if not np.any(V):
            return 1.0
        if not self._armed or self._freq != frequency_hz or self._orders is None or not np.array_equal(self._orders, orders):
            return math.inf
        old = np.abs(self._V).sum(axis=1)
        grow = np.abs(V).sum(axis=1) + np.abs(V - self._V).sum(axis=1)
        if np.any((old == 0) & (grow > 0)):
            return math.inf
        return float(np.max(np.divide(grow, old, out=np.ones_like(old), where=old > 0)))

    def _arm(self, frequency_hz: float) -> None:
        """Load, limits, (zero) waveform on every channel, Sync output, restart together,
        error queue empty, then outputs on — at 0 V: the ramp brings the demand up."""
        g = self.spec.generator
        rate = g.arb_points * frequency_hz
        for c in self._gen_channels:
            self.gen.arm_channel(c.channel, c.voltage_limit_v, np.zeros(g.arb_points, dtype=np.int16), rate, 0.0, 0.0)
        self.gen.set_sync_output(g.sync_channel)
        self.gen.sync_arbs()
        errors = self.gen.errors()  # replied once the restart is done (see _apply)
        self._theta, self._t_sync, self._f_sync = 0.0, self._clock(), frequency_hz
        self._t_land, self._t_ref = self._t_sync, self._t_sync - self._t_open
        self._edges_placed = True  # no record is taken before the first demand step restarts again
        if errors:
            self.gen.outputs_off([c.channel for c in self._gen_channels])
            raise InstrumentError(f"{self.gen.name}: refused the arming sequence: {'; '.join(errors)}")
        for c in self._gen_channels:
            self.gen.output_on(c.channel)
        self._armed = True

    def _apply(self, frequency_hz: float, V: np.ndarray, orders) -> None:
        """One demand step. A waveform change restarts both channels at point 0 (``FUNC:ARB:SYNC``,
        :meth:`_restart`): the new waveform is synthesised rotated by the demand phase the old one
        has reached when the restart lands, so the output stays continuous (no phase jump to
        excite a transient) and the Sync edge marks demand phase :attr:`_theta`, not 0."""
        g = self.spec.generator
        rate = g.arb_points * frequency_hz
        chans = list(enumerate(self._gen_channels))
        same = [synthesise(V[i], orders, g.arb_points, self._theta) for i, _ in chans]
        if all(self.gen.state[c.channel].sample_rate == rate and self.gen.state[c.channel].codes is not None
               and np.array_equal(same[i][0], self.gen.state[c.channel].codes) for i, c in chans):
            for i, c in chans:  # the shape only scales: levels, no restart
                self.gen.set_level(c.channel, same[i][1], same[i][2])
            self.gen.check_errors("the demand")
            return
        self._restart(frequency_hz, V, orders, rate)

    def _restart(self, frequency_hz: float, V: np.ndarray, orders, rate: float) -> None:
        """A waveform change, landing on the demand's phase grid whatever the host's delays.

        The new waveforms are synthesised rotated by the demand phase ``theta`` of a target
        time ``t_target`` (now + the upload allowance) and stored; once the generator has
        taken them (a query's reply), the host sleeps until the next time at which the old
        waveform is at phase ``theta`` again (``t_target + m / f_old``, ``m >= 0``: a host
        or an instrument slowed by load only costs whole periods of waiting, never a phase
        jump), then sends the selections, levels and ``FUNC:ARB:SYNC`` back to back — the
        short burst whose landing is the only timing left to chance (the levels follow it: the
        new shapes play at the old levels for a moment, within the limit since the bound
        ``|offset| + A/2`` does not depend on the shape). Before, waveforms were
        uploaded and selected one by one, the restart predicted from the running upload
        latency: a host delayed 30 ms at 19 Hz made a 3.6 rad phase jump, whose transient
        drove the twin's gauges into their +/-10 V output limit (clipped records, a point
        that did not converge under machine load)."""
        g = self.spec.generator
        chans = list(enumerate(self._gen_channels))
        t_start = self._clock()
        t_target = t_start + self._restart_latency_s + self._burst_latency_s
        theta = self._phase_at(t_target)
        waves = [synthesise(V[i], orders, g.arb_points, theta) for i, _ in chans]
        names = [self.gen.store_arb(c.channel, waves[i][0]) for i, c in chans]
        self.gen.check_errors("the waveform upload")  # the reply: the generator has stored them
        took = self._clock() - t_start
        self._restart_latency_s = max(0.5 * self._restart_latency_s + 0.5 * took * RESTART_ALLOWANCE, RESTART_MIN_S)
        period = 1.0 / self._f_sync if self._t_sync is not None and self._f_sync > 0 else 0.0
        t_land = self._wait_for_landing(t_target, period)
        t_send = self._clock()
        for i, c in chans:
            st = self.gen.state[c.channel]
            if st.codes is None or st.sample_rate != rate or not np.array_equal(waves[i][0], st.codes):
                self.gen.select_arb(c.channel, names[i], waves[i][0], rate)
        self.gen.sync_arbs()
        for i, c in chans:  # the new shapes at the old levels for a moment: within the limit (|offset| + A/2)
            self.gen.set_level(c.channel, waves[i][1], waves[i][2])
        self.gen.check_errors("the demand")  # replied once the restart is done
        bracket = self._clock() - t_send
        if bracket > LATE_RESTART_FRACTION / frequency_hz:
            self.counters["late_restarts"] += 1
        # it landed within [t_send, t_send + bracket], i.e. [t_land - lat, t_land - lat + bracket]
        self._land_tolerance_s = max(t_land - t_send, t_send + bracket - t_land, 0.0) + LAND_GUARD_S
        self._burst_latency_s = min(self._burst_latency_s, bracket)  # never aim earlier than the reply allows
        self._theta, self._t_sync, self._f_sync = theta, t_land, frequency_hz
        self._t_land = t_land
        self._edges_placed = False

    def _wait_for_landing(self, t_land: float, period: float) -> float:
        """Sleep until the restart burst is due to land at ``t_land`` [s, host clock] or whole
        periods of the old waveform later (each counted in ``restart_periods_waited``), and
        return that landing. A wake-up later than :data:`LATE_RESTART_FRACTION` of a period
        (a loaded host oversleeps) waits for the next period, at most :data:`MAX_LATE_WAKES`
        times, rather than send a burst whose landing would jump the demand's phase."""
        for wake in range(MAX_LATE_WAKES + 1):
            now = self._clock()
            late = now + self._burst_latency_s - t_land
            if period > 0 and late > (LATE_RESTART_FRACTION * period if wake else 0.0):
                missed = math.ceil(late / period)
                t_land += missed * period
                self.counters["restart_periods_waited"] += missed
            elif wake:
                break
            if t_land - self._burst_latency_s > now:
                self._sleep(t_land - self._burst_latency_s - now)
        return t_land

    def _phase_at(self, t: float) -> float:
        """Demand phase [rad] of the fundamental at clock time ``t`` (0 before any restart)."""
        if self._t_sync is None:
            return 0.0
        return float((self._theta + 2 * np.pi * self._f_sync * (t - self._t_sync)) % (2 * np.pi))

    def acquire(self, n_periods: int) -> ScpiAcquisition:
        self._check_open()
        if self._freq is None:
            raise RuntimeError(f"{self.config.identity}: set_demand() first (no frequency yet)")
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        n_periods = int(n_periods)
        f = self._freq
        d = self.spec.digitiser
        need = n_periods / f
        duration = need + RECORD_SLACK_SAMPLES / self.config.sample_rate_hz + max(d.trigger_delay_s, 0.0)
        points = int(min(d.max_points, math.ceil(self.config.sample_rate_hz * duration - 1e-9)))
        if self._record != (duration, points):
            self.dig.set_record(duration, points)
            self._record = (duration, points)
        for retake in range(MAX_EDGE_RETAKES + 1):
            rec, t_rel, keep, dt, k, t_edge, ambiguous = self._take_in_range(duration, need, n_periods, f)
            if not ambiguous or retake == MAX_EDGE_RETAKES:
                break
            self.counters["records_retaken_edge"] += 1
        self._ranges.follow(rec.volts)
        t = k / f + self._theta / (2 * np.pi * f) + t_rel[keep]
        end = t_edge + float(t_rel[keep][-1]) + dt
        data = {c.sensor: rec.volts[c.channel][keep] for c in self._dig_channels}
        over = tuple(c.sensor for c in self._dig_channels if c.channel in rec.overrange)
        return ScpiAcquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=1.0 / dt, n_periods=n_periods, elapsed_s=end, overrange=over)

    def _take_in_range(self, duration: float, need: float, n_periods: int, f: float):
        """:meth:`_take` with every channel's range as :mod:`.ranging` wants it; a record clipped on
        a channel narrowed below its ceiling is taken again with that channel at the ceiling (so at
        most once per channel: a channel clipped at its ceiling is over-range)."""
        while True:
            for ch, r in self._ranges.changes().items():
                self.dig.set_range(ch, r)
            taken = self._take(duration, need, n_periods, f)
            if not self._ranges.widen_clipped(taken[0].overrange):
                return taken
            self.counters["records_retaken_range"] += 1

    def _take(self, duration: float, need: float, n_periods: int, f: float):
        """One triggered record, cut to ``need`` [s] after its Sync edge: (record, times after
        the edge, kept samples, sample step, edge index, edge time, whether the edge was
        ambiguous)."""
        d = self.spec.digitiser
        chans = [c.channel for c in self._dig_channels]
        t_armed = self.elapsed_s  # the scope is armed after this
        self.dig.digitize(chans, wait_s=duration + 1.0 / f)
        t_done = self.elapsed_s
        rec = self.dig.read(chans)
        t_rel = rec.t + d.trigger_delay_s
        keep, dt = record_window(t_rel, need)
        if keep is None:
            covered = float(t_rel[-1] - max(t_rel[0], 0.0)) if t_rel.size else 0.0
            raise InstrumentError(f"{self.dig.name}: record covers {covered:.4g} s after the trigger, {need:.4g} s "
                                  f"({n_periods} periods) needed: raise max_points or lower the rate")
        lower = t_armed - d.trigger_delay_s - min(float(rec.t[0]), 0.0)  # trigger (and pre-trigger samples) after arming
        k, t_edge, ambiguous = self._edge_before(t_done - float(t_rel[-1]), lower, f)
        return rec, t_rel, keep, dt, k, t_edge, ambiguous

    def _edge_before(self, upper_s: float, lower_s: float, f: float) -> tuple[int, float, bool]:
        """The Sync edge a record triggered on (:func:`edge_index` from the bounds ``lower_s``,
        ``upper_s`` [s since open]): (periods since the restart, the edge's time on the rig
        clock [s since open]).

        The first record after a restart is counted from the restart's intended landing and
        places the edges on the clock (its edge at its upper bound); later ones count whole
        periods from those placed edges (under load a restart landed up to 0.8 period late, a
        record's reply rarely), so the records of one demand are spaced exactly as the Sync
        edges were. The first record also measures how late the
        restart landed (its bound minus the intended edge, plus the reply latency): the demand
        phase model follows it and the burst latency estimate moves 0.3 of it."""
        t_land = (self._t_land if self._t_land is not None else self._t_open) - self._t_open
        if self._edges_placed:  # counted on the placed edges: late by the first record's reply delay only
            k = edge_index(upper_s, lower_s, self._t_ref, f, LAND_GUARD_S)
            # the edge before came after arming too: either the command or the reply was slow by a good part of
            # a period; the host cannot tell which (the record is taken again)
            ambiguous = k > 0 and self._t_ref + (k - 1) / f - lower_s > AMBIGUOUS_FRACTION / f
            return k, self._t_ref + k / f, ambiguous
        k = edge_index(upper_s, lower_s, t_land, f, self._land_tolerance_s)
        if not self._edges_placed:
            self._t_ref = upper_s - k / f
            late = self._t_ref - t_land
            if self._t_sync is not None and abs(late) < 0.5 / f:
                self._t_sync += late
                self._burst_latency_s = max(self._burst_latency_s + 0.3 * late, 0.0)
            self._edges_placed = True
        return k, self._t_ref + k / f, False  # the first record's count only fixes the phase base (any is right)

    def wait(self, n_periods: float) -> None:
        self._check_open()
        if self._freq is None:
            raise RuntimeError(f"{self.config.identity}: set_demand() first (no frequency yet)")
        self._sleep(max(float(n_periods), 0.0) / self._freq)

    def safe_state(self) -> None:
        """Ramp every output down over ``ramp_down_s`` (amplitude to the minimum, offset to
        0 V), then outputs off. The next ``set_demand`` re-arms from zero."""
        if self._closed or not self._armed:
            return
        g = self.spec.generator
        self.gen.ramp_down([c.channel for c in self._gen_channels], g.ramp_down_s, steps=g.ramp_down_steps, sleep=self._sleep)
        self._armed = False
        if self._V is not None:
            self._V = np.zeros_like(self._V)

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.safe_state()
        finally:
            self._closed = True
            self.gen.link.close()
            self.dig.link.close()

    def __enter__(self) -> "ScpiRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class IdentifyingScpiRig(IdentifiedModes, ScpiRig):
    """A :class:`ScpiRig` whose rig file has an ``[identify]`` table: it offers its modes
    (:class:`hbtest.rig.capabilities.KnownModes`) from its identification record, measured by
    the free-decay experiment when none valid is on file (:class:`hbtest.rig.identification.IdentifiedModes`)."""

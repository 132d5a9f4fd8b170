"""Rig kind ``redpitaya``: Red Pitaya STEMlab 125-14 boards (their SCPI server) as one
:class:`~hbtest.rig.Rig` — board 1's two outputs drive the actuators (through an external
amplifier of gain ``output_gain``), the boards' inputs read the sensor channels (two each).

Why a kind of its own and not a third driver of ``scpi``: one box both generates and acquires,
the trigger is the generator's own start on the board's shared clock (no Sync cable into a
scope), and a record is cut out of the live circular buffer by sample count — the ``scpi``
kind's generator/Sync/scope composition (:mod:`hbtest.rig.scpi.rig`) does not fit. It reuses
that kind's link (:mod:`hbtest.rig.scpi.link`), waveform synthesis and acquisition type.

Two inputs per board: a hybrid test needs both interface displacements (two lasers) and the
interface force (two gauges), so the rig file names **two boards** on the daisy chain
(``DAISY:TRig:Out`` of board 1 sends its generator start to board 2's EXT trigger,
``DAISY:SYNC:CLK`` puts board 2 on board 1's clock). With one board only two channels can be
read: the displacement *or* the force, not a hybrid test (the file is refused by the sensor
layout, which needs two lasers and two gauges).

Rig-file table (units in the names; ``instruments/redpitaya-loopback.toml``)::

    [redpitaya]
    visa_library = "@py"; timeout_ms = 3000
    decimation = 16384        # 125 MHz / decimation must equal [rig].sample_rate_hz
    arb_points = 2048         # samples of the one-period arbitrary waveform (<= 16384)
    output_gain = 5.0         # volts at the actuator per volt at OUTn (external amplifier)
    ramp_step_s = 0.05; max_ramp_steps = 20; ramp_down_s = 1.0; ramp_down_steps = 20
    [[redpitaya.boards]]      # board 1 drives the outputs and sends the trigger
    resource = "TCPIP0::192.0.2.20::5000::SOCKET"
    [[redpitaya.outputs]]     # one per actuator; limit at the actuator, <= [rig].voltage_limit_v
    actuator = "vertical"; channel = 1; voltage_limit_v = 5.0
    [[redpitaya.inputs]]      # one per sensor channel
    sensor = "l1"; board = 1; channel = 1; jumper = "HV"   # LV +/-1 V, HV +/-20 V: as set on the board

Timing (the demand's phase in a record): a change of frequency (and the first demand) restarts
both outputs at waveform sample 0 (``SOUR:TRig:INT``) with every board's acquisition armed on
that start (board 1 ``AWG_PE``, the others ``EXT_PE`` over the chain) and a trigger delay of
:data:`DELAY` samples, so each board writes its circular buffer for hours after the restart.
The waveform is uploaded rotated by the demand phase ``theta`` predicted for the restart (no
phase jump reaches the structure); sample ``s`` after the trigger is then at demand phase
``theta + 2 pi f s / fs``, and its time in the demand time base is
``t = theta / (2 pi f) + s / fs``. Within one frequency the waveform and levels are updated in
place (the waveform does not restart). A record of ``n`` periods is the ``n fs / f + 1``
samples written after :meth:`RedPitayaRig.acquire` is called, found by ``ACQ:WPOS?`` (the
write pointer; its wraps counted from the host clock, unambiguous within 16384 samples) and
read in chunks of at most half the buffer with ``ACQ:SOUR<n>:DATA:STArt:N?``; a chunk
overwritten before it was read (a host slower than the buffer) re-takes the record.

Limits: the peak bound ``|a0| + sum_k |V_k|`` at the actuator is checked against its limit
before anything is sent; the board's volts are that divided by ``output_gain`` (at most 1 V:
the board refuses more). Faults and close: levels ramped to 0 over ``ramp_down_s``, then both
outputs off (always, whatever interrupts the ramp).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ...errors import InstrumentError, LimitExceeded
from .. import RigDescription
from ..identification import IdentifiedModes
from ..registry import RigKind, register
from .keysight33500b import DAC_FULL_SCALE
from .link import ScpiLink, open_resource
from .redpitaya import BASE_HZ, BUFFER, CODE_MAX, CODE_MIN, FULL_SCALE_V, OUT_FULL_SCALE_V, RedPitaya
from .rig import LIMIT_RTOL, ScpiAcquisition, synthesise

__all__ = ["RedPitayaSpec", "RedPitayaRig", "IdentifyingRedPitayaRig", "parse", "open", "KIND", "DELAY"]

DELAY = 2_000_000_000  # samples written after the trigger (+8192): 72 h at 7.6 kS/s
CHUNK = BUFFER // 2  # samples read per query
RETAKES = 3  # records re-taken when the buffer overtook the reading
POLL_S = 0.01


@dataclass(frozen=True)
class RpOutput:
    actuator: str
    channel: int
    voltage_limit_v: float


@dataclass(frozen=True)
class RpInput:
    sensor: str
    board: int
    channel: int
    jumper: str


@dataclass(frozen=True)
class RedPitayaSpec:
    boards: tuple[str, ...]
    visa_library: str
    timeout_ms: float
    decimation: int
    arb_points: int
    output_gain: float
    outputs: tuple[RpOutput, ...]
    inputs: tuple[RpInput, ...]
    ramp_step_s: float = 0.05
    max_ramp_steps: int = 20
    ramp_down_s: float = 1.0
    ramp_down_steps: int = 20


def _outputs(sec, common, gain: float) -> tuple[RpOutput, ...]:
    outs: list[RpOutput] = []
    for c in sec.subs("outputs"):
        act = c.string("actuator", choices=tuple(common.actuators))
        ch = c.integer("channel", min=1, max=2)
        lim = c.number("voltage_limit_v", common.voltage_limit_v, positive=True)
        if lim > common.voltage_limit_v:
            raise c.error("voltage_limit_v", f"{lim:g} V exceeds the rig's voltage_limit_v of {common.voltage_limit_v:g} V")
        if lim > gain * OUT_FULL_SCALE_V * (1 + 1e-12):
            raise c.error("voltage_limit_v", f"{lim:g} V is beyond the board's 1 V times output_gain {gain:g}")
        if act in {o.actuator for o in outs} or ch in {o.channel for o in outs}:
            raise c.error("actuator", f"actuator {act!r} or output {ch} mapped twice")
        outs.append(RpOutput(act, ch, lim))
        c.finish()
    missing = [a for a in common.actuators if a not in {o.actuator for o in outs}]
    if missing:
        raise sec.error("outputs", f"no output for actuator(s) {', '.join(missing)}")
    return tuple(outs)


def _inputs(sec, common, boards: int) -> tuple[RpInput, ...]:
    names = tuple(c.name for c in common.sensors.channels)
    ins: list[RpInput] = []
    for c in sec.subs("inputs"):
        name = c.string("sensor", choices=names)
        where = (c.integer("board", 1, min=1, max=boards), c.integer("channel", min=1, max=2))
        if name in {i.sensor for i in ins} or where in {(i.board, i.channel) for i in ins}:
            raise c.error("sensor", f"sensor {name!r} or board {where[0]} input {where[1]} mapped twice")
        ins.append(RpInput(name, *where, c.string("jumper", "HV", choices=tuple(FULL_SCALE_V))))
        c.finish()
    missing = [s for s in names if s not in {i.sensor for i in ins}]
    if missing:
        raise sec.error("inputs", f"no input for sensor channel(s) {', '.join(missing)}")
    return tuple(ins)


def parse(top, common) -> RedPitayaSpec:
    """Parse ``[redpitaya]`` (registry.md ``RigKind.parse``)."""
    sec = top.sub("redpitaya")
    subs = sec.subs("boards")
    boards = tuple(b.string("resource") for b in subs)
    for b in subs:
        b.finish()
    if not boards:
        raise sec.error("boards", "at least one board (the first drives the outputs)")
    dec = sec.integer("decimation", 16384, min=1, max=65536)
    if dec & (dec - 1) or not math.isclose(BASE_HZ / dec, common.sample_rate_hz, rel_tol=1e-9):
        raise sec.error("decimation", f"must be a power of two with 125 MHz / decimation = [rig].sample_rate_hz "
                                      f"({common.sample_rate_hz:g} Hz); {dec} gives {BASE_HZ / dec:g} Hz")
    gain = sec.number("output_gain", 1.0, positive=True)
    spec = RedPitayaSpec(
        boards=boards, visa_library=sec.string("visa_library", "@py"),
        timeout_ms=sec.number("timeout_ms", 3000.0, positive=True, max=600000), decimation=dec,
        arb_points=sec.integer("arb_points", 2048, min=8, max=BUFFER), output_gain=gain,
        outputs=_outputs(sec, common, gain), inputs=_inputs(sec, common, len(boards)),
        ramp_step_s=sec.number("ramp_step_s", 0.05, positive=True),
        max_ramp_steps=sec.integer("max_ramp_steps", 20, min=1, max=1000),
        ramp_down_s=sec.number("ramp_down_s", 1.0, nonnegative=True, max=600),
        ramp_down_steps=sec.integer("ramp_down_steps", 20, min=1, max=1000),
    )
    sec.finish()
    return spec


class _Overtaken(Exception):
    """The circular buffer overwrote samples before they were read."""


class RedPitayaRig:
    """Board 1 drives the actuators; every board's inputs are read (see the module docstring).
    ``clock``/``sleep`` default to the wall clock."""

    def __init__(self, rig_config, boards: list[RedPitaya], clock=time.monotonic, sleep=time.sleep):
        self.config, self.spec = rig_config, rig_config.spec
        self.boards, self.gen = boards, boards[0]
        self._clock, self._sleep = clock, sleep
        self._t_open = clock()
        self.fs = BASE_HZ / self.spec.decimation
        self.actuators = tuple(rig_config.actuators)
        by_act = {o.actuator: o for o in self.spec.outputs}
        self._outs = [by_act[a] for a in self.actuators]
        self._freq: float | None = None
        self._orders: np.ndarray | None = None
        self._V: np.ndarray | None = None
        self._armed = self._closed = False
        self._theta, self._t_restart, self._tpos = 0.0, 0.0, [0] * len(boards)
        self._shapes: dict = {}  # output channel -> the waveform's codes last uploaded
        self._latency_s = 0.01  # from predicting the restart phase to the restart (running estimate)
        self._idn = [b.identify() for b in boards]
        for b in boards:
            b.reset()
        if len(boards) > 1:
            self.gen.send_generator_trigger()
        for i, b in enumerate(boards):
            if i:
                b.follow_chain_clock()
            jumpers = {c.channel: c.jumper for c in self.spec.inputs if c.board == i + 1}
            b.setup_acquisition(self.spec.decimation, jumpers, DELAY)
            b.check_errors("setup")

    # -- Rig protocol ---------------------------------------------------------------------------
    def describe(self) -> RigDescription:
        cfg = self.config
        details = {
            "boards": dict(zip(self.spec.boards, self._idn)),
            "actuator_outputs": {o.actuator: o.channel for o in self._outs},
            "actuator_limits_v": {o.actuator: o.voltage_limit_v for o in self._outs},
            "output_gain": self.spec.output_gain,
            "sensor_inputs": {c.sensor: f"board {c.board} IN{c.channel} ({c.jumper})" for c in self.spec.inputs},
            "decimation": self.spec.decimation,
        }
        return RigDescription(identity=cfg.identity, kind="redpitaya", actuators=self.actuators, sample_rate_hz=self.fs,
                              voltage_limit_v=cfg.voltage_limit_v, sensors=cfg.sensors, details=details, input_range_v=None)

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._t_open

    def _check_open(self) -> None:
        if self._closed:
            raise InstrumentError(f"{self.config.identity}: rig is closed")

    def check_demand(self, frequency_hz: float, voltage, orders) -> np.ndarray:
        """The demand as complex (n_actuators, n_orders), its peak bound checked per actuator
        (LimitExceeded: nothing is sent)."""
        orders = np.asarray(orders, dtype=int)
        V = np.asarray(voltage, dtype=complex)
        if V.shape != (len(self.actuators), orders.size):
            raise ValueError(f"voltage must have shape ({len(self.actuators)}, {orders.size}), got {V.shape}")
        if not (np.isfinite(frequency_hz) and frequency_hz > 0) or not np.all(np.isfinite(V)):
            raise ValueError("frequency and voltages must be finite (frequency > 0)")
        if orders.max(initial=0) * 8 > self.spec.arb_points:
            raise ValueError(f"harmonic {orders.max()} needs arb_points >= {8 * orders.max()}")
        for i, o in enumerate(self._outs):
            peak = float(np.abs(V[i]).sum())
            if peak > o.voltage_limit_v * (1 + LIMIT_RTOL):
                raise LimitExceeded(f"{self.config.identity}: actuator {o.actuator!r}: demand peak {peak:.4g} V "
                                    f"exceeds its limit of {o.voltage_limit_v:g} V")
        return V

    def set_demand(self, frequency_hz: float, voltage, orders, ramp_periods: float = 2.0) -> None:
        self._check_open()
        V = self.check_demand(frequency_hz, voltage, orders)
        orders = np.asarray(orders, dtype=int)
        prev = self._previous(orders, V)
        if not self._armed:
            self._start(frequency_hz, np.zeros_like(V), orders)
        elif frequency_hz != self._freq:
            self._start(frequency_hz, prev, orders)
        g = self.spec
        ramp_s = max(float(ramp_periods), 0.0) / frequency_hz
        steps = 1 if ramp_s <= 0 else int(min(g.max_ramp_steps, max(1, math.ceil(ramp_s / g.ramp_step_s))))
        for j in range(1, steps + 1):
            self._apply(prev + (V - prev) * (j / steps), orders)
            if ramp_s > 0:
                self._sleep(ramp_s / steps)
        self.gen.check_errors("the demand")

    def _previous(self, orders, V) -> np.ndarray:
        """The demand in force re-expressed on ``orders`` (zero when disarmed)."""
        prev = np.zeros_like(V)
        if self._armed and self._orders is not None and self._V is not None:
            for j, k in enumerate(orders):
                hit = np.flatnonzero(self._orders == k)
                if hit.size:
                    prev[:, j] = self._V[:, hit[0]]
        return prev

    def _apply(self, V: np.ndarray, orders) -> None:
        """One demand step in place (no restart): per output the waveform (when its shape
        changed) and the levels, in board volts."""
        for i, o in enumerate(self._outs):
            codes, vpp, a0 = synthesise(V[i], orders, self.spec.arb_points, self._theta)
            if self._shapes.get(o.channel) is None or not np.array_equal(self._shapes[o.channel], codes):
                self.gen.set_samples(o.channel, codes / DAC_FULL_SCALE)
                self._shapes[o.channel] = codes
            amplitude = 0.0 if not codes.any() else vpp / 2
            self.gen.set_level(o.channel, amplitude / self.spec.output_gain, a0 / self.spec.output_gain)
        self._V, self._orders = V, np.asarray(orders)

    def _start(self, frequency_hz: float, V: np.ndarray, orders) -> None:
        """(Re)start at ``frequency_hz``: the demand ``V`` rotated to the phase predicted for the
        restart, every acquisition armed on it, then both outputs restart together."""
        t_predict = self._clock()
        first = not self._armed
        self._theta = 0.0 if first else self._phase_at(t_predict + self._latency_s)
        if first:
            self._shapes = {}
        for o in self._outs:
            if first:
                self.gen.setup_output(o.channel, frequency_hz)
            else:
                self.gen.set_frequency(o.channel, frequency_hz)
        self._freq = frequency_hz
        self._apply(V, orders)
        for i, b in enumerate(self.boards):
            b.arm("AWG_PE" if i == 0 else "EXT_PE")
        t0 = self._clock()
        self.gen.restart()
        self._await_triggers()
        self._t_restart = 0.5 * (t0 + self._clock())
        self._latency_s = 0.5 * self._latency_s + 0.5 * (t0 - t_predict)
        self._tpos = [b.position("TPOS") for b in self.boards]
        if first:
            self.gen.check_errors("arming")
            for o in self._outs:
                self.gen.output_on(o.channel)
            self._armed = True

    def _phase_at(self, t: float) -> float:
        """Demand phase [rad] of the fundamental at clock time ``t`` (host clock)."""
        assert self._freq is not None, "the outputs run (after the first demand)"
        return float((self._theta + 2 * np.pi * self._freq * (t - self._t_restart)) % (2 * np.pi))

    def _await_triggers(self) -> None:
        """Every board's acquisition triggered on the restart, within the link timeout."""
        deadline = self._clock() + self.spec.timeout_ms / 1e3
        for i, b in enumerate(self.boards):
            while not b.triggered():
                if self._clock() > deadline:
                    self.gen.outputs_off([o.channel for o in self._outs])
                    raise InstrumentError(f"{b.name}: acquisition did not trigger on the generator start"
                                          + (" (check the daisy chain from board 1)" if i else ""))
                self._sleep(POLL_S)

    def _count(self, i: int) -> int:
        """Samples written by board ``i`` after its trigger sample (index of the last one
        written, the trigger sample being 0); the buffer's wraps counted from the host clock."""
        w = self.boards[i].position("WPOS")
        base = (w - self._tpos[i]) % BUFFER
        expected = (self._clock() - self._t_restart) * self.fs
        return base + BUFFER * max(0, round((expected - base) / BUFFER))

    def _wait_written(self, last: int, deadline: float) -> None:
        """Until every board has written sample ``last`` (after the trigger)."""
        for i in range(len(self.boards)):
            while (short := last - self._count(i)) > 0:
                if self._clock() > deadline:
                    raise InstrumentError(f"{self.boards[i].name}: the acquisition stopped writing "
                                          f"({short} samples short of the record)")
                self._sleep(short / self.fs + POLL_S)

    def acquire(self, n_periods: int) -> ScpiAcquisition:
        self._check_open()
        if self._freq is None:
            raise RuntimeError(f"{self.config.identity}: set_demand() first (no frequency yet)")
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        f, n_periods = self._freq, int(n_periods)
        need = math.ceil(n_periods * self.fs / f - 1e-9) + 1  # through the sample at or after n periods
        if self._count(0) + 2 * need > DELAY:
            raise InstrumentError(f"{self.gen.name}: the acquisition's {DELAY} samples after the restart are used up")
        for _ in range(RETAKES):
            first = self._count(0) + 1
            try:
                codes = self._take(first, need)
            except _Overtaken:
                continue
            return self._acquisition(first, need, codes, n_periods)
        raise InstrumentError(f"{self.gen.name}: the buffer overwrote the record before it was read, {RETAKES} times "
                              "(the host reads too slowly for this decimation)")

    def _take(self, first: int, need: int) -> dict:
        """Codes per sensor of samples ``first .. first + need - 1`` after the trigger."""
        out: dict = {c.sensor: [] for c in self.spec.inputs}
        deadline = self._clock() + need / self.fs + 2 * self.spec.timeout_ms / 1e3
        s = first
        while s < first + need:
            m = min(CHUNK, first + need - s)
            self._wait_written(s + m - 1, deadline)
            for c in self.spec.inputs:
                board = self.boards[c.board - 1]
                out[c.sensor].append(board.read_codes(c.channel, (self._tpos[c.board - 1] + s) % BUFFER, m))
            if any(self._count(i) - s >= BUFFER for i in range(len(self.boards))):
                raise _Overtaken
            s += m
        return {k: np.concatenate(v) for k, v in out.items()}

    def _acquisition(self, first: int, need: int, codes: dict, n_periods: int) -> ScpiAcquisition:
        f = self._freq
        assert f is not None, "a record is taken only after the first demand"
        s = first + np.arange(need)
        t = self._theta / (2 * np.pi * f) + s / self.fs
        data, over = {}, []
        for c in self.spec.inputs:
            x = codes[c.sensor]
            data[c.sensor] = x.astype(float) / (CODE_MAX + 1) * FULL_SCALE_V[c.jumper]
            if np.any((x >= CODE_MAX) | (x <= CODE_MIN)):
                over.append(c.sensor)
        elapsed = self._t_restart - self._t_open + (first + need) / self.fs
        return ScpiAcquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=self.fs, n_periods=n_periods,
                               elapsed_s=elapsed, overrange=tuple(over))

    def wait(self, n_periods: float) -> None:
        self._check_open()
        if self._freq is None:
            raise RuntimeError(f"{self.config.identity}: set_demand() first (no frequency yet)")
        self._sleep(max(float(n_periods), 0.0) / self._freq)

    def safe_state(self) -> None:
        """Levels ramped to 0 V over ``ramp_down_s`` (``ramp_down_steps`` steps), then both
        outputs off — the output-off whatever interrupts the ramp. The next demand re-arms."""
        if self._closed or not self._armed:
            return
        chans = [o.channel for o in self._outs]
        start = {ch: (self.gen.levels[ch].amplitude_v, self.gen.levels[ch].offset_v) for ch in chans}
        n = self.spec.ramp_down_steps
        try:
            if any(a or o for a, o in start.values()):
                for j in range(1, n + 1):
                    for ch in chans:
                        a0, o0 = start[ch]
                        self.gen.set_level(ch, a0 * (1 - j / n), o0 * (1 - j / n))
                    self._sleep(self.spec.ramp_down_s / n)
        finally:
            self._armed = False
            self.gen.outputs_off(chans)
        self._V = None if self._V is None else np.zeros_like(self._V)

    def close(self) -> None:
        if self._closed:
            return
        try:
            self.safe_state()
        finally:
            self._closed = True
            for b in self.boards:
                b.link.close()

    def __enter__(self) -> "RedPitayaRig":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class IdentifyingRedPitayaRig(IdentifiedModes, RedPitayaRig):
    """A :class:`RedPitayaRig` whose rig file has an ``[identify]`` table: it offers its modes
    (:class:`hbtest.rig.capabilities.KnownModes`, :class:`hbtest.rig.identification.IdentifiedModes`)."""


def open(rig_config, seed: int | None = None) -> RedPitayaRig:  # noqa: A001 - the registry's name
    """Connect every board and compose the rig (``seed`` unused: real boards)."""
    spec: RedPitayaSpec = rig_config.spec
    links: list[ScpiLink] = []
    try:
        for i, res in enumerate(spec.boards):
            name = f"Red Pitaya {i + 1} {res}"
            links.append(ScpiLink(open_resource(res, name, library=spec.visa_library, timeout_ms=spec.timeout_ms), name))
        cls = RedPitayaRig if rig_config.identify is None else IdentifyingRedPitayaRig
        return cls(rig_config, [RedPitaya(link) for link in links])
    except BaseException:
        for link in links:
            link.close()
        raise


KIND = register(RigKind("redpitaya", ("redpitaya",), parse, open))

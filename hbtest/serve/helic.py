"""The virtual twin served as a HELIC-DAQ protocol v3 device (``hbtest serve --protocol
helic``; docs/helic.md). Written from the v3 specification (HELIC-DAQ docs/protocol.md),
cited here by section name.

The served experiment ``hbtest-twin`` has two Fourier-driven outputs (the twin's actuators)
and the twin's four inputs. :class:`HelicDevice` is its state machine (no sockets): one
request payload in, one response payload out. :class:`HelicServer` serves it: control on a
TCP port (one client at a time, "Control channel"), the stream from the UDP port next to it
to the host's port ("Stream channel"); loopback unless told otherwise.

Parameters: the v3 base registry in the specification's order ("Parameter discovery":
``firmware`` ... ``mcu_reboot``, 32 of them), then ``forcing2_coeffs`` (output 2, [V],
``[mean, a1..aK, b1..bK]``, K = 16), ``ramp_periods`` (this experiment's slew: a queued
command ramps the demand over that many periods, raised cosine, phase continuous; at most
MAX_RAMP_S of device time), ``input_limit`` [V] (per input, |raw volts| beyond which the gate
trips; 0 = off), ``output_limit`` [V] (peak per output; a larger set is clamped). Output 1 is
``target_coeffs`` + ``forcing_coeffs`` + the table (``table_*``, played as specified; the
table reaches the ``table`` and ``out`` sources, not the twin's structure). Staging as the
firmware's (helic-rt/src/params/groups.rs): ``arm``, ``diag_reset``, ``mcu_reboot``,
``table_trigger`` = 0 and SetBlock are local; every other write and a Commit are queued.
Sources: the twin's channels [V]; ``target``, ``forcing``, ``table`` [V], ``phase`` [turn];
``out``, ``out2`` [V] after the gate; ``cmd_epoch`` [count]. docs/helic.md lists the
refusals and the liberties.

Time: the twin's clock runs only while a count-limited stream runs (``StreamSetup`` count >
0): ``StreamStart`` applies the queued commands at the next sample boundary (``cmd_epoch``
advances by their number; a ramp they start completes before the first streamed record, the
sample indices show the gap), then simulates ``count x decimation`` samples and sends them.
So a sweep runs as fast as the twin and a host that streams whole periods gets exactly the
samples the in-process twin gives (a stream longer than CHUNK_SAMPLES is simulated and sent
chunk by chunk: bounded memory, ended early by a stop or the host's next request; its noise is
drawn per chunk). Continuous streaming (count 0) is not served (bad value). No request ends
the control thread, and a confirmed ``mcu_reboot`` restarts the device (a new twin, the same
rig file and seed) once its reply is sent.

Look-ahead: once the first stream of input channels after a command took effect is sent, the
next record of the same stream (same setup, no command queued) is simulated in a worker thread
on a copy of the twin (its state and random generator) while the host is busy with the record
it got: a host that judges settling by comparing records takes at least two at each demand
(hbtest does), and after later records the next request is mostly a new demand (measured on
the paper sweep: 24 of these 29 records simulated ahead were taken; ahead of every record, 29
of 67, the rest wasted CPU). The next ``StreamStart`` takes that record and that copy when
nothing was queued and the stream setup is unchanged; otherwise both are discarded and the
twin, untouched, simulates as before. The samples are the same either way.
"""

from __future__ import annotations

import copy
import ipaddress
import math
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import __version__
from ..rig import safety
from ..rig.helic import codec as c
from ..rig.helic.client import RCVBUF
from ..rig.helic.codec import CodecError, ErrorCode, MsgType, ParamDef

__all__ = ["EXPERIMENT", "HARMONICS", "POLL_S", "Faults", "HelicDevice", "HelicServer", "burst_datagrams"]

HARMONICS = 16
EXPERIMENT = "hbtest-twin"
TABLE_CAPACITY = 4096
POLL_S = 0.05
PACE_AFTER = 64  # datagrams sent back to back where the host's buffer is unknown (Linux's default holds 92)
PACE_RATE = 50_000  # beyond the burst, datagrams per second at most (~70 MB/s: what a host drains on loopback)
PACE_S = 0.001  # a pause only when ahead of the pace by this much or more
RMEM_MAX = Path("/proc/sys/net/core/rmem_max")  # Linux: the largest receive buffer a socket may ask for
SKB_TRUESIZE = 2304  # bytes a Linux receive buffer is charged per loopback datagram of <= 1472 bytes (measured)
BUFFER_SHARE = 0.5  # of the receive buffer a burst may fill
NC = 1 + 2 * HARMONICS
UDP_SEGMENT = 103  # Linux <linux/udp.h>: one send call, the kernel cuts it into datagrams of the given size
GSO_SEGMENTS = 40  # datagrams per send call at most (40 x 1472 bytes < 64 KiB)
ARM_KEY = "arm"
MAX_RAMP_S = 10.0  # device time [s] a demand ramp takes at most (ramp_periods / freq beyond it: this long)
F_MIN = 0.01  # Hz: the twin is driven at this frequency at least (freq accepts 0 <= f < fs / 2)
CHUNK_SAMPLES = 1 << 17  # a longer stream is simulated and sent chunk by chunk (bounded memory)
TIMING = ("loop_time_last", "loop_time_max", "clock_jitter", "overruns", "tick_timeouts",
          "wake_phase_min", "wake_phase_max", "t_measure_max", "t_actuate_max", "t_rest_max")
WAKE_UNSET = 0xFFFFFFFF  # wake_phase_min until the rig reports a sample-clock phase
TABLE_SETTINGS = (("table_freq", "f", 0.0), ("table_gain", "f", 1.0), ("table_interp", "I", 1), ("table_mode", "I", 0),
                  ("table_mult", "I", 1), ("table_phase", "f", 0.0), ("table_trigger", "I", 0))
TABLE_MODES = 5  # 0 off, 1 loop, 2 one-shot, 3 locked loop, 4 locked one-shot
REBOOT_CONFIRMATION = 0x52454254
# programme signals, then the outputs after the gate ("Source discovery"): out drives actuator 1
# (target + forcing + table), out2 actuator 2 (forcing2)
PROGRAMME = (("target", "V"), ("forcing", "V"), ("table", "V"), ("phase", "turn"), ("out", "V"), ("out2", "V"))
SIGNALS = ("target", "forcing", "table", "out", "out2")  # computed on the device, from its state
KEEPALIVE = (2, 2, 5)  # s idle, s between probes, probes: a silently vanished host is dropped after ~12 s


@dataclass
class Faults:
    """Test hooks of the served twin (set by tests, never from the wire): in the next stream
    that carries an input channel,
    do not send datagram number ``lose_packet`` (0-based; its sequence number is skipped), and
    lose ``ring_drops`` records after the first datagram before packetisation (they are counted
    in ``dropped`` and ``records_dropped``)."""

    lose_packet: int | None = None
    ring_drops: int = 0


@dataclass
class _Param:
    d: ParamDef
    value: object
    rt: bool = False  # a write enters the RT command queue (advances cmd_epoch)


@dataclass
class _Playback:
    """A one-shot table as it plays: ``origin`` the sample index it was triggered at (None:
    never); ``left`` the master turns a locked one-shot still plays (inf: waiting for the next
    master wrap; None: not playing)."""

    origin: int | None = None
    left: float | None = None


@dataclass
class _Stream:
    decimation: int = 1
    count: int = 0
    sources: tuple = ()
    configured: bool = False


@dataclass
class _Gate:
    """The safety gate ("Parameter discovery": ``safety`` bit0 armed, bit1 latched trip,
    bit2 clamped, bit3 quieted). A gated rig quiets its outputs on every tick while disarmed
    or tripped, so ``quieted`` reads set at power-on and after a disarm until ``diag_reset``,
    and again once a disarmed tick has passed. ``gated = False`` (a test hook, never from the
    wire) serves an experiment without a gate as the firmware does: ``arm`` still shows in
    bit0, nothing is ever quieted, clamped or tripped."""

    armed: bool = False
    tripped: bool = False
    clamped: bool = False
    quieted: bool = True
    reason: str = ""
    gated: bool = True

    def bits(self) -> int:
        return int(self.armed) | int(self.tripped) << 1 | int(self.clamped) << 2 | int(self.quieted) << 3


class _Ahead:
    """The next record of stream setup ``key`` (decimation, count, sources), simulated in a
    worker thread on ``twin``, a copy of the device's twin, from sample ``first``."""

    def __init__(self, device: HelicDevice, key: tuple, n: int, names: list):
        self.key, self.first = key, int(round(device.twin.elapsed_s * device.fs))
        self.twin = copy.deepcopy(device.twin)
        self.cols: dict | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(device, n, names), name="helic-ahead", daemon=True)
        self.thread.start()

    def _run(self, device: HelicDevice, n: int, names: list) -> None:
        try:
            self.cols = device._sample(self.twin, n, names)
        except BaseException as e:  # handed to the stream that takes this record
            self.error = e

    def take(self):
        """``(twin after the record, its columns)``; the worker's exception, if it raised."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.twin, self.cols


class HelicDevice:
    """The ``hbtest-twin`` experiment over the twin of ``rig_config`` (kind "virtual").
    :meth:`handle` answers one request; :meth:`stream` produces the datagrams of a started
    stream; :meth:`disconnected` applies the connection-loss rule (disarm)."""

    def __init__(self, rig_config, seed: int | None = None, on_event=None):
        from ..rig.virtual import VirtualRig

        self.twin = VirtualRig(rig_config, seed=seed)
        desc = self.twin.describe()
        self.channels = tuple(c_.name for c_ in rig_config.sensors.channels)
        self.fs = float(desc.sample_rate_hz)
        self.max_voltage = float(desc.voltage_limit_v)
        self.on_event = on_event or (lambda kind, message: None)
        self.faults = Faults()
        self.gate = _Gate()
        self.epoch = 0
        self.pending = 0
        self.dropped = 0
        self.stream_cfg = _Stream()
        self.started = time.monotonic()
        self._applied: tuple | None = None  # (f, V, orders) last given to the twin
        self._ahead: _Ahead | None = None  # the next record, simulated ahead (module docstring)
        self.ahead_counts = dict(taken=0, discarded=0)  # records simulated ahead, served or not
        self._after_write = False  # the last stream applied queued commands
        self._staged = np.zeros(TABLE_CAPACITY, np.float32)
        self.table: np.ndarray | None = None  # the committed table
        self._trigger = False  # a table_trigger queued
        self.playback = _Playback()
        self.reboot_requested = False
        self.params = self._registry(rig_config)
        self.index = {p.d.name: i for i, p in enumerate(self.params)}
        self.sources = [(ch, "V") for ch in self.channels] + list(PROGRAMME) + [("cmd_epoch", "count")]

    def _registry(self, rig_config) -> list[_Param]:
        """The v3 base registry in the specification's order ("Parameter discovery"), then
        this experiment's own parameters."""
        fw = f"{__version__} twin"[:16]
        P = ParamDef
        base = [_Param(P("firmware", "c", 16, False), fw), _Param(P("experiment", "c", 16, False), EXPERIMENT),
                _Param(P("sample_freq", "f", 1, False), self.fs), _Param(P("ticks", "I", 1, False), 0)]
        base += [_Param(P(n, "I", 1, False), 0) for n in TIMING[:5] + ("records_dropped",)]
        base += [_Param(P("freq", "f", 1, True), 10.0, True),
                 _Param(P("target_coeffs", "f", NC, True), np.zeros(NC), True),
                 _Param(P("forcing_coeffs", "f", NC, True), np.zeros(NC), True),
                 _Param(P("table", "f", TABLE_CAPACITY, True), None), _Param(P("table_len", "H", 1, False), 0)]
        base += [_Param(P(n, t, 1, True), v, True) for n, t, v in TABLE_SETTINGS]
        base += [_Param(P(n, "I", 1, False), WAKE_UNSET if n == "wake_phase_min" else 0) for n in TIMING[5:10]]
        base += [_Param(P("diag_reset", "I", 1, True), 0), _Param(P("cmd_backlog_max", "I", 1, False), 0),
                 _Param(P(ARM_KEY, "I", 1, True), 0), _Param(P("safety", "I", 1, False), 0),
                 _Param(P("mcu_reboot", "I", 1, True), 0)]
        return base + [
            _Param(P("forcing2_coeffs", "f", NC, True), np.zeros(NC), True),
            _Param(P("ramp_periods", "f", 1, True), 2.0, True),
            _Param(P("input_limit", "f", len(self.channels), True), np.zeros(len(self.channels)), True),
            _Param(P("output_limit", "f", 1, True), self.max_voltage, True),
        ]

    # -- requests ---------------------------------------------------------------------------
    def handle(self, msg_type: int, payload: bytes) -> tuple[int, bytes]:
        """``(response type, response payload)``; an error frame for any refused request."""
        handlers: dict[int, Callable[[bytes], bytes]] = {MsgType.GET_PARAMS: self._get_params, MsgType.GET_SOURCES: self._get_sources,
                    MsgType.GET_PAR: self._get_par, MsgType.SET_PAR: self._set_par, MsgType.SET_BLOCK: self._set_block,
                    MsgType.COMMIT: self._commit, MsgType.STREAM_SETUP: self._stream_setup,
                    MsgType.STREAM_STOP: lambda p: b"", MsgType.STATUS: self._status}
        h = handlers.get(msg_type)
        if h is None:
            return MsgType.ERROR, c.encode_error(ErrorCode.UNKNOWN_TYPE, msg_type)
        try:
            return msg_type, h(payload)
        except CodecError as e:
            return MsgType.ERROR, c.encode_error(e.code, msg_type)
        except Exception as e:  # noqa: BLE001 - no request may end the device: refused as a bad value
            self.on_event("refused", f"request type {msg_type} refused: {type(e).__name__}: {e}")
            return MsgType.ERROR, c.encode_error(ErrorCode.BAD_VALUE, msg_type)

    def _status(self, p: bytes) -> bytes:
        """A payload is ignored, as the firmware does."""
        up = int((time.monotonic() - self.started) * 1000)
        return c.Status(c.VERSION, len(self.params), len(self.sources), self.fs, up).encode()

    @staticmethod
    def _length(p: bytes, n: int) -> None:
        if len(p) != n:
            raise CodecError(f"payload of {len(p)} bytes, needs {n}", ErrorCode.BAD_LENGTH)

    def _get_params(self, p: bytes) -> bytes:
        self._length(p, 2)
        (start,) = struct.unpack("<H", p)
        return c.encode_param_page([q.d for q in self.params], start)

    def _get_sources(self, p: bytes) -> bytes:
        return c.encode_sources(self.sources)

    def _param(self, i: int) -> _Param:
        if not 0 <= i < len(self.params):
            raise CodecError(f"no parameter {i}", ErrorCode.BAD_INDEX)
        return self.params[i]

    def _read(self, q: _Param):
        name = q.d.name
        if name == "ticks":
            return int(round(self.twin.elapsed_s * self.fs)) & 0xFFFFFFFF
        if name == "safety":
            return self.gate.bits()
        if name == ARM_KEY:
            return int(self.gate.armed)
        if name == "records_dropped":
            return self.dropped
        return q.value

    def _get_par(self, p: bytes) -> bytes:
        if not p or len(p) % 2:
            raise CodecError("GetPar needs u16 indices", ErrorCode.BAD_LENGTH)
        out = b""
        for (i,) in struct.iter_unpack("<H", p):
            q = self._param(i)
            if q.value is None:  # block storage: too large for GetPar
                raise CodecError(f"{q.d.name} is block storage", ErrorCode.BAD_LENGTH)
            out += c.pack_value(q.d, self._read(q))
        if len(out) > c.MAX_PAYLOAD:
            raise CodecError("reply longer than a frame", ErrorCode.BAD_LENGTH)
        return out

    def _set_par(self, p: bytes) -> bytes:
        if len(p) < 2:
            raise CodecError("SetPar needs an index", ErrorCode.BAD_LENGTH)
        (i,) = struct.unpack_from("<H", p)
        q = self._param(i)
        if not q.d.writable or q.value is None:
            raise CodecError(f"{q.d.name} is read-only", ErrorCode.READ_ONLY)
        self._length(p[2:], q.d.size)
        value = c.unpack_value(q.d, p[2:])
        self._validate(q.d.name, value)
        if q.d.name == "diag_reset":
            if value:
                self.gate.clamped = self.gate.quieted = False
                self.dropped = 0
            return b""
        if q.d.name == "mcu_reboot":  # local: the server restarts the device once this reply is sent
            self.reboot_requested = True
            return b""
        if q.d.name == "table_trigger":  # reads 0; non-zero enters the queue and (re)starts a one-shot
            self.pending += int(value != 0)
            self._trigger |= value != 0
            return b""
        if q.d.name == ARM_KEY:
            value = int(value != 0)  # any non-zero arms (firmware PlatformGroup)
            self._arm(bool(value))
        q.value = value
        self.pending += int(q.rt)
        return b""

    def _validate(self, name: str, value) -> None:
        """Bad value (6): a non-finite f32 anywhere ("SetPar rejects non-finite f32"), a
        frequency outside 0 <= f < fs / 2, a ramp outside 0..1000 periods, a negative limit or
        an output limit beyond the twin's voltage limit."""
        arr = np.atleast_1d(np.asarray(value, dtype=float))
        x, nyquist = arr[0], self.fs / 2
        ok = {"freq": 0 <= x < nyquist, "table_freq": 0 <= x < nyquist, "ramp_periods": 0 <= x <= 1000,
              "table_interp": x in (0, 1), "table_mode": 0 <= x < TABLE_MODES, "table_mult": x >= 1,
              "table_phase": 0 <= x < 1, "mcu_reboot": x == REBOOT_CONFIRMATION,
              "output_limit": 0 <= x <= self.max_voltage, "input_limit": bool(np.all(arr >= 0))}
        if not np.all(np.isfinite(arr)) or not ok.get(name, True):
            raise CodecError(f"bad value for {name}", ErrorCode.BAD_VALUE)

    def _arm(self, on: bool) -> None:
        """Arm (clears a stale trip) or disarm; local to the device, no queued command."""
        if on:
            self.gate.tripped, self.gate.reason = False, ""  # arming clears a stale trip
        elif self.gate.gated:
            self._quiet()
            self.gate.quieted = True
        self.gate.armed = on

    def _set_block(self, p: bytes) -> bytes:
        if len(p) < 6 or (len(p) - 6) % 4:
            raise CodecError("SetBlock needs index, offset and whole f32 values", ErrorCode.BAD_LENGTH)
        i, off = struct.unpack_from("<HI", p)
        if self._param(i).d.name != "table":
            raise CodecError("only table takes blocks", ErrorCode.BAD_INDEX)
        vals = np.frombuffer(p[6:], "<f4")
        if not vals.size or off + vals.size > TABLE_CAPACITY:
            raise CodecError("an empty block, or one beyond the table", ErrorCode.BAD_LENGTH)
        self._staged[off:off + vals.size] = vals  # any f32 is staged; Commit checks (TableGroup)
        return b""

    def _commit(self, p: bytes) -> bytes:
        self._length(p, 6)
        i, n = struct.unpack("<HI", p)
        if self._param(i).d.name != "table":
            raise CodecError("only table commits", ErrorCode.BAD_INDEX)
        if not 2 <= n <= TABLE_CAPACITY or not np.all(np.isfinite(self._staged[:n])):
            raise CodecError("a table commit takes 2..4096 finite values", ErrorCode.BAD_VALUE)
        self.table = self._staged[:n].astype(float)
        self.params[self.index["table_len"]].value = n
        self.pending += 1  # a table commit enters the RT queue
        return b""

    def _stream_setup(self, p: bytes) -> bytes:
        if len(p) < 7:
            raise CodecError("StreamSetup payload too short", ErrorCode.BAD_LENGTH)
        dec, count, n = struct.unpack_from("<HIB", p)
        ids = tuple(p[7:])
        if len(ids) != n or dec < 1 or n < 1 or any(s >= len(self.sources) for s in ids) or count == 0:
            raise CodecError("StreamSetup: decimation >= 1, sources known, count > 0 (this twin)", ErrorCode.BAD_VALUE)
        self.stream_cfg = _Stream(dec, count, ids, True)
        return b""

    def value(self, name: str):
        return self.params[self.index[name]].value

    # -- the RT side --------------------------------------------------------------------------
    def _demand(self):
        """The effective demand ``(f, V (2, n), orders)`` after the safety gate."""
        f = float(self.value("freq"))
        out1 = _complex(self.value("target_coeffs")) + _complex(self.value("forcing_coeffs"))  # target adds to the output
        V = np.stack([out1, _complex(self.value("forcing2_coeffs"))])
        used = np.flatnonzero(np.any(V != 0, axis=0))
        orders = np.union1d(used, [1])  # the twin's orders: those in use, and the fundamental
        if not self.gate.gated:
            return max(f, F_MIN), V[:, orders], orders
        limit = float(self.value("output_limit"))
        peak = safety.peak_bound(V)
        self.gate.clamped |= bool(np.any(peak > limit * (1 + safety.LIMIT_TOLERANCE)))
        V = V * np.minimum(1.0, limit / np.maximum(peak, 1e-300))[:, None]
        if not (self.gate.armed and not self.gate.tripped):
            self.gate.quieted = True
            V = np.zeros_like(V)
        return max(f, F_MIN), V[:, orders], orders

    def apply_pending(self) -> None:
        """Apply the queued commands at this sample boundary: the epoch advances by their
        number and the demand they set reaches the twin, ramped over ``ramp_periods`` (as
        every demand write of the host is: rig time passes even for an unchanged demand)."""
        if self.pending == 0 and self._applied is not None:
            return
        self.epoch = (self.epoch + self.pending) % c.EPOCH_MODULUS
        self.pending = 0
        f, V, orders = self._demand()
        self.twin.set_demand(f, V, orders, min(float(self.value("ramp_periods")), MAX_RAMP_S * f))
        self._applied = (f, V, orders)
        if self._trigger:  # a one-shot starts at the first sample after the ramp its commands started
            self._trigger = False
            self.playback = _Playback(int(round(self.twin.elapsed_s * self.fs)), math.inf)

    def _quiet(self) -> None:
        """Outputs to zero (ramp), as the gate does on a trip, a disarm or a lost connection."""
        if self._applied is not None and np.any(self._applied[1] != 0):
            f, V, orders = self._applied
            self.twin.set_demand(f, np.zeros_like(V), orders, safety.RAMP_DOWN_PERIODS)
            self._applied = (f, np.zeros_like(V), orders)

    def disconnected(self) -> None:
        """Control connection lost: outputs quiet, disarm, stream stops ("Parameter discovery").
        The outputs go quiet before the gate reads disarmed, so no observer sees a disarmed
        device still driving (a test caught that window under load)."""
        self._ahead = None
        self._quiet()
        self._arm(False)
        self.params[self.index[ARM_KEY]].value = 0
        self.stream_cfg = _Stream()
        self.pending = 0

    def stream(self) -> Iterator[np.ndarray]:
        """The datagrams of the configured count-limited stream, as runs: uint8 arrays
        (datagrams, bytes), one datagram per row, consecutive datagrams of one size. A stream
        longer than CHUNK_SAMPLES is simulated chunk by chunk as it is sent (whole datagrams
        per chunk): memory stays bounded, and the sender may stop between chunks."""
        ahead, self._ahead = self._ahead, None
        cfg = self.stream_cfg
        hit = ahead is not None and not self.pending and ahead.key == (cfg.decimation, cfg.count, cfg.sources)
        self._after_write = self.pending > 0
        self.apply_pending()
        self.gate.quieted |= self.gate.gated and not (self.gate.armed and not self.gate.tripped)
        n, dec = cfg.count * cfg.decimation, cfg.decimation
        first = int(round(self.twin.elapsed_s * self.fs))
        names = [self.sources[s][0] for s in cfg.sources]
        faults = Faults()
        if any(x in self.channels for x in names):
            faults, self.faults = self.faults, Faults()
        if ahead is not None and hit and ahead.first == first:
            self.twin, cols = ahead.take()
            self.ahead_counts["taken"] += 1
            yield from self._packets(self._columns(cols, names, n)[::dec], first, dec, faults, 0)
            return
        self.ahead_counts["discarded"] += ahead is not None
        per = c.records_per_packet(len(names))
        step = max(1, CHUNK_SAMPLES // (per * dec)) * per * dec if per * dec <= CHUNK_SAMPLES else \
            max(1, CHUNK_SAMPLES // dec) * dec  # whole datagrams per chunk where a datagram fits in one
        step = n if faults != Faults() else step
        seq = 0
        for start in range(0, n, step):
            k = min(step, n - start)
            values = self._columns(self._sample(self.twin, k, names), names, k)[::dec]
            yield from self._packets(values, first + start, dec, faults, seq)
            seq += -(-values.shape[0] // per)

    def look_ahead(self) -> None:
        """After the first stream of input channels since a command took effect, simulate the
        next record of the same stream in a worker thread (module docstring, "Look-ahead")."""
        cfg = self.stream_cfg
        names = [self.sources[s][0] for s in cfg.sources]
        small = cfg.count * cfg.decimation <= CHUNK_SAMPLES and not any(x in SIGNALS for x in names)
        if cfg.configured and small and self._after_write and not self.pending and any(x in self.channels for x in names):
            self._ahead = _Ahead(self, (cfg.decimation, cfg.count, cfg.sources), cfg.count * cfg.decimation, names)

    def _sample(self, twin, n: int, names) -> dict:
        """The next ``n`` samples of ``twin`` as columns by source name; ``cmd_epoch`` alone
        advances it without recording (the in-process ``wait``). Touches nothing but ``twin``."""
        if not any(x != "cmd_epoch" for x in names):
            twin.wait(n * twin.demand.frequency_hz / self.fs)
            return {}
        first = int(round(twin.elapsed_s * self.fs))
        acq = twin.acquire_samples(n)
        cols = {ch: acq.data[ch] for ch in self.channels}
        cols["phase"] = (np.mod(acq.frequency_hz * acq.t, 1.0) * 2.0**32 // 1 / 2.0**32).astype(np.float32)
        if any(x in SIGNALS for x in names):  # never in a record simulated ahead (look_ahead)
            cols.update(self._programme(acq.frequency_hz * acq.t, first + np.arange(n), acq.frequency_hz / self.fs))
        return cols

    def _programme(self, turns: np.ndarray, idx: np.ndarray, step: float) -> dict:
        """The programme signals ``target``, ``forcing``, ``table`` [V] at master phase
        ``turns`` (unwrapped within the record, ``step`` per sample) and sample indices
        ``idx``, and the outputs after the gate: ``out`` (actuator 1: the demand the twin
        was given, plus the table while the gate is open) and ``out2`` (actuator 2)."""
        theta = 2 * np.pi * turns
        f, V, orders = self._applied if self._applied is not None else (0.0, np.zeros((2, 1)), np.array([1]))
        table = self._table_signal(turns, idx, step)
        open_ = not self.gate.gated or (self.gate.armed and not self.gate.tripped)
        return dict(target=_fourier(_complex(self.value("target_coeffs")), np.arange(NC // 2 + 1), theta),
                    forcing=_fourier(_complex(self.value("forcing_coeffs")), np.arange(NC // 2 + 1), theta),
                    table=table, out=_fourier(V[0], orders, theta) + table * open_, out2=_fourier(V[1], orders, theta))

    def _table_signal(self, turns: np.ndarray, idx: np.ndarray, step: float) -> np.ndarray:
        """The committed table as ``table_mode`` plays it ("Parameter discovery"; HELIC-DAQ
        user guide "Arbitrary waveform tables"): free-running at ``table_freq`` from sample 0
        (loop) or from the trigger (one shot), or locked to ``table_mult`` x the master phase
        plus ``table_phase`` (locked loop; locked one shot from the next master wrap after the
        trigger, one table period), times ``table_gain``, zero-order hold or linear."""
        mode = int(self.value("table_mode"))
        if self.table is None or mode == 0:
            return np.zeros(idx.size)
        play = np.ones(idx.size, bool)
        if mode in (1, 2):
            origin = self.playback.origin if mode == 2 else 0
            if origin is None:
                return np.zeros(idx.size)
            elapsed = (idx - origin) / self.fs * float(self.value("table_freq"))
            play &= (mode == 1) | ((elapsed >= 0) & (elapsed < 1))
            ph = np.mod(elapsed, 1.0)
        else:
            mult = int(self.value("table_mult"))
            ph = np.mod(turns * mult + float(self.value("table_phase")), 1.0)
            if mode == 4:
                play = self._locked_shot(turns, step, mult)
        return float(self.value("table_gain")) * _interpolate(self.table, ph, int(self.value("table_interp"))) * play

    def _locked_shot(self, turns: np.ndarray, step: float, mult: int) -> np.ndarray:
        """Where a locked one-shot plays in this record: from the first master wrap after the
        trigger for ``1 / mult`` turn; what is left of it carries to the next record."""
        play = np.zeros(turns.size, bool)
        left, start = self.playback.left, 0
        if left is None or not turns.size:
            return play
        if left == math.inf:
            wraps = np.flatnonzero(np.floor(turns[1:]) != np.floor(turns[:-1]))
            if not wraps.size:
                return play
            start, left = int(wraps[0]) + 1, 1.0 / mult
            ref = np.floor(turns[start])
        else:
            ref = turns[0]
        rel = turns - ref
        play[start:] = rel[start:] < left
        rest = left - (rel[-1] + step)
        self.playback = _Playback(self.playback.origin, rest if rest > 0 else None)
        return play

    def _columns(self, cols: dict, names, n: int) -> np.ndarray:
        """(n, len(names)) f32 values of ``n`` sampled ``cols``; checks the input limits."""
        if not cols:
            return np.full((n, len(names)), self.epoch, np.float32)
        self._check_inputs(cols)
        cols = dict(cols, cmd_epoch=np.full(n, self.epoch, float))
        return np.stack([np.asarray(cols[x], np.float32) for x in names], axis=1)

    def _check_inputs(self, cols) -> None:
        if not self.gate.gated:
            return
        lim = np.asarray(self.value("input_limit"), float)
        for ch, L in zip(self.channels, lim):
            if L > 0 and np.max(np.abs(cols[ch])) > L:
                if not self.gate.tripped:
                    self.on_event("trip", f"input {ch} beyond {L:g} V: trip, outputs quiet")
                self._quiet()
                self.gate.tripped, self.gate.reason = True, f"input {ch} beyond {L:g} V"
                self.gate.armed = False
                return

    def _packets(self, values, first: int, dec: int, faults: Faults, seq0: int):
        """The datagrams of ``values`` (records from sample ``first``, every ``dec``-th),
        sequence numbers from ``seq0``."""
        idx = first + dec * np.arange(values.shape[0], dtype=np.int64)
        if faults == Faults():
            yield from _whole_packets(values, idx, dec, self.dropped, seq0)
            return
        n, m = values.shape
        per = c.records_per_packet(m)
        raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
        idx = idx.tolist()
        seq, i = seq0, 0
        while i < n:
            if seq == 1 and faults.ring_drops:
                self.dropped += faults.ring_drops
                i += faults.ring_drops
                faults.ring_drops = 0
                continue
            k = min(per, n - i)
            if seq != faults.lose_packet:
                datagram = c.packet_header(seq, idx[i], self.dropped, dec, (k, m)) + raw[4 * m * i:4 * m * (i + k)]
                yield np.frombuffer(datagram, np.uint8)[None, :]
            i += per
            seq += 1


def _whole_packets(values: np.ndarray, idx: np.ndarray, dec: int, dropped: int, seq0: int = 0) -> Iterator[np.ndarray]:
    """The datagrams of a stream without faults, built as one array (header + records per row):
    the full datagrams as one run, the shorter last one as another."""
    n, m = values.shape
    per = c.records_per_packet(m)
    count = -(-n // per)
    rows = np.zeros((count * per, m), "<f4")
    rows[:n] = values
    heads = np.zeros(count, c.PACKET_DTYPE)
    heads["magic"], heads["version"], heads["m"], heads["dec"], heads["n"] = c.MAGIC, c.VERSION, m, dec, per
    heads["seq"] = (seq0 + np.arange(count)) & 0xFFFFFFFF
    heads["first"] = idx[::per] & 0xFFFFFFFF
    heads["dropped"] = dropped & 0xFFFFFFFF
    heads["n"][-1] = n - per * (count - 1)
    block = np.concatenate([heads.view(np.uint8).reshape(count, -1), rows.view(np.uint8).reshape(count, -1)], axis=1)
    last = c.PACKET_HEADER.size + 4 * m * int(heads["n"][-1])
    if last == block.shape[1]:
        yield block
        return
    if count > 1:
        yield block[:-1]
    yield block[-1:, :last]


def burst_datagrams(host: str) -> int:
    """Datagrams of a stream the served twin sends back to back to a host at address ``host``
    before pacing at PACE_RATE: on Linux, to a loopback host (which shares this kernel), what
    BUFFER_SHARE of the receive buffer hbtest's host asks for holds (SO_RCVBUF RCVBUF, capped by
    ``rmem_max`` and doubled by the kernel, socket(7)), at SKB_TRUESIZE bytes charged per
    datagram; elsewhere PACE_AFTER."""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
        rmem_max = int(RMEM_MAX.read_text())
    except (ValueError, OSError):
        return PACE_AFTER
    if not loopback:
        return PACE_AFTER
    return max(PACE_AFTER, int(BUFFER_SHARE * 2 * min(rmem_max, RCVBUF) / SKB_TRUESIZE))


def _fourier(X: np.ndarray, orders: np.ndarray, theta: np.ndarray) -> np.ndarray:
    """``Re sum_j X_j exp(i orders_j theta)`` [V] (X in the hbtest.method.harmonics convention)."""
    used = np.flatnonzero(X != 0)
    if not used.size:
        return np.zeros(theta.size)
    return np.real(np.exp(1j * np.multiply.outer(theta, orders[used])) @ X[used])


def _interpolate(table: np.ndarray, ph: np.ndarray, linear: int) -> np.ndarray:
    """``table`` at phase ``ph`` [turn, 0..1): zero-order hold, or linear (wrapping)."""
    pos = ph * table.size
    i = np.floor(pos).astype(np.int64) % table.size
    if not linear:
        return table[i]
    return table[i] + (pos - np.floor(pos)) * (table[(i + 1) % table.size] - table[i])


def _complex(coeffs) -> np.ndarray:
    """[mean, a1..aK, b1..bK] -> complex (K + 1,) in the hbtest.method.harmonics convention
    (V_k = a_k - i b_k, DC real)."""
    x = np.asarray(coeffs, float)
    K = (x.size - 1) // 2
    return np.concatenate([[x[0]], x[1:K + 1] - 1j * x[K + 1:]])


class HelicServer:
    """Serves a :class:`HelicDevice`: TCP control on ``port`` (0: a free port whose next port
    is free for UDP too), the stream from UDP ``port + 1``. One client at a time (a direct
    endpoint, "Control channel"); others wait in the listen queue. ``start()`` binds and serves
    in a background thread; ``stop()`` quiets the outputs and closes every socket."""

    def __init__(self, rig_config, *, host: str = "127.0.0.1", port: int = 2350, seed: int | None = None,
                 on_event=None):
        self.on_event = on_event or (lambda kind, message: None)
        self._rig_config, self._seed = rig_config, seed
        self.device = HelicDevice(rig_config, seed=seed, on_event=self.on_event)
        self.host, self.port = host, int(port)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._tcp: socket.socket | None = None
        self._udp: socket.socket | None = None
        self._conn: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._gso = True  # until a segmented send is refused
        self._bursts: dict[str, int] = {}  # per host address: burst_datagrams

    @property
    def stream_port(self) -> int:
        return self.port + 1

    def _bind(self, port: int):
        t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            t.bind((self.host, port))
            u.bind((self.host, t.getsockname()[1] + 1))
        except OSError:
            t.close()
            u.close()
            raise
        return t, u

    def start(self) -> tuple[str, int]:
        for attempt in range(50 if self.port == 0 else 1):
            try:
                t, u = self._bind(self.port)
                break
            except OSError:
                if attempt == (49 if self.port == 0 else 0):
                    raise
        t.listen(4)
        t.settimeout(POLL_S)
        self._tcp, self._udp = t, u
        self.host, self.port = t.getsockname()[:2]
        self._thread = threading.Thread(target=self._serve, name="helic-control", daemon=True)
        self._thread.start()
        return self.host, self.port

    def __enter__(self) -> HelicServer:
        if self._tcp is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for s in (self._tcp, self._udp):
            if s is not None:
                s.close()
        with self._lock:
            self.device.disconnected()
        self.on_event("stopped", "stopped: outputs quiet, sockets closed")

    def _serve(self) -> None:
        tcp = self._tcp
        assert tcp is not None, "serving starts after start() bound the sockets"
        while not self._stop.is_set():
            try:
                conn, addr = tcp.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._conn = conn
            self.on_event("connected", f"host {addr[0]}:{addr[1]} connected")
            try:
                self._session(conn, addr[0])
            except OSError:
                pass
            except Exception as e:  # noqa: BLE001 - the control thread serves the next host whatever happened
                self.on_event("error", f"host {addr[0]}:{addr[1]} dropped: {type(e).__name__}: {e}")
            finally:
                conn.close()
                with self._lock:
                    self.device.disconnected()
                self.on_event("disconnected", f"host {addr[0]}:{addr[1]} disconnected: disarmed")
                self._reboot()

    def _reboot(self) -> None:
        """After a confirmed ``mcu_reboot`` (its reply sent, the connection closed): a new
        device over a new twin of the same rig file and seed, as at power-on."""
        if not self.device.reboot_requested:
            return
        device = HelicDevice(self._rig_config, seed=self._seed, on_event=self.on_event)
        with self._lock:
            self.device = device
        self.on_event("rebooted", "mcu_reboot: the device restarted (power-on state)")

    def _session(self, conn: socket.socket, peer: str) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        _keepalive(conn)
        conn.settimeout(POLL_S)
        reader = c.FrameReader()
        while not self._stop.is_set():
            try:
                frame = reader.next()
            except CodecError:
                return  # bad framing drops the connection
            if frame is None:
                try:
                    chunk = conn.recv(1 << 16)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                reader.feed(chunk)
                continue
            msg_type, seq, payload = frame
            self._answer(conn, peer, msg_type, seq, payload)
            if self.device.reboot_requested:
                return

    def _answer(self, conn, peer: str, msg_type: int, seq: int, payload: bytes) -> None:
        with self._lock:
            if msg_type == MsgType.STREAM_START:
                if len(payload) != 2:
                    conn.sendall(c.encode_frame(MsgType.ERROR, seq, c.encode_error(ErrorCode.BAD_LENGTH, msg_type)))
                    return
                if not self.device.stream_cfg.configured:
                    conn.sendall(c.encode_frame(MsgType.ERROR, seq, c.encode_error(ErrorCode.BAD_VALUE, msg_type)))
                    return
                conn.sendall(c.encode_frame(msg_type, seq))
                try:
                    self._send_stream((peer, struct.unpack("<H", payload)[0]), conn)
                    self.device.look_ahead()
                except Exception as e:  # noqa: BLE001 - acknowledged already: the stream ends short, the host sees it
                    self.on_event("error", f"stream ended: {type(e).__name__}: {e}")
                return
            rtype, body = self.device.handle(msg_type, payload)
        conn.sendall(c.encode_frame(rtype, seq, body))

    def _send_stream(self, dest, conn: socket.socket | None = None) -> None:
        """Send the started stream's datagrams to ``dest``: the first :func:`burst_datagrams`
        back to back, then at most PACE_RATE a second; up to GSO_SEGMENTS datagrams of one
        size go out in one send call where the system segments them (UDP GSO: the same
        datagrams on the wire). The stream ends early when the server stops or the host's
        next request arrives on ``conn`` (a StreamStop, say: it is answered next)."""
        if dest[0] not in self._bursts:
            self._bursts[dest[0]] = burst_datagrams(dest[0])
        burst, sent, t0 = self._bursts[dest[0]], 0, 0.0
        for run in self.device.stream():
            if self._stop.is_set() or conn is not None and select.select([conn], [], [], 0)[0]:
                return
            for k in range(0, len(run), GSO_SEGMENTS):
                part = run[k:k + GSO_SEGMENTS]
                if sent >= burst:
                    ahead = t0 + (sent - burst) / PACE_RATE - time.perf_counter()
                    if ahead >= PACE_S:
                        time.sleep(ahead)
                self._send(part, dest)
                sent += len(part)
                if sent >= burst and not t0:
                    t0 = time.perf_counter()

    def _send(self, part: np.ndarray, dest) -> None:
        """Send the datagrams ``part`` (one per row, one size) to ``dest``."""
        udp = self._udp
        assert udp is not None, "streaming starts after start() bound the sockets"
        try:
            if len(part) > 1 and self._gso:
                try:
                    segment = [(socket.IPPROTO_UDP, UDP_SEGMENT, struct.pack("=H", part.shape[1]))]
                    udp.sendmsg([part.data], segment, 0, dest)
                    return
                except OSError:
                    self._gso = False  # not offered here: one call per datagram
            for datagram in part:
                udp.sendto(datagram, dest)
        except OSError:
            pass  # UDP is best effort: the host sees the gap


def _keepalive(conn: socket.socket) -> None:
    """TCP keep-alive on the control connection ("Parameter discovery": a host that vanishes
    silently is detected by unanswered probes within about 10 s, and the device disarms):
    KEEPALIVE idle, interval and count (Linux socket options)."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for opt, v in zip((socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT), KEEPALIVE):
        conn.setsockopt(socket.IPPROTO_TCP, opt, v)

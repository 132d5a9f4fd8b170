"""The ``helic`` rig: a HELIC-DAQ protocol v3 device behind the :class:`hbtest.rig.Rig`
protocol (docs/helic.md; the v3 specification's sections are cited by name).

Control (:class:`ControlLink`): one TCP connection, one request one reply, sequence numbers
checked; an error frame is one line naming the device, the request and the error. On every
connection the parameters and sources are discovered by name (paged ``GetParams``, checked
against ``Status``); indices are never kept across connections.

Demand: per actuator the coefficient parameter ``[mean, a1..aK, b1..bK]`` [V] for ``mean +
sum a_k cos k theta + b_k sin k theta`` (K from the parameter's size), i.e. ``a_k = Re V_k``,
``b_k = -Im V_k`` in the hbtest.method.harmonics convention. Writes are counted as the firmware
stages them (:func:`queues_command`: ``arm``, ``diag_reset``, ``mcu_reboot``, ``table_trigger``
= 0 are local, every other write one queued command): ``cmd_epoch`` advances by the queued
commands sent, and a record counts only when every sample of it carries the epoch of the
demand last written (a stale record never enters a fit). A ``busy`` refusal is retried for
BUSY_RETRY_S. Every name the rig file gives is resolved at connection (a ConfigError naming
the file and key).

Records (:class:`StreamReceiver`): a count-limited stream of the channels' sources, ``phase``
[turn] and ``cmd_epoch``; the sample times handed to the fits are the unwrapped master phase
divided by the frequency, not sample indices. The rig hands the point loop these raw records
(it offers no ``acquire_coefficients``, so it is not
:class:`~hbtest.rig.capabilities.DeviceAveraging`): the harmonics are fitted on this host by
the same code as the twin's records, which tracks the measured mains frequency
(:meth:`hbtest.point.loop.PointLoop.track_mains`) and rejects ``[sensors].mains_multiples``
of it; a fit at the nominal ``mains_hz`` left the twin's 50.07 Hz lines in every record as a
bias that varied from record to record (4x the iterations of the in-process run). A record
with a packet-sequence gap, a ``dropped`` increase or a stale epoch is discarded and taken
again (``retakes``), counted in :attr:`HelicRig.counters`.

Safety: no coefficient set whose peak bound (|mean| + sum |V_k|, also after f32 rounding)
exceeds ``voltage_limits_v`` is written; a non-zero demand arms the device first (arm, then
``diag_reset``), refused on a device without a safety gate unless the rig file says
``ungated = true`` (:meth:`HelicRig._arm`; said on stderr at every connection), and on a gated
device that does not report itself armed; after each record the ``safety`` bits are read:
a latched trip, or while armed a clamp or a quiet, raises :class:`~hbtest.errors.RigTrip` (the point's
``stop_reason`` is ``trip``, the message names which); ``close`` zeroes every coefficient set
and disarms (the device also disarms when the connection ends).
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError, InstrumentError, RigTrip
from .. import Acquisition, RigDescription, safety
from . import codec as c
from .codec import MsgType

__all__ = ["ControlLink", "HelicRig", "Record", "StreamReceiver"]

RCVBUF = 4 << 20  # bytes of UDP receive buffer asked for (a record arrives as a burst)
UDP_GRO = 104  # Linux <linux/udp.h>: the kernel may hand several datagrams of one flow to one receive call
GRO_BUFFER = 1 << 17  # bytes per receive call when coalesced (a coalesced buffer is at most 64 KiB)
IDLE_END_S = 0.3  # after a gap, the stream counts as over once silent this long
PHASE_TOLERANCE = 1e-5  # turn: largest departure of the phase source from a constant frequency in a record
SAFETY_TRIP, SAFETY_CLAMP, SAFETY_QUIET, SAFETY_ARMED = 2, 4, 8, 1
LOCAL_PARAMETERS = ("diag_reset", "arm", "mcu_reboot")  # staged on core 0: no RtCommand, no cmd_epoch step
BUSY_RETRY_S = 1.0  # a request refused as busy (error 7: queue full, swap pending) is sent again this long
BUSY_PAUSE_S = 0.005


def queues_command(name: str, value) -> bool:
    """Whether a SetPar of ``name`` enters the device's RT command queue (advancing
    ``cmd_epoch`` by one when applied): every parameter but the ones core 0 stages locally
    (``diag_reset``, ``arm``, ``mcu_reboot``, and ``table_trigger`` = 0; HELIC-DAQ
    helic-rt/src/params/groups.rs)."""
    return name not in LOCAL_PARAMETERS and not (name == "table_trigger" and not np.any(value))


class ControlLink:
    """The control channel: :meth:`request` sends one frame and returns the reply payload;
    socket problems and error frames raise InstrumentError naming ``name``."""

    def __init__(self, name: str, host: str, port: int, timeout_s: float):
        self.name = name
        self.seq = 0
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout_s)
        except OSError as e:
            raise InstrumentError(f"{name}: cannot connect to {host}:{port}: {e.strerror or e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = c.FrameReader()

    def request(self, msg_type: int, payload: bytes = b"", what: str = "") -> bytes:
        """The reply payload; a request refused as busy (error 7) is sent again, every
        BUSY_PAUSE_S for BUSY_RETRY_S, before it counts as refused."""
        deadline = time.monotonic() + BUSY_RETRY_S
        while True:
            rtype, body = self._exchange(msg_type, payload, what)
            if rtype != MsgType.ERROR or c.decode_error(body)[0] != c.ErrorCode.BUSY or time.monotonic() >= deadline:
                break
            time.sleep(BUSY_PAUSE_S)
        label = what or MsgType(msg_type).name
        if rtype == MsgType.ERROR:
            code, _ = c.decode_error(body)
            raise InstrumentError(f"{self.name}: {label} refused: error {code} ({c.ERROR_TEXT.get(code, 'unknown')})")
        if rtype != msg_type:
            raise InstrumentError(f"{self.name}: reply of type {rtype} to {label}")
        return body

    def _exchange(self, msg_type: int, payload: bytes, what: str) -> tuple[int, bytes]:
        self.seq = (self.seq + 1) & 0xFF
        label = what or MsgType(msg_type).name
        try:
            self.sock.sendall(c.encode_frame(msg_type, self.seq, payload))
            frame = self._reply()
        except TimeoutError:
            raise InstrumentError(f"{self.name}: no reply to {label} (timeout)") from None
        except (OSError, c.CodecError) as e:
            raise InstrumentError(f"{self.name}: connection lost during {label}: {e}") from None
        rtype, seq, body = frame
        if seq != self.seq:
            raise InstrumentError(f"{self.name}: reply to {label} has sequence {seq}, expected {self.seq}")
        return rtype, body

    def _reply(self):
        while True:
            frame = self.reader.next()
            if frame is not None:
                return frame
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise OSError("the device closed the connection")
            self.reader.feed(chunk)

    def close(self) -> None:
        self.sock.close()


@dataclass
class Record:
    """One streamed record: ``values`` (records, sources) f32, ``indices`` sample indices,
    ``lost`` datagrams missing (sequence gaps), ``dropped`` increase of the device's drops."""

    values: np.ndarray
    indices: np.ndarray
    lost: int
    dropped: int
    stale: bool = False

    @property
    def complete(self) -> bool:
        return self.lost == 0 and self.dropped == 0


class StreamReceiver:
    """The host's UDP socket: bound before ``StreamStart``, primed towards the device's stream
    port before every ``StreamStart`` ("Stream channel"), collecting one count-limited stream
    at a time."""

    def __init__(self, name: str, host: str, device_port: int, timeout_s: float):
        self.name, self.timeout_s = name, timeout_s
        self.device = (host, device_port)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
        self.sock.bind(("127.0.0.1" if host in ("127.0.0.1", "localhost") else "0.0.0.0", 0))
        self.port = self.sock.getsockname()[1]
        self.dropped_seen: int | None = None
        self.gro = _enable_gro(self.sock)

    def prime(self) -> None:
        """One small datagram from this socket to the device's stream port, sent before every
        ``StreamStart`` ("Stream channel": it opens the path through a NAT or firewall)."""
        try:
            self.sock.sendto(b"hbtest primer", self.device)
        except OSError as e:
            raise InstrumentError(
                f"{self.name}: cannot send the UDP primer to {self.device[0]}:{self.device[1]}: {e.strerror or e}") from None

    def drain(self) -> None:
        self.sock.setblocking(False)
        try:
            while True:
                self.sock.recv(65536)
        except OSError:
            pass
        finally:
            self.sock.setblocking(True)

    def _receive(self) -> tuple[bytes, int]:
        """The datagrams of one receive call as ``(data, size)``: consecutive datagrams of
        ``size`` bytes (the last may be shorter) when the kernel coalesced them (UDP GRO; the
        segment size comes with them), else one datagram (``size = len(data)``)."""
        if not self.gro:
            data = self.sock.recv(65536)
            return data, len(data)
        data, ancillary, _, _ = self.sock.recvmsg(GRO_BUFFER, socket.CMSG_SPACE(4))
        size = next((struct.unpack("=i", d[:4])[0] for level, kind, d in ancillary
                     if level == socket.IPPROTO_UDP and kind == UDP_GRO), 0)
        return data, size if 0 < size < len(data) else max(len(data), 1)

    def collect(self, count: int, n_values: int) -> Record:
        """Receive the ``count`` records of the stream just started (waiting ``timeout_s``
        per datagram; after a gap, the stream counts as over once silent ``IDLE_END_S``).
        Each receive call's datagrams are decoded at once (:func:`codec.decode_packets`); a
        datagram that is not a v3 stream packet of this layout is ignored."""
        heads: list[tuple] = []  # (first index, decimation, records) per datagram, per receive call
        values: list[np.ndarray] = []
        lost, seq_next, first, timeout, n = 0, 0, None, None, 0
        start_dropped = dropped = self.dropped_seen
        while n < count:
            gap = lost or (start_dropped is not None and dropped != start_dropped)
            want = IDLE_END_S if (gap and heads) else self.timeout_s
            if want != timeout:
                timeout = want
                self.sock.settimeout(timeout)
            try:
                h, v = c.decode_packets(*self._receive(), n_values)
            except TimeoutError:
                if heads:  # the end of the stream is missing (or was lost after a gap)
                    lost += int(not gap)
                    break
                raise InstrumentError(f"{self.name}: stream stopped after {n} of {count} records (timeout)") from None
            if not h.size:
                continue  # not this stream's layout
            seq = h["seq"].astype(np.int64)
            if first is None and np.any(seq == 0):
                first = int(h["first"][np.argmax(seq == 0)])
            end = _stream_end(h, first, count)
            if end < h.size:  # the datagram holding the stream's last record: the rest is not this stream's
                h, v = h[:end + 1], v[:int(h["n"][:end + 1].sum())]
            lost += int(np.maximum(0, seq[:h.size] - np.concatenate([[seq_next], seq[:h.size - 1] + 1])).sum())
            seq_next, dropped = int(seq[h.size - 1]) + 1, int(h["dropped"][-1])
            heads.append((h["first"], h["dec"], h["n"]))
            values.append(v)
            n += v.shape[0]
            if end < h.size:
                break
        self.dropped_seen = dropped
        grown = 0 if start_dropped is None or dropped is None else (dropped - start_dropped) % (1 << 32)
        if not heads:
            return Record(np.zeros((0, n_values), "<f4"), np.zeros(0, np.int64), lost, grown)
        indices = _sample_indices(*(np.concatenate(x).astype(np.int64) for x in zip(*heads)))
        return Record(np.concatenate(values), indices, lost, grown)

    def close(self) -> None:
        self.sock.close()


def _sample_indices(fis: np.ndarray, decs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The sample index of every record of datagrams with first indices ``fis``, decimations
    ``decs`` and record counts ``sizes``, in order."""
    base = fis - decs * (np.cumsum(sizes) - sizes)  # index of record j of datagram i: base_i + dec_i j
    k = np.arange(sizes.sum())
    if np.all(base == base[0]) and np.all(decs == decs[0]):  # one progression: no gap (the usual case)
        return base[0] + decs[0] * k
    return np.repeat(base, sizes) + np.repeat(decs, sizes) * k


def _stream_end(heads: np.ndarray, first: int | None, count: int) -> int:
    """Position in ``heads`` of the first datagram holding the last record of a stream of
    ``count`` records from sample ``first`` (``heads.size`` when none does, or ``first`` is
    not known: its first datagram was lost)."""
    if first is None:
        return heads.size
    last = heads["first"].astype(np.int64) + heads["dec"].astype(np.int64) * (heads["n"].astype(np.int64) - 1)
    hit = np.flatnonzero(last >= first + count - 1)
    return int(hit[0]) if hit.size else heads.size


def _enable_gro(sock: socket.socket) -> bool:
    """Ask for coalesced receives (Linux UDP GRO): fewer receive calls per record, the same
    datagrams. False where the system does not offer it (one datagram per call then)."""
    try:
        sock.setsockopt(socket.IPPROTO_UDP, UDP_GRO, 1)
    except OSError:
        return False
    return True


class HelicRig:
    """A HELIC-DAQ v3 device as a :class:`hbtest.rig.Rig` (module docstring). Counters for
    tests and the store: :attr:`counters` (records retaken, datagrams lost, records dropped by
    the device, stale records)."""

    def __init__(self, rig_config):
        self.config = rig_config
        self.spec = rig_config.spec
        sp = self.spec
        self.name = f"helic {rig_config.identity!r} at {sp.host}:{sp.control_port}"
        self.fs = float(rig_config.sample_rate_hz)
        self.actuators = tuple(rig_config.actuators)
        self.counters = dict(retaken=0, lost_datagrams=0, dropped_records=0, stale_records=0)
        self._clock = 0.0
        self._freq: float | None = None
        self._written: dict[str, np.ndarray] = {}
        self._epoch: int | None = None  # the epoch the demand last written takes effect with
        self._queued = 0  # commands written since the last record
        self._armed = False
        self._closed = False
        self._held: dict[str, object] = {}  # scalar parameters and the stream setup this connection last wrote
        self._identity: tuple | None = None  # (firmware, experiment) once read
        self.link = ControlLink(self.name, sp.host, sp.control_port, sp.timeout_s)
        try:
            self._discover()
            self.stream = StreamReceiver(self.name, sp.host, sp.stream_port, sp.timeout_s)
            self.stream.dropped_seen = int(self._get("records_dropped")) if "records_dropped" in self.params else 0
            if "ticks" in self.params:  # the rig clock is the device's sample clock
                self._clock = int(self._get("ticks")) / self.fs
            self._configure_limits()
            self._say_limits()
        except BaseException:
            self.link.close()
            raise

    # -- discovery -------------------------------------------------------------------------
    def _discover(self) -> None:
        st = c.Status.decode(self.link.request(MsgType.STATUS))
        if st.version != c.VERSION:
            raise InstrumentError(f"{self.name}: speaks protocol v{st.version}, hbtest speaks v{c.VERSION}")
        defs, start = [], 0
        while start < st.n_params:
            s0, nxt, page = c.decode_param_page(self.link.request(MsgType.GET_PARAMS, struct.pack("<H", start)))
            if s0 != start or nxt <= start or len(page) != nxt - start:
                raise InstrumentError(f"{self.name}: inconsistent GetParams page from {start}"
                                      f" (echo {s0}, next {nxt}, {len(page)} definitions)")
            defs += page
            start = nxt
        self.params = {d.name: (i, d) for i, d in enumerate(defs)}
        srcs = c.decode_sources(self.link.request(MsgType.GET_SOURCES))
        if len(srcs) != st.n_sources:
            raise InstrumentError(f"{self.name}: {len(srcs)} sources listed, Status says {st.n_sources}")
        self.sources = {name: (i, unit) for i, (name, unit) in enumerate(srcs)}
        self.status = st
        self._resolve()

    def _need(self, table: dict, name: str, what: str, key: str = ""):
        """``table[name]``; a name the device lacks is one line naming the rig file's ``key``
        (a ConfigError) or, for a name the protocol fixes, the device."""
        if name not in table:
            problem = f"{self.name} has no {what} {name!r} (it has {', '.join(table)})"
            if key:
                raise ConfigError(self.config.source.path, key, problem)
            raise InstrumentError(problem)
        return table[name]

    def _rig_file_names(self):
        """(rig-file key, parameter or source name, "parameter" | "stream source") of every name
        the rig file gives."""
        sp = self.spec
        yield "helic.frequency_parameter", sp.frequency_parameter, "parameter"
        if sp.ramp_parameter:
            yield "helic.ramp_parameter", sp.ramp_parameter, "parameter"
        if sp.input_limit_parameter:
            yield "helic.input_limit_parameter", sp.input_limit_parameter, "parameter"
        for act, p in sp.actuators:
            yield f"helic.actuators.{act}", p, "parameter"
        for ch, src, _ in sp.channels:
            yield f"helic.channels.{ch}.source", src, "stream source"
        yield "helic.phase_source", sp.phase_source, "stream source"
        yield "helic.epoch_source", sp.epoch_source, "stream source"

    def _resolve(self) -> None:
        sp = self.spec
        for key, name, what in self._rig_file_names():
            self._need(self.params if what == "parameter" else self.sources, name, what, key)
        for name in ("arm", "safety"):
            self._need(self.params, name, "parameter")
        sizes = {self.params[p][1].count for _, p in sp.actuators}
        if len(sizes) != 1 or (sizes.pop() - 1) % 2:
            raise InstrumentError(f"{self.name}: coefficient parameters must hold 1 + 2K values each")
        self.K = (self.params[sp.actuators[0][1]][1].count - 1) // 2
        names = [src for _, src, _ in sp.channels] + [sp.phase_source, sp.epoch_source]
        self.source_ids = bytes(self.sources[n][0] for n in names)
        self.epoch_id = bytes([self.sources[sp.epoch_source][0]])
        rate, st_rate = float(np.float32(self.fs)), self.status.sample_rate
        if abs(st_rate - rate) > 1e-6 * rate:
            raise InstrumentError(f"{self.name}: samples at {st_rate:g} Hz, the rig file says {self.fs:g} Hz")

    def _say_limits(self) -> None:
        """One line on stderr at every connection where the device does less than the rig
        file's reader may assume: no safety gate (``ungated = true``), or demand steps (no
        ``ramp_parameter``: ``set_demand``'s ``ramp_periods`` is not applied)."""
        if self.spec.ungated:
            print(f"{self.name}: ungated = true ({self.config.source.path}): the outputs are driven without the"
                  f" device's safety gate; the limits ({', '.join(f'{v:g}' for v in self.spec.voltage_limits_v)} V)"
                  " are enforced by hbtest alone", file=sys.stderr)
        if not self.spec.ramp_parameter:
            print(f"{self.name}: no ramp_parameter in {self.config.source.path}: every demand change is applied"
                  " as a step (ramp_periods is not applied)", file=sys.stderr)

    def _configure_limits(self) -> None:
        sp = self.spec
        if not sp.channel_limits:
            return
        _, d = self._need(self.params, sp.input_limit_parameter, "parameter", "helic.input_limit_parameter")
        levels = np.zeros(d.count)
        windows = sp.windows(self.config.sensors)
        for ch, src, scale in sp.channels:
            if ch in windows:
                levels[self.sources[src][0]] = windows[ch] / scale
        self._set(sp.input_limit_parameter, levels)

    # -- parameter access ------------------------------------------------------------------
    def _get(self, name: str):
        i, d = self.params[name]
        return c.unpack_value(d, self.link.request(MsgType.GET_PAR, struct.pack("<H", i), f"GetPar {name}"))

    def _set(self, name: str, value) -> None:
        i, d = self.params[name]
        self.link.request(MsgType.SET_PAR, struct.pack("<H", i) + c.pack_value(d, value), f"SetPar {name}")
        self._queued += int(queues_command(name, value))

    def _set_changed(self, name: str, value: float) -> None:
        """Write a scalar parameter unless this connection last wrote it with ``value`` (one
        host on a direct endpoint: the device holds what it was told)."""
        if self._held.get(name) != value:
            self._set(name, value)
            self._held[name] = value

    def set_block(self, name: str, values, offset: int = 0, chunk: int = 200) -> None:
        """Stage f32 ``values`` of block parameter ``name`` from element ``offset`` (SetBlock
        in chunks), then :meth:`commit` them."""
        i, _ = self.params[name]
        x = np.asarray(values, "<f4")
        for k in range(0, x.size, chunk):
            body = struct.pack("<HI", i, offset + k) + x[k:k + chunk].tobytes()
            self.link.request(MsgType.SET_BLOCK, body, f"SetBlock {name}")

    def commit(self, name: str, n: int) -> None:
        i, _ = self.params[name]
        self.link.request(MsgType.COMMIT, struct.pack("<HI", i, n), f"Commit {name}")
        self._queued += 1

    # -- protocol ----------------------------------------------------------------------------
    def describe(self) -> RigDescription:
        if self._identity is None:  # read once per connection (read-only parameters)
            self._identity = tuple(self._get(n) if n in self.params else "" for n in ("firmware", "experiment"))
        fw, exp = self._identity
        details = dict(host=self.spec.host, control_port=self.spec.control_port, firmware=fw, experiment=exp,
                       harmonics=self.K, parameters=list(self.params), sources=list(self.sources),
                       idn=f"HELIC-DAQ v{self.status.version} {exp} ({fw})",
                       resource=f"{self.spec.host}:{self.spec.control_port}",
                       counters=dict(self.counters))
        return RigDescription(self.config.identity, "helic", self.actuators, self.fs, self.config.voltage_limit_v,
                              self.config.sensors, details, self.spec.input_range_v)

    @property
    def elapsed_s(self) -> float:
        return self._clock

    def _coefficient_sets(self, V, orders) -> list[np.ndarray]:
        if orders.max() > self.K:
            raise InstrumentError(f"{self.name}: harmonic {orders.max()} beyond the device's K = {self.K}")
        sets = []
        for row in V:
            x = np.zeros(1 + 2 * self.K)
            for k, v in zip(orders, row):
                if k == 0:
                    x[0] = v.real
                else:
                    x[k], x[self.K + k] = v.real, -v.imag
            sets.append(x.astype(np.float32))
        return sets

    def _check(self, sets) -> None:
        """Never write a set whose peak bound (after f32 rounding) exceeds the limit."""
        K = self.K
        V = np.array([[x[0]] + list(x[1:K + 1] - 1j * x[K + 1:].astype(float)) for x in sets])
        safety.check_demand(V, None, safety.Limits(self.spec.voltage_limits_v), self.name, self.actuators)

    def set_demand(self, frequency_hz: float, voltage, orders, ramp_periods: float = 2.0) -> None:
        self._open()
        f, V, orders = safety.normalise_demand(frequency_hz, voltage, orders, len(self.actuators), ramp_periods)
        if orders.max() * f >= self.fs / 2:
            raise ValueError(f"harmonic {orders.max()} of {f:g} Hz lies above the Nyquist frequency {self.fs / 2:g} Hz")
        sets = self._coefficient_sets(V, orders)
        self._check(sets)
        nonzero = any(np.any(x != 0) for x in sets)
        if nonzero and not self._armed:
            self._arm()
        sp, queued = self.spec, self._queued
        if sp.ramp_parameter:
            self._set_changed(sp.ramp_parameter, float(np.float32(ramp_periods)))
        self._set_changed(sp.frequency_parameter, float(np.float32(f)))
        # a set the device holds already (written on this connection) is not written again, unless
        # nothing else was: a demand write always reaches the device (it ramps, as the twin's does)
        writes = [(p, x) for (_, p), x in zip(sp.actuators, sets)
                  if p not in self._written or not np.array_equal(self._written[p], x)]
        for p, x in writes or ([] if self._queued > queued else [(sp.actuators[0][1], sets[0])]):
            self._set(p, x)
            self._written[p] = x
        # the device ramps every demand write over ramp_periods (docs/helic.md); its clock moves on
        self._freq = float(np.float32(f))
        ramp_samples = round(float(np.float32(ramp_periods)) / self._freq * self.fs) if sp.ramp_parameter else 0
        self._clock += ramp_samples / self.fs

    def _arm(self) -> None:
        """Arm before the first non-zero demand, on a gated device only unless the rig file
        says ``ungated = true``. A gated device (its experiment opts into the safety gate)
        quiets its outputs on every tick while disarmed, so disarmed it reads ``safety`` bit 3
        (quieted) set; an ungated one never does (its ``arm`` is inert; the firmware still
        shows bit 0 after ``arm = 1``, so bit 0 alone does not tell). Then arm, and only then
        clear the clamp/quiet bits of the disarmed ticks (``diag_reset``; the other order
        leaves ticks of a disarmed gate between them, read as a quiet after the record)."""
        before = int(self._get("safety"))
        gated = bool(before & (SAFETY_QUIET | SAFETY_TRIP))
        if not gated and not self.spec.ungated:
            raise InstrumentError(
                f"{self.name}: refused to drive the outputs: the device has no safety gate (disarmed, its safety"
                f" reads {before}, never quieted); set [helic] ungated = true in {self.config.source.path} to drive"
                " it with the limits enforced by hbtest alone")
        self._set("arm", 1)
        if "diag_reset" in self.params:
            self._set("diag_reset", 1)  # also restarts the device's drop count
            if "records_dropped" in self.params:
                self.stream.dropped_seen = int(self._get("records_dropped"))
        bits = int(self._get("safety"))
        if gated and not bits & SAFETY_ARMED:
            self._set("arm", 0)
            raise InstrumentError(f"{self.name}: refused to drive the outputs:"
                                  f" the device does not report itself armed (safety = {bits})")
        self._armed = True

    def _stream(self, count: int, ids: bytes) -> Record:
        setup = struct.pack("<HIB", 1, count, len(ids)) + ids
        if self._held.get("stream setup") != setup:  # the device keeps its stream configuration
            self.link.request(MsgType.STREAM_SETUP, setup)
            self._held["stream setup"] = setup
        self.stream.drain()
        self.stream.prime()
        self.link.request(MsgType.STREAM_START, struct.pack("<H", self.stream.port))
        rec = self.stream.collect(count, len(ids))
        expect = None if self._epoch is None else (self._epoch + self._queued) % c.EPOCH_MODULUS
        self._queued = 0
        epochs = rec.values[:, -1].astype(np.int64)
        self._epoch = int(epochs[0])
        if rec.indices.size:
            self._clock = (int(rec.indices[-1]) + 1) / self.fs
        rec.stale = expect is not None and bool(np.any(epochs != expect)) or bool(np.any(epochs != epochs[0]))
        return rec

    def _samples(self, n_periods: int) -> tuple[Record, int]:
        """A complete record of ``n_periods`` whole periods, retaken while incomplete or stale."""
        if self._freq is None:
            raise RuntimeError(f"{self.name}: set_demand() first (no frequency yet)")
        N = int(round(n_periods * self.fs / self._freq))
        for attempt in range(self.spec.retakes + 1):
            rec = self._stream(N, self.source_ids)
            self.counters["lost_datagrams"] += rec.lost
            self.counters["dropped_records"] += rec.dropped
            self.counters["stale_records"] += int(rec.stale)
            self._watch_safety()
            if rec.complete and not rec.stale and len(rec.values) == N:
                return rec, N
            if attempt < self.spec.retakes:
                self.counters["retaken"] += 1
        raise InstrumentError(f"{self.name}: {self.spec.retakes + 1} records in a row were incomplete or stale "
                              f"({self.counters['lost_datagrams']} datagrams lost,"
                              f" {self.counters['dropped_records']} records dropped)")

    def _watch_safety(self) -> None:
        """A latched trip ends the point; a clamp or a quiet too while armed (a gated device
        quiets every disarmed tick: before the first arm that is its normal state)."""
        bits = int(self._get("safety"))
        if bits & SAFETY_TRIP or self._armed and bits & (SAFETY_CLAMP | SAFETY_QUIET):
            what = ("tripped" if bits & SAFETY_TRIP else
                    "clamped the output" if bits & SAFETY_CLAMP else "quieted the output")
            self._armed = False
            raise RigTrip(f"{self.name}: the device's safety gate {what} (safety = {bits}); outputs held at zero")

    def _record(self, n_periods: int):
        rec, _ = self._samples(int(n_periods))
        t = self._times(rec)
        data = {ch: rec.values[:, i].astype(float) * scale for i, (ch, _, scale) in enumerate(self.spec.channels)}
        return t, data, safety.overrange_channels(data, self.spec.input_range_v)

    def _times(self, rec: Record) -> np.ndarray:
        """Sample times [s] in the demand time base from the master phase: the record's epoch
        is constant (no command took effect inside it), so its phase is ``theta0 + k f / fs``
        at sample ``k``; ``theta0`` is the least-squares fit of the unwrapped ``phase`` source
        (each value within 2^-25 turn), checked sample by sample."""
        phase = rec.values[:, -2].astype(float)
        turns = phase + np.concatenate([[0.0], np.cumsum(np.diff(phase) < -0.5)])
        k = (rec.indices - rec.indices[0]).astype(float)
        step = self._freq / self.fs
        theta0 = float(np.mean(turns - k * step))
        worst = float(np.max(np.abs(turns - k * step - theta0)))
        if worst > PHASE_TOLERANCE:
            raise InstrumentError(
                f"{self.name}: the phase source departs {worst:.3g} turn from {self._freq:g} Hz in a record")
        return (theta0 + k * step) / self._freq

    def _frequency(self) -> float:
        """The demand frequency in force [Hz] (a record needs one)."""
        if self._freq is None:
            raise InstrumentError(f"{self.name}: no demand frequency set before a record")
        return self._freq

    def acquire(self, n_periods: int) -> Acquisition:
        self._open()
        t, data, over = self._record(n_periods)
        return Acquisition(t, data, self._frequency(), self.fs, int(n_periods), self._clock, over)

    def wait(self, n_periods: float) -> None:
        self._open()
        if self._freq is None:
            raise RuntimeError(f"{self.name}: set_demand() first (no frequency yet)")
        N = int(round(float(n_periods) * self.fs / self._freq))
        if N > 0:
            self._stream(N, self.epoch_id)
            self._watch_safety()

    def safe_state(self) -> None:
        """Zero every coefficient set (ramped by the device where it ramps) and let it apply."""
        self._open()
        if self._freq is None or not any(np.any(x != 0) for x in self._written.values()):
            return
        for _, p in self.spec.actuators:
            self._set(p, np.zeros(1 + 2 * self.K))
            self._written[p] = np.zeros(1 + 2 * self.K, np.float32)
        self._stream(int(round(safety.RAMP_DOWN_PERIODS * self.fs / self._freq)) + 1, self.epoch_id)

    def close(self) -> None:
        """Zero the coefficients and disarm, then close both sockets (the device disarms on
        the closed connection too)."""
        if self._closed:
            return
        self._closed = True
        try:
            for _, p in self.spec.actuators:
                self._set(p, np.zeros(1 + 2 * self.K))
            self._set("arm", 0)
        finally:
            self.link.close()
            self.stream.close()

    def _open(self) -> None:
        if self._closed:
            raise InstrumentError(f"{self.name} is closed")

    def __enter__(self) -> HelicRig:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

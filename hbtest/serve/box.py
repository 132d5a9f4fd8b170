"""The acquisition box, served over TCP and backed by the virtual twin (``hbtest serve``).

:class:`BoxDevice` is the box's state machine (no sockets): it executes one command line at a
time against a :class:`~hbtest.rig.virtual.VirtualRig` and returns the reply bytes.
:class:`BoxServer` listens on a TCP port (loopback unless told otherwise), lets one host
control the box at a time (a second connection waits up to ``busy_wait_s`` for the first to
leave, then gets ``!310,"Box busy..."`` and is closed), runs the watchdog while the host is
silent, and on :meth:`BoxServer.stop` ramps the outputs to zero and closes every socket.

Time: simulated time advances only as commands demand (a ramp of ``SOUR:APPL?``, a record of
``MEAS:...?``, ``WAIT?``, a ramp-down), so a sweep through the box runs as fast as the twin.
Units: volts (demand, raw channels), seconds, hertz. Commands: ``instruments/README.md``.
The library never prints: events go to the ``on_event`` callback as :class:`BoxEvent`.
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from .. import __version__
from ..method import harmonics
from ..rig import safety
from ..rig.box.protocol import (
    MAX_LINE_BYTES,
    SCPI_INFINITY,
    Mnemonic,
    ProtocolError,
    Record,
    Status,
    block_header,
    encode_array,
    encode_block,
    error_reply,
    error_text,
    fmt,
    split_command,
    to_bool,
    to_float,
    to_int,
)

__all__ = ["BoxEvent", "BoxDevice", "BoxServer", "DEFAULT_WATCHDOG_S", "DEFAULT_IDLE_S", "BUSY_WAIT_S", "POLL_S",
           "MAX_PERIOD_SAMPLES", "MAX_COMMAND_SAMPLES"]

DEFAULT_WATCHDOG_S = 10.0  # host silence [s] after which an armed box ramps down (OUTP:PROT:WDOG)
MAX_WATCHDOG_S = 3600.0
BUSY_WAIT_S = 2.0  # a second connection waits this long for the controlling host to leave
POLL_S = 0.05  # socket poll interval [s]: watchdog resolution and shutdown latency
ERROR_QUEUE_LENGTH = 16
DEFAULT_RAMP_PERIODS = 2.0
MAX_RAMP_PERIODS = 1000.0
MAX_RECORD_PERIODS = 100000
MAX_ORDER = 1000
MAX_REPLY_DELAY_S = 60.0
# Work bounds (instruments/README.md, "Bounds"): every command's simulated work is bounded so
# that no command can exhaust memory or hold the box for long.
MAX_PERIOD_SAMPLES = 1 << 16  # one period of the staged frequency: SOUR:FREQ >= rate / this
MAX_COMMAND_SAMPLES = 1 << 21  # samples of one ramp, record or wait (419 s at 5 kHz)
STOP_GRACE_S = 0.8  # stop(): wait at most this long for a command in progress before leaving it
DEFAULT_IDLE_S = 300.0  # a disarmed host silent this long is disconnected (idle policy)
SEND_STALL_S = 10.0  # a reply the host does not read for this long (watchdog off): link lost


@dataclass(frozen=True)
class BoxEvent:
    """Something the box did: ``kind`` in listening, connected, disconnected, refused, trip,
    watchdog, cleared, stopped; ``message`` one line; ``elapsed_s`` the box clock."""

    kind: str
    message: str
    elapsed_s: float = 0.0


class BoxDevice:
    """The box's state machine over the twin of ``rig_config`` (kind "virtual").

    :meth:`execute` takes one command line (bytes, without the terminator) and returns the
    reply bytes (terminator included) or None. :meth:`idle` runs the watchdog;
    :meth:`disconnected` applies the connection-loss rule; :meth:`shutdown` ramps down."""

    def __init__(self, rig_config, seed: int | None = None, *, watchdog_s: float = DEFAULT_WATCHDOG_S,
                 on_event=None, clock=time.monotonic):
        from ..rig.virtual import VirtualRig

        self.twin = VirtualRig(rig_config, seed=seed)
        desc = self.twin.describe()
        self.channels = tuple(c.name for c in rig_config.sensors.channels)
        self.actuators = tuple(desc.actuators)
        self.fs = float(desc.sample_rate_hz)
        self.input_range = desc.input_range_v
        self.max_voltage = float(desc.voltage_limit_v)
        self.default_watchdog_s = float(watchdog_s)
        serial = f"{rig_config.source.sha256[:8]}-s{self.twin.seed}"
        self.idn = f"HBTEST,BOX-TWIN,{serial},{__version__}"
        self.on_event = on_event or (lambda e: None)
        self.trip = safety.Trip()
        self.watchdog = safety.Watchdog(watchdog_s, clock)
        self.errors: deque = deque()
        self.stopping = threading.Event()  # set by the server's stop(): waits end at once
        self.epoch = 0
        self.armed = False
        self.demand = None  # (frequency_hz, orders, V) in force
        self._reset_settings()
        self._commands = [(Mnemonic(p), getattr(self, "_" + h)) for p, h in _COMMANDS]

    # -- state helpers ------------------------------------------------------------------------
    def _reset_staging(self):
        self.staged_f = None
        self.staged_orders = None
        self.staged_V = None
        self.staged_ok = True

    def _reset_settings(self):
        self._reset_staging()
        self.limits_v = [self.max_voltage] * len(self.actuators)
        self.windows: dict[str, tuple[float, float]] = {}
        self.nuisance: tuple[float, ...] = ()
        self.reply_delay = 0.0
        self.watchdog.timeout_s = self.default_watchdog_s

    def _emit(self, kind, message):
        self.on_event(BoxEvent(kind, message, self.twin.elapsed_s))

    def push_error(self, code: int, detail: str = "") -> None:
        if len(self.errors) >= ERROR_QUEUE_LENGTH:
            self.errors[-1] = (-350, "")
            return
        self.errors.append((int(code), detail))

    def _output_nonzero(self) -> bool:
        return self.demand is not None and bool(np.any(self.demand[2] != 0))

    def _ramp_to_zero(self):
        """Ramp the demand in force to zero over RAMP_DOWN_PERIODS (a change of demand: the
        epoch advances)."""
        if not self._output_nonzero():
            return
        f, orders, V = self.demand
        self.twin.set_demand(f, np.zeros_like(V), orders, safety.RAMP_DOWN_PERIODS)
        self.demand = (f, orders, np.zeros_like(V))
        self.epoch += 1

    def _do_trip(self, code: int, reason: str) -> None:
        if self.trip.trip(code, reason):
            self.push_error(code, reason)
            self._emit("watchdog" if code in (safety.TRIP_WATCHDOG, safety.TRIP_LINK) else "trip", f"trip {code}: {reason}")
        self._ramp_to_zero()
        self.armed = False

    def idle(self) -> None:
        """Called while the host is silent: an armed box whose watchdog expired ramps down."""
        if self.armed and self.watchdog.expired():
            self._do_trip(safety.TRIP_WATCHDOG, f"no command for {self.watchdog.silent_s():.2f} s (watchdog {self.watchdog.timeout_s:g} s)")

    def disconnected(self) -> None:
        """The host's connection ended: an armed box ramps down and latches the trip; what the
        host staged is forgotten (the next host starts from a clean staging state)."""
        if self.armed:
            self._do_trip(safety.TRIP_LINK, "connection lost while armed")
        self.reply_delay = 0.0
        self._reset_staging()

    def connected(self) -> None:
        """A new host took control: a clean staging state, the watchdog fed."""
        self._reset_staging()
        self.reply_delay = 0.0
        self.watchdog.feed()

    def shutdown(self) -> None:
        """Server stop: ramp to zero and disarm (no trip)."""
        self._ramp_to_zero()
        self.armed = False

    # -- execution ----------------------------------------------------------------------------
    def execute(self, line: bytes) -> bytes | None:
        """The reply to ``line`` (terminator included) or None."""
        parts = self.execute_parts(line)
        return None if parts is None else b"".join(parts)

    def execute_parts(self, line: bytes) -> list | None:
        """:meth:`execute` with the reply as a list of byte buffers to send in order (a
        record's samples are not copied into one reply: a 28 MB record costs 28 MB, not five)."""
        self.watchdog.feed()
        text = bytes(line).rstrip(b"\r").decode("ascii", errors="replace")
        if not text.strip():
            return None
        head, params = split_command(text)
        query = head.endswith("?")
        try:
            handler = self._dispatch(text, head)
            out = handler(params)
        except ProtocolError as e:
            return self._refuse(e.code, e.detail, query)
        except ValueError as e:  # the twin refused a value the checks above let through
            return self._refuse(-222, str(e), query)
        except Exception as e:  # noqa: BLE001 - a fault of the box itself: reply, ramp down, serve on
            return self._internal_fault(f"{head[:40]}: {type(e).__name__}: {e}", query)
        finally:
            self.watchdog.feed()
        if not query:
            return None
        if isinstance(out, list):
            return out + [b"\n"]
        if isinstance(out, bytes):
            return [out, b"\n"]
        return [(str(out) + "\n").encode()]

    def _dispatch(self, text: str, head: str):
        """The handler of a line. A line refused before dispatch (-102 bad bytes, -113 unknown
        header) might have been a staging line: it blocks the next apply like a failed one."""
        try:
            if "\ufffd" in text or any((ord(c) < 32 and c != "\t") or ord(c) == 127 for c in text):
                raise ProtocolError(-102, "non-ASCII or control bytes in the command")
            for mn, handler in self._commands:
                if mn.matches(head):
                    return handler
            raise ProtocolError(-113, head[:40])
        except ProtocolError:
            self.staged_ok = False
            raise

    def _refuse(self, code: int, detail: str, query: bool) -> list | None:
        self.push_error(code, detail)
        return [(error_reply(code, detail) + "\n").encode()] if query else None

    def _internal_fault(self, detail: str, query: bool) -> list | None:
        """An unexpected exception while executing a command (-300): the outputs ramp to
        zero and disarm (if the twin can still do it), the host gets the error and is served on."""
        self._emit("error", f"device error: {detail}")
        self.staged_ok = False
        try:
            self._ramp_to_zero()
        except Exception as e:  # noqa: BLE001 - the twin is broken: nothing more to do here
            detail += f"; ramp-down failed too ({type(e).__name__})"
        self.armed = False
        return self._refuse(-300, detail, query)

    # -- helpers for handlers ---------------------------------------------------------------------
    @staticmethod
    def _nparams(params, lo, hi=None):
        hi = lo if hi is None else hi
        if len(params) < lo:
            raise ProtocolError(-109, f"needs {lo} parameter(s), got {len(params)}")
        if len(params) > hi:
            raise ProtocolError(-108, f"takes at most {hi} parameter(s), got {len(params)}")

    def _actuator(self, text: str) -> int:
        if text in self.actuators:
            return self.actuators.index(text)
        try:
            i = int(text)
        except ValueError:
            raise ProtocolError(-224, f"unknown actuator {text!r}; one of {', '.join(self.actuators)} or 1..{len(self.actuators)}") from None
        if not 1 <= i <= len(self.actuators):
            raise ProtocolError(-222, f"actuator index {i} outside 1..{len(self.actuators)}")
        return i - 1

    def _channel(self, text: str) -> str:
        if text not in self.channels:
            raise ProtocolError(-224, f"unknown channel {text!r}; one of {', '.join(self.channels)}")
        return text

    def _orders(self, params, what="harmonic order") -> np.ndarray:
        if not params:
            raise ProtocolError(-109, "needs at least one harmonic order")
        ks = [to_int(p, what) for p in params]
        if any(k < 0 or k > MAX_ORDER for k in ks) or len(set(ks)) != len(ks):
            raise ProtocolError(-222, f"orders must be distinct integers in 0..{MAX_ORDER}, got {ks}")
        return np.array(ks, dtype=int)

    def _periods(self, text: str) -> int:
        n = to_int(text, "periods")
        if not 1 <= n <= MAX_RECORD_PERIODS:
            raise ProtocolError(-222, f"periods must be in 1..{MAX_RECORD_PERIODS}, got {n}")
        return n

    def _bound_samples(self, periods: float, f: float, what: str) -> int:
        """Samples of ``periods`` periods at ``f`` Hz; -222 beyond MAX_COMMAND_SAMPLES."""
        n = periods * self.fs / f
        if not n <= MAX_COMMAND_SAMPLES:
            raise ProtocolError(-222, f"{what} of {periods:g} periods at {f:g} Hz is {n:.4g} samples; "
                                      f"at most {MAX_COMMAND_SAMPLES} per command")
        return int(round(n))

    def _require_demand(self):
        if self.demand is None:
            raise ProtocolError(203, "apply a demand (SOUR:FREQ, SOUR:HARM, SOUR:APPL?) first")

    def _status(self) -> str:
        return Status(self.epoch, self.trip.code, self.twin.elapsed_s).format()

    def _delay(self):
        if self.reply_delay > 0:
            d, self.reply_delay = self.reply_delay, 0.0
            self.stopping.wait(d)  # a server stop ends the delay at once

    def _record(self, n: int):
        """Acquire ``n`` periods, check the channel windows (trip after the record), return
        (record header, data dict, t)."""
        self._require_demand()
        self._bound_samples(n, self.demand[0], "a record")
        epoch = self.epoch
        acq = self.twin.acquire(n)
        data = {c: acq.data[c] for c in self.channels}
        viol = safety.channel_violations(data, self.windows)
        if viol:
            name, worst, lo, hi = viol[0]
            self._do_trip(safety.TRIP_CHANNEL, f"channel {name} reached {worst:.4g} V (window {lo:.4g}..{hi:.4g} V)")
        over = safety.overrange_channels(data, self.input_range)
        mask = sum(1 << i for i, c in enumerate(self.channels) if c in over)
        rec = Record(epoch, self.trip.code, n, self.twin.elapsed_s, acq.frequency_hz, mask, float(acq.t[0]))
        return rec, data, acq.t

    # -- handlers (name = "_" + second column of _COMMANDS) -----------------------------------------
    def _idn(self, p):
        self._nparams(p, 0)
        return self.idn

    def _rst(self, p):
        self._nparams(p, 0)
        self._ramp_to_zero()
        self.armed = False
        self._reset_settings()

    def _cls(self, p):
        self._nparams(p, 0)
        self.errors.clear()

    def _opc(self, p):
        self._nparams(p, 0)
        return "1"

    def _err(self, p):
        self._nparams(p, 0)
        if not self.errors:
            return error_text(0)
        return error_text(*self.errors.popleft())

    def _err_count(self, p):
        self._nparams(p, 0)
        return str(len(self.errors))

    def _time(self, p):
        self._nparams(p, 0)
        return fmt(self.twin.elapsed_s)

    def _channels(self, p):
        self._nparams(p, 0)
        return ",".join(self.channels)

    def _actuators(self, p):
        self._nparams(p, 0)
        return ",".join(self.actuators)

    def _rate(self, p):
        self._nparams(p, 0)
        return fmt(self.fs)

    def _range(self, p):
        self._nparams(p, 0)
        return fmt(self.input_range or SCPI_INFINITY)

    def _staging(self, fn, p):
        try:
            fn(p)
        except ProtocolError:
            self.staged_ok = False
            raise

    def _freq(self, p):
        def do(p):
            self._nparams(p, 1)
            f = to_float(p[0], "frequency")
            lo, hi = self.fs / MAX_PERIOD_SAMPLES, self.fs / 2
            if not lo <= f < hi:
                raise ProtocolError(-222, f"frequency must be in [{lo:g}, {hi:g}) Hz (rate / {MAX_PERIOD_SAMPLES} up to "
                                          f"the Nyquist frequency), got {p[0]}")
            self.staged_f = f
        self._staging(do, p)

    def _harm(self, p):
        def do(p):
            self.staged_orders = None
            self.staged_V = None
            orders = self._orders(p)
            self.staged_orders = orders
            self.staged_V = np.zeros((len(self.actuators), orders.size), complex)
        self._staging(do, p)

    def _coef(self, p):
        def do(p):
            if self.staged_orders is None:
                raise ProtocolError(-221, "stage the orders (SOUR:HARM) before the coefficients")
            n = self.staged_orders.size
            self._nparams(p, 1 + 2 * n)
            j = self._actuator(p[0])
            x = np.array([to_float(v, "coefficient") for v in p[1:]])
            V = x[0::2] + 1j * x[1::2]
            if np.any((self.staged_orders == 0) & (V.imag != 0)):
                raise ProtocolError(-224, "the DC coefficient (order 0) must be real")
            self.staged_V[j] = V
        self._staging(do, p)

    def _apply(self, p):
        self._nparams(p, 0, 2)
        ramp = to_float(p[0], "ramp periods") if p else DEFAULT_RAMP_PERIODS
        if not 0 <= ramp <= MAX_RAMP_PERIODS:
            raise ProtocolError(-222, f"ramp periods must be in 0..{MAX_RAMP_PERIODS:g}, got {ramp:g}")
        epoch = to_int(p[1], "epoch") if len(p) > 1 else self.epoch + 1
        if epoch <= self.epoch:
            raise ProtocolError(-222, f"epoch must exceed the current epoch {self.epoch}, got {epoch}")
        if not self.staged_ok:
            self.staged_ok = True
            raise ProtocolError(-221, "a staging command failed since the last SOUR:APPL? (see SYST:ERR?); stage again")
        if self.staged_f is None and self.staged_orders is None:
            self.epoch = epoch  # nothing staged: a sync point only
            return self._status()
        if self.staged_f is None or self.staged_orders is None:
            raise ProtocolError(-221, "stage both SOUR:FREQ and SOUR:HARM")
        f, orders, V = self.staged_f, self.staged_orders, self.staged_V
        self._bound_samples(ramp, f, "a ramp")
        if orders.max() * f >= self.fs / 2:
            raise ProtocolError(-222, f"harmonic {orders.max()} of {f:g} Hz lies above the Nyquist frequency {self.fs / 2:g} Hz")
        nonzero = bool(np.any(V != 0))
        if nonzero and self.trip.active:
            raise ProtocolError(202, f"{self.trip.reason}; clear with OUTP:PROT:CLE")
        if nonzero and not self.armed:
            raise ProtocolError(201, "arm with OUTP ON before a non-zero demand")
        try:
            safety.check_demand(V, orders, safety.Limits(tuple(self.limits_v)), "box", self.actuators)
        except Exception as e:
            self._do_trip(safety.TRIP_VOLTAGE, f"refused demand: {e}")
            raise ProtocolError(-222, str(e)) from None
        self.twin.set_demand(f, V, orders, ramp)
        self.demand = (f, orders.copy(), V.copy())
        self.epoch = epoch
        return self._status()

    def _demand(self, p):
        self._nparams(p, 0)
        if self.demand is None:
            return f"{self.epoch},0,0"
        f, orders, V = self.demand
        vals = [str(self.epoch), fmt(f), str(orders.size)] + [str(int(k)) for k in orders]
        for row in V:
            for c in row:
                vals += [fmt(c.real), fmt(c.imag)]
        return ",".join(vals)

    def _epoch(self, p):
        self._nparams(p, 0)
        return str(self.epoch)

    def _vlim(self, p):
        if len(p) not in (1, len(self.actuators)):
            raise ProtocolError(-109 if not p else -108, f"give one limit or one per actuator ({len(self.actuators)})")
        v = [to_float(x, "voltage limit") for x in p]
        if any(not 0 < x <= self.max_voltage for x in v):
            raise ProtocolError(-222, f"voltage limits must be in (0, {self.max_voltage:g}] V, got {', '.join(map(fmt, v))}")
        self.limits_v = v * len(self.actuators) if len(v) == 1 else v
        if self.demand is not None and np.any(safety.peak_bound(self.demand[2]) > np.array(self.limits_v) * (1 + safety.LIMIT_TOLERANCE)):
            self._do_trip(safety.TRIP_VOLTAGE, "demand in force exceeds the new voltage limit")

    def _vlim_q(self, p):
        self._nparams(p, 0)
        return ",".join(fmt(v) for v in self.limits_v)

    def _vlim_max(self, p):
        self._nparams(p, 0)
        return fmt(self.max_voltage)

    def _slim(self, p):
        self._nparams(p, 3)
        c = self._channel(p[0])
        lo, hi = to_float(p[1], "low limit"), to_float(p[2], "high limit")
        if not lo < hi:
            raise ProtocolError(-222, f"low limit {lo:g} must be below high limit {hi:g}")
        if lo <= -SCPI_INFINITY and hi >= SCPI_INFINITY:
            self.windows.pop(c, None)
        else:
            self.windows[c] = (lo, hi)

    def _slim_q(self, p):
        self._nparams(p, 1)
        lo, hi = self.windows.get(self._channel(p[0]), (-SCPI_INFINITY, SCPI_INFINITY))
        return f"{fmt(lo)},{fmt(hi)}"

    def _nuis(self, p):
        if len(p) == 1 and p[0].upper() == "NONE":
            self.nuisance = ()
            return
        if not p:
            raise ProtocolError(-109, "give frequencies or NONE")
        f = tuple(to_float(x, "nuisance frequency") for x in p)
        if any(not 0 < x < self.fs / 2 for x in f):
            raise ProtocolError(-222, f"nuisance frequencies must lie in (0, {self.fs / 2:g}) Hz")
        self.nuisance = f

    def _nuis_q(self, p):
        self._nparams(p, 0)
        return ",".join(fmt(x) for x in self.nuisance) if self.nuisance else "NONE"

    def _meas_coef(self, p):
        if len(p) < 2:
            raise ProtocolError(-109, "MEAS:COEF? <periods>,<order>[,<order>...]")
        n = self._periods(p[0])
        orders = self._orders(p[1:])
        self._require_demand()
        if orders.max() * self.demand[0] >= self.fs / 2:
            raise ProtocolError(-222, "an order lies above the Nyquist frequency")
        rec, data, t = self._record(n)
        raw = np.stack([data[c] for c in self.channels])
        fit = harmonics.fit(t, raw, rec.frequency_hz, orders, n_periods=n, nuisance_hz=self.nuisance)
        out = np.stack([fit.coefficients.real, fit.coefficients.imag, fit.variance], axis=-1)  # (ch, orders, 3)
        self._delay()
        return (rec.format() + ",").encode() + encode_block(encode_array(out))

    def _meas_raw(self, p):
        self._nparams(p, 1)
        n = self._periods(p[0])
        rec, data, _ = self._record(n)
        rows = [memoryview(np.ascontiguousarray(data[c], dtype="<f8")).cast("B") for c in self.channels]
        size = sum(r.nbytes for r in rows)  # the (channels, samples) block, row by row, uncopied
        self._delay()
        return [(rec.format() + ",").encode() + block_header(size)] + rows

    def _wait(self, p):
        self._nparams(p, 1)
        n = to_float(p[0], "periods")
        if not 0 <= n <= MAX_RECORD_PERIODS:
            raise ProtocolError(-222, f"periods must be in 0..{MAX_RECORD_PERIODS}")
        self._require_demand()
        self._bound_samples(n, self.demand[0], "a wait")
        whole = int(math.floor(n))
        if whole >= 1:
            self._record(whole)  # recorded so that the channel windows are watched
        if n - whole > 0:
            self.twin.wait(n - whole)
        return self._status()

    def _outp(self, p):
        self._nparams(p, 1)
        on = to_bool(p[0], "output state")
        if on:
            if self.trip.active:
                raise ProtocolError(202, f"{self.trip.reason}; clear with OUTP:PROT:CLE")
            self.armed = True
        else:
            self._ramp_to_zero()
            self.armed = False

    def _outp_q(self, p):
        self._nparams(p, 0)
        return "1" if self.armed else "0"

    def _trip_q(self, p):
        self._nparams(p, 0)
        return error_text(self.trip.code, self.trip.reason) if self.trip.active else '0,""'

    def _trip_clear(self, p):
        self._nparams(p, 0)
        if self.trip.active:
            self._emit("cleared", f"trip {self.trip.code} cleared by the host")
        self.trip.clear()

    def _wdog(self, p):
        self._nparams(p, 1)
        s = to_float(p[0], "watchdog time")
        if not 0 <= s <= MAX_WATCHDOG_S:
            raise ProtocolError(-222, f"watchdog time must be in 0..{MAX_WATCHDOG_S:g} s")
        self.watchdog.timeout_s = s

    def _wdog_q(self, p):
        self._nparams(p, 0)
        return fmt(self.watchdog.timeout_s)

    def _diag_delay(self, p):
        self._nparams(p, 1)
        s = to_float(p[0], "delay")
        if not 0 <= s <= MAX_REPLY_DELAY_S:
            raise ProtocolError(-222, f"delay must be in 0..{MAX_REPLY_DELAY_S:g} s")
        self.reply_delay = s


# (SCPI pattern, handler name without the leading underscore); first match wins
_COMMANDS = (
    ("*IDN?", "idn"),
    ("*RST", "rst"),
    ("*CLS", "cls"),
    ("*OPC?", "opc"),
    ("SYSTem:ERRor?", "err"),
    ("SYSTem:ERRor:NEXT?", "err"),
    ("SYSTem:ERRor:COUNt?", "err_count"),
    ("SYSTem:TIME?", "time"),
    ("CONFigure:CHANnels?", "channels"),
    ("CONFigure:ACTuators?", "actuators"),
    ("CONFigure:RATE?", "rate"),
    ("CONFigure:RANGe?", "range"),
    ("SOURce:FREQuency", "freq"),
    ("SOURce:HARMonics", "harm"),
    ("SOURce:COEFficients", "coef"),
    ("SOURce:APPLy?", "apply"),
    ("SOURce:DEMand?", "demand"),
    ("SOURce:EPOCh?", "epoch"),
    ("SOURce:VOLTage:LIMit", "vlim"),
    ("SOURce:VOLTage:LIMit?", "vlim_q"),
    ("SOURce:VOLTage:LIMit:MAXimum?", "vlim_max"),
    ("SENSe:LIMit", "slim"),
    ("SENSe:LIMit?", "slim_q"),
    ("SENSe:NUISance", "nuis"),
    ("SENSe:NUISance?", "nuis_q"),
    ("MEASure:COEFficients?", "meas_coef"),
    ("MEASure:RAW?", "meas_raw"),
    ("WAIT?", "wait"),
    ("OUTPut", "outp"),
    ("OUTPut?", "outp_q"),
    ("OUTPut:PROTection:TRIP?", "trip_q"),
    ("OUTPut:PROTection:CLEar", "trip_clear"),
    ("OUTPut:PROTection:WDOG", "wdog"),
    ("OUTPut:PROTection:WDOG?", "wdog_q"),
    ("DIAGnostic:DELay", "diag_delay"),
)


class BoxServer:
    """TCP server of a :class:`BoxDevice`. ``start()`` binds (``port=0``: a free port, see
    :attr:`address`) and serves in background threads; ``stop()`` ramps down, closes every
    socket and returns within about a second (a command still running after
    ``STOP_GRACE_S`` is left to finish in its daemon thread). Context manager.

    Idle policy: a host that sends nothing for ``idle_s`` seconds while the box is disarmed is
    disconnected (event ``idle``) so that it cannot hold the box forever; an armed host is the
    watchdog's (which ramps down and disarms first). ``idle_s = 0``: never."""

    def __init__(self, rig_config, *, host: str = "127.0.0.1", port: int = 5025, seed: int | None = None,
                 watchdog_s: float = DEFAULT_WATCHDOG_S, busy_wait_s: float = BUSY_WAIT_S,
                 idle_s: float = DEFAULT_IDLE_S, on_event=None):
        self.on_event = on_event or (lambda e: None)
        self.device = BoxDevice(rig_config, seed=seed, watchdog_s=watchdog_s, on_event=self.on_event)
        self.host, self.port = host, int(port)
        self.busy_wait_s = float(busy_wait_s)
        self.idle_s = float(idle_s)
        self._control = threading.Lock()
        self._stop = self.device.stopping
        self._listener: socket.socket | None = None
        self._threads: list[threading.Thread] = []

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def resource(self) -> str:
        """The VISA resource name of this server."""
        return f"TCPIP0::{self.host}::{self.port}::SOCKET"

    def start(self) -> tuple[str, int]:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((self.host, self.port))
        except OSError:
            s.close()
            raise
        s.listen(socket.SOMAXCONN)  # a burst of connection attempts is queued, not retried by SYN timeouts
        s.settimeout(POLL_S)
        self._listener = s
        self.host, self.port = s.getsockname()[:2]
        t = threading.Thread(target=self._accept_loop, name="box-accept", daemon=True)
        t.start()
        self._threads.append(t)
        self._event("listening", f"listening on {self.host}:{self.port}")
        return self.address

    def __enter__(self) -> "BoxServer":
        if self._listener is None:
            self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _event(self, kind: str, message: str) -> None:
        self.on_event(BoxEvent(kind, message, self.device.twin.elapsed_s))

    def stop(self) -> None:
        """Stop accepting, end every connection, ramp the outputs to zero, close sockets. Waits
        at most ``STOP_GRACE_S`` for a command in progress (every command's work is bounded;
        the served twin's state ends with the process)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
        deadline = time.monotonic() + STOP_GRACE_S
        for t in list(self._threads):
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._control.acquire(timeout=max(0.0, deadline - time.monotonic())):
            try:
                self.device.shutdown()
            finally:
                self._control.release()
            self._event("stopped", "stopped: outputs at zero, sockets closed")
        else:
            self._event("stopped", "stopped while a command was running: it is abandoned with the twin")

    # -- threads ------------------------------------------------------------------------------
    def _accept_loop(self):
        while not self._stop.is_set():
            try:
                conn, addr = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            t = threading.Thread(target=self._handle, args=(conn, addr), name=f"box-conn-{addr[1]}", daemon=True)
            t.start()
            self._threads = [x for x in self._threads if x.is_alive()] + [t]

    def _take_control(self) -> bool:
        deadline = time.monotonic() + self.busy_wait_s
        while not self._stop.is_set():
            if self._control.acquire(timeout=POLL_S):
                return True
            if time.monotonic() > deadline:
                return False
        return False

    def _handle(self, conn: socket.socket, addr):
        who = f"{addr[0]}:{addr[1]}"
        try:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if not self._take_control():
                if not self._stop.is_set():
                    self._turn_away(conn, who)
                return
            try:
                self.device.connected()
                self._event("connected", f"host {who} connected")
                self._serve(conn)
            finally:
                if self._stop.is_set():
                    self.device.shutdown()
                else:
                    self.device.disconnected()
                self._event("disconnected", f"host {who} disconnected")
                self._control.release()
        except OSError:
            pass
        finally:
            conn.close()

    def _turn_away(self, conn: socket.socket, who: str) -> None:
        """Tell a host that cannot take control: the ``!310`` line (the controlling host's
        error queue is not touched), then a graceful close — what the host already sent is
        read and dropped first, or closing would reset the connection before it reads the line."""
        self._event("refused", f"refused {who}: another host is in control")
        conn.settimeout(POLL_S)
        if not self._send(conn, (error_reply(310, "another host is in control") + "\n").encode()):
            return
        conn.shutdown(socket.SHUT_WR)
        end = time.monotonic() + 1.0
        while time.monotonic() < end and not self._stop.is_set():
            try:
                if not conn.recv(1 << 16):
                    return
            except socket.timeout:
                continue

    def _send(self, conn: socket.socket, data) -> bool:
        """Deliver ``data`` to a host that may read slowly: sent piecewise under the poll
        timeout, so a server stop is seen; the link counts as lost only when the host accepts
        nothing for the watchdog time (SEND_STALL_S when the watchdog is off). False then."""
        dev = self.device
        view = memoryview(data).cast("B")
        stall = dev.watchdog.timeout_s if dev.watchdog.enabled else SEND_STALL_S
        last = time.monotonic()
        while view:
            if self._stop.is_set():
                return False
            try:
                k = conn.send(view[: 1 << 20])
            except socket.timeout:
                if time.monotonic() - last > stall:
                    return False
                continue
            view = view[k:]
            last = time.monotonic()
            dev.watchdog.feed()  # the host is reading: it is not silent
        return True

    def _serve(self, conn: socket.socket):
        dev = self.device
        conn.settimeout(POLL_S)
        buf = bytearray()
        skipping = False  # discarding the rest of an over-long line
        heard = time.monotonic()
        while not self._stop.is_set():
            nl = buf.find(b"\n")
            if nl >= 0:
                line = bytes(buf[:nl])
                del buf[: nl + 1]
                if skipping:
                    skipping = False
                    continue
                if len(line) > MAX_LINE_BYTES:
                    dev.push_error(-363, f"line longer than {MAX_LINE_BYTES} bytes discarded")
                    continue
                reply = dev.execute_parts(line)
                if reply and not all(self._send(conn, part) for part in reply):
                    return
                continue
            if len(buf) > MAX_LINE_BYTES:
                dev.push_error(-363, f"line longer than {MAX_LINE_BYTES} bytes discarded")
                buf.clear()
                skipping = True
            try:
                chunk = conn.recv(1 << 16)
            except socket.timeout:
                dev.idle()
                if self._idle_out(heard):
                    return
                continue
            except OSError:
                return
            if not chunk:
                return
            heard = time.monotonic()
            buf += chunk
            if skipping and b"\n" not in chunk:
                buf.clear()

    def _idle_out(self, heard: float) -> bool:
        """The idle policy: True (and an ``idle`` event) when a disarmed host has been silent
        for ``idle_s``."""
        if self.idle_s <= 0 or self.device.armed or time.monotonic() - heard <= self.idle_s:
            return False
        self._event("idle", f"host silent for {self.idle_s:g} s while disarmed: disconnected (idle policy)")
        return True

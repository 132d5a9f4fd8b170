"""``BoxRig``: the :class:`~hbtest.rig.Rig` of an acquisition box, over pyvisa (``@py``
backend, a ``TCPIP::<host>::<port>::SOCKET`` resource).

Raw-socket traps handled here:

- termination: ``\\n`` both ways, set explicitly; bulk data arrive as IEEE 488.2 definite-length
  blocks, read by length (a block may contain ``\\n`` bytes);
- bounded waits: every read has the rig file's ``timeout_s``; a connection attempt
  ``open_timeout_s``;
- stale replies: every demand gets an epoch chosen by this client (strictly increasing); every
  measurement and status reply echoes the epoch it belongs to. After a timeout the client
  re-applies the demand in force with no ramp under a new epoch (a sync point) and drops every
  reply that arrives before that sync point's own reply — in particular the late reply of the
  request that timed out — then repeats the request;
- dropped connections: the session is reopened (the box, which ramped its outputs to zero when
  the link dropped, reports a link trip that is cleared; the demand is re-armed and re-applied
  with its ramp); ``retries`` bounds resyncs and reconnects together, after which an
  :class:`~hbtest.errors.InstrumentError` names the box and its resource;
- malformed replies or garbage bytes: one InstrumentError naming the box, never a hang;
- Nagle + delayed ACK: a second small write before the reply to the first stalls ~40 ms, and
  pyvisa-py cannot set TCP_NODELAY on a socket session (its setter raises), so every request
  is exactly one write (commands and the closing query joined) followed by its reply.

Safety: a demand is checked against the rig file's limits (:mod:`hbtest.rig.safety`) before
a byte is sent; the box enforces the same limits again (and trips). ``safe_state`` ramps to
zero; ``close`` = safe state, disarm, close. A box trip surfaces as
:class:`~hbtest.errors.LimitExceeded` (voltage/channel limit) or InstrumentError (watchdog,
link); :meth:`BoxRig.clear_trip` clears it. Units: V, s, Hz; coefficients in the
:mod:`hbtest.method.harmonics` convention, raw channel volts.
"""

from __future__ import annotations

import numpy as np

from ...errors import InstrumentError, LimitExceeded, RigTrip, UserError
from .. import Acquisition, ChannelCoefficients, RigDescription, safety
from ..identification import IdentifiedModes
from .protocol import Record, Status, decode_array, fmt, parse_error_reply, reply_length

__all__ = ["BoxRig", "IdentifyingBoxRig", "MAX_STALE_REPLIES", "RECONNECT_SETTLE_PERIODS", "READ_CHUNK_BYTES", "DRAIN_TIMEOUT_MS"]

MAX_STALE_REPLIES = 16  # replies dropped while waiting for one request's reply
RECONNECT_SETTLE_PERIODS = 5.0  # periods waited after re-applying the demand on a reconnect
READ_CHUNK_BYTES = 1 << 20  # pyvisa chunk size for block reads
DRAIN_TIMEOUT_MS = 50  # quiet time that ends the drain after a timeout


class _Timeout(Exception):
    pass


class _LinkDown(Exception):
    pass


class _Malformed(Exception):
    pass


class _BoxError(Exception):
    def __init__(self, code: int, message: str):
        self.code, self.message = code, message
        super().__init__(f"{code}, {message}")


class BoxRig:
    """The rig of a ``kind = "box"`` rig file (``rig_config.spec`` a
    :class:`~hbtest.rig.box.BoxSpec`). Connects on construction.

    Protocol: :meth:`describe`, :meth:`set_demand`, :meth:`acquire`, :meth:`wait`,
    :attr:`elapsed_s`, :meth:`safe_state`, :meth:`close`, context manager; device averaging:
    :meth:`acquire_coefficients`; :meth:`clear_trip`. Counters for tests and provenance:
    :attr:`stale_replies`, :attr:`reconnects`, :attr:`resyncs`."""

    def __init__(self, rig_config):
        self.config = rig_config
        self.spec = rig_config.spec
        self.layout = rig_config.sensors
        self.actuators = tuple(rig_config.actuators)
        self.name = f"box {rig_config.identity!r} ({self.spec.resource})"
        self.limits = self.spec.limits(self.layout)
        self.stale_replies = 0
        self.reconnects = 0
        self.resyncs = 0
        self.trip_at_open: str | None = None
        self._rm = None
        self._res = None
        self._epoch = 0
        self._elapsed = 0.0
        self._armed = False
        self._demand = None  # (frequency_hz, V (n_act, n_orders) complex, orders)
        self._sent_nuisance = None
        self._desync = False
        self._dead = False
        self._closed = False
        self._idn = ""
        self._channels: tuple[str, ...] = ()
        self._input_range = None
        try:
            self._connect(first=True)
        except (_Timeout, _LinkDown) as e:
            self._release()
            raise InstrumentError(f"{self.name}: cannot connect: {e}") from None
        except _Malformed as e:
            self._release()
            raise InstrumentError(f"{self.name}: malformed reply while identifying the box: {e}") from None
        except _BoxError as e:
            self._release()
            raise InstrumentError(f"{self.name}: cannot connect: {e.message}") from None
        except UserError:
            self._release()
            raise

    # -- low-level I/O ------------------------------------------------------------------------
    def _write(self, lines) -> None:
        import pyvisa

        data = "".join(line + "\n" for line in ([lines] if isinstance(lines, str) else lines))
        try:
            self._res.write_raw(data.encode("ascii"))
        except (pyvisa.errors.VisaIOError, OSError) as e:
            raise _LinkDown(f"write failed: {e}") from None

    def _read_reply(self) -> bytes:
        """One whole reply (text line, or text fields + block + terminator)."""
        import pyvisa

        buf = bytearray()
        n = None
        try:
            while n is None or len(buf) < n:
                if n is None:
                    buf += self._res.read_raw()
                    try:
                        n = reply_length(bytes(buf))
                    except ValueError as e:
                        raise _Malformed(str(e)) from None
                else:
                    # a block is read by length: with the termination character enabled the
                    # session would stop at every 0x0A byte of the binary data
                    self._res.read_termination = ""
                    try:
                        buf += self._res.read_bytes(n - len(buf))
                    finally:
                        self._res.read_termination = "\n"
            return bytes(buf[:n])
        except pyvisa.errors.VisaIOError as e:
            if e.error_code == pyvisa.constants.StatusCode.error_timeout:
                raise _Timeout(f"no reply within {self.spec.timeout_s:g} s") from None
            raise _LinkDown(f"read failed: {e}") from None
        except OSError as e:
            raise _LinkDown(f"read failed: {e}") from None

    @staticmethod
    def _check_error(raw: bytes) -> None:
        if raw.startswith(b"!"):
            try:
                code, msg = parse_error_reply(raw.decode("ascii", errors="replace"))
            except ValueError:
                raise _Malformed(f"garbled error reply {raw[:60]!r}") from None
            raise _BoxError(code, msg)

    @staticmethod
    def _text(raw: bytes) -> str:
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise _Malformed(f"non-ASCII bytes in reply {raw[:60]!r}") from None
        if not text.endswith("\n"):
            raise _Malformed(f"unterminated reply {raw[:60]!r}")
        return text[:-1]

    def _ask(self, query: str, before=()) -> str:
        """A plain query (no epoch): its one reply line. ``before``: commands sent in the same
        write (one write per request: see the Nagle note in the module docstring)."""
        self._write(list(before) + [query])
        raw = self._read_reply()
        self._check_error(raw)
        return self._text(raw)

    def _read_epoch(self, expect: int, parse, after: float | None = None):
        """Read replies until the one belonging to epoch ``expect``: earlier epochs (and, after
        a timeout, anything unparseable) are stale and dropped. ``after``: a measurement's
        record must end later than this box time — an older record of the same epoch is a
        duplicated or late reply (stale, dropped), never taken for the new one."""
        for _ in range(MAX_STALE_REPLIES + 1):
            raw = self._read_reply()
            if not self._desync:
                self._check_error(raw)
            elif raw.startswith(b"!"):
                try:
                    self._check_error(raw)
                except _BoxError:
                    self.stale_replies += 1
                    continue
            try:
                rec = parse(raw)
            except (ValueError, UnicodeDecodeError, _Malformed) as e:
                if self._desync:
                    self.stale_replies += 1
                    continue
                raise _Malformed(f"{e} in reply {raw[:60]!r}") from None
            if rec.epoch < expect:
                self.stale_replies += 1
                continue
            if rec.epoch != expect:
                raise _Malformed(f"reply for epoch {rec.epoch}, expected {expect}")
            if after is not None and not rec.header.elapsed_s > after:
                self.stale_replies += 1
                continue
            self._desync = False
            return rec
        raise _Malformed(f"more than {MAX_STALE_REPLIES} stale replies")

    @staticmethod
    def _parse_status(raw: bytes) -> Status:
        return Status.parse(BoxRig._text(raw))

    @staticmethod
    def _parse_record(raw: bytes):
        rec, payload = Record.split(raw)
        return _Rec(rec, payload)

    # -- connection ---------------------------------------------------------------------------
    def _release(self) -> None:
        """Close this rig's session. (The ``@py`` ResourceManager is one per process, shared by
        every BoxRig: closing it would close the others' sessions, so it is left open.)"""
        if self._res is not None:
            try:
                self._res.close()
            except Exception:  # noqa: BLE001 - closing a broken pyvisa session may raise anything
                pass
        self._res = None

    def _open_session(self) -> None:
        import pyvisa

        if self._rm is None:
            self._rm = pyvisa.ResourceManager("@py")
        try:
            self._res = self._rm.open_resource(
                self.spec.resource,
                read_termination="\n",
                write_termination="\n",
                timeout=int(round(self.spec.timeout_s * 1000)),
                open_timeout=int(round(self.spec.open_timeout_s * 1000)),
            )
        except Exception as e:  # noqa: BLE001 - pyvisa-py reports connection failures as bare Exception
            self._res = None
            raise _LinkDown(f"cannot open: {e}") from None
        self._res.chunk_size = READ_CHUNK_BYTES

    def _connect(self, first: bool) -> None:
        self._open_session()
        self._desync = False
        self._idn = self._ask("*IDN?").strip()
        trip = self._ask("OUTP:PROT:TRIP?")
        code, reason = parse_error_reply(trip) if trip != '0,""' else (0, "")
        chans = tuple(c.strip() for c in self._ask("CONF:CHAN?").split(","))
        missing = [c.name for c in self.layout.channels if c.name not in chans]
        if missing:
            raise InstrumentError(f"{self.name}: the box has no channel(s) {', '.join(missing)} (it has {', '.join(chans)})")
        self._channels = chans
        acts = self._ask("CONF:ACT?").split(",")
        if len(acts) != len(self.actuators):
            raise InstrumentError(f"{self.name}: the box drives {len(acts)} actuators, the rig file names {len(self.actuators)}")
        rate = float(self._ask("CONF:RATE?"))
        if abs(rate - self.config.sample_rate_hz) > 1e-9 * rate:
            raise InstrumentError(f"{self.name}: the box samples at {rate:g} Hz, the rig file says {self.config.sample_rate_hz:g} Hz")
        rng = float(self._ask("CONF:RANG?"))
        self._input_range = rng if rng < 1e37 else None
        vmax = float(self._ask("SOUR:VOLT:LIM:MAX?"))
        if max(self.limits.voltage_v) > vmax * (1 + safety.LIMIT_TOLERANCE):
            raise InstrumentError(f"{self.name}: the box allows at most {vmax:g} V, the rig file asks for {max(self.limits.voltage_v):g} V")
        if code:
            if code in (safety.TRIP_WATCHDOG, safety.TRIP_LINK) or first:
                self.trip_at_open = f"{code} {reason}"
            else:
                raise RigTrip(f"{self.name}: the box tripped ({reason}); outputs are at zero")
        setup = ["*CLS", "OUTP:PROT:CLE", "SOUR:VOLT:LIM " + ",".join(fmt(v) for v in self.limits.voltage_v)]
        setup += [f"SENS:LIM {c},{fmt(lo)},{fmt(hi)}" for c, (lo, hi) in self.limits.channels.items()]
        setup += [f"OUTP:PROT:WDOG {fmt(self.spec.watchdog_s)}", "SENS:NUIS NONE"]
        err = self._ask("SYST:ERR?", before=setup)
        ecode, emsg = parse_error_reply(err)
        if ecode != 0:
            raise InstrumentError(f"{self.name}: the box refused the set-up: {ecode}, {emsg}")
        self._sent_nuisance = ()
        self._armed = self._ask("OUTP?").strip() == "1"
        self._epoch = int(self._ask("SOUR:EPOC?"))
        self._elapsed = float(self._ask("SYST:TIME?"))

    def _reconnect(self) -> None:
        self._release()
        self.reconnects += 1
        self._connect(first=False)
        if self._demand is not None:
            f, V, orders = self._demand
            arm = ["OUTP ON"] if np.any(V != 0) else []
            self._apply(f, V, orders, self.spec.ramp_periods, before=arm)
            self._armed = bool(arm)
            if np.any(V != 0):
                self._wait_periods(RECONNECT_SETTLE_PERIODS)

    def _resync(self) -> None:
        """After a timeout: a sync point (the demand in force re-applied with no ramp under a
        new epoch); replies before its own are stale."""
        self.resyncs += 1
        self._drain()
        if self._demand is not None:
            f, V, orders = self._demand
            self._apply(f, V, orders, 0.0)
        else:
            self._apply(None, None, None, 0.0)

    def _drain(self) -> None:
        """Drop bytes already in transit (a part of a reply cut by a timeout), reading with a
        short timeout until the line is quiet. (pyvisa-py's ``clear()`` spins forever on a
        socket closed by the peer, so it is not used.) Later replies are caught by epochs."""
        import pyvisa

        old = self._res.timeout
        try:
            self._res.timeout = DRAIN_TIMEOUT_MS
            for _ in range(MAX_STALE_REPLIES):
                self._res.read_raw()
        except pyvisa.errors.VisaIOError:
            pass  # quiet (timeout) or broken: the next write tells
        except OSError as e:
            raise _LinkDown(f"read failed: {e}") from None
        finally:
            try:
                self._res.timeout = old
            except Exception:  # noqa: BLE001
                pass

    def _transact(self, what: str, op):
        """Run ``op`` (write + read on the current session) with bounded retries: a timeout
        resyncs, a dropped link reconnects."""
        if self._closed:
            raise InstrumentError(f"{self.name} is closed")
        if self._dead:
            raise InstrumentError(f"{self.name}: connection lost earlier in this run")
        last = None
        for _attempt in range(self.spec.retries + 1):
            try:
                if self._res is None:
                    self._reconnect()
                elif self._desync:
                    self._resync()
                return op()
            except _Timeout as e:
                last = e
                self._desync = True
            except _LinkDown as e:
                last = e
                self._release()
            except _Malformed as e:
                self._desync = True
                raise InstrumentError(f"{self.name}: malformed reply to {what}: {e}") from None
            except _BoxError as e:
                self._raise_refusal(what, e)
        self._dead = True
        raise InstrumentError(f"{self.name}: {what}: no valid reply after {self.spec.retries + 1} attempt(s) ({last})")

    def _raise_refusal(self, what, e: _BoxError):
        if e.code in (202, safety.TRIP_VOLTAGE, safety.TRIP_CHANNEL):
            raise LimitExceeded(f"{self.name}: {what} refused: {e.message}") from None
        raise InstrumentError(f"{self.name}: {what} refused by the box: {e.code}, {e.message}") from None

    def _after_trip(self, code: int):
        """A reply reported a trip: the box has ramped to zero and disarmed. Raise."""
        self._armed = False
        reason = ""
        try:
            reason = self._ask("OUTP:PROT:TRIP?")
            self._epoch = max(self._epoch, int(self._ask("SOUR:EPOC?")))
        except (_Timeout, _LinkDown, _Malformed, _BoxError, ValueError):
            pass
        if self._demand is not None:
            f, V, orders = self._demand
            self._demand = (f, np.zeros_like(V), orders)
        msg = f"{self.name}: tripped ({reason or code}); the box ramped its outputs to zero"
        if code in (safety.TRIP_VOLTAGE, safety.TRIP_CHANNEL):
            raise RigTrip(msg)  # the point ends; the sweep goes on or stops (sweep.on_trip)
        raise InstrumentError(msg)

    # -- demand ---------------------------------------------------------------------------------
    def _stage_lines(self, f, V, orders) -> list[str]:
        lines = [f"SOUR:FREQ {fmt(f)}", "SOUR:HARM " + ",".join(str(int(k)) for k in orders)]
        for j in range(V.shape[0]):
            vals = []
            for c in V[j]:
                vals += [fmt(c.real), fmt(c.imag)]
            lines.append(f"SOUR:COEF {j + 1}," + ",".join(vals))
        return lines

    def _apply(self, f, V, orders, ramp_periods: float, before=()) -> Status:
        e = self._epoch + 1
        lines = list(before) + (self._stage_lines(f, V, orders) if f is not None else [])
        self._write(lines + [f"SOUR:APPL? {fmt(ramp_periods)},{e}"])
        st = self._read_epoch(e, self._parse_status)
        self._epoch = e
        self._elapsed = st.elapsed_s
        return st

    def set_demand(self, frequency_hz: float, voltage, orders, ramp_periods: float = 2.0) -> None:
        """Check the demand against the limits (nothing is sent when it fails), arm when it is
        non-zero, stage it and apply it atomically over ``ramp_periods`` under a new epoch."""
        f, V, orders = safety.normalise_demand(frequency_hz, voltage, orders, len(self.actuators), ramp_periods)
        safety.check_demand(V, orders, self.limits, self.name, self.actuators)
        nonzero = bool(np.any(V != 0))

        def op():
            arm = ["OUTP ON"] if nonzero and not self._armed else []
            st = self._apply(f, V, orders, float(ramp_periods), before=arm)
            if nonzero:
                self._armed = True
            return st

        st = self._transact("SOUR:APPL?", op)
        self._demand = (f, V, orders)
        if st.trip:
            self._after_trip(st.trip)

    def _wait_periods(self, n_periods: float) -> Status:
        e = self._epoch
        self._write(f"WAIT? {fmt(float(n_periods))}")
        st = self._read_epoch(e, self._parse_status)
        self._elapsed = st.elapsed_s
        return st

    def wait(self, n_periods: float) -> None:
        self._require_demand()
        st = self._transact("WAIT?", lambda: self._wait_periods(n_periods))
        if st.trip:
            self._after_trip(st.trip)

    def _require_demand(self):
        if self._demand is None:
            raise RuntimeError(f"{self.name}: set_demand() first (no frequency yet)")

    # -- measurement ------------------------------------------------------------------------------
    def _measure(self, what: str, lines) -> "_Rec":
        self._require_demand()

        def op():
            e = self._epoch
            self._write(lines)
            return self._read_epoch(e, self._parse_record, after=self._elapsed)

        r = self._transact(what, op)
        self._elapsed = r.header.elapsed_s
        if r.header.trip:
            self._after_trip(r.header.trip)
        return r

    def acquire(self, n_periods: int) -> Acquisition:
        """Raw samples of every box channel over ``n_periods`` whole periods (``MEAS:RAW?``)."""
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        n = int(n_periods)
        r = self._measure("MEAS:RAW?", f"MEAS:RAW? {n}")
        try:
            data = decode_array(r.payload, (len(self._channels), -1))
        except ValueError as e:
            self._desync = True
            raise InstrumentError(f"{self.name}: malformed reply to MEAS:RAW?: {e}") from None
        self._check_record(r.header, n, "MEAS:RAW?")
        fs = self.config.sample_rate_hz
        t = r.header.t0_s + np.arange(data.shape[1]) * (1.0 / fs)
        return Acquisition(t=t, data={c: data[i] for i, c in enumerate(self._channels)}, frequency_hz=r.header.frequency_hz,
                           sample_rate_hz=fs, n_periods=n, elapsed_s=r.header.elapsed_s)

    def acquire_coefficients(self, n_periods: int, orders, nuisance_hz=()) -> ChannelCoefficients:
        """Harmonic coefficients averaged on the box over ``n_periods`` whole periods, with
        the variance of the mean (``MEAS:COEF?``; ``nuisance_hz``: interference frequencies
        estimated and removed first, e.g. mains multiples). Raw channel volts."""
        if int(n_periods) != n_periods or n_periods < 1:
            raise ValueError(f"n_periods must be a positive integer, got {n_periods!r}")
        n = int(n_periods)
        orders = np.atleast_1d(np.asarray(orders, dtype=int))
        if orders.size == 0 or np.any(orders < 0) or len(set(orders.tolist())) != orders.size:
            raise ValueError(f"harmonic orders must be distinct non-negative integers, got {orders.tolist()}")
        nuis = tuple(float(x) for x in nuisance_hz)
        if nuis != self._sent_nuisance:
            self._set_nuisance(nuis)
        r = self._measure("MEAS:COEF?", [f"MEAS:COEF? {n}," + ",".join(str(int(k)) for k in orders)])
        try:
            a = decode_array(r.payload, (len(self._channels), orders.size, 3))
        except ValueError as e:
            self._desync = True
            raise InstrumentError(f"{self.name}: malformed reply to MEAS:COEF?: {e}") from None
        self._check_record(r.header, n, "MEAS:COEF?")
        coef = {c: a[i, :, 0] + 1j * a[i, :, 1] for i, c in enumerate(self._channels)}
        var = {c: a[i, :, 2].copy() for i, c in enumerate(self._channels)}
        return ChannelCoefficients(coefficients=coef, variance=var, orders=orders, frequency_hz=r.header.frequency_hz,
                                   n_periods=n, elapsed_s=r.header.elapsed_s, overrange=self._overrange(r.header),
                                   epoch=r.header.epoch)

    def _set_nuisance(self, nuis: tuple) -> None:
        """Send the nuisance list and read it back (one request): a list the box did not take
        is an InstrumentError naming the box and the box's own error, never a fit with the old one."""
        line = "SENS:NUIS " + (",".join(fmt(x) for x in nuis) if nuis else "NONE")
        got = self._transact("SENS:NUIS", lambda: self._ask("SENS:NUIS?", before=[line]))
        try:
            have = () if got.strip().upper() == "NONE" else tuple(float(x) for x in got.split(","))
        except ValueError:
            have = None
        if have != nuis:
            why = self._transact("SYST:ERR?", lambda: self._ask("SYST:ERR?"))
            raise InstrumentError(f"{self.name}: the box did not take {line} (it reports {got!r}; SYST:ERR? {why})")
        self._sent_nuisance = nuis

    def _check_record(self, rec: Record, n: int, what: str):
        f = self._demand[0]
        if rec.n_periods != n or abs(rec.frequency_hz - f) > 1e-9 * f:
            self._desync = True
            raise InstrumentError(f"{self.name}: reply to {what} is for {rec.n_periods} periods at {rec.frequency_hz:g} Hz, asked {n} at {f:g} Hz")

    def _overrange(self, rec: Record) -> tuple[str, ...]:
        return tuple(c for i, c in enumerate(self._channels) if rec.overrange >> i & 1)

    # -- state --------------------------------------------------------------------------------
    @property
    def elapsed_s(self) -> float:
        return self._elapsed

    @property
    def epoch(self) -> int:
        """The epoch of the demand in force (as last confirmed by the box)."""
        return self._epoch

    def describe(self) -> RigDescription:
        return RigDescription(
            identity=self.config.identity,
            kind="box",
            actuators=self.actuators,
            sample_rate_hz=self.config.sample_rate_hz,
            voltage_limit_v=float(min(self.limits.voltage_v)),
            sensors=self.layout,
            details=dict(
                idn=self._idn,
                resource=self.spec.resource,
                source=self.config.source.path,
                sha256=self.config.source.sha256,
                voltage_limits_v=list(self.limits.voltage_v),
                channel_windows_v={c: list(w) for c, w in self.limits.channels.items()},
                watchdog_s=self.spec.watchdog_s,
                box_channels=list(self._channels),
                trip_at_open=self.trip_at_open,
            ),
            input_range_v=self._input_range,
        )

    def clear_trip(self) -> None:
        """Clear a latched trip (outputs stay at zero and disarmed until the next demand)."""

        def op():
            self._epoch = max(self._epoch, int(self._ask("SOUR:EPOC?", before=["OUTP:PROT:CLE"])))

        self._transact("OUTP:PROT:CLE", op)

    def safe_state(self, ramp_periods: float | None = None) -> None:
        """Ramp all outputs to zero (at the current frequency)."""
        if self._demand is None or not np.any(self._demand[1] != 0):
            return
        f, V, orders = self._demand
        self.set_demand(f, np.zeros_like(V), orders, self.spec.ramp_periods if ramp_periods is None else ramp_periods)

    def disarm(self) -> None:
        """Safe state, then ``OUTP OFF`` (:class:`hbtest.rig.capabilities.Disarms`): the box's
        watchdog no longer runs; the next non-zero demand arms it again."""
        self.safe_state()

        def op():
            self._ask("*OPC?", before=["OUTP OFF"])

        self._transact("OUTP OFF", op)
        self._armed = False

    def close(self) -> None:
        """Safe state, disarm, release the connection."""
        if self._closed:
            return
        try:
            if not self._dead and self._res is not None:
                self.disarm()
        finally:
            self._closed = True
            self._release()

    def __enter__(self) -> "BoxRig":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
            return
        try:  # an error is already on its way: its message wins; a dead link is the watchdog's
            self.close()
        except UserError:
            pass


class _Rec:
    """A measurement reply: header and payload (epoch exposed for the stale filter)."""

    __slots__ = ("header", "payload")

    def __init__(self, header: Record, payload: bytes):
        self.header, self.payload = header, payload

    @property
    def epoch(self) -> int:
        return self.header.epoch


class IdentifyingBoxRig(IdentifiedModes, BoxRig):
    """A :class:`BoxRig` whose rig file has an ``[identify]`` table: it offers its modes
    (:class:`hbtest.rig.capabilities.KnownModes`, :class:`hbtest.rig.identification.IdentifiedModes`),
    so the point loop takes raw records (``MEAS:RAW?``) and fits through the transient on the
    host, tracking the mains there, instead of averaging on the device window by window."""


"""A simulated Red Pitaya STEMlab 125-14 (its SCPI server: two arbitrary outputs, two inputs),
written from the Red Pitaya documentation, with the twin as the plant (:mod:`.plant`).

Sources (read for this module; none is in this repository):

- Red Pitaya documentation, "Remote control (SCPI)": the command-list pages "Acquisition"
  (``commands-acq``: circular buffer of 16384 samples, data buffer with the trigger at sample
  8192, trigger delay, decimation, ``ACQ:TRig:STAT?`` returning ``TD``/``WAIT``,
  ``ACQ:TRig:FILL?``, ``ACQ:WPOS?``/``ACQ:TPOS?``, ``ACQ:SOUR<n>:DATA?`` and
  ``ACQ:SOUR<n>:DATA:STArt:N?``, ``ACQ:DATA:FORMAT``, ``ACQ:DATA:UNITS``, ``ACQ:SOUR<n>:GAIN``)
  and "Signal generator" (``SOUR<n>:FUNC``, ``SOUR<n>:FREQ:FIX``, ``SOUR<n>:VOLT``,
  ``SOUR<n>:VOLT:OFFS``, ``SOUR<n>:TRAC:DATA:DATA``, ``SOUR<n>:BURS:STAT``, ``OUTPUT<n>:STATE``,
  ``SOUR:TRig:INT``); the example "Synchronised one-pulse signal generation and acquisition"
  (the acquisition triggered by the generator's start, ``AWG_PE``); "Known SCPI & API issues";
- the public ``RedPitaya/RedPitaya`` sources that implement those pages: ``scpi-server/src``
  (``scpi-commands.cpp``: the command table; ``acquire.cpp``, ``generate.cpp``, ``common.h``:
  the choice lists ``DISABLED|NOW|CH1_PE|...|EXT_PE|AWG_PE``, ``TD|WAIT``, ``VOLTS|RAW``, ``LV|HV``;
  ``scpi-parser-ext.cpp``: ASCII data as ``{v,v,...}`` with ``%f``, BIN data as a definite-length
  block of big-endian values unless ``ACQ:DATA:BYTE:ORDER LEND``), ``rp-api/api/src``
  (``gen_handler.cpp``: reset state, ``|amplitude| + |offset|`` at most the 1 V full scale or the
  setting is refused, arbitrary samples clipped to [-1, 1] and the waveform length kept;
  ``acq_handler.cpp``: decimations 1, 2, 4, ..., 65536, trigger delay stored as delay + 8192);
  and ``tools/scpi/redpitaya_scpi.py`` (port 5000, replies end in ``\\r\\n``).

Documented behaviours this simulator honours (each has a test in tests/test_redpitaya.py):

1. ``*IDN?``, ``*RST``, ``*CLS``, ``SYST:ERR?`` (``0,"No error"`` when empty), ``GEN:RST``,
   ``ACQ:RST``; replies end in ``\\r\\n``; an unknown header is ``-113,"Undefined header"``.
2. Generator reset state: sine, 1 kHz, amplitude 0.8 V, offset 0, continuous mode, outputs off.
3. ``SOUR<n>:VOLT``/``SOUR<n>:VOLT:OFFS`` [V]: a value with ``|amplitude| + |offset| > 1 V`` is
   refused (error ``-222``) and the old one kept.
4. ``SOUR<n>:TRAC:DATA:DATA v0,v1,...``: 1..16384 samples, each clipped to [-1, 1]; the
   output is ``offset + amplitude * v[i]``; one waveform (all its samples) repeats at
   ``SOUR<n>:FREQ:FIX`` [Hz]. Updating the samples, the amplitude or the offset while running
   does not restart the waveform; a new frequency changes the rate, the read position goes on.
5. ``SOUR:TRig:INT`` restarts both channels at sample 0 together (``SOUR<n>:TRig:INT`` one
   channel); an acquisition armed with ``ACQ:TRig AWG_PE`` triggers at that instant.
6. ``OUTPUT<n>:STATE ON|OFF`` and ``OUTPUT:STATE ON|OFF`` (both).
7. Acquisition: ``ACQ:DEC`` (1, 2, 4, ..., 65536), ``ACQ:START`` starts writing the 16384-sample
   circular buffer, ``ACQ:TRig <source>`` arms (``NOW`` triggers at once), ``ACQ:TRig:STAT?``
   is ``WAIT`` until the trigger and ``TD`` after it (and when not armed); after the trigger
   ``8192 + ACQ:TRig:DLY`` samples are written, then writing stops and ``ACQ:TRig:FILL?`` is 1;
   ``ACQ:WPOS?`` is the position of the last sample written, ``ACQ:TPOS?`` that of the trigger.
8. ``ACQ:SOUR<n>:DATA?`` (the whole buffer, oldest first) and ``ACQ:SOUR<n>:DATA:STArt:N? s,m``
   (``m`` samples from position ``s``, wrapping), in ``ACQ:DATA:UNITS VOLTS|RAW`` (RAW: the
   signed 14-bit code) and ``ACQ:DATA:FORMAT ASCII|BIN`` (``ACQ:DATA:BYTE:ORDER LEND|BEND``).
9. Inputs: 14-bit over the jumper's full scale (LV +/-1 V, HV +/-20 V); ``ACQ:SOUR<n>:GAIN LV|HV``
   tells the software which jumper is set: VOLTS = code / 8192 * (1 V or 20 V) — a setting that
   differs from the jumper scales the volts wrongly, as on the board; codes saturate at
   -8192 / +8191.
10. ``DAISY:TRig:Out:ENable ON`` + ``DAISY:TRig:Out:SOUR DAC`` on one board sends its generator
    start to the EXT trigger of the others in the chain (``ACQ:TRig EXT_PE`` on those);
    ``DAISY:SYNC:CLK``/``DAISY:SYNC:TRig`` are accepted (the boards here share the plant's clock).

Not simulated (accepted where noted, otherwise ``-224``/``-222``): level triggers on the inputs
(``CH1_PE`` ... are accepted and never fire), burst and sweep modes, functions other than SINE and
ARBITRARY, ``ACQ:AVG ON`` averaging (samples are point samples either way), decimations other
than the plant's (the twin's sample rate must be 125 MHz / decimation: ``-222`` otherwise), the
generator's phase-accumulator resolution (the FPGA's frequency step, not in the SCPI pages),
calibration, the Red Pitaya server's own error numbers (standard SCPI-99 numbers are used).

Cabling (``instruments/redpitaya-loopback.toml``): board 1 OUT1/OUT2 -> a x5 buffer amplifier
(:data:`CABLE_GAIN`) -> the twin's actuators 1/2; board ``b`` IN1/IN2 -> the twin's sensor
channels ``2 (b - 1)`` and ``2 (b - 1) + 1`` (layout order l1, l2, g1, g2: board 1 reads the
lasers, board 2 the gauges), jumpers on HV. Units: volts, hertz, samples, seconds.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .plant import ChannelOutput, Plant, waveform_harmonics
from .server import Command, ScpiServer, SimError, short_form
from .server import number as _number

__all__ = ["BASE_HZ", "BUFFER", "CABLE_GAIN", "DECIMATIONS", "IDN", "RedPitaya", "RingPlant", "open_boards"]

IDN = "REDPITAYA,INSTR2020,0,2.05-37 (hbtest simulator)"
BASE_HZ = 125e6
BUFFER = 16384
TRIGGER_AT = BUFFER // 2  # the trigger's place in the data buffer at delay 0
DECIMATIONS = tuple(2**k for k in range(17))
CABLE_GAIN = 5.0  # volts at the actuator per volt at OUTn (the loopback's buffer amplifier)
OUT_FULL_SCALE = 1.0
JUMPER_V = {"LV": 1.0, "HV": 20.0}
CODE_MAX, CODE_MIN = 8191, -8192
ERROR_QUEUE = 20
END = b"\r\n"
SOURCES = ("DISABLED", "NOW", "CH1_PE", "CH1_NE", "CH2_PE", "CH2_NE", "EXT_PE", "EXT_NE", "AWG_PE", "AWG_NE")
S = short_form


class RingPlant(Plant):
    """The plant running from the start on the wall clock (zero demand until an output is on),
    every twin sample recorded and handed to the listening boards: ``listener(k0, volts)`` with
    ``volts`` (channels, n) the raw sensor volts of twin samples ``k0 .. k0 + n - 1``."""

    def __init__(self, twin, clock=time.monotonic):
        super().__init__(twin, clock)
        self.listeners: list = []
        self.n = 0  # twin samples simulated so far
        self._held = False
        twin.set_demand(1.0, np.zeros((2, 1)), [1], ramp_periods=0.0)
        self._wall0, self._sim0 = clock(), twin.elapsed_s

    @contextmanager
    def held(self):
        """The twin stands still inside (the wall clock is caught up after): changes made
        inside happen at one twin sample, :attr:`n`."""
        with self.lock:
            self.advance()
            before, self._held = self._held, True
            try:
                yield self.n
            finally:
                self._held = before

    def advance(self) -> None:
        with self.lock:
            if self._held:
                return
            due = int(math.floor((self._clock() - self._wall0) * self.fs)) - self.n
            while due > 0:
                m = min(due, BUFFER)
                _, y = self.twin._constant(m, record=True)
                for listener in self.listeners:
                    listener(self.n, np.asarray(y))
                self.n += m
                due -= m


@dataclass
class GenChannel:
    function: str = "SINE"
    frequency_hz: float = 1000.0
    amplitude_v: float = 0.8
    offset_v: float = 0.0
    output: bool = False
    samples: np.ndarray = field(default_factory=lambda: np.zeros(BUFFER))
    anchor_k: int = 0  # twin sample at which the read position was last known ...
    anchor_frac: float = 0.0  # ... as this fraction of the waveform (0: sample 0)
    offset_phase: float = 0.0  # twin phase minus the waveform's phase [rad] (the plant's rotation)


@dataclass
class AcqState:
    decimation: int = 1
    source: str = "DISABLED"
    delay: int = 0
    started: int | None = None  # twin sample of ACQ:START (None: stopped)
    trigger: int | None = None  # twin sample of the trigger
    written: int = 0  # samples written since ACQ:START
    gain: dict = field(default_factory=lambda: {1: "LV", 2: "LV"})
    units: str = "VOLTS"
    binary: bool = False
    little_endian: bool = False
    ring: np.ndarray = field(default_factory=lambda: np.zeros((2, BUFFER)))


class RedPitaya:
    """One simulated board (generator + acquisition) on ``plant``; ``inputs``: the plant's
    sensor channel index of IN1 and IN2; ``drives``: whether its outputs drive the plant;
    ``chain``: the boards receiving its daisy-chain trigger."""

    def __init__(self, plant: RingPlant, inputs=(0, 1), drives: bool = True, jumpers=("HV", "HV")):
        self.plant, self.inputs, self.drives, self.jumpers = plant, tuple(inputs), drives, tuple(jumpers)
        self.lock = plant.lock  # one lock for the boards of a plant (a daisy trigger crosses boards)
        self.errors: list[SimError] = []
        self.chain: list[RedPitaya] = []
        self.daisy_out, self.daisy_source = False, "ADC"
        self.commands: list[str] = []
        self._reset()
        plant.listeners.append(self._samples)

    # -- state ------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._reset_generator()
        self.acq = AcqState()

    def _reset_generator(self) -> None:
        self.gen = {1: GenChannel(), 2: GenChannel()}
        if self.drives:
            for n in (1, 2):
                self.plant.set_output(n, None)

    def push_error(self, e: SimError) -> None:
        if len(self.errors) < ERROR_QUEUE:
            self.errors.append(e)

    def disconnected(self) -> None:
        """The board keeps its state when the host goes (outputs stay as they are)."""

    # -- the plant ----------------------------------------------------------------------------
    def _samples(self, k0: int, volts: np.ndarray) -> None:
        """Twin samples ``k0..`` into the circular buffer while the acquisition writes."""
        a = self.acq
        if a.started is None:
            return
        stop = math.inf if a.trigger is None else a.trigger + TRIGGER_AT + a.delay
        k = np.arange(k0, k0 + volts.shape[1])
        take = (k >= a.started) & (k < stop)
        if not take.any():
            return
        pos = (k[take] - a.started) % BUFFER
        for i, ch in enumerate(self.inputs):
            a.ring[i, pos] = volts[ch, take] if ch < volts.shape[0] else 0.0
        a.written = int(k[take][-1] - a.started + 1)

    def _output(self, n: int) -> ChannelOutput | None:
        c = self.gen[n]
        if not c.output:
            return None
        if c.function == "SINE":  # offset + amplitude sin(theta)
            coef = CABLE_GAIN * np.array([c.offset_v, -1j * c.amplitude_v])
            return ChannelOutput(c.frequency_hz, np.array([0, 1]), coef * np.exp(-1j * np.array([0, 1]) * c.offset_phase))
        volts = CABLE_GAIN * (c.offset_v + c.amplitude_v * c.samples)
        orders, coef = waveform_harmonics(volts, self.plant.fs, c.frequency_hz)
        return ChannelOutput(c.frequency_hz, orders, coef * np.exp(-1j * orders * c.offset_phase))

    def position(self, n: int, k: int) -> float:
        """Channel ``n``'s read position at twin sample ``k``, as a fraction of its waveform:
        the generator runs at its frequency whether its output is on or not."""
        c = self.gen[n]
        return (c.anchor_frac + c.frequency_hz * (k - c.anchor_k) / self.plant.fs) % 1.0

    def _update(self, n: int | None = None) -> None:
        """Both outputs to the plant at one twin sample: each rotated so that its waveform's
        phase (its read position) maps onto the twin's phase from now on."""
        if not self.drives:
            return
        with self.plant.held() as k:
            phi = self.plant.phase_now()
            for m in (1, 2):
                self.gen[m].offset_phase = phi - 2 * np.pi * self.position(m, k)
            for m in (1, 2):
                self.plant.set_output(m, self._output(m))

    def _restart(self, channels) -> None:
        """Channels restart at sample 0 now; the generator-start trigger goes out."""
        with self.plant.held() as k:
            for n in channels:
                self.gen[n].anchor_k, self.gen[n].anchor_frac = k, 0.0
            self._update()
            self.trigger_event("AWG_PE", k)
            if self.daisy_out and self.daisy_source == "DAC":
                for other in self.chain:
                    other.trigger_event("EXT_PE", k)

    def trigger_event(self, source: str, k: int) -> None:
        """A trigger on ``source`` at twin sample ``k``: an acquisition armed on it triggers."""
        a = self.acq
        if a.started is not None and a.trigger is None and a.source == source:
            a.trigger = k

    # -- commands ------------------------------------------------------------------------------
    def execute(self, cmd: Command) -> bytes | None:
        with self.lock, self.plant.lock:
            self.commands.append(cmd.header + (" " + cmd.args[:40] if cmd.args else ""))
            self.plant.advance()
            reply = self._dispatch(cmd)
            if reply is None:
                return None
            return (reply if isinstance(reply, bytes) else reply.encode()) + END

    def _dispatch(self, cmd: Command) -> str | bytes | None:
        n0 = cmd.nodes[0]
        if n0.startswith("*"):
            return self._common(cmd)
        if cmd.nodes == ("SYST", "ERR") and cmd.query:
            e = self.errors.pop(0) if self.errors else None
            return f'{e.code},"{e.text}"' if e else '0,"No error"'
        if cmd.nodes == ("GEN", S("RST")):
            self._reset_generator()
            return None
        handler = {"ACQ": self._acq, "SOUR": self._source, "OUTP": self._outp, S("DAISY"): self._daisy}.get(n0)
        if handler is None:
            raise SimError(-113, "Undefined header")
        return handler(cmd)

    def _common(self, cmd: Command) -> str | None:
        h = cmd.nodes[0]
        if h == "*IDN" and cmd.query:
            return IDN
        if h == "*OPC" and cmd.query:
            return "1"
        if h == "*CLS":
            self.errors.clear()
            return None
        if h == "*RST":
            self._reset()
            return None
        raise SimError(-113, "Undefined header")

    def _outp(self, cmd: Command) -> str | None:
        if cmd.nodes[1:] != (S("STATE"),):
            raise SimError(-113, "Undefined header")
        channels = (cmd.suffixes[0],) if _has_suffix(cmd) else (1, 2)
        if channels[0] not in (1, 2):
            raise SimError(-114, "Header suffix out of range")
        if cmd.query:
            return "ON" if self.gen[channels[0]].output else "OFF"
        on = _on_off(cmd.args)
        for n in channels:
            self.gen[n].output = on
            self._update(n)
        return None

    def _daisy(self, cmd: Command) -> str | None:
        rest, arg = cmd.nodes[1:], cmd.args.strip().upper()
        if rest in (("SYNC", S("TRIG")), ("SYNC", "CLK")):
            _on_off(arg)
        elif rest == (S("TRIG"), "OUT", S("ENABLE")):
            self.daisy_out = _on_off(arg)
        elif rest == (S("TRIG"), "OUT", "SOUR"):
            if arg not in ("ADC", "DAC"):
                raise SimError(-224, "Illegal parameter value")
            self.daisy_source = arg
        else:
            raise SimError(-113, "Undefined header")
        return None

    # -- generator -------------------------------------------------------------------------------
    def _source(self, cmd: Command) -> str | None:
        rest = cmd.nodes[1:]
        if rest == (S("TRIG"), "INT"):
            self._restart((cmd.suffixes[0],) if _has_suffix(cmd) else (1, 2))
            return None
        n = cmd.suffixes[0]
        if n not in (1, 2):
            raise SimError(-114, "Header suffix out of range")
        c, arg = self.gen[n], cmd.args.strip()
        if rest == ("FUNC",):
            return self._function(cmd, n, c, arg)
        if rest == ("FREQ", "FIX"):
            return self._frequency(cmd, n, c, arg)
        if rest in (("VOLT",), ("VOLT", "OFFS")):
            return self._level(cmd, n, c, arg, offset=rest == ("VOLT", "OFFS"))
        if rest == (S("TRAC"), "DATA", "DATA"):
            return self._samples_cmd(cmd, n, c, arg)
        if rest == ("BURS", "STAT"):
            if cmd.query:
                return "CONTINUOUS"
            if arg.upper() != "CONTINUOUS":  # burst mode is not simulated
                raise SimError(-224, "Illegal parameter value")
            return None
        raise SimError(-113, "Undefined header")

    def _function(self, cmd, n, c, arg) -> str | None:
        if cmd.query:
            return c.function
        if arg.upper() not in ("SINE", "ARBITRARY"):  # the others are not simulated
            raise SimError(-224, "Illegal parameter value")
        c.function = arg.upper()
        self._update(n)
        return None

    def _frequency(self, cmd, n, c, arg) -> str | None:
        if cmd.query:
            return f"{c.frequency_hz:g}"
        f = _number(arg)
        if not 0 < f <= BASE_HZ / 2:
            raise SimError(-222, "Data out of range")
        with self.plant.held() as k:  # the read position goes on from where it is, at the new rate
            c.anchor_frac, c.anchor_k = self.position(n, k), k
            c.frequency_hz = f
            self._update(n)
        return None

    def _level(self, cmd, n, c, arg, offset: bool) -> str | None:
        if cmd.query:
            return f"{(c.offset_v if offset else c.amplitude_v):g}"
        v = _number(arg)
        amp, off = (c.amplitude_v, v) if offset else (v, c.offset_v)
        if abs(amp) + abs(off) > OUT_FULL_SCALE + 1e-5:
            raise SimError(-222, "Data out of range")
        c.amplitude_v, c.offset_v = amp, off
        self._update(n)
        return None

    def _samples_cmd(self, cmd, n, c, arg) -> str | None:
        if cmd.query:
            return ",".join(f"{x:f}" for x in c.samples)
        try:
            v = np.array([float(x) for x in arg.split(",")])
        except ValueError:
            raise SimError(-104, "Data type error") from None
        if not 1 <= v.size <= BUFFER or not np.all(np.isfinite(v)):
            raise SimError(-222, "Data out of range")
        c.samples = np.clip(v, -1.0, 1.0)
        self._update(n)
        return None

    # -- acquisition -------------------------------------------------------------------------------
    def _acq(self, cmd: Command) -> str | bytes | None:
        rest, arg, a = cmd.nodes[1:], cmd.args.strip().upper(), self.acq
        if rest == ("SOUR", "DATA") or (rest[:1] == ("SOUR",) and rest[1:3] == ("DATA", S("STA"))):
            return self._data(cmd)
        simple = {(S("START"),): self._start, ("STOP",): self._stop, (S("RST"),): self._acq_reset}
        if rest in simple and not cmd.query:
            return simple[rest]()
        if rest == ("DEC",):
            return self._decimation(cmd, arg)
        if rest == (S("TRIG"),):
            return self._trigger(cmd, arg)
        if rest == (S("TRIG"), S("STAT")) and cmd.query:
            return "WAIT" if a.started is not None and a.trigger is None else "TD"
        if rest == (S("TRIG"), "FILL") and cmd.query:
            return "1" if a.trigger is not None and self.plant.n >= a.trigger + TRIGGER_AT + a.delay else "0"
        if rest == (S("TRIG"), "DLY"):
            if cmd.query:
                return str(a.delay)
            a.delay = max(int(_number(arg or "0")), -TRIGGER_AT)
            return None
        if rest == ("WPOS",) and cmd.query:
            return str((a.written - 1) % BUFFER)
        if rest == ("TPOS",) and cmd.query:
            return str(0 if a.trigger is None or a.started is None else (a.trigger - a.started) % BUFFER)
        if rest == ("BUF", "SIZE") and cmd.query:
            return str(BUFFER)
        return self._acq_settings(cmd, rest, arg)

    def _acq_settings(self, cmd: Command, rest, arg: str) -> str | None:
        a = self.acq
        if rest == ("SOUR", "GAIN"):
            if cmd.suffixes[1] not in (1, 2) or arg not in JUMPER_V:
                raise SimError(-224, "Illegal parameter value")
            a.gain[cmd.suffixes[1]] = arg
        elif rest == ("AVG",):
            _on_off(arg)  # averaging is not simulated: point samples either way
        elif rest == ("DATA", S("UNITS")):
            if arg not in ("VOLTS", "RAW"):
                raise SimError(-224, "Illegal parameter value")
            a.units = arg
        elif rest == ("DATA", S("FORMAT")):
            if arg not in ("ASCII", "BIN"):
                raise SimError(-224, "Illegal parameter value")
            a.binary = arg == "BIN"
        elif rest == ("DATA", "BYTE", S("ORDER")):
            if arg not in ("LEND", "BEND"):
                raise SimError(-224, "Illegal parameter value")
            a.little_endian = arg == "LEND"
        else:
            raise SimError(-113, "Undefined header")
        return None

    def _start(self) -> None:
        a = self.acq
        a.started, a.trigger, a.written, a.source = self.plant.n, None, 0, "DISABLED"
        a.ring[:] = 0.0

    def _stop(self) -> None:
        self.acq.started = None

    def _acq_reset(self) -> None:
        self.acq = AcqState()

    def _decimation(self, cmd: Command, arg: str) -> str | None:
        if cmd.query:
            return str(self.acq.decimation)
        d = _number(arg)
        if d not in DECIMATIONS:
            raise SimError(-222, "Data out of range")
        if not math.isclose(BASE_HZ / d, self.plant.fs, rel_tol=1e-9):  # not simulated: the plant's rate only
            raise SimError(-222, f"Data out of range;the simulated plant samples at {self.plant.fs:g} Hz")
        self.acq.decimation = int(d)
        return None

    def _trigger(self, cmd: Command, arg: str) -> str | None:
        if cmd.query or arg not in SOURCES:
            raise SimError(-224, "Illegal parameter value")
        a = self.acq
        a.source = arg
        if arg == "NOW" and a.started is not None and a.trigger is None:
            a.trigger = self.plant.n
        return None

    def _codes(self, ch: int, positions: np.ndarray) -> np.ndarray:
        full = JUMPER_V[self.jumpers[ch - 1]]
        q = np.rint(self.acq.ring[ch - 1, positions] / full * (CODE_MAX + 1))
        return np.clip(q, CODE_MIN, CODE_MAX).astype(np.int16)

    def _data(self, cmd: Command) -> str | bytes:
        a, ch = self.acq, cmd.suffixes[1]
        if ch not in (1, 2) or not cmd.query:
            raise SimError(-114, "Header suffix out of range")
        if cmd.nodes[2:] == ("DATA",):
            start, m = (a.written % BUFFER), BUFFER  # oldest first: the one after the write pointer
        else:
            try:
                start, m = (int(x) for x in cmd.args.split(","))
            except ValueError:
                raise SimError(-104, "Data type error") from None
            if not (0 <= start < BUFFER and 1 <= m <= BUFFER):
                raise SimError(-222, "Data out of range")
        codes = self._codes(ch, (start + np.arange(m)) % BUFFER)
        if a.units == "RAW":
            values = codes
        else:
            values = (codes.astype(np.float32) / (CODE_MAX + 1) * np.float32(JUMPER_V[a.gain[ch]])).astype(np.float32)
        return _format(values, a.binary, a.little_endian)


def _format(values: np.ndarray, binary: bool, little_endian: bool) -> str | bytes:
    """``{v,v,...}`` (ASCII: ``%f`` for volts, integers for codes) or the bytes of a
    definite-length block."""
    if not binary:
        body = ",".join(f"{x:f}" for x in values) if values.dtype.kind == "f" else ",".join(str(int(x)) for x in values)
        return "{" + body + "}"
    payload = values.astype(values.dtype.newbyteorder("<" if little_endian else ">")).tobytes()
    n = str(len(payload))
    return f"#{len(n)}{n}".encode() + payload


def _has_suffix(cmd: Command) -> bool:
    """Whether the first node carried an explicit number (``OUTPUT1`` vs ``OUTPUT``)."""
    return bool(cmd.numbered and cmd.numbered[0])


def _on_off(arg: str) -> bool:
    a = arg.strip().upper()
    if a in ("ON", "1", "TRUE"):
        return True
    if a in ("OFF", "0", "FALSE"):
        return False
    raise SimError(-224, "Illegal parameter value")


@dataclass
class Boards:
    """The simulated boards on one plant, each served on its own port; ``with`` starts/stops."""

    plant: RingPlant
    boards: list
    servers: list

    def __enter__(self) -> "Boards":
        for s in self.servers:
            s.start()
        return self

    def __exit__(self, *exc) -> None:
        for s in self.servers:
            s.stop()


def open_boards(twin_config, seed: int | None = None, host: str = "127.0.0.1", ports=(0, 0)) -> Boards:
    """Two boards on the twin of ``twin_config``: board 1 drives the actuators and reads l1, l2;
    board 2 reads g1, g2 and takes board 1's generator start over the daisy chain. Not started."""
    from ...rig.virtual import VirtualRig

    plant = RingPlant(VirtualRig(twin_config, seed))
    first = RedPitaya(plant, inputs=(0, 1), drives=True)
    second = RedPitaya(plant, inputs=(2, 3), drives=False)
    first.chain.append(second)
    boards = [first, second]
    servers = [ScpiServer(b, host, p, f"RedPitaya{i + 1}") for i, (b, p) in enumerate(zip(boards, ports))]
    return Boards(plant, boards, servers)

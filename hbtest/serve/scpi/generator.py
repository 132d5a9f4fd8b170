"""A simulated Keysight 33500B-series two-channel arbitrary waveform generator, written from the
33500 Series Operating and Service Guide (its "SCPI Programming Reference" and "SCPI Error
Messages" chapters), with the plant (:mod:`.plant`) behind its outputs.

What is simulated, with the manual section each behaviour comes from:

- Power-on/``*RST`` state ("*RST" / "Factory reset state"): sine, 1 kHz, 100 mVpp, 0 V offset,
  outputs off, **output load 50 ohm**, limits off, Sync on following channel 1. With a 50 ohm
  setting the generator is calibrated for a 50 ohm load, so into a high-impedance amplifier
  input the volts are **twice** the setting ("OUTPut:LOAD"); the plant sees that.
- ``DATA:ARBitrary[:DAC] <name>,<block>`` ("DATA:ARBitrary"): int16 codes in -32767..32767,
  byte order ``FORMat:BORDer NORMal|SWAPped`` (big/little endian; "FORMat:BORDer"), 8 to
  1,000,000 points per channel of volatile memory ("DATA:VOLatile:FREE?"); a name is 1-12
  characters, a letter first, then letters, digits, ``_``; **a name already in volatile memory
  is refused with +785** and nothing is stored; a full memory is -225 (Out of memory).
- ``DATA:VOLatile:CLEar`` ("DATA:VOLatile:CLEar"): clears the channel's volatile memory and
  **reloads the default arbitrary waveform** (the built-in ``EXP_RISE``) — on the output at once
  if the channel was playing a volatile waveform. The simulator logs every moment the default
  waveform reaches an output that is on (:attr:`Generator.default_on_output`).
- ``FUNCtion:ARBitrary <name>`` selects a waveform (in memory, else -224) and restarts the
  channel at its first point; ``FUNCtion:ARBitrary:SRATe`` [Sa/s]; ``FUNCtion:ARBitrary:SYNChronize``
  restarts both channels' arbitrary waveforms together ("FUNCtion:ARBitrary:SYNChronize"). A
  restart takes effect as of the command's arrival (:attr:`.server.Command.received`), however
  long this simulator then takes to advance the twin.
- ``VOLTage`` (amplitude, ``VOLTage:UNIT VPP``), ``VOLTage:OFFSet``, ``VOLTage:LIMit:HIGH/LOW``
  and ``VOLTage:LIMit:STATe``: with limits on, a setting whose ``offset +/- amplitude/2`` leaves
  the limits is refused with -222 (Data out of range) and the old value kept.
- ``OUTPut[1|2] ON|OFF``, ``OUTPut:SYNC ON|OFF``, ``OUTPut:SYNC:SOURce CH1|CH2``: the Sync edge
  rises at the first point of the source channel's arbitrary waveform.
- ``*IDN?``, ``*CLS``, ``*RST``, ``*OPC?``, ``SYSTem:ERRor?`` (``+0,"No error"`` when empty;
  ``-113,"Undefined header"`` for anything not listed here).

Output seen by the plant: ``offset + (amplitude / 2) code / 32767`` [V] per point (times 2 at
the 50 ohm setting), one period of ``points`` at the sample rate, band-limited below half the
point count (the "Normal" interpolation filter).
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

import numpy as np

from .plant import ChannelOutput, Plant, waveform_harmonics
from .server import Command, SimError
from .server import number as _number

__all__ = ["IDN", "VOLATILE_POINTS", "Generator"]

IDN = "Keysight Technologies,33522B,MY00000000,5.00-1.19-2.00-58-00 (hbtest simulator)"
VOLATILE_POINTS = 1_000_000
DAC_FULL_SCALE = 32767
MIN_POINTS = 8
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,11}$")
DEFAULT_ARB = "EXP_RISE"
ERROR_QUEUE = 20


def _exp_rise(points: int = 1000) -> np.ndarray:
    """The built-in EXP_RISE shape as modelled here: ``1 - exp(-5 n / N)`` scaled to +/-32767."""
    w = 1 - np.exp(-5 * np.arange(points) / points)
    w = (w - w.min()) / (w.max() - w.min()) * 2 - 1
    return np.rint(w * DAC_FULL_SCALE).astype(np.int16)


@dataclass
class Channel:
    function: str = "SIN"
    frequency_hz: float = 1000.0
    amplitude_vpp: float = 0.1
    offset_v: float = 0.0
    load_inf: bool = False
    output: bool = False
    limit_on: bool = False
    limit_high: float = 5.0
    limit_low: float = -5.0
    srate: float = 40000.0
    arb: str = DEFAULT_ARB
    memory: dict = field(default_factory=dict)  # name -> int16 codes
    restart_phase: float = 0.0  # twin phase [rad] of the waveform's point 0


class Generator:
    """The instrument behind :class:`~.server.ScpiServer`; see the module docstring."""

    def __init__(self, plant: Plant):
        self.plant = plant
        self.lock = threading.RLock()
        self.errors: list[SimError] = []
        self.default_on_output: list[str] = []
        self.commands: list[str] = []
        self._reset()

    def _reset(self) -> None:
        self.ch = {1: Channel(), 2: Channel()}
        self.swapped = False
        self.sync_on, self.sync_source = True, 1
        for c in (1, 2):
            self.plant.set_output(c, None)

    def push_error(self, e: SimError) -> None:
        if len(self.errors) < ERROR_QUEUE:
            self.errors.append(e)

    def disconnected(self) -> None:
        """A LAN instrument keeps its state when the host goes (outputs stay as they are)."""

    # -- the plant ---------------------------------------------------------------------
    def _waveform(self, c: Channel) -> np.ndarray:
        return c.memory[c.arb] if c.arb in c.memory else _exp_rise()

    def _output(self, n: int) -> ChannelOutput | None:
        c = self.ch[n]
        if not c.output:
            return None
        gain = 1.0 if c.load_inf else 2.0
        if c.function == "ARB":
            codes = self._waveform(c)
            f = c.srate / codes.size
            volts = gain * (c.offset_v + c.amplitude_vpp / 2 * codes.astype(float) / DAC_FULL_SCALE)
            orders, coef = waveform_harmonics(volts, self.plant.fs, f)
            coef = coef * np.exp(-1j * orders * c.restart_phase)
            return ChannelOutput(f, orders, coef)
        return ChannelOutput(c.frequency_hz, np.array([0, 1]), gain * np.array([c.offset_v, c.amplitude_vpp / 2]))

    def _update(self, n: int) -> None:
        c = self.ch[n]
        if c.output and c.function == "ARB" and c.arb not in c.memory:
            self.default_on_output.append(f"CH{n}: default waveform {DEFAULT_ARB} on the output")
        self.plant.set_output(n, self._output(n))

    def sync_phase(self) -> float | None:
        """Twin phase [rad] of the Sync edge (point 0 of the source channel), None when off."""
        c = self.ch[self.sync_source]
        if not self.sync_on or c.function != "ARB":
            return None
        return c.restart_phase

    # -- commands ------------------------------------------------------------------------
    def execute(self, cmd: Command) -> bytes | None:
        with self.lock, self.plant.lock:
            self.commands.append(cmd.header + (" " + cmd.args if cmd.args else ""))
            return self._dispatch(cmd)

    def _dispatch(self, cmd: Command) -> bytes | None:
        nodes, sfx = cmd.nodes, cmd.suffixes
        if nodes[0].startswith("*"):
            return self._common(cmd)
        if nodes[0] == "SYST" and nodes[1:] == ("ERR",) and cmd.query:
            e = self.errors.pop(0) if self.errors else None
            return (f'{e.code:+d},"{e.text}"' if e else '+0,"No error"').encode() + b"\n"
        if nodes[0] == "FORM" and nodes[1:] == ("BORD",):
            return self._border(cmd)
        if nodes[0] == "OUTP":
            return self._outp(cmd, sfx[0])
        n = sfx[0] if nodes[0] == "SOUR" else 1
        rest = nodes[1:] if nodes[0] == "SOUR" else nodes
        if n not in (1, 2):
            raise SimError(-114, "Header suffix out of range")
        return self._source(cmd, n, rest)

    def _common(self, cmd: Command) -> bytes | None:
        h = cmd.nodes[0]
        if h == "*IDN" and cmd.query:
            return IDN.encode() + b"\n"
        if h == "*OPC" and cmd.query:
            return b"1\n"
        if h == "*CLS":
            self.errors.clear()
            return None
        if h == "*RST":
            self._reset()
            return None
        raise SimError(-113, "Undefined header")

    def _border(self, cmd: Command) -> bytes | None:
        if cmd.query:
            return (b"SWAP" if self.swapped else b"NORM") + b"\n"
        v = cmd.args.upper()
        if v not in ("NORM", "NORMAL", "SWAP", "SWAPPED"):
            raise SimError(-224, "Illegal parameter value")
        self.swapped = v.startswith("SWAP")
        return None

    def _outp(self, cmd: Command, n: int) -> bytes | None:
        rest = cmd.nodes[1:]
        arg = cmd.args.upper()
        if rest == ("SYNC",):
            if cmd.query:
                return b"1\n" if self.sync_on else b"0\n"
            self.sync_on = _on_off(arg)
            return None
        if rest == ("SYNC", "SOUR"):
            if arg not in ("CH1", "CH2"):
                raise SimError(-224, "Illegal parameter value")
            self.sync_source = int(arg[2])
            return None
        if n not in (1, 2):
            raise SimError(-114, "Header suffix out of range")
        c = self.ch[n]
        if rest == ("LOAD",):
            if cmd.query:
                return b"+9.9E+37\n" if c.load_inf else b"+5.0E+01\n"
            c.load_inf = arg in ("INF", "INFINITY") or (_number(arg) >= 10e3)
            self._update(n)
            return None
        if rest == ():
            if cmd.query:
                return b"1\n" if c.output else b"0\n"
            c.output = _on_off(arg)
            self._update(n)
            return None
        raise SimError(-113, "Undefined header")

    def _source(self, cmd: Command, n: int, rest: tuple[str, ...]) -> bytes | None:
        c = self.ch[n]
        if rest[:1] == ("VOLT",):
            return self._volt(cmd, n, rest[1:])
        if rest[:1] == ("DATA",):
            return self._data(cmd, n, rest[1:])
        if rest[:1] == ("FUNC",):
            return self._func(cmd, n, rest[1:])
        if rest == ("FREQ",):
            if cmd.query:
                f = c.srate / self._waveform(c).size if c.function == "ARB" else c.frequency_hz
                return f"{f:+.15E}\n".encode()
            c.frequency_hz = _number(cmd.args)
            self._update(n)
            return None
        if rest == ("PHAS", "SYNC"):
            self._restart_both(cmd.received)
            return None
        raise SimError(-113, "Undefined header")

    def _volt(self, cmd: Command, n: int, rest: tuple[str, ...]) -> bytes | None:
        c = self.ch[n]
        if rest == ("UNIT",):
            if cmd.args.upper() != "VPP":
                raise SimError(-224, "Illegal parameter value")
            return None
        if rest in (("LIM", "HIGH"), ("LIM", "LOW")):
            v = _number(cmd.args)
            if rest[1] == "HIGH":
                c.limit_high = v
            else:
                c.limit_low = v
            return None
        if rest == ("LIM", "STAT"):
            c.limit_on = _on_off(cmd.args.upper())
            return None
        if rest in ((), ("OFFS",)):
            if cmd.query:
                return f"{(c.amplitude_vpp if rest == () else c.offset_v):+.15E}\n".encode()
            v = _number(cmd.args)
            amp, off = (v, c.offset_v) if rest == () else (c.amplitude_vpp, v)
            if rest == () and v <= 0:
                raise SimError(-222, "Data out of range")
            if c.limit_on and (off + amp / 2 > c.limit_high + 1e-12 or off - amp / 2 < c.limit_low - 1e-12):
                raise SimError(-222, "Data out of range;value clipped to upper limit")
            c.amplitude_vpp, c.offset_v = amp, off
            self._update(n)
            return None
        raise SimError(-113, "Undefined header")

    def _data(self, cmd: Command, n: int, rest: tuple[str, ...]) -> bytes | None:
        c = self.ch[n]
        if rest in (("ARB",), ("ARB", "DAC")) and not cmd.query:
            name, _, _ = cmd.args.partition(",")
            name = name.strip()
            if cmd.block is None or not NAME.match(name):
                raise SimError(-224, "Illegal parameter value")
            codes = np.frombuffer(cmd.block, dtype="<i2" if self.swapped else ">i2").astype(np.int16)
            if codes.size < MIN_POINTS or np.abs(codes.astype(int)).max() > DAC_FULL_SCALE:
                raise SimError(-222, "Data out of range")
            if name.upper() in (k.upper() for k in c.memory):
                raise SimError(785, "Arb name already exists")
            if sum(v.size for v in c.memory.values()) + codes.size > VOLATILE_POINTS:
                raise SimError(-225, "Out of memory")
            c.memory[name] = codes
            return None
        if rest == ("VOL", "CLE") and not cmd.query:
            c.memory.clear()
            self._update(n)  # a volatile arb selected: the default waveform now plays
            return None
        if rest == ("VOL", "FREE") and cmd.query:
            return f"{VOLATILE_POINTS - sum(v.size for v in c.memory.values())}\n".encode()
        if rest == ("VOL", "CAT") and cmd.query:
            return (",".join(f'"{k}"' for k in c.memory) or '""').encode() + b"\n"
        raise SimError(-113, "Undefined header")

    def _func(self, cmd: Command, n: int, rest: tuple[str, ...]) -> bytes | None:
        c = self.ch[n]
        if rest == ():
            v = cmd.args.upper()
            if v.startswith("ARB"):
                c.function = "ARB"
            elif v.startswith("SIN"):
                c.function = "SIN"
            else:
                raise SimError(-224, "Illegal parameter value")
            self._update(n)
            return None
        if rest == ("ARB",):
            name = cmd.args.strip().strip('"')
            if name not in c.memory:
                raise SimError(-224, "Illegal parameter value")
            c.arb = name
            c.restart_phase = self.plant.phase_at(cmd.received)
            self._update(n)
            return None
        if rest == ("ARB", "SRAT"):
            c.srate = _number(cmd.args)
            self._update(n)
            return None
        if rest == ("ARB", "SYNC"):
            self._restart_both(cmd.received)
            return None
        raise SimError(-113, "Undefined header")

    def _restart_both(self, received: float | None) -> None:
        ph = self.plant.phase_at(received)
        for n in (1, 2):
            self.ch[n].restart_phase = ph
            self._update(n)


def _on_off(arg: str) -> bool:
    if arg in ("ON", "1"):
        return True
    if arg in ("OFF", "0"):
        return False
    raise SimError(-224, "Illegal parameter value")

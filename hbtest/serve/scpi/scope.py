"""A simulated Keysight InfiniiVision 3000T/4000 X-Series oscilloscope used as a digitiser,
written from the InfiniiVision 3000T X-Series Programmer's Guide, sampling the plant
(:mod:`.plant`): channel ``k`` sees the twin's sensor channel ``k - 1``; EXTernal trigger is the
generator's Sync output.

What is simulated, with the programmer's guide section each behaviour comes from:

- Horizontal (":TIMebase:RANGe", ":TIMebase:REFerence", ":TIMebase:POSition"): the screen is 10
  divisions wide and spans ``RANGe`` seconds; ``REFerence LEFT`` puts the time reference **one
  division in from the left edge** (CENTer: at the centre; RIGHt: one division in from the
  right); ``POSition`` is the time from the trigger to the reference. The record therefore
  starts at ``POSition - RANGe / 10`` relative to the trigger with LEFT: **10 % pre-trigger at
  position 0**.
- Trigger (":TRIGger:EDGE:SOURce EXTernal", ":TRIGger:SWEep NORMal"): the record is taken at the
  first rising Sync edge after the pre-trigger part of the record has been acquired (a normal
  sweep waits for it; with no Sync there is no record and ``*OPC?`` after ``:DIGitize`` is not
  answered).
- Acquisition (":ACQuire:TYPE", ":ACQuire:COUNt"): an 8-bit ADC over the 8 vertical divisions
  (":CHANnel<n>:RANGe" full scale, centred on ":CHANnel<n>:OFFSet"). ``NORMal``: 8 bits;
  ``HRESolution``: averaging of fast samples gives 12 bits at these sweep speeds (the guide's
  "up to 12 bits of resolution at slower sweep speeds"); ``AVERage``: ``COUNt`` records at
  successive triggers averaged (12 bits of representation); the acquisition takes that many
  records' time. The scope's sample clock is the plant's (``sample_rate_hz`` of the twin file).
- ``:DIGitize`` (":DIGitize"): one acquisition of the listed channels, then the scope stops;
  ``*OPC?`` answers ``1`` when it is complete (in real time: after the record's last sample).
- Waveform read-out (":WAVeform" subsystem): ``:WAVeform:POINts <n>`` asks for at most ``n``
  points; the scope decimates the screen record by the smallest integer factor that fits and
  returns ``ceil(screen samples / factor)`` points — **fewer than asked when it must**, as the
  preamble says; ``:WAVeform:FORMat WORD|BYTE``, ``:WAVeform:BYTeorder LSBFirst|MSBFirst``,
  ``:WAVeform:UNSigned ON|OFF``; ``:WAVeform:PREamble?`` = format, type (0 NORMal, 1 PEAK,
  2 AVERage, 3 HRESolution), points, count, x increment, x origin (time of the first point
  relative to the trigger), x reference (0), y increment, y origin, y reference; WORD codes
  0x0000 = hole, 0x0001 = clipped low, 0xFFFF = clipped high (BYTE: 0x00, 0x01, 0xFF);
  ``:WAVeform:DATA?`` a definite-length block.
- ``*IDN?``, ``*CLS``, ``*RST``, ``*OPC?``, ``:SYSTem:ERRor?`` (``+0,"No error"``); anything
  else is ``-113,"Undefined header"``.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from .plant import Plant
from .server import Command, SimError
from .server import number as _number

__all__ = ["IDN", "Scope"]

IDN = "KEYSIGHT TECHNOLOGIES,MSOX3024T,MY00000000,07.50.2021102830 (hbtest simulator)"
ACQ_TYPES = {"NORM": 0, "PEAK": 1, "AVER": 2, "HRES": 3}
BITS = {"NORM": 8, "PEAK": 8, "AVER": 12, "HRES": 12}
REFERENCE_DIV = {"LEFT": 1.0, "CENT": 5.0, "RIGH": 9.0}  # divisions from the left edge
ERROR_QUEUE = 30


@dataclass
class Channel:
    range_v: float = 8.0
    offset_v: float = 0.0
    display: bool = True


@dataclass
class Record:
    t: np.ndarray  # s relative to the trigger, per point
    volts: dict  # channel -> volts
    kind: str
    count: int
    ranges: dict = field(default_factory=dict)  # channel -> (range, offset) when taken


class Scope:
    """The instrument behind :class:`~.server.ScpiServer`; see the module docstring.
    ``sync_phase``: a callable giving the twin phase of the Sync edge (None: no Sync)."""

    def __init__(self, plant: Plant, sync_phase, clock=time.monotonic, sleep=time.sleep):
        self.plant = plant
        self.sync_phase = sync_phase
        self._clock, self._sleep = clock, sleep
        self.lock = threading.RLock()
        self.errors: list[SimError] = []
        self.records_taken = 0
        self._reset()

    def _reset(self) -> None:
        self.ch = {k: Channel() for k in (1, 2, 3, 4)}
        self.time_range, self.reference, self.position = 1e-3, "CENT", 0.0
        self.acq_type, self.acq_count = "NORM", 8
        self.points, self.wav_format, self.wav_source = 1000, "BYTE", 1
        self.lsb_first, self.unsigned = False, True
        self.record: Record | None = None
        self._done_at: float | None = None  # wall time the last :DIGitize completes (None: never)

    def push_error(self, e: SimError) -> None:
        if len(self.errors) < ERROR_QUEUE:
            self.errors.append(e)

    # -- commands --------------------------------------------------------------------------
    def execute(self, cmd: Command) -> bytes | None:
        if cmd.nodes == ("*OPC",) and cmd.query:
            return self._opc()
        with self.lock:
            return self._dispatch(cmd)

    def _opc(self) -> bytes | None:
        done = self._done_at
        if done is None:
            return b"1\n"
        if math.isinf(done):
            return None  # waits for a trigger that never comes: no reply
        self._sleep(max(0.0, done - self._clock()))
        return b"1\n"

    def _dispatch(self, cmd: Command) -> bytes | None:
        n0 = cmd.nodes[0]
        if n0 == "*IDN" and cmd.query:
            return IDN.encode() + b"\n"
        if n0 == "*CLS":
            self.errors.clear()
            return None
        if n0 == "*RST":
            self._reset()
            return None
        if n0 == "SYST" and cmd.nodes[1:] == ("ERR",) and cmd.query:
            e = self.errors.pop(0) if self.errors else None
            return (f'{e.code:+d},"{e.text}"' if e else '+0,"No error"').encode() + b"\n"
        handler = {"STOP": self._ignore, "RUN": self._ignore, "SING": self._ignore, "TRIG": self._trigger,
                   "ACQ": self._acquire, "TIM": self._timebase, "CHAN": self._channel, "WAV": self._waveform,
                   "DIG": self._digitize}.get(n0)
        if handler is None:
            raise SimError(-113, "Undefined header")
        return handler(cmd)

    def _ignore(self, cmd: Command) -> None:
        return None

    def _trigger(self, cmd: Command) -> None:
        rest, arg = cmd.nodes[1:], cmd.args.upper()
        allowed = {("MODE",): ("EDGE",), ("SWE",): ("NORM", "NORMAL"), ("SOUR",): ("EXT", "EXTERNAL"),
                   ("EDGE", "SOUR"): ("EXT", "EXTERNAL"), ("SLOP",): ("POS", "POSITIVE"), ("EDGE", "SLOP"): ("POS", "POSITIVE")}
        if rest in (("LEV",), ("EDGE", "LEV")):
            _number(cmd.args)
            return
        if rest not in allowed:
            raise SimError(-113, "Undefined header")
        if arg not in allowed[rest]:  # the simulator models the external rising edge, normal sweep only
            raise SimError(-224, "Illegal parameter value")
        return

    def _acquire(self, cmd: Command) -> bytes | None:
        rest = cmd.nodes[1:]
        if rest == ("TYPE",):
            if cmd.query:
                return self.acq_type.encode() + b"\n"
            v = cmd.args.upper()[:4]
            if v not in ACQ_TYPES:
                raise SimError(-224, "Illegal parameter value")
            self.acq_type = v
            return None
        if rest == ("COUN",):
            n = int(_number(cmd.args))
            if not 2 <= n <= 65536:
                raise SimError(-222, "Data out of range")
            self.acq_count = n
            return None
        raise SimError(-113, "Undefined header")

    def _timebase(self, cmd: Command) -> bytes | None:
        rest = cmd.nodes[1:]
        if cmd.query:
            known: dict[tuple[str, ...], float] = {("RANG",): self.time_range, ("POS",): self.position}
            v = known.get(rest)
            if v is None:
                raise SimError(-113, "Undefined header")
            return f"{v:+.10E}\n".encode()
        if rest == ("RANG",):
            v = _number(cmd.args)
            if not 2e-9 <= v <= 500.0:
                raise SimError(-222, "Data out of range")
            self.time_range = v
        elif rest == ("REF",):
            ref = cmd.args.upper()[:4]
            if ref not in REFERENCE_DIV:
                raise SimError(-224, "Illegal parameter value")
            self.reference = ref
        elif rest == ("POS",):
            self.position = _number(cmd.args)
        else:
            raise SimError(-113, "Undefined header")
        return None

    def _channel(self, cmd: Command) -> bytes | None:
        k = cmd.suffixes[0]
        if k not in self.ch:
            raise SimError(-114, "Header suffix out of range")
        c, rest, arg = self.ch[k], cmd.nodes[1:], cmd.args.upper()
        if rest == ("RANG",):
            v = _number(cmd.args)
            if not 8e-3 <= v <= 40.0:
                raise SimError(-222, "Data out of range")
            c.range_v = v
        elif rest == ("OFFS",):
            c.offset_v = _number(cmd.args)
        elif rest == ("DISP",):
            c.display = arg in ("ON", "1")
        elif rest == ("COUP",):
            if arg != "DC":
                raise SimError(-224, "Illegal parameter value")
        elif rest == ("IMP",):
            if arg not in ("ONEM", "ONEMEG"):
                raise SimError(-224, "Illegal parameter value")
        else:
            raise SimError(-113, "Undefined header")
        return None

    # -- acquisition -------------------------------------------------------------------------
    def _digitize(self, cmd: Command) -> None:
        chans = [int(a.strip().upper().replace("CHANNEL", "").replace("CHAN", "")) for a in cmd.args.split(",") if a.strip()]
        if not chans or any(k not in self.ch for k in chans):
            raise SimError(-224, "Illegal parameter value")
        self.record, self._done_at = None, math.inf
        phase = self.sync_phase()
        if phase is None:
            return
        span = self.time_range
        pre = REFERENCE_DIV[self.reference] * span / 10 - self.position  # record start before the trigger
        count = self.acq_count if self.acq_type == "AVER" else 1
        t0_wall = self._clock()
        recs = []
        for _ in range(count):
            got = self.plant.record_after(max(pre, 0.0), phase, pre, span)
            if got is None:
                return
            recs.append(got)
        t, _ = recs[0]
        n = min(r[0].size for r in recs)
        volts = np.mean([r[1][:, :n] for r in recs], axis=0)
        names = {k: k - 1 for k in chans if k - 1 < volts.shape[0]}
        self.record = Record(t[:n], {k: volts[i] for k, i in names.items()}, self.acq_type, count,
                             {k: (self.ch[k].range_v, self.ch[k].offset_v) for k in names})
        self._done_at = self.plant.wall_at_twin_now() if count else t0_wall
        self.records_taken += 1
        return

    def _waveform(self, cmd: Command) -> bytes | None:
        rest, arg = cmd.nodes[1:], cmd.args.upper()
        if rest == ("FORM",):
            if arg[:4] not in ("WORD", "BYTE"):
                raise SimError(-224, "Illegal parameter value")
            self.wav_format = arg[:4]
        elif rest == ("BYT",):
            self.lsb_first = arg.startswith("LSBF")
        elif rest == ("UNS",):
            self.unsigned = arg in ("ON", "1")
        elif rest == ("POIN", "MODE"):
            if arg[:3] not in ("RAW", "NOR", "MAX"):
                raise SimError(-224, "Illegal parameter value")
        elif rest == ("POIN",):
            if cmd.query:
                return f"{self._decimated()[1]}\n".encode()
            n = int(_number(cmd.args))
            if n < 100:
                raise SimError(-222, "Data out of range")
            self.points = n
        elif rest == ("SOUR",):
            k = int(arg.replace("CHANNEL", "").replace("CHAN", "") or 0)
            if k not in self.ch:
                raise SimError(-224, "Illegal parameter value")
            self.wav_source = k
        elif rest == ("PRE",) and cmd.query:
            return self._preamble()
        elif rest == ("DATA",) and cmd.query:
            return self._data()
        else:
            raise SimError(-113, "Undefined header")
        return None

    def _decimated(self) -> tuple[int, int]:
        n = self.record.t.size if self.record is not None else int(round(self.time_range * self.plant.fs))
        d = max(1, math.ceil(n / self.points))
        return d, math.ceil(n / d)

    def _codes(self) -> tuple[np.ndarray, float, float, int]:
        """(16-bit codes of the source channel, y increment, y origin, y reference)."""
        rec = self.record
        if rec is None or self.wav_source not in rec.volts:
            raise SimError(-222, "Data out of range;no data for the waveform source")
        d, _ = self._decimated()
        rng, off = rec.ranges[self.wav_source]
        v = rec.volts[self.wav_source][::d]
        bits = BITS[rec.kind]
        lsb = rng / 2**bits
        q = np.rint((v - off) / lsb)
        top = 2 ** (bits - 1) - 1
        codes = (32768 + np.clip(q, -top, top) * 2 ** (16 - bits)).astype(np.int64)
        codes[q > top] = 0xFFFF
        codes[q < -top] = 0x0001
        return codes, rng / 65536, off, 32768

    def _preamble(self) -> bytes:
        rec = self.record
        if rec is None:
            raise SimError(-222, "Data out of range;no data")
        d, npts = self._decimated()
        _, yinc, yorg, yref = self._codes()
        fmt = 1 if self.wav_format == "WORD" else 0
        if fmt == 0:
            yinc, yref = yinc * 256, 128
        dt = 1.0 / self.plant.fs * d
        vals = [fmt, ACQ_TYPES[rec.kind], npts, rec.count, dt, float(rec.t[0]), 0, yinc, yorg, yref]
        return (",".join(f"{v:+d}" if isinstance(v, int) else f"{v:+.10E}" for v in vals)).encode() + b"\n"

    def _data(self) -> bytes:
        codes, *_ = self._codes()
        if self.wav_format == "BYTE":
            b = np.where(codes == 0xFFFF, 0xFF, np.where(codes == 0x0001, 0x01, codes >> 8))
            payload = (b if self.unsigned else b - 128).astype(np.uint8 if self.unsigned else np.int8).tobytes()
        else:
            order = "<" if self.lsb_first else ">"
            payload = (codes if self.unsigned else codes - 32768).astype(order + ("u2" if self.unsigned else "i2")).tobytes()
        n = str(len(payload))
        return b"#" + str(len(n)).encode() + n.encode() + payload + b"\n"

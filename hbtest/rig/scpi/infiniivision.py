"""Keysight/Agilent InfiniiVision oscilloscope used as a digitiser (SCPI over LAN, port 5025).

Units: volts, seconds. Channels are 1..4 (``CHANnel<n>``).

Acquisition: normal (not auto) triggering on the EXTernal trigger input, rising edge — wired to
the generator's Sync output, so the trigger instant is the generator's waveform point 0, i.e.
phase 0 of the demand (see :mod:`hbtest.rig.scpi.rig`). ``:TIMebase:REFerence LEFT`` puts the
time reference one division (of ten) in from the left edge of the screen (InfiniiVision 3000T/4000
X-Series Programmer's Guide, ":TIMebase:REFerence"), and ``:TIMebase:POSition`` is the time from
the trigger to that reference (":TIMebase:POSition"): the driver sets the position to one
division (range / 10), so the screen starts at the trigger; sample times are taken from the
preamble all the same (a scope that clamps the position shows up there, never as a shifted
phase). ``:DIGitize`` takes one record of all used channels; ``*OPC?`` waits for it with a
timeout sized from the record length.

Acquisition type ``HRESolution`` (":ACQuire:TYPE"): at slow sweep speeds the scope averages
consecutive ADC samples of its 8-bit converter into up to 12 bits (``NORMal`` keeps 8 bits:
an LSB of range/256, 94 mV on a 24 V range). Ranges come from the rig file; ``hbtest design``
predicts the levels to choose them from; with ``autorange_headroom`` the rig narrows each
channel to its signal between records (:mod:`hbtest.rig.scpi.ranging`, :meth:`InfiniiVision.set_range`).

Read-out per channel: ``:WAVeform:SOURce CHANnel<n>``, ``:WAVeform:PREamble?`` and
``:WAVeform:DATA?`` with ``:WAVeform:FORMat WORD``, ``:WAVeform:BYTeorder LSBFirst``,
``:WAVeform:UNSigned ON`` (uint16 codes). The preamble is ten comma-separated fields::

    format (0 BYTE, 1 WORD, 4 ASCII), type, points, count,
    x_increment [s], x_origin [s], x_reference, y_increment [V], y_origin [V], y_reference

and a sample is ``t_i = (i - x_reference) x_increment + x_origin`` [s after the trigger],
``v_i = (code_i - y_reference) y_increment + y_origin`` [V]. Special WORD codes: 0x0000 a hole
(no data: an error here), 0x0001 clipped low, 0xFFFF clipped high — a clipped sample is
reported as over-range of its channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...errors import InstrumentError
from .link import ScpiLink

__all__ = ["InfiniiVision", "Preamble", "Record", "CODE_HOLE", "CODE_CLIPPED_LOW", "CODE_CLIPPED_HIGH"]

CODE_HOLE = 0x0000
CODE_CLIPPED_LOW = 0x0001
CODE_CLIPPED_HIGH = 0xFFFF
WORD_FORMAT = 1
OPC_MARGIN = 3.0  # *OPC? timeout = OPC_MARGIN x (record + trigger wait) + the link timeout


@dataclass(frozen=True)
class Preamble:
    format: int
    type: int
    points: int
    count: int
    x_increment: float
    x_origin: float
    x_reference: float
    y_increment: float
    y_origin: float
    y_reference: float

    def times(self) -> np.ndarray:
        """Sample times [s] after the trigger."""
        return (np.arange(self.points) - self.x_reference) * self.x_increment + self.x_origin

    def volts(self, codes: np.ndarray) -> np.ndarray:
        return (np.asarray(codes, dtype=float) - self.y_reference) * self.y_increment + self.y_origin


@dataclass(frozen=True)
class Record:
    """One digitised record: ``t`` [s after the trigger], ``volts`` per channel number,
    ``overrange``: channel numbers with a clipped sample."""

    t: np.ndarray
    volts: dict
    overrange: frozenset


@dataclass
class InfiniiVision:
    """Driver of one InfiniiVision scope over a :class:`~hbtest.rig.scpi.link.ScpiLink`."""

    link: ScpiLink
    timeout_ms: float = 5000.0

    @property
    def name(self) -> str:
        return self.link.name

    def identify(self) -> str:
        idn = self.link.query("*IDN?")
        if idn.count(",") < 3:
            raise self.link.bad_reply("*IDN?", idn, "expected 'maker,model,serial,firmware'")
        return idn

    def setup(self, trigger_level_v: float) -> None:
        """Clear status; WORD/LSB/unsigned transfers; raw record; external rising-edge trigger
        in normal sweep (no auto-trigger: every record starts at a Sync edge); trigger at the
        left edge of the record."""
        w = self.link.write
        w("*CLS")
        w(":STOP")
        w(":ACQ:TYPE HRES")
        w(":WAV:FORM WORD")
        w(":WAV:BYT LSBF")
        w(":WAV:UNS ON")
        w(":WAV:POIN:MODE RAW")
        w(":TRIG:MODE EDGE")
        w(":TRIG:SWE NORM")
        w(":TRIG:SOUR EXT")
        w(":TRIG:SLOP POS")
        w(f":TRIG:LEV {trigger_level_v:.6g}")
        w(":TIM:REF LEFT")
        self.check_errors("setup")

    def errors(self, max_reads: int = 20) -> list[str]:
        """Drain the error queue (``:SYSTem:ERRor?``) until ``+0,"No error"``."""
        return self.link.drain_errors(":SYST:ERR?", max_reads)

    def check_errors(self, after: str) -> None:
        self.link.check_errors(after, ":SYST:ERR?")

    def configure_channel(self, ch: int, range_v: float, offset_v: float = 0.0) -> None:
        """DC coupled, 1 Mohm, full-scale ``range_v`` [V] (8 divisions) centred on ``offset_v``."""
        w = self.link.write
        w(f":CHAN{ch}:DISP ON")
        w(f":CHAN{ch}:COUP DC")
        w(f":CHAN{ch}:IMP ONEM")
        w(f":CHAN{ch}:RANG {range_v:.6g}")
        w(f":CHAN{ch}:OFFS {offset_v:.6g}")

    def set_range(self, ch: int, range_v: float) -> None:
        """Full-scale range ``range_v`` [V] (8 divisions) of channel ``ch``; offset unchanged."""
        self.link.write(f":CHAN{ch}:RANG {range_v:.6g}")

    def set_record(self, duration_s: float, points: int) -> None:
        """Record ``duration_s`` [s] (full screen, starting at the trigger: position one
        division right of the LEFT reference) with up to ``points`` samples read back."""
        self.link.write(f":TIM:RANG {duration_s:.9g}")
        self.link.write(f":TIM:POS {duration_s / 10:.9g}")
        self.link.write(f":WAV:POIN {int(points)}")
        self.check_errors("setting the record")

    def digitize(self, channels, wait_s: float) -> None:
        """One triggered record of ``channels``; blocks until done (``*OPC?``) for at most
        about ``OPC_MARGIN * wait_s`` plus the link timeout."""
        self.link.write(":DIG " + ",".join(f"CHAN{c}" for c in channels))
        self.link.set_timeout_ms(self.timeout_ms + OPC_MARGIN * wait_s * 1e3)
        try:
            reply = self.link.query("*OPC?")
        finally:
            self.link.set_timeout_ms(self.timeout_ms)
        if reply.lstrip("+") != "1":
            raise self.link.bad_reply("*OPC?", reply, "expected 1")

    def preamble(self) -> Preamble:
        reply = self.link.query(":WAV:PRE?")
        parts = reply.split(",")
        if len(parts) != 10:
            raise self.link.bad_reply(":WAV:PRE?", reply, f"expected 10 fields, got {len(parts)}")
        try:
            v = [float(p) for p in parts]
        except ValueError:
            raise self.link.bad_reply(":WAV:PRE?", reply, "non-numeric field") from None
        if not all(np.isfinite(v)) or any(not float(x).is_integer() for x in v[:4]):
            raise self.link.bad_reply(":WAV:PRE?", reply, "bad field")
        pre = Preamble(int(v[0]), int(v[1]), int(v[2]), int(v[3]), *v[4:])
        if pre.format != WORD_FORMAT:
            raise self.link.bad_reply(":WAV:PRE?", reply, f"format {pre.format}, expected 1 (WORD)")
        if pre.points < 1 or pre.x_increment <= 0 or pre.y_increment <= 0:
            raise self.link.bad_reply(":WAV:PRE?", reply, "non-positive points or increments")
        return pre

    def read_channel(self, ch: int) -> tuple[Preamble, np.ndarray]:
        """Preamble and uint16 codes of channel ``ch`` of the last record."""
        self.link.write(f":WAV:SOUR CHAN{ch}")
        pre = self.preamble()
        codes = self.link.query_block(":WAV:DATA?", "H")
        if codes.size != pre.points:
            raise InstrumentError(f"{self.name}: CHAN{ch}: {codes.size} samples in :WAV:DATA?, preamble says {pre.points}")
        if np.any(codes == CODE_HOLE):
            raise InstrumentError(f"{self.name}: CHAN{ch}: record has holes (samples not acquired)")
        return pre, codes

    def read(self, channels) -> Record:
        """Read ``channels`` of the last record; all must share one time base."""
        t, volts, over = None, {}, set()
        for ch in channels:
            pre, codes = self.read_channel(ch)
            tc = pre.times()
            if t is None:
                t = tc
            elif tc.size != t.size or not np.allclose(tc, t, rtol=0, atol=1e-3 * pre.x_increment):
                raise InstrumentError(f"{self.name}: CHAN{ch} has a different time base from CHAN{channels[0]}")
            volts[ch] = pre.volts(codes)
            if np.any((codes == CODE_CLIPPED_LOW) | (codes == CODE_CLIPPED_HIGH)):
                over.add(ch)
        return Record(t=t, volts=volts, overrange=frozenset(over))

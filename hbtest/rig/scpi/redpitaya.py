"""Red Pitaya STEMlab 125-14 driver (its SCPI server, raw TCP port 5000): the generator role
(two arbitrary outputs) and the digitiser role (two inputs, the 16384-sample circular buffer).

Written from the Red Pitaya documentation's SCPI command pages ("Acquisition", "Signal
generator", the example "Synchronised one-pulse signal generation and acquisition") and the
command table of its ``scpi-server`` (see :mod:`hbtest.serve.scpi.redpitaya` for the list).

Units: volts at the board's connectors (outputs +/-1 V into high impedance; inputs +/-1 V on the
LV jumper, +/-20 V on HV), hertz, samples. Replies end in ``\\r\\n`` (stripped by the link).

Generator: ``SOUR<n>:FUNC ARBITRARY``; the waveform is ``SOUR<n>:TRAC:DATA:DATA`` of samples in
[-1, 1] (one period), the output ``offset + amplitude * sample``: a waveform of peak 1 played at
amplitude ``A`` and offset ``o`` stays within ``|o| + A``, which the board itself refuses
beyond 1 V. :meth:`RedPitaya.set_level` changes amplitude and offset in the order that keeps
``|o| + A`` within the larger of the old and new values. ``SOUR:TRig:INT`` restarts both
channels at sample 0 together.

Acquisition: ``ACQ:DATA:FORMAT BIN``, ``ACQ:DATA:UNITS RAW`` (signed 14-bit codes, little-endian
with ``ACQ:DATA:BYTE:ORDER LEND``), ``ACQ:AVG OFF`` (point samples). Volts are
``code / 8192 * full scale`` with the full scale of the jumper (``ACQ:SOUR<n>:GAIN LV|HV`` set to
match); a code at -8192 or +8191 is a clipped (over-range) sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...errors import InstrumentError
from .keysight33500b import fmt_toward_zero
from .link import ScpiLink

__all__ = ["RedPitaya", "BUFFER", "BASE_HZ", "FULL_SCALE_V", "OUT_FULL_SCALE_V", "CODE_MAX", "CODE_MIN"]

BASE_HZ = 125e6
BUFFER = 16384
OUT_FULL_SCALE_V = 1.0
FULL_SCALE_V = {"LV": 1.0, "HV": 20.0}
CODE_MAX, CODE_MIN = 8191, -8192


@dataclass
class Level:
    """What the driver last told one output (amplitude and offset [V], output on)."""

    amplitude_v: float = 0.0
    offset_v: float = 0.0
    output: bool = False


@dataclass
class RedPitaya:
    """One board over a :class:`~hbtest.rig.scpi.link.ScpiLink`."""

    link: ScpiLink
    levels: dict = field(default_factory=lambda: {1: Level(), 2: Level()})

    @property
    def name(self) -> str:
        return self.link.name

    def identify(self) -> str:
        idn = self.link.query("*IDN?")
        if idn.count(",") < 3:
            raise self.link.bad_reply("*IDN?", idn, "expected 'maker,model,serial,firmware'")
        return idn

    def errors(self, max_reads: int = 20) -> list[str]:
        """Drain ``SYST:ERR?`` until error 0."""
        return self.link.drain_errors("SYST:ERR?", max_reads)

    def check_errors(self, after: str) -> None:
        self.link.check_errors(after, "SYST:ERR?")

    # -- generator -----------------------------------------------------------------------------
    def reset(self) -> None:
        """Outputs off first, then generator and acquisition reset, error queue cleared."""
        self.outputs_off()
        for c in ("GEN:RST", "ACQ:RST", "*CLS"):
            self.link.write(c)
        self.levels = {1: Level(), 2: Level()}

    def setup_output(self, ch: int, frequency_hz: float) -> None:
        """Output ``ch`` (off) as a continuous arbitrary waveform at zero level (its samples
        follow with :meth:`set_samples`)."""
        self.set_level(ch, 0.0, 0.0)
        self.link.write(f"SOUR{ch}:FUNC ARBITRARY")
        self.link.write(f"SOUR{ch}:BURS:STAT CONTINUOUS")
        self.set_frequency(ch, frequency_hz)

    def set_samples(self, ch: int, samples: np.ndarray) -> None:
        """One period of ``samples`` (all within [-1, 1], at most 16384)."""
        s = np.asarray(samples, dtype=float)
        if s.ndim != 1 or not 1 <= s.size <= BUFFER or np.abs(s).max(initial=0) > 1.0:
            raise ValueError(f"{self.name}: a waveform is 1..{BUFFER} samples within [-1, 1]")
        self.link.write(f"SOUR{ch}:TRAC:DATA:DATA " + ",".join(f"{x:.6f}" for x in s))

    def set_frequency(self, ch: int, frequency_hz: float) -> None:
        self.link.write(f"SOUR{ch}:FREQ:FIX {frequency_hz:.12g}")

    def set_level(self, ch: int, amplitude_v: float, offset_v: float) -> None:
        """Amplitude and offset [V], rounded toward zero, written in the order that never
        passes through ``|o| + A`` above the larger of the old and new values."""
        lv = self.levels[ch]
        a, o = fmt_toward_zero(max(amplitude_v, 0.0)), fmt_toward_zero(offset_v)
        amplitude_first = abs(lv.offset_v) + float(a) <= abs(float(o)) + lv.amplitude_v
        writes = [(f"SOUR{ch}:VOLT {a}", "amplitude_v", a), (f"SOUR{ch}:VOLT:OFFS {o}", "offset_v", o)]
        for cmd, attr, value in writes if amplitude_first else writes[::-1]:
            self.link.write(cmd)
            setattr(lv, attr, float(value))

    def restart(self) -> None:
        """Both channels restart at sample 0 together (the generator-start trigger)."""
        self.link.write("SOUR:TRig:INT")

    def output_on(self, ch: int) -> None:
        self.link.write(f"OUTPUT{ch}:STATE ON")
        self.levels[ch].output = True

    def outputs_off(self, channels=(1, 2)) -> None:
        """``OUTPUT<n>:STATE OFF`` on every channel, each tried whatever the others do; the
        first failure is raised after all were tried."""
        first: BaseException | None = None
        for ch in channels:
            try:
                self.link.write(f"OUTPUT{ch}:STATE OFF")
                self.levels[ch].output = False
            except BaseException as e:  # noqa: BLE001 - the other channel's output-off must still run
                first = first or e
        if first is not None:
            raise first

    # -- daisy chain -------------------------------------------------------------------------------
    def send_generator_trigger(self) -> None:
        """This board's generator start goes out on the daisy chain (to the others' EXT trigger)."""
        self.link.write("DAISY:TRig:Out:SOUR DAC")
        self.link.write("DAISY:TRig:Out:ENable ON")

    def follow_chain_clock(self) -> None:
        self.link.write("DAISY:SYNC:CLK ON")

    # -- acquisition -------------------------------------------------------------------------------
    def setup_acquisition(self, decimation: int, jumpers: dict, delay: int) -> None:
        """Decimation, point samples, signed codes little-endian in blocks, the gain setting of
        each input's jumper, and the trigger delay [samples after the buffer centre]."""
        w = self.link.write
        w(f"ACQ:DEC {int(decimation)}")
        w("ACQ:AVG OFF")
        w("ACQ:DATA:FORMAT BIN")
        w("ACQ:DATA:UNITS RAW")
        w("ACQ:DATA:BYTE:ORDER LEND")
        for ch, jumper in sorted(jumpers.items()):
            w(f"ACQ:SOUR{ch}:GAIN {jumper}")
        w(f"ACQ:TRig:DLY {int(delay)}")

    def arm(self, source: str) -> None:
        """Start writing the buffer and arm the trigger on ``source``; returns once the board
        answers that it waits for it. Each board is its own connection: without that answer a
        later write to another board (the generator start) may be acted on first, and this
        board's acquisition would miss the trigger it is armed for."""
        self.link.write("ACQ:START")
        self.link.write(f"ACQ:TRig {source}")
        if self.triggered():
            raise InstrumentError(f"{self.name}: the acquisition triggered as soon as it was armed on "
                                  f"{source}, before its source fired")

    def triggered(self) -> bool:
        reply = self.link.query("ACQ:TRig:STAT?")
        if reply not in ("TD", "WAIT"):
            raise self.link.bad_reply("ACQ:TRig:STAT?", reply, "expected TD or WAIT")
        return reply == "TD"

    def position(self, which: str) -> int:
        """``ACQ:WPOS?`` (``which="WPOS"``) or ``ACQ:TPOS?``: a buffer position 0..16383."""
        reply = self.link.query(f"ACQ:{which}?")
        if not reply.isdigit() or int(reply) >= BUFFER:
            raise self.link.bad_reply(f"ACQ:{which}?", reply, f"expected a position 0..{BUFFER - 1}")
        return int(reply)

    def read_codes(self, ch: int, start: int, count: int) -> np.ndarray:
        """``count`` signed codes of input ``ch`` from buffer position ``start`` (wrapping)."""
        cmd = f"ACQ:SOUR{ch}:DATA:STA:N? {int(start)},{int(count)}"
        codes = self.link.query_block(cmd, "h")
        if codes.size != count:
            raise InstrumentError(f"{self.name}: {cmd!r} gave {codes.size} samples, {count} asked for")
        return codes

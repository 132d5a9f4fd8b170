"""Keysight 33500B-series two-channel function/arbitrary waveform generator (SCPI over LAN).

Units: volts (amplitudes are peak-to-peak, ``VOLT:UNIT VPP``, into the HIGH-Z load set by
:meth:`Keysight33500B.set_load_infinity`), hertz, degrees, samples per second. Channels are 1
and 2. Every setting the driver writes is also kept in :attr:`Keysight33500B.state` (what the
instrument was told), which the safe ramp-down starts from.

Output model used for the limits: with an arbitrary waveform of DAC codes ``c[n]`` in
``[-32767, 32767]``, amplitude ``A`` [Vpp] and offset ``o`` [V] the generator puts out
``o + (A / 2) c[n] / 32767``, so ``|o| + A / 2`` bounds the output whatever the waveform.

Arming order (:meth:`Keysight33500B.arm_channel`, then :meth:`Keysight33500B.output_on`): output load
(``OUTP:LOAD INF`` — the default 50 ohm setting would double the voltage into a high-impedance
amplifier input), the instrument's own voltage limits (``VOLT:LIM:HIGH/LOW``, ``VOLT:LIM:STAT
ON``: the generator itself then refuses any amplitude/offset beyond them), the waveform, and
only then ``OUTP ON``.

Arbitrary waveforms are sent as ``SOURce<n>:DATA:ARBitrary:DAC <name>,#<block>`` of int16
little-endian codes (``FORMat:BORDer SWAPped``); the sample rate ``FUNCtion:ARBitrary:SRATe``
is ``points * f`` so one waveform is exactly one period.

Volatile memory (33500 Series Operating and Service Guide, "DATA Subsystem": DATA:ARBitrary,
DATA:VOLatile:CLEar/FREE?): a name cannot be written twice (+785 on the instrument), and
``DATA:VOLatile:CLEar`` reloads the built-in default waveform on a channel playing a volatile
one. So volatile memory is cleared **only with both outputs off** (:meth:`Keysight33500B.setup`,
and after the safe ramp-down), never while an output is on; names restart at ``HB<ch>_0`` only
after such a clear; a waveform already in memory (same codes) is selected again by name instead
of uploaded twice; memory that would overflow with an output on is an error (the run stops
resumably; the next open clears it with the outputs off).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np

from ...errors import InstrumentError
from .link import ScpiLink

__all__ = ["Keysight33500B", "ChannelState", "DAC_FULL_SCALE", "MIN_AMPLITUDE_VPP", "VOLATILE_POINTS", "fmt_toward_zero"]

DAC_FULL_SCALE = 32767  # DATA:ARB:DAC codes span -32767..32767
MIN_AMPLITUDE_VPP = 0.002  # smallest amplitude into HIGH Z (1 mVpp into 50 ohm)
VOLATILE_POINTS = 1_000_000  # points of volatile arb memory per channel (the 33500B's standard memory)
VOLT_DIGITS = 6  # volts written with 1 uV resolution, rounded toward zero (never above a limit)
TRUNC_FUZZ = 1e-6  # of a quantum: at most 1e-12 V above the computed value
RAMP_DOWN_STEPS = 20  # amplitude steps of the safe ramp-down


def fmt_toward_zero(x: float, digits: int = VOLT_DIGITS) -> str:
    """``x`` with ``digits`` decimals, rounded toward zero: a written value never exceeds the
    value computed (so a checked peak stays checked after formatting) by more than
    ``TRUNC_FUZZ`` of a quantum (binary floats such as 1.5005 = 1.50049999... stay 1.500500)."""
    q = 10.0**digits
    v = math.trunc(x * q + math.copysign(TRUNC_FUZZ, x)) / q
    s = f"{v:.{digits}f}"
    return "0." + "0" * digits if float(s) == 0 else s


@dataclass
class ChannelState:
    """What the driver last told one channel (None = not set since open)."""

    amplitude_vpp: float | None = None
    offset_v: float = 0.0
    output: bool = False
    waveform: str | None = None
    codes: np.ndarray | None = None
    sample_rate: float | None = None
    uploads: int = 0
    limit_v: float | None = None
    stored: dict = field(default_factory=dict)  # codes bytes -> name, waveforms in volatile memory
    used_points: int = 0


@dataclass
class Keysight33500B:
    """Driver of one 33500B (two channels) over a :class:`~hbtest.rig.scpi.link.ScpiLink`."""

    link: ScpiLink
    state: dict = field(default_factory=lambda: {1: ChannelState(), 2: ChannelState()})

    @property
    def name(self) -> str:
        return self.link.name

    def _ch(self, ch: int) -> ChannelState:
        if ch not in self.state:
            raise ValueError(f"{self.name}: channel must be 1 or 2, got {ch!r}")
        return self.state[ch]

    # -- identification / housekeeping -------------------------------------------------
    def identify(self) -> str:
        idn = self.link.query("*IDN?")
        if idn.count(",") < 3:
            raise self.link.bad_reply("*IDN?", idn, "expected 'maker,model,serial,firmware'")
        return idn

    def setup(self) -> None:
        """Clear status, little-endian blocks, both outputs off, then (outputs off) volatile
        memory cleared on both channels (a known, safe start: names may restart)."""
        self.link.write("*CLS")
        self.link.write("FORM:BORD SWAP")
        for ch in (1, 2):
            self.output_off(ch)
        for ch in (1, 2):
            self.clear_volatile(ch)

    def clear_volatile(self, ch: int) -> None:
        """``DATA:VOL:CLE`` on ``ch`` — refused (RuntimeError) while any output is on: the
        default waveform would reach the actuators."""
        st = self._ch(ch)
        if any(s.output for s in self.state.values()):
            raise RuntimeError(f"{self.name}: volatile memory is never cleared with an output on")
        self.link.write(f"SOUR{ch}:DATA:VOL:CLE")
        st.stored, st.used_points, st.uploads, st.waveform, st.codes = {}, 0, 0, None, None

    def check_errors(self, after: str) -> None:
        """``SYST:ERR?`` drained; any error is an InstrumentError naming ``after``."""
        self.link.check_errors(after, "SYST:ERR?")

    def errors(self, max_reads: int = 20) -> list[str]:
        """Drain the error queue (``SYST:ERR?``) until ``+0,"No error"``."""
        return self.link.drain_errors("SYST:ERR?", max_reads)

    # -- per-channel settings ----------------------------------------------------------
    def set_load_infinity(self, ch: int) -> None:
        self._ch(ch)
        self.link.write(f"OUTP{ch}:LOAD INF")

    def set_voltage_limits(self, ch: int, limit_v: float) -> None:
        """The generator's own output limits ``[-limit_v, +limit_v]`` [V], switched on."""
        st = self._ch(ch)
        lim = fmt_toward_zero(limit_v)
        self.link.write(f"SOUR{ch}:VOLT:LIM:HIGH {lim}")
        self.link.write(f"SOUR{ch}:VOLT:LIM:LOW -{lim}")
        self.link.write(f"SOUR{ch}:VOLT:LIM:STAT ON")
        st.limit_v = float(lim)

    def set_frequency(self, ch: int, frequency_hz: float) -> None:
        self._ch(ch)
        self.link.write(f"SOUR{ch}:FREQ {frequency_hz:.12g}")

    def set_amplitude(self, ch: int, vpp: float) -> None:
        st = self._ch(ch)
        s = fmt_toward_zero(max(vpp, MIN_AMPLITUDE_VPP))
        self.link.write(f"SOUR{ch}:VOLT {s}")
        st.amplitude_vpp = float(s)

    def set_offset(self, ch: int, volts: float) -> None:
        st = self._ch(ch)
        s = fmt_toward_zero(volts)
        self.link.write(f"SOUR{ch}:VOLT:OFFS {s}")
        st.offset_v = float(s)

    def set_phase(self, ch: int, degrees: float) -> None:
        self._ch(ch)
        self.link.write(f"SOUR{ch}:PHAS {degrees:.9g}")

    def sync_phase(self) -> None:
        """Restart both channels together (``PHAS:SYNC``)."""
        self.link.write("SOUR1:PHAS:SYNC")

    def sync_arbs(self) -> None:
        """Restart both channels' arbitrary waveforms at their first point together."""
        self.link.write("SOUR1:FUNC:ARB:SYNC")

    def set_sync_output(self, source_channel: int = 1) -> None:
        """Sync connector: a TTL edge at the start (point 0) of ``source_channel``'s waveform."""
        self._ch(source_channel)
        self.link.write(f"OUTP:SYNC:SOUR CH{source_channel}")
        self.link.write("OUTP:SYNC ON")

    def output_on(self, ch: int) -> None:
        st = self._ch(ch)
        if st.limit_v is None or st.amplitude_vpp is None:
            raise RuntimeError(f"{self.name}: channel {ch}: set the load, limits and waveform before output on")
        self.link.write(f"OUTP{ch} ON")
        st.output = True

    def output_off(self, ch: int) -> None:
        st = self._ch(ch)
        self.link.write(f"OUTP{ch} OFF")
        st.output = False

    def arm_channel(self, ch: int, limit_v: float, codes: np.ndarray, sample_rate: float, amplitude_vpp: float, offset_v: float) -> None:
        """Everything before ``OUTP ON``, in the required order: load (HIGH Z), volts as Vpp,
        the generator's own limits, then the waveform and its level. The output stays off."""
        self.set_load_infinity(ch)
        self.link.write(f"SOUR{ch}:VOLT:UNIT VPP")
        self.set_voltage_limits(ch, limit_v)
        self.upload_arb(ch, codes, sample_rate)
        self.set_level(ch, amplitude_vpp, offset_v)

    # -- arbitrary waveforms -----------------------------------------------------------
    def upload_arb(self, ch: int, codes: np.ndarray, sample_rate: float) -> str:
        """Upload DAC ``codes`` (int16, one period) as a new volatile waveform and play it at
        ``sample_rate`` [Sa/s] (:meth:`store_arb` then :meth:`select_arb`). Returns its name."""
        name = self.store_arb(ch, codes)
        self.select_arb(ch, name, codes, sample_rate)
        return name

    def store_arb(self, ch: int, codes: np.ndarray) -> str:
        """Put DAC ``codes`` (int16, one period) in volatile memory without playing them (a
        waveform already there is not sent again). Returns its name."""
        st = self._ch(ch)
        codes = np.asarray(codes)
        if codes.ndim != 1 or codes.size < 8 or np.abs(codes).max(initial=0) > DAC_FULL_SCALE:
            raise ValueError(f"{self.name}: waveform needs >= 8 codes within +/-{DAC_FULL_SCALE}")
        key = codes.astype("<i2").tobytes()
        name = st.stored.get(key)
        if name is None:
            if st.used_points + codes.size > VOLATILE_POINTS:
                if any(s.output for s in self.state.values()):
                    raise InstrumentError(f"{self.name}: channel {ch}: volatile arb memory full ({st.used_points} points) "
                                          "with an output on: not cleared live; resume starts from a cleared memory")
                self.clear_volatile(ch)
            name = f"HB{ch}_{st.uploads}"
            st.uploads += 1
            self.link.write_block(f"SOUR{ch}:DATA:ARB:DAC {name},", codes.astype("<i2"), "h")
            st.stored[key] = name
            st.used_points += codes.size
        return name

    def select_arb(self, ch: int, name: str, codes: np.ndarray, sample_rate: float) -> None:
        """Play the stored waveform ``name`` (its ``codes``) at ``sample_rate`` [Sa/s]: the
        channel restarts at its first point when the command lands (``FUNC:ARB``)."""
        st = self._ch(ch)
        self.link.write(f"SOUR{ch}:FUNC:ARB {name}")
        if st.sample_rate != sample_rate:
            self.link.write(f"SOUR{ch}:FUNC:ARB:SRAT {sample_rate:.12g}")
            st.sample_rate = sample_rate
        if st.waveform is None:
            self.link.write(f"SOUR{ch}:FUNC ARB")
        st.waveform, st.codes = name, np.asarray(codes).astype(np.int16)

    def set_level(self, ch: int, amplitude_vpp: float, offset_v: float) -> None:
        """Change amplitude and offset in the order that keeps ``|o| + A/2`` within the
        larger of the old and new values at every intermediate state."""
        st = self._ch(ch)
        a_old = st.amplitude_vpp if st.amplitude_vpp is not None else MIN_AMPLITUDE_VPP
        amplitude_first = abs(st.offset_v) + max(amplitude_vpp, MIN_AMPLITUDE_VPP) / 2 <= abs(offset_v) + a_old / 2
        if amplitude_first:
            self.set_amplitude(ch, amplitude_vpp)
            self.set_offset(ch, offset_v)
        else:
            self.set_offset(ch, offset_v)
            self.set_amplitude(ch, amplitude_vpp)

    def ramp_down(self, channels=(1, 2), duration_s: float = 1.0, steps: int = RAMP_DOWN_STEPS, sleep=time.sleep) -> None:
        """Safe state: amplitude and offset of ``channels`` stepped linearly to the minimum
        amplitude and 0 V over ``duration_s`` [s] (``steps`` steps), then outputs off. The outputs
        are switched off whatever interrupts the ramp (an instrument error, KeyboardInterrupt):
        the ramp may be cut short, the output-off never is."""
        live = [ch for ch in channels if self._ch(ch).output]
        start = {ch: (self.state[ch].amplitude_vpp or MIN_AMPLITUDE_VPP, self.state[ch].offset_v) for ch in live}
        try:
            if live and any(a > MIN_AMPLITUDE_VPP or o != 0 for a, o in start.values()):
                for j in range(1, steps + 1):
                    frac = 1.0 - j / steps
                    for ch in live:
                        a0, o0 = start[ch]
                        self.set_level(ch, MIN_AMPLITUDE_VPP + (a0 - MIN_AMPLITUDE_VPP) * frac, o0 * frac)
                    sleep(duration_s / steps)
        finally:
            self.outputs_off(channels)

    def outputs_off(self, channels=(1, 2)) -> None:
        """``OUTP<n> OFF`` on every channel, each tried even if another fails (or a
        KeyboardInterrupt arrives); the first failure is raised after all were tried."""
        first: BaseException | None = None
        for ch in channels:
            try:
                self.output_off(ch)
            except BaseException as e:  # noqa: BLE001 - the other channel's output-off must still run
                first = first or e
        if first is not None:
            raise first

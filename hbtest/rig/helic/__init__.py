"""Rig kind ``helic``: a HELIC-DAQ protocol v3 device (docs/helic.md) — control over TCP
(framed, CRC-16/CCITT-FALSE, one request one reply), samples over UDP. :mod:`.codec` is the
wire codec, :mod:`.client` the rig, :mod:`hbtest.serve.helic` the twin served as a v3 device
(``hbtest serve --protocol helic``).

The rig file's ``[helic]`` table maps our names to the device's (discovered by name on every
connection; see ``instruments/helic-loopback.toml``)::

    host = "127.0.0.1"
    control_port = 2350            # TCP
    stream_port = 2351             # the device's UDP stream port (primer datagram); default control_port + 1
    timeout_s = 5.0                # per reply, and for the first datagram of a record
    retakes = 3                    # a record with a packet gap, a drop or a stale epoch is taken again this often
    frequency_parameter = "freq"   # master Fourier frequency [Hz]
    phase_source = "phase"         # master phase [turn]: the fits use it, not sample indices
    epoch_source = "cmd_epoch"
    ramp_parameter = "ramp_periods"   # optional: the device's slew of a demand change [periods]; "" = none
    input_limit_parameter = "input_limit"   # optional: per-input |raw V| trip level of the device's gate
    input_range_v = 10.0           # optional: ADC full scale of the inputs (over-range detection)
    ungated = false                # true: drive an experiment without a safety gate (limits on this host alone)
    voltage_limits_v = [5.0, 5.0]  # per actuator (<= [rig].voltage_limit_v): no coefficient set beyond is written
    [helic.actuators]              # actuator -> its coefficient parameter ([mean, a1..aK, b1..bK] [V], K from its size)
    vertical = "forcing_coeffs"
    [helic.channels.l1]            # channel -> its stream source; raw channel volts = value * scale
    source = "l1"
    scale = 1.0
    [helic.channel_limits]         # optional, as the box kind's: l1_mm, g1_microstrain, ... (written to input_limit)
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import safety
from ..registry import RigKind, register

__all__ = ["KIND", "HelicSpec", "open", "parse"]


@dataclass(frozen=True)
class HelicSpec:
    """The parsed ``[helic]`` table (SI units). ``actuators``: (actuator, coefficient
    parameter) in the rig's actuator order; ``channels``: (channel, source, scale);
    ``channel_limits``: (channel, |physical| limit) as in the box kind."""

    host: str
    control_port: int
    stream_port: int
    timeout_s: float
    retakes: int
    frequency_parameter: str
    phase_source: str
    epoch_source: str
    ramp_parameter: str
    input_limit_parameter: str
    voltage_limits_v: tuple[float, ...]
    actuators: tuple[tuple[str, str], ...]
    channels: tuple[tuple[str, str, float], ...]
    channel_limits: tuple[tuple[str, float], ...] = ()
    input_range_v: float | None = None
    ungated: bool = False

    def windows(self, layout) -> dict:
        """Channel -> symmetric |raw V| trip level from ``channel_limits``."""
        out = {}
        for name, limit in self.channel_limits:
            ch = layout.channel(name)
            lo, hi = safety.channel_window(ch.scale, ch.offset, limit)
            out[name] = min(abs(lo), abs(hi))
        return out


def _names(h, common):
    a = h.sub("actuators")
    acts = tuple((name, a.string(name)) for name in common.actuators)
    a.finish()
    chans = []
    cs = h.sub("channels")
    for ch in common.sensors.channels:
        s = cs.sub(ch.name)
        chans.append((ch.name, s.string("source"), s.number("scale", 1.0, positive=True)))
        s.finish()
    cs.finish()
    return acts, tuple(chans)


def _limits(h, common):
    from ..box import _limit_key

    out = []
    cl = h.sub("channel_limits", required=False)
    for ch in common.sensors.channels:
        key, scale = _limit_key(ch)
        v = cl.number(key, None, required=False, positive=True, scale=scale)
        if v is not None:
            out.append((ch.name, v))
    cl.finish()
    return tuple(out)


def parse(top, common) -> HelicSpec:
    """Parse ``[helic]`` (``top``: the rig file's Section; ``common``: RigCommon). Errors
    name the file and key."""
    h = top.sub("helic")
    port = h.integer("control_port", 2350, min=1, max=65535)
    n_act = len(common.actuators)
    vl = h.numbers("voltage_limits_v", [common.voltage_limit_v] * n_act, positive=True, length=n_act)
    if any(v > common.voltage_limit_v for v in vl):
        raise h.error("voltage_limits_v",
                      f"must not exceed [rig].voltage_limit_v = {common.voltage_limit_v:g} V, got {list(vl)}")
    acts, chans = _names(h, common)
    spec = HelicSpec(
        host=h.string("host", "127.0.0.1"),
        control_port=port,
        stream_port=h.integer("stream_port", port + 1, min=1, max=65535),
        timeout_s=h.number("timeout_s", 5.0, positive=True, max=600),
        retakes=h.integer("retakes", 3, min=0, max=100),
        frequency_parameter=h.string("frequency_parameter", "freq"),
        phase_source=h.string("phase_source", "phase"),
        epoch_source=h.string("epoch_source", "cmd_epoch"),
        ramp_parameter=h.string("ramp_parameter", ""),
        input_limit_parameter=h.string("input_limit_parameter", ""),
        voltage_limits_v=tuple(vl),
        actuators=acts,
        channels=chans,
        channel_limits=_limits(h, common),
        input_range_v=h.number("input_range_v", None, required=False, positive=True),
        ungated=h.boolean("ungated", False),
    )
    h.finish()
    return spec


def open(rig_config, seed: int | None = None):
    """Connect to the device of ``rig_config`` (``seed``: meaningless for hardware, ignored);
    with an ``[identify]`` table the rig offers its identified modes (:mod:`.identified`)."""
    from .client import HelicRig
    from .identified import IdentifyingHelicRig

    return (HelicRig if rig_config.identify is None else IdentifyingHelicRig)(rig_config)


KIND = register(RigKind("helic", ("helic",), parse, open))

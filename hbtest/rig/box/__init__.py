"""Rig kind ``box``: a real-time acquisition box (microcontroller/FPGA next to the amplifiers
and ADCs) that generates the multi-harmonic demand, measures all channels in sync and averages
harmonic coefficients on the device. Spoken to over TCP with the SCPI-style protocol of
``instruments/README.md`` (:mod:`.protocol`), through pyvisa (:mod:`.client`, ``@py`` backend);
``hbtest serve`` serves the same protocol backed by the virtual twin (:mod:`.server`).

The rig file's ``[box]`` table (units in the key names; see ``instruments/box-loopback.toml``)::

    resource = "TCPIP0::127.0.0.1::5025::SOCKET"   # VISA TCPIP socket resource
    timeout_s = 5.0          # per reply
    open_timeout_s = 2.0     # per connection attempt
    retries = 2              # extra attempts (resync or reconnect) before giving up
    watchdog_s = 5.0         # host silence after which the box ramps its outputs to zero
    ramp_periods = 2.0       # ramp of safe_state()
    voltage_limits_v = [5.0, 5.0]   # per actuator, each <= [rig].voltage_limit_v
    [box.channel_limits]     # optional: |physical value| that trips the box
    l1_mm = 4.5              # lasers in mm, gauges in microstrain (<channel>_microstrain)
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..registry import RigKind, register
from .. import safety

__all__ = ["BoxSpec", "parse", "open", "KIND"]

RESOURCE_RE = re.compile(r"^TCPIP\d*::[^:\s]+::\d{1,5}::SOCKET$", re.IGNORECASE)


@dataclass(frozen=True)
class BoxSpec:
    """The parsed ``[box]`` table (SI units). ``channel_limits``: (channel, limit) pairs, the
    limit on ``|physical value|`` in the channel's unit (m for lasers, strain for gauges)."""

    resource: str
    timeout_s: float = 5.0
    open_timeout_s: float = 2.0
    retries: int = 2
    watchdog_s: float = 5.0
    ramp_periods: float = 2.0
    voltage_limits_v: tuple[float, ...] = ()
    channel_limits: tuple[tuple[str, float], ...] = ()

    def limits(self, layout) -> safety.Limits:
        """The safety limits in the box's units: volts per actuator, raw-volt channel windows."""
        windows = {}
        for name, limit in self.channel_limits:
            ch = layout.channel(name)
            windows[name] = safety.channel_window(ch.scale, ch.offset, limit)
        return safety.Limits(tuple(self.voltage_limits_v), windows)


def _limit_key(ch) -> tuple[str, float]:
    return (f"{ch.name}_mm", 1e-3) if ch.kind == "laser" else (f"{ch.name}_microstrain", 1e-6)


def parse(top, common) -> BoxSpec:
    """Parse the ``[box]`` table (``top``: the rig file's top-level Section; ``common``: the
    :class:`~hbtest.config.section.RigCommon` fields). Errors name the file and key."""
    b = top.sub("box")
    resource = b.string("resource")
    if not RESOURCE_RE.match(resource):
        raise b.error("resource", f"must be a VISA TCPIP socket resource like TCPIP0::127.0.0.1::5025::SOCKET, got {resource!r}")
    n_act = len(common.actuators)
    vl = b.numbers("voltage_limits_v", [common.voltage_limit_v] * n_act, positive=True, length=n_act)
    if any(v > common.voltage_limit_v for v in vl):
        raise b.error("voltage_limits_v", f"must not exceed [rig].voltage_limit_v = {common.voltage_limit_v:g} V, got {list(vl)}")
    limits = []
    cl = b.sub("channel_limits", required=False)
    for ch in common.sensors.channels:
        key, scale = _limit_key(ch)
        v = cl.number(key, None, required=False, positive=True, scale=scale)
        if v is not None:
            limits.append((ch.name, v))
    cl.finish()
    spec = BoxSpec(
        resource=resource,
        timeout_s=b.number("timeout_s", 5.0, positive=True, max=600),
        open_timeout_s=b.number("open_timeout_s", 2.0, positive=True, max=600),
        retries=b.integer("retries", 2, min=0, max=10),
        watchdog_s=b.number("watchdog_s", 5.0, positive=True, max=3600),
        ramp_periods=b.number("ramp_periods", 2.0, nonnegative=True, max=1000),
        voltage_limits_v=tuple(vl),
        channel_limits=tuple(limits),
    )
    b.finish()
    return spec


def open(rig_config, seed: int | None = None):  # noqa: A001 (the registry's name for it)
    """Connect to the box of ``rig_config`` (``seed`` is meaningless for hardware: ignored);
    with an ``[identify]`` table the rig offers its identified modes."""
    from .client import BoxRig, IdentifyingBoxRig

    return (BoxRig if rig_config.identify is None else IdentifyingBoxRig)(rig_config)


KIND = register(RigKind("box", ("box",), parse, open))

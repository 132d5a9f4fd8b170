"""The HELIC rig with identified modes: kept apart from the protocol client
(:mod:`hbtest.rig.helic.client`), which it only extends."""

from __future__ import annotations

from ..identification import IdentifiedModes
from .client import HelicRig

__all__ = ["IdentifyingHelicRig"]


class IdentifyingHelicRig(IdentifiedModes, HelicRig):
    """A :class:`~hbtest.rig.helic.client.HelicRig` whose rig file has an ``[identify]``
    table: it offers its modes (:class:`hbtest.rig.capabilities.KnownModes`) from its
    identification record (:class:`hbtest.rig.identification.IdentifiedModes`), so the point
    loop fits through the transient instead of settling window by window."""

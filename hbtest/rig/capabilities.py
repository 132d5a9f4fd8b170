"""What a rig may offer beyond the :class:`~hbtest.rig.Rig` protocol, declared as small
``runtime_checkable`` protocols: the layers above ask ``isinstance(rig, DeviceAveraging)``,
never ``hasattr``. A rig kind offers a capability by having the methods (structural typing:
no registration, no base class).

- :class:`DeviceAveraging` — harmonic coefficients averaged on the device (a box), used by the
  point loop instead of raw samples;
- :class:`KnownModes` — the rig's own modes, which the point loop fits through the transient
  (the twin);
- :class:`Trips` — a latched safety trip that can be cleared so a sweep goes on (a box);
- :class:`Disarms` — outputs that can be stopped and disarmed between demands, so that a long
  host computation (an identification's pencil) does not run into a watchdog (a box);
- :class:`ExactReference` — the exact response of the emulated structure, stored beside the
  measurement (the twin);
- :class:`KnownPhysicalSide` — the physical substructure as a model (the twin), for the
  exact reference of an arclength trace.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["DeviceAveraging", "KnownModes", "Trips", "Disarms", "ExactReference", "KnownPhysicalSide"]


@runtime_checkable
class DeviceAveraging(Protocol):
    """Averages on the device: per-channel coefficients of ``n_periods`` whole periods for
    the harmonic ``orders``, the ``nuisance_hz`` frequencies estimated and removed
    (:class:`hbtest.rig.ChannelCoefficients`, raw channel volts)."""

    def acquire_coefficients(self, n_periods: int, orders, nuisance_hz=()): ...


@runtime_checkable
class KnownModes(Protocol):
    """Knows its modes: eigenvalues [rad/s] (one per conjugate pair, Im >= 0) whose free
    decays ``exp(lambda t)`` a transient record contains."""

    def modes(self) -> np.ndarray: ...


@runtime_checkable
class Trips(Protocol):
    """A latched trip (voltage, displacement or strain window) that the caller may clear to
    go on with the next point (``sweep.on_trip``)."""

    def clear_trip(self) -> None: ...


@runtime_checkable
class Disarms(Protocol):
    """Outputs ramped to zero and disarmed (a box's ``OUTP OFF``: its watchdog then waits on no
    host); the next non-zero demand arms them again."""

    def disarm(self) -> None: ...


@runtime_checkable
class ExactReference(Protocol):
    """Knows the exact response of the structure it emulates with a numerical side joined."""

    def emulated_interface_response(self, ns, force_vector, frequency_hz: float, orders) -> np.ndarray:
        """Exact interface displacement (2, n_orders) of the linear substructure ``ns`` joined
        to the rig's physical side, under ``force_vector`` [N], at ``frequency_hz``."""
        ...

    def sweep_reference(self, ns):
        """The reference a sweep stores for the numerical substructure ``ns``: a callable
        ``(substructure, force_vector, frequency_hz, orders) -> (2, n_orders)``, or None."""
        ...


@runtime_checkable
class KnownPhysicalSide(Protocol):
    """Its physical substructure as a model: the substructure (interface u, theta) and
    whether it is linear."""

    @property
    def ps_substructure(self): ...

    @property
    def ps_is_linear(self) -> bool: ...

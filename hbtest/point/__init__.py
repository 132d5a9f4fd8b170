"""One frequency point of the iterative hybrid test (SPEC §2).

- :mod:`hbtest.point.numerical` — the numerical side at one frequency (``D_N``, ``F_e``);
- :mod:`hbtest.point.loop` — measuring: demand, settle, residual, Jacobian by finite
  differences (only the :class:`~hbtest.rig.Rig` protocol is used);
- :mod:`hbtest.point.profiles` — solver profiles (``published``, ``hbtest``) as classes that
  carry their constants, registered by name.
"""

from .loop import OVERRANGE_FRACTION, STOP_REASONS, Carry, Evaluation, PointLoop, PointOutcome, PointSettings
from .numerical import NumericalSide
from .profiles import PROFILES, HbtestProfile, PublishedProfile, SolverProfile, get_profile, register_profile

__all__ = [
    "NumericalSide", "PointSettings", "Evaluation", "PointOutcome", "Carry", "PointLoop",
    "STOP_REASONS", "OVERRANGE_FRACTION",
    "SolverProfile", "PublishedProfile", "HbtestProfile", "PROFILES", "get_profile", "register_profile",
]

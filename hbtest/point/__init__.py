"""One frequency point of the iterative hybrid test (``docs/method.md``, "The iterative
Fourier-domain hybrid test"; the walk of a point: ``docs/architecture.md``, "One point").

- :mod:`hbtest.point.numerical` — the numerical side at one frequency (``D_N``, ``F_e``);
- :mod:`hbtest.point.loop` — the measuring part: demand, settle or fit through the transient,
  reduce, residual, pool, Jacobian by finite differences (only the :class:`~hbtest.rig.Rig`
  protocol is used), and :meth:`PointLoop.run`, which hands the point to the profile;
- :mod:`hbtest.point.base` — what a profile is (:class:`SolverProfile`, its
  :class:`PointResult`, its carried state) and the registry by name;
- :mod:`hbtest.point.windows` — the frozen window rules the measuring part measures by;
- :mod:`hbtest.point.profile_published`, :mod:`hbtest.point.profile_hbtest` — the two
  profiles (gathered in :mod:`hbtest.point.profiles`).
"""

from .base import Carried, PointResult, WindowRule
from .loop import OVERRANGE_FRACTION, STOP_REASONS, Evaluation, PointLoop, PointOutcome, PointSettings, Pooled
from .numerical import NumericalSide
from .profiles import (
    PROFILES,
    HbtestCarry,
    HbtestProfile,
    PublishedCarry,
    PublishedProfile,
    SolverProfile,
    get_profile,
    register_profile,
)

__all__ = [
    "NumericalSide", "PointSettings", "Evaluation", "PointOutcome", "Pooled", "PointLoop", "PointResult",
    "Carried", "PublishedCarry", "HbtestCarry", "WindowRule",
    "STOP_REASONS", "OVERRANGE_FRACTION",
    "SolverProfile", "PublishedProfile", "HbtestProfile", "PROFILES", "get_profile", "register_profile",
]

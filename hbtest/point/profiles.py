"""The solver profiles by name: how a point iterates the actuator voltages
(``docs/method.md``, "The iterative Fourier-domain hybrid test").

Each profile is its own module with its constants as class attributes, its typed carried
state and its window rule: :mod:`hbtest.point.profile_published` (``published``, the
authors' released method) and :mod:`hbtest.point.profile_hbtest` (``hbtest``, the default).
Profiles are registered by name in :data:`PROFILES` (the sweep file's ``solver.profile``); a
third profile is a new module with a registered class. This module gathers them so that
``from hbtest.point.profiles import HbtestProfile`` keeps working.
"""

from __future__ import annotations

from .base import PROFILES, Carried, PointResult, SolverProfile, get_profile, register_profile
from .profile_hbtest import HbtestCarry, HbtestProfile, SolutionEstimate
from .profile_published import PublishedCarry, PublishedProfile
from .windows import NoiseSized, Reads, WindowRule

__all__ = ["SolverProfile", "PublishedProfile", "HbtestProfile", "PROFILES", "get_profile", "register_profile",
           "Carried", "PublishedCarry", "HbtestCarry", "PointResult", "WindowRule", "Reads", "NoiseSized",
           "SolutionEstimate"]

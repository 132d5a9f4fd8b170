"""Continuation of the hybrid test's response curve through folds (issue 15):
``sweep.continuation = "arclength"`` traces the curve in (actuator voltages, frequency) by
pseudo-arclength on the rig (:mod:`hbtest.continuation.arclength`); names and step constants
in :mod:`hbtest.continuation.settings`.
"""

from .arclength import HybridArclength, TracedPoint, hermite_extremum
from .settings import CONTINUATIONS, DEFAULT_MAX_POINTS, ArclengthSettings

__all__ = ["HybridArclength", "TracedPoint", "hermite_extremum", "ArclengthSettings", "CONTINUATIONS", "DEFAULT_MAX_POINTS"]

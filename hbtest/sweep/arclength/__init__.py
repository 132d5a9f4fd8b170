"""Continuation of the hybrid test's response curve through folds:
``sweep.continuation = "arclength"`` traces the curve in (actuator voltages, frequency) by
pseudo-arclength on the rig (:mod:`hbtest.sweep.arclength.continuation`); names and step constants
in :mod:`hbtest.sweep.arclength.settings`; the sweep's path (:mod:`hbtest.sweep.arclength.runner`);
the joined structure's exact reference for comparisons (:mod:`hbtest.sweep.arclength.reference`).
"""

from .continuation import HybridArclength, TracedPoint, chord_checked_tangent, hermite_extremum
from .reference import joined_structure, nearest_on_curve, reference_on_branch
from .runner import settings_from, trace_into_store
from .settings import CONTINUATIONS, DEFAULT_MAX_POINTS, ArclengthSettings

__all__ = ["HybridArclength", "TracedPoint", "chord_checked_tangent", "hermite_extremum", "ArclengthSettings", "CONTINUATIONS", "DEFAULT_MAX_POINTS",
           "joined_structure", "nearest_on_curve", "reference_on_branch", "settings_from", "trace_into_store"]

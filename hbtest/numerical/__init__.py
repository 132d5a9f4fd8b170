"""Numerical substructures behind one protocol (:class:`NumericalSubstructure`): the linear
dynamic stiffness (:class:`LinearSubstructure`) and a linear structure with nonlinear
elements solved by harmonic balance with alternating frequency–time
(:class:`NonlinearSubstructure`, elements in :mod:`hbtest.numerical.elements`).

Units: SI; conventions in :mod:`hbtest.numerical.base` and :mod:`hbtest.numerical.elements`.
"""

from .base import HarmonicBalanceError, InterfaceResponse, NumericalSubstructure
from .continuation import ContinuationSettings, ResponseCurve, trace_response
from .elements import (
    ELEMENT_KINDS,
    MIN_TIME_SAMPLES,
    TIME_SAMPLES_PER_ORDER,
    AFTGrid,
    Contact,
    CubicSpring,
    Element,
    Friction,
    Param,
    aft_grid,
    create_element,
    harmonic_force,
    packed_force,
    register_element,
)
from .linear import LinearSubstructure, external_interface_force
from .nonlinear import (
    LINE_SEARCH_HALVINGS,
    NEWTON_MAX_ITERATIONS,
    NEWTON_NOISE_FLOOR,
    NEWTON_STAGNATION,
    NEWTON_TOLERANCE,
    HarmonicBalanceSolution,
    NonlinearSubstructure,
)
from .table import CONTACT_SIDES, NONLINEAR_DOFS, NonlinearElementSpec, read_element_tables

__all__ = [
    "NumericalSubstructure", "InterfaceResponse", "HarmonicBalanceError",
    "LinearSubstructure", "external_interface_force",
    "trace_response", "ResponseCurve", "ContinuationSettings",
    "NonlinearSubstructure", "HarmonicBalanceSolution", "NEWTON_TOLERANCE", "NEWTON_NOISE_FLOOR", "NEWTON_STAGNATION", "NEWTON_MAX_ITERATIONS", "LINE_SEARCH_HALVINGS",
    "Element", "Param", "CubicSpring", "Friction", "Contact", "ELEMENT_KINDS", "register_element", "create_element",
    "NonlinearElementSpec", "read_element_tables", "NONLINEAR_DOFS", "CONTACT_SIDES",
    "AFTGrid", "aft_grid", "harmonic_force", "packed_force", "MIN_TIME_SAMPLES", "TIME_SAMPLES_PER_ORDER",
]

"""Nonlinear elements of a numerical substructure, evaluated by alternating frequency–time (AFT).

Units: SI. An element acts on one DOF (grounded) or between two DOFs of the structure, all of
the same kind: transverse displacements ``u`` [m] or rotations ``theta`` [rad]. Its relative
coordinate is

    r = q[dofs[0]]                  (grounded)
    r = q[dofs[0]] - q[dofs[1]]     (between two nodes)

and its force law ``g(r, dr/dt)`` is the *restoring* (internal) force the element exerts, in
the conjugate unit (N for ``u``, N m for ``theta``). It enters the equations of motion like
the linear stiffness, on the left-hand side:

    M q'' + C q' + K q + sum_e w_e g_e(w_e . q, w_e . q') = f_ext,     w_e = (+1) or (+1, -1).

So a positive ``g`` pushes ``dofs[0]`` towards negative ``r`` (and ``dofs[1]`` the other way).
Sign conventions of the kinds:

- ``cubic_spring``: ``g = k3 r^3`` (k3 > 0 hardening, < 0 softening).
- ``friction``: regularised Coulomb, ``g = F_c tanh(r' / v_s)`` — opposes the relative
  velocity; ``v_s`` [m/s or rad/s] is the regularisation velocity (Coulomb as v_s -> 0).
- ``contact``: unilateral penalty stop at ``r = side * gap`` (``side`` = +1: the stop is above
  / counter-clockwise, -1: below): ``g = side * k_c * max(side * r - gap, 0)``.

Every kind gives ``g`` and its partial derivatives ``dg/dr``, ``dg/dr'`` at time samples; the
AFT of :func:`harmonic_force` turns them into harmonic coefficients and the analytic Jacobian
of those coefficients with respect to the packed coefficients of ``r``
(:mod:`hbtest.method.harmonics` convention ``X_k = a_k - i b_k``, packed ``[a0?, a1, b1, ...]``).
Kinds are registered by name in :data:`ELEMENT_KINDS`; :class:`Param` lists each kind's
parameters with the keys a sweep file uses for them (the config layer reads those).
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..method import harmonics

__all__ = [
    "Param",
    "Element",
    "CubicSpring",
    "Friction",
    "Contact",
    "ELEMENT_KINDS",
    "register_element",
    "create_element",
    "AFTGrid",
    "aft_grid",
    "harmonic_force",
    "MIN_TIME_SAMPLES",
    "TIME_SAMPLES_PER_ORDER",
]

#: AFT time grid: at least this many samples per period ...
MIN_TIME_SAMPLES = 128
#: ... and at least this many per unit of the highest harmonic order (aliasing of the
#: harmonics a nonlinearity generates above the solved orders; a cubic needs > 6 per order)
TIME_SAMPLES_PER_ORDER = 16


@dataclass(frozen=True)
class Param:
    """A parameter of an element kind: dataclass ``field``, the sweep-file key for a ``u`` and
    for a ``theta`` element (unit in the name), the scale from file unit to SI, and the sign
    constraint (``"positive"``, ``"nonnegative"`` or ``"any"``)."""

    field: str
    key_u: str
    key_theta: str
    scale: float = 1.0
    sign: str = "positive"
    default: float | None = None


@dataclass(frozen=True)
class Element(abc.ABC):
    """Base of the element kinds: ``dofs`` are DOF names of the structure (one: grounded, two:
    between them); ``kind`` the registered name."""

    dofs: tuple[str, ...]

    kind: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()

    def __post_init__(self):
        if len(self.dofs) not in (1, 2) or len(set(self.dofs)) != len(self.dofs):
            raise ValueError(f"{self.kind}: needs one DOF (grounded) or two distinct DOFs, got {self.dofs!r}")

    @property
    def weights(self) -> np.ndarray:
        """``w``: r = w . q[dofs]."""
        return np.array([1.0, -1.0][: len(self.dofs)])

    @abc.abstractmethod
    def force(self, r: np.ndarray, v: np.ndarray) -> np.ndarray:
        """Restoring force ``g(r, r')`` at time samples."""

    @abc.abstractmethod
    def gradient(self, r: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(dg/dr, dg/dr')`` at time samples."""

    @property
    def is_zero(self) -> bool:
        """True when the element exerts no force whatever the motion."""
        return False


@dataclass(frozen=True)
class CubicSpring(Element):
    """``g = k3 r^3`` [N/m^3 for u, N m/rad^3 for theta]."""

    k3: float = 0.0

    kind = "cubic_spring"
    params = (Param("k3", "k3_n_per_m3", "k3_nm_per_rad3", 1.0, "any"),)

    def force(self, r, v):
        return self.k3 * r**3

    def gradient(self, r, v):
        return 3.0 * self.k3 * r**2, np.zeros_like(v)

    @property
    def is_zero(self) -> bool:
        return self.k3 == 0.0


@dataclass(frozen=True)
class Friction(Element):
    """Regularised Coulomb friction ``g = F_c tanh(r' / v_s)``: ``force`` F_c [N or N m],
    ``velocity_scale`` v_s [m/s or rad/s]."""

    force_limit: float = 0.0
    velocity_scale: float = 1e-3

    kind = "friction"
    params = (
        Param("force_limit", "force_n", "moment_nm", 1.0, "nonnegative"),
        Param("velocity_scale", "velocity_scale_m_per_s", "velocity_scale_rad_per_s", 1.0, "positive"),
    )

    def __post_init__(self):
        super().__post_init__()
        if not self.velocity_scale > 0:
            raise ValueError("friction: velocity_scale must be positive")

    def force(self, r, v):
        return self.force_limit * np.tanh(v / self.velocity_scale)

    def gradient(self, r, v):
        t = np.tanh(v / self.velocity_scale)
        return np.zeros_like(r), self.force_limit / self.velocity_scale * (1.0 - t * t)

    @property
    def is_zero(self) -> bool:
        return self.force_limit == 0.0


@dataclass(frozen=True)
class Contact(Element):
    """Unilateral penalty contact: ``g = side k_c max(side r - gap, 0)``; ``gap`` [m or rad]
    >= 0, ``stiffness`` k_c [N/m or N m/rad], ``side`` +1 (stop at r = +gap) or -1."""

    gap: float = 0.0
    stiffness: float = 0.0
    side: float = 1.0

    kind = "contact"
    params = (
        Param("gap", "gap_mm", "gap_mrad", 1e-3, "nonnegative"),
        Param("stiffness", "stiffness_n_per_m", "stiffness_nm_per_rad", 1.0, "nonnegative"),
    )

    def __post_init__(self):
        super().__post_init__()
        if self.side not in (1.0, -1.0):
            raise ValueError("contact: side must be +1 or -1")

    def force(self, r, v):
        return self.side * self.stiffness * np.maximum(self.side * r - self.gap, 0.0)

    def gradient(self, r, v):
        return self.stiffness * (self.side * r > self.gap).astype(float), np.zeros_like(v)

    @property
    def is_zero(self) -> bool:
        return self.stiffness == 0.0


#: registered element kinds by name
ELEMENT_KINDS: dict[str, type[Element]] = {}


def register_element(cls: type[Element]) -> type[Element]:
    """Register an element kind under ``cls.kind``."""
    if not cls.kind:
        raise ValueError("an element kind needs a name")
    ELEMENT_KINDS[cls.kind] = cls
    return cls


for _cls in (CubicSpring, Friction, Contact):
    register_element(_cls)


def create_element(kind: str, dofs, **params) -> Element:
    """An element of a registered kind on the DOF names ``dofs`` with SI ``params``."""
    try:
        cls = ELEMENT_KINDS[kind]
    except KeyError:
        raise KeyError(f"unknown nonlinear element kind {kind!r}; known: {sorted(ELEMENT_KINDS)}") from None
    return cls(tuple(dofs), **params)


# ---------------------------------------------------------------------------------------
# alternating frequency-time


@dataclass(frozen=True)
class AFTGrid:
    """Time samples of one period for the harmonic orders ``orders``.

    ``E`` (n_time, p): packed coefficients -> samples, ``x(phi_j) = E @ x_packed``;
    ``Ed`` (n_time, p): d/dphi of the same (multiply by Omega for d/dt);
    ``P`` (p, n_time): samples -> packed coefficients (exact for trigonometric polynomials of
    order below n_time / 2; higher generated harmonics alias)."""

    orders: np.ndarray
    phase: np.ndarray
    E: np.ndarray
    Ed: np.ndarray
    P: np.ndarray

    @property
    def n_time(self) -> int:
        return self.phase.size


def aft_grid(orders, n_time: int | None = None) -> AFTGrid:
    """The AFT matrices for ``orders``; ``n_time`` defaults to
    ``max(MIN_TIME_SAMPLES, TIME_SAMPLES_PER_ORDER * max(orders))``."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    kmax = int(orders.max())
    if n_time is None:
        n_time = max(MIN_TIME_SAMPLES, TIME_SAMPLES_PER_ORDER * kmax)
    if n_time <= 2 * kmax:
        raise ValueError(f"{n_time} time samples cannot resolve order {kmax}")
    phase = 2 * np.pi * np.arange(n_time) / n_time
    cols, dcols, w = [], [], []
    for k in orders:
        if k == 0:
            cols.append(np.ones_like(phase))
            dcols.append(np.zeros_like(phase))
            w.append(1.0 / n_time)
        else:
            c, s = np.cos(k * phase), np.sin(k * phase)
            cols += [c, s]
            dcols += [-k * s, k * c]
            w += [2.0 / n_time, 2.0 / n_time]
    E = np.stack(cols, axis=-1)
    Ed = np.stack(dcols, axis=-1)
    P = np.asarray(w)[:, None] * E.T
    return AFTGrid(orders, phase, E, Ed, P)


def harmonic_force(element: Element, coefficients, frequency_hz: float, orders, n_time: int | None = None, grid: AFTGrid | None = None):
    """AFT of one element: the harmonic coefficients of ``g(r(t), r'(t))`` for the relative
    coordinate with complex coefficients ``coefficients`` (n_orders,) at fundamental
    ``frequency_hz``. Returns ``(G, J)``: complex coefficients (n_orders,) and the analytic
    Jacobian ``d pack(G) / d pack(r)`` (p, p)."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    grid = aft_grid(orders, n_time) if grid is None else grid
    x = harmonics.pack(np.asarray(coefficients, dtype=complex), orders)
    g, J = packed_force(element, x, 2 * np.pi * frequency_hz, grid)
    return harmonics.unpack(g, orders), J


def packed_force(element: Element, x: np.ndarray, omega: float, grid: AFTGrid) -> tuple[np.ndarray, np.ndarray]:
    """AFT on packed vectors: ``x`` (p,) packed coefficients of r -> (packed coefficients of g
    (p,), Jacobian (p, p)). ``omega`` [rad/s] is the fundamental angular frequency."""
    r = grid.E @ x
    v = omega * (grid.Ed @ x)
    g = element.force(r, v)
    dr, dv = element.gradient(r, v)
    J = grid.P @ (dr[:, None] * grid.E + (omega * dv)[:, None] * grid.Ed)
    return grid.P @ g, J

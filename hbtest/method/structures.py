"""Linear structural models: ``M u'' + C u' + K u = f(t)``, dynamic stiffness
``D(s) = s^2 M + s C + K`` (SI units).

Builders:
- :func:`beam` — Euler–Bernoulli beam, Hermite cubic elements (2 DOF per node: transverse
  displacement ``u`` [m], rotation ``theta = du/dx`` [rad]), consistent mass, damping
  ``C = zeta_mass M + zeta_stiffness K``; any boundary condition at either end.
- :func:`mass_chain` — lumped mass–spring–damper chains with optional walls.
- :func:`generic` — user-supplied M, C, K (e.g. an FE export).

Sign convention of beams: x along the beam axis from its first node, ``u`` positive up,
``theta`` positive counter-clockwise (``theta = du/dx``); generalized nodal forces are
conjugate to (u, theta): a shear force ``T`` [N] and a moment ``M`` [N m].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg

__all__ = ["Structure", "Beam", "Modes", "beam", "mass_chain", "chain_links", "stamp_link", "generic", "BOUNDARY_CONDITIONS"]

# constrained local DOFs (0 = u, 1 = theta) for each boundary-condition name
BOUNDARY_CONDITIONS = {
    "free": (),
    "clamped": (0, 1),
    "pinned": (0,),
    "sliding": (1,),  # guided: rotation fixed, translation free
}


@dataclass(frozen=True)
class Modes:
    """Modes of a structure, sorted by frequency (complex modes from the damped problem).

    frequencies_hz: undamped natural frequencies [Hz] (from K, M).
    damping_ratios: modal damping ratios from the damped eigenvalues lambda = -zeta w + i w_d.
    shapes: real mode shapes (columns, mass-normalised) of the undamped problem.
    """

    frequencies_hz: np.ndarray
    damping_ratios: np.ndarray
    shapes: np.ndarray


@dataclass(frozen=True, eq=False)
class Structure:
    """A linear structure with named DOFs."""

    M: np.ndarray
    C: np.ndarray
    K: np.ndarray
    dof_names: tuple[str, ...]

    def __post_init__(self):
        n = len(self.dof_names)
        for name in ("M", "C", "K"):
            a = np.asarray(getattr(self, name), dtype=float)
            if a.shape != (n, n):
                raise ValueError(f"{name} must be {n}x{n}, got {a.shape}")
            object.__setattr__(self, name, a)

    @property
    def n_dof(self) -> int:
        return len(self.dof_names)

    def index(self, name: str) -> int:
        try:
            return self.dof_names.index(name)
        except ValueError:
            raise KeyError(f"no DOF named {name!r}") from None

    def dynamic_stiffness(self, s) -> np.ndarray:
        """``D(s) = s^2 M + s C + K`` for scalar or array ``s`` (shape (*s.shape, n, n))."""
        s = np.asarray(s, dtype=complex)[..., None, None]
        return s * s * self.M + s * self.C + self.K

    def receptance(self, frequency_hz, force: np.ndarray) -> np.ndarray:
        """Complex displacement amplitudes ``D(i w)^-1 F`` for a harmonic force [N]."""
        D = self.dynamic_stiffness(2j * np.pi * np.asarray(frequency_hz, dtype=float))
        return np.linalg.solve(D, np.broadcast_to(force, D.shape[:-1])[..., None])[..., 0]

    def modes(self) -> Modes:
        """Natural frequencies, damping ratios (from the damped eigenproblem) and mass-normalised
        real mode shapes."""
        w2, phi = scipy.linalg.eigh(self.K, self.M)
        w2 = np.clip(w2, 0.0, None)
        w = np.sqrt(w2)
        # damped eigenvalues from the state-space problem, matched to undamped modes by
        # frequency (classical damping: exact; otherwise nearest match)
        lam = self.eigenvalues()
        lam = lam[np.imag(lam) >= 0]
        zeta = np.full(w.shape, np.nan)
        wn_d = np.abs(lam)
        z_d = -np.real(lam) / np.where(wn_d > 0, wn_d, 1.0)
        used = np.zeros(lam.size, bool)
        for i, wi in enumerate(w):
            if lam.size == 0:
                break
            cand = np.where(used, np.inf, np.abs(wn_d - wi))
            j = int(np.argmin(cand))
            if np.isfinite(cand[j]):
                zeta[i] = z_d[j]
                used[j] = True
        return Modes(w / (2 * np.pi), zeta, phi)

    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues ``lambda`` of ``det D(lambda) = 0`` [rad/s] (state-space form)."""
        n = self.n_dof
        A = np.block([[np.zeros((n, n)), np.eye(n)], [-self.K, -self.C]])
        B = np.block([[np.eye(n), np.zeros((n, n))], [np.zeros((n, n)), self.M]])
        lam = scipy.linalg.eigvals(A, B)
        lam = lam[np.isfinite(lam)]
        return lam[np.argsort(np.abs(lam))]


@dataclass(frozen=True, eq=False)
class Beam(Structure):
    """A beam model: a :class:`Structure` whose DOFs are ``u{j}``/``theta{j}`` of node j at
    ``x_nodes[j]`` [m], with constrained DOFs removed."""

    x_nodes: np.ndarray = field(default=None)
    EI: float = 0.0
    rhoA: float = 0.0
    zeta_mass: float = 0.0
    zeta_stiffness: float = 0.0
    section: dict = field(default_factory=dict)

    @property
    def length(self) -> float:
        return float(self.x_nodes[-1] - self.x_nodes[0])

    def node_at(self, x: float, tol: float = 1e-9) -> int:
        """Index of the node at position ``x`` [m] (KeyError if none)."""
        j = int(np.argmin(np.abs(self.x_nodes - x)))
        if abs(self.x_nodes[j] - x) > tol * max(1.0, self.length):
            raise KeyError(f"no node at x = {x} m")
        return j

    def full_vector(self, q: np.ndarray) -> np.ndarray:
        """Expand a DOF vector (..., n_dof) to all nodes (..., n_nodes, 2) with zeros at
        constrained DOFs."""
        q = np.asarray(q)
        out = np.zeros(q.shape[:-1] + (self.x_nodes.size, 2), dtype=q.dtype)
        for i, name in enumerate(self.dof_names):
            kind = 0 if name.startswith("u") else 1
            j = int(name[1:] if kind == 0 else name[5:])
            out[..., j, kind] = q[..., i]
        return out

    def curvature(self, q: np.ndarray, x: float) -> np.ndarray:
        """Curvature ``u''(x)`` [1/m] interpolated by the Hermite shape functions of the
        element containing ``x`` (linear within an element)."""
        full = self.full_vector(q)
        xs = self.x_nodes
        e = int(np.clip(np.searchsorted(xs, x, side="right") - 1, 0, xs.size - 2))
        le = xs[e + 1] - xs[e]
        xi = (x - xs[e]) / le
        # second derivatives of the Hermite cubics w.r.t. x
        d2 = np.array([(-6 + 12 * xi) / le**2, (-4 + 6 * xi) / le, (6 - 12 * xi) / le**2, (-2 + 6 * xi) / le])
        dofs = np.concatenate([full[..., e, :], full[..., e + 1, :]], axis=-1)
        return dofs @ d2


def _hermite_element(EI: float, rhoA: float, le: float) -> tuple[np.ndarray, np.ndarray]:
    """Stiffness and consistent mass of a Hermite cubic beam element, DOFs (u1, t1, u2, t2)."""
    L = le
    k = EI / L**3 * np.array(
        [[12, 6 * L, -12, 6 * L], [6 * L, 4 * L * L, -6 * L, 2 * L * L], [-12, -6 * L, 12, -6 * L], [6 * L, 2 * L * L, -6 * L, 4 * L * L]]
    )
    m = rhoA * L / 420 * np.array(
        [[156, 22 * L, 54, -13 * L], [22 * L, 4 * L * L, 13 * L, -3 * L * L], [54, 13 * L, 156, -22 * L], [-13 * L, -3 * L * L, -22 * L, 4 * L * L]]
    )
    return k, m


def _beam_nodes(length: float, n_elements: int, extra_nodes, nodes) -> np.ndarray:
    """Node positions [m, from 0]: ``n_elements`` equal elements or exactly ``nodes``, plus
    ``extra_nodes`` (merged, rounded to 1e-12 m)."""
    if n_elements < 1:
        raise ValueError("beam needs at least one element")
    x = np.linspace(0.0, length, n_elements + 1) if nodes is None else np.asarray(nodes, dtype=float)
    if nodes is not None and (abs(x[0]) > 1e-12 or abs(x[-1] - length) > 1e-12 or np.any(np.diff(x) <= 0)):
        raise ValueError("beam nodes must increase strictly from 0 to the length")
    extra = [float(e) for e in extra_nodes]
    for e in extra:
        if not 0 <= e <= length:
            raise ValueError(f"extra node at {e} m lies outside the beam [0, {length}]")
    return np.unique(np.round(np.concatenate([x, extra]), 12))


def beam(
    length: float,
    width: float,
    thickness: float,
    youngs_modulus: float,
    density: float,
    n_elements: int = 20,
    zeta_mass: float = 0.0,
    zeta_stiffness: float = 0.0,
    left: str = "clamped",
    right: str = "free",
    extra_nodes=(),
    x_offset: float = 0.0,
    nodes=None,
) -> Beam:
    """Euler–Bernoulli beam of rectangular section (SI units: m, Pa, kg/m^3).

    ``n_elements`` equal elements, plus nodes at the positions ``extra_nodes`` [m, from the
    first node] (e.g. strain-gauge locations); or exactly the node positions ``nodes`` [m,
    from 0 to length] when given (``n_elements`` is then ignored). Boundary conditions ``left``/``right`` are
    among :data:`BOUNDARY_CONDITIONS`. ``zeta_mass`` [1/s] and ``zeta_stiffness`` [s] give
    ``C = zeta_mass M + zeta_stiffness K``. Node positions are reported as ``x_offset + x``.
    """
    for name, v in (("length", length), ("width", width), ("thickness", thickness), ("youngs_modulus", youngs_modulus), ("density", density)):
        if not v > 0:
            raise ValueError(f"beam {name} must be positive, got {v}")
    for bc in (left, right):
        if bc not in BOUNDARY_CONDITIONS:
            raise ValueError(f"unknown boundary condition {bc!r}; use one of {sorted(BOUNDARY_CONDITIONS)}")
    x = _beam_nodes(length, n_elements, extra_nodes, nodes)
    EI = youngs_modulus * width * thickness**3 / 12.0
    rhoA = density * width * thickness
    n_nodes = x.size
    K = np.zeros((2 * n_nodes, 2 * n_nodes))
    M = np.zeros_like(K)
    for e in range(n_nodes - 1):
        k, m = _hermite_element(EI, rhoA, x[e + 1] - x[e])
        sl = slice(2 * e, 2 * e + 4)
        K[sl, sl] += k
        M[sl, sl] += m
    names = [f"{q}{j}" for j in range(n_nodes) for q in ("u", "theta")]
    fixed = {2 * 0 + d for d in BOUNDARY_CONDITIONS[left]} | {2 * (n_nodes - 1) + d for d in BOUNDARY_CONDITIONS[right]}
    keep = [i for i in range(2 * n_nodes) if i not in fixed]
    K = K[np.ix_(keep, keep)]
    M = M[np.ix_(keep, keep)]
    C = zeta_mass * M + zeta_stiffness * K
    return Beam(
        M=M,
        C=C,
        K=K,
        dof_names=tuple(names[i] for i in keep),
        x_nodes=x + x_offset,
        EI=EI,
        rhoA=rhoA,
        zeta_mass=zeta_mass,
        zeta_stiffness=zeta_stiffness,
        section=dict(width=width, thickness=thickness, youngs_modulus=youngs_modulus, density=density),
    )


def chain_links(masses, springs, dampers=None, left_wall: bool = True, right_wall: bool = False):
    """Validated arrays of a lumped chain and its link ends: returns ``(m, k, c, ends)`` where
    link i joins ``ends[i]`` and ``ends[i + 1]`` (a mass index, or None for a wall). Masses,
    springs and dampers must be non-negative (a zero mass is allowed here: split chains)."""
    m = np.asarray(masses, dtype=float)
    n = m.size
    n_links = n - 1 + int(left_wall) + int(right_wall)
    k = np.asarray(springs, dtype=float)
    c = np.zeros(n_links) if dampers is None else np.asarray(dampers, dtype=float)
    if k.shape != (n_links,) or c.shape != (n_links,):
        raise ValueError(f"a chain of {n} masses with these walls needs {n_links} springs and dampers")
    if np.any(m < 0) or np.any(k < 0) or np.any(c < 0):
        raise ValueError("masses, springs and dampers must be non-negative")
    ends = ([None] if left_wall else []) + list(range(n)) + ([None] if right_wall else [])
    return m, k, c, ends


def stamp_link(mat: np.ndarray, a, b, value: float) -> None:
    """Add a two-node element of stiffness/damping ``value`` between DOFs a and b (None =
    ground) to ``mat`` in place."""
    for p, q, sign in ((a, a, 1.0), (b, b, 1.0), (a, b, -1.0), (b, a, -1.0)):
        if p is not None and q is not None:
            mat[p, q] += sign * value


def mass_chain(masses, springs, dampers=None, left_wall: bool = True, right_wall: bool = False) -> Structure:
    """Lumped chain of masses [kg] joined by springs [N/m] and dashpots [N s/m].

    Spring/damper i joins element i-1 and i of the sequence ``[left wall?] m_0 ... m_{n-1}
    [right wall?]``: with both walls there are n+1 springs, with one wall n, with none n-1.
    DOFs are named ``x0 ... x{n-1}``. The symmetric three-mass two-wall benchmark is
    ``mass_chain([m, m, m], [k, k, k, k], [c, c, c, c], True, True)``.
    """
    m, k, c, ends = chain_links(masses, springs, dampers, left_wall, right_wall)
    if np.any(m <= 0):
        raise ValueError("masses must be positive, springs and dampers non-negative")
    n = m.size
    K = np.zeros((n, n))
    C = np.zeros((n, n))
    for link in range(k.size):
        stamp_link(K, ends[link], ends[link + 1], k[link])
        stamp_link(C, ends[link], ends[link + 1], c[link])
    return Structure(M=np.diag(m), C=C, K=K, dof_names=tuple(f"x{i}" for i in range(n)))


def generic(M, C, K, dof_names=None) -> Structure:
    """A structure from user matrices (symmetry and positive mass are checked)."""
    M = np.atleast_2d(np.asarray(M, dtype=float))
    n = M.shape[0]
    names = tuple(dof_names) if dof_names is not None else tuple(f"q{i}" for i in range(n))
    s = Structure(M=M, C=np.atleast_2d(np.asarray(C, dtype=float)), K=np.atleast_2d(np.asarray(K, dtype=float)), dof_names=names)
    for nm in ("M", "C", "K"):
        a = getattr(s, nm)
        if not np.allclose(a, a.T, rtol=1e-10, atol=1e-12 * np.abs(a).max(initial=1.0)):
            raise ValueError(f"{nm} is not symmetric")
    if np.any(np.linalg.eigvalsh(s.M) <= 0):
        raise ValueError("M is not positive definite")
    return s

"""Substructures condensed on their interface (docs/method.md §1).

Partition the DOFs into interface ``i`` and bulk ``b``:

    D_cond(s) = D_ii - D_ib D_bb^-1 D_bi,        F_cond = F_i - D_ib D_bb^-1 F_b.

A :class:`Substructure` is a structure with an ordered list of interface DOFs; its condensed
dynamic stiffness maps interface displacements to the generalized forces that must be applied
*to it* at the interface. For a hybrid structure with numerical part N and physical part P,
``(D_N + D_P) U = F_N + F_P`` is the full structure condensed on the interface.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg

from .structures import Beam, Structure, beam

__all__ = ["condense", "Substructure", "split_beam", "mode_nodes", "join", "join_beams"]


def condense(D: np.ndarray, interface: list[int]) -> np.ndarray:
    """Schur complement of a dynamic stiffness ``D`` (..., n, n) on the DOFs ``interface``."""
    D = np.asarray(D)
    n = D.shape[-1]
    i = list(interface)
    b = [j for j in range(n) if j not in set(i)]
    Dii = D[..., i, :][..., :, i]
    if not b:
        return Dii
    Dib = D[..., i, :][..., :, b]
    Dbi = D[..., b, :][..., :, i]
    Dbb = D[..., b, :][..., :, b]
    return Dii - Dib @ np.linalg.solve(Dbb, Dbi)


@dataclass(frozen=True, eq=False)
class Substructure:
    """A structure and its ordered interface DOFs (names), e.g. ``("u8", "theta8")``."""

    structure: Structure
    interface: tuple[str, ...]

    @property
    def interface_index(self) -> list[int]:
        return [self.structure.index(n) for n in self.interface]

    @property
    def bulk_index(self) -> list[int]:
        i = set(self.interface_index)
        return [j for j in range(self.structure.n_dof) if j not in i]

    def dynamic_stiffness(self, s) -> np.ndarray:
        """Condensed ``D(s)`` on the interface, vectorised over ``s`` (shape (*s.shape, ni, ni))."""
        return condense(self.structure.dynamic_stiffness(s), self.interface_index)

    def harmonic_stiffness(self, frequency_hz, orders) -> np.ndarray:
        """``D(i k Omega)`` for every harmonic order k (last-but-two axis): shape
        (*f.shape, n_orders, ni, ni). Order 0 gives the static stiffness."""
        f = np.asarray(frequency_hz, dtype=float)
        k = np.asarray(orders, dtype=float)
        return self.dynamic_stiffness(2j * np.pi * np.multiply.outer(f, k))

    def condensed_force(self, F: np.ndarray, s) -> np.ndarray:
        """``F_cond = F_i - D_ib D_bb^-1 F_b`` for a force vector F on all DOFs (..., n)."""
        D = self.structure.dynamic_stiffness(s)
        i, b = self.interface_index, self.bulk_index
        F = np.broadcast_to(np.asarray(F, dtype=complex), D.shape[:-1])
        Fi = F[..., i]
        if not b:
            return Fi
        Dib = D[..., i, :][..., :, b]
        Dbb = D[..., b, :][..., :, b]
        return Fi - (Dib @ np.linalg.solve(Dbb, F[..., b][..., None]))[..., 0]

    def bulk_response(self, U_interface: np.ndarray, F: np.ndarray, s) -> np.ndarray:
        """Bulk displacements given interface displacements and external force on all DOFs:
        ``u_b = D_bb^-1 (F_b - D_bi U_i)``."""
        D = self.structure.dynamic_stiffness(s)
        i, b = self.interface_index, self.bulk_index
        Dbb = D[..., b, :][..., :, b]
        Dbi = D[..., b, :][..., :, i]
        F = np.broadcast_to(np.asarray(F, dtype=complex), D.shape[:-1])
        rhs = F[..., b] - (Dbi @ np.asarray(U_interface)[..., None])[..., 0]
        return np.linalg.solve(Dbb, rhs[..., None])[..., 0]

    def clamped_interface_modes(self) -> np.ndarray:
        """Natural frequencies [Hz] with the interface fixed: poles of ``D_cond`` (the
        anti-resonances of the hybrid interface response)."""
        b = self.bulk_index
        if not b:
            return np.array([])
        S = self.structure
        w2 = scipy.linalg.eigh(S.K[np.ix_(b, b)], S.M[np.ix_(b, b)], eigvals_only=True)
        return np.sqrt(np.clip(w2, 0, None)) / (2 * np.pi)


def join(ns: Substructure, ps: Substructure) -> Structure:
    """Assemble two substructures sharing their (equally ordered) interface into one structure
    (DOFs: NS bulk, interface, PS bulk). Its condensation on the interface equals
    ``D_N + D_P``."""
    if len(ns.interface) != len(ps.interface):
        raise ValueError("interfaces differ in size")
    parts = []
    for sub in (ns, ps):
        S = sub.structure
        order = sub.bulk_index + sub.interface_index
        parts.append([getattr(S, m)[np.ix_(order, order)] for m in ("M", "C", "K")])
    nb_n = len(ns.bulk_index)
    nb_p = len(ps.bulk_index)
    ni = len(ns.interface)
    n = nb_n + ni + nb_p
    mats = []
    for m in range(3):
        A = np.zeros((n, n))
        A[: nb_n + ni, : nb_n + ni] += parts[0][m]
        # PS ordered (bulk, interface); place interface at [nb_n, nb_n+ni), bulk after
        idx = list(range(nb_n + ni, n)) + list(range(nb_n, nb_n + ni))
        A[np.ix_(idx, idx)] += parts[1][m]
        mats.append(A)
    names = (
        tuple(f"N.{ns.structure.dof_names[j]}" for j in ns.bulk_index)
        + tuple(f"I.{q}" for q in ns.interface)
        + tuple(f"P.{ps.structure.dof_names[j]}" for j in ps.bulk_index)
    )
    return Structure(M=mats[0], C=mats[1], K=mats[2], dof_names=names)


def join_beams(ns: Substructure, ps: Substructure) -> Beam:
    """Join a numerical root beam (interface = its last node) and a physical tip beam
    (interface = its first node) into one :class:`~hbtest.method.structures.Beam` with global node
    numbering (so mode shapes can be read along x). Sections may differ; ``EI``/``rhoA`` of
    the result are those of the numerical part."""
    nb, pb = ns.structure, ps.structure
    if not (isinstance(nb, Beam) and isinstance(pb, Beam)):
        raise TypeError("join_beams needs two beams")
    jn = nb.x_nodes.size - 1
    if ns.interface != (f"u{jn}", f"theta{jn}") or ps.interface != ("u0", "theta0"):
        raise ValueError("join_beams expects the NS interface at its last node and the PS at its first")
    joined = join(ns, ps)

    def rename(name: str) -> str:
        side, dof = name.split(".", 1)
        kind = "u" if dof.startswith("u") else "theta"
        j = int(dof[len(kind):])
        return f"{kind}{j + jn}" if side == "P" else f"{kind}{j}" if side == "N" else f"{kind}{jn}"

    return Beam(
        M=joined.M, C=joined.C, K=joined.K,
        dof_names=tuple(rename(n) for n in joined.dof_names),
        x_nodes=np.concatenate([nb.x_nodes, pb.x_nodes[1:] - pb.x_nodes[0] + nb.x_nodes[-1]]),
        EI=nb.EI, rhoA=nb.rhoA, zeta_mass=nb.zeta_mass, zeta_stiffness=nb.zeta_stiffness, section=dict(nb.section),
    )


def split_beam(
    total_length: float,
    interface_at: float,
    width: float,
    thickness: float,
    youngs_modulus: float,
    density: float,
    elements_per_metre: float = 100.0,
    zeta_mass: float = 0.0,
    zeta_stiffness: float = 0.0,
    root: str = "clamped",
    tip: str = "free",
    min_elements: int = 4,
) -> tuple[Substructure, Substructure, Beam]:
    """Split a uniform beam at ``interface_at`` [m from the root] into a numerical root part
    (root BC, interface at its end) and a physical tip part (interface at its start, tip BC).
    Returns (ns, ps, full) where ``full`` is the uncut beam with a node at the interface.
    Both substructures use the interface DOFs (u, theta) in that order."""
    if not 0 < interface_at < total_length:
        raise ValueError(f"interface at {interface_at} m is outside the beam (0, {total_length})")
    ln, lp = interface_at, total_length - interface_at
    nn = max(min_elements, int(round(ln * elements_per_metre)))
    npe = max(min_elements, int(round(lp * elements_per_metre)))
    kw = dict(width=width, thickness=thickness, youngs_modulus=youngs_modulus, density=density, zeta_mass=zeta_mass, zeta_stiffness=zeta_stiffness)
    ns_beam = beam(ln, n_elements=nn, left=root, right="free", **kw)
    ps_beam = beam(lp, n_elements=npe, left="free", right=tip, x_offset=ln, **kw)
    full_nodes = np.concatenate([ns_beam.x_nodes, ps_beam.x_nodes[1:]])
    full = beam(total_length, left=root, right=tip, nodes=full_nodes, **kw)
    jn = ns_beam.x_nodes.size - 1
    ns = Substructure(ns_beam, (f"u{jn}", f"theta{jn}"))
    ps = Substructure(ps_beam, ("u0", "theta0"))
    return ns, ps, full


def mode_nodes(b: Beam, shape: np.ndarray, tol: float = 1e-6) -> np.ndarray:
    """Positions [m, in the beam's x] where the transverse displacement of a mode shape
    crosses zero, excluding the supported ends. Found by sign changes at the nodes and cubic
    Hermite interpolation inside the element (bisection)."""
    full = b.full_vector(np.asarray(shape))
    u, th = full[:, 0], full[:, 1]
    xs = b.x_nodes
    scale = np.abs(u).max()
    if scale == 0:
        return np.array([])
    out = []

    def interp(e, x):
        le = xs[e + 1] - xs[e]
        xi = (x - xs[e]) / le
        h = np.array([1 - 3 * xi**2 + 2 * xi**3, le * (xi - 2 * xi**2 + xi**3), 3 * xi**2 - 2 * xi**3, le * (-(xi**2) + xi**3)])
        return h @ np.array([u[e], th[e], u[e + 1], th[e + 1]])

    for e in range(xs.size - 1):
        a, c = xs[e], xs[e + 1]
        fa, fc = interp(e, a), interp(e, c)
        if abs(fa) <= tol * scale:
            continue  # a node sitting on a mesh node is reported by the element that ends there
        if abs(fc) <= tol * scale:
            if e + 1 < xs.size - 1:
                out.append(c)
            continue
        if fa * fc < 0:
            for _ in range(60):
                m = 0.5 * (a + c)
                fm = interp(e, m)
                if fa * fm <= 0:
                    c, fc = m, fm
                else:
                    a, fa = m, fm
            out.append(0.5 * (a + c))
    return np.array(out)

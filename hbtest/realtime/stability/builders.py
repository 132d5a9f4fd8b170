"""Builders of one-delay hybrid-test systems (docs/method.md §4): any two substructures
(:func:`hybrid_system`), lumped chains (:func:`chain_hybrid`), split beams
(:func:`beam_hybrid`, built with :func:`hbtest.method.substructure.split_beam`) and the
Craig–Bampton reduction of a part (:func:`craig_bampton`).

The actuator imposes the numerical interface motion on the physical substructure (PS) after
a delay ``tau``; the measured PS interface force is fed back to the numerical substructure
(NS). SI units; frequencies in Hz.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from ...config.section import MAX_BEAM_ELEMENTS
from ...method.structures import Structure, chain_links, stamp_link
from ...method.substructure import Substructure, split_beam
from .equation import TWO_PI
from .systems import SingleDelaySystem

__all__ = [
    "hybrid_system", "chain_hybrid", "craig_bampton", "beam_hybrid", "beam_elements",
    "BEAM_SECTION_KEYS", "MAX_BEAM_ELEMENTS", "MAX_INTERFACE_DOFS",
]

# section/material keys of hbtest.method.substructure.split_beam that ``physical`` may override
BEAM_SECTION_KEYS = ("width", "thickness", "youngs_modulus", "density", "zeta_mass", "zeta_stiffness")
BEAM_MIN_ELEMENTS = 3  # elements per part at the least
# MAX_BEAM_ELEMENTS (hbtest.config.section, one bound for every beam): the block characteristic matrix
# of a split beam is dense, 2 (n_elements + 1) square, and the delay-0 eigenproblem twice
# that: 400 elements take about 10 s per critical delay
# the crossing scan follows the pencil eigenvalue branches by trying every permutation
# (k! of them) between frequency samples: at most 5 actuated DOFs
MAX_INTERFACE_DOFS = 5
# relative size of off-diagonal modal damping below which bulk damping counts as proportional
PROPORTIONAL_DAMPING_RTOL = 1e-9


class _Condensed:
    """``D_cond(s) = D_ii - D_ib D_bb^-1 D_bi`` of a substructure, for the crossing scan.

    Not a second condensation: without proportional bulk damping it *is*
    :meth:`hbtest.method.substructure.Substructure.dynamic_stiffness`. With it (bulk damping diagonal
    in the undamped bulk modes) it evaluates the same Schur complement in its rational modal
    form ``D_ii(s) - G_ib(s) diag(1 / (s^2 + c_j s + w_j^2)) G_bi(s)``: one eigen-
    decomposition, then O(n_b) work per frequency instead of an O(n_b^3) solve. The crossing
    scan evaluates it at tens of thousands of points, which is why this form exists."""

    def __init__(self, sub: Substructure):
        S = sub.structure
        iface, b = sub.interface_index, sub.bulk_index
        ix = np.ix_
        self.sub = sub
        self.has_bulk = bool(b)
        self.Mii, self.Cii, self.Kii = (getattr(S, m)[ix(iface, iface)] for m in ("M", "C", "K"))
        self.modal = False
        if not b:
            return
        Mbb, Cbb, Kbb = (getattr(S, m)[ix(b, b)] for m in ("M", "C", "K"))
        try:
            w2, Phi = scipy.linalg.eigh(Kbb, Mbb)
        except (np.linalg.LinAlgError, ValueError):
            return
        Cm = Phi.T @ Cbb @ Phi
        off = Cm - np.diag(np.diag(Cm))
        if np.abs(off).max(initial=0.0) > PROPORTIONAL_DAMPING_RTOL * max(np.abs(Cm).max(initial=0.0), 1e-300):
            return
        self.modal = True
        self.w2 = w2
        self.cd = np.diag(Cm)
        self.Gbi = [Phi.T @ getattr(S, m)[ix(b, iface)] for m in ("M", "C", "K")]
        self.Gib = [getattr(S, m)[ix(iface, b)] @ Phi for m in ("M", "C", "K")]

    def __call__(self, s) -> np.ndarray:
        if not self.modal:
            return self.sub.dynamic_stiffness(s)
        s = np.asarray(s, dtype=complex)
        ss = s[..., None, None]
        Dii = ss * ss * self.Mii + ss * self.Cii + self.Kii
        Gbi = ss * ss * self.Gbi[0] + ss * self.Gbi[1] + self.Gbi[2]
        Gib = ss * ss * self.Gib[0] + ss * self.Gib[1] + self.Gib[2]
        d = s[..., None] ** 2 + s[..., None] * self.cd + self.w2
        return Dii - Gib @ (Gbi / d[..., :, None])


def hybrid_system(ns: Substructure, ps: Substructure, label: str = "") -> SingleDelaySystem:
    """The classical real-time hybrid test with actuator delay ``tau``.

    Derivation. Unknowns: NS bulk ``u_b``, interface ``u_i`` (computed by the NS), PS bulk
    ``p_b``. The actuator imposes ``x_i(t) = u_i(t - tau)`` on the PS, so the PS bulk obeys
    ``P_bi x_i + P_bb p_b = 0`` and the measured interface force is
    ``r = P_ii x_i + P_ib p_b``; the NS interface equation is ``N_ib u_b + N_ii u_i + r = F_i``.
    With ``e = exp(-s tau)`` (``x_i = e u_i``) the characteristic matrix in
    (NS bulk, interface, PS bulk) coordinates is

        [[N_bb, N_bi,          0   ],
         [N_ib, N_ii + e P_ii, P_ib],
         [0,    e P_bi,        P_bb]]

    (the delay sits on the PS entries of the interface *column*: the PS sees the delayed
    interface motion). Scaling the PS-bulk column by ``e`` and its row by ``1/e`` gives the
    equivalent form with ``e P_ib`` instead; the determinant is the same. Eliminating the
    bulks, ``det T = det N_bb det P_bb det(D_N(s) + e D_P(s))``: an entire function without
    the rational poles of the condensed form. The ``e s^2 M_P`` entries make it neutral.
    Interface orders of ``ns`` and ``ps`` must correspond; both structures must be symmetric.
    """
    if len(ns.interface) != len(ps.interface):
        raise ValueError("the substructures' interfaces differ in size")
    if len(ns.interface) > MAX_INTERFACE_DOFS:
        raise ValueError(f"{len(ns.interface)} interface DOFs: the crossing scan handles at most {MAX_INTERFACE_DOFS} actuated DOFs")
    Ni, Nb = ns.interface_index, ns.bulk_index
    Pi, Pb = ps.interface_index, ps.bulk_index
    nb, ni, pb = len(Nb), len(Ni), len(Pb)
    n = nb + ni + pb
    I_ = slice(nb, nb + ni)
    B_ = slice(nb + ni, n)
    A, B = [], []
    for m in ("M", "C", "K"):
        N = getattr(ns.structure, m)
        P = getattr(ps.structure, m)
        a = np.zeros((n, n))
        bm = np.zeros((n, n))
        no = Nb + Ni
        a[: nb + ni, : nb + ni] = N[np.ix_(no, no)]
        a[I_, B_] = P[np.ix_(Pi, Pb)]
        a[B_, B_] = P[np.ix_(Pb, Pb)]
        bm[I_, I_] = P[np.ix_(Pi, Pi)]
        bm[B_, I_] = P[np.ix_(Pb, Pi)]
        A.append(a)
        B.append(bm)
    cn = _Condensed(ns)
    cp = _Condensed(ps)
    names = (
        tuple(f"N.{ns.structure.dof_names[j]}" for j in Nb)
        + tuple(f"I.{q}" for q in ns.interface)
        + tuple(f"P.{ps.structure.dof_names[j]}" for j in Pb)
    )
    sys_ = SingleDelaySystem(A, B, pencil=lambda s: (cn(s), cp(s)), dof_names=names, label=label)
    sys_.ns, sys_.ps = ns, ps
    return sys_


def _split_matrices(m, k, c, ends, pm: set, pl: set):
    """({"N"|"P": [M, C, K] over all chain DOFs}, {"N"|"P": the DOFs each side's elements
    touch}) of a chain whose masses ``pm`` and links ``pl`` are physical."""
    n, n_links = m.size, k.size
    mats = {side: [np.zeros((n, n)) for _ in range(3)] for side in ("N", "P")}
    touched: dict[str, set] = {"N": set(), "P": set()}
    for j in range(n):
        side = "P" if j in pm else "N"
        mats[side][0][j, j] += m[j]
        if m[j] > 0:
            touched[side].add(j)
    for link in range(n_links):
        side = "P" if link in pl else "N"
        a, b = ends[link], ends[link + 1]
        stamp_link(mats[side][2], a, b, k[link])
        stamp_link(mats[side][1], a, b, c[link])
        for p in (a, b):
            if p is not None and (k[link] > 0 or c[link] > 0):
                touched[side].add(p)
    return mats, touched


def chain_hybrid(
    masses,
    springs,
    dampers=None,
    left_wall: bool = True,
    right_wall: bool = False,
    interface=(),
    physical_masses=(),
    physical_links=(),
) -> SingleDelaySystem:
    """A lumped chain split into NS and PS (same link numbering as
    :func:`hbtest.method.structures.mass_chain`: link i joins element i-1 and i of
    ``[left wall] m_0 .. m_{n-1} [right wall]``). Masses listed in ``physical_masses`` and
    links in ``physical_links`` form the PS; the rest the NS. ``interface`` lists the DOF
    indices driven by the actuators (one actuator each, all with the same delay); every DOF
    touched by both parts must be there. DOFs touched only by the PS are its bulk."""
    m, k, c, ends = chain_links(masses, springs, dampers, left_wall, right_wall)
    n, n_links = m.size, k.size
    iface = [int(i) for i in interface]
    pm = {int(i) for i in physical_masses}
    pl = {int(i) for i in physical_links}
    for i in iface + sorted(pm):
        if not 0 <= i < n:
            raise ValueError(f"DOF index {i} outside 0..{n - 1}")
    for i in pl:
        if not 0 <= i < n_links:
            raise ValueError(f"link index {i} outside 0..{n_links - 1}")
    if not iface:
        raise ValueError("at least one interface DOF is needed")
    if len(set(iface)) != len(iface):
        raise ValueError("interface DOFs repeat")
    if len(iface) > MAX_INTERFACE_DOFS:
        raise ValueError(f"{len(iface)} interface DOFs: the crossing scan handles at most {MAX_INTERFACE_DOFS} actuated DOFs")
    mats, touched = _split_matrices(m, k, c, ends, pm, pl)
    both = touched["N"] & touched["P"]
    missing = sorted(both - set(iface))
    if missing:
        raise ValueError(f"DOFs {missing} belong to both substructures but are not in the interface")
    for i in iface:
        if i not in touched["P"]:
            raise ValueError(f"interface DOF {i} has no physical element attached")
    free = sorted(set(range(n)) - touched["N"] - touched["P"])
    if free:
        raise ValueError(f"DOFs {free} have no mass, spring or damper")
    n_dofs = [j for j in range(n) if j in touched["N"] and j not in iface] + iface
    p_dofs = iface + [j for j in range(n) if j in touched["P"] and j not in iface]
    names = [f"x{j}" for j in range(n)]

    def struct(side, dofs):
        M, C, K = (x[np.ix_(dofs, dofs)] for x in mats[side])
        return Structure(M=M, C=C, K=K, dof_names=tuple(names[j] for j in dofs))

    ns = Substructure(struct("N", n_dofs), tuple(names[j] for j in iface))
    ps = Substructure(struct("P", p_dofs), tuple(names[j] for j in iface))
    return hybrid_system(ns, ps, label="chain")


def craig_bampton(sub: Substructure, max_frequency_hz: float | None = None, n_modes: int | None = None) -> Substructure:
    """Craig–Bampton reduction: interface DOFs plus the fixed-interface modes below
    ``max_frequency_hz`` (or the first ``n_modes``). Basis ``[[I, 0], [Psi, Phi]]`` with
    static constraint modes ``Psi = -K_bb^-1 K_bi`` and mass-normalised bulk modes ``Phi``;
    ``M, C, K`` projected (proportional damping stays proportional). DOFs of the result:
    the interface names, then ``q0, q1, ...``."""
    S = sub.structure
    i, b = sub.interface_index, sub.bulk_index
    if not b:
        return sub
    ix = np.ix_
    w2, Phi = scipy.linalg.eigh(S.K[ix(b, b)], S.M[ix(b, b)])
    f = np.sqrt(np.clip(w2, 0, None)) / TWO_PI
    if n_modes is not None:
        keep = np.arange(min(int(n_modes), f.size))
    elif max_frequency_hz is not None:
        keep = np.flatnonzero(f <= max_frequency_hz)
    else:
        keep = np.arange(f.size)
    Psi = -np.linalg.solve(S.K[ix(b, b)], S.K[ix(b, i)])
    n, ni, nq = S.n_dof, len(i), keep.size
    T = np.zeros((n, ni + nq))
    T[i, :ni] = np.eye(ni)
    T[ix(b, range(ni))] = Psi
    T[ix(b, range(ni, ni + nq))] = Phi[:, keep]
    red = Structure(
        M=T.T @ S.M @ T, C=T.T @ S.C @ T, K=T.T @ S.K @ T, dof_names=tuple(sub.interface) + tuple(f"q{j}" for j in range(nq))
    )
    sym = lambda a: 0.5 * (a + a.T)  # noqa: E731 - remove round-off asymmetry
    red = Structure(M=sym(red.M), C=sym(red.C), K=sym(red.K), dof_names=red.dof_names)
    return Substructure(red, tuple(sub.interface))


def beam_elements(total_length: float, interface_at: float, elements_per_metre: float, min_elements: int = BEAM_MIN_ELEMENTS) -> int:
    """Number of finite elements of both parts of a split beam: the mesh of
    :func:`hbtest.method.substructure.split_beam` (each part ``max(min_elements, round(length *
    elements_per_metre))``). Lengths in m."""
    parts = (interface_at, total_length - interface_at)
    return int(sum(max(min_elements, round(p * elements_per_metre)) for p in parts))


def beam_hybrid(
    total_length: float,
    interface_at: float,
    *,
    physical: dict | None = None,
    modes_up_to_hz: float | None = None,
    elements_per_metre: float = 60.0,
    min_elements: int = BEAM_MIN_ELEMENTS,
    **beam,
) -> SingleDelaySystem:
    """Beam split at ``interface_at`` [m from the root]: NS = root part (``root`` BC,
    interface at its end), PS = tip part (interface at its start, ``tip`` BC), interface DOFs
    (u, theta), one delay on both actuators.

    The split structure is :func:`hbtest.method.substructure.split_beam`'s; ``beam`` holds its
    keyword arguments (SI: ``width, thickness, youngs_modulus, density``, damping
    ``C = zeta_mass M + zeta_stiffness K``, ``root``, ``tip``). ``physical`` overrides the
    PS section/material (keys of :data:`BEAM_SECTION_KEYS`; the mesh is the same).
    ``modes_up_to_hz`` applies a Craig–Bampton reduction to each part (fixed-interface modes
    up to that frequency). Meshes over :data:`MAX_BEAM_ELEMENTS` elements are refused
    (``ValueError``)."""
    n_el = beam_elements(total_length, interface_at, elements_per_metre, min_elements)
    if n_el > MAX_BEAM_ELEMENTS:
        raise ValueError(
            f"{n_el} beam elements ({elements_per_metre:g} per metre over {total_length:g} m) exceed {MAX_BEAM_ELEMENTS}: "
            "the characteristic matrix is dense"
        )
    options = dict(beam, elements_per_metre=elements_per_metre, min_elements=min_elements)
    ns, ps, _ = split_beam(total_length, interface_at, **options)
    if physical:
        unknown = sorted(set(physical) - set(BEAM_SECTION_KEYS))
        if unknown:
            raise ValueError(f"physical: unknown key(s) {unknown}; expected some of {list(BEAM_SECTION_KEYS)}")
        _, ps, _ = split_beam(total_length, interface_at, **dict(options, **physical))
    if modes_up_to_hz is not None:
        ns = craig_bampton(ns, modes_up_to_hz)
        ps = craig_bampton(ps, modes_up_to_hz)
    return hybrid_system(ns, ps, label=f"beam alpha={interface_at / total_length:.4g}")

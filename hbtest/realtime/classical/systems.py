"""Hybrid systems of a classical real-time hybrid test: a numerical substructure (NS) and a
physical substructure (PS) sharing interface channels, the benchmark splits, and the state
spaces the time-stepping loop integrates.

- :class:`HybridSystem` — NS, PS (corresponding interface lists, one actuator per entry) and
  the external force vector on the NS;
- benchmarks: :func:`sdof_benchmark` (oscillator split at its spring),
  :func:`three_mass_benchmark` (two-actuator chain), :func:`chain_benchmark` (a lumped chain
  as :func:`hbtest.realtime.stability.chain_hybrid` builds it), :func:`cantilever_benchmark` (the split
  beam of a sweep file);
- state spaces: :func:`ns_state_space` (NS driven by the measured force and the harmonic
  drive), :func:`ps_state_space` (PS under prescribed interface motion, output the interface
  force), :func:`plant_state_space` (transfer system in series with the PS).

Units: SI (m, rad, N, N m, s, kg). Sign conventions: the PS interface force ``r`` acts on the
NS with a minus sign (``M q'' + C q' + K q = f_ext - E r``); a complex force amplitude ``F``
means ``f(t) = Re(F e^{i w t}) = Re(F) cos(w t) - Im(F) sin(w t)`` (docs/method.md §0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...method.structures import Structure
from ...method.substructure import Substructure, join
from ..stability import chain_hybrid, hybrid_system
from .transfer import TransferSystem

__all__ = [
    "HybridSystem",
    "sdof_benchmark",
    "three_mass_benchmark",
    "chain_benchmark",
    "cantilever_benchmark",
    "ns_state_space",
    "ps_state_space",
    "plant_state_space",
]

_TWO_PI = 2.0 * np.pi


@dataclass(frozen=True, eq=False)
class HybridSystem:
    """A numerical and a physical substructure with corresponding interface lists (one
    actuator per entry). ``force`` is the complex amplitude vector [N] of the external force
    on the NS DOFs (``f(t) = Re(force e^{i w t})``) used when an excitation frequency is
    given. ``label`` names the benchmark."""

    ns: Substructure
    ps: Substructure
    force: np.ndarray | None = None
    label: str = ""

    def __post_init__(self):
        if len(self.ns.interface) != len(self.ps.interface):
            raise ValueError("the NS and PS interfaces differ in size")
        n = self.ns.structure.n_dof
        f = np.zeros(n, complex) if self.force is None else np.asarray(self.force, dtype=complex).reshape(-1)
        if f.shape != (n,):
            raise ValueError(f"force must have {n} entries (NS DOFs), got {f.shape}")
        object.__setattr__(self, "force", f)

    @property
    def n_ch(self) -> int:
        return len(self.ns.interface)

    def stability_system(self):
        """The :class:`hbtest.realtime.stability.SingleDelaySystem` of this split (one delay)."""
        return hybrid_system(self.ns, self.ps, label=self.label)

    def emulated(self) -> Structure:
        """The monolithic structure: NS DOFs, then PS bulk DOFs, PS interface tied to the NS
        interface."""
        return join(self.ns, self.ps)

    def interface_response(self, frequency_hz, amplitude_scale: float = 1.0) -> np.ndarray:
        """Emulated interface displacement amplitudes ``(D_N + D_P)^-1 F_cond`` at
        ``frequency_hz`` (scalar or array), shape (*f.shape, n_ch), complex [m | rad]."""
        f = np.asarray(frequency_hz, dtype=float)
        s = _TWO_PI * 1j * f
        D = self.ns.dynamic_stiffness(s) + self.ps.dynamic_stiffness(s)
        Fc = self.ns.condensed_force(self.force * amplitude_scale, s)
        return np.linalg.solve(D, Fc[..., None])[..., 0]


def sdof_benchmark(m: float = 1.0, c: float = 6.3, k: float = 4000.0, ks: float = 4000.0) -> HybridSystem:
    """Single oscillator split at its spring: ``m z'' + c z' + k z + k_s z(t - tau) = f``.
    NS = mass, damper and spring ``k`` [kg, N s/m, N/m]; PS = the pure spring ``k_s`` behind
    the actuator. External force on the mass (unit amplitude)."""
    for name, v in (("m", m), ("k", k)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if c < 0 or ks < 0:
        raise ValueError("c and ks must not be negative")
    ns = Substructure(Structure(M=[[m]], C=[[c]], K=[[k]], dof_names=("z",)), ("z",))
    ps = Substructure(Structure(M=[[0.0]], C=[[0.0]], K=[[ks]], dof_names=("z",)), ("z",))
    return HybridSystem(ns, ps, np.array([1.0 + 0j]), label="sdof")


def three_mass_benchmark(masses=(1.0, 0.5, 1.0), springs=(1000.0, 2000.0, 2000.0, 1000.0),
                         dampers=(1.0, 0.5, 0.5, 1.0), force_on: int = 0) -> HybridSystem:
    """The symmetric three-mass chain between two walls with two actuators, split as in
    Wallace et al. (2005, multi-actuator substructuring) and ``sweeps/three-mass-chain.toml``:

        wall --k0-- m0 --k1-- m1 --k2-- m2 --k3-- wall

    NS = the outer masses ``m0``, ``m2`` with their wall springs/dashpots ``k0``, ``k3``;
    PS = the middle mass ``m1`` with the coupling springs/dashpots ``k1``, ``k2``; actuator 1
    imposes ``x0`` on the free end of ``k1``, actuator 2 imposes ``x2`` on ``k2``; the
    measured spring forces are fed back. External force (unit amplitude) on mass
    ``force_on`` (0 or 2)."""
    m0, m1, m2 = (float(v) for v in masses)
    k0, k1, k2, k3 = (float(v) for v in springs)
    c0, c1, c2, c3 = (float(v) for v in dampers)
    ns_s = Structure(M=np.diag([m0, m2]), C=np.diag([c0, c3]), K=np.diag([k0, k3]), dof_names=("x0", "x2"))
    # PS DOFs: (a1 = end of k1 at x0, a2 = end of k2 at x2, x1)
    K = np.array([[k1, 0, -k1], [0, k2, -k2], [-k1, -k2, k1 + k2]])
    C = np.array([[c1, 0, -c1], [0, c2, -c2], [-c1, -c2, c1 + c2]])
    ps_s = Structure(M=np.diag([0.0, 0.0, m1]), C=C, K=K, dof_names=("x0", "x2", "x1"))
    if force_on not in (0, 2):
        raise ValueError("force_on must be 0 or 2 (a numerical mass)")
    F = np.zeros(2, complex)
    F[0 if force_on == 0 else 1] = 1.0
    return HybridSystem(Substructure(ns_s, ("x0", "x2")), Substructure(ps_s, ("x0", "x2")), F, label="three-mass")


def chain_benchmark(chain: dict, force_dof: str | None = None, label: str = "chain") -> HybridSystem:
    """A lumped chain split into NS and PS: ``chain`` holds the keyword arguments of
    :func:`hbtest.realtime.stability.chain_hybrid` (masses [kg], springs [N/m], dampers [N s/m],
    walls, interface, physical masses and links; e.g. as read from
    ``sweeps/three-mass-chain.toml``), one actuator per interface DOF. Unit external force
    on the NS DOF named ``force_dof`` (default: the first NS DOF). Raises ValueError for an
    inconsistent chain and KeyError (listing the NS DOFs) for an unknown ``force_dof``."""
    sd = chain_hybrid(**chain)
    names = list(sd.ns.structure.dof_names)
    dof = names[0] if force_dof is None else force_dof
    if dof not in names:
        raise KeyError(f"{dof!r} is not a numerical DOF (numerical DOFs: {', '.join(names)})")
    F = np.zeros(len(names), complex)
    F[names.index(dof)] = 1.0
    return HybridSystem(sd.ns, sd.ps, F, label=label)


def cantilever_benchmark(cfg) -> HybridSystem:
    """The cantilever of a sweep file: NS = the root beam of ``[numerical]``
    (``cfg.numerical.substructure()``), PS = the tip beam (free at the interface, the twin's
    free tip) from the sweep's ``[design.physical]`` or else the rig file's ``[physical]``
    beam (same damping model ``C = zeta_M M + zeta_K K``), interface (u, theta). External
    force: ``cfg.excitation`` (amplitude [N] at its node)."""
    from ...design import split_substructures

    ns, ps, _ = split_substructures(cfg)
    return HybridSystem(ns, ps, cfg.excitation.force_vector(ns), label=f"cantilever {cfg.name}")


def ns_state_space(ns: Substructure, force: np.ndarray):
    """NS: states [q; q'], inputs [r (n_ch); cos wt; sin wt]: ``M q'' + C q' + K q =
    Re(F) cos - Im(F) sin - E r``. Returns A, B, and output maps for z, z', z''."""
    S = ns.structure
    n = S.n_dof
    try:
        Minv = np.linalg.inv(S.M)
    except np.linalg.LinAlgError:
        raise ValueError("the numerical substructure needs a non-singular mass matrix") from None
    ii = ns.interface_index
    E = np.zeros((n, len(ii)))
    E[ii, range(len(ii))] = 1.0
    Fin = np.column_stack([-E, force.real, -force.imag])
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ S.K, -Minv @ S.C]])
    B = np.vstack([np.zeros((n, Fin.shape[1])), Minv @ Fin])
    Cz = np.hstack([E.T, np.zeros((len(ii), n))])
    Czd = np.hstack([np.zeros((len(ii), n)), E.T])
    Czdd = E.T @ A[n:]  # acceleration rows
    Dzdd = E.T @ B[n:]
    return A, B, Cz, Czd, Czdd, Dzdd


def ps_state_space(ps: Substructure):
    """PS under prescribed interface motion: states [q_b; q_b'], input [x; x'; x''] (3 n_ch),
    output the interface force r (n_ch). Transfer function = condensed ``D_P(s)``."""
    S = ps.structure
    i, b = ps.interface_index, ps.bulk_index
    ix = np.ix_
    Mii, Cii, Kii = (getattr(S, m)[ix(i, i)] for m in ("M", "C", "K"))
    nc = len(i)
    if not b:
        return np.zeros((0, 0)), np.zeros((0, 3 * nc)), np.zeros((nc, 0)), np.hstack([Kii, Cii, Mii])
    Mbb, Cbb, Kbb = (getattr(S, m)[ix(b, b)] for m in ("M", "C", "K"))
    Mbi, Cbi, Kbi = (getattr(S, m)[ix(b, i)] for m in ("M", "C", "K"))
    Mib, Cib, Kib = (getattr(S, m)[ix(i, b)] for m in ("M", "C", "K"))
    try:
        Mbb_inv = np.linalg.inv(Mbb)
    except np.linalg.LinAlgError:
        raise ValueError("the physical substructure's bulk DOFs need a non-singular mass matrix") from None
    nb = len(b)
    A = np.block([[np.zeros((nb, nb)), np.eye(nb)], [-Mbb_inv @ Kbb, -Mbb_inv @ Cbb]])
    B = np.vstack([np.zeros((nb, 3 * nc)), -Mbb_inv @ np.hstack([Kbi, Cbi, Mbi])])
    C = np.hstack([Kib - Mib @ Mbb_inv @ Kbb, Cib - Mib @ Mbb_inv @ Cbb])
    D = np.hstack([Kii - Mib @ Mbb_inv @ Kbi, Cii - Mib @ Mbb_inv @ Cbi, Mii - Mib @ Mbb_inv @ Mbi])
    return A, B, C, D


def plant_state_space(transfer: TransferSystem, ps: Substructure):
    """Transfer system in series with the PS. Input: delayed command (3 n_ch); outputs:
    r (n_ch) and actuator displacement x (n_ch)."""
    nc = len(ps.interface)
    Aa, Ba, Ca, Da = transfer.state_space(nc)
    Ap, Bp, Cp, Dp = ps_state_space(ps)
    na, npp = Aa.shape[0], Ap.shape[0]
    A = np.zeros((na + npp, na + npp))
    A[:na, :na] = Aa
    A[na:, :na] = Bp @ Ca
    A[na:, na:] = Ap
    B = np.vstack([Ba, Bp @ Da])
    Cr = np.hstack([Dp @ Ca, Cp])
    Dr = Dp @ Da
    Cx = np.hstack([Ca[:nc], np.zeros((nc, npp))])
    Dx = Da[:nc]
    return A, B, Cr, Dr, Cx, Dx

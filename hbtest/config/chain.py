"""Lumped-chain definition files (``hbtest stability chain``, ``hbtest classical chain``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .files import load_toml
from .section import Section, SourceFile

__all__ = ["ChainConfig", "load_chain", "MAX_CHAIN_MASSES"]



# the stability analysis of a chain builds dense n x n matrices (and a 2n eigenproblem)
MAX_CHAIN_MASSES = 800


@dataclass(frozen=True)
class ChainConfig:
    """A parsed lumped-chain definition (see ``sweeps/three-mass-chain.toml``).

    Chain ``[left wall] m_0 .. m_{n-1} [right wall]`` (masses [kg]); link ``i`` joins element
    ``i-1`` and ``i`` (spring [N/m], dashpot [N s/m]). ``interface``: actuated DOF indices;
    ``physical_masses`` / ``physical_links``: the physical substructure. ``cutoff_hz`` [Hz]
    and ``tau_max_s`` [s]: defaults of the stability analysis (``[stability]`` table)."""

    source: SourceFile
    name: str
    masses: tuple
    springs: tuple
    dampers: tuple | None
    left_wall: bool
    right_wall: bool
    interface: tuple
    physical_masses: tuple
    physical_links: tuple
    cutoff_hz: float = 500.0
    tau_max_s: float = 1.0

    def chain_kwargs(self) -> dict:
        """Keyword arguments of :func:`hbtest.realtime.stability.chain_hybrid`."""
        return dict(
            masses=list(self.masses), springs=list(self.springs), dampers=None if self.dampers is None else list(self.dampers),
            left_wall=self.left_wall, right_wall=self.right_wall, interface=list(self.interface),
            physical_masses=list(self.physical_masses), physical_links=list(self.physical_links),
        )


def _dofs(sp: Section, key: str, required: bool, n: int) -> tuple[int, ...]:
    """A ``[split]`` list of DOFs (names ``"x0"``.. or indices) of a chain of ``n`` masses."""
    raw = sp._get(key, [], required)
    if not isinstance(raw, list):
        raise sp.error(key, "must be a list of DOF names (x0, x1, ...) or indices")
    out = []
    for x in raw:
        if isinstance(x, str) and x.startswith("x") and x[1:].isdigit():
            i = int(x[1:])
        elif isinstance(x, int) and not isinstance(x, bool):
            i = x
        else:
            raise sp.error(key, f"{x!r} is not a DOF name like 'x0' or an index")
        if not 0 <= i < n:
            raise sp.error(key, f"DOF {x!r} outside x0..x{n - 1}")
        out.append(i)
    return tuple(out)


def load_chain(path, overrides=(), text: str | None = None) -> ChainConfig:
    """Parse and validate a lumped-chain file: ``[chain]`` (``masses_kg``,
    ``springs_n_per_m``, optional ``dampers_n_s_per_m``, ``left_wall`` = true,
    ``right_wall`` = false), ``[split]`` (``interface``, optional ``physical_masses`` as DOF
    names ``"x0"``.. or indices, optional ``physical_links`` as link indices) and an optional
    ``[stability]`` (``cutoff_hz``, ``tau_max_s``). Every problem is a ConfigError naming the
    file and key."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    name = top.string("name", Path(src.path).stem)
    top.string("description", "")

    ch = top.sub("chain")
    masses = ch.numbers("masses_kg", nonnegative=True)
    springs = ch.numbers("springs_n_per_m", nonnegative=True)
    dampers = ch.numbers("dampers_n_s_per_m", nonnegative=True) if ch.has("dampers_n_s_per_m") else None
    left, right = ch.boolean("left_wall", True), ch.boolean("right_wall", False)
    n = len(masses)
    if n == 0:
        raise ch.error("masses_kg", "needs at least one mass")
    if n > MAX_CHAIN_MASSES:
        raise ch.error("masses_kg", f"{n} masses exceed {MAX_CHAIN_MASSES} (the stability analysis builds dense n x n matrices)")
    n_links = n - 1 + int(left) + int(right)
    if len(springs) != n_links:
        raise ch.error("springs_n_per_m", f"{n} masses with these walls need {n_links} springs, got {len(springs)}")
    if dampers is not None and len(dampers) != n_links:
        raise ch.error("dampers_n_s_per_m", f"needs {n_links} values, got {len(dampers)}")
    ch.finish()

    sp = top.sub("split")
    interface = _dofs(sp, "interface", True, n)
    physical_masses = _dofs(sp, "physical_masses", False, n)
    links = sp.numbers("physical_links", [], integer=True)
    for i in links:
        if not 0 <= i < n_links:
            raise sp.error("physical_links", f"link {i} outside 0..{n_links - 1}")
    sp.finish()

    st = top.sub("stability", required=False)
    cutoff = st.number("cutoff_hz", 500.0, positive=True)
    tau_max = st.number("tau_max_s", 1.0, positive=True)
    st.finish()
    top.finish()
    return ChainConfig(src, name, masses, springs, dampers, left, right, interface, physical_masses, tuple(links), cutoff, tau_max)



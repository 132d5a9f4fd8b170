"""The nonlinear-element table of a definition file, one parser for every file that declares
elements on a beam: ``[[numerical.nonlinear]]`` of a sweep file (the numerical substructure)
and ``[[virtual.nonlinear]]`` of a twin's rig file (the physical substructure it simulates).

Units: a file key carries its unit (``position_mm``, ``gap_mm``, ``k3_n_per_m3``...), values
are SI inside; positions [m] along the beam from its x = 0 end. Each entry is parsed into a
:class:`NonlinearElementSpec` (no TOML is read here: the config layer hands a
:class:`~hbtest.config.section.Section`). Force laws and sign conventions of the kinds:
:mod:`hbtest.numerical.elements`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .elements import ELEMENT_KINDS, create_element

if TYPE_CHECKING:  # the config layer hands a Section in; importing it would run hbtest.config, which imports this
    from ..config.section import Section

__all__ = ["NonlinearElementSpec", "read_element_tables", "NONLINEAR_DOFS", "CONTACT_SIDES"]

#: ``dof`` values of a nonlinear element and the DOF-name prefix each stands for
NONLINEAR_DOFS = {"u": "u", "theta": "theta", "θ": "theta"}
#: ``side`` values of a contact element and the sign of its stop
CONTACT_SIDES = {"positive": 1.0, "negative": -1.0}


@dataclass(frozen=True)
class NonlinearElementSpec:
    """One nonlinear-element entry (SI): an element of a registered kind
    (:data:`hbtest.numerical.ELEMENT_KINDS`) at the node at ``position`` [m from the beam's
    x = 0 end], acting on ``dof`` (``"u"`` or ``"theta"``), grounded or, with ``to_position``,
    between the two nodes (relative coordinate ``q(position) - q(to_position)``); ``params``:
    the kind's parameters in SI as (field, value) pairs (see :mod:`hbtest.numerical.elements`
    for the force laws and their sign conventions)."""

    kind: str
    position: float
    dof: str
    to_position: float | None = None
    params: tuple[tuple[str, float], ...] = ()

    @property
    def positions(self) -> tuple[float, ...]:
        return (self.position,) if self.to_position is None else (self.position, self.to_position)

    def dof_names(self, beam, offset: float = 0.0) -> tuple[str, ...]:
        """The DOF names of the element on ``beam`` (a node must sit at each position
        ``offset + x``: ``offset`` places a substructure's beam inside a joined one)."""
        return tuple(f"{self.dof}{beam.node_at(offset + x)}" for x in self.positions)

    def build(self, beam, offset: float = 0.0):
        """The :class:`~hbtest.numerical.Element` on ``beam`` (see :meth:`dof_names`)."""
        return create_element(self.kind, self.dof_names(beam, offset), **dict(self.params))


def read_element_tables(secs: list[Section], length: float, root: str = "free", fixed_at_zero: frozenset = frozenset(), what: str = "beam") -> tuple[NonlinearElementSpec, ...]:
    """Parse element tables (a ``Section.subs(...)`` list) on a beam of ``length`` [m]: keys
    ``kind`` (a registered element kind), ``position_mm``, ``dof`` (``"u"`` or ``"theta"``),
    optional ``to_position_mm`` (between two nodes), and the kind's parameters under their
    unit-named keys (``u`` / ``theta`` elements): ``cubic_spring``: ``k3_n_per_m3`` /
    ``k3_nm_per_rad3``; ``friction``: ``force_n`` / ``moment_nm`` and
    ``velocity_scale_m_per_s`` / ``velocity_scale_rad_per_s``; ``contact``: ``gap_mm`` /
    ``gap_mrad``, ``stiffness_n_per_m`` / ``stiffness_nm_per_rad`` and ``side``
    (``"positive"``: the stop at +gap, default; ``"negative"``: at -gap). ``fixed_at_zero``:
    the DOF prefixes (``"u"``, ``"theta"``) the ``root`` boundary condition fixes at x = 0 (an
    element there is refused); ``what`` names the beam in messages. Every problem is a
    :class:`~hbtest.errors.ConfigError` naming the key."""
    out = []
    for sec in secs:
        kind = sec.string("kind", choices=tuple(ELEMENT_KINDS))
        dof = NONLINEAR_DOFS[sec.string("dof", choices=tuple(NONLINEAR_DOFS))]
        positions = []
        for key in ("position_mm", "to_position_mm"):
            x = sec.number(key, None, required=key == "position_mm", scale=1e-3, nonnegative=True)
            if x is None:
                continue
            if x > length * (1 + 1e-12):
                raise sec.error(key, f"{x * 1e3:g} mm lies outside the {what} (0..{length * 1e3:g} mm)")
            if x <= length * 1e-12 and dof in fixed_at_zero:
                raise sec.error(key, f"the {root} root fixes {dof} at 0 mm: an element there would never move")
            positions.append(min(x, length))
        if len(positions) == 2 and abs(positions[0] - positions[1]) <= 1e-9 * length:
            raise sec.error("to_position_mm", "must differ from position_mm (a grounded element has no to_position_mm)")
        cls = ELEMENT_KINDS[kind]
        params = []
        for prm in cls.params:
            key, other = (prm.key_u, prm.key_theta) if dof == "u" else (prm.key_theta, prm.key_u)
            if other != key and sec.has(other):
                raise sec.error(other, f"is for a {'theta' if dof == 'u' else 'u'} element; this {kind} acts on {dof}: use {key}")
            opts = dict(positive=prm.sign == "positive", nonnegative=prm.sign == "nonnegative")
            params.append((prm.field, sec.number(key, prm.default, required=prm.default is None, scale=prm.scale, **opts)))
        if kind == "contact":
            params.append(("side", CONTACT_SIDES[sec.string("side", "positive", choices=tuple(CONTACT_SIDES))]))
        sec.finish()
        out.append(NonlinearElementSpec(kind, positions[0], dof, positions[1] if len(positions) == 2 else None, tuple(params)))
    return tuple(out)

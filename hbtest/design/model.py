"""The design model of a sweep file's split structure (SI units: lengths in m, the NS root
at x = 0, the interface at x = numerical length): the one way :mod:`hbtest.design` and the
commands built on it make the numerical and physical substructures."""

from __future__ import annotations

from ..config import BeamSpec, SweepConfig
from ..method.substructure import Substructure

__all__ = ["physical_beam_for_design", "split_substructures"]


def physical_beam_for_design(cfg: SweepConfig) -> tuple[BeamSpec, str]:
    """The PS beam used for design: the sweep's ``[design.physical]`` if given, else the rig
    file's ``[physical]`` beam."""
    if cfg.design_ps is not None:
        return cfg.design_ps, f"{cfg.source.path} [design.physical]"
    from ..config import load_rig

    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    return rig.physical, f"{rig.source.path} [physical]"


def split_substructures(cfg: SweepConfig) -> tuple[Substructure, Substructure, str]:
    """The one way a sweep file's split structure is built: (NS, PS, where the PS came from).
    NS = the root beam of ``[numerical]`` clamped at its root, interface at its free end;
    PS = the tip beam of :func:`physical_beam_for_design`, free at both ends, placed after the
    NS (``x_offset``), interface (u0, theta0)."""
    ps_beam, source = physical_beam_for_design(cfg)
    ns = cfg.numerical.substructure()
    pb = ps_beam.build(left="free", right="free", x_offset=cfg.numerical.beam.length)
    return ns, Substructure(pb, ("u0", "theta0")), source

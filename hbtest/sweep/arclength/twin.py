"""The exact joined structure of a sweep's twin, for comparisons (tests, benchmarks): apart from
:mod:`hbtest.sweep.arclength.reference` because it opens the twin from the sweep's config (the
config layer imports the arclength package: a module of its own keeps the import graph a tree).
"""

from __future__ import annotations

import numpy as np

from ...config import load_rig
from ...numerical import NonlinearSubstructure
from ...rig import open_rig
from ...rig.capabilities import KnownPhysicalSide
from .reference import joined_structure

__all__ = ["twin_joined"]


def twin_joined(cfg, seed: int) -> tuple[NonlinearSubstructure, np.ndarray]:
    """The numerical side of sweep ``cfg`` joined to its twin's true PS beam
    (``VirtualRig.ps_substructure``, the twin opened with ``seed``), with the sweep's force
    vector (:func:`~hbtest.sweep.arclength.reference.joined_structure`)."""
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=seed)
    try:
        if not isinstance(rig, KnownPhysicalSide):
            raise ValueError(f"{cfg.rig_path}: not a twin whose physical side is known")
        ns = cfg.numerical.numerical_substructure()
        return joined_structure(ns, rig.ps_substructure, cfg.excitation.force_vector(ns))
    finally:
        rig.close()

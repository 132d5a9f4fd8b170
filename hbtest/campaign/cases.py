"""A campaign's cases: the grid of varied parameters times the random draws, each case a
plain, picklable :class:`Case` (what a worker needs to run it, and nothing else).

Case order: the ``[[grid]]`` parameters' Cartesian product in file order (the last varies
fastest), each grid point repeated ``draws`` times (draw index fastest). Random values:
one ``numpy.random.default_rng(seed)``; for each ``[[random]]`` parameter in file order, one
array of ``n_cases`` values is drawn. Per-case rig seed (``rig_seed = "per-case"``): the first
32-bit word of ``SeedSequence([seed, case])``.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field

import numpy as np

__all__ = ["Case", "expand_cases", "toml_literal", "case_rig_seed"]


@dataclass(frozen=True)
class Case:
    """One case. ``parameters``: ((key, value), ...) of the varied parameters;
    ``sweep_overrides``: ``--set`` items of the base sweep (shared ones first);
    ``rig_overrides``: items appended to the sweep's ``rig_set``; ``analysis``: the kind's
    settings; ``rig_seed``: None = the rig file's own seed; ``run_store``: where to keep the
    case's run store (None: a temporary store, removed)."""

    index: int
    kind: str
    base: str
    parameters: tuple
    sweep_overrides: tuple
    rig_overrides: tuple
    analysis: dict = field(default_factory=dict)
    rig_seed: int | None = None
    figures: tuple = ()
    run_store: str | None = None


def toml_literal(value) -> str:
    """``value`` as a TOML value (the right-hand side of a ``--set`` item)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(value, str):
        # a TOML basic string: JSON's escapes are TOML's, but not JSON's surrogate pairs
        # (ensure_ascii) and TOML also wants DEL escaped
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} as a TOML value")


def case_rig_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, np.uint32)[0])


def _draw(rng, p, n: int) -> list:
    if p.distribution == "uniform":
        return [float(v) for v in rng.uniform(p.arguments[0], p.arguments[1], n)]
    if p.distribution == "normal":
        return [float(v) for v in rng.normal(p.arguments[0], p.arguments[1], n)]
    if p.distribution == "lognormal":
        return [float(v) for v in p.arguments[0] * np.exp(rng.normal(0.0, p.arguments[1], n))]
    idx = rng.integers(0, len(p.arguments), n)
    return [p.arguments[int(i)] for i in idx]


def expand_cases(cfg, runs_dir=None) -> list[Case]:
    """Every case of the :class:`hbtest.config.CampaignConfig` ``cfg``, in store order.
    ``runs_dir``: folder of the kept run stores (``keep_runs``)."""
    grid_points = list(itertools.product(*[p.values for p in cfg.grid])) if cfg.grid else [()]
    n = len(grid_points) * cfg.draws
    rng = np.random.default_rng(cfg.seed)
    drawn = [_draw(rng, p, n) for p in cfg.random]
    cases = []
    for i in range(n):
        values = list(grid_points[i // cfg.draws]) + [d[i] for d in drawn]
        params = tuple((p.key, v) for p, v in zip(cfg.parameters, values))
        sweep_ovr = list(cfg.overrides)
        rig_ovr = list(cfg.rig_overrides)
        analysis = dict(cfg.analysis)
        for p, v in zip(cfg.parameters, values):
            for target, path in ((p.target, p.path),) + tuple(a[:2] for a in p.also):
                if target == "sweep":
                    sweep_ovr.append(f"{path}={toml_literal(v)}")
                elif target == "rig":
                    rig_ovr.append(f"{path}={toml_literal(v)}")
                else:
                    analysis[path] = v
        run_store = None if runs_dir is None else str(runs_dir / f"case-{i:05d}.zarr")
        cases.append(Case(i, cfg.kind, str(cfg.base), params, tuple(sweep_ovr), tuple(rig_ovr), analysis,
                          case_rig_seed(cfg.seed, i) if cfg.rig_seed == "per-case" else None, tuple(cfg.figures), run_store))
    return cases

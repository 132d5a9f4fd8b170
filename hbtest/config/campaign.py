"""Campaign definition files (``hbtest campaign``); the campaign engine lives in
:mod:`hbtest.campaign`."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError
from .files import load_toml, parse_override
from .section import Section, SourceFile

__all__ = ["CampaignParameter", "CampaignConfig", "load_campaign", "CAMPAIGN_KINDS", "CAMPAIGN_FIGURES", "CAMPAIGN_TARGETS", "MAX_CAMPAIGN_CASES"]



#: what a campaign case runs
CAMPAIGN_KINDS = ("sweep", "classical", "stability")
#: where a varied key points: ``sweep.points`` (the base sweep file), ``rig:virtual.x`` (its
#: rig file, as an item of the sweep's ``rig_set``), ``analysis:delay_ms`` (the campaign's
#: ``[analysis]`` settings of a classical / stability case)
CAMPAIGN_TARGETS = ("sweep", "rig", "analysis")
CAMPAIGN_DISTRIBUTIONS = ("uniform", "normal", "lognormal", "choice")
#: the most cases one campaign store holds (one chunk file per variable and case)
MAX_CAMPAIGN_CASES = 100000
#: the figures a campaign of each kind can keep (computed by :mod:`hbtest.campaign.figures`)
CAMPAIGN_FIGURES = {
    "sweep": ("frf_error_max", "frf_error_rms", "converged_fraction", "rig_periods", "iterations_mean", "resonance_shift"),
    "classical": ("classical_frf_error_max", "iterative_frf_error_max", "classical_unstable_fraction", "converged_fraction",
                  "critical_delay_ms"),
    "stability": ("critical_delay_ms", "critical_frequency_hz"),
}
#: ``[analysis]`` settings of each kind: name -> (default, meaning); None = required
CAMPAIGN_ANALYSIS: dict[str, dict[str, float | None]] = {
    "sweep": {},
    "classical": {"delay_ms": None, "dt_ms": 0.2, "duration_s": 6.0, "actuator_hz": 0.0},
    "stability": {"cutoff_hz": 500.0, "tau_max_s": 1.0, "elements_per_metre": 0.0},
}


@dataclass(frozen=True)
class CampaignParameter:
    """One varied parameter. ``key`` as written (``sweep.points``, ``rig:virtual.seed``,
    ``analysis:delay_ms``); ``target`` / ``path`` its parts. A grid parameter has ``values``;
    a random one a ``distribution`` and its ``arguments`` (uniform: low, high; normal: mean,
    std; lognormal: median, sigma of the logarithm; choice: values). ``also``: further
    ``(target, path)`` keys set to the same value in each case (e.g. the classical test's
    delay and the twin's actuation delay varied together)."""

    key: str
    target: str
    path: str
    values: tuple = ()
    distribution: str = ""
    arguments: tuple = ()
    also: tuple = ()


@dataclass(frozen=True)
class CampaignConfig:
    """A parsed campaign file (see ``campaigns/paper-noise-budget.toml``).

    The cases are the Cartesian product of the ``[[grid]]`` values (in file order, the last
    varying fastest), each repeated ``draws`` times with fresh ``[[random]]`` draws (seeded by
    ``seed``). ``set`` / ``rig_set``: overrides every case shares. ``rig_seed``: ``"per-case"``
    (each case's virtual rig seeded from ``seed`` and its index) or ``"file"`` (the rig file's
    seed in every case)."""

    source: SourceFile
    name: str
    description: str
    kind: str
    base: Path
    overrides: tuple
    rig_overrides: tuple
    analysis: dict
    grid: tuple
    random: tuple
    draws: int
    seed: int
    rig_seed: str
    figures: tuple
    keep_runs: bool

    @property
    def parameters(self) -> tuple:
        return self.grid + self.random

    @property
    def n_cases(self) -> int:
        n = self.draws
        for p in self.grid:
            n *= len(p.values)
        return n


def _campaign_key(sec: Section, key: str, name: str) -> tuple[str, str]:
    if not isinstance(key, str) or not key.strip():
        raise sec.error(name, "must be a dotted key such as sweep.points, rig:virtual.actuation_delay_ms or analysis:delay_ms")
    target, sep, path = key.partition(":")
    if not sep:
        target, path = "sweep", key
    if target not in CAMPAIGN_TARGETS:
        raise sec.error(name, f"{key!r}: prefix {target!r} is not one of {', '.join(t + ':' for t in CAMPAIGN_TARGETS)}")
    if not path or any(not part for part in path.split(".")):
        raise sec.error(name, f"{key!r}: empty part in the dotted key")
    return target, path


def _also(sec: Section) -> tuple:
    raw = sec.value("also", [])
    if not isinstance(raw, list):
        raise sec.error("also", "must be a list of keys set to the same value")
    return tuple(_campaign_key(sec, k, "also") + (k,) for k in raw)


def _scalar_values(sec: Section, name: str, raw) -> tuple:
    if not isinstance(raw, list) or not raw:
        raise sec.error(name, "must be a non-empty list of values")
    for v in raw:
        if isinstance(v, (dict, list)):
            raise sec.error(name, f"{v!r}: a value must be a number, a string or a boolean")
        if isinstance(v, float) and not math.isfinite(v):
            raise sec.error(name, f"{v!r}: values must be finite")
    return tuple(raw)


def load_campaign(path, overrides=(), text: str | None = None) -> CampaignConfig:
    """Parse and validate a campaign file: ``name``, ``description``, ``kind`` (one of
    :data:`CAMPAIGN_KINDS`), ``base`` (the sweep file, relative to the campaign file),
    ``set`` / ``rig_set`` (overrides of every case), ``seed``, ``draws``, ``rig_seed``,
    ``figures`` (default: every figure of the kind), ``keep_runs``, ``[analysis]`` (the kind's
    settings, :data:`CAMPAIGN_ANALYSIS`), ``[[grid]]`` (``key``, ``values`` or ``start`` /
    ``stop`` / ``num``) and ``[[random]]`` (``key``, ``distribution`` and its arguments);
    both take ``also`` (keys set to the same value).
    Whether a varied key exists in the sweep or rig file is checked per case (a bad key fails
    that case, recorded in the store)."""
    doc, src = load_toml(path, overrides, text)
    top = Section(doc, src.path)
    base_dir = Path(src.path).resolve().parent
    name = top.string("name", Path(src.path).stem)
    description = top.string("description", "")
    kind = top.string("kind", "sweep", choices=CAMPAIGN_KINDS)
    base = top.path("base", base_dir)
    assert base is not None  # a required key: Section.path raised without it
    sets = []
    for key in ("set", "rig_set"):
        raw = top.value(key, [])
        if not isinstance(raw, list) or not all(isinstance(x, str) and "=" in x for x in raw):
            raise top.error(key, 'must be a list of "dotted.key=value" overrides')
        for item in raw:
            parse_override(item, f"{src.path}: {key}")
        sets.append(tuple(raw))
    seed = top.integer("seed", 0, min=0, max=2**63 - 1)
    rig_seed = top.string("rig_seed", "per-case", choices=("per-case", "file"))
    keep_runs = top.boolean("keep_runs", False)

    analysis = _read_analysis(top.sub("analysis", required=False), kind)
    grid = [_read_grid(g) for g in top.subs("grid")]
    random = [_read_random(r) for r in top.subs("random")]
    # draws without [[random]]: repeats of each grid point (noise only through the per-case rig seed)
    draws = top.integer("draws", 1, min=1, max=MAX_CAMPAIGN_CASES)
    keys = [p.key for p in grid + random] + [a[2] for p in grid + random for a in p.also]
    twice = sorted({k for k in keys if keys.count(k) > 1})
    if twice:
        raise top.error("grid", f"parameter {twice[0]!r} varied twice")

    if kind == "classical" and analysis["delay_ms"] is None and "analysis:delay_ms" not in keys:
        raise top.error("analysis.delay_ms", "a classical campaign needs the actuator delay (here or varied as analysis:delay_ms)")
    figures = _read_figures(top, kind)
    for p in grid + random:
        for target, kpath, key in ((p.target, p.path, p.key),) + p.also:
            if target == "analysis" and kpath not in CAMPAIGN_ANALYSIS[kind]:
                raise top.error("grid" if p in grid else "random",
                                f"{key!r}: a {kind} campaign has no analysis setting {kpath!r} ({', '.join(CAMPAIGN_ANALYSIS[kind]) or 'none'})")
    top.finish()
    cfg = CampaignConfig(src, name, description, kind, base, sets[0], sets[1], analysis, tuple(grid), tuple(random), draws, seed,
                         rig_seed, tuple(figures), keep_runs)
    if cfg.n_cases > MAX_CAMPAIGN_CASES:
        raise ConfigError(src.path, "grid", f"{cfg.n_cases} cases exceed the {MAX_CAMPAIGN_CASES} one campaign store holds")
    return cfg


def _read_analysis(an: Section, kind: str) -> dict:
    """``[analysis]``: the kind's settings (:data:`CAMPAIGN_ANALYSIS`)."""
    analysis = {}
    for key, default in CAMPAIGN_ANALYSIS[kind].items():
        if default is None:
            analysis[key] = an.number(key, None, required=False, positive=True)
        else:
            analysis[key] = an.number(key, default, nonnegative=True)
    an.finish()
    return analysis


def _read_grid(g: Section) -> CampaignParameter:
    """One ``[[grid]]`` parameter: ``values`` or ``start`` / ``stop`` / ``num``."""
    key = g.string("key")
    target, kpath = _campaign_key(g, key, "key")
    if g.has("values"):
        values = _scalar_values(g, "values", g.value("values"))
    else:
        start, stop = g.number("start"), g.number("stop")
        num = g.integer("num", min=1, max=MAX_CAMPAIGN_CASES)
        values = tuple(float(v) for v in np.linspace(start, stop, num))
    param = CampaignParameter(key, target, kpath, values=values, also=_also(g))
    g.finish()
    return param


def _read_random(r: Section) -> CampaignParameter:
    """One ``[[random]]`` parameter: ``distribution`` and its arguments."""
    key = r.string("key")
    target, kpath = _campaign_key(r, key, "key")
    dist = r.string("distribution", choices=CAMPAIGN_DISTRIBUTIONS)
    args: tuple
    if dist == "uniform":
        low, high = r.number("low"), r.number("high")
        if not high > low:
            raise r.error("high", f"must exceed low ({low:g})")
        args = (low, high)
    elif dist == "normal":
        args = (r.number("mean"), r.number("std", nonnegative=True))
    elif dist == "lognormal":
        args = (r.number("median", positive=True), r.number("sigma", nonnegative=True))
    else:
        args = _scalar_values(r, "values", r.value("values"))
    param = CampaignParameter(key, target, kpath, distribution=dist, arguments=args, also=_also(r))
    r.finish()
    return param


def _read_figures(top: Section, kind: str) -> list:
    """``figures``: names among the kind's (default: all of them)."""
    known = CAMPAIGN_FIGURES[kind]
    figures = top.value("figures", list(known))
    if not isinstance(figures, list) or not figures or not all(isinstance(f, str) for f in figures):
        raise top.error("figures", f"must be a non-empty list of figure names ({', '.join(known)})")
    for f in figures:
        if f not in known:
            raise top.error("figures", f"{f!r} is not a figure of a {kind} campaign ({', '.join(known)})")
    return figures



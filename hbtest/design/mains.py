"""Forcing harmonics on a mains multiple: detect, decide, explain (frequencies in Hz).

Why: a solved harmonic ``k f`` closer to a mains multiple ``m f_mains`` than the frequency
resolution of the averaging record cannot be told from the response. The interference is
(nearly) coherent with the forcing: averaging does not remove it, the fit cannot regress it
as a separate frequency (:func:`hbtest.method.harmonics.fit` skips a nuisance within one bin of a
harmonic), and its per-period spread is too small to show as noise. On the gauges it reads as
an interface force — on the paper twin 20 microstrain of mains on two gauges 15 mm apart is a
phantom shear of up to ~2 N against a 0.05 N forcing — so the iteration drives the structure
toward the response to that phantom force until a channel clips (reproduced at 50.0 Hz on
mode 3 of the paper cantilever: 13,000 periods, then "sensor over range").

Resolution: the longest averaging record a profile asks for is
:data:`MAINS_RESOLUTION_WINDOWS` averaging windows (``test.averaging_periods`` each; the same
bound :func:`hbtest.sweep.runner.check_run` sizes records with); its bin is
``f / (MAINS_RESOLUTION_WINDOWS * averaging_periods)`` [Hz]. A point is *coincident* when
``|k f - m f_mains| < bin`` for a solved order k > 0 and a mains multiple
``m = 1 .. max(mains_multiples, MAINS_MULTIPLES_CHECKED)`` (``mains_hz`` and
``mains_multiples`` of the rig file's ``[sensors]``).

Decision per coincident point (:func:`plan_mains`): regress the mains out through a mains
reference channel when the rig has one — no rig kind declares one today (channel kinds:
:data:`hbtest.method.sensors.CHANNEL_KINDS`), so the decision is to **move** the point off the
coincidence by the smallest shift that clears every (k, m) pair by
:data:`MAINS_CLEAR_BINS` bins, preferring the side that keeps the sweep's order. The sweep
applies it (``sweep.mains_coincidence = "move"``, the default; ``"keep"`` runs the point
where asked) and records the requested and applied frequency and a note per point.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = [
    "MAINS_RESOLUTION_WINDOWS",
    "MAINS_CLEAR_BINS",
    "MAINS_MULTIPLES_CHECKED",
    "DIVERGENCE_GROWTH",
    "DIVERGENCE_MIN_EVALUATIONS",
    "MainsDecision",
    "MainsPlan",
    "mains_multiples",
    "coincidences",
    "resolution_hz",
    "plan_mains",
    "explain_stop",
]

#: the longest averaging record of a point, in averaging windows (test.averaging_periods)
MAINS_RESOLUTION_WINDOWS = 4
#: a moved point clears every mains multiple by this many resolution bins
MAINS_CLEAR_BINS = 1.0
#: mains multiples checked at least (a lab's mains carries harmonics beyond those the fit rejects)
MAINS_MULTIPLES_CHECKED = 6
#: a failed point "diverged" when its residual grew by this factor from the first evaluation
#: to the last meaningful one, over at least DIVERGENCE_MIN_EVALUATIONS evaluations
DIVERGENCE_GROWTH = 1.5
DIVERGENCE_MIN_EVALUATIONS = 3


@dataclass(frozen=True)
class MainsDecision:
    """What the sweep does at one coincident point: ``action`` = "move" (to ``applied_hz``)
    or "keep" (run where asked; the sweep file said so); ``pairs``: the (k, m) coincidences at
    the requested frequency; ``note``: one line for the store and the progress output."""

    index: int
    requested_hz: float
    applied_hz: float
    action: str
    pairs: tuple
    note: str


@dataclass
class MainsPlan:
    """The sweep's grid as requested and as it will run, with one decision per coincident point."""

    requested_hz: np.ndarray
    applied_hz: np.ndarray
    decisions: list = field(default_factory=list)
    mains_hz: float = 50.0

    @property
    def notes(self) -> list:
        """One string per point ("" where nothing was decided)."""
        out = [""] * len(self.requested_hz)
        for d in self.decisions:
            out[d.index] = d.note
        return out

    def to_dict(self) -> dict:
        return dict(requested_hz=np.asarray(self.requested_hz).tolist(), applied_hz=np.asarray(self.applied_hz).tolist(),
                    decisions=[asdict(d) for d in self.decisions], mains_hz=self.mains_hz)


def mains_multiples(layout) -> np.ndarray:
    """Mains multiples [Hz] checked for the rig's layout (empty when ``mains_hz`` is 0)."""
    if not layout.mains_hz > 0:
        return np.zeros(0)
    n = max(int(layout.mains_multiples), MAINS_MULTIPLES_CHECKED)
    return layout.mains_hz * np.arange(1, n + 1)


def resolution_hz(frequency_hz: float, averaging_periods: int) -> float:
    """Frequency resolution [Hz] of the longest averaging record at ``frequency_hz``."""
    return float(frequency_hz) / (MAINS_RESOLUTION_WINDOWS * int(averaging_periods))


def coincidences(frequency_hz: float, orders, layout, averaging_periods: int, bins: float = 1.0) -> list:
    """(k, m) pairs with ``|k f - m f_mains| < bins * resolution`` (k > 0 of ``orders``)."""
    res = bins * resolution_hz(frequency_hz, averaging_periods)
    hits = []
    for k in orders:
        if k <= 0:
            continue
        for j, fm in enumerate(mains_multiples(layout), 1):
            if abs(k * frequency_hz - fm) < res:
                hits.append((int(k), j))
    return hits


def _clear_candidates(f: float, orders, layout, n: int) -> list:
    """Frequencies near ``f`` at exactly MAINS_CLEAR_BINS bins from a coinciding multiple."""
    c = MAINS_CLEAR_BINS / (MAINS_RESOLUTION_WINDOWS * n)
    out = []
    for k, m in coincidences(f, orders, layout, n, MAINS_CLEAR_BINS):
        fm = m * layout.mains_hz
        # |k f' - fm| = c f'  ->  f' = fm / (k - c) (above) or fm / (k + c) (below)
        out += [fm / (k - c) * (1 + 1e-9), fm / (k + c) * (1 - 1e-9)]
    return out


def _move(f: float, orders, layout, n: int, lo: float, hi: float) -> float:
    """Smallest shift of ``f`` that clears every pair, inside (lo, hi) when possible."""
    seen, frontier = set(), [f]
    cands = []
    for _ in range(8):  # clearing one pair may land on another: follow a few steps
        nxt = []
        for g in frontier:
            for c in _clear_candidates(g, orders, layout, n):
                key = round(c, 9)
                if key in seen:
                    continue
                seen.add(key)
                (cands if not coincidences(c, orders, layout, n, MAINS_CLEAR_BINS) else nxt).append(c)
        if not nxt:
            break
        frontier = nxt
    if not cands:
        return f
    inside = [c for c in cands if lo < c < hi]
    return float(min(inside or cands, key=lambda c: abs(c - f)))


def plan_mains(cfg, layout, action: str | None = None) -> MainsPlan:
    """Decide, for every point of the sweep ``cfg`` on a rig with sensor ``layout``, what the
    sweep does about a forcing harmonic on a mains multiple (see the module docstring).
    ``action``: "move" | "keep" (default: the sweep file's ``sweep.mains_coincidence``)."""
    action = action or getattr(cfg.sweep, "mains_coincidence", "move")
    req = np.asarray(cfg.sweep.frequencies_hz, dtype=float)
    app = req.copy()
    orders = [int(k) for k in cfg.sweep.harmonics]
    n = int(cfg.test.averaging_periods)
    decisions = []
    for i, f in enumerate(req):
        pairs = coincidences(f, orders, layout, n)
        if not pairs:
            continue
        what = ", ".join(f"harmonic {k} ({k * f:.4g} Hz) on mains multiple {m} ({m * layout.mains_hz:g} Hz)" for k, m in pairs)
        res = resolution_hz(f, n)
        if action == "keep":
            note = (f"{what}, closer than the averaging resolution {res:.3g} Hz: kept at {f:g} Hz as asked"
                    " (sweep.mains_coincidence = \"keep\"); the mains cannot be told from the response there")
            decisions.append(MainsDecision(i, float(f), float(f), "keep", tuple(pairs), note))
            continue
        lo = req[i - 1] if i > 0 else -np.inf
        hi = req[i + 1] if i + 1 < req.size else np.inf
        lo, hi = min(lo, hi), max(lo, hi)
        g = _move(f, orders, layout, n, lo, hi)
        app[i] = g
        note = (f"moved from {f:g} to {g:.6g} Hz ({g - f:+.3g} Hz): {what}, closer than the averaging resolution"
                f" {res:.3g} Hz; the rig file declares no mains reference channel to regress it out")
        decisions.append(MainsDecision(i, float(f), float(g), "move", tuple(pairs), note))
    return MainsPlan(req, app, decisions, float(layout.mains_hz))


def explain_stop(message: str, reason: str, frequency_hz: float, orders, layout, averaging_periods: int, history_norms=()) -> str:
    """The stop message of a point that did not converge, completed with what really stopped
    it: a solved harmonic on a mains multiple (the phantom force the iteration chased), and an
    iteration that diverged (the residual grew from its start) before a channel clipped or
    the voltage limit was reached. Unchanged for a converged point."""
    if reason == "converged":
        return message
    causes = []
    pairs = coincidences(frequency_hz, orders, layout, averaging_periods)
    if pairs:
        what = ", ".join(f"harmonic {k} ({k * frequency_hz:.4g} Hz) is on mains multiple {m} ({m * layout.mains_hz:g} Hz)" for k, m in pairs)
        causes.append(f"{what}: the mains on the sensors cannot be told from the response, and the iteration chased it")
    norms = np.asarray([x for x in history_norms if np.isfinite(x)], dtype=float)
    if reason in ("overrange", "trip"):
        norms = norms[:-1]  # the last window was clipped or cut short: its residual means nothing
    if norms.size >= DIVERGENCE_MIN_EVALUATIONS and norms[-1] > DIVERGENCE_GROWTH * norms[0]:
        causes.append(f"the iteration diverged (|R| from {norms[0] * 1e3:.3g} to {norms[-1] * 1e3:.3g} mm over {norms.size} evaluations)")
    if not causes:
        return message
    return "; ".join(causes) + f" — then: {message}"

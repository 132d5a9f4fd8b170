"""``hbtest twin --check``: the same statistics (:func:`hbtest.twin.measure`, :func:`hbtest.twin.fit_record`)
measured on a twin and on a rig, side by side. A magnitude (noise rms, mains line, channel gain,
demand scatter, mode frequency and damping) is compared by its ratio twin / rig; a phase, skew
or correlation by its difference in combined standard uncertainties. The worst ratio is taken
over the magnitudes measured within :data:`WELL_MEASURED` relative uncertainty on both sides
(a ratio of two poorly measured values says little); the others are shown, marked."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Comparison", "compare", "WELL_MEASURED"]

#: relative standard uncertainty up to which a magnitude enters the worst ratio
WELL_MEASURED = 0.05
_DIFFERENCES = ("phase_deg", "skew_us", "correlation", "band_over_white", "record_spread_hz")


@dataclass(frozen=True)
class Comparison:
    key: str
    twin: float
    rig: float
    u_twin: float | None
    u_rig: float | None
    unit: str
    ratio: float | None  # twin / rig for a magnitude, None for a difference
    sigmas: float | None  # |twin - rig| / combined u, when both have one
    counted: bool  # enters the worst ratio


def _well(q) -> bool:
    return q.u is not None and abs(q.value) > 0 and q.u <= WELL_MEASURED * abs(q.value)


def _mode_keys(twin: dict, rig: dict) -> dict:
    """twin mode key -> the rig's key of the mode nearest in frequency (the runs may find
    different sets of modes, so their numbers need not match)."""
    f_rig = {k.split(".")[1]: q.value for k, q in rig.items() if k.startswith("modes.") and k.endswith(".frequency_hz")}
    out = {}
    for k, q in twin.items():
        if k.startswith("modes.") and k.endswith(".frequency_hz") and f_rig:
            j = min(f_rig, key=lambda n: abs(f_rig[n] - q.value))
            i = k.split(".")[1]
            out[f"modes.{i}.frequency_hz"], out[f"modes.{i}.damping_ratio"] = f"modes.{j}.frequency_hz", f"modes.{j}.damping_ratio"
    return out


def compare(twin_quantities, rig_quantities) -> tuple[list[Comparison], float]:
    """Every quantity both sides have (modes matched by frequency), and the worst ratio
    max(r, 1/r) over the counted ones."""
    rig = {q.key: q for q in rig_quantities}
    modes = _mode_keys({q.key: q for q in twin_quantities}, rig)
    out = []
    for t in twin_quantities:
        r = rig.get(modes.get(t.key, t.key))
        if r is None or t.key.endswith(".scale_factor") and t.u is None:
            continue
        magnitude = not t.key.endswith(_DIFFERENCES) and t.value > 0 and r.value > 0
        ratio = t.value / r.value if magnitude else None
        u = np.hypot(t.u, r.u) if t.u is not None and r.u is not None else None
        sig = abs(t.value - r.value) / u if u else None
        out.append(Comparison(t.key, t.value, r.value, t.u, r.u, t.unit, ratio, sig, magnitude and _well(t) and _well(r)))
    worst = max((max(c.ratio, 1 / c.ratio) for c in out if c.counted and c.ratio), default=float("nan"))
    return out, float(worst)

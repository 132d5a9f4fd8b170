"""Drawings of stability results on a caller's matplotlib Axes (no backend chosen here).

Root loci: ``Re s`` [1/s] against ``Im s / 2 pi`` [Hz], coloured by the delay [ms]; delay
maps: unstable-root counts over (delay [ms], interface position alpha = L_N / L).
"""

from __future__ import annotations

import numpy as np

from .equation import TWO_PI
from .maps import DelayMap, root_locus

__all__ = ["plot_root_locus", "plot_delay_map"]


def plot_root_locus(ax, system, delays, cutoff_hz: float, title: str = "", sigma_min_fraction: float = 0.5):
    """Roots of ``system`` (a :class:`~hbtest.realtime.stability.SingleDelaySystem`) below the cut-off
    for each delay [s] in ``delays``, upper half-plane only, left of ``Re s >=
    -sigma_min_fraction * 2 pi f_c`` cut away. Returns the colour bar's mappable."""
    import matplotlib.pyplot as plt

    delays = np.asarray(delays, dtype=float)
    top = float(delays.max()) if delays.size else 0.0
    roots = root_locus(system, delays, cutoff_hz, sigma_min=-sigma_min_fraction * TWO_PI * cutoff_hz)
    cmap = plt.get_cmap("viridis")
    for d, r in zip(delays, roots):
        r = r[r.imag >= 0]
        ax.plot(r.real, r.imag / TWO_PI, "o", ms=3, color=cmap(d / top if top > 0 else 0))
    ax.axvline(0.0, color="k", lw=0.8)
    ax.axhline(cutoff_hz, color="r", lw=0.8, ls="--", label=f"cut-off {cutoff_hz:g} Hz")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, top * 1e3))
    ax.figure.colorbar(sm, ax=ax, label="delay [ms]")
    ax.set_xlabel("Re s [1/s]")
    ax.set_ylabel("Im s / 2π [Hz]")
    ax.set_title(title)
    ax.legend(loc="lower left")
    return sm


def plot_delay_map(ax, dm: DelayMap, param_label: str = "α = L_N / L") -> None:
    """Unstable-root counts of a :class:`~hbtest.realtime.stability.DelayMap` (white: stable) and its
    critical-delay curve."""
    ax.pcolormesh(dm.delays_s * 1e3, dm.params, dm.unstable_roots, shading="nearest", cmap="Reds")
    ax.plot(dm.critical_delay_s * 1e3, dm.params, "k.-", label="critical delay")
    ax.set_xlabel("delay τ [ms]")
    ax.set_ylabel(param_label)
    ax.set_title(f"unstable roots below {dm.cutoff_hz:g} Hz (white: stable)")
    ax.legend(loc="lower right")

"""Figures of classical hybrid tests. Each function returns a :class:`matplotlib.figure.Figure`
built without pyplot (no global state, no backend chosen here: save it with
``fig.savefig(path)``, or show it from a GUI the caller set up).

- :func:`subspace_figure` — actuator displacement ``x`` against demand ``z``;
- :func:`run_figure` — time histories of one run beside its subspace plot;
- :func:`compare_figure` — FRF magnitude of a comparison: emulated structure, iterative
  points, classical points where stable and marks where unstable.

Units: displacements [m | rad] as simulated; times [s]; frequencies [Hz]; FRFs [m/N].
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .compare import CompareResult
    from .loop import ClassicalResult

__all__ = ["subspace_figure", "run_figure", "compare_figure"]

COMPARE_CURVE_POINTS = 600
"""Frequencies of the emulated FRF curve of :func:`compare_figure`."""


def _figure(width: float, height: float, **subplots):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    return fig, fig.subplots(**subplots)


def subspace_figure(result: "ClassicalResult", channel: int = 0, ax=None):
    """Subspace plot: actuator displacement ``x`` against demand ``z`` (a perfect test lies
    on the diagonal; delay opens an ellipse). Draws into ``ax`` when given. Returns the
    figure."""
    if ax is None:
        fig, ax = _figure(4.5, 4.5)
    else:
        fig = ax.figure
    z, x = result.z[:, channel], result.x[:, channel]
    ax.plot(z, x, lw=0.6)
    lim = np.nanmax(np.abs(np.concatenate([z, x]))) if z.size else 1.0
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.5)
    ax.set_xlabel("demand z")
    ax.set_ylabel("actuator x")
    ax.set_title(f"subspace ({result.compensator}, delay {result.delay * 1e3:.3g} ms)")
    ax.set_aspect("equal", adjustable="datalim")
    return fig


def run_figure(result: "ClassicalResult", title: str = ""):
    """Demand, actuator displacement and emulated response of the first channel over time,
    beside the subspace plot."""
    fig, axes = _figure(11, 4.5, ncols=2, gridspec_kw={"width_ratios": [2, 1]})
    ax = axes[0]
    ax.plot(result.t, result.z[:, 0], label="demand z (NS)")
    ax.plot(result.t, result.x[:, 0], "--", label="actuator x (PS)")
    if result.z_emulated is not None:
        ax.plot(result.t, result.z_emulated[:, 0], ":", label="emulated")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("interface displacement")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title)
    subspace_figure(result, 0, axes[1])
    fig.tight_layout()
    return fig


def _complex(pair) -> complex:
    return complex(*[np.nan if v is None else v for v in pair])


def compare_figure(result: "CompareResult"):
    """``|u/F|`` of the emulated structure over the sweep band, iterative points (filled when
    converged), classical points where stable (squares) and crosses at the bottom where the
    classical test was unstable."""
    import matplotlib.transforms as mtransforms

    fig, ax = _figure(8, 5)
    ff = np.linspace(result.start_hz, result.stop_hz, COMPARE_CURVE_POINTS)
    ax.semilogy(ff, np.abs(result.system.interface_response(ff)[:, 0]) / result.amplitude, "k-", lw=1.2, label="emulated structure")
    it = [p for p in result.points if p["iterative"]]
    if it:
        fi = np.array([p["frequency_hz"] for p in it])
        hi = np.array([abs(_complex(p["iterative"]["frf_m_per_n"])) for p in it])
        ci = np.array([p["iterative"]["converged"] for p in it], bool)
        ax.plot(fi[ci], hi[ci], "o", color="C0", label="iterative (converged)")
        if np.any(~ci):
            ax.plot(fi[~ci], hi[~ci], "o", mfc="none", color="C0", label="iterative (not converged)")
    st = [p for p in result.points if p["classical"]["stable"]]
    if st:
        ax.plot([p["frequency_hz"] for p in st], [abs(_complex(p["classical"]["frf_m_per_n"])) for p in st], "s", mfc="none",
                color="C1", label="classical (stable)")
    un = [p for p in result.points if not p["classical"]["stable"]]
    if un:
        fu = np.array([p["frequency_hz"] for p in un])
        lo, hi_ = ax.get_ylim()
        ax.set_ylim(lo / 1.6, hi_)  # a band at the bottom for the marks
        trans = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(fu, np.full(fu.size, 0.04), "x", color="C3", ms=9, mew=2, transform=trans, clip_on=False,
                label="classical UNSTABLE (marked at the bottom)")
    ax.set_xlabel("frequency [Hz]")
    ax.set_ylabel("|u / F| [m/N]")
    ax.set_title(f"{result.name}: classical (delay {result.delay_s * 1e3:.3g} ms) vs iterative")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return fig

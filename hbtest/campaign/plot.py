"""Plots of a campaign store: each kept figure against the varied parameters (matplotlib,
Agg canvas: no display, no global pyplot state).

One parameter (``x``): every finished case as a point, and the mean over the cases sharing an
``x`` value as a line (repeated random draws, or a second parameter not shown). Two
parameters (``x``, ``y``): a heat map of the mean over the cases of each (x, y) cell when both
take at most :data:`MAX_HEATMAP_LEVELS` distinct values (grids), else a scatter coloured by
the figure. A parameter whose values are not numbers (a profile name...) is placed by category.
Failed cases (NaN figures) are left out; an empty cell is blank.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UserError

__all__ = ["campaign_figure", "campaign_png", "default_campaign_png", "MAX_HEATMAP_LEVELS"]

#: the most distinct values a parameter may take to be a heat-map axis
MAX_HEATMAP_LEVELS = 50
PANEL_HEIGHT_IN = 3.0  # inches per figure panel
PANEL_WIDTH_IN = 7.0


def default_campaign_png(store_path) -> Path:
    p = Path(store_path)
    return p.with_name(p.name.removesuffix(".zarr") + "-campaign.png")


def _axis(ds, key: str):
    """(positions, tick labels or None) of the parameter ``key`` over the cases."""
    keys = [str(k) for k in ds["parameter"].values]
    if key not in keys:
        raise UserError(f"{key!r} is not a varied parameter of this campaign ({', '.join(keys) or 'none'})")
    j = keys.index(key)
    v = np.asarray(ds["value"].values[:, j], dtype=float)
    if np.all(np.isfinite(v)):
        return v, None
    text = [str(t) for t in ds["value_text"].values[:, j]]
    levels = sorted(set(text))
    return np.array([levels.index(t) for t in text], dtype=float), levels


def campaign_figure(ds, figures=None, x: str | None = None, y: str | None = None):
    """A matplotlib Figure of the campaign dataset ``ds`` (see the module docstring)."""
    from matplotlib.figure import Figure

    keys = [str(k) for k in ds["parameter"].values]
    names = list(figures) if figures else [str(f) for f in ds.attrs.get("figures", [])]
    for f in names:
        if f not in ds:
            raise UserError(f"{f!r} is not a figure of this campaign store ({', '.join(ds.attrs.get('figures', []))})")
    if x is None:
        x = keys[0] if keys else None
    if y is None and len(keys) >= 2 and x == keys[0]:
        y = keys[1]
    if y is not None and y == x:
        raise UserError(f"--y {y}: the same parameter as --x")
    finished = np.asarray(ds["finished"].values, dtype=bool)
    if x is None:
        xv, xl, xlabel = np.asarray(ds["case"].values, dtype=float), None, "case"
    else:
        (xv, xl), xlabel = _axis(ds, x), x
    yv, yl = _axis(ds, y) if y is not None else (None, None)
    fig = Figure(figsize=(PANEL_WIDTH_IN, PANEL_HEIGHT_IN * max(1, len(names))), layout="constrained")
    axes = fig.subplots(max(1, len(names)), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        z = np.asarray(ds[name].values, dtype=float)
        ok = finished & np.isfinite(z)
        label = f"{name} [{ds[name].attrs.get('units', '')}]"
        if yv is None:
            ax.plot(xv[ok], z[ok], "o", alpha=0.4, label="cases")
            ux = np.unique(xv[ok])
            ax.plot(ux, [z[ok][xv[ok] == u].mean() for u in ux], "-", label="mean")
            ax.set_ylabel(label)
            if ux.size < ok.sum():
                ax.legend(loc="best", fontsize="small")
        else:
            ux, uy = np.unique(xv), np.unique(yv)
            if ux.size <= MAX_HEATMAP_LEVELS and uy.size <= MAX_HEATMAP_LEVELS:
                grid = np.full((uy.size, ux.size), np.nan)
                for i, a in enumerate(uy):
                    for j, b in enumerate(ux):
                        cell = ok & (xv == b) & (yv == a)
                        if cell.any():
                            grid[i, j] = z[cell].mean()
                m = ax.pcolormesh(np.arange(ux.size + 1) - 0.5, np.arange(uy.size + 1) - 0.5, np.ma.masked_invalid(grid), shading="flat")
                ax.set_xticks(np.arange(ux.size), xl if xl is not None else [f"{u:.4g}" for u in ux])
                ax.set_yticks(np.arange(uy.size), yl if yl is not None else [f"{u:.4g}" for u in uy])
            else:
                m = ax.scatter(xv[ok], yv[ok], c=z[ok], s=16)
            fig.colorbar(m, ax=ax, label=label)
            ax.set_ylabel(y)
        if yv is None and xl is not None:
            ax.set_xticks(np.arange(len(xl)), xl)
        ax.set_title(ds[name].attrs.get("long_name", name), fontsize="small")
        if yv is None:
            ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel(xlabel)
    fig.suptitle(f"campaign {ds.attrs.get('campaign_name', '')}: {int(finished.sum())}/{finished.size} cases finished")
    return fig


def campaign_png(store_path, out_path=None, figures=None, x: str | None = None, y: str | None = None) -> Path:
    """Write the campaign plot of a campaign store; returns the path written."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from .store import open_campaign

    ds = open_campaign(store_path).load()
    fig = campaign_figure(ds, figures, x, y)
    FigureCanvasAgg(fig)
    out = Path(out_path) if out_path is not None else default_campaign_png(store_path)
    try:
        fig.savefig(out, dpi=110)
    except OSError as e:
        raise UserError(f"{out}: cannot write the plot ({e.strerror or e})") from None
    return out

"""Plots of a run (matplotlib, Agg canvas: no display, no global pyplot state).

- :func:`bode_figure` / :func:`bode_png` — magnitude and phase of u/F and θ/F (harmonic 1)
  against frequency: converged points as filled markers joined per sweep leg, non-converged
  points as red crosses, the exact reference (virtual rigs) as a black line (the twin's closed
  form on a dense grid across the band where there is one, :func:`hbtest.analysis.frf.dense_exact_frf`:
  the peak lies between grid points; else the stored reference at the points), and a shaded
  band of ±2 standard uncertainties (:func:`hbtest.analysis.frf.frf_uncertainty`: measured noise and
  final residual) around the converged measured magnitude and phase, when the store holds
  what that needs (its verbatim sweep text).
- :func:`convergence_figure` / :func:`convergence_png` — residual norm per iteration for
  every finished point (log scale, coloured by frequency; dashed: did not converge) with the
  tolerance line.
- :func:`family_figure` / :func:`family_png` — a stepped-force family (``sweep.force_levels``,
  :mod:`hbtest.sweep.stepped`): interface amplitude ``|u_1|`` [m] against frequency, one curve per
  force level (converged points joined in test order within each leg, so a traced curve that
  turns back in frequency is drawn as traced), the backbone through the levels' peaks
  (:func:`hbtest.analysis.backbone.backbone`: parabola through the three highest points), and below the
  receptance ``|u_1|/F`` [m/N] of every level (equal for a linear structure).

PNG files go next to the store by default: ``runs/x.zarr`` gives ``runs/x-bode.png`` and
``runs/x-convergence.png``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..errors import UserError

__all__ = [
    "bode_figure",
    "convergence_figure",
    "bode_png",
    "convergence_png",
    "family_figure",
    "family_png",
    "default_png_path",
    "KINDS",
    "BAND_FACTOR",
]

KINDS = ("bode", "convergence", "family")
#: half-width of the uncertainty band on the Bode plot, in standard uncertainties
BAND_FACTOR = 2.0


def _figure(width=9.0, height=6.5):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(ds) -> str:
    a = ds.attrs
    name = Path(str(a.get("sweep_path") or "")).stem or "run"
    rig = str(a.get("rig_identity") or "rig")
    if len(rig) > 60:
        rig = rig[:57] + "..."
    return f"{name} on {rig} — status {a.get('status', '?')}"


def _bode_frfs(ds, harmonic: int):
    """(measured FRF, its magnitude and phase uncertainties or None, reference FRF or None)."""
    from .frf import frf, frf_uncertainty

    Hm = frf(ds, "measured", harmonic).values
    u_mag = u_ph = None
    try:
        unc = frf_uncertainty(ds, harmonic)
        u_mag, u_ph = unc["u_magnitude"].values, unc["u_phase"].values
    except (UserError, KeyError, ValueError):  # no sweep text / variances: no bands
        pass
    Hr = None
    if "reference_interface_displacement" in ds:
        Hr = frf(ds, "reference", harmonic).values
        if not np.any(np.isfinite(Hr)):
            Hr = None
    return Hm, u_mag, u_ph, Hr


def _bode_measured(am, ap, f, leg, done, conv, order, Hm, u_mag, u_ph, j: int) -> None:
    """The measured FRF of DOF ``j`` leg by leg on the magnitude and phase axes: converged
    points joined (with their uncertainty band), the others as red crosses."""
    multi = np.unique(leg[done]).size > 1
    first_bad = True
    first_band = True
    lab: str | None
    for lg in np.unique(leg[done]) if done.any() else []:
        # unwrap the phase over all finished points of the leg, then split by convergence
        sel = np.flatnonzero(done & (leg == lg) & np.isfinite(Hm[:, j]))
        if sel.size == 0:
            continue
        sel = sel[order(f[sel])]
        h = Hm[sel, j]
        ph = np.degrees(np.unwrap(np.angle(h)))
        c = conv[sel]
        if c.any():
            lab = "measured, converged" + (f" (leg {lg})" if multi else "")
            (line,) = am.plot(f[sel][c], np.abs(h[c]), "o-", ms=3.5, lw=0.8, label=lab)
            ap.plot(f[sel][c], ph[c], "o-", ms=3.5, lw=0.8, color=line.get_color())
            if u_mag is not None and np.isfinite(u_mag[sel, j][c]).any():
                fb, mag, um = f[sel][c], np.abs(h[c]), BAND_FACTOR * u_mag[sel, j][c]
                up = BAND_FACTOR * np.degrees(u_ph[sel, j][c])
                with np.errstate(divide="ignore", invalid="ignore"):
                    widest = np.nanmax(BAND_FACTOR * u_mag[conv] / np.abs(Hm[conv]))
                band = f"±{BAND_FACTOR:g}σ band (noise + final residual; up to ±{100 * widest:.3g} % of |H|)"
                am.fill_between(fb, np.clip(mag - um, mag * 1e-3, None), mag + um, color=line.get_color(), alpha=0.25, lw=0,
                                label=band if first_band else None)
                ap.fill_between(fb, ph[c] - up, ph[c] + up, color=line.get_color(), alpha=0.25, lw=0)
                first_band = False
        if (~c).any():
            lab = "measured, not converged" if first_bad else None
            first_bad = False
            am.plot(f[sel][~c], np.abs(h[~c]), "x", color="red", ms=7, mew=1.5, label=lab)
            ap.plot(f[sel][~c], ph[~c], "x", color="red", ms=7, mew=1.5)


def _bode_reference(am, ap, f, done, order, Hr, dense, j: int) -> None:
    """The exact reference of DOF ``j``: the twin's closed form as a dense curve across the band
    (``dense``: its peak lies between the grid's points), else the stored reference at the
    measured points joined in order (a nonlinear curve's own points, an arclength trace)."""
    if dense is not None:
        fd, Hd = dense
        am.plot(fd, np.abs(Hd[:, j]), "-", color="black", lw=1.0, label="reference (exact)")
        ap.plot(fd, np.degrees(np.unwrap(np.angle(Hd[:, j]))), "-", color="black", lw=1.0)
        return
    if Hr is None:
        return
    sel = done & np.isfinite(Hr[:, j])
    o = order(f[sel])
    ref = Hr[sel, j][o]
    am.plot(f[sel][o], np.abs(ref), "-", color="black", lw=1.0, label="reference (exact, at the points)")
    ap.plot(f[sel][o], np.degrees(np.unwrap(np.angle(ref))), "-", color="black", lw=1.0)


def bode_figure(ds, harmonic: int = 1):
    """The Bode figure of a run dataset (see module docstring)."""
    from .frf import dense_exact_frf

    fig = _figure()
    axes = fig.subplots(2, 2, sharex=True)
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    f = np.asarray(ds["frequency"].values, dtype=float)
    leg = np.asarray(ds["leg"].values) if "leg" in ds.coords else np.zeros(f.size, int)
    # an arclength trace is drawn in test (trace) order: through its folds, not sorted by f
    order = (lambda x: np.arange(x.size)) if ds.attrs.get("continuation") == "arclength" else (lambda x: np.argsort(x, kind="stable"))
    Hm, u_mag, u_ph, Hr = _bode_frfs(ds, harmonic)
    dense = dense_exact_frf(ds) if Hr is not None and harmonic == 1 else None
    labels = [("u", "|u/F| [m/N]", "∠u/F [deg]"), ("theta", "|θ/F| [rad/N]", "∠θ/F [deg]")]
    dof_index = {str(d): i for i, d in enumerate(ds["dof"].values)}
    for col, (dof, mag_label, ph_label) in enumerate(labels):
        j = dof_index[dof]
        am, ap = axes[0, col], axes[1, col]
        _bode_reference(am, ap, f, done, order, Hr, dense, j)
        _bode_measured(am, ap, f, leg, done, conv, order, Hm, u_mag, u_ph, j)
        am.set_yscale("log")
        am.set_ylabel(mag_label)
        ap.set_ylabel(ph_label)
        ap.set_xlabel("frequency [Hz]")
        am.grid(True, which="both", alpha=0.3)
        ap.grid(True, alpha=0.3)
    if not done.any():
        axes[0, 0].text(0.5, 0.5, "no finished points", transform=axes[0, 0].transAxes, ha="center")
    handles, labs = axes[0, 0].get_legend_handles_labels()
    if handles:
        # beneath the panels: inside one, it covers measured points wherever the band puts them
        fig.legend(handles, labs, fontsize=8, loc="outside lower center", ncols=min(len(handles), 3))
    fig.suptitle(f"{_title(ds)}\ninterface FRFs (harmonic {harmonic}), {int(done.sum())}/{done.size} points, {int(conv.sum())} converged", fontsize=10)
    return fig


def convergence_figure(ds):
    """Residual norm per iteration, one line per finished point (see module docstring)."""
    from matplotlib import colormaps
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import Normalize

    from ..store import tolerance_from_attrs

    fig = _figure(8.0, 5.0)
    ax = fig.subplots()
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool)
    f = np.asarray(ds["frequency"].values, dtype=float)
    norms = np.asarray(ds["history_residual_norm"].values, dtype=float)
    lengths = np.asarray(ds["history_length"].values) if "history_length" in ds else np.full(f.size, norms.shape[1])
    fl, fh = (float(np.nanmin(f)), float(np.nanmax(f))) if np.isfinite(f).any() else (0.0, 1.0)  # open slots: NaN
    norm = Normalize(vmin=fl, vmax=fh if fh > fl else fl + 1.0)
    cmap = colormaps["viridis"]
    plotted = False
    for i in np.flatnonzero(done):
        n = int(lengths[i]) if lengths[i] >= 0 else norms.shape[1]
        y = norms[i, :n]
        x = np.arange(y.size)
        ok = np.isfinite(y) & (y > 0)
        if not ok.any():
            continue
        ax.plot(x[ok], y[ok], "-" if conv[i] else "--", marker=".", ms=3, lw=0.9, color=cmap(norm(f[i])))
        plotted = True
    tol, form = tolerance_from_attrs(dict(ds.attrs))
    unit = "m" if form == "displacement" else "N"
    if tol is not None:
        ax.axhline(tol, color="red", ls=":", lw=1.2, label=f"tolerance {tol:.3g} {unit}")
        ax.legend(fontsize=8)
    if plotted:
        ax.set_yscale("log")
    else:
        ax.text(0.5, 0.5, "no finished points", transform=ax.transAxes, ha="center")
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"‖R‖ ({form} form) [{unit}]")
    ax.grid(True, which="both", alpha=0.3)
    fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=ax, label="frequency [Hz]")
    fig.suptitle(f"{_title(ds)}\nresidual norm per iteration (dashed: not converged)", fontsize=10)
    return fig


def default_png_path(store_path, kind: str) -> Path:
    """``runs/x.zarr`` -> ``runs/x-<kind>.png``."""
    p = Path(store_path)
    stem = p.name[: -len(".zarr")] if p.name.endswith(".zarr") else p.name
    return p.with_name(f"{stem}-{kind}.png")


def _save(fig, out_path: Path) -> Path:
    out_path = Path(out_path)
    if out_path.suffix.lower() != ".png":
        out_path = out_path.with_suffix(".png") if out_path.suffix else out_path.with_name(out_path.name + ".png")
    parent = out_path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{parent}: cannot create the output directory ({e.strerror or e})") from None
    if not os.access(parent, os.W_OK):
        raise UserError(f"{parent}: output directory is not writable")
    tmp = out_path.with_name(f".{out_path.name}.{os.getpid()}.tmp")
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, out_path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{out_path}: cannot write the plot ({e.strerror or e})") from None
    return out_path


def bode_png(store_path, out_path=None, harmonic: int = 1) -> Path:
    """Write the Bode plot of a run store to ``out_path`` (default next to the store);
    returns the path written."""
    from ..store import open_run

    ds = open_run(store_path)
    return _save(bode_figure(ds, harmonic), out_path or default_png_path(store_path, "bode"))


def convergence_png(store_path, out_path=None) -> Path:
    """Write the convergence plot of a run store; returns the path written."""
    from ..store import open_run

    ds = open_run(store_path)
    return _save(convergence_figure(ds), out_path or default_png_path(store_path, "convergence"))


def family_figure(ds, dof: str = "u", harmonic: int = 1):
    """The stepped-force family of a run dataset with its backbone (see module docstring).
    Points are drawn in test order within each leg (not sorted by frequency)."""
    from matplotlib import colormaps

    from .backbone import backbone

    fig = _figure(8.0, 7.5)
    ax, ar = fig.subplots(2, 1, sharex=True)
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    f = np.asarray(ds["frequency"].values, dtype=float)
    leg = np.asarray(ds["leg"].values) if "leg" in ds.coords else np.zeros(f.size, int)
    if "force_level" in ds.coords:
        lev = np.asarray(ds["force_level"].values, dtype=float)
    else:
        k1 = list(np.asarray(ds["harmonic"].values)).index(1)
        lev = np.abs(np.asarray(ds["external_force"].values)[:, k1])
    U = np.abs(np.asarray(ds["interface_displacement"].sel(dof=dof, harmonic=harmonic).values))
    levels = np.unique(lev[np.isfinite(lev)])
    cmap = colormaps["viridis"]
    unit = "m" if dof == "u" else "rad"
    for n, F in enumerate(levels):
        color = cmap(n / max(1, levels.size - 1))
        first = True
        for lg in np.unique(leg[lev == F]):
            sel = np.flatnonzero((lev == F) & (leg == lg) & conv & np.isfinite(U))  # test order
            if sel.size == 0:
                continue
            lab = f"F = {F:.4g} N" if first else None
            first = False
            ax.plot(f[sel], U[sel], "o-", ms=3, lw=0.9, color=color, label=lab)
            ar.plot(f[sel], U[sel] / F, "o-", ms=3, lw=0.9, color=color)
        bad = np.flatnonzero((lev == F) & done & ~conv & np.isfinite(U))
        if bad.size:
            ax.plot(f[bad], U[bad], "x", color="red", ms=6, mew=1.2)
    bb = backbone(ds, dof, harmonic)
    ok = np.isfinite(bb.frequency_hz)
    if ok.any():
        ax.plot(bb.frequency_hz[ok], bb.amplitude[ok], "s--", color="black", ms=5, lw=1.2, label="backbone (peak per level)")
        ar.plot(bb.frequency_hz[ok], bb.amplitude[ok] / bb.force_n[ok], "s", color="black", ms=5)
    if not conv.any():
        ax.text(0.5, 0.5, "no converged points", transform=ax.transAxes, ha="center")
    ax.set_ylabel(f"|{'θ' if dof == 'theta' else dof}_{harmonic}| [{unit}]")
    ar.set_ylabel(f"|{'θ' if dof == 'theta' else dof}_{harmonic}|/F [{unit}/N]")
    ar.set_xlabel("frequency [Hz]")
    for a in (ax, ar):
        a.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.suptitle(f"{_title(ds)}\nstepped-force family, {levels.size} levels, {int(conv.sum())}/{done.size} points converged; "
                 "backbone: parabola through the three highest points", fontsize=10)
    return fig


def family_png(store_path, out_path=None, dof: str = "u", harmonic: int = 1) -> Path:
    """Write the family plot of a run store (default next to the store); returns the path."""
    from ..store import open_run

    ds = open_run(store_path)
    return _save(family_figure(ds, dof, harmonic), out_path or default_png_path(store_path, "family"))

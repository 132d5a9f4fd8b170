"""The backbone of a stepped-force family (``sweep.force_levels``, run by
:mod:`hbtest.sweep.stepped`): per force level the peak of ``|U_k|`` over its converged points,
interpolated by the parabola through the three highest points. An analysis of a store: it reads
the store's variables and never runs the rig.

Backbone (:func:`backbone`): per level, the peak of the interface amplitude ``|U_k|`` (DOF
``u``, harmonic 1 by default) over the level's converged points, interpolated by the
**parabola through the three highest points** (exact interpolation of three points in
``(f, |U|)``; its vertex). When the parabola opens upwards, or its vertex lies outside the
span of the three points (the peak at the band edge, or a jump right after the highest
point), the highest measured point is taken instead and ``interior`` is False. The backbone
is the locus of these peaks: frequency of the peak against its amplitude (and force).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Backbone", "backbone", "has_levels", "peak_parabola"]


@dataclass(frozen=True)
class Backbone:
    """Peak of each level's response curve (see the module docstring): ``force_n`` (L,)
    external force amplitude [N]; ``frequency_hz`` (L,) peak frequency; ``amplitude`` (L,)
    peak ``|U_k|`` [m or rad]; ``interior`` (L,) whether the parabola's vertex was used (False:
    the highest measured point); ``n_points`` (L,) converged points of the level. NaN for a
    level with fewer than three converged points."""

    force_n: np.ndarray
    frequency_hz: np.ndarray
    amplitude: np.ndarray
    interior: np.ndarray
    n_points: np.ndarray

    def to_dict(self) -> dict:
        return {k: np.asarray(getattr(self, k)).tolist() for k in ("force_n", "frequency_hz", "amplitude", "interior", "n_points")}


def peak_parabola(f, a) -> tuple[float, float, bool]:
    """(peak frequency, peak amplitude, interior) of samples ``a(f)``: the vertex of the
    parabola through the three highest points when it opens downwards and lies within their
    span, else the highest point (interior False). Needs at least three points."""
    f = np.asarray(f, dtype=float)
    a = np.asarray(a, dtype=float)
    if f.size < 3:
        raise ValueError("the peak parabola needs at least three points")
    top = np.argsort(a)[-3:]
    ff, aa = f[top], a[top]
    best = int(np.argmax(aa))
    if np.unique(ff).size == 3:
        c2, c1, c0 = np.polyfit(ff, aa, 2)
        if c2 < 0:
            fv = -c1 / (2 * c2)
            if ff.min() <= fv <= ff.max():
                return float(fv), float(c0 + c1 * fv + c2 * fv * fv), True
    return float(ff[best]), float(aa[best]), False


def has_levels(ds) -> bool:
    """Whether a run dataset is a stepped-force family (more than one force level)."""
    return "force_level" in ds.coords and np.unique(np.asarray(ds["force_level"].values, dtype=float)).size > 1


def backbone(ds, dof: str = "u", harmonic: int = 1, source: str = "measured") -> Backbone:
    """The backbone of a stepped-force family (a store with one level gives one point):
    per level the peak of ``|U_k|`` over its converged points (``source = "reference"``: the
    twin's exact linear reference at the same points), interpolated by the parabola through
    the three highest points (:func:`peak_parabola`)."""
    var = {"measured": "interface_displacement", "reference": "reference_interface_displacement"}[source]
    f = np.asarray(ds["frequency"].values, dtype=float)
    done = np.asarray(ds["done"].values, dtype=bool)
    ok = done & np.asarray(ds["converged"].values, dtype=bool)
    if "force_level" in ds.coords:
        lev = np.asarray(ds["force_level"].values, dtype=float)
    else:
        k1 = list(np.asarray(ds["harmonic"].values)).index(1)
        lev = np.abs(np.asarray(ds["external_force"].values)[:, k1])
        lev = np.where(np.isfinite(lev), lev, np.nanmax(lev) if np.isfinite(lev).any() else 0.0)
    U = np.abs(np.asarray(ds[var].sel(dof=dof, harmonic=harmonic).values))
    out: dict[str, list] = {k: [] for k in ("force_n", "frequency_hz", "amplitude", "interior", "n_points")}
    for F in np.unique(lev):
        sel = ok & (lev == F) & np.isfinite(U)
        out["force_n"].append(float(F))
        out["n_points"].append(int(sel.sum()))
        if sel.sum() < 3:
            out["frequency_hz"].append(np.nan)
            out["amplitude"].append(np.nan)
            out["interior"].append(False)
            continue
        fp, ap, inner = peak_parabola(f[sel], U[sel])
        out["frequency_hz"].append(fp)
        out["amplitude"].append(ap)
        out["interior"].append(inner)
    return Backbone(**{k: np.asarray(v) for k, v in out.items()})

"""Adaptive sweep strategies: which frequencies a sweep measures (``sweep.strategy``).

Units: frequencies [Hz], damping ratio [1] (viscous), FRF ``H = U_k / F_k`` of the interface
DOF ``sweep.target.dof`` at harmonic 1 ([m/N] for u, [rad/N] for theta); rig time in forcing
periods. Coefficients follow :mod:`hbtest.method.harmonics`.

- ``grid`` (default): the frequency grid of ``[sweep]``, point after point.
- ``modal``: a sequential design around the target mode (``test.target_mode``) that stops
  when the ``sweep.target.confidence`` intervals of the natural frequency, the damping ratio
  (and the modal constant when asked) are at most ``frequency_ci_rel`` / ``damping_ci_rel`` /
  ``modal_constant_ci_rel`` of their estimates (half-widths), or when the rig time spent
  reaches ``max_rig_periods``, or the slots (``sweep.max_points``) run out.
- ``curve``: adaptive frequency steps over ``[start_hz, stop_hz]`` for the FRF curve, until
  the fitted curve's ``confidence`` interval is at most ``curve_accuracy`` of ``|H|``
  everywhere in the band (same budget and slot limits).

Every point is a full hybrid point (its own stop rules, one store slot, written as measured);
the store's slots are open (as an arclength trace's: the frequency is written with the point).

The modal design
----------------
1. *Bracket* (the first :data:`BRACKET_POINTS` points): the design model's prediction of the
   target mode (:func:`hbtest.design.design_report`: ``f_p``, ``zeta_p``) at ``f_p`` and
   ``f_p (1 -+ zeta_p)``, then ``-+ CANDIDATE_SPAN zeta_p`` about the current estimate (the largest ``|H|``
   measured, or the local fit); a peak measured at the edge of the points taken so far moves
   the next point :data:`BRACKET_STEP` half-power bandwidths further out on that side.
2. *Estimate* after every point: ``hbtest modal``'s fit (:func:`hbtest.analysis.modal.fit_modes`,
   rational fraction with bootstrap intervals at ``confidence``) of the mode nearest the
   current estimate; those intervals decide the stop, so ``hbtest modal STORE`` reports what
   the design stopped on.
3. *Next point* (A-optimal): with the single-mode model ``H = A/(w_n^2 - w^2 + 2 i zeta w_n w)
   + R`` fitted to the points (variable projection, weighted by ``1/u_H``;
   :func:`fit_model`), each candidate frequency in ``f_n (1 + x zeta)``, ``|x| <=``
   :data:`CANDIDATE_SPAN` (inside ``hbtest modal``'s fitted band, ``|H| >= 0.25 peak``), adds
   its row to the Fisher information with the standard uncertainty the points have shown
   (median ``u_H/|H|`` times the model's ``|H|``, times the accuracy share the point is
   measured to, :data:`DESIGN_ACCURACY_SHARE`); the candidate that minimises
   ``sum_j (predicted half-width_j / target_j)^2`` over the asked parameters is measured next,
   at the loosest of :data:`FINAL_ACCURACY_SHARES` with which it is predicted to reach every
   asked interval, else at :data:`DESIGN_ACCURACY_SHARE` of ``test.accuracy``. The linearised
   half-widths are calibrated against the bootstrap ones of step 2 (their ratio now, per
   parameter), so the prediction speaks of the intervals the stop is judged on.
   Candidates on a mains multiple (:func:`hbtest.design.coincidences`) or within
   :data:`FAILED_EXCLUSION` half-power bandwidths of a point that did not converge are skipped.

The curve design
----------------
The band ends and the bracket of the predicted mode first; then the model with a low-frequency
residual (``H = A/(...) + R_0 + R_2 (w_n/w)^2``, :func:`fit_model` with three terms) is fitted
and the next point goes where the model's relative standard uncertainty (linearised
covariance) is largest on a grid of :data:`CURVE_GRID` frequencies, at least
:data:`CURVE_MIN_SPACING` of the band from every point measured. The reported curve is that
model (:func:`curve_model`). While its weighted misfit exceeds :data:`CURVE_MISFIT_LIMIT`
(the model does not describe the points) the largest gap between points is halved instead.

Resume: the design is a function of the points in the store, so a resumed run recomputes it
from them and continues. Store (:mod:`hbtest.store`): per slot ``design_reason`` (why this
frequency) and the running estimate after the point (``design_frequency_hz``,
``design_damping_ratio``, ``design_modal_constant`` and their relative CI half-widths
``design_*_ci_rel``; for ``curve`` ``design_curve_uncertainty``); group attributes
``design_finished`` (why the design stopped), ``modal_fit`` (modal: as ``hbtest modal``
writes it) and ``curve_fit`` (curve: the fitted model, :func:`curve_from_attribute`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "BRACKET_POINTS",
    "CANDIDATE_SPAN",
    "DESIGN_ACCURACY_SHARE",
    "FINAL_ACCURACY_SHARES",
    "STRATEGIES",
    "DesignPoints",
    "Estimate",
    "ModelFit",
    "Step",
    "curve_attribute",
    "curve_from_attribute",
    "curve_model",
    "design_points",
    "fit_model",
    "modal_estimate",
    "next_curve",
    "next_modal",
    "prediction",
    "run_design",
]

from ..config.sweep import STRATEGIES

#: points of the modal bracket before the estimates are used
BRACKET_POINTS = 5
#: half-power bandwidths a bracket point steps out when the peak is at the edge
BRACKET_STEP = 2.0
#: modal candidates: f_n (1 + x zeta), |x| <= CANDIDATE_SPAN (|H| >= 0.28 peak, inside hbtest modal's fitted band)
CANDIDATE_SPAN = 3.5
#: candidates per design step
CANDIDATES = 121
#: half-power bandwidths around a non-converged point where no candidate is taken
FAILED_EXCLUSION = 0.1
#: the accuracy (``test.accuracy``) a modal design point must reach after the bracket, as a
#: share of the sweep's: a point pays its settling and iterations once, so averaging longer at
#: the informative frequencies costs fewer rig periods per unit of information than more points
#: (the A-optimal step predicts the point's noise with the same share). Measured on the paper
#: cantilever (seed 1): about 115 periods per point at the sweep's accuracy, 300 at half of it,
#: 700 at a third: information per period 1 : 1.5 : 1.5
DESIGN_ACCURACY_SHARE = 0.5
#: looser shares tried for a point that reaches every asked interval by itself (the last one):
#: the loosest that does (predicted) is taken
FINAL_ACCURACY_SHARES = (1.0, 0.7)
#: bounds of the ratio (bootstrap / linearised half-width) that calibrates the predictions
CALIBRATION_LIMITS = (0.5, 2.0)
#: curve: grid over the band on which the model's uncertainty is evaluated
CURVE_GRID = 401
#: curve: smallest distance of a new point from a measured one, as a share of the band
CURVE_MIN_SPACING = 0.005
#: curve: weighted rms misfit above which the model is not trusted (gaps are halved instead)
CURVE_MISFIT_LIMIT = 3.0
#: the fewest points before a curve fit (5 complex FRF values for 8 real parameters)
CURVE_MIN_POINTS = 5


# ---------------------------------------------------------------------------------------
# the single-mode model and its variable-projection fit


def _basis(f: np.ndarray, fn: float, zeta: float, terms: int) -> np.ndarray:
    """(n, terms) complex basis: ``w_n^2/(w_n^2 - w^2 + 2 i zeta w_n w)``, 1, ``(w_n/w)^2``."""
    r = np.asarray(f, dtype=float) / fn
    cols = [1.0 / (1.0 - r * r + 2j * zeta * r), np.ones_like(r, dtype=complex), (1.0 / (r * r)).astype(complex)]
    return np.stack(cols[:terms], axis=1)


@dataclass(frozen=True)
class ModelFit:
    """A fitted single-mode model: ``fn`` [Hz], ``zeta`` [1], ``coef`` (terms,) complex
    (``A = coef[0] w_n^2``), ``cov`` the covariance of the real parameters
    ``(fn, zeta, Re c_0, Im c_0, ...)``, ``misfit`` the weighted rms misfit (about 1 when the
    model and the uncertainties are right)."""

    fn: float
    zeta: float
    coef: np.ndarray
    cov: np.ndarray
    misfit: float

    @property
    def terms(self) -> int:
        return int(self.coef.size)

    def value(self, f) -> np.ndarray:
        return _basis(f, self.fn, self.zeta, self.terms) @ self.coef

    def jacobian(self, f) -> np.ndarray:
        """(n, 2 + 2 terms) complex derivatives of the model by the real parameters."""
        f = np.atleast_1d(np.asarray(f, dtype=float))
        cols = []
        for k, h in ((0, 1e-7 * self.fn), (1, 1e-6 * max(self.zeta, 1e-6))):
            p = np.array([self.fn, self.zeta])
            p[k] += h
            up = _basis(f, p[0], p[1], self.terms) @ self.coef
            p[k] -= 2 * h
            dn = _basis(f, p[0], p[1], self.terms) @ self.coef
            cols.append((up - dn) / (2 * h))
        B = _basis(f, self.fn, self.zeta, self.terms)
        for j in range(self.terms):
            cols += [B[:, j], 1j * B[:, j]]
        return np.stack(cols, axis=1)

    @property
    def modal_constant(self) -> complex:
        return complex(self.coef[0] * (2 * np.pi * self.fn) ** 2)


def _real_rows(J: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Weighted real rows (Re and Im parts, each with standard deviation u/sqrt 2)."""
    w = (np.sqrt(2.0) / np.asarray(u, dtype=float))[:, None]
    return np.concatenate([J.real * w, J.imag * w])


def _linear(f, H, u, fn, zeta, terms):
    B = _basis(f, fn, zeta, terms) / u[:, None]
    c, *_ = np.linalg.lstsq(B, H / u, rcond=None)
    return c, (B @ c - H / u)


def fit_model(f, H, u, fn0: float, zeta0: float, terms: int = 2) -> ModelFit:
    """Weighted least-squares fit of the single-mode model (``terms`` = 2: mode + constant
    remainder; 3: + ``R_2 (w_n/w)^2``) by variable projection from ``(fn0, zeta0)``.
    ValueError when there are fewer real data than parameters or the fit fails."""
    from scipy.optimize import least_squares

    f, H, u = (np.asarray(x) for x in (f, H, u))
    if 2 * f.size < 2 + 2 * terms or np.unique(f).size < terms + 1:
        raise ValueError(f"{f.size} points cannot determine {2 + 2 * terms} model parameters")

    def res(p):
        _, r = _linear(f, H, u, p[0] * fn0, np.exp(p[1]), terms)
        return np.concatenate([r.real, r.imag])

    sol = least_squares(res, [1.0, np.log(max(zeta0, 1e-5))], x_scale=[1e-3, 0.1], method="lm")
    fn, zeta = float(sol.x[0] * fn0), float(np.exp(sol.x[1]))
    if not (np.isfinite(fn) and fn > 0 and 0 < zeta < 1):
        raise ValueError("the model fit found no resonance")
    c, r = _linear(f, H, u, fn, zeta, terms)
    fit = ModelFit(fn, zeta, c, np.zeros((0, 0)), 0.0)
    A = _real_rows(fit.jacobian(f), u)
    dof = max(1, 2 * f.size - A.shape[1])
    misfit = float(np.sqrt(2 * np.sum(np.abs(r) ** 2) / dof))
    return ModelFit(fn, zeta, c, np.linalg.pinv(A.T @ A), misfit)


def _half_widths(fit: ModelFit, cov: np.ndarray, z: float) -> np.ndarray:
    """Relative half-widths (f_n, zeta, |A|) of ``z``-sigma intervals from a parameter covariance."""
    c0 = fit.coef[0]
    g = np.zeros(cov.shape[0])  # relative gradient of |A| = |c_0| w_n^2
    g[0] = 2.0 / fit.fn
    g[2:4] = np.array([c0.real, c0.imag]) / abs(c0) ** 2
    var = np.maximum([cov[0, 0] / fit.fn**2, cov[1, 1] / fit.zeta**2, g @ cov @ g], 0.0)
    return z * np.sqrt(var)


# ---------------------------------------------------------------------------------------
# the points of a store


@dataclass(frozen=True)
class DesignPoints:
    """The done slots of a design store, in slot order: frequency [Hz], FRF ``H`` and its
    standard uncertainty ``u`` (NaN where not converged), ``converged``, rig periods."""

    f: np.ndarray
    H: np.ndarray
    u: np.ndarray
    converged: np.ndarray
    periods: np.ndarray

    @property
    def good(self) -> np.ndarray:
        return self.converged & np.isfinite(self.H) & np.isfinite(self.u) & (self.u > 0)

    @property
    def n(self) -> int:
        return int(self.f.size)


def design_points(ds, dof: str = "u") -> DesignPoints:
    """The done slots of ``ds`` (a run dataset) with their FRF and its uncertainty
    (:func:`hbtest.analysis.frf.frf_uncertainty`, harmonic 1)."""
    done = np.asarray(ds["done"].values, dtype=bool)
    if not done.any():
        e = np.zeros(0)
        return DesignPoints(e, e.astype(complex), e, e.astype(bool), e)
    from ..analysis.frf import frf_uncertainty

    unc = frf_uncertainty(ds, 1)
    return DesignPoints(
        f=np.asarray(ds["frequency"].values, float)[done],
        H=np.asarray(unc["H"].sel(dof=dof).values)[done],
        u=np.asarray(unc["u_H"].sel(dof=dof).values, float)[done],
        converged=np.asarray(ds["converged"].values, bool)[done],
        periods=np.asarray(ds["rig_periods"].values, float)[done],
    )


def prediction(cfg) -> tuple[float, float]:
    """(f_n [Hz], zeta) of the target mode from the design model (:mod:`hbtest.design`)."""
    from ..design import design_report

    rep = design_report(cfg, with_levels=False)
    return float(rep.target_mode_hz), float(rep.hybrid_damping_ratios[cfg.test.target_mode - 1])


# ---------------------------------------------------------------------------------------
# estimates and decisions (functions of the points measured: a resumed run recomputes them)


@dataclass(frozen=True)
class Estimate:
    """The running modal estimate: ``fn`` [Hz], ``zeta``, ``modal_constant`` (|A|), their
    relative CI half-widths ``half_widths`` (3,), and ``source`` (what gave them)."""

    fn: float
    zeta: float
    modal_constant: float
    half_widths: np.ndarray
    source: str
    modes: tuple = ()  # the hbtest modal fit behind it (hbtest.analysis.modal.ModeFit), when it is one

    def reached(self, target) -> bool:
        want = _wanted(target)
        return bool(np.all(self.half_widths[want > 0] <= want[want > 0]))

    def text(self) -> str:
        hw = self.half_widths
        return (
            f"f_n {self.fn:.5g} Hz ±{hw[0]:.2e}, zeta {self.zeta:.4g} ±{hw[1]:.2e},"
            f" |A| {self.modal_constant:.4g} ±{hw[2]:.2e}"
            f" (relative half-widths; {self.source})"
        )


class Step(NamedTuple):
    """A design decision: the next ``frequency`` [Hz] (None: the design stops), the ``reason``
    (stored per slot as ``design_reason``), and the share of the sweep's ``test.accuracy`` the
    point must reach."""

    frequency: float | None
    reason: str
    accuracy_share: float = 1.0


def _wanted(target) -> np.ndarray:
    return np.array([target.frequency_ci_rel, target.damping_ci_rel, target.modal_constant_ci_rel], dtype=float)


def modal_estimate(ds, target, near_hz: float) -> Estimate | None:
    """``hbtest modal``'s fit (:func:`hbtest.analysis.modal.fit_modes`) of the mode nearest
    ``near_hz`` at ``target.confidence``, or None when it cannot be fitted yet."""
    from ..analysis.modal import fit_modes

    try:
        modes = fit_modes(ds, target.dof, confidence=target.confidence)
    except ValueError:
        return None
    m = min(modes, key=lambda m: abs(m.frequency_hz - near_hz))

    def rel(x, ci):
        return (ci[1] - ci[0]) / 2 / abs(x) if x else np.inf

    hw = np.array(
        [
            rel(m.frequency_hz, m.frequency_hz_ci),
            rel(m.damping_ratio, m.damping_ratio_ci),
            rel(m.modal_constant, m.modal_constant_ci),
        ]
    )
    return Estimate(
        m.frequency_hz, m.damping_ratio, m.modal_constant, hw, f"hbtest modal fit of {m.n_points} points", tuple(modes)
    )


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _bracket(pts: DesignPoints, prior) -> tuple[float, str]:
    """The next bracket point (see the module docstring)."""
    fn_p, z_p = prior
    good = pts.good
    n = int(good.sum())
    if n >= 3:
        f, mag = pts.f[good], np.abs(pts.H[good])
        k = int(np.argmax(mag))
        if f[k] == f.min() or f[k] == f.max():
            side = -1 if f[k] == f.min() else 1
            fx = float(f[k] * (1 + side * BRACKET_STEP * z_p))
            where = "lowest" if side < 0 else "highest"
            return (
                fx,
                (
                    f"bracket: the largest |H| is at the {where} point measured ({f[k]:.4f} Hz);"
                    f" {BRACKET_STEP:g} bandwidths further out"
                ),
            )
    if n < 3:
        x = (0.0, -1.0, 1.0)[n]
        return fn_p * (
            1 + x * z_p
        ), f"bracket: design prediction f_n {fn_p:.4f} Hz, zeta {z_p:.4g}; {x:+g} half-power bandwidths"
    center = float(pts.f[good][np.argmax(np.abs(pts.H[good]))])
    x = -CANDIDATE_SPAN if n == 3 else CANDIDATE_SPAN
    if n > 4:  # a fit failed with enough points: the largest gap among them
        return _largest_gap(
            np.sort(pts.f[good])
        ), "bracket: the modal fit failed; the largest gap between points halved"
    return center * (
        1 + x * z_p
    ), f"bracket: {x:+g} half-power bandwidths (zeta {z_p:.4g}) about the largest |H| at {center:.4f} Hz"


def _largest_gap(f: np.ndarray) -> float:
    k = int(np.argmax(np.diff(f)))
    return float((f[k] + f[k + 1]) / 2)


def _noise_ratio(pts: DesignPoints) -> float:
    good = pts.good
    return float(np.median(pts.u[good] / np.abs(pts.H[good])))


def _score(fit: ModelFit, info, f: float, u: float, z: float, want, asked) -> tuple[float, np.ndarray]:
    a = _real_rows(fit.jacobian([f]), np.array([u]))
    hw = _half_widths(fit, np.linalg.pinv(info + a.T @ a), z)
    return float(np.sum((hw[asked] / want[asked]) ** 2)), hw


def _a_optimal(fit: ModelFit, pts: DesignPoints, target, allowed, current=None) -> Step:
    """The candidate frequency that minimises the predicted sum of (half-width / target)^2,
    and the accuracy share it is measured to (:data:`DESIGN_ACCURACY_SHARE`, or the loosest of
    :data:`FINAL_ACCURACY_SHARES` with which it is predicted to reach every asked interval).
    ``current``: the half-widths the stop is judged on (``hbtest modal``'s bootstrap) now; the
    linearised predictions are scaled by their ratio to the linearised ones now (within
    :data:`CALIBRATION_LIMITS`)."""
    good = pts.good
    z, want = _z(target.confidence), _wanted(target)
    asked = want > 0
    A0 = _real_rows(fit.jacobian(pts.f[good]), pts.u[good])
    info = A0.T @ A0
    now = _half_widths(fit, np.linalg.pinv(info), z)
    cal = np.ones(3)
    if current is not None:
        cal = np.clip(np.nan_to_num(np.asarray(current) / now, nan=1.0), *CALIBRATION_LIMITS)
    want = want / cal  # predicted * cal <= target
    r = _noise_ratio(pts)
    fc = fit.fn * (1 + np.linspace(-CANDIDATE_SPAN, CANDIDATE_SPAN, CANDIDATES) * fit.zeta)
    scored = [
        (_score(fit, info, f, r * DESIGN_ACCURACY_SHARE * abs(fit.value([f])[0]), z, want, asked), f)
        for f in fc
        if allowed(f)
    ]
    if not scored:
        raise ValueError("no candidate frequency is free (mains multiples, failed points)")
    (_, hw_best), best = min(scored, key=lambda t: t[0][0])
    share = DESIGN_ACCURACY_SHARE
    for loose in FINAL_ACCURACY_SHARES:
        _, hw = _score(fit, info, best, r * loose * abs(fit.value([best])[0]), z, want, asked)
        if np.all(hw[asked] <= want[asked]):
            share, hw_best = loose, hw
            break
    names = np.array(["f_n", "zeta", "|A|"])[asked]
    change = ", ".join(f"{n} {a:.2e}->{b:.2e}" for n, a, b in zip(names, (now * cal)[asked], (hw_best * cal)[asked]))
    x = (best / fit.fn - 1) / fit.zeta
    return Step(
        float(best),
        f"A-optimal at {x:+.2f} half-power bandwidths from f_n {fit.fn:.4f} Hz, accuracy x{share:g}:"
        f" predicted half-widths {change}",
        share,
    )


def next_modal(pts: DesignPoints, prior, est: Estimate | None, target, allowed) -> Step:
    """The next step of the modal design (frequency None: the asked intervals are reached)."""
    if est is not None and est.reached(target):
        return Step(None, f"asked intervals reached: {est.text()}")
    if est is None or int(pts.good.sum()) < BRACKET_POINTS:
        f, why = _bracket(pts, prior)
        return Step(_nudge(f, allowed, prior[1] * f), why)
    good = pts.good
    near = np.abs(pts.f - est.fn) <= (CANDIDATE_SPAN + 1) * est.zeta * est.fn
    sel = good & near
    try:
        fit = fit_model(pts.f[sel], pts.H[sel], pts.u[sel], est.fn, est.zeta, 2)
    except (ValueError, np.linalg.LinAlgError):
        return Step(
            _largest_gap(np.sort(pts.f[good])), "the design model fit failed; the largest gap between points halved"
        )
    near_pts = DesignPoints(pts.f[sel], pts.H[sel], pts.u[sel], pts.converged[sel], pts.periods[sel])
    return _a_optimal(fit, near_pts, target, allowed, est.half_widths if est.modes else None)


def _nudge(f: float, allowed, step: float) -> float:
    """``f`` or the nearest frequency ``f + k step / 10`` the design allows."""
    for k in range(200):
        for g in (f + k * step / 10, f - k * step / 10):
            if allowed(g):
                return float(g)
    return float(f)


def _curve_start(band, prior) -> list[tuple[float, str]]:
    lo, hi = band
    fn_p, z_p = prior
    start = [(lo, "curve: band start"), (hi, "curve: band end")]
    inside = [fn_p * (1 + x * z_p) for x in (0.0, -1.0, 1.0)]
    if all(lo < f < hi for f in inside):
        return start + [
            (f, f"curve: design prediction f_n {fn_p:.4f} Hz, zeta {z_p:.4g}, {x:+g} bandwidths")
            for f, x in zip(inside, (0.0, -1.0, 1.0))
        ]
    return start + [
        (lo + (hi - lo) * q, "curve: evenly in the band (the predicted mode lies outside it)")
        for q in (0.25, 0.5, 0.75)
    ]


def curve_model(pts: DesignPoints, prior) -> ModelFit:
    """The FRF curve: the single-mode model with a low-frequency residual fitted to the
    converged points (ValueError when it cannot be fitted)."""
    good = pts.good
    if good.sum() < CURVE_MIN_POINTS:
        raise ValueError(f"a curve needs at least {CURVE_MIN_POINTS} converged points, got {int(good.sum())}")
    f, H, u = pts.f[good], pts.H[good], pts.u[good]
    return fit_model(f, H, u, float(f[np.argmax(np.abs(H))]), prior[1], 3)


def curve_uncertainty(fit: ModelFit, f, confidence: float) -> np.ndarray:
    """Relative half-width of the model's ``confidence`` interval at ``f`` (linearised)."""
    J = fit.jacobian(f)
    var = np.einsum("ij,jk,ik->i", J.real, fit.cov, J.real) + np.einsum("ij,jk,ik->i", J.imag, fit.cov, J.imag)
    return _z(confidence) * np.sqrt(np.maximum(var, 0.0)) / np.abs(fit.value(f))


def next_curve(pts: DesignPoints, prior, band, target, allowed) -> Step:
    """The next step of the curve design (frequency None: the curve is known)."""
    start = _curve_start(band, prior)
    if pts.n < len(start):
        f, why = start[pts.n]
        return Step(_nudge(f, allowed, (band[1] - band[0]) / 50), why)
    fs = np.sort(np.r_[pts.f[pts.good], band])
    try:
        fit = curve_model(pts, prior)
    except (ValueError, np.linalg.LinAlgError):
        return Step(_largest_gap(fs), "curve: the model cannot be fitted yet; the largest gap halved")
    if fit.misfit > CURVE_MISFIT_LIMIT:
        return Step(
            _largest_gap(fs), f"curve: model misfit {fit.misfit:.2f} > {CURVE_MISFIT_LIMIT:g}; the largest gap halved"
        )
    grid = np.linspace(band[0], band[1], CURVE_GRID)
    rel = curve_uncertainty(fit, grid, target.confidence)
    if rel.max() <= target.curve_accuracy:
        return Step(
            None,
            f"curve known: largest {target.confidence:.0%} half-width {rel.max():.2%}"
            f" <= {target.curve_accuracy:.2%} of |H|",
        )
    far = np.min(np.abs(grid[:, None] - pts.f[None, :]), axis=1) >= CURVE_MIN_SPACING * (band[1] - band[0])
    ok = far & np.array([allowed(f) for f in grid])
    if not ok.any():
        return Step(None, "curve: no free frequency left at the minimum spacing")
    k = int(np.argmax(np.where(ok, rel, -np.inf)))
    return Step(
        float(grid[k]),
        f"curve: largest model uncertainty {rel[k]:.2%} of |H| at {grid[k]:.4f} Hz (max over band {rel.max():.2%})",
    )


# ---------------------------------------------------------------------------------------
# the sweep path (hbtest.sweep.runner: an adaptive strategy runs here instead of the grid)


def _curve_estimate(pts: DesignPoints, prior, band, target) -> tuple[Estimate | None, float]:
    try:
        fit = curve_model(pts, prior)
    except (ValueError, np.linalg.LinAlgError):
        return None, float("nan")
    hw = _half_widths(fit, fit.cov, _z(target.confidence))
    est = Estimate(fit.fn, fit.zeta, abs(fit.modal_constant), hw, "curve model fit, linearised intervals")
    return est, float(curve_uncertainty(fit, np.linspace(band[0], band[1], CURVE_GRID), target.confidence).max())


def _record_estimate(store, pts: DesignPoints, est: Estimate | None, curve_unc: float) -> None:
    """The running estimate after the last done point, into its slot (once)."""
    done = np.flatnonzero(store.done())
    if not done.size or est is None:
        return
    last = int(done[-1])
    store.write_design(
        last,
        frequency_hz=est.fn,
        damping_ratio=est.zeta,
        modal_constant=est.modal_constant,
        frequency_ci_rel=est.half_widths[0],
        damping_ci_rel=est.half_widths[1],
        modal_constant_ci_rel=est.half_widths[2],
        curve_uncertainty=curve_unc,
    )


def _decide(cfg, store, prior, layout):
    """(the next :class:`Step`, the estimate after the points so far)."""
    sw, t = cfg.sweep, cfg.sweep.target
    ds = store.dataset()
    pts = design_points(ds, t.dof)
    band = (sw.start_hz, sw.stop_hz)
    if sw.strategy == "modal":
        good = pts.good
        near = float(pts.f[good][np.argmax(np.abs(pts.H[good]))]) if good.any() else prior[0]
        est, cu = (modal_estimate(ds, t, near) if good.sum() >= BRACKET_POINTS else None), float("nan")
    else:
        est, cu = _curve_estimate(pts, prior, band, t)
    _record_estimate(store, pts, est, cu)
    used = float(np.nansum(pts.periods))
    if used >= t.max_rig_periods:
        return Step(
            None, f"rig-time budget spent: {used:.0f} >= sweep.target.max_rig_periods = {t.max_rig_periods:g} periods"
        ), est
    allowed = _allowed(cfg, pts, prior, layout)
    step = (
        next_modal(pts, prior, est, t, allowed) if sw.strategy == "modal" else next_curve(pts, prior, band, t, allowed)
    )
    return step, est


def _allowed(cfg, pts: DesignPoints, prior, layout):
    """Whether the design may take frequency ``f``: positive, off the mains multiples
    (:func:`hbtest.design.coincidences`), not next to a point that did not converge."""
    from ..design import coincidences

    failed = pts.f[~pts.converged]
    width = FAILED_EXCLUSION * prior[1] * prior[0]

    def ok(f: float) -> bool:
        if not f > 0 or np.any(np.abs(failed - f) < width):
            return False
        return not coincidences(f, cfg.sweep.harmonics, layout, cfg.test.averaging_periods)

    return ok


def _start_carry(store, loop, orders, f: float):
    """A resumed design's carry: the converged voltage of the done point nearest ``f``."""
    from ..method import harmonics

    ds = store.dataset()
    conv = np.flatnonzero(np.asarray(ds["done"].values, bool) & np.asarray(ds["converged"].values, bool))
    if not conv.size:
        return loop.new_carry()
    j = int(conv[np.argmin(np.abs(np.asarray(ds["frequency"].values)[conv] - f))])
    return loop.new_carry(start_V=harmonics.pack(store.read_point(j).voltage, orders).reshape(-1))


def run_design(cfg, store, loop, write, say):
    """Run (or continue) the design of ``cfg.sweep.strategy`` into the store's open slots;
    ``write(slot, outcome, n, of)`` records a point (:data:`hbtest.sweep.runner.CONTINUATION_PATHS`).
    Returns its stop, or None."""
    from dataclasses import replace

    from ..events import Notice

    if store.attrs.get("design_finished"):
        return None
    prior = prediction(cfg)
    carry, base = None, loop.s
    while True:
        step, est = _decide(cfg, store, prior, loop.layout)
        f, why = step.frequency, step.reason
        done = store.done()
        if f is not None and done.all():
            f, why = None, f"all {store.n_points} slots used (sweep.max_points)"
        if f is None:
            _finish_design(cfg, store, prior, est, why, say)
            return None
        i = int(np.argmin(done))
        carry = carry if carry is not None else _start_carry(store, loop, np.asarray(cfg.sweep.harmonics), f)
        carry.solutions.sort(key=lambda s: -abs(s[0] - f))  # the nearest solution last: the profile starts from it
        loop.s = replace(base, accuracy=base.accuracy * step.accuracy_share)
        say(Notice(f"{cfg.sweep.strategy} design, slot {i}: {f:.4f} Hz — {why}"))
        store.write_design(i, reason=why)  # before the point: a slot not done is redecided on resume
        out = loop.run(f, carry)
        stop = write(i, out, int(done.sum()) + 1, store.n_points)
        if stop:
            return stop


def _finish_design(cfg, store, prior, est: Estimate | None, why: str, say) -> None:
    """Mark the design finished (``design_finished``), say why with the estimate, and keep the
    answer: ``modal_fit`` (modal) or ``curve_fit`` (curve) store attributes."""
    from ..events import Notice

    store.set_attrs(design_finished=why)
    tail = f"; {est.text()}" if est is not None and est.text() not in why else ""
    say(Notice(f"{cfg.sweep.strategy} design finished: {why}{tail}"))
    if est is not None and est.modes:
        _write_fit(cfg, store, est.modes)
    if cfg.sweep.strategy == "curve":
        try:
            fit = curve_model(design_points(store.dataset(), cfg.sweep.target.dof), prior)
        except (ValueError, np.linalg.LinAlgError):
            return
        store.set_attrs(curve_fit=curve_attribute(fit, cfg.sweep.target.dof))


def curve_attribute(fit: ModelFit, dof: str) -> dict:
    """The JSON document of the fitted FRF curve (store attribute ``curve_fit``; read back
    with :func:`curve_from_attribute`)."""
    return {
        "model": "H = w_n^2 c0/(w_n^2 - w^2 + 2 i zeta w_n w) + c1 + c2 (w_n/w)^2, harmonic 1",
        "dof": dof,
        "frequency_hz": fit.fn,
        "damping_ratio": fit.zeta,
        "coefficients": [[float(c.real), float(c.imag)] for c in fit.coef],
        "covariance": np.asarray(fit.cov).tolist(),
        "misfit": fit.misfit,
    }


def curve_from_attribute(doc: dict) -> ModelFit:
    """The :class:`ModelFit` of a ``curve_fit`` store attribute (``.value(f)``: the curve)."""
    coef = np.array([complex(re, im) for re, im in doc["coefficients"]])
    return ModelFit(float(doc["frequency_hz"]), float(doc["damping_ratio"]), coef, np.array(doc["covariance"]),
                    float(doc["misfit"]))


def _write_fit(cfg, store, modes) -> None:
    """The ``modal_fit`` attribute of a finished modal design (as ``hbtest modal`` writes it)."""
    from ..analysis.modal import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, modal_fit_attribute

    store.set_attrs(
        modal_fit=modal_fit_attribute(
            list(modes),
            harmonic=1,
            samples=BOOTSTRAP_SAMPLES,
            seed=BOOTSTRAP_SEED,
            confidence=cfg.sweep.target.confidence,
        )
    )

"""Modal parameters of the swept mode(s) from the hybrid FRF, with confidence intervals.

Units: frequencies [Hz]; damping ratio [1] (viscous, ``zeta = -Re lambda / |lambda|``);
the modal constant ``A`` of one DOF's FRF (u/F: [m/(N s^2)] = [1/kg]; theta/F: [rad/(N s^2)])
in the single-mode form

    H(omega) ~ A / (omega_n^2 - omega^2 + 2 i zeta omega_n omega) + remainder,

reported as its magnitude and phase (0 deg: a real, positive modal constant).

Method
------
Peaks: local maxima of ``|H|`` over the converged points (sorted by frequency) from which
``|H|`` falls by at least ``MIN_DIP`` (a share of the peak) on both sides before rising
higher (the prominence of ``log |H|``; the ends of the band count as deep valleys). Each mode is fitted on the
contiguous points around its peak with ``|H| >= threshold * peak`` (as
:func:`hbtest.analysis.frf.fit_resonance`, strictly between the valleys to the neighbouring peaks) with
the same Sanathanan–Koerner rational fit (one pole pair plus a remainder), weighted by the
inverse standard uncertainty ``1/u_H`` of every point (:func:`hbtest.analysis.frf.frf_uncertainty`).
With the normalised variable ``s_n = i f / f0`` the fitted model is
``(b0 + b1 s_n + b2 s_n^2) / (a0 + a1 s_n + s_n^2)``; its pole gives ``f_n`` (undamped) and
``zeta``; taking the remainder ``b2`` out, the mode term is ``(c0 + c1 s) / (s^2 + 2 zeta
omega_n s + omega_n^2)`` with ``c0 = (b0 - b2 a0) omega0^2``, ``c1 = (b1 - b2 a1) omega0``
(``omega0 = 2 pi f0``), and the modal constant is ``A = c0 + i omega_n c1`` (equal to the
mode term times the denominator at ``omega = omega_n``).

Confidence intervals: a seeded parametric bootstrap — ``BOOTSTRAP_SAMPLES`` copies of the
fitted FRF points perturbed by circular complex Gaussian noise of standard deviation
``u_H`` per point, refitted on the same band — gives the standard deviation of each
parameter; the interval is ``estimate +- z sd`` with ``z`` the two-sided normal quantile of
``CONFIDENCE``. It states the effect of the measurement noise and the final residual, not of
sensor calibration errors (not modelled here).

:func:`model_mode` gives the exact pole of the emulated structure from the models
(``det(D_N(s) + D_P(s)) = 0``, Newton from a guess; ``D_N`` rebuilt from the store's sweep
text, ``D_P`` the nominal PS model of the sweep or rig file), an independent check on a twin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..errors import UserError
from .modal_settings import BOOTSTRAP_SAMPLES, BOOTSTRAP_SEED, CONFIDENCE

__all__ = [
    "ModeFit",
    "fit_modes",
    "model_mode",
    "modal_fit_attribute",
    "write_modal_fit",
    "CONFIDENCE",
    "BOOTSTRAP_SAMPLES",
    "BOOTSTRAP_SEED",
    "MIN_DIP",
    "BAND_THRESHOLD",
]

#: an interval needs at least this many successful refits, and this share of them
MIN_BOOTSTRAP_REFITS = 10
MIN_BOOTSTRAP_SUCCESS = 0.5
#: a local maximum of |H| is a mode when |H| falls by this share of it on both sides
MIN_DIP = 0.3
#: fitted band: the points around a peak with |H| >= BAND_THRESHOLD * peak
BAND_THRESHOLD = 0.25
#: at least this many points per fitted mode
MIN_POINTS = 5
#: Newton iterations and relative step of the model pole search
_NEWTON_ITERATIONS = 50
_NEWTON_STEP = 1e-7
_NEWTON_TOLERANCE = 1e-9  # the determinant is accurate to about 1e-10 relative


@dataclass(frozen=True)
class ModeFit:
    """One fitted mode (see the module docstring for the definitions); ``*_ci`` are
    ``CONFIDENCE`` intervals ``[lo, hi]``; ``band_hz`` the fitted band, ``n_points`` the
    points in it, ``misfit`` the weighted rms misfit in standard uncertainties (about 1
    when the model and the uncertainties are right)."""

    frequency_hz: float
    frequency_hz_ci: tuple[float, float]
    damping_ratio: float
    damping_ratio_ci: tuple[float, float]
    modal_constant: float
    modal_constant_ci: tuple[float, float]
    modal_constant_phase_deg: float
    modal_constant_units: str
    dof: str
    band_hz: tuple[float, float]
    n_points: int
    misfit: float
    at_edge: bool

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, tuple):
                d[k] = list(v)
        return d


def _z(confidence: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + confidence / 2))


def _peaks(mag: np.ndarray) -> list[int]:
    """Indices of the modes' peaks in ``mag`` (sorted by frequency): local maxima standing
    out of both their valleys by at least ``MIN_DIP`` (topographic prominence of ``log |H|``);
    the band ends count as valleys as deep as the lowest sample, so a peak on the first or
    last point is kept (and flagged ``at_edge``)."""
    from scipy.signal import find_peaks

    x = np.log(np.maximum(mag, np.finfo(float).tiny))
    padded = np.concatenate([[x.min()], x, [x.min()]])
    idx, _ = find_peaks(padded, prominence=-np.log1p(-MIN_DIP))
    return [int(i) - 1 for i in idx]


def _params(lam: complex, a, b, f0: float) -> tuple[float, float, complex]:
    w0 = 2 * np.pi * f0
    wn = abs(lam)
    c0 = (b[0] - b[2] * a[0]) * w0 * w0
    c1 = (b[1] - b[2] * a[1]) * w0
    return wn / (2 * np.pi), -lam.real / wn, complex(c0 + 1j * wn * c1)


def _fit_once(fs, Hs, f0, weights):
    from .frf import _pole_fit

    lam, a, b = _pole_fit(fs, Hs, f0, weights=weights)
    return _params(lam, a, b, f0), (lam, a, b)


def _fit_one_mode(f, H, uH, mag, peaks, m: int, threshold: float, samples: int, rng, z: float, units: str,
                  dof: str) -> ModeFit:
    """Mode ``m`` (at ``peaks[m]``) fitted over its half-power band, its intervals from
    ``samples`` bootstrap refits drawn from ``rng``."""
    from .frf import _peak_band

    p = peaks[m]
    # the valleys to the neighbouring peaks bound the band (exclusive: the valley sample
    # belongs to neither mode)
    lo_lim = 0 if m == 0 else peaks[m - 1] + int(np.argmin(mag[peaks[m - 1] : p + 1])) + 1
    hi_lim = f.size - 1 if m == len(peaks) - 1 else p + int(np.argmin(mag[p : peaks[m + 1] + 1])) - 1
    lo, hi = _peak_band(mag, p, threshold, MIN_POINTS, lo_lim, hi_lim)
    fs, Hs, us = f[lo : hi + 1], H[lo : hi + 1], uH[lo : hi + 1]
    f0 = float(f[p])
    w = 1.0 / us
    (fn, zeta, A), (lam, a, b) = _fit_once(fs, Hs, f0, w)
    sn = 1j * fs / f0
    model = (b[0] + b[1] * sn + b[2] * sn * sn) / (a[0] + a[1] * sn + sn * sn)
    misfit = float(np.sqrt(np.mean(np.abs((model - Hs) / us) ** 2)))
    sd = _bootstrap_sd(fs, Hs, us, f0, w, rng, samples)

    def ci(x, s):
        return (float(x - z * s), float(x + z * s))

    return ModeFit(
        frequency_hz=float(fn), frequency_hz_ci=ci(fn, sd[0]),
        damping_ratio=float(zeta), damping_ratio_ci=ci(zeta, sd[1]),
        modal_constant=float(abs(A)), modal_constant_ci=ci(abs(A), sd[2]),
        modal_constant_phase_deg=float(np.degrees(np.angle(A))), modal_constant_units=units,
        dof=dof, band_hz=(float(fs[0]), float(fs[-1])), n_points=int(fs.size), misfit=misfit,
        at_edge=bool(p == 0 or p == f.size - 1),
    )


def _bootstrap_sd(fs, Hs, us, f0: float, w, rng, samples: int) -> np.ndarray:
    """Standard deviations of (f_n, zeta, |A|) over refits to the FRF plus its stated noise."""
    boot = []
    for _ in range(int(samples)):
        noise = (rng.standard_normal(fs.size) + 1j * rng.standard_normal(fs.size)) * us / np.sqrt(2)
        try:
            (bf, bz, bA), _ = _fit_once(fs, Hs + noise, f0, w)
        except ValueError:
            continue
        boot.append((bf, bz, abs(bA)))
    if len(boot) < max(MIN_BOOTSTRAP_REFITS, MIN_BOOTSTRAP_SUCCESS * samples):
        raise ValueError(f"the bootstrap refits of the mode at {f0:.4g} Hz failed too often ({len(boot)}/{samples})")
    return np.std(np.array(boot), axis=0, ddof=1)


def fit_modes(ds, dof: str = "u", harmonic: int = 1, *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED,
              confidence: float = CONFIDENCE, threshold: float = BAND_THRESHOLD) -> list[ModeFit]:
    """Fit every swept mode of the measured FRF of ``dof`` (converged points only) with
    confidence intervals (method in the module docstring). ValueError when there are too
    few converged points or no resonance in them."""
    from .frf import frf_uncertainty

    if dof not in [str(d) for d in ds["dof"].values]:
        raise UserError(f"dof must be one of {', '.join(str(d) for d in ds['dof'].values)}, got {dof!r}")
    unc = frf_uncertainty(ds, harmonic)
    sel = np.asarray(ds["done"].values, bool) & np.asarray(ds["converged"].values, bool)
    f = np.asarray(ds["frequency"].values, float)[sel]
    H = unc["H"].sel(dof=dof).values[sel]
    uH = unc["u_H"].sel(dof=dof).values[sel]
    ok = np.isfinite(H) & np.isfinite(uH) & (uH > 0)
    f, H, uH = f[ok], H[ok], uH[ok]
    if f.size < MIN_POINTS:
        raise ValueError(f"a modal fit needs at least {MIN_POINTS} converged points with an FRF, got {f.size}")
    o = np.argsort(f, kind="stable")
    f, H, uH = f[o], H[o], uH[o]
    mag = np.abs(H)
    peaks = _peaks(mag)
    if not peaks:
        raise ValueError("no resonance peak in the converged points")
    units = "1/kg" if dof == "u" else "rad/(N s2)"
    z = _z(confidence)
    rng = np.random.default_rng(seed)
    out = []
    for m in range(len(peaks)):
        out.append(_fit_one_mode(f, H, uH, mag, peaks, m, threshold, samples, rng, z, units, dof))
    return out


def model_mode(ds, near_hz: float, damping_guess: float = 0.01) -> dict:
    """The exact pole of the emulated structure nearest ``near_hz`` from the models
    (``det(D_N(s) + D_P(s)) = 0`` by Newton; needs a PS model in the sweep or rig file):
    ``{"frequency_hz", "damping_ratio", "model"}``."""
    from .frf import _hybrid_models

    ns, ps, where, _, _ = _hybrid_models(ds)
    if ps is None:
        raise UserError("the store's sweep and rig files describe no physical substructure model ([design.physical] or [physical])")
    wn = 2 * np.pi * near_hz
    lam = complex(-damping_guess * wn, wn * np.sqrt(1 - damping_guess**2))

    def det(s):
        return np.linalg.det(ns.dynamic_stiffness(np.array([s]))[0] + ps.dynamic_stiffness(np.array([s]))[0])

    for _ in range(_NEWTON_ITERATIONS):
        h = _NEWTON_STEP * abs(lam)
        d0 = det(lam)
        step = d0 / ((det(lam + h) - det(lam - h)) / (2 * h))
        lam -= step
        if abs(step) < _NEWTON_TOLERANCE * abs(lam):
            break
    else:
        raise ValueError(f"no model pole found near {near_hz:g} Hz")
    return {"frequency_hz": float(abs(lam) / (2 * np.pi)), "damping_ratio": float(-lam.real / abs(lam)), "model": where}


def modal_fit_attribute(modes: list[ModeFit], *, harmonic: int, samples: int, seed: int, confidence: float) -> dict:
    """The JSON document stored as the store attribute ``modal_fit``."""
    from ..store.provenance import utc_now

    return {
        "modes": [m.to_dict() for m in modes],
        "harmonic": int(harmonic),
        "method": "Sanathanan-Koerner rational fit (one pole pair + remainder), weighted 1/u_H; parametric bootstrap CIs",
        "confidence": float(confidence),
        "bootstrap_samples": int(samples),
        "bootstrap_seed": int(seed),
        "fitted_utc": utc_now(),
    }


def write_modal_fit(store_path, document: dict) -> None:
    """Write ``document`` as the store attribute ``modal_fit`` under the store lock
    (:class:`hbtest.store.StoreBusy` when a run is writing the store)."""
    from ..store import RunStore, StoreLock

    store = RunStore.open(store_path)
    with StoreLock(store_path):
        store.set_attrs(modal_fit=document)

"""Frequency response functions and accuracy measures from a run store.

- :func:`frf` — interface displacement per unit external force, ``H_k = U_k / F_k`` at
  harmonic k (default the fundamental), for the measured response, the NS demand or the
  exact reference (virtual rigs). Defined only where the external force has a component at
  that harmonic (the forcing of a sweep is at k = 1; elsewhere the FRF is NaN).
- :func:`relative_error` — ``|H_measured - H_reference| / |H_reference|`` per point and DOF.
- :func:`fit_resonance` / :func:`resonance` / :func:`compare_resonance` — natural frequency
  and damping ratio from a rational fit near the peak (method below).
- :func:`sync_table` — synchronisation of the PS interface signals against their NS demand
  at a converged point (docs/method.md §4): delay ``-arg(U_P/U_N) / (2 pi k f)`` and relative
  amplification ``|U_P|/|U_N| - 1``.
- :func:`frf_uncertainty` / :func:`uncertainty_coverage` — first-order standard uncertainty of
  every measured FRF point from the measured noise, the calibration record's uncertainties and
  the final residual (method below), and
  how often it covers the true error (virtual rigs, which store the exact reference).
- :func:`harmonic_energy` — share of the interface-displacement power in solved harmonics
  other than the fundamental, and (when the rig measured it) in harmonics not solved for.

Slots that are not ``done`` are NaN everywhere here; measured FRFs keep non-converged points
(callers mask them with the ``converged`` variable — plots mark them, fits skip them).

Resonance estimate
------------------
Near an isolated, lightly damped mode the receptance is well described by one pole pair plus
a smooth remainder from the other modes. :func:`fit_resonance` takes the contiguous run of
points around the peak of ``|H|`` whose magnitude is at least ``threshold`` (default 0.25)
of the peak — widened to at least ``min_points`` (5) points — and fits the proper rational
model

    H(s) = (b0 + b1 s + b2 s^2) / (a0 + a1 s + s^2),   s = i f / f_peak (normalised),

with real coefficients (a pole pair plus a constant remainder) by linearised least squares
(Levy) refined by Sanathanan–Koerner iterations (weights ``1/|a0 + a1 s + s^2|`` of the
previous iterate), which remove the bias of the linearisation. The pole
``lambda = -zeta w_n + i w_n sqrt(1 - zeta^2)`` gives the natural frequency
``f_n = |lambda| / 2 pi`` (undamped) and the damping ratio ``zeta = -Re lambda / |lambda|``.
Because it uses the whole peak it is far finer than the grid spacing: on the reference
cantilever (31 points over 16–19 Hz, 0.1 Hz steps, 0.8 % damping) it recovers the exact
pole to better than 1e-4. ``at_edge`` flags a peak on the first or last grid point (then
the estimate is an extrapolation).

FRF uncertainty
---------------
At a finished point and harmonic k the rig measured the PS interface displacement and force
with zero-mean noise, ``U_P = U + e_U`` and ``F_P = D_P U + e_F`` (``U`` the true interface
displacement the rig held at the final voltage, ``D_P`` the physical substructure), and the
numerical side computed ``U_N = D_N^-1 (F_e - F_P)``; the point stopped on the computed
residual ``R = U_P - U_N``. Eliminating ``U`` from ``D_N (U_P - R) = F_e - F_P``:

    (D_N + D_P) U = F_e - e_F - D_N e_U + D_N R,

so with ``G = (D_N + D_P)^-1`` and the exact hybrid solution ``U* = G F_e``

    U_P - U* = (I - G D_N) e_U - G e_F + G D_N R          (exact, linear in the noise).

The last term is the interface error the residual still implies (README, "Two solver
profiles"); it is computed from the stored R and reported as ``residual_error``. The FRF
``H = U_P / F_k`` therefore has the first-order error ``dH = (U_P - U*) / F_k`` with

    E|dH_j|^2 = ( sum_l |A_jl|^2 var U_l + |G_jl|^2 var F_l ) / |F_k|^2 + |b_j|^2,
    A = I - G D_N = G D_P,   b = G D_N R / F_k,

taking the stored variances of the means (``interface_displacement_variance``,
``interface_force_variance``: ``E|X - EX|^2 / n``, circular complex noise) as independent
per DOF (their u/theta and T/M cross-covariances are not stored), and counting the
uncorrected residual term ``b`` as a systematic component in quadrature (GUM). ``u_H`` is
that root-mean-square complex error; the magnitude and phase take the in-phase and
quadrature parts: ``u_|H|^2 = u_noise^2/2 + Re(conj(h) b)^2``, ``u_phase^2 = (u_noise^2/2 +
Im(conj(h) b)^2) / |H|^2`` with ``h = H/|H|``. ``D_N`` is exact (rebuilt from the store's
verbatim sweep text); ``D_P`` only enters the sensitivities ``A`` and ``G`` and is the
nominal PS model (the sweep's ``[design.physical]`` or the rig file's ``[physical]`` beam).
Without one, ``G`` is estimated from the data as the rank-one modal receptance
``U_P U_P^T / (F_e^T U_P)`` (exact for an isolated mode; ``model`` attribute ``"rank-1"``).
Not included: systematic errors of the force reconstruction; :func:`uncertainty_coverage`
measures how well the statement holds on a twin.

Stated size
-----------
A point of the hbtest profile states the standard uncertainty of its solution
(``displacement_uncertainty``, the weighted norm ``|(dU_u, l dU_theta)|``): through the rig
outputs' correlations and the fitted Jacobian's own uncertainty, and, where the point's
evaluations scatter more than their reads, with the scatter's share measured (a sandwich over
the evaluations) rather than propagated as if each output scattered on its own
(:meth:`hbtest.point.profiles.HbtestProfile.stated_uncertainty`). The stored per-output
variances carry such a scatter in full, and the propagation above has no cross-covariances to
cancel it. So where a point states its uncertainty and balanced harmonic k alone, the noise
variance of ``U*`` is scaled to that statement, keeping the propagation's split between u and
theta; points that state none (the published profile) keep the propagation. Measured on the
newcomer's paper sweep (``hbtest sweep sweeps/paper-cantilever.toml``, the reference twin with
the lab's demand scatter; :func:`uncertainty_coverage` against the exact structure, 62 values):
propagated, the band reached 1.29 % of |H| (1 sigma) and the normalised rms error was 0.77; at
the stated size 0.44 % and 0.95, 2-sigma coverage 1.00 (complex) and 0.94 (magnitude).

Calibration uncertainty
-----------------------
When the store's reduction used a calibration record (``sensor_layout`` names one), each of
the record's per-channel standard uncertainties (scale ``scale_per_v``, skew ``skew_us``) is a
systematic error of the measured interface state: one standard uncertainty of value q moves
``U_P`` and ``F_P`` together by ``(dU_q, dF_q)``, first order through the reduction
(:mod:`hbtest.calibration.uncertainty`; the record from :func:`store_calibration_record`: lasers -> (u, theta), gauges -> (T, M) with the
sweep's force reconstruction). In the equation above it enters as ``e_U = dU_q``,
``e_F = dF_q``, so

    dH_q = (A dU_q - G dF_q) / F_k,     u_H_calibration^2 = sum_q |dH_q|^2

(values independent; the record states no covariances). It is added to ``u_H`` in quadrature;
being systematic and not circular, its in-phase and quadrature parts (along ``h``) enter
``u_|H|`` and ``u_phase`` separately. The mains frequency is not propagated (second order:
:mod:`hbtest.calibration.uncertainty`). A store reduced with the nominal sensors has
``u_H_calibration = 0``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..method.ps_ns_sync import sync_ratio_phase

__all__ = [
    "frf",
    "frf_dataset",
    "relative_error",
    "exact_frf",
    "dense_exact_frf",
    "ResonanceEstimate",
    "fit_resonance",
    "resonance",
    "compare_resonance",
    "SyncRow",
    "sync_metrics",
    "sync_table",
    "format_sync_table",
    "harmonic_energy",
    "frf_uncertainty",
    "uncertainty_coverage",
    "store_calibration_record",
]

_SOURCES = {
    "measured": "interface_displacement",
    "numerical": "numerical_displacement",
    "reference": "reference_interface_displacement",
}


def _done(ds):
    return ds["done"].astype(bool)


def frf(ds, source: str = "measured", harmonic: int = 1):
    """``H = U_k / F_k`` over (frequency, dof), complex [m/N | rad/N]; NaN where the slot is not
    done or the external force has no component at harmonic k (``|F_k| <= 1e-12 max|F|``)."""
    import xarray as xr

    if source not in _SOURCES:
        raise ValueError(f"source must be one of {', '.join(_SOURCES)}, got {source!r}")
    var = _SOURCES[source]
    if var not in ds:
        raise KeyError(f"the store has no {var} (source {source!r})")
    if int(harmonic) not in set(int(k) for k in ds["harmonic"].values):
        raise KeyError(f"harmonic {harmonic} was not solved (orders {ds['harmonic'].values.tolist()})")
    U = ds[var].sel(harmonic=harmonic)
    F = ds["external_force"]
    Fk = F.sel(harmonic=harmonic)
    scale = np.nanmax(np.abs(F.values)) if np.any(np.isfinite(F.values)) else 0.0
    meaningful = np.abs(Fk) > 1e-12 * scale
    with np.errstate(divide="ignore", invalid="ignore"):
        H = (U / Fk).where(meaningful & _done(ds))
    H = H.drop_vars("harmonic", errors="ignore")
    H.name = f"frf_{source}"
    H.attrs = {"units": "m/N | rad/N", "dof_units": ["m/N", "rad/N"], "long_name": f"{source} interface displacement per unit external force, harmonic {harmonic}"}
    return xr.DataArray(H)


def frf_dataset(ds):
    """All FRFs per harmonic: ``H_measured``, ``H_numerical`` and (when present)
    ``H_reference`` and ``relative_error`` over (frequency, dof, harmonic), with ``converged``
    and ``done``. Harmonics without external force are NaN."""
    import xarray as xr

    out = {}
    sources = [s for s, v in _SOURCES.items() if v in ds]
    for s in sources:
        out[f"H_{s}"] = xr.concat([frf(ds, s, int(k)) for k in ds["harmonic"].values], dim=ds["harmonic"])
        out[f"H_{s}"].attrs = {"units": "m/N | rad/N", "dof_units": ["m/N", "rad/N"]}
    if "H_reference" in out:
        with np.errstate(divide="ignore", invalid="ignore"):
            out["relative_error"] = abs(out["H_measured"] - out["H_reference"]) / abs(out["H_reference"])
        out["relative_error"].attrs = {"units": "1"}
    res = xr.Dataset(out)
    res["converged"] = ds["converged"]
    res["done"] = ds["done"]
    return res


#: frequencies of the dense exact curve across a store's band (the Bode plot's reference line)
DENSE_POINTS = 600


def exact_frf(ds, frequencies_hz):
    """The twin's exact hybrid FRF ``U_1 / F_1`` (n, 2 dofs: u, theta) [m/N, rad/N] at any
    frequencies, from the store's verbatim sweep and rig texts and its seed: the closed form of
    the numerical side joined to the twin's emulated physical side, as the sweep stores it at its
    points (``reference_interface_displacement``). None where there is no such closed form: a
    store not of a virtual rig, a nonlinear side (its curve has folds: the stored points are the
    reference), a stepped-force family, or a store without its texts."""
    from ..config import load_rig, load_sweep
    from ..errors import UserError
    from ..rig import open_rig
    from ..rig.capabilities import ExactReference, KnownPhysicalSide

    a = ds.attrs
    legs = np.unique(ds["leg"].values) if "leg" in ds.coords else np.zeros(1)
    if legs.size > 1 or not (a.get("sweep_text") and a.get("rig_text")):
        return None
    try:
        cfg = load_sweep(a["sweep_path"], a.get("overrides") or (), text=a["sweep_text"])
        rig_cfg = load_rig(a["rig_path"], a.get("rig_overrides") or (), text=a["rig_text"])
    except UserError:  # provenance text the current readers cannot read
        return None
    if rig_cfg.kind != "virtual" or not cfg.numerical.is_linear:
        return None
    rig = open_rig(rig_cfg, seed=int(a.get("seed", 0)))
    try:
        if not (isinstance(rig, ExactReference) and isinstance(rig, KnownPhysicalSide) and rig.ps_is_linear):
            return None
        ns = cfg.numerical.substructure()
        F = cfg.excitation.force_vector(ns)
        U = np.array([rig.emulated_interface_response(ns, F, float(f), [1])[:, 0] for f in np.atleast_1d(frequencies_hz)])
    finally:
        rig.close()
    return U / cfg.excitation.amplitude


def dense_exact_frf(ds, points: int = DENSE_POINTS):
    """``(frequencies, H)`` of :func:`exact_frf` on ``points`` frequencies evenly over the
    store's finished band, or None (see :func:`exact_frf`): its peak lies between grid points."""
    f = np.asarray(ds["frequency"].values, dtype=float)[np.asarray(ds["done"].values, dtype=bool)]
    f = f[np.isfinite(f)]
    if f.size < 2:
        return None
    grid = np.linspace(f.min(), f.max(), int(points))
    H = exact_frf(ds, grid)
    return None if H is None else (grid, H)


def relative_error(ds, harmonic: int = 1):
    """``|H_measured - H_reference| / |H_reference|`` over (frequency, dof); NaN where not done."""
    Hm = frf(ds, "measured", harmonic)
    Hr = frf(ds, "reference", harmonic)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = abs(Hm - Hr) / abs(Hr)
    e.name = "relative_error"
    e.attrs = {"units": "1", "long_name": f"relative error of the measured FRF against the reference, harmonic {harmonic}"}
    return e


# ---------------------------------------------------------------------------------------
# resonance


@dataclass(frozen=True)
class ResonanceEstimate:
    """A fitted resonance. ``frequency_hz`` is the undamped natural frequency ``|lambda|/2pi``
    of the fitted pole; ``peak_frequency_hz`` the grid point of largest ``|H|``; ``band_hz``
    the fitted band; ``misfit`` the relative rms misfit of the model on the fitted points."""

    frequency_hz: float
    damping_ratio: float
    peak_frequency_hz: float
    n_points: int
    band_hz: tuple[float, float]
    misfit: float
    at_edge: bool

    def to_dict(self) -> dict:
        return asdict(self)


def _sk_fit(s: np.ndarray, H: np.ndarray, iterations: int = 20, weights=None):
    """Sanathanan–Koerner fit of (b0 + b1 s + b2 s^2)/(a0 + a1 s + s^2); returns (a, b).
    ``weights``: per-sample weights of the complex misfit (e.g. 1 / standard uncertainty)."""
    extra = np.ones(s.size) if weights is None else np.asarray(weights, dtype=float)
    w = extra.copy()
    a = b = None
    for _ in range(iterations):
        A = np.stack([np.ones_like(s), s, s * s, -H, -H * s], axis=1) * w[:, None]
        rhs = H * s * s * w
        Ar = np.concatenate([A.real, A.imag])
        rr = np.concatenate([rhs.real, rhs.imag])
        # column scaling for conditioning
        cs = np.linalg.norm(Ar, axis=0)
        cs[cs == 0] = 1.0
        x, *_ = np.linalg.lstsq(Ar / cs, rr, rcond=None)
        x = x / cs
        b_new, a_new = x[:3], x[3:]
        if a is not None and np.allclose(a_new, a, rtol=1e-12, atol=1e-14):
            a, b = a_new, b_new
            break
        a, b = a_new, b_new
        den = a[0] + a[1] * s + s * s
        w = extra / np.maximum(np.abs(den), 1e-300)
    return a, b


def _peak_band(mag: np.ndarray, p: int, threshold: float, min_points: int, lo_limit: int = 0, hi_limit: int | None = None) -> tuple[int, int]:
    """The contiguous run of samples (sorted by frequency) around the peak ``p`` with
    ``mag >= threshold * mag[p]``, widened to ``min_points``, inside [lo_limit, hi_limit]."""
    hi_limit = mag.size - 1 if hi_limit is None else hi_limit
    lo = hi = p
    while lo > lo_limit and mag[lo - 1] >= threshold * mag[p]:
        lo -= 1
    while hi < hi_limit and mag[hi + 1] >= threshold * mag[p]:
        hi += 1
    while hi - lo + 1 < min(min_points, hi_limit - lo_limit + 1):
        left = mag[lo - 1] if lo > lo_limit else -np.inf
        right = mag[hi + 1] if hi < hi_limit else -np.inf
        if left >= right:
            lo -= 1
        else:
            hi += 1
    return lo, hi


def _pole_fit(fs: np.ndarray, Hs: np.ndarray, f0: float, weights=None):
    """SK fit of one pole pair plus remainder on the samples; returns (pole lambda [rad/s],
    a, b) of the model in the normalised variable ``s = i f / f0``."""
    if np.unique(fs).size < 3:
        raise ValueError("a resonance fit needs at least 3 distinct frequencies near the peak")
    a, b = _sk_fit(1j * fs / f0, Hs, weights=weights)
    roots = np.roots([1.0, a[1], a[0]])
    cand = roots[np.imag(roots) > 0]
    if cand.size == 0:
        raise ValueError("the fitted model has no oscillatory pole pair: no resonance in these points")
    return complex(cand[0] * 2 * np.pi * f0), a, b


def fit_resonance(frequency_hz, H, *, threshold: float = 0.25, min_points: int = 5) -> ResonanceEstimate:
    """Natural frequency and damping ratio of the dominant peak of the complex FRF samples
    ``H`` at ``frequency_hz`` (any order, repeats allowed; NaNs ignored). See the module
    docstring for the method."""
    f = np.asarray(frequency_hz, dtype=float).ravel()
    H = np.asarray(H, dtype=complex).ravel()
    if f.shape != H.shape:
        raise ValueError("frequency_hz and H must have the same length")
    ok = np.isfinite(f) & np.isfinite(H)
    f, H = f[ok], H[ok]
    if f.size < 3:
        raise ValueError(f"a resonance fit needs at least 3 valid points, got {f.size}")
    order = np.argsort(f, kind="stable")
    f, H = f[order], H[order]
    mag = np.abs(H)
    p = int(np.argmax(mag))
    lo, hi = _peak_band(mag, p, threshold, min_points)
    fs, Hs = f[lo : hi + 1], H[lo : hi + 1]
    f0 = f[p]
    lam, a, b = _pole_fit(fs, Hs, f0)
    s = 1j * fs / f0
    model = (b[0] + b[1] * s + b[2] * s * s) / (a[0] + a[1] * s + s * s)
    misfit = float(np.linalg.norm(model - Hs) / np.linalg.norm(Hs))
    return ResonanceEstimate(
        frequency_hz=float(abs(lam) / (2 * np.pi)),
        damping_ratio=float(-lam.real / abs(lam)),
        peak_frequency_hz=float(f0),
        n_points=int(fs.size),
        band_hz=(float(fs[0]), float(fs[-1])),
        misfit=misfit,
        at_edge=bool(p == 0 or p == f.size - 1),
    )


def _points_for(ds, converged_only: bool) -> np.ndarray:
    sel = np.asarray(ds["done"].values, dtype=bool)
    if converged_only:
        sel &= np.asarray(ds["converged"].values, dtype=bool)
    return sel


def resonance(ds, source: str = "measured", dof: str = "u", harmonic: int = 1, *, converged_only: bool = True, points=None, **kw) -> ResonanceEstimate:
    """:func:`fit_resonance` of the FRF of ``source`` and ``dof`` of a run (by default on its
    done and converged points; ``points`` = a boolean mask over the slots overrides)."""
    H = frf(ds, source, harmonic).sel(dof=dof).values
    sel = _points_for(ds, converged_only) if points is None else np.asarray(points, dtype=bool)
    return fit_resonance(ds["frequency"].values[sel], H[sel], **kw)


def compare_resonance(ds, dof: str = "u", harmonic: int = 1, **kw) -> dict:
    """Resonance estimates from the measured and the reference FRF on the *same* points (done,
    converged, both finite), and their relative difference in natural frequency and damping."""
    Hm = frf(ds, "measured", harmonic).sel(dof=dof).values
    Hr = frf(ds, "reference", harmonic).sel(dof=dof).values
    sel = _points_for(ds, True) & np.isfinite(Hm) & np.isfinite(Hr)
    f = ds["frequency"].values[sel]
    m = fit_resonance(f, Hm[sel], **kw)
    r = fit_resonance(f, Hr[sel], **kw)
    return {
        "measured": m,
        "reference": r,
        "frequency_relative_difference": (m.frequency_hz - r.frequency_hz) / r.frequency_hz,
        "damping_relative_difference": (m.damping_ratio - r.damping_ratio) / r.damping_ratio,
    }


# ---------------------------------------------------------------------------------------
# synchronisation


@dataclass(frozen=True)
class SyncRow:
    """Synchronisation of one PS interface variable against its NS demand at one harmonic:
    ``delay_ms = -arg(U_P/U_N) / (2 pi k f)`` (positive: the PS lags), and
    ``amplification_pct = (|U_P|/|U_N| - 1) * 100``."""

    dof: str
    harmonic: int
    frequency_hz: float
    ps_amplitude: float
    ns_amplitude: float
    delay_ms: float
    amplification_pct: float


def sync_metrics(U_P, U_N, frequency_hz: float, harmonic: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(delay [s], relative amplification [1]) of ``U_P`` against ``U_N`` (complex
    coefficients, broadcast) at harmonic ``harmonic`` of ``frequency_hz``. The phase is taken
    in (-pi, pi], so delays are unambiguous up to half a period of that harmonic
    (:func:`hbtest.method.ps_ns_sync.sync_ratio_phase`, as the store's sync metrics)."""
    if harmonic <= 0:
        raise ValueError("delays are defined for harmonic orders k >= 1")
    ratio, phase_deg = sync_ratio_phase(U_P, U_N)  # the stored sync metrics' own (NaN where U_N is 0)
    return -np.radians(phase_deg) / (2 * np.pi * harmonic * frequency_hz), ratio - 1.0


def sync_table(ds, index: int, harmonics=None) -> list[SyncRow]:
    """Synchronisation rows (u, theta per harmonic, k >= 1) of the point in slot ``index``."""
    pt = ds.isel(frequency=int(index))
    if not bool(pt["done"].values):
        raise ValueError(f"slot {index} holds no finished point")
    f = float(pt["frequency"].values)
    orders = [int(k) for k in ds["harmonic"].values]
    wanted = [k for k in (orders if harmonics is None else harmonics) if k >= 1]
    rows = []
    for k in wanted:
        if k not in orders:
            raise KeyError(f"harmonic {k} was not solved (orders {orders})")
        for dof in ds["dof"].values:
            up = complex(pt["interface_displacement"].sel(dof=dof, harmonic=k).values)
            un = complex(pt["numerical_displacement"].sel(dof=dof, harmonic=k).values)
            d, a = sync_metrics(up, un, f, k)
            rows.append(SyncRow(str(dof), k, f, abs(up), abs(un), float(d) * 1e3, float(a) * 100))
    return rows


def format_sync_table(rows: list[SyncRow]) -> str:
    """A fixed-width text table of :func:`sync_table` rows."""
    units = {"u": "m", "theta": "rad"}
    lines = [f"{'f [Hz]':>9} {'k':>2} {'dof':>5} {'|U_P|':>11} {'|U_N|':>11} {'unit':>4} {'delay [ms]':>11} {'ampl. [%]':>10}"]
    for r in rows:
        lines.append(
            f"{r.frequency_hz:>9.4f} {r.harmonic:>2d} {r.dof:>5} {r.ps_amplitude:>11.4e} {r.ns_amplitude:>11.4e} "
            f"{units.get(r.dof, ''):>4} {r.delay_ms:>11.4f} {r.amplification_pct:>10.4f}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------
# harmonic content


def harmonic_energy(ds, source: str = "measured"):
    """Power shares of the interface displacement over (frequency, dof):
    ``higher_solved`` — power in solved harmonics other than k = 1 over the power of all
    solved harmonics (power: ``a0^2`` for DC, ``|X_k|^2/2`` otherwise); ``excluded`` — the
    rig's estimate of the power in harmonics *not* solved for (``excluded_energy_fraction``,
    NaN when the rig did not measure it)."""
    import xarray as xr

    U = ds[_SOURCES[source]]
    k = ds["harmonic"]
    w = xr.where(k == 0, 1.0, 0.5)
    P = (abs(U) ** 2 * w).where(_done(ds))
    total = P.sum("harmonic", skipna=False)
    higher = P.where(k != 1).sum("harmonic")
    with np.errstate(divide="ignore", invalid="ignore"):
        share = higher / total
    out = xr.Dataset({"higher_solved": share})
    out["higher_solved"].attrs = {"units": "1", "long_name": "power share of solved harmonics other than the fundamental"}
    if "excluded_energy_fraction" in ds:
        out["excluded"] = ds["excluded_energy_fraction"].where(_done(ds))
    return out


# ---------------------------------------------------------------------------------------
# uncertainty


def _hybrid_models(ds):
    """(numerical substructure, PS substructure or None, PS model description, external force
    vector, rotation length [m] of the weighted norms) rebuilt from the store's verbatim sweep
    and rig texts."""
    from ..config import load_rig, load_sweep
    from ..errors import UserError
    from ..method.substructure import Substructure

    a = dict(ds.attrs)
    if not a.get("sweep_text") or not a.get("sweep_path"):
        raise UserError("the store has no verbatim sweep text (sweep_text): not written by 'hbtest sweep', no uncertainty can be computed")
    cfg = load_sweep(a["sweep_path"], a.get("overrides") or (), text=a["sweep_text"])
    ns = cfg.numerical.substructure()
    ps_beam, where = cfg.design_ps, "sweep [design.physical]"
    if ps_beam is None and a.get("rig_text") and a.get("rig_path"):
        try:
            rig = load_rig(a["rig_path"], a.get("rig_overrides") or (), text=a["rig_text"])
        except UserError:  # provenance text the current rig kinds cannot read: use the data
            rig = None
        if rig is not None:
            ps_beam, where = rig.physical, "rig file [physical]"
    ps = None
    if ps_beam is not None:
        pb = ps_beam.build(left="free", right="free", x_offset=cfg.numerical.beam.length)
        ps = Substructure(pb, ("u0", "theta0"))
    return ns, ps, (where if ps is not None else "rank-1"), cfg.excitation.force_vector(ns), cfg.test.rotation_length


def _stated_size(ds, var: np.ndarray, harmonic: int, rotation_length: float) -> np.ndarray:
    """The noise variance ``var`` of U* (points x [u, theta]) brought to the size each point
    states (``displacement_uncertainty``: the weighted norm ``|(u, l theta)|`` of the hbtest
    profile's solution, "Stated size" in the module docstring), the split between the DOFs as
    propagated. Points that state none (NaN: the published profile, old stores) or balanced
    other harmonics too (the statement covers all of them) keep the propagation."""
    if "displacement_uncertainty" not in ds:
        return var
    stated = np.asarray(ds["displacement_uncertainty"].values, dtype=float)
    harmonics = [int(h) for h in ds["harmonic"].values]
    if harmonics == [harmonic]:
        alone = np.ones(stated.shape, bool)
    elif "harmonic_active" in ds:
        active = np.asarray(ds["harmonic_active"].values, dtype=bool)
        alone = (active.sum(axis=1) == 1) & active[:, harmonics.index(harmonic)]
    else:  # every harmonic balanced at every point
        alone = np.zeros(stated.shape, bool)
    propagated = var[:, 0] + rotation_length**2 * var[:, 1]
    with np.errstate(invalid="ignore"):
        ok = alone & np.isfinite(stated) & (stated > 0) & np.isfinite(propagated) & (propagated > 0)
    out = var.copy()
    out[ok] *= (stated[ok] ** 2 / propagated[ok])[:, None]
    return out


def _force_method(ds) -> str:
    """The sweep's force reconstruction (from the verbatim sweep text)."""
    from ..config import load_sweep

    a = dict(ds.attrs)
    return load_sweep(a["sweep_path"], a.get("overrides") or (), text=a["sweep_text"]).test.force_reconstruction


def _calibration_error(ds, record, harmonic, ok, f, Up, Fp):
    """Per point and calibrated value: the interface change ``(dU, dF)`` (n, q, 4) that one
    standard uncertainty of the value makes (:mod:`hbtest.calibration.uncertainty`); q = 0
    without a record."""
    from ..calibration.uncertainty import calibration_perturbations
    from ..method.sensors import SensorLayout

    if record is None:
        return np.zeros((f.size, 0, 4), dtype=complex)
    layout = SensorLayout.from_dict(ds.attrs["sensor_layout"])
    method = _force_method(ds)
    rows = [None] * f.size
    q = 0
    for i in np.flatnonzero(ok):
        rows[i] = calibration_perturbations(layout, record, f[i], harmonic, method, Up[i], Fp[i])
        q = rows[i].shape[0]
    out = np.zeros((f.size, q, 4), dtype=complex)
    for i in np.flatnonzero(ok):
        out[i] = rows[i]
    return out


def _hybrid_sensitivity(ns, ps, force_vector, DN, s, ok, Up, Fk) -> np.ndarray:
    """G = (D_N + D_P)^-1 per slot (NaN where not ``ok``): from the PS model, or without one
    the rank-one estimate ``U_P U_P^T / (F_c . U_P)`` from the measured state."""
    G = np.full(DN.shape, np.nan, dtype=complex)
    if ps is not None:
        G[ok] = np.linalg.inv(DN[ok] + ps.dynamic_stiffness(s[ok]))
    else:
        for i in np.flatnonzero(ok):
            Fc = ns.condensed_force(force_vector, s[i]) * (Fk[i] / force_vector[np.flatnonzero(force_vector)[0]])
            G[i] = np.outer(Up[i], Up[i]) / (Fc @ Up[i])
    return G


def _masked_like(H, ok):
    """A maker of DataArrays over ``H``'s dims and coordinates, NaN where not ``ok``."""
    import xarray as xr

    dims = H.dims
    coords = {c: H.coords[c] for c in H.coords}

    def da(x, units, long_name):
        x = np.where(ok[:, None], x, np.nan)
        return xr.DataArray(x, dims=dims, coords=coords, attrs={"units": units, "long_name": long_name})

    return da


def _frf_uncertainty_parts(Hv, G, DN, Up, Un, Fk, var, dH_cal):
    """(u_H, u_H_noise, u_H_calibration, residual_error, u_magnitude, u_phase) of every slot
    from the noise variance ``var`` of U*, the calibration errors ``dH_cal`` of U* and the
    residual (module docstring, "FRF uncertainty")."""
    var_cal = np.sum(np.abs(dH_cal) ** 2, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        absF = np.abs(Fk)[:, None]
        u_cal = np.sqrt(var_cal) / absF
        u_noise = np.sqrt(var) / absF
        u_meas = np.sqrt(u_noise**2 + u_cal**2)
        b = np.einsum("nij,njk,nk->ni", G, DN, Up - Un) / Fk[:, None]
        h = Hv / np.abs(Hv)
        inphase = (np.conj(h) * b).real
        quad = (np.conj(h) * b).imag
        # calibration errors are systematic and not circular: split each into in-phase and
        # quadrature parts of H
        cal_in = np.sqrt(np.sum(((np.conj(h)[:, None, :] * dH_cal).real) ** 2, axis=1)) / absF
        cal_q = np.sqrt(np.sum(((np.conj(h)[:, None, :] * dH_cal).imag) ** 2, axis=1)) / absF
        u_H = np.sqrt(u_meas**2 + np.abs(b) ** 2)
        u_mag = np.sqrt(u_noise**2 / 2 + cal_in**2 + inphase**2)
        u_ph = np.sqrt(u_noise**2 / 2 + cal_q**2 + quad**2) / np.abs(Hv)
    return u_H, u_noise, u_cal, b, u_mag, u_ph


def frf_uncertainty(ds, harmonic: int = 1, calibration=None):
    """Standard uncertainty of the measured FRF ``H = U_P / F_k`` at every point (see
    "FRF uncertainty" in the module docstring for the equations). Returns an
    :class:`xarray.Dataset` over (frequency, dof), NaN where the slot is not done or not
    forced at harmonic k:

    - ``H`` — the measured FRF [m/N | rad/N] (as :func:`frf`);
    - ``u_H`` — standard uncertainty of the complex FRF, ``sqrt(E|dH|^2)``;
    - ``u_H_noise`` — its part from the measured noise;
    - ``u_H_calibration`` — its part from the calibration record's standard uncertainties
      (0 when the store's reduction used the nominal sensors; "Calibration uncertainty" in the
      module docstring);
    - ``residual_error`` — the interface error the final residual implies, ``G D_N R / F_k``
      (complex);
    - ``u_magnitude`` — standard uncertainty of ``|H|`` [m/N | rad/N];
    - ``u_phase`` — standard uncertainty of ``arg H`` [rad].

    ``calibration``: the :class:`hbtest.calibration.CalibrationRecord` (or its JSON path) the
    store's reduction used; by default found from the store
    (:func:`store_calibration_record`).

    The ``model`` attribute names the PS model behind the sensitivities; ``calibration`` the
    record's identification ("" without one)."""
    import xarray as xr

    H = frf(ds, "measured", harmonic)
    ns, ps, where, force_vector, rotation_length = _hybrid_models(ds)
    f = np.asarray(ds["frequency"].values, dtype=float)
    s = 2j * np.pi * harmonic * f
    DN = ns.dynamic_stiffness(s)
    k = {"harmonic": harmonic}
    Up = np.asarray(ds["interface_displacement"].sel(**k).values, dtype=complex)
    Un = np.asarray(ds["numerical_displacement"].sel(**k).values, dtype=complex)
    vU = np.asarray(ds["interface_displacement_variance"].sel(**k).values, dtype=float)
    vF = np.asarray(ds["interface_force_variance"].sel(**k).values, dtype=float)
    Fk = np.asarray(ds["external_force"].sel(**k).values, dtype=complex)
    ok = np.isfinite(H.values).all(axis=1)
    G = _hybrid_sensitivity(ns, ps, force_vector, DN, s, ok, Up, Fk)
    A = np.eye(2) - G @ DN
    var = np.einsum("nij,nj->ni", np.abs(A) ** 2, vU) + np.einsum("nij,nj->ni", np.abs(G) ** 2, vF)
    var = _stated_size(ds, var, harmonic, rotation_length)
    record = _resolve_calibration(ds, calibration)
    Fp = np.asarray(ds["interface_force"].sel(**k).values, dtype=complex)
    dUF = _calibration_error(ds, record, harmonic, ok, f, Up, Fp)
    # each calibrated value moves U_P and F_P together: dU_P - dU* = A dU - G dF
    dH_cal = np.einsum("nij,nqj->nqi", A, dUF[..., :2]) - np.einsum("nij,nqj->nqi", G, dUF[..., 2:])
    u_H, u_noise, u_cal, b, u_mag, u_ph = _frf_uncertainty_parts(H.values, G, DN, Up, Un, Fk, var, dH_cal)
    da = _masked_like(H, ok)
    out = xr.Dataset({
        "H": H,
        "u_H": da(u_H, "m/N | rad/N", "standard uncertainty of the complex FRF, sqrt(E|dH|^2)"),
        "u_H_noise": da(u_noise, "m/N | rad/N", "part of u_H from the measured noise"),
        "u_H_calibration": da(u_cal, "m/N | rad/N", "part of u_H from the calibration record's standard uncertainties"),
        "residual_error": da(b, "m/N | rad/N", "FRF error implied by the final residual, G D_N R / F"),
        "u_magnitude": da(u_mag, "m/N | rad/N", "standard uncertainty of |H|"),
        "u_phase": da(u_ph, "rad", "standard uncertainty of arg H"),
    })
    out.attrs = {"harmonic": int(harmonic), "model": where, "calibration": record.identification if record is not None else ""}
    return out


def _resolve_calibration(ds, calibration):
    from ..calibration import CalibrationRecord, load_calibration

    if calibration is None:
        return store_calibration_record(ds)
    return calibration if isinstance(calibration, CalibrationRecord) else load_calibration(calibration)


def uncertainty_coverage(ds, factor: float = 2.0, harmonic: int = 1, dof: str | None = None) -> dict:
    """How often ``factor`` standard uncertainties cover the true error of the measured FRF
    against the stored exact reference (virtual rigs), over the done and converged points
    (and DOFs, or one ``dof``): ``complex`` — share of ``|H - H_ref| <= factor u_H``;
    ``magnitude`` — share of ``||H| - |H_ref|| <= factor u_|H|``; ``n`` — points counted;
    ``rms_normalised_error`` — ``sqrt(mean(|H - H_ref|^2 / u_H^2))`` (1 when the
    uncertainty is right on average)."""
    u = frf_uncertainty(ds, harmonic)
    Hr = frf(ds, "reference", harmonic)
    sel = _points_for(ds, True)
    H, uH, um, Hr = u["H"].values[sel], u["u_H"].values[sel], u["u_magnitude"].values[sel], Hr.values[sel]
    if dof is not None:
        j = [str(d) for d in ds["dof"].values].index(dof)
        H, uH, um, Hr = H[:, j], uH[:, j], um[:, j], Hr[:, j]
    ok = np.isfinite(H) & np.isfinite(Hr) & np.isfinite(uH)
    e = np.abs(H - Hr)[ok]
    em = np.abs(np.abs(H) - np.abs(Hr))[ok]
    n = int(ok.sum())
    if n == 0:
        raise ValueError("no converged point with both a measured and a reference FRF")
    return {
        "n": n,
        "complex": float(np.mean(e <= factor * uH[ok])),
        "magnitude": float(np.mean(em <= factor * um[ok])),
        "rms_normalised_error": float(np.sqrt(np.mean((e / uH[ok]) ** 2))),
        "factor": float(factor),
    }


def store_calibration_record(ds):
    """The calibration record behind a run store's reduction, or None when it used the rig
    file's nominal sensors (``sensor_layout`` without a ``calibration``). Looked up in the
    store's ``calibration_record`` attribute (re-reduced stores), else through the rig file's
    ``[sensors] calibration`` key (the verbatim rig text and overrides, the path relative to
    the rig file). The record must be the one the store names (its identification), else
    :class:`UserError`."""
    import json
    from pathlib import Path

    from ..calibration import CalibrationRecord, load_calibration
    from ..config import load_toml
    from ..errors import UserError
    from ..method.sensors import SensorLayout

    a = dict(ds.attrs)
    if not a.get("sensor_layout"):
        return None
    ident = SensorLayout.from_dict(a["sensor_layout"]).calibration
    if not ident:
        return None
    if a.get("calibration_record"):
        rec = CalibrationRecord.from_dict(json.loads(a["calibration_record"]), "store attribute calibration_record")
    else:
        if not a.get("rig_text") or not a.get("rig_path"):
            raise UserError(f"the store was reduced with calibration {ident!r} but keeps neither the record nor the rig file text: pass the record")
        doc, _ = load_toml(a["rig_path"], a.get("rig_overrides") or (), text=a["rig_text"])
        rel = (doc.get("sensors") or {}).get("calibration")
        if not isinstance(rel, str):
            raise UserError(f"the store was reduced with calibration {ident!r} but its rig file names no [sensors] calibration: pass the record")
        p = Path(rel).expanduser()
        rec = load_calibration(p if p.is_absolute() else Path(a["rig_path"]).resolve().parent / p)
    if rec.identification != ident:
        raise UserError(f"calibration record {rec.identification!r} is not the one the store was reduced with ({ident!r}): pass the record")
    return rec

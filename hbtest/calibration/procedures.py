"""Calibration procedures run through the :class:`hbtest.rig.Rig` protocol only (so they run on
the twin, a box or an SCPI rig alike). Each returns a :class:`ProcedureResult` (values and
standard uncertainties in the units of :mod:`.record`).

``mains`` — :func:`calibrate_mains`: zero demand, one long record; the mains frequency [Hz] is
the frequency whose multiples ``1..mains_multiples`` (sine, cosine, per channel, plus a DC
term) best fit the channels (a grid search at a quarter of the record's resolution, then a
bounded scalar refinement). Standard uncertainty: the Gauss–Newton covariance
``s^2 (J^T J)^-1`` of the full nonlinear least-squares problem (s^2 the residual variance).

``channels`` — :func:`calibrate_channels`: gain and lag of every channel relative to a
reference channel (the first laser), from the physical substructure's own model (the rig
file's ``[physical]`` Euler–Bernoulli beam, clamped to the rigid clamp at x = 0, free tip,
damping ``EI (1 + zeta_K s)``, ``rhoA (s^2 + zeta_M s)`` as in :mod:`hbtest.method.sensors`): at each
frequency the rig is driven by each actuator alone (two or more independent clamp motions),
and every channel's nominal, lag-corrected coefficient ``m_j`` must satisfy
``beta_j m_j = P_j (u, theta)`` with ``P_j = [1, p_j]`` for a laser at lever ``p_j`` and
``P_j = [S_j(u), S_j(theta)]`` for a gauge (the strain the beam model gives at the gauge per
unit clamp motion) and ``beta_ref = 1``. The clamp motions and the complex ``beta_j`` are
solved by linear least squares per (frequency, repeat); ``|beta_j|`` corrects the channel's
scale (calibrated ``scale_per_v = |beta_j| x nominal``) and ``arg beta_j = omega dtau_j`` its
lag (calibrated ``skew = nominal + dtau_j``; a filter cut-off error is absorbed as an
equivalent skew at the calibration frequencies). Standard uncertainties: the scatter of the
per-(frequency, repeat) estimates (gain: standard error of the mean; skew: of the slope of
``arg beta`` against ``omega`` through the origin), so a frequency-dependent gain shows up as
uncertainty, not as a bias hidden in a mean.

Identifiable and not: the reference laser's absolute scale is NOT identifiable from the rig's
own motion (every displacement and, through the model, every strain would scale with it): it
needs a known displacement (a gauge block or micrometer moving the laser's target by a known
amount: ``scale = known displacement / change of the mean reading``); the Rig protocol cannot
move a target, so the twin does not emulate it and ``hbtest calibrate`` does not offer it (a
lab enters that value by editing the record's ``values.channels.<ref>.scale_per_v``). A gauge
position error is absorbed in the gauge's gain at its nominal position. The gauge values are
only as good as the ``[physical]`` beam model: use frequencies away from the PS modes (well
below the first, or between modes where the response is not sensitive to the modal
parameters).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.optimize

from ..errors import UserError
from ..method import harmonics

__all__ = [
    "ProcedureResult",
    "MainsSettings",
    "ChannelSettings",
    "calibrate_mains",
    "mains_from_record",
    "acquire_zero",
    "probed_level",
    "calibrate_channels",
    "beam_strain_per_motion",
    "PROCEDURES",
]

PROCEDURES = ("mains", "channels")
#: tolerance [Hz] of the bounded refinement of the mains frequency
MAINS_XATOL_HZ = 1e-9
#: smallest channel peak [V] the probe scaling divides by (a dead channel does not blow it up)
MIN_PROBE_PEAK_V = 1e-12


@dataclass(frozen=True)
class ProcedureResult:
    """values / standard_uncertainty in the units of :mod:`.record`; details free-form."""

    procedure: str
    values: dict
    standard_uncertainty: dict
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class MainsSettings:
    """record_s [s] of zero demand after settle_s [s]; the demand's nominal frequency
    demand_hz (the generator needs one; its amplitude is zero); search_hz: the grid search spans
    nominal +/- search_hz; grid_oversampling: grid steps per record resolution 1/record_s."""

    record_s: float = 10.0
    settle_s: float = 5.0
    demand_hz: float = 1.0
    search_hz: float = 1.0
    grid_oversampling: int = 4


@dataclass(frozen=True)
class ChannelSettings:
    """frequencies_hz: drive frequencies; n_periods per acquisition, repeats acquisitions per
    (frequency, actuator); settle_s [s] after each demand change; probe_v [V]: the probing
    demand, scaled so the largest channel reaches target_fraction of the input range, capped at
    voltage_fraction of the rig's voltage limit."""

    frequencies_hz: tuple = (2.0, 3.0, 14.0, 18.0)
    n_periods: int = 20
    repeats: int = 4
    settle_s: float = 30.0
    probe_v: float = 0.2
    target_fraction: float = 0.3
    voltage_fraction: float = 0.8


def acquire_zero(rig, n_act: int, s: MainsSettings):
    """A zero-demand record of ``s.record_s`` [s] after ``s.settle_s`` [s] (demand at ``s.demand_hz``)."""
    rig.set_demand(s.demand_hz, np.zeros((n_act, 1), complex), [1])
    rig.wait(s.settle_s * s.demand_hz)
    return rig.acquire(max(1, int(round(s.record_s * s.demand_hz))))


def _mains_design(t, f, multiples):
    cols = [np.ones_like(t)]
    for m in range(1, multiples + 1):
        w = 2 * np.pi * m * f * t
        cols += [np.cos(w), np.sin(w)]
    return np.stack(cols, axis=1)


def calibrate_mains(rig, layout=None, settings: MainsSettings = MainsSettings(), channels=None) -> ProcedureResult:
    """Mains frequency [Hz] from a zero-demand record (see module docstring). ``channels``:
    the channel names to fit (default: the gauges, where mains is picked up)."""
    desc = rig.describe()
    layout = layout or desc.sensors
    return mains_from_record(acquire_zero(rig, len(desc.actuators), settings), layout, settings, channels)


def mains_from_record(acq, layout, settings: MainsSettings = MainsSettings(), channels=None) -> ProcedureResult:
    """The fit of :func:`calibrate_mains` on a zero-demand record ``acq`` already taken."""
    names = tuple(channels) if channels else tuple(c.name for c in layout.gauges)
    M = max(1, layout.mains_multiples)
    t = np.asarray(acq.t, float) - float(acq.t[0])
    Y = np.stack([np.asarray(acq.data[n], float) * layout.channel(n).scale for n in names])  # (n_ch, N)
    Y = Y / np.std(Y, axis=1, keepdims=True)  # each channel weighted by its own level

    def rss(f):
        X = _mains_design(t, f, M)
        coef, *_ = np.linalg.lstsq(X, Y.T, rcond=None)
        return float(np.sum((Y.T - X @ coef) ** 2))

    T = t[-1] + 1.0 / acq.sample_rate_hz
    f0 = layout.mains_hz
    step = 1.0 / (settings.grid_oversampling * T)
    grid = np.arange(f0 - settings.search_hz, f0 + settings.search_hz + step / 2, step)
    grid = grid[grid > 0]
    best = grid[int(np.argmin([rss(f) for f in grid]))]
    res = scipy.optimize.minimize_scalar(rss, bounds=(best - step, best + step), method="bounded", options={"xatol": MAINS_XATOL_HZ})
    f = float(res.x)
    sigma, amp, s2 = _mains_covariance(t, Y, f, M)
    return ProcedureResult(
        "mains", {"mains_hz": f}, {"mains_hz": sigma},
        {"mains": {"channels": list(names), "record_s": float(T), "nominal_hz": f0, "multiples": M,
                   "fundamental_to_residual_rms": [a / np.sqrt(s2) for a in amp]}},
    )


def _mains_covariance(t, Y, f: float, M: int) -> tuple[float, list, float]:
    """Gauss-Newton standard uncertainty of the mains frequency ``f`` fitted to ``Y`` (with the
    per-channel linear coefficients), the fundamental's amplitude per channel, the residual variance."""
    X = _mains_design(t, f, M)
    coef, *_ = np.linalg.lstsq(X, Y.T, rcond=None)  # (2M+1, n_ch)
    n_ch, N = Y.shape
    p = X.shape[1]
    dX = np.zeros_like(X)
    for m in range(1, M + 1):
        w = 2 * np.pi * m * f * t
        dX[:, 2 * m - 1] = -2 * np.pi * m * t * np.sin(w)
        dX[:, 2 * m] = 2 * np.pi * m * t * np.cos(w)
    J = np.zeros((n_ch * N, 1 + n_ch * p))
    for c in range(n_ch):
        J[c * N : (c + 1) * N, 0] = dX @ coef[:, c]
        J[c * N : (c + 1) * N, 1 + c * p : 1 + (c + 1) * p] = X
    resid = Y.T - X @ coef
    s2 = float(np.sum(resid**2)) / (n_ch * N - J.shape[1])
    cov = s2 * np.linalg.inv(J.T @ J)
    amp = [float(np.hypot(coef[1, c], coef[2, c])) for c in range(n_ch)]
    return float(np.sqrt(cov[0, 0])), amp, s2


def beam_strain_per_motion(physical, positions, frequency_hz: float) -> np.ndarray:
    """Surface strain ``-(h/2) w''(d)`` (n_positions, 2) of the PS beam ``physical``
    (:class:`~hbtest.config.section.BeamSpec`: clamped at x = 0 to the interface motion, free tip at
    ``length``) per unit interface displacement u [m] (column 0) and rotation theta [rad]
    (column 1), at ``frequency_hz`` > 0: the continuous Euler–Bernoulli solution with the
    damping of :mod:`hbtest.method.sensors`."""
    s = 2j * np.pi * frequency_hz
    Ec = physical.EI * (1.0 + physical.zeta_stiffness * s)
    b = (-physical.rhoA * (s * s + physical.zeta_mass * s) / Ec) ** 0.25
    L, h = physical.length, physical.thickness

    def basis(x, order):
        c_, s_, ch, sh = np.cos(b * x), np.sin(b * x), np.cosh(b * x), np.sinh(b * x)
        return {
            0: [c_, s_, ch, sh],
            1: [-b * s_, b * c_, b * sh, b * ch],
            2: [-(b**2) * c_, -(b**2) * s_, b**2 * ch, b**2 * sh],
            3: [b**3 * s_, -(b**3) * c_, b**3 * sh, b**3 * ch],
        }[order]

    A = np.array([basis(0.0, 0), basis(0.0, 1), basis(L, 2), basis(L, 3)], dtype=complex)
    rhs = np.array([[1, 0], [0, 1], [0, 0], [0, 0]], dtype=complex)
    coef = np.linalg.solve(A, rhs)  # (4, 2)
    curv = np.array([basis(d, 2) for d in positions], dtype=complex) @ coef
    return -(h / 2) * curv


def _coefficients(acq, layout, f, nuisance) -> np.ndarray:
    """Nominal physical, lag-corrected fundamental coefficient per channel (layout order)."""
    names = layout.channel_names
    raw = np.stack([np.asarray(acq.data[n], float) for n in names])
    fit = harmonics.fit(acq.t, raw, f, [1], n_periods=acq.n_periods, nuisance_hz=nuisance)
    return np.array([fit.coefficients[i][0] * c.scale / c.response(f) for i, c in enumerate(layout.channels)])


def _solve_betas(m: np.ndarray, P: np.ndarray, ref: int) -> np.ndarray:
    """``beta`` (n_ch,) with ``beta_ref = 1`` from coefficients ``m`` (n_cfg, n_ch) and model rows
    ``P`` (n_ch, 2): least squares over ``beta_j m_j^c = P_j q^c`` (unknown motions ``q^c``);
    each channel's equations weighted by its mean level."""
    n_cfg, n_ch = m.shape
    others = [j for j in range(n_ch) if j != ref]
    n_unk = 2 * n_cfg + len(others)
    w = 1.0 / np.mean(np.abs(m), axis=0)
    A = np.zeros((n_cfg * n_ch, n_unk), complex)
    y = np.zeros(n_cfg * n_ch, complex)
    for c in range(n_cfg):
        for j in range(n_ch):
            r = c * n_ch + j
            A[r, 2 * c : 2 * c + 2] = -P[j] * w[j]
            if j == ref:
                y[r] = -m[c, j] * w[j]
            else:
                A[r, 2 * n_cfg + others.index(j)] = m[c, j] * w[j]
    x = np.linalg.lstsq(A, y, rcond=None)[0]
    beta = np.ones(n_ch, complex)
    beta[others] = x[2 * n_cfg :]
    return beta


def _motion_sensitivities(physical, chans, f: float) -> np.ndarray:
    """(n_channels, 2) reading of each channel per unit clamp translation and rotation at ``f``:
    a laser ``[1, position]``, a gauge the PS beam's strain per motion."""
    S = beam_strain_per_motion(physical, [c.position for c in chans if c.kind == "strain_gauge"], f)
    P, gi = np.zeros((len(chans), 2), complex), 0
    for j, c in enumerate(chans):
        if c.kind == "laser":
            P[j] = [1.0, c.position]
        else:
            P[j] = S[gi]
            gi += 1
    return P


def probed_level(rig, desc, layout, settings: ChannelSettings, f: float, a: int, full_scale: float) -> float:
    """Drive actuator ``a`` alone at ``f``: probe at ``probe_v``, then settle at the voltage that
    brings the largest channel to ``target_fraction`` of full scale (capped); return it."""
    n_act = len(desc.actuators)
    e = np.zeros((n_act, 1), complex)
    e[a, 0] = settings.probe_v
    rig.set_demand(f, e, [1])
    rig.wait(settings.settle_s * f)
    probe = rig.acquire(max(2, settings.n_periods // 4))
    peak = max(float(np.max(np.abs(np.asarray(probe.data[n], float)))) for n in layout.channel_names)
    v = settings.probe_v * settings.target_fraction * full_scale / max(peak, MIN_PROBE_PEAK_V)
    v = min(v, settings.voltage_fraction * desc.voltage_limit_v)
    e[a, 0] = v
    rig.set_demand(f, e, [1])
    rig.wait(settings.settle_s * f)
    return v


def calibrate_channels(rig, physical, layout=None, settings: ChannelSettings = ChannelSettings()) -> ProcedureResult:
    """Gain and lag of every channel relative to the first laser (see module docstring).
    ``physical``: the PS beam (:class:`~hbtest.config.section.BeamSpec`, the rig file's
    ``[physical]``); ``layout``: the layout to calibrate (default ``rig.describe().sensors``;
    its ``mains_frequencies`` are rejected from every fit, so calibrate the mains first)."""
    if physical is None:
        raise UserError("channel calibration needs the rig file's [physical] beam (the model of the physical substructure)")
    desc = rig.describe()
    layout = layout or desc.sensors
    n_act = len(desc.actuators)
    if n_act < 2:
        raise UserError(f"channel calibration needs two independent clamp motions (two actuators); {desc.identity!r} has {n_act}")
    chans = layout.channels
    ref = chans.index(layout.lasers[0])
    nuisance = layout.mains_frequencies
    full_scale = desc.input_range_v or 10.0
    rows = []  # (f, repeat, beta)
    levels = {}
    for f in settings.frequencies_hz:
        P = _motion_sensitivities(physical, chans, f)
        per_cfg = []
        for a in range(n_act):
            v = probed_level(rig, desc, layout, settings, f, a, full_scale)
            levels[f"{f:g} Hz, actuator {desc.actuators[a]}"] = float(v)
            per_cfg.append([_coefficients(rig.acquire(settings.n_periods), layout, f, nuisance) for _ in range(settings.repeats)])
        for r in range(settings.repeats):
            m = np.array([per_cfg[a][r] for a in range(n_act)])
            rows.append((f, r, _solve_betas(m, P, ref)))
    rig.safe_state()
    omega = np.array([2 * np.pi * f for f, _, _ in rows])
    B = np.array([b for _, _, b in rows])  # (n_rows, n_ch)
    n = len(rows)
    vals, unc, per_freq = {}, {}, {}
    for j, c in enumerate(chans):
        if j == ref:
            continue
        g = np.abs(B[:, j])
        ph = np.angle(B[:, j])
        dtau = float(np.sum(omega * ph) / np.sum(omega**2))
        res = ph - omega * dtau
        s_tau = float(np.sqrt(np.sum(res**2) / max(n - 1, 1) / np.sum(omega**2)))
        gain, s_gain = float(np.mean(g)), float(np.std(g, ddof=1) / np.sqrt(n))
        vals[c.name] = {"scale_per_v": c.scale * gain, "skew_us": (c.skew + dtau) * 1e6}
        unc[c.name] = {"scale_per_v": c.scale * s_gain, "skew_us": s_tau * 1e6}
        per_freq[c.name] = {f"{f:g}": {"gain": float(np.mean(g[[k for k, row in enumerate(rows) if row[0] == f]])),
                                        "lag_rad": float(np.mean(ph[[k for k, row in enumerate(rows) if row[0] == f]]))}
                            for f in settings.frequencies_hz}
    return ProcedureResult(
        "channels", {"channels": vals}, {"channels": unc},
        {"channels": {"reference": chans[ref].name, "frequencies_hz": list(settings.frequencies_hz),
                      "repeats": settings.repeats, "n_periods": settings.n_periods, "demand_v": levels,
                      "per_frequency": per_freq,
                      "not_identified": f"absolute scale of the reference laser {chans[ref].name!r} (needs a known displacement)"}},
    )

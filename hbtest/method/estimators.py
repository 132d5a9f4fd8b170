"""Steady-state estimators that do not wait for the transient to die.

After a demand change has finished ramping, a linear rig's channels are exactly

    x(t) = sum_k Re(X_k e^{i k w t}) + sum_m Re(c_m e^{lambda_m (t - t0)}) + interference + noise,

the new periodic steady state (coefficients ``X_k``, the hbtest.method.harmonics convention
``X_k = a_k - i b_k``: ``a_k cos + b_k sin``) plus the free decay of the system's modes
(eigenvalues ``lambda_m`` [rad/s], ``Re lambda < 0``; known from the design model or the rig's
own identification, e.g. :meth:`hbtest.rig.virtual.VirtualRig.modes`). :func:`fit_through_transient`
fits both together by least squares on a short record, so the steady state is available
after a few periods instead of after ``ln(dU/tol) / (zeta w)`` seconds of waiting.

:func:`pool_affine` uses every evaluation of a point: at a fixed frequency a linear rig's
outputs are affine in the demand, ``Y_j = A V_j + b + noise``, so a weighted least-squares fit
of ``(A, b)`` over all evaluations (prior: the Jacobian the solver already has) gives the
outputs at the final demand with the information of all of them, not of one window.

Units: ``t`` [s] in the demand's time base (phase zero at t = 0), ``x`` in the channel's own
units (raw volts for the rig's channels); coefficients in the same units; variances of the
complex coefficients ``E|X - E X|^2`` in units squared.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .harmonics import check_orders, unpack

__all__ = ["TransientFit", "fit_through_transient", "GrowingDesign", "relevant_modes", "MODE_DECAY_LIMIT", "AffinePool", "pool_affine",
           "POOL_OUTLIER_CHI2", "solution_map", "sandwich_variance",
           "solution_uncertainty", "MainsEstimate", "mains_frequency"]

#: a mode is fitted only while it has not decayed by more than ``e^-MODE_DECAY_LIMIT`` at
#: the start of the record (faster modes are gone before the fit starts: their columns would
#: be numerically zero)
MODE_DECAY_LIMIT = 30.0


@dataclass(frozen=True)
class TransientFit:
    """Result of :func:`fit_through_transient`.

    coefficients: complex (..., n_orders) — the steady-state harmonic coefficients.
    variance: real (..., n_orders) — variance of each complex coefficient from the least-squares
        covariance and the residual noise (white-noise model).
    modes: the eigenvalues fitted (Im >= 0 members).
    residual_rms: real (...,) — rms of what the model does not explain.
    correlation: (n, n) correlation of the residuals of the ``n`` leading-axis signals (flattened):
        the noise shared between channels (e.g. pickup common to two gauge cables), which the
        white-noise variances alone do not carry; None for a single signal.
    """

    coefficients: np.ndarray
    variance: np.ndarray
    modes: np.ndarray
    residual_rms: np.ndarray
    correlation: np.ndarray | None = None


def relevant_modes(modes, since_s: float, sample_rate_hz: float) -> np.ndarray:
    """The modes (Im >= 0 members) still alive ``since_s`` seconds after the demand stopped
    changing (decay ``Re(lambda) since_s > -MODE_DECAY_LIMIT``) and below the Nyquist
    frequency."""
    lam = np.asarray(modes, dtype=complex).reshape(-1)
    lam = lam[np.imag(lam) >= 0]
    alive = np.real(lam) * max(since_s, 0.0) > -MODE_DECAY_LIMIT
    below = np.abs(np.imag(lam)) < np.pi * sample_rate_hz
    return lam[alive & below]


def fit_through_transient(t, x, frequency_hz: float, orders, modes, t0: float | None = None, nuisance_hz=(), clock=None,
                          design: "GrowingDesign | None" = None) -> TransientFit:
    """Least-squares steady-state coefficients of ``x`` (time on the last axis) sampled at
    ``t`` [s], with the free decay of each mode in ``modes`` (eigenvalues [rad/s]; a complex
    pair is given by one member, a real mode by itself) starting at ``t0`` [s] (default: the
    first sample) and the interferers ``nuisance_hz`` as extra regressors.

    ``clock``: the same samples' times [s] on a continuous clock (e.g. the rig clock), for the
    regressors that are not periodic in the forcing — mode decays and interferers — and then
    ``t0`` is on that clock too. Needed when ``t`` is a concatenation of records in the demand
    time base: that base is only defined modulo the forcing period between records (a rig may
    restart it at each record), so a decay or a 50 Hz interferer written in it jumps at every
    record boundary and the fit takes the jump for noise. Default: ``t``.

    Exact for a noise-free linear system whose demand is constant from ``t0`` on and whose
    modes are all given. The record needs more samples than regressors
    (``2 n_orders + 2 n_modes + 2 n_nuisance``).

    ``design``: a :class:`GrowingDesign` kept across the fits of one record that grows at its
    end (the earlier samples unchanged): the regressors of the samples it has seen are kept and
    only the new ones' computed (the same bits as building them all)."""
    orders = check_orders(orders)
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    if x.shape[-1] != t.size:
        raise ValueError(f"time axis mismatch: t has {t.size} samples, x has {x.shape[-1]}")
    if frequency_hz <= 0:
        raise ValueError("frequency_hz must be positive")
    c = t if clock is None else np.asarray(clock, dtype=float)
    if c.shape != t.shape:
        raise ValueError(f"clock has {c.size} samples, t has {t.size}")
    t0 = float(c[0]) if t0 is None else float(t0)
    lam = np.asarray(modes, dtype=complex).reshape(-1)
    build = _transient_design if design is None else design.build
    A, n_h = build(t, c, t0, frequency_hz, orders, lam, nuisance_hz)
    if A.shape[0] <= A.shape[1]:
        raise ValueError(f"{A.shape[0]} samples cannot resolve {A.shape[1]} regressors")
    xs = np.moveaxis(x, -1, 0).reshape(t.size, -1)
    beta, resid, cov_diag = _scaled_least_squares(A, xs, n_h)
    dof = max(t.size - A.shape[1], 1)
    s2 = np.sum(resid**2, axis=0) / dof  # (channels,)
    lead = x.shape[:-1]
    coef = unpack(beta[:n_h].T.reshape(lead + (n_h,)), orders)
    var = np.multiply.outer(s2, _complex_variance(cov_diag, orders)).reshape(lead + (orders.size,))
    corr = np.corrcoef(resid, rowvar=False) if xs.shape[1] > 1 and np.all(s2 > 0) else None
    return TransientFit(coef, var, lam, np.sqrt(s2).reshape(lead), corr)


def _transient_design(t, c, t0: float, frequency_hz: float, orders, lam, nuisance_hz) -> tuple[np.ndarray, int]:
    """The regressors of :func:`fit_through_transient` (samples x columns) and how many of the
    first are the harmonics': cos/sin of each order (DC: ones) at the demand times ``t``, then
    cos/sin of each interferer not on a harmonic at the continuous clock ``c`` and the decay of
    each mode (real: one column, complex: two) since ``t0`` on that clock [s]."""
    harm = _harmonic_columns(t, frequency_hz, orders)
    cols = harm + _nuisance_columns(c, frequency_hz, orders, nuisance_hz) + _decay_columns(c, t0, lam)
    return np.stack(cols, axis=-1), len(harm)


def _harmonic_columns(t, frequency_hz: float, orders) -> list:
    """cos/sin of each order (DC: ones) at the demand times ``t`` [s]."""
    cols = []
    for k in orders:
        if k == 0:
            cols.append(np.ones_like(t))
        else:
            cols += [np.cos(k * 2 * np.pi * frequency_hz * t), np.sin(k * 2 * np.pi * frequency_hz * t)]
    return cols


def _nuisance_columns(c, frequency_hz: float, orders, nuisance_hz) -> list:
    """cos/sin of each interferer [Hz] not on a harmonic, at the continuous clock ``c`` [s]."""
    cols = []
    for fn in nuisance_hz:
        if all(abs(fn - k * frequency_hz) > 1e-9 for k in orders):
            cols += [np.cos(2 * np.pi * fn * c), np.sin(2 * np.pi * fn * c)]
    return cols


def _decay_columns(c, t0: float, lam) -> list:
    """The free decay of each mode (real: one column, complex: two) since ``t0`` on the
    continuous clock ``c`` [s]."""
    tau = c - t0
    cols = []
    for m in lam:
        env = np.exp(np.real(m) * tau)
        if abs(np.imag(m)) <= 1e-9 * abs(m):
            cols.append(env)
        else:
            cols += [env * np.cos(np.imag(m) * tau), env * np.sin(np.imag(m) * tau)]
    return cols


class GrowingDesign:
    """The regressors of :func:`fit_through_transient` for one record that grows at its end
    (a point's evaluation keeps every period it measured in the fit): each column is kept for
    the samples seen and extended by the new samples' values only. Every regressor is an
    elementwise function of its sample's time, so a column built in pieces has the bits of one
    built whole. The interferers' columns are rebuilt whole when their frequencies change (the
    tracked mains moves between fits); harmonic and decay columns are kept while the frequency,
    orders, modes and ``t0`` stay. The caller guarantees that the samples seen are unchanged."""

    def __init__(self):
        self._key = None
        self._n = 0
        self._harm: list = []
        self._decay: list = []
        self._nuisance_key = None
        self._nuisance: list = []

    def build(self, t, c, t0: float, frequency_hz: float, orders, lam, nuisance_hz) -> tuple[np.ndarray, int]:
        """As :func:`_transient_design`, from the columns kept (the record grown at its end)."""
        key = (float(t0), float(frequency_hz), tuple(int(k) for k in orders), np.asarray(lam, dtype=complex).tobytes())
        n = self._n
        if key != self._key or t.size < n:
            self._key, n, self._harm, self._decay, self._nuisance_key = key, 0, [], [], None
        self._harm = _extend(self._harm, _harmonic_columns(t[n:], frequency_hz, orders))
        self._decay = _extend(self._decay, _decay_columns(c[n:], t0, lam))
        nuisance_key = tuple(float(fn) for fn in nuisance_hz)
        if nuisance_key == self._nuisance_key:
            self._nuisance = _extend(self._nuisance, _nuisance_columns(c[n:], frequency_hz, orders, nuisance_hz))
        else:
            self._nuisance_key, self._nuisance = nuisance_key, _nuisance_columns(c, frequency_hz, orders, nuisance_hz)
        self._n = t.size
        return np.stack(self._harm + self._nuisance + self._decay, axis=-1), len(self._harm)


def _extend(kept: list, new: list) -> list:
    """Columns ``kept`` (the earlier samples) continued by ``new`` (the later ones)."""
    return new if not kept else [np.concatenate([a, b]) for a, b in zip(kept, new)]


def _scaled_least_squares(A, xs, n_h: int):
    """(coefficients, residuals, diagonal of the first ``n_h`` coefficients' covariance per unit
    noise variance) of ``xs ~ A beta``: columns scaled for conditioning, one QR solve.

    The QR is scipy's (LAPACK ``geqrf`` + ``orgqr``, as ``numpy.linalg.qr``, the same bits on
    this machine's numeric environments and 2-3x faster for a tall design), its factors in
    numpy's C order: ``Q.T @ xs`` takes another BLAS path, with other last bits, on F order."""
    from scipy.linalg import qr

    scale = np.linalg.norm(A, axis=0)
    scale[scale == 0] = 1.0
    As = A / scale
    Q, Rm = (np.ascontiguousarray(f) for f in qr(As, mode="economic", check_finite=False))
    beta = np.linalg.lstsq(Rm, Q.T @ xs, rcond=1e-12)[0] / scale[:, None]
    resid = xs - A @ beta
    Rinv = np.linalg.pinv(Rm, rcond=1e-12)
    return beta, resid, np.sum(Rinv[:n_h] ** 2, axis=1) / scale[:n_h] ** 2


def _complex_variance(cov_diag, orders) -> np.ndarray:
    """Per order, the variance of the complex coefficient per unit noise variance: var(a) +
    var(b) from the cos/sin columns' ``cov_diag`` (DC: var(a))."""
    per = []
    i = 0
    for k in orders:
        if k == 0:
            per.append(cov_diag[i])
            i += 1
        else:
            per.append(cov_diag[i] + cov_diag[i + 1])
            i += 2
    return np.array(per)


#: :func:`pool_affine` drops an evaluation (the farthest from ``at`` first) while some
#: evaluation's mean normalised squared residual exceeds this (the affine model or the
#: evaluation is not trusted: a nonlinear rig over a long step, a transient left in a window)
POOL_OUTLIER_CHI2 = 9.0
#: relative eigenvalue cut-off of the pool fit's normal matrix (:func:`pool_affine`); a row
#: beyond it is solved by SVD of the whitened problem, where only directions at the
#: floating-point floor are dropped (POOL_SVD_RCOND)
POOL_RCOND = 1e-13
POOL_SVD_RCOND = 1e-15
#: :func:`pool_affine` with ``between=True`` estimates a between-evaluation variance of an
#: output only when its misfit over the evaluations is this improbable under the stated
#: variances alone (upper tail of chi-squared with the fit's degrees of freedom): read noise
#: alone crosses it about once in 10^6 fits, so a rig whose evaluations repeat is pooled as
#: without it
POOL_BETWEEN_P = 1e-6
#: ... and only when the nearest of the evaluations misfit too (:func:`_scatter_near`): they
#: are the nearer half, at least this many
POOL_NEAR_MIN = 3
#: ... by this many bisection steps on ``log(tau^2)`` (relative precision ~1e-3 of ``tau^2``)
POOL_BETWEEN_STEPS = 40


@dataclass(frozen=True)
class AffinePool:
    """Result of :func:`pool_affine`.

    value: (n,) outputs at the demand ``at``; variance: (n,) their variances (the noise of
    every evaluation used and the uncertainty of the fitted Jacobian, with the prior);
    jacobian: (n, m) the fitted ``A``; used: indices of the evaluations used;
    chi2: (n_used,) mean normalised squared residual of each evaluation used (about 1 when the
    stated variances are right and the model holds)."""

    value: np.ndarray
    variance: np.ndarray
    jacobian: np.ndarray
    used: np.ndarray
    chi2: np.ndarray
    #: (n, m, m) posterior covariance of each row of ``jacobian`` (the next prior of a
    #: recursive estimate across points)
    jacobian_cov: np.ndarray | None = None
    #: (n,) the between-evaluation variance of each output (``between=True``; zeros
    #: otherwise or where the misfit does not show one): already in ``variance`` and ``chi2``
    between: np.ndarray | None = None
    #: (n_used, n) ``d value[i] / d Y[used[j], i]``: how each evaluation used enters the
    #: estimate (with ``residuals`` (n_used, n), the fit's misfit per evaluation, the sandwich
    #: variance of any function of the estimate: :func:`sandwich_variance`)
    influence: np.ndarray | None = None
    residuals: np.ndarray | None = None
    #: (n,) the estimate's variance from the evaluations' stated variances alone (the
    #: prior's share left out): what the reads contribute, whatever scatter there is besides
    read_variance: np.ndarray | None = None
    #: (n_used, n) each evaluation's leverage on its own fitted value (``d fit[j, i] / d Y[j, i]``)
    leverage: np.ndarray | None = None


def _pool_rows(dV, Y, w, A0, P):
    """Per-row MAP fit of ``Y[j, i] = A[i] . dV[j] + c[i]`` (weights ``w`` (J, n)), Gaussian
    prior ``A[i] ~ N(A0[i], P[i]^-1)`` (``P`` (n, m, m) precision matrices); returns
    (c, var c, A, residuals (J, n), covariance of A (n, m, m), the inverse normal matrices
    (n, m+1, m+1): ``d c[i] / d Y[j, i] = (Ninv[i] @ [dV[j], 1])[m] w[j, i]``).

    Through the normal equations; a row whose normal matrix is numerically singular
    (condition beyond 1 / :data:`POOL_RCOND`: very precise data, e.g. a noise-free rig, outweigh
    the prior by 1e20 and more) is solved instead as the whitened stacked least-squares problem
    (data rows ``sqrt(w) [dV, 1]`` over prior rows ``sqrt(P) [I, 0]``) by SVD, so the prior
    keeps the Jacobian in the directions the data do not span (a truncated pseudo-inverse of
    the normal matrix zeroed them, and the iteration stalled)."""
    J, m = dV.shape
    X = np.hstack([dV, np.ones((J, 1))])  # (J, m+1)
    N = np.einsum("ja,ji,jb->iab", X, w, X)  # (n, m+1, m+1)
    N[:, :m, :m] += P
    rhs = np.einsum("ja,ji,ji->ia", X, w, Y)
    rhs[:, :m] += np.einsum("iab,ib->ia", P, A0)
    Ninv = np.linalg.pinv(N, rcond=POOL_RCOND, hermitian=True)
    theta = np.einsum("iab,ib->ia", Ninv, rhs)
    vc = Ninv[:, m, m].copy()
    covA = Ninv[:, :m, :m].copy()
    ev = np.linalg.eigvalsh(N)
    for i in np.flatnonzero(ev[:, 0] <= POOL_RCOND * ev[:, -1]):
        sw = np.sqrt(w[:, i])
        # prior rows: L^T [I, 0] with P = L L^T (a square root of the precision)
        pw, pv = np.linalg.eigh(P[i])
        Lt = (pv * np.sqrt(np.clip(pw, 0.0, None))).T
        M = np.vstack([sw[:, None] * X, np.hstack([Lt, np.zeros((m, 1))])])
        b = np.concatenate([sw * Y[:, i], Lt @ A0[i]])
        U, S, Vt = np.linalg.svd(M, full_matrices=False)
        inv = np.where(S > S[0] * POOL_SVD_RCOND, 1.0 / np.where(S > 0, S, 1.0), 0.0)
        theta[i] = Vt.T @ (inv * (U.T @ b))
        cov = (Vt.T * inv**2) @ Vt
        vc[i] = cov[m, m]
        covA[i] = cov[:m, :m]
        Ninv[i] = cov
    res = Y - X @ theta.T
    return theta[:, m], vc, theta[:, :m], res, covA, Ninv


def _chi2_isf(p: float, dof: float) -> float:
    """Upper ``p`` quantile of chi-squared with ``dof`` degrees of freedom."""
    from scipy.stats import chi2

    return float(chi2.isf(p, dof))


def _between_variance(dV, Y, var, A0, P, dof: int) -> np.ndarray:
    """Per output the variance ``tau^2`` of a random offset of each evaluation (independent
    between evaluations, on top of the stated ``var``) at which the fit's weighted misfit
    ``Q(tau^2) = sum_j res_j^2 / (var_j + tau^2)`` equals its degrees of freedom ``dof`` (the
    Paule-Mandel moment estimate of a random-effects model); 0 where ``Q(0)`` is not beyond
    the :data:`POOL_BETWEEN_P` quantile. ``Q`` falls with ``tau^2``: bisection on its log."""
    n = Y.shape[1]
    tau2 = np.zeros(n)
    if dof < 1:
        return tau2

    def Q(t):
        w = 1.0 / np.maximum(var + t, np.finfo(float).tiny)
        return np.sum(_pool_rows(dV, Y, w, A0, P)[3] ** 2 * w, axis=0)

    rows = Q(tau2) > _chi2_isf(POOL_BETWEEN_P, dof)
    if not np.any(rows):
        return tau2
    lo = np.full(n, np.log(np.finfo(float).tiny))
    hi = np.log(np.maximum(np.max((Y - np.mean(Y, axis=0)) ** 2, axis=0), np.finfo(float).tiny) + np.max(var, axis=0))
    lo = np.maximum(lo, hi - 120.0)  # 52 orders of magnitude below the spread: nothing
    for _ in range(POOL_BETWEEN_STEPS):
        mid = 0.5 * (lo + hi)
        over = Q(np.exp(mid)) > dof
        lo, hi = np.where(over, mid, lo), np.where(over, hi, mid)
    return np.where(rows, np.exp(0.5 * (lo + hi)), 0.0)


def _scatter_near(dV, Y, var, A0, P, rows) -> bool:
    """Whether the misfit beyond the stated variances (in the outputs ``rows``) is there among
    the evaluations nearest the fit's demand too: the nearer half of them (at least
    :data:`POOL_NEAR_MIN`) fitted on their own, the misfit tested as in
    :func:`_between_variance` with the fit's effective degrees of freedom (evaluations less
    the sum of their leverages: the prior carries the Jacobian where they are few). A scatter
    between evaluations does not depend on where they are (the lab's misfit correlates with
    the distance from the point's last demand by 0.01 at the median point,
    ``scripts/lab_iteration_stats.py``); a rig that is not affine over the evaluations (a
    nonlinear specimen after long steps) misfits at the far ones and fits the near ones, which
    the outlier test then keeps. False where the near ones cannot tell (too few): no
    between-evaluation variance until they can."""
    J = dV.shape[0]
    k = max(POOL_NEAR_MIN, (J + 1) // 2)
    if k >= J:
        return False
    near = np.argsort(np.linalg.norm(dV, axis=1), kind="stable")[:k]
    w = 1.0 / np.maximum(var[near], np.finfo(float).tiny)
    _, _, _, res, _, Ninv = _pool_rows(dV[near], Y[near], w, A0, P)
    dof = k - np.sum(_influence(dV[near], Ninv, w)[1], axis=0)
    Q = np.sum(res**2 * w, axis=0)
    for i in np.flatnonzero(rows):
        if dof[i] >= 0.5 and Q[i] > _chi2_isf(POOL_BETWEEN_P, float(dof[i])):
            return True
    return False


def _prior_precision(prior_sd, prior_cov, n: int, m: int) -> np.ndarray:
    """(n, m, m) precision of each row's Jacobian prior (:func:`pool_affine`)."""
    if prior_cov is None:
        if prior_sd is None:
            raise ValueError("give prior_sd or prior_cov")
        sd = np.broadcast_to(np.asarray(prior_sd, dtype=float), (n, m))
        if np.any(sd <= 0):
            raise ValueError("prior_sd must be positive")
        return np.einsum("ia,ab->iab", 1.0 / sd**2, np.eye(m))
    C = np.asarray(prior_cov, dtype=float)
    if C.shape != (n, m, m):
        raise ValueError(f"prior_cov {C.shape} is not {(n, m, m)}")
    return np.linalg.inv(C)


def pool_affine(V, Y, variance, at, prior_jacobian, prior_sd=None, *, prior_cov=None, between: bool = False,
                affine: bool = True, max_between: float = np.inf) -> AffinePool:
    """Outputs at the demand ``at`` from evaluations ``j`` of one point: demands ``V`` (J, m),
    outputs ``Y`` (J, n) with independent noise of variances ``variance`` (J, n) (same units
    squared), through the affine model ``Y_j = A (V_j - at) + c`` fitted row by row by weighted
    least squares with the Gaussian prior ``A ~ N(prior_jacobian, prior_sd^2)`` entrywise
    (``prior_sd`` broadcast to (n, m), > 0). ``c`` is the estimate; its variance is the
    posterior one. ``prior_cov`` (n, m, m), instead of ``prior_sd``: a full prior covariance
    of each row of ``A`` (e.g. the posterior ``jacobian_cov`` of a previous pool, grown by
    what may have changed since). Evaluations the model does not explain (:data:`POOL_OUTLIER_CHI2`) are
    dropped, farthest from ``at`` first; the last evaluation (row J-1) is always kept.

    ``between``: the evaluations may scatter about the model by more than their variances say,
    by an offset drawn afresh at each (a rig not repeatable for the same demand, as the lab's:
    README "Two solver profiles"). Its variance per output, estimated from the misfit
    (:func:`_between_variance`, ``J - 1 - m`` degrees of freedom), is added to every
    evaluation's before the fit and the outlier test: a scattering rig is averaged over its
    evaluations instead of losing them as outliers. With ``affine=False`` (the rig may not be
    affine over them: a nonlinear specimen), only where the evaluations nearest ``at`` misfit
    too (:func:`_scatter_near`): a nonlinear rig's misfit at far evaluations is no scatter, and
    those go as outliers; so do they beyond ``max_between`` (2-norm over outputs of the scatter's
    s.d., units of ``Y``: a model failing, :meth:`~hbtest.point.profile_hbtest.HbtestProfile.between_limit`).

    With one evaluation at ``at`` this is that evaluation. Unbiased when the rig is affine in
    the demand over the evaluations used and the variances are right."""
    V = np.atleast_2d(np.asarray(V, dtype=float))
    Y = np.atleast_2d(np.asarray(Y, dtype=float))
    var = np.atleast_2d(np.asarray(variance, dtype=float))
    J, m = V.shape
    n = Y.shape[1]
    if Y.shape != (J, n) or var.shape != (J, n):
        raise ValueError(f"V {V.shape}, Y {Y.shape} and variance {var.shape} disagree")
    A0 = np.broadcast_to(np.asarray(prior_jacobian, dtype=float), (n, m))
    P = _prior_precision(prior_sd, prior_cov, n, m)
    floor = np.finfo(float).tiny
    dV_all = V - np.asarray(at, dtype=float)
    keep = np.arange(J)
    dist = np.linalg.norm(dV_all, axis=1)
    tau2 = np.zeros(n)
    while True:
        if between:
            tau2 = _between_variance(dV_all[keep], Y[keep], var[keep], A0, P, keep.size - 1 - m)
            if not affine and np.any(tau2 > 0) and not _scatter_near(dV_all[keep], Y[keep], var[keep], A0, P, tau2 > 0):
                tau2 = np.zeros(n)  # a nonlinearity: the far evaluations go as outliers
            if np.sqrt(np.sum(tau2)) > max_between:
                tau2 = np.zeros(n)  # beyond a scatter: the model fails over them (outliers)
        w = 1.0 / np.maximum(var[keep] + tau2, floor)
        c, vc, A, res, covA, Ninv = _pool_rows(dV_all[keep], Y[keep], w, A0, P)
        chi2 = np.mean(res**2 * w, axis=1)
        if keep.size <= 1 or np.max(chi2) <= POOL_OUTLIER_CHI2:
            break
        cand = keep[keep != J - 1]
        if cand.size == 0:
            break
        keep = keep[keep != cand[np.argmax(dist[cand])]]
    influence, leverage = _influence(dV_all[keep], Ninv, w)
    read = np.sum(influence**2 * var[keep], axis=0)
    return AffinePool(c, vc, A, keep, chi2, covA, tau2, influence, res, read, leverage)


def _influence(dV, Ninv, w):
    """Of a :func:`_pool_rows` fit (inverse normal matrices ``Ninv``, weights ``w``): each
    evaluation's influence on the estimate ``d c[i] / d Y[j, i]`` and its leverage on its own
    fitted value ``d fit[j, i] / d Y[j, i]``, both (J, n)."""
    X = np.hstack([dV, np.ones((dV.shape[0], 1))])
    m = dV.shape[1]
    return np.einsum("ja,ia->ji", X, Ninv[:, m, :]) * w, np.einsum("ja,iab,jb->ji", X, Ninv, X) * w


def solution_map(G, P, n: int) -> np.ndarray:
    """``M = E - G J^+ P`` (n x outputs): the first-order map from an error ``dY`` of a
    linear rig model's outputs ``Y = G V + c`` to the error of the first ``n`` outputs at its
    solution ``R = 0``, where ``dR = P dY`` and ``J = P G`` (:func:`solution_uncertainty`). An
    error along the rig's own response (``dY = G dV``) maps to zero: the solution moves along
    the model and the outputs there stay."""
    return _solution_map(G, P, n)[0]


def _solution_map(G, P, n: int):
    """(:func:`solution_map`, ``J^+``)."""
    Jp = np.linalg.pinv(P @ G, rcond=1e-10)
    return np.eye(n, G.shape[0]) - G[:n] @ Jp @ P, Jp


def sandwich_variance(M, pool: AffinePool) -> float:
    """The variance (trace) of ``M value`` for a pooled estimate ``pool`` (:func:`pool_affine`)
    from its own misfit instead of the stated variances: ``sum_j |M (L_j * r_j / sqrt(1 -
    h_j))|^2`` over the evaluations used (``L_j`` each one's influence, ``r_j`` its residual,
    ``h_j`` its leverage: the residual of a fitted evaluation is smaller than its error by
    ``1 - h_j`` in variance), the heteroscedasticity-consistent "sandwich" estimate HC2.
    Whatever the evaluations' scatter is made of, it counts as much as it moves the estimate
    through ``M``; with fewer than ``m + 2`` evaluations it says nothing (NaN)."""
    assert pool.influence is not None and pool.residuals is not None and pool.leverage is not None
    J, m = pool.influence.shape[0], pool.jacobian.shape[1]
    if J < m + 2:
        return float("nan")
    r = pool.residuals / np.sqrt(np.clip(1.0 - pool.leverage, 1e-9, None))
    v = (pool.influence * r) @ np.asarray(M).T  # (J, n)
    return float(np.sum(v**2))


def solution_uncertainty(G, P, var_Y, correlation, n: int, G_cov=None) -> float:
    """Standard uncertainty (2-norm) of the first ``n`` outputs at the solution ``R = 0`` of a
    linear rig model ``Y = G V + c`` whose residual is linear in the outputs, ``dR = P dY``:
    first-order propagation of the outputs' noise (variances ``var_Y``, errors correlated by
    ``correlation``) through the solution, ``dY* = (E - G J^+ P) dY`` with ``J = P G`` and
    ``E`` the first ``n`` rows of the identity. Units: those of the (weighted) outputs.

    ``G_cov`` (rows x coordinates x coordinates): the covariance of each row of a fitted
    ``G`` (a pool's posterior, rows independent). The variance is then the mean over the true
    Jacobian ``G + dG`` to second order in ``dG``: the map through it is ``M (I - A + A^2)``,
    ``A = dG J^+ P``, so the variance gains ``sum_i (M^T M)_ii tr(W S W^T C_i) + 2 tr(M E[A^2]
    S M^T)`` (``W = J^+ P``, ``S`` the outputs' covariance, ``C_i`` row i's covariance)."""
    var_Y = np.asarray(var_Y, dtype=float)
    M, Jp = _solution_map(G, P, n)
    sd = np.sqrt(var_Y)
    S = correlation * np.outer(sd, sd)
    var = np.trace(M @ S @ M.T)
    if G_cov is not None:
        # M(G + dG) = M (I - A + A^2) + O(dG^3), A = dG W, W = J^+ P; rows of dG
        # independent with covariances C_i: E[A S A^T] = diag_i tr(W S W^T C_i) and
        # E[A^2] = Q W with Q_i = W[:, i]^T C_i
        W = Jp @ P
        B = W @ S @ W.T
        var += float(np.einsum("i,iab,ba->", np.einsum("ji,ji->i", M, M), G_cov, B))
        Q = np.einsum("ai,iab->ib", W, G_cov)
        var += 2.0 * float(np.trace(M @ Q @ W @ S @ M.T))
    return float(np.sqrt(max(var, 0.0)))


@dataclass(frozen=True)
class MainsEstimate:
    """A measured mains frequency: ``frequency_hz`` [Hz] and its standard uncertainty
    ``sd_hz`` [Hz] (Cramer-Rao bound of the lines used, see :func:`mains_frequency`);
    ``lines``: how many (channel, multiple) lines carried it."""

    frequency_hz: float
    sd_hz: float
    lines: int


#: the measured mains frequency is searched within this fraction of the nominal one (the lab's
#: records wander 49.98-50.17 Hz, p10-p90, around 50 Hz nominal)
MAINS_SEARCH_FRACTION = 0.01
#: a mains multiple closer than this many frequency bins (1/T) to a fitted forcing harmonic is
#: not used to estimate the mains frequency
MAINS_CLEAR_BINS = 3.0
#: a mains line counts as detected when its summed, noise-weighted power is this many times what
#: white noise alone gives (each channel weighted by its residual variance); else no estimate (a
#: twin without mains; and none either with the peak at the span's edge: a line outside it, or a
#: transient's leakage)
MAINS_DETECTION_RATIO = 25.0


def _forcing_residual(t, x, frequency_hz: float, top: int) -> np.ndarray:
    """``x`` (channels, N) minus its least-squares DC and harmonics 1..top of ``frequency_hz``."""
    w = 2 * np.pi * frequency_hz * (t - t[0])
    cols = [np.ones_like(t)] + [g(k * w) for k in range(1, top + 1) for g in (np.cos, np.sin)]
    B = np.stack(cols, axis=1)
    coef, *_ = np.linalg.lstsq(B, x.T, rcond=None)
    return x - (B @ coef).T


def _demodulated_blocks(r, t, line_hz: float, block: int):
    """``r`` (channels, N) shifted down by ``line_hz`` and summed over blocks of ``block``
    samples (one nominal mains period: every other nominal multiple averages out), with a Hann
    window and without: (Hann block values (channels, B), plain block values, block centre
    times (B,) [s], Hann window sum)."""
    n = (t.size // block) * block
    w = np.hanning(n)
    z = r[:, :n] * np.exp(-2j * np.pi * line_hz * (t[:n] - t[0]))
    tb = (t[:n] - t[0]).reshape(-1, block).mean(axis=1)
    plain = z.reshape(r.shape[0], -1, block)
    return (z * w).reshape(plain.shape).sum(axis=2), plain.sum(axis=2), tb, float(w.sum())


def _refined_offset(lines, var, d0: float, step: float) -> float:
    """The offset within ``d0 +/- step`` maximising the plain (rectangular-window) line power
    summed as in :func:`mains_frequency`: the least-squares (maximum-likelihood) frequency of
    a tone in white noise; the Hann grid only brackets it (its parabola is biased by ~1e-3 of
    a bin, too much under a strong mains)."""
    from scipy.optimize import minimize_scalar

    def neg(dd):
        return -sum(float(np.sum(np.abs(zp @ np.exp(-2j * np.pi * m * dd * tb)) ** 2 / var)) for m, _, zp, tb, _ in lines)

    return float(minimize_scalar(neg, bounds=(d0 - step, d0 + step), method="bounded", options={"xatol": step * 1e-6}).x)


def mains_frequency(t, x, frequency_hz: float, nominal_hz: float, multiples: int, top: int = 8) -> MainsEstimate | None:
    """The mains frequency [Hz] a uniformly sampled record carries, or None when no mains line
    stands clear of the forcing harmonics.

    ``t`` (N,) [s] uniform; ``x`` (channels, N) any units; ``frequency_hz`` the forcing, whose DC
    and harmonics ``1..top`` are removed first by least squares. Each mains multiple ``m`` of
    ``nominal_hz`` (m = 1..multiples, skipping those within ``MAINS_CLEAR_BINS / T`` of a removed
    harmonic) is demodulated, averaged over nominal mains periods and its Hann-windowed power
    summed over channels (each weighted by the inverse of its residual variance) and multiples
    as a function of the common offset ``d`` (line ``m (nominal + d)``), ``|d| <= 1 %`` of
    nominal, on a grid of step ``1 / (8 m_max T)``; the maximum is refined, within a grid step,
    on the rectangular-window power (:func:`_refined_offset`); None unless that maximum stands ``MAINS_DETECTION_RATIO`` times above
    white noise's power and away from the span's edges. ``sd_hz``: the Cramer-Rao bound of a single-tone frequency estimate
    ``var f_line = 12 fs^2 / ((2 pi)^2 SNR N^3)``, ``SNR = A^2 / (2 sigma^2)``, combined over the
    lines as ``1 / sum(m^2 / var f_line)``: a lower bound (the Hann window costs ~1.5-2x, and a
    mains wandering within the record is not a single tone)."""
    t = np.asarray(t, dtype=float)
    x = np.atleast_2d(np.asarray(x, dtype=float))
    return _mains_estimate(t, x, frequency_hz, nominal_hz, multiples, top)


def _mains_estimate(t, x, frequency_hz: float, nominal_hz: float, multiples: int, top: int) -> MainsEstimate | None:
    """:func:`mains_frequency` computed (``t`` (N,), ``x`` (channels, N) float arrays)."""
    N = t.size
    fs = (N - 1) / (t[-1] - t[0]) if N > 1 else 0.0
    T = N / fs if fs > 0 else 0.0
    block = int(round(fs / nominal_hz)) if fs > 0 else 0
    top = max(0, min(int(top), int((fs / 2 - 1) // frequency_hz)))
    span = MAINS_SEARCH_FRACTION * nominal_hz
    use = [m for m in range(1, int(multiples) + 1)
           if m * nominal_hz < fs / 2 - m * span and not any(
               abs(k * frequency_hz - m * nominal_hz) <= m * span + MAINS_CLEAR_BINS / T for k in range(1, top + 1))]
    if not use or block < 2 or N < 4 * block:
        return None
    r = _forcing_residual(t, x, frequency_hz, top)
    var = np.maximum(r.var(axis=1), np.finfo(float).tiny)
    step = 1.0 / (8 * max(use) * T)
    d = np.arange(-span, span + step / 2, step)
    power = np.zeros(d.size)
    lines = []
    for m in use:
        zb, zp, tb, wsum = _demodulated_blocks(r, t, m * nominal_hz, block)
        P = np.abs(zb @ np.exp(-2j * np.pi * m * np.outer(tb, d))) ** 2  # (channels, grid)
        power += np.sum(P / var[:, None], axis=0)
        lines.append((m, zb, zp, tb, wsum))
    i = int(np.argmax(power))
    floor = len(use) * x.shape[0] * float(np.sum(np.hanning((N // block) * block) ** 2))  # white noise alone
    if i < 2 or i > d.size - 3 or power[i] < MAINS_DETECTION_RATIO * floor:
        return None  # no line inside the span standing clear of the floor (or one pulled to its edge)
    off = _refined_offset(lines, var, float(d[i]), step)
    amps = [2 * np.abs(zb @ np.exp(-2j * np.pi * m * off * tb)) / wsum for m, zb, _, tb, wsum in lines]  # per channel
    noise = np.maximum(var - sum(a**2 / 2 for a in amps), 0.01 * var)  # the residual's variance less the lines'
    info = sum(m**2 * float(np.sum(a**2 / (2 * noise))) for (m, *_), a in zip(lines, amps)) * (2 * np.pi) ** 2 * N**3 / (12 * fs**2)
    sd = 1.0 / np.sqrt(info) if info > 0 else np.inf
    return MainsEstimate(float(nominal_hz + off), float(sd), len(use) * x.shape[0])

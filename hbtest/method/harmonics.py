"""The one harmonic-coefficient convention of hbtest (docs/method.md §0) and everything built on it.

A periodic signal of fundamental angular frequency Omega is

    x(t) = a0 + sum_{k=1..H} (a_k cos k Omega t + b_k sin k Omega t)

and its complex coefficient is ``X_k = a_k - 1j * b_k`` so that
``x(t) = a0 + Re sum_k X_k exp(1j k Omega t)``. The DC coefficient is stored as ``X_0 = a0``
(real). Arrays of coefficients carry the harmonic order along their *last* axis, with the
orders given separately (``orders``), e.g. ``orders = (0, 1, 3)``.

Solvers work on real vectors: per channel ``[a0?, a_1, b_1, ..., a_H, b_H]`` (DC only when
order 0 is among the orders); :func:`pack` and :func:`unpack` are the one pair that does this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "NYQUIST_MARGIN",
    "check_orders",
    "HarmonicFit",
    "fit",
    "reconstruct",
    "rotate",
    "lag_correct",
    "pack",
    "unpack",
    "packed_size",
    "real_operator",
    "mains_error_bound",
    "periods_for_accuracy",
    "max_usable_harmonic",
    "mains_proximity",
]


#: usable harmonics stay below sample_rate / NYQUIST_MARGIN (anti-alias filters; docs/method.md §3)
NYQUIST_MARGIN = 2.56

def check_orders(orders) -> np.ndarray:
    """Harmonic orders as a 1-D int array; ValueError unless distinct and non-negative."""
    o = np.atleast_1d(np.asarray(orders, dtype=int))
    if o.ndim != 1 or o.size == 0 or np.any(o < 0) or len(set(o.tolist())) != o.size:
        raise ValueError(f"harmonic orders must be distinct non-negative integers, got {orders!r}")
    return o


@dataclass(frozen=True)
class HarmonicFit:
    """Result of :func:`fit`.

    coefficients: complex, shape (..., n_orders) — the mean over the fitted periods.
    variance: real, shape (..., n_orders) — variance *of the mean* of each complex
        coefficient, ``E|X - E X|^2 / n_periods`` estimated from the spread of per-period fits
        (nan when only one period was fitted).
    per_period: complex, shape (n_periods, ..., n_orders).
    orders: the harmonic orders along the last axis.
    """

    coefficients: np.ndarray
    variance: np.ndarray
    per_period: np.ndarray
    orders: np.ndarray

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(self.variance)


def _basis(phase: np.ndarray, orders) -> np.ndarray:
    """Real regression basis, columns [1 | cos k phi, sin k phi ...] in pack order."""
    cols = []
    for k in orders:
        if k == 0:
            cols.append(np.ones_like(phase))
        else:
            cols.append(np.cos(k * phase))
            cols.append(np.sin(k * phase))
    return np.stack(cols, axis=-1)


def fit(
    t: np.ndarray,
    x: np.ndarray,
    frequency_hz: float,
    orders,
    n_periods: int | None = None,
    nuisance_hz=(),
) -> HarmonicFit:
    """Least-squares harmonic coefficients of ``x`` sampled at times ``t`` [s].

    ``t`` is in the demand's time base (phase zero at t = 0). ``x`` has time on its last axis,
    any leading shape. The record is split into ``n_periods`` consecutive windows of one
    period each (default: as many whole periods as fit); each window is fitted separately and
    the coefficients are averaged. The spread of the per-period coefficients gives the
    variance of the mean (the noise estimate the solver uses). Exact for noise-free multisines
    with orders inside ``orders`` when the windows contain enough samples
    (more than ``2 * len(orders)``).

    ``nuisance_hz``: known interference frequencies (e.g. mains multiples). They are first
    estimated jointly with the harmonics by least squares over the whole record and
    subtracted, so a known interferer is removed rather than only averaged down. A nuisance
    within one bin (``f / n_periods``) of a solved harmonic cannot be separated and is skipped.
    """
    orders = check_orders(orders)
    t = np.asarray(t, dtype=float)
    x = np.asarray(x)
    if x.shape[-1] != t.size:
        raise ValueError(f"time axis mismatch: t has {t.size} samples, x has {x.shape[-1]}")
    if frequency_hz <= 0:
        raise ValueError("frequency_hz must be positive")
    period = 1.0 / frequency_hz
    # A record of N whole periods holds round(N T fs) samples: it may end up to half a
    # sample short of N T. Count periods with one and a half sample steps of slack.
    dt = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    available = int(np.floor((t[-1] - t[0] + 1.5 * dt) / period + 1e-9)) if t.size > 1 else 0
    if n_periods is None:
        n_periods = available
    if n_periods < 1 or n_periods > available:
        raise ValueError(f"record holds {available} whole periods, asked for {n_periods}")
    t0 = t[0]
    index = np.floor((t - t0) / period + 1e-9).astype(int)
    omega = 2 * np.pi * frequency_hz
    nuis = [fn for fn in nuisance_hz if all(abs(fn - k * frequency_hz) > frequency_hz / n_periods for k in orders)]
    if nuis:
        x = _without_nuisance(t, x, index < n_periods, omega, orders, nuis)
    per_period = _per_period_fit(t, x, index, n_periods, omega, orders)
    mean = per_period.mean(axis=0)
    if n_periods > 1:
        var = np.sum(np.abs(per_period - mean) ** 2, axis=0) / (n_periods - 1) / n_periods
    else:
        var = np.full(mean.shape, np.nan)
    return HarmonicFit(mean, var, per_period, orders)


def _without_nuisance(t, x, keep, omega: float, orders, nuis) -> np.ndarray:
    """``x`` with the known interferers at ``nuis`` [Hz] removed: fitted jointly with the
    harmonics over the samples ``keep`` by least squares, subtracted over the whole record."""
    tt = t[keep]
    A = np.concatenate([_basis(omega * tt, orders)] + [_basis(2 * np.pi * fn * tt, [1]) for fn in nuis], axis=-1)
    xs = np.moveaxis(x[..., keep], -1, 0).reshape(tt.size, -1)
    beta, *_ = np.linalg.lstsq(A, xs, rcond=None)
    n_h = 2 * orders.size - int(0 in orders)
    interference = _basis(2 * np.pi * np.asarray(nuis)[:, None] * t[None, :], [1])  # (n_nuis, n_t, 2)
    coef = beta[n_h:].reshape(len(nuis), 2, -1)  # (n_nuis, [cos, sin], channels)
    return x - np.einsum("jtc,jcm->mt", interference, coef).reshape(x.shape)


def _per_period_fit(t, x, index, n_periods: int, omega: float, orders) -> np.ndarray:
    """The complex coefficients of every one-period window ``index == p`` (``(P,) + x.shape[:-1]
    + (n_orders,)``), all windows solved at once: zero-padded rows do not change a
    least-squares fit."""
    counts = np.bincount(index[index < n_periods], minlength=n_periods)
    if counts.min() <= 2 * orders.size:
        raise ValueError(f"{counts.min()} samples per period cannot resolve orders {orders.tolist()}")
    m = int(counts.max())
    starts = np.searchsorted(index, np.arange(n_periods))
    rows = starts[:, None] + np.arange(m)[None, :]
    valid = np.arange(m)[None, :] < counts[:, None]
    rows = np.where(valid, rows, 0)
    A = _basis(omega * t[rows], orders) * valid[..., None]  # (P, m, nb)
    xw = np.moveaxis(x, -1, 0)[rows].reshape(n_periods, m, -1) * valid[..., None]  # (P, m, ch)
    AtA = np.einsum("pmi,pmj->pij", A, A)
    Atx = np.einsum("pmi,pmc->pic", A, xw)
    beta = np.linalg.solve(AtA, Atx)  # (P, nb, ch)
    return unpack(np.moveaxis(beta, 1, -1).reshape((n_periods,) + x.shape[:-1] + (A.shape[-1],)), orders)


def reconstruct(t: np.ndarray, coefficients: np.ndarray, frequency_hz: float, orders) -> np.ndarray:
    """Time signal x(t) from complex coefficients (last axis = orders). Output (..., len(t))."""
    orders = check_orders(orders)
    coefficients = np.asarray(coefficients)
    phase = 2 * np.pi * frequency_hz * np.asarray(t, dtype=float)
    e = np.exp(1j * np.multiply.outer(orders, phase))  # (n_orders, n_t)
    x = np.real(coefficients @ e)
    return x


def rotate(coefficients: np.ndarray, orders, phase_rad, gain=None) -> np.ndarray:
    """Rotate each harmonic by ``+phase_rad[k]`` (``X_k <- X_k e^{+i phi_k}``, docs/method.md §0) and
    divide by ``gain[k]`` when given. ``phase_rad``/``gain`` broadcast against the last axis."""
    orders = check_orders(orders)
    out = np.asarray(coefficients) * np.exp(1j * np.asarray(phase_rad, dtype=float))
    if gain is not None:
        out = out / np.asarray(gain, dtype=float)
    # DC stays real
    if 0 in orders:
        i0 = int(np.flatnonzero(orders == 0)[0])
        out[..., i0] = np.real(np.asarray(coefficients)[..., i0]) / (
            1.0 if gain is None else np.broadcast_to(np.asarray(gain, dtype=float), out.shape)[..., i0]
        )
    return out


def lag_correct(coefficients: np.ndarray, frequency_hz: float, orders, response) -> np.ndarray:
    """Undo a known linear channel response ``G(f)`` (callable: Hz -> complex) per harmonic:
    ``X_k <- X_k / G(k f)`` — a rotation by the lag ``phi_k = -arg G`` and an amplitude
    correction ``1/|G|``."""
    orders = check_orders(orders)
    g = np.asarray([response(k * frequency_hz) if k > 0 else response(0.0) for k in orders], dtype=complex)
    return rotate(coefficients, orders, -np.angle(g), np.abs(g))


def packed_size(orders) -> int:
    """Number of real entries per channel in the packed vector."""
    orders = check_orders(orders)
    return int(sum(1 if k == 0 else 2 for k in orders))


def pack(coefficients: np.ndarray, orders) -> np.ndarray:
    """Complex coefficients (..., n_orders) -> real vector (..., packed_size), per channel
    ``[a0?, a_1, b_1, ...]`` with ``a_k = Re X_k``, ``b_k = -Im X_k``. Leading axes are
    flattened channel-major by :func:`numpy.reshape` when the caller reshapes to 1-D."""
    orders = check_orders(orders)
    c = np.asarray(coefficients)
    if c.shape[-1] != orders.size:
        raise ValueError(f"expected {orders.size} harmonic orders on the last axis, got {c.shape[-1]}")
    parts = []
    for i, k in enumerate(orders):
        if k == 0:
            parts.append(np.real(c[..., i : i + 1]))
        else:
            parts.append(np.real(c[..., i : i + 1]))
            parts.append(-np.imag(c[..., i : i + 1]))
    return np.concatenate(parts, axis=-1).astype(float)


def unpack(vector: np.ndarray, orders) -> np.ndarray:
    """Inverse of :func:`pack` along the last axis."""
    orders = check_orders(orders)
    v = np.asarray(vector, dtype=float)
    if v.shape[-1] != packed_size(orders):
        raise ValueError(f"expected {packed_size(orders)} packed entries, got {v.shape[-1]}")
    out = np.empty(v.shape[:-1] + (orders.size,), dtype=complex)
    j = 0
    for i, k in enumerate(orders):
        if k == 0:
            out[..., i] = v[..., j]
            j += 1
        else:
            out[..., i] = v[..., j] - 1j * v[..., j + 1]
            j += 2
    return out


def real_operator(A: np.ndarray, orders) -> np.ndarray:
    """Real matrix acting on packed vectors equivalent to the per-harmonic complex matrices
    ``A`` (n_orders, m, n): ``pack(Y) = real_operator(A) @ pack(X)`` (flattened channel-major)
    for ``Y[:, k] = A[k] @ X[:, k]``. Built column by column through :func:`pack`/:func:`unpack`,
    so it follows the one packing convention whatever it is."""
    orders = check_orders(orders)
    A = np.asarray(A)
    n_ord, m, n = A.shape
    p = packed_size(orders)
    out = np.empty((m * p, n * p))
    for j in range(n * p):
        e = np.zeros(n * p)
        e[j] = 1.0
        X = unpack(e.reshape(n, p), orders)  # (n, n_orders)
        Y = np.einsum("kmn,nk->mk", A, X)
        if 0 in orders:
            Y[:, orders == 0] = Y[:, orders == 0].real
        out[:, j] = pack(Y, orders).reshape(-1)
    return out


def mains_error_bound(noise_amplitude, noise_hz, frequency_hz, order, n_periods) -> tuple[float, float]:
    """Bound on the error of the (a_k, b_k) coefficients of harmonic ``order`` of a signal at
    fundamental ``frequency_hz`` caused by a sinusoidal interference of amplitude
    ``noise_amplitude`` at ``noise_hz`` when averaging over ``n_periods`` periods (docs/method.md §3):

        |delta a_k| <= 2 T_N / (n pi) * |rho| / |rho^2 - 1|
        |delta b_k| <= 2 T_N / (n pi) *   1   / |rho^2 - 1|,    rho = f_noise / (k f).

    Returns (bound_cos, bound_sin). Infinite when rho == 1 (interference on the harmonic).
    """
    rho = noise_hz / (order * frequency_hz)
    d = abs(rho * rho - 1.0)
    if d == 0:
        return (np.inf, np.inf)
    c = 2.0 * noise_amplitude / (n_periods * np.pi)
    return (c * abs(rho) / d, c / d)


def periods_for_accuracy(noise_amplitude, noise_hz, frequency_hz, order, accuracy, max_periods=100000) -> int:
    """Smallest number of averaging periods for which :func:`mains_error_bound` of both
    coefficients is below ``accuracy`` (same unit as the noise amplitude)."""
    bc, bs = mains_error_bound(noise_amplitude, noise_hz, frequency_hz, order, 1)
    worst = max(bc, bs)
    if not np.isfinite(worst):
        raise ValueError(
            f"interference at {noise_hz} Hz coincides with harmonic {order} of {frequency_hz} Hz:"
            " averaging cannot remove it"
        )
    n = int(np.ceil(worst / accuracy))
    if n > max_periods:
        raise ValueError(f"{n} periods needed, more than {max_periods}")
    return max(n, 1)


def mains_proximity(frequency_hz, orders, mains_hz=50.0, mains_harmonics=(1, 2, 3, 4, 5, 6), rel=0.02):
    """Pairs (k, m) where harmonic k of the forcing lies within ``rel`` (relative) of mains
    multiple m — the cases where averaging converges slowly and a warning is due."""
    hits = []
    for k in check_orders(orders):
        if k == 0:
            continue
        for m in mains_harmonics:
            if abs(k * frequency_hz - m * mains_hz) <= rel * m * mains_hz:
                hits.append((int(k), int(m)))
    return hits


def max_usable_harmonic(frequency_hz: float, sample_rate_hz: float) -> int:
    """Highest harmonic order below fs / :data:`NYQUIST_MARGIN` (docs/method.md §3)."""
    return int(np.floor(sample_rate_hz / NYQUIST_MARGIN / frequency_hz))

"""Measures of a classical hybrid-test response: growth rate of its envelope (stability
verdict and dominant frequency), steady harmonic amplitude, and the delay and relative
amplification of a PS interface signal against its NS counterpart (docs/method.md §4).

Harmonic amplitudes use the one convention and fit of :mod:`hbtest.method.harmonics`
(``x(t) = a0 + Re(X e^{i w t})``, ``X = a - i b``), over whole periods of the record.

Units: SI (s, and the signal's own units); frequencies in Hz, growth rates in 1/s (the real
part of the dominant characteristic root: positive = growing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...method import harmonics

__all__ = ["GrowthRate", "growth_rate", "fundamental_amplitude", "delay_and_amplification"]

_TWO_PI = 2.0 * np.pi

GROWTH_SPAN = 1e3
"""Growth (ratio of envelope levels) beyond which a response counts as blowing up: the forced
part is then negligible and only the upper half (in log scale) of the envelope is fitted."""

ENVELOPE_FLOOR = 1e-12
"""Envelope points below this fraction of the largest are round-off and not fitted."""

UNSTABLE_GROWTH = 1.5
"""An envelope that grows by more than this factor over the fit (beyond 3 standard errors)
is unstable."""

GROWTH_RTOL = 1e-3
"""Relative change of the growth rate that ends the forced-response refinement."""


@dataclass(frozen=True)
class GrowthRate:
    """Exponential growth rate [1/s] of a response envelope: ``rate`` (least-squares slope
    of ``ln(envelope)``), ``stderr`` its standard error, ``window_s`` the fitted time span,
    ``unstable`` when ``rate > max(3 stderr, ln(1.5)/window_s)`` (the envelope grows by more
    than half over the fit, beyond its scatter), ``frequency_hz`` the dominant frequency."""

    rate: float
    stderr: float
    window_s: float
    frequency_hz: float
    unstable: bool

    def to_dict(self) -> dict:
        return dict(growth_rate_per_s=finite_or_none(self.rate), stderr_per_s=finite_or_none(self.stderr), window_s=finite_or_none(self.window_s),
                    frequency_hz=finite_or_none(self.frequency_hz), unstable=bool(self.unstable))


def finite_or_none(x) -> float | None:
    """``float(x)``, or None when it is not finite (for JSON)."""
    x = float(x)
    return x if math.isfinite(x) else None


def fundamental_amplitude(t: np.ndarray, y: np.ndarray, frequency_hz: float, n_periods: int | None = None) -> np.ndarray:
    """Complex amplitude ``Y`` (``y ~ a0 + Re(Y e^{i w t})``, phase zero at ``t = 0``) of each
    column of ``y`` (n,) or (n, n_ch) at ``frequency_hz``. A thin wrapper of
    :func:`hbtest.method.harmonics.fit` (orders 0 and 1, time on the first axis here) over the first
    ``n_periods`` whole periods of the samples (default: all whole periods), averaged per
    period. Shape ``y.shape[1:]``."""
    y = np.asarray(y, dtype=float)
    res = harmonics.fit(np.asarray(t, dtype=float), np.moveaxis(y, 0, -1), frequency_hz, (0, 1), n_periods=n_periods)
    return res.coefficients[..., 1]


def _blowing_up(t: np.ndarray, Y: np.ndarray, skip_fraction: float) -> bool:
    """True when the raw response grows by more than :data:`GROWTH_SPAN` from its smallest level after
    ``skip_fraction`` to the end (the forced part is then negligible where it is fitted)."""
    a = np.abs(Y).max(axis=1)
    n = a.size
    i0 = int(skip_fraction * n)
    m = max(1, n // 20)
    start = a[i0 : i0 + m].max() if i0 + m <= n else a[i0:].max()
    end = a[n - m :].max()
    return bool(start > 0 and end > GROWTH_SPAN * start)


def _envelope_fit(t: np.ndarray, Y: np.ndarray, skip_fraction: float) -> GrowthRate:
    """Log-envelope fit of (n, n_ch) samples (see :func:`growth_rate`)."""
    nan = GrowthRate(float("nan"), float("nan"), 0.0, float("nan"), False)
    dt = t[1] - t[0]
    scale = np.abs(Y).max(axis=0)
    scale[scale == 0] = 1.0
    a = (np.abs(Y) / scale).max(axis=1)
    if not np.any(a > 0):
        return nan
    half = Y[Y.shape[0] // 2 :]
    spec = np.abs(np.fft.rfft(half - half.mean(axis=0), axis=0)).sum(axis=1)
    spec[0] = 0.0
    fr = np.fft.rfftfreq(half.shape[0], dt)
    f_dom = float(fr[np.argmax(spec)]) if spec.size > 1 and spec.max() > 0 else 0.0
    win = max(4, int(round(1.0 / f_dom / dt))) if f_dom > 0 else max(8, t.size // 50)
    nw = t.size // win
    if nw < 4:
        win = max(2, t.size // 8)
        nw = t.size // win
    # only true local maxima of |y| count (a window edge on a rising flank is no envelope point)
    peak = np.zeros_like(a)
    lm = (a[1:-1] >= a[:-2]) & (a[1:-1] >= a[2:])
    peak[1:-1][lm] = a[1:-1][lm]
    blocks = peak[: nw * win].reshape(nw, win)
    imax = blocks.argmax(axis=1)
    env = blocks[np.arange(nw), imax]
    tc = t[: nw * win].reshape(nw, win)[np.arange(nw), imax]  # time of each window's peak
    keep = (tc >= t[0] + skip_fraction * (t[-1] - t[0])) & (env > ENVELOPE_FLOOR * env.max())
    le = np.log(np.where(env > 0, env, np.nan))
    if keep.sum() >= 3:
        lk = le[keep]
        if lk[-1] - lk.min() > math.log(GROWTH_SPAN):
            lo = lk.min() + 0.5 * (lk[-1] - lk.min())
            upper = keep & (le >= lo) & (tc >= tc[keep][np.argmin(lk)])
            keep = upper if upper.sum() >= 4 else keep & (tc >= tc[keep][np.argmin(lk)])
    if keep.sum() < 3:
        return nan
    X = np.column_stack([np.ones(keep.sum()), tc[keep]])
    coef, *_ = np.linalg.lstsq(X, le[keep], rcond=None)
    r = le[keep] - X @ coef
    dof = max(keep.sum() - 2, 1)
    cov = np.linalg.inv(X.T @ X) * float(r @ r) / dof
    rate, se = float(coef[1]), float(np.sqrt(max(cov[1, 1], 0.0)))
    span = float(tc[keep][-1] - tc[keep][0])
    unstable = bool(rate > max(3 * se, math.log(UNSTABLE_GROWTH) / max(span, dt)))
    # refine the frequency over the fitted span (the FFT of a short, growing record is
    # coarse): peaks of |y| of the channel with the largest normalised late amplitude are half
    # a period apart; parabolic interpolation places each peak between samples
    inside = np.flatnonzero((t >= tc[keep][0]) & (t <= tc[keep][-1]))
    if inside.size > 8:
        ch = int(np.argmax(np.abs(Y[inside][-max(4, win) :]).max(axis=0) / scale))
        yy = np.abs(Y[inside, ch])
        j = 1 + np.flatnonzero((yy[1:-1] > yy[:-2]) & (yy[1:-1] >= yy[2:]))
        if j.size >= 3:
            den = yy[j - 1] - 2 * yy[j] + yy[j + 1]
            off = np.where(den != 0, 0.5 * (yy[j - 1] - yy[j + 1]) / np.where(den != 0, den, 1.0), 0.0)
            tp = t[inside][j] + np.clip(off, -0.5, 0.5) * dt
            f_dom = float(0.5 * (j.size - 1) / (tp[-1] - tp[0]))
    return GrowthRate(rate, se, span, f_dom, unstable)


def growth_rate(t: np.ndarray, y: np.ndarray, forcing_hz: float = 0.0, skip_fraction: float = 0.2, iterations: int = 4) -> GrowthRate:
    """Growth rate of a response from the log of its envelope.

    ``y`` (n,) or (n, n_ch) (channels combined by the max of ``|y|`` after each is
    normalised). Envelope: the largest local maximum of ``|y|`` in each window of one period
    of the dominant frequency (FFT peak of the second half), placed at its time (the peaks of
    one exponential sinusoid lie on its envelope; a window edge on a rising flank does not). Fit: least squares of
    ``ln(envelope)`` against those times over the windows after ``skip_fraction`` of the
    record and above 1e-12 of the largest envelope (round-off floor); when the envelope grew
    by more than 1e3, only its upper half in log scale, where the fastest root dominates.

    With a harmonic forcing at ``forcing_hz`` the steady part is removed first, so what is
    fitted is the homogeneous (transient or growing) response: a least-squares fit of
    ``a0 + a cos + b sin`` (after ``skip_fraction``), repeated ``iterations`` times with the
    current estimate of the homogeneous part ``e^{sigma t}(c cos + d sin)(2 pi f_d t)`` fitted
    alongside so that the two do not leak into each other. Not done when the raw response
    grows by more than 1e3 (the forced part is then negligible where it is fitted). A root
    within about one over the record length of the forcing frequency cannot be separated
    from the steady part: use a free response (no forcing) for precise rates."""
    t = np.asarray(t, dtype=float)
    Y = np.asarray(y, dtype=float).reshape(t.size, -1)
    ok = np.all(np.isfinite(Y), axis=1)
    t, Y = t[ok], Y[ok]
    if t.size < 16:
        return GrowthRate(float("nan"), float("nan"), 0.0, float("nan"), False)
    if not (forcing_hz > 0) or _blowing_up(t, Y, skip_fraction):
        return _envelope_fit(t, Y, skip_fraction)
    i0 = int(skip_fraction * t.size)
    wf = _TWO_PI * forcing_hz
    tt = t - t[0]
    base = [np.ones_like(t), np.cos(wf * t), np.sin(wf * t)]
    est = None
    for _ in range(max(1, iterations)):
        cols = list(base)
        if est is not None and np.isfinite(est.rate) and est.frequency_hz > 0 and abs(est.frequency_hz - forcing_hz) > 0.5 / (t[-1] - t[0]):
            e = np.exp(np.clip(est.rate * (tt - tt[-1]), -700, 0))
            wd = _TWO_PI * est.frequency_hz
            cols += [e * np.cos(wd * t), e * np.sin(wd * t)]
        X = np.column_stack(cols)
        coef, *_ = np.linalg.lstsq(X[i0:], Y[i0:], rcond=None)
        R = Y - X[:, :3] @ coef[:3]
        new = _envelope_fit(t, R, skip_fraction)
        if est is not None and np.isfinite(new.rate) and abs(new.rate - est.rate) <= GROWTH_RTOL * (1 + abs(new.rate)):
            return new
        est = new
    return est


def delay_and_amplification(t: np.ndarray, z: np.ndarray, x: np.ndarray, frequency_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Delay [s] and relative amplification ``|X|/|Z| - 1`` of each PS interface signal
    ``x`` against its NS counterpart ``z`` at ``frequency_hz`` (harmonic fits over the given
    samples, which should be whole periods of a periodic point)."""
    Zc = fundamental_amplitude(t, np.asarray(z).reshape(t.size, -1), frequency_hz)
    Xc = fundamental_amplitude(t, np.asarray(x).reshape(t.size, -1), frequency_hz)
    phase = np.angle(Xc / Zc)
    return -phase / (_TWO_PI * frequency_hz), np.abs(Xc) / np.abs(Zc) - 1.0

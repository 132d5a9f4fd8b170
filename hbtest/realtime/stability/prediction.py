"""Stability of the loop compensated by a polynomial forward predictor (docs/method.md §4).

The predictor fits a polynomial of order N through the last n samples (sample time dt [s])
and extrapolates it ``rho`` [s] ahead (the prediction horizon); the actuator then delays the
prediction by ``tau`` [s]. Continuous-time idealisation (zero-order hold and sampling
neglected): characteristic function ``A(s) + sum_j w_j(rho) exp(-s (tau + j dt)) B(s)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .equation import DEFAULT_CUTOFF_HZ, DelayEquation
from .systems import SingleDelaySystem

__all__ = [
    "polynomial_predictor_weights", "predictor_equation", "stable_prediction_intervals", "prediction_intervals",
    "PredictionIntervals", "max_predictor_horizon", "HORIZON_SEARCH_LIMIT", "MAX_PREDICTOR_GAIN", "MAX_PREDICTOR_ORDER", "MAX_PREDICTOR_SAMPLES",
]

# the open-ended horizon search (no ``rho_range``) starts on [0, 3 tau + n dt] and, while the
# last stable interval is still open, continues up to this multiple of that range's end: a
# hard bound, reported as such (PredictionIntervals.hard_bound)
HORIZON_SEARCH_LIMIT = 2.0
HORIZON_SCAN_POINTS = 41  # samples of the first range (argument-principle count at each)
HORIZON_TOLERANCE_SAMPLES = 1e-3  # bisection of interval ends, in sample times
# every fitted sample is one delayed term of the characteristic equation (each root count
# costs about 2 ms per term; a search takes up to ~120 counts)
MAX_PREDICTOR_SAMPLES = 100
# the least-squares fit goes through a Vandermonde matrix of the sample indices: beyond this
# order its conditioning ruins the weights
MAX_PREDICTOR_ORDER = 8
# sum |w_j| of the weights grows like (rho/dt)^order: the prediction is a difference of terms
# that large: near 1e9 the argument-principle counts fail (measured), so horizons beyond this
# gain are refused (see max_predictor_horizon)
MAX_PREDICTOR_GAIN = 1e7


def polynomial_predictor_weights(order: int, n_samples: int, horizon_samples) -> np.ndarray:
    """Least-squares polynomial forward predictor.

    A polynomial of degree ``order`` is fitted by least squares through the last
    ``n_samples`` samples ``z(t - j dt)``, ``j = 0 .. n_samples-1`` (time in samples,
    ``t_j = -j``) and evaluated ``horizon_samples`` (= rho/dt, may be fractional or an array)
    ahead: ``w = X_p (X^T X)^-1 X^T`` with ``X[j, q] = t_j^q``, ``X_p[q] = horizon^q``; the
    prediction is ``sum_j w[j] z(t - j dt)``. Returns shape (n_samples,) or
    (*horizon.shape, n_samples). For order 2 through 3 samples one step ahead: (3, -3, 1)."""
    order = int(order)
    n_samples = int(n_samples)
    if order < 0:
        raise ValueError("predictor order must be non-negative")
    if order > MAX_PREDICTOR_ORDER:
        raise ValueError(f"predictor order {order} exceeds {MAX_PREDICTOR_ORDER} (the least-squares fit is ill-conditioned)")
    if n_samples > MAX_PREDICTOR_SAMPLES:
        raise ValueError(f"{n_samples} predictor samples exceed {MAX_PREDICTOR_SAMPLES} (one delayed term each)")
    if n_samples < order + 1:
        raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
    t = -np.arange(n_samples, dtype=float)
    X = np.vander(t, order + 1, increasing=True)
    pinv = np.linalg.pinv(X)  # = (X^T X)^-1 X^T for full column rank
    h = np.asarray(horizon_samples, dtype=float)
    Xp = h[..., None] ** np.arange(order + 1)
    return Xp @ pinv


def max_predictor_horizon(order: int, n_samples: int, sample_time: float) -> float:
    """The largest prediction horizon [s] whose weights keep ``sum |w_j| <=
    MAX_PREDICTOR_GAIN`` (the gain grows with the horizon); ``inf`` for order 0."""
    def gain(h):
        return float(np.abs(polynomial_predictor_weights(order, n_samples, h)).sum())

    lo, hi = 1.0, 1e16  # horizon in samples; bisection on a log scale
    if order == 0 or gain(hi) <= MAX_PREDICTOR_GAIN:
        return float("inf")
    while hi / lo > 1 + 1e-9:
        mid = np.sqrt(lo * hi)
        if gain(mid) <= MAX_PREDICTOR_GAIN:
            lo = mid
        else:
            hi = mid
    return float(lo * sample_time)


def predictor_equation(system: SingleDelaySystem, delay: float, order: int, n_samples: int, sample_time: float, horizon: float) -> DelayEquation:
    """Characteristic equation of the loop with a polynomial forward predictor before the
    delayed actuator. The predictor output ``zhat(t) = sum_j w_j(rho) z(t - j dt)`` (continuous
    -time idealisation of the sampled predictor: zero-order hold and sampling neglected) is
    delayed by ``tau``: ``x(t) = sum_j w_j z(t - tau - j dt)``; hence
    ``A(s) + sum_j w_j exp(-s (tau + j dt)) B(s)``. A perfect predictor would leave the delay
    ``tau - rho``. Units: s."""
    if not sample_time > 0:
        raise ValueError("sample_time must be positive")
    if delay < 0:
        raise ValueError("delay must be non-negative")
    w = polynomial_predictor_weights(order, n_samples, horizon / sample_time)
    if np.abs(w).sum() > MAX_PREDICTOR_GAIN:
        raise ValueError(
            f"horizon {horizon:g} s is {horizon / sample_time:.3g} samples ahead: the predictor weights sum to "
            f"{np.abs(w).sum():.3g} > {MAX_PREDICTOR_GAIN:g} and the prediction drowns in round-off"
        )
    delays = delay + sample_time * np.arange(n_samples)
    return system.equation_multi(delays, w)


@dataclass(frozen=True)
class PredictionIntervals:
    """Horizons ``rho`` [s] keeping the predictor-compensated loop stable.

    ``intervals``: (start, end) pairs [s], ends refined by bisection; ``search_range_s``: the
    range scanned; ``open_end``: the last interval was still stable where the search stopped
    (its end is that point, not a closing); ``hard_bound``: the search stopped at the hard
    bound of the open-ended search (:data:`HORIZON_SEARCH_LIMIT`), not at a range the caller
    gave."""

    intervals: tuple
    search_range_s: tuple
    open_end: bool
    hard_bound: bool

    def containing(self, rho: float):
        """The interval holding ``rho`` [s], else None."""
        for lo, hi in self.intervals:
            if lo <= rho <= hi:
                return (lo, hi)
        return None


def _horizon_scan_range(delay: float, order: int, n_samples: int, sample_time: float, rho_range):
    """(first scan start, first scan end, how far the scan may follow an open interval) [s]."""
    if rho_range is None:
        lo, hi = 0.0, 3 * delay + n_samples * sample_time
        limit = HORIZON_SEARCH_LIMIT * hi
    else:
        lo, hi = (float(x) for x in rho_range)
        limit = hi
    h_max = max_predictor_horizon(order, n_samples, sample_time)
    if hi > h_max and rho_range is not None:
        raise ValueError(f"horizons up to {hi:g} s exceed the largest usable one, {h_max:g} s (MAX_PREDICTOR_GAIN)")
    limit = min(limit, h_max)
    if hi > limit:
        raise ValueError(f"the first horizon range [0, {hi:g}] s exceeds the largest usable horizon, {h_max:g} s (MAX_PREDICTOR_GAIN)")
    return lo, hi, limit


def _stable_intervals(grid, st, edge) -> tuple[list, bool]:
    """(the stable intervals of the scanned ``grid`` with stabilities ``st``, their ends
    refined by ``edge(a, b, stable_at_a)``; whether the last one is still open at the end)."""
    out: list[tuple[float, float]] = []
    start: float | None = grid[0] if st[0] else None
    for i in range(1, len(grid)):
        if st[i] != st[i - 1]:
            x = edge(grid[i - 1], grid[i], st[i - 1])
            if st[i]:
                start = x
            else:
                out.append((float(start), float(x)))  # type: ignore[arg-type]  # stable before: a start
                start = None
    open_end = start is not None
    if start is not None:
        out.append((float(start), float(grid[-1])))
    return out, open_end


def prediction_intervals(
    system: SingleDelaySystem,
    delay: float,
    order: int,
    n_samples: int,
    sample_time: float,
    rho_range: tuple[float, float] | None = None,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    n_grid: int = HORIZON_SCAN_POINTS,
    tol: float | None = None,
    progress: Callable[[float, bool], None] | None = None,
) -> PredictionIntervals:
    """Intervals of prediction horizon ``rho`` [s] for which the predictor-compensated loop
    (:func:`predictor_equation`) has no root with ``Re s > 0`` below the cut-off.

    The range is scanned on ``n_grid`` points (argument-principle count) and the ends refined
    by bisection to ``tol`` (default ``dt/1000``). With ``rho_range`` given exactly that range
    is scanned (an interval reaching its end is clipped there: ``open_end``). Without it the
    scan starts on ``[0, 3 tau + n dt]`` and, while the last interval is still stable at the
    end, continues with the same spacing until the interval closes, or up to
    ``HORIZON_SEARCH_LIMIT`` times that first end or the largest usable horizon
    (:func:`max_predictor_horizon`), whichever is smaller (``open_end`` and ``hard_bound``).
    A range beyond the largest usable horizon raises ``ValueError``. ``progress(rho, stable)``
    is called after every root count (a search makes up to about 120)."""
    lo, hi, limit = _horizon_scan_range(delay, order, n_samples, sample_time, rho_range)
    tol = sample_time * HORIZON_TOLERANCE_SAMPLES if tol is None else tol

    def stable(r):
        ok = predictor_equation(system, delay, order, n_samples, sample_time, r).count_unstable(cutoff_hz) == 0
        if progress is not None:
            progress(float(r), ok)
        return ok

    grid = list(np.linspace(lo, hi, n_grid))
    st = [stable(r) for r in grid]
    step = (hi - lo) / max(n_grid - 1, 1)
    while st[-1] and grid[-1] < limit and step > 0:  # the last interval is open: follow it
        grid.append(min(grid[-1] + step, limit))
        st.append(stable(grid[-1]))

    def edge(a, b, sa):
        while b - a > tol:
            mid = 0.5 * (a + b)
            if stable(mid) == sa:
                a = mid
            else:
                b = mid
        return 0.5 * (a + b)

    out, open_end = _stable_intervals(grid, st, edge)
    return PredictionIntervals(tuple(out), (float(lo), float(grid[-1])), open_end, open_end and rho_range is None)


def stable_prediction_intervals(*args, **kwargs) -> list[tuple[float, float]]:
    """The ``intervals`` of :func:`prediction_intervals` (same arguments) as a list of
    (start, end) pairs [s]."""
    return list(prediction_intervals(*args, **kwargs).intervals)

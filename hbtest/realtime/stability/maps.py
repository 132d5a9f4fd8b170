"""Stability maps over the delay and system parameters, and root loci (docs/method.md §4). Delays [s],
roots [rad/s], frequencies [Hz]."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .builders import beam_hybrid
from .equation import DEFAULT_CUTOFF_HZ
from .systems import SingleDelaySystem

__all__ = ["root_locus", "DelayMap", "delay_map", "beam_delay_map", "ParameterMap", "parameter_map"]


def root_locus(system: SingleDelaySystem, delays, cutoff_hz: float = DEFAULT_CUTOFF_HZ, sigma_min: float | None = None, n_nodes: int | None = None) -> list[np.ndarray]:
    """Roots [rad/s] below the cut-off for each delay [s] (spectral method + Newton)."""
    return [system.equation(float(d)).roots(cutoff_hz, sigma_min=sigma_min, n_nodes=n_nodes) for d in delays]



@dataclass(frozen=True)
class DelayMap:
    """Stability over (delay, parameter): ``unstable_roots[i, j]`` roots in the unstable box
    for ``params[i]`` at ``delays_s[j]``; ``critical_delay_s[i]`` [s] and ``frequency_hz[i]``
    [Hz] of the first instability."""

    params: np.ndarray
    delays_s: np.ndarray
    unstable_roots: np.ndarray
    critical_delay_s: np.ndarray
    frequency_hz: np.ndarray
    boundary: tuple
    cutoff_hz: float

    @property
    def stable(self) -> np.ndarray:
        return self.unstable_roots == 0


def delay_map(factory: Callable, params, delays, cutoff_hz: float = DEFAULT_CUTOFF_HZ) -> DelayMap:
    """Map over (delay [s], parameter): ``factory(p)`` returns a :class:`SingleDelaySystem`;
    the number of unstable roots at every delay comes from the boundary crossings up to
    ``max(delays)`` (exact, including re-stabilisation windows)."""
    params = np.asarray(params, dtype=float)
    delays = np.asarray(delays, dtype=float)
    tmax = float(delays.max()) * 1.0001
    U = np.zeros((params.size, delays.size), dtype=int)
    tc, fr, bd = [], [], []
    for i, p in enumerate(params):
        cd = factory(float(p)).critical_delay(cutoff_hz, tau_max=tmax, all_crossings=True)
        U[i] = cd.unstable_roots(delays)
        tc.append(cd.delay_s)
        fr.append(cd.frequency_hz)
        bd.append(cd.boundary)
    return DelayMap(params, delays, U, np.array(tc), np.array(fr), tuple(bd), cutoff_hz)


def beam_delay_map(alphas, delays, total_length: float, cutoff_hz: float = DEFAULT_CUTOFF_HZ, **beam) -> DelayMap:
    """The (delay, alpha) map of a split beam of ``total_length`` [m], ``alpha = L_N / L``
    (the interface moved along the beam; each part keeps its section). ``beam``: keyword
    arguments of :func:`beam_hybrid` (section, material, damping, mesh, ``physical``). See
    :func:`delay_map`."""

    def factory(a):
        return beam_hybrid(total_length, a * total_length, **beam)

    return delay_map(factory, alphas, delays, cutoff_hz)


@dataclass(frozen=True)
class ParameterMap:
    """Critical delay [s] over two parameters (``x[i]``, ``y[j]``), its frequency [Hz], and,
    when a delay was given, the number of unstable roots at that delay."""

    x: np.ndarray
    y: np.ndarray
    critical_delay_s: np.ndarray
    frequency_hz: np.ndarray
    delay_s: float | None = None
    unstable_roots: np.ndarray | None = None


def parameter_map(factory: Callable, x, y, cutoff_hz: float = DEFAULT_CUTOFF_HZ, delay: float | None = None, tau_max: float = 1.0) -> ParameterMap:
    """Map over any two parameters of a system: ``factory(x, y)`` returns a
    :class:`SingleDelaySystem` (e.g. :func:`chain_hybrid` with two of its masses, springs or
    dampers varied)."""
    x = np.asarray(x, dtype=float)
    y = np.asarray(y, dtype=float)
    tc = np.full((x.size, y.size), np.nan)
    fr = np.full_like(tc, np.nan)
    U = np.zeros((x.size, y.size), dtype=int) if delay is not None else None
    tm = max(tau_max, (delay or 0) * 1.0001)
    for i, a in enumerate(x):
        for j, b in enumerate(y):
            cd = factory(float(a), float(b)).critical_delay(cutoff_hz, tau_max=tm, all_crossings=delay is not None)
            tc[i, j] = cd.delay_s
            fr[i, j] = cd.frequency_hz
            if U is not None:
                U[i, j] = cd.unstable_roots(delay)
    return ParameterMap(x, y, tc, fr, delay, U)

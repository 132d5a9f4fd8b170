"""Noise statistics of sensor streams, computed the same way on the lab's records and on the
twin (``scripts/fit_lab_noise.py``, ``benchmarks/twin_vs_lab.py``, ``tests/test_twin_lab.py``).

A stream is a few forcing periods of one channel at a known forcing phase ``phi`` [rad] and
sample clock ``t`` [s]. :func:`line_fit` fits by least squares a DC term, ``sin/cos(k phi)``
for the forcing orders ``k = 1..orders`` and ``sin/cos(2 pi h fm t)`` for the mains multiples
``h`` of ``mains_hz``. A mains line is returned as a complex phasor ``A`` with the signal
``Re(A exp(i 2 pi h fm t))`` (so ``|A|`` is its amplitude, in the channel's unit). The
broadband level is the rms of the fit residual, ``sqrt(RSS / (N - p))``, and its white
equivalent at a reference sample rate: ``rms * sqrt(fs_ref / fs)`` (the rms the same noise
density would give at ``fs_ref``; white noise assumed). :func:`band_density` gives the noise
density in the band just above the forcing frequency, where a harmonic estimate takes its
broadband noise from. The lab's noise is not white there: its gauges' density is 1.6x, its
lasers' 0.47x and 0.66x what their whole-band rms implies (most of the lasers' power lies at
300-1000 Hz); fitting the mains at each stream's measured frequency instead of 50 Hz changes
these by under 4 %. ``scripts/fit_lab_noise.py`` tables both, ``benchmarks/twin_vs_lab.py``
prints them beside the twin's (white, fitted to the whole-band rms).

Residual bases (lab, ``BroydenMethod.m`` l.596-620 and l.846): the lab's residual is the pair
of forces at its two force transducers, front and back, ``f1 = T + M / l``, ``f2 = -M / l``
with ``l`` the transducers' spacing (111.6 mm): :func:`transducer_forces`. The twin measures
``(T, M)`` from two gauges through the line ``M(x) = M0 - T x``
(:func:`hbtest.method.sensors.moment_line`), so a front/back force pair maps to gauge strains by
:func:`gauge_strain_map`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BAND_HZ",
    "LAB_TRANSDUCER_SPACING_M",
    "band_density",
    "gauge_strain_map",
    "line_fit",
    "lines_to_front_back",
    "mains_frequency",
    "transducer_forces",
]

#: the band [Hz] of :func:`band_density`: just above the forcing frequency (16-19.5 Hz) and below the
#: first mains line, where a harmonic estimate's broadband noise comes from (the lab's read model,
#: its ``noise_analysis.py``, uses the same band)
BAND_HZ = (20.0, 45.0)

#: spacing of the lab's two force transducers (BroydenMethod.m l.608-609: rot = (u1 - u2) / 111.6 mm)
LAB_TRANSDUCER_SPACING_M = 0.1116


def _design(phi: np.ndarray, t: np.ndarray, mains_hz: float, multiples, orders: int) -> tuple[np.ndarray, int]:
    """(design matrix (N, p), index of its first mains column) of :func:`line_fit`."""
    cols = [np.ones_like(t)]
    for k in range(1, orders + 1):
        cols += [np.sin(k * phi), np.cos(k * phi)]
    n_forcing = len(cols)
    for h in multiples:
        w = 2 * np.pi * h * mains_hz * t
        cols += [np.sin(w), np.cos(w)]
    return np.stack(cols, axis=1), n_forcing


def _fit(y, phi, t, mains_hz, multiples, orders):
    y = np.atleast_2d(np.asarray(y, dtype=float))
    A, n_forcing = _design(phi, t, mains_hz, multiples, orders)
    coef, *_ = np.linalg.lstsq(A, y.T, rcond=None)
    return A, n_forcing, coef, y.T - A @ coef


def fit_residual(y: np.ndarray, phi: np.ndarray, t: np.ndarray, mains_hz: float = 50.0, multiples=(1, 2, 3, 4, 5),
                 orders: int = 8) -> np.ndarray:
    """What :func:`line_fit`'s model leaves of the stream ``y`` (N,): the broadband residual (N,)."""
    return _fit(y, phi, t, mains_hz, multiples, orders)[3][:, 0]


def line_fit(
    y: np.ndarray, phi: np.ndarray, t: np.ndarray, mains_hz: float = 50.0, multiples=(1, 2, 3, 4, 5), orders: int = 8
):
    """Least-squares lines of the streams ``y`` (n_ch, N): returns ``(lines, rms)`` with
    ``lines`` (n_ch, n_multiples) complex mains phasors and ``rms`` (n_ch,) the residual rms."""
    A, n_forcing, coef, res = _fit(y, phi, t, mains_hz, multiples, orders)
    dof = max(1, A.shape[0] - A.shape[1])
    rms = np.sqrt(np.sum(res**2, axis=0) / dof)
    s = coef[n_forcing::2].T
    c = coef[n_forcing + 1 :: 2].T
    return c - 1j * s, rms


def band_density(
    y: np.ndarray,
    phi: np.ndarray,
    t: np.ndarray,
    band=BAND_HZ,
    mains_hz: float = 50.0,
    multiples=(1, 2, 3, 4, 5),
    orders: int = 8,
) -> np.ndarray:
    """Noise amplitude density [unit/sqrt(Hz)] per stream of ``y`` (n_ch, N) in ``band`` [Hz]:
    the residual of :func:`line_fit`'s fit, Hann-windowed one-sided periodogram, mean power
    over the bins in the band, square root. A few periods hold only a few bins in the band, and
    the fit removes the noise at its lines (forcing orders and mains multiples, inside or near
    the band) with them: the mean power is divided by the share white noise keeps there,
    ``mean ||(I - P)(w e_nu)||^2 / ||w e_nu||^2`` over the bins (``P`` the fit's projection,
    ``w`` the window, ``e_nu`` the bin's complex exponential), so white noise of one-sided
    density ``D`` gives ``D`` on average. Independent of the sample rate: the twin's 5 kHz
    records and the lab's 10 kHz streams compare directly."""
    A, _, _, res = _fit(y, phi, t, mains_hz, multiples, orders)
    fs = 1.0 / float(t[1] - t[0])
    w = np.hanning(res.shape[0])
    f = np.fft.rfftfreq(res.shape[0], 1.0 / fs)
    psd = 2.0 * np.abs(np.fft.rfft(res * w[:, None], axis=0)) ** 2 / (fs * np.sum(w**2))
    sel = (f >= band[0]) & (f <= band[1])
    Q, _ = np.linalg.qr(A)
    v = w[:, None] * np.exp(-2j * np.pi * np.outer(t - t[0], f[sel]))
    kept = np.sum(np.abs(v - Q @ (Q.T @ v)) ** 2, axis=0) / np.sum(np.abs(v) ** 2, axis=0)
    return np.sqrt(np.mean(psd[sel], axis=0) / np.mean(kept))


def mains_frequency(
    y: np.ndarray,
    phi: np.ndarray,
    t: np.ndarray,
    multiples=(1, 3, 5),
    lo: float = 49.8,
    hi: float = 50.2,
    step: float = 0.002,
) -> float:
    """The mains frequency [Hz] that minimises the residual of :func:`line_fit` on ``y`` (N,)
    (grid search plus a parabolic refinement)."""
    grid = np.arange(lo, hi + step / 2, step)
    rss = np.array([line_fit(y, phi, t, fm, multiples)[1][0] for fm in grid])
    i = int(np.clip(np.argmin(rss), 1, grid.size - 2))
    a, b, c = rss[i - 1 : i + 2]
    den = a - 2 * b + c
    return float(grid[i] + (0.5 * step * (a - c) / den if den > 0 else 0.0))


def transducer_forces(T, M, spacing: float = LAB_TRANSDUCER_SPACING_M):
    """(front, back) forces [N] of the lab's residual basis from the interface shear ``T`` [N]
    and moment ``M`` [N m]: ``T2N' [T; M]`` with ``rot = (u1 - u2) / spacing``."""
    return np.asarray(T) + np.asarray(M) / spacing, -np.asarray(M) / spacing


def gauge_strain_map(positions, calibration: float, spacing: float = LAB_TRANSDUCER_SPACING_M) -> np.ndarray:
    """The 2x2 matrix ``B`` with ``[eps1; eps2] = B [front; back]``: the gauge strains whose
    line ``M(x) = M0 - T x`` gives the front/back force pair (inverse of
    :func:`transducer_forces` after :func:`hbtest.method.sensors.moment_line`)."""
    d1, d2 = positions
    c = calibration
    # (T, M) = A eps with T = -c (e2 - e1) / (d2 - d1), M = c (e1 - d1 (e2 - e1) / (d2 - d1))
    A = c * np.array([[1 / (d2 - d1), -1 / (d2 - d1)], [1 + d1 / (d2 - d1), -d1 / (d2 - d1)]])
    F = np.array([[1.0, 1.0 / spacing], [0.0, -1.0 / spacing]])  # (front, back) = F (T, M)
    return np.linalg.inv(F @ A)


def lines_to_front_back(
    eps: np.ndarray, positions, calibration: float, spacing: float = LAB_TRANSDUCER_SPACING_M
) -> np.ndarray:
    """Gauge signals or phasors ``eps`` (2, ...) [strain] -> (front, back) forces (2, ...) [N]."""
    return np.tensordot(np.linalg.inv(gauge_strain_map(positions, calibration, spacing)), np.asarray(eps), axes=1)

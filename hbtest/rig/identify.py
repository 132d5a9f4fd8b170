"""A rig's modes from its own free decay: what a rig that is not told its modes (a lab rig,
unlike the twin) measures once so that the point loop can fit through the transient
(:class:`hbtest.rig.capabilities.KnownModes`) instead of waiting window by window.

The experiment (:func:`free_decay_modes`): on each actuator in turn, drive a broadband
multisine — orders 1..``orders`` of ``band_hz / orders`` [Hz], equal amplitudes whose sum (the
peak bound the safety layer checks) is ``voltage_v`` [V], Schroeder phases — for a few of its
periods, stop it abruptly and record the free decay on every channel (from within one period
of ``band_hz`` after the stop: a scope triggered by the generator's Sync starts its records at
a period boundary). The stop leaves every
mode within the band ringing with the energy the multisine put into it (a single sine stopped
at a random phase leaves a random step: a stiff mode such as the twin's 113 Hz beam mode was
not excited measurably, and the heavily damped 9 Hz rig mode came out merged with the 10.4 Hz
one in some runs). The modes are the poles of the decays by the matrix pencil method
(:func:`pencil_modes`): a block Hankel matrix over all channels of all decays (they share their
poles), its rank from the singular values standing out of the noise (:func:`signal_rank`), the poles from the shifted
signal subspace. Poles that do not decay within the record (DC offsets, mains lines), that lie
at the aliasing edge, or that decay within one sample, are left out.

Eigenvalues are in rad/s, one per conjugate pair with Im >= 0 (a real pole by itself), as
:meth:`KnownModes.modes` gives them; free decays follow ``exp(lambda t)``.
"""

from __future__ import annotations

import numpy as np

from .capabilities import Disarms

__all__ = ["DECIMATE_TO_HZ", "free_decay", "free_decay_modes", "multisine", "pencil_modes"]

DECIMATE_TO_HZ = 1000.0  # the decay record is block-averaged to about this rate (exact for exponentials)
MAX_ORDER = 40  # poles at most (20 oscillating modes)
SIGNAL_FLOOR = 2.0  # a singular value this many times the noise floor is signal
NUMERICAL_RANK = 1e-9  # singular values below this fraction of the largest are rounding
EDGE = 0.45  # poles above this fraction of the decimated Nyquist frequency are aliasing artefacts


def signal_rank(s: np.ndarray, max_order: int = MAX_ORDER) -> int:
    """The number of signal components among the singular values ``s`` (descending): every
    value :data:`SIGNAL_FLOOR` times above the noise floor (the median of the values beyond
    ``max_order``) and above the numerical rank, at least up to the largest drop, at most
    ``max_order``. The largest drop alone cut weak modes (the twin's 113 Hz beam mode) and the
    weaker half of a pair (its heavily damped 9 Hz mode came out as one real pole); the few
    noise components the floor lets in give poles that do not decay or decay within samples,
    left out below, or a heavily damped extra mode, harmless in a transient fit."""
    top = min(max_order, s.size - 1)
    gap = int(np.argmax(s[:top] / np.maximum(s[1:top + 1], 1e-300))) + 1
    floor = float(np.median(s[top:]))
    strong = (s[:top] >= SIGNAL_FLOOR * floor) & (s[:top] >= NUMERICAL_RANK * s[0])
    return max(gap, int(np.count_nonzero(strong)))


def pencil_modes(x: np.ndarray, dt: float, max_order: int = MAX_ORDER, min_decay_s: float = 0.0) -> np.ndarray:
    """Poles [rad/s] of the sum of damped exponentials in ``x`` (channels, samples), sampled
    every ``dt`` [s]: those with Im >= 0 that decay, below the aliasing edge, with a time
    constant of at most ``min_decay_s`` [s] when that is > 0; sorted by modulus."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    x = x / np.maximum(np.std(x, axis=1, keepdims=True), 1e-300)
    L = x.shape[1] // 3
    H = np.concatenate([np.lib.stride_tricks.sliding_window_view(row, L + 1) for row in x], axis=0)
    _, s, vt = np.linalg.svd(H, full_matrices=False)
    order = signal_rank(s, max_order)
    V = vt[:order].T
    z = np.linalg.eigvals(np.linalg.pinv(V[:-1]) @ V[1:]).astype(complex)
    z = z[(np.abs(z) > 1e-12) & (np.abs(z) < 1.0)]  # decaying; z = 0 is no pole
    lam = np.log(z) / dt
    keep = (lam.imag >= 0) & (np.abs(np.angle(z)) < EDGE * np.pi) & (np.abs(z) > np.exp(-1.0))
    if min_decay_s > 0:
        keep &= -lam.real > 1.0 / min_decay_s
    lam = lam[keep]
    return lam[np.argsort(np.abs(lam))]


def multisine(n_actuators: int, actuator: int, orders: int, voltage_v: float) -> np.ndarray:
    """The identification drive: (n_actuators, orders) complex coefficients of orders 1..``orders``
    on ``actuator``, equal amplitudes summing to ``voltage_v`` [V] (so its peak bound is
    ``voltage_v``), Schroeder phases (a low crest factor: the real peak is well below it)."""
    k = np.arange(1, orders + 1)
    V = np.zeros((n_actuators, orders), dtype=complex)
    V[actuator] = voltage_v / orders * np.exp(-1j * np.pi * k * (k - 1) / orders)
    return V


def free_decay(rig, actuator: int, band_hz: float, voltage_v: float, decay_s: float, orders: int,
               drive_periods: int) -> tuple[np.ndarray, float]:
    """One stop of the multisine (module docstring) on ``actuator``: the decay record
    (channels, samples) block-averaged to about :data:`DECIMATE_TO_HZ`, and its sample step [s]."""
    f0 = band_hz / orders
    V = multisine(len(rig.describe().actuators), actuator, orders, voltage_v)
    k = np.arange(1, orders + 1)
    rig.set_demand(f0, V, k, ramp_periods=0.5)
    rig.acquire(int(drive_periods))
    # the stop: zero demand at the band's top frequency, so that a rig whose records start at a
    # period boundary (a scope triggered by the generator's Sync) records from within 1 / band_hz
    # of the stop, not up to a period of the multisine later, when the fast modes have gone
    rig.set_demand(band_hz, np.zeros((V.shape[0], 1)), [1], ramp_periods=0.0)
    acq = rig.acquire(int(np.ceil(decay_s * band_hz)))
    x = np.stack([np.asarray(acq.data[c], dtype=float) for c in acq.data])
    block = max(1, int(round(acq.sample_rate_hz / DECIMATE_TO_HZ)))
    m = x.shape[1] // block
    return x[:, :m * block].reshape(x.shape[0], m, block).mean(axis=2), block / acq.sample_rate_hz


def free_decay_modes(rig, voltage_v: float, band_hz: float = 150.0, decay_s: float = 1.5, orders: int = 24,
                     drive_periods: int = 3) -> np.ndarray:
    """Run the free-decay experiment on ``rig`` (module docstring: every actuator in turn, a
    multisine of ``orders`` orders up to ``band_hz`` [Hz] with peak bound ``voltage_v`` [V],
    ``decay_s`` [s] of record after each stop) and return its modes (a mode must lose 2/3 of
    its amplitude within a third of the record to count). Leaves the rig at zero demand (at
    ``band_hz``), disarmed when it can be (:class:`~hbtest.rig.capabilities.Disarms`)."""
    n = len(rig.describe().actuators)
    decays = [free_decay(rig, a, band_hz, voltage_v, decay_s, orders, drive_periods) for a in range(n)]
    if isinstance(rig, Disarms):  # the pencil takes seconds of host time: no watchdog must wait on it
        rig.disarm()
    m = min(x.shape[1] for x, _ in decays)
    return pencil_modes(np.concatenate([x[:, :m] for x, _ in decays]), decays[0][1], min_decay_s=decay_s / 3)

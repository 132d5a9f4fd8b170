"""A rig's modes from its own free decay: what a rig that is not told its modes (a lab rig,
unlike the twin) measures once so that the point loop can fit through the transient
(:class:`hbtest.rig.capabilities.KnownModes`) instead of waiting window by window.

The experiment (:func:`free_decay_modes`): drive one actuator with a sine of ``voltage_v``
[V] at ``frequency_hz`` for a few periods, stop it abruptly (a step in the demand excites
every mode of the rig: shaker suspension, electrical and beam modes alike), record the free
decay on every channel. The modes are the poles of that record by the matrix pencil method
(:func:`pencil_modes`): a block Hankel matrix over all channels, its rank from the largest gap
of its singular values, the poles from the shifted signal subspace. Poles that do not decay
within the record (DC offsets, mains lines), that lie at the aliasing edge, or that decay
within one sample, are left out.

Eigenvalues are in rad/s, one per conjugate pair with Im >= 0 (a real pole by itself), as
:meth:`KnownModes.modes` gives them; free decays follow ``exp(lambda t)``.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DECIMATE_TO_HZ", "free_decay_modes", "pencil_modes"]

DECIMATE_TO_HZ = 500.0  # the decay record is block-averaged to about this rate (exact for exponentials)
MAX_ORDER = 40  # poles at most (20 oscillating modes)
EDGE = 0.45  # poles above this fraction of the decimated Nyquist frequency are aliasing artefacts


def pencil_modes(x: np.ndarray, dt: float, max_order: int = MAX_ORDER, min_decay_s: float = 0.0) -> np.ndarray:
    """Poles [rad/s] of the sum of damped exponentials in ``x`` (channels, samples), sampled
    every ``dt`` [s]: those with Im >= 0 that decay, below the aliasing edge, with a time
    constant of at most ``min_decay_s`` [s] when that is > 0; sorted by modulus."""
    x = np.atleast_2d(np.asarray(x, dtype=float))
    x = x / np.maximum(np.std(x, axis=1, keepdims=True), 1e-300)
    L = x.shape[1] // 3
    H = np.concatenate([np.lib.stride_tricks.sliding_window_view(row, L + 1) for row in x], axis=0)
    _, s, vt = np.linalg.svd(H, full_matrices=False)
    top = min(max_order, s.size - 1)
    order = int(np.argmax(s[:top] / np.maximum(s[1:top + 1], 1e-300))) + 1
    V = vt[:order].T
    z = np.linalg.eigvals(np.linalg.pinv(V[:-1]) @ V[1:]).astype(complex)
    z = z[(np.abs(z) > 1e-12) & (np.abs(z) < 1.0)]  # decaying; z = 0 is no pole
    lam = np.log(z) / dt
    keep = (lam.imag >= 0) & (np.abs(np.angle(z)) < EDGE * np.pi) & (np.abs(z) > np.exp(-1.0))
    if min_decay_s > 0:
        keep &= -lam.real > 1.0 / min_decay_s
    lam = lam[keep]
    return lam[np.argsort(np.abs(lam))]


def free_decay_modes(rig, frequency_hz: float, voltage_v: float, decay_s: float = 1.5, drive_periods: int = 8,
                     actuator: int = 0) -> np.ndarray:
    """Run the free-decay experiment on ``rig`` (module docstring) and return its modes
    (``decay_s`` [s] of record after the stop; a mode must lose 2/3 of its amplitude within
    a third of it to count). Leaves the rig at zero demand at ``frequency_hz``."""
    n = len(rig.describe().actuators)
    V = np.zeros((n, 1), dtype=complex)
    V[actuator, 0] = voltage_v
    rig.set_demand(frequency_hz, V, [1], ramp_periods=2.0)
    rig.acquire(int(drive_periods))
    rig.set_demand(frequency_hz, np.zeros_like(V), [1], ramp_periods=0.0)
    acq = rig.acquire(int(np.ceil(decay_s * frequency_hz)))
    x = np.stack([np.asarray(acq.data[c], dtype=float) for c in acq.data])
    block = max(1, int(round(acq.sample_rate_hz / DECIMATE_TO_HZ)))
    m = x.shape[1] // block
    xd = x[:, :m * block].reshape(x.shape[0], m, block).mean(axis=2)
    return pencil_modes(xd, block / acq.sample_rate_hz, min_decay_s=decay_s / 3)

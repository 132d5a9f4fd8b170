"""Guard of a point's predicted start on a rig whose channel limits *trip* (a box with
``[box.channel_limits]``): a start demand the rig model predicts to drive a channel near its
window is not sent.

Why: the profile's start demand at a new frequency is a Newton step of the linear rig model
``Y(V) = Y_x + G (V - V_x)`` (outputs extrapolated in frequency and the carried Jacobian) with
the exact numerical substructure. Next to a lightly damped mode of the emulated structure that
step can overshoot: on the paper cantilever through the box (7 points, 16-19 Hz) the start
extrapolated to 19 Hz was 4.4 V where the solution is 0.76 V, and its *steady state* drove the
lasers to 9.06 / 10.7 V against the 9 V windows — a trip that ends the sweep. (On a rig that
only clips, the profile restarts after the fact: ``HbtestProfile.restart_on_overrange``.)

The rig model itself is accurate there (the rig is linear and smooth across the band; only the
emulated structure is resonant), so the channel peaks of a candidate demand are predicted from
it: interface ``u, theta`` and ``T, M`` from ``Y(V)``, each channel through the layout (a laser
at lever position ``p`` reads ``u + p theta``; a gauge at ``d`` reads ``(M - T d) / c``; filter
response included), peak bound ``sum_k |x_k|`` over the orders, raw volts
``(physical - offset) / scale``. A predicted start above :data:`GUARD_FRACTION` of a window
is replaced by the previous point's demand (the safe start); if that too is predicted above
the window the run says so before anything is sent.

Units: raw channel volts; metres, radians, newtons, newton metres.
"""

from __future__ import annotations

import numpy as np

from ..method import harmonics

__all__ = ["GUARD_FRACTION", "channel_windows", "guard_start", "predicted_channel_peaks"]

#: a predicted start above this fraction of a channel window is not sent (the iteration's
#: trial demands, the ramp and the noise ride on top of the predicted steady state)
GUARD_FRACTION = 0.9


def channel_windows(rig) -> dict[str, tuple[float, float]]:
    """The rig's tripping channel windows [raw V] (its description's ``channel_windows_v``;
    empty for a rig without any)."""
    w = rig.describe().details.get("channel_windows_v") or {}
    return {str(c): (float(lo), float(hi)) for c, (lo, hi) in w.items()}


def predicted_channel_peaks(layout, U: np.ndarray, F: np.ndarray, frequency_hz: float, orders) -> dict[str, tuple[float, float]]:
    """Per channel the (low, high) raw-volt extremes bound of the interface motion ``U`` (2,
    n_orders) [m, rad] and forces ``F`` (2, n_orders) [N, N m] at ``orders``."""
    orders = np.asarray(orders)
    out = {}
    for ch in layout.channels:
        if ch.kind == "laser":
            x = U[0] + ch.position * U[1]
        else:
            x = (F[1] - F[0] * ch.position) / layout.gauge_calibration
        x = x * np.array([ch.filter_response(k * frequency_hz) if k else 1.0 for k in orders])
        peak = float(np.sum(np.abs(x)))
        a, b = (peak - ch.offset) / ch.scale, (-peak - ch.offset) / ch.scale
        out[ch.name] = (min(a, b), max(a, b))
    return out


def _outputs(profile, loop, num, carry, V):
    """(U, F) the carried rig model predicts for the packed demand ``V`` at ``num``'s frequency."""
    V_x, Y_x = profile.extrapolated(carry, num.frequency_hz, profile.single_harmonic(loop))
    Y = Y_x + carry.G @ (np.asarray(V) - V_x)
    n = 2 * loop.p
    scaleY = loop.output_scale(num)
    U = harmonics.unpack((Y[:n] / scaleY[:n]).reshape(2, loop.p), loop.orders)
    F = harmonics.unpack((Y[n:] / scaleY[n:]).reshape(2, loop.p), loop.orders)
    return U, F


def _worst(peaks, windows) -> tuple[str, float, float] | None:
    """(channel, predicted extreme, window bound) of the channel closest to its window beyond
    GUARD_FRACTION, or None."""
    found = []
    for name, (lo, hi) in windows.items():
        plo, phi = peaks.get(name, (0.0, 0.0))
        for value, bound in ((phi, hi), (plo, lo)):
            if bound != 0 and value / bound >= GUARD_FRACTION:
                found.append((value / bound, name, value, bound))
    return max(found)[1:] if found else None


def guard_start(profile, loop, num, carry, V) -> tuple[np.ndarray, str | None]:
    """The start demand to send: ``V`` (packed) when the rig model predicts every tripping
    channel within GUARD_FRACTION of its window, else the previous point's demand; the note
    says what was done (None: nothing). When even the previous demand is predicted beyond a
    window, a warning goes to the loop's progress before anything is sent."""
    windows = channel_windows(loop.rig)
    if not windows:
        return V, None
    f = num.frequency_hz

    def worst(v):
        U, F = _outputs(profile, loop, num, carry, v)
        return _worst(predicted_channel_peaks(loop.layout, U, F, f, loop.orders), windows)

    bad = worst(V)
    if bad is None:
        return V, None
    safe = loop.start_voltage(carry)
    note = (f"the predicted start would drive {bad[0]} to {bad[1]:.3g} V (window bound {bad[2]:.3g} V): "
            f"started from the previous point's demand instead")
    still = worst(safe)
    if still is not None and loop.progress:
        from ..events import Notice

        loop.progress(Notice(f"warning: {f:g} Hz: even the previous point's demand is predicted to drive {still[0]} to "
                             f"{still[1]:.3g} V (window bound {still[2]:.3g} V): the rig may trip at this point"))
    return safe, note

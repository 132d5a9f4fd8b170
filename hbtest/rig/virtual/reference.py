"""The twin's exact truths (for tests and the reference data of the point loop, never for
control), computed from the *full* FE model in the frequency domain — no modal truncation,
no time stepping.

Conventions: harmonic coefficients follow :mod:`hbtest.method.harmonics` (``X_k = a_k - i b_k``, DC
real); channels in raw volts ``(physical - offset) / scale``; interface displacement
(u [m], theta [rad]) of the clamp = the PS beam's node 0; interface forces (T [N], M [N m]) are
the generalised forces applied to the PS beam at x = 0 (``D_P [u, theta] = [T, M]``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...method.substructure import Substructure
from .model import Model, filter_response, input_harmonics, zoh

__all__ = [
    "SteadyState",
    "ps_substructure",
    "mechanical_response",
    "steady_state",
    "emulated_interface_response",
    "frequency_response",
    "reduction_error",
]


@dataclass(frozen=True)
class SteadyState:
    """Exact periodic steady state of the twin (noise-free; see
    :meth:`VirtualRig.steady_state`). Coefficients follow :mod:`hbtest.method.harmonics`, last axis =
    ``orders``. channels: name -> raw volts; displacement: (u [m], theta [rad]); force: (T [N],
    M [N m]) applied to the PS beam at x = 0; amplifier_input: the demand after the amplifier
    polynomial [V] (before the gain)."""

    frequency_hz: float
    orders: np.ndarray
    channels: dict
    displacement: np.ndarray
    force: np.ndarray
    amplifier_input: np.ndarray
    exact: bool


def ps_substructure(model: Model) -> Substructure:
    """The twin's PS beam as a substructure with interface (u0, theta0)."""
    return Substructure(model.beam, ("u0", "theta0"))


def mechanical_response(model: Model, s: complex, u: np.ndarray) -> np.ndarray:
    """Full-model mechanical DOFs ``q`` (beam, armatures) for amplifier inputs ``u`` (2, ...)
    at the Laplace variable ``s``: the coil currents eliminated,
    ``i = (g u - K_f s z) / (s L + R)``, so
    ``(s^2 M + s C + K + diag(K_f^2 s / (s L + R))) q = K_f g u / (s L + R)`` on the armatures."""
    m = model
    M, C, K = m.MCK
    D = s * s * M + s * C + K
    rhs = np.zeros((m.nm,) + np.shape(u)[1:], complex)
    for j, sh in enumerate(m.spec.shakers):
        z = m.nb + j
        Z = s * sh.inductance + sh.resistance
        D[z, z] += sh.force_constant**2 * s / Z
        rhs[z] = sh.force_constant * sh.amplifier_gain * np.asarray(u)[j] / Z
    return np.linalg.solve(D, rhs)


def steady_state(model: Model, frequency_hz: float, voltage, orders, output_orders=None) -> SteadyState:
    """Exact periodic steady state for the demand ``voltage`` (2, n_orders) at
    ``frequency_hz`` — noise-free raw channel volts (filters, delay, zero-order hold and
    amplifier polynomial included) and the exact PS interface (u, theta, T, M) with
    ``T, M`` the generalised forces applied to the PS beam at x = 0 (interface rows of
    ``D_beam(s) q``). Per harmonic ``x = (sE - A)^-1 B U_k ZOH(s) e^{-s tau}``, each channel
times its filter and its skew's ``e^{-s skew}``; the aliases of
    the held input above Nyquist are neglected (below 1e-7 relative here). ``output_orders``
    (default ``orders``) selects the harmonics returned. With friction the result is the
    friction-free response (``exact=False``); likewise with nonlinear elements
    (the linear part's response; the joined structure's exact reference is
    :mod:`hbtest.rig.virtual.emulated`)."""
    m = model
    spec = m.spec
    dt = 1.0 / m.fs
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    out = orders if output_orders is None else np.atleast_1d(np.asarray(output_orders, dtype=int))
    U = input_harmonics(spec.shakers, voltage, orders, out)
    w = 2 * np.pi * float(frequency_hz)
    nc = m.scale.size
    ch = np.zeros((nc, out.size), complex)
    disp = np.zeros((2, out.size), complex)
    force = np.zeros((2, out.size), complex)
    b = m.beam
    for i, k in enumerate(out):
        s = 1j * k * w
        gain = complex(zoh(s, dt)) * np.exp(-s * spec.actuation_delay)
        x = mechanical_response(m, s, U[:, i]) * gain
        y = m.C_raw[:nc, : m.nm] @ x
        for j in range(nc):
            y[j] *= complex(filter_response(m.channel_filters[j], s))
            if m.skew[j] != 0.0:
                y[j] *= np.exp(-s * m.skew[j])  # the channel samples skew seconds late
        if k == 0:
            y = np.real(y) - m.offset
        ch[:, i] = y / m.scale
        q = x[: m.nb]
        disp[:, i] = q[:2]
        force[:, i] = (b.dynamic_stiffness(s) @ q)[:2]
        if k == 0:
            disp[:, i], force[:, i], ch[:, i] = np.real(disp[:, i]), np.real(force[:, i]), np.real(ch[:, i])
    return SteadyState(
        frequency_hz=float(frequency_hz),
        orders=out,
        channels={c: ch[j] for j, c in enumerate(m.layout.channel_names)},
        displacement=disp,
        force=force,
        amplifier_input=U,
        exact=not (spec.friction.active or spec.nonlinear),
    )


def emulated_interface_response(model: Model, ns: Substructure, force_vector, frequency_hz: float, orders) -> np.ndarray:
    """Exact interface displacement (2, n_orders) of the emulated (hybrid) structure:
    the numerical substructure ``ns`` joined to the twin's PS beam, forced by
    ``force_vector`` (on all NS DOFs, [N]) at the fundamental only:
    ``U_k = (D_N + D_P)^-1 F_N,cond`` at ``s = i k Omega`` (zero for k != 1)."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    out = np.zeros((2, orders.size), complex)
    ps = ps_substructure(model)
    for i, k in enumerate(orders):
        if k != 1:
            continue
        s = 2j * np.pi * float(frequency_hz)
        Fc = ns.condensed_force(np.asarray(force_vector, dtype=complex), s)
        out[:, i] = np.linalg.solve(ns.dynamic_stiffness(s) + ps.dynamic_stiffness(s), Fc)
    return out


def frequency_response(model: Model, frequency_hz, reduced: bool = False) -> np.ndarray:
    """Continuous-time transfer (channels in layout order [physical units], 2 actuators [per V
    of amplifier input]) at ``frequency_hz`` (scalar), filters included, without hold, delay
    and skew: full model, or the simulated modal model when ``reduced``."""
    m = model
    s = 2j * np.pi * float(frequency_hz)
    if not reduced:
        G = m.C_raw[: m.scale.size, : m.nm] @ mechanical_response(m, s, np.eye(2))
        return G * np.array([filter_response(f, s) for f in m.channel_filters])[:, None]
    # the diagonal model: sum over all modal states (representatives expanded)
    G = np.zeros((m.scale.size, 2), complex)
    for i, lam in enumerate(m.lam):
        term = np.outer(m.Cy[:, i] / m.fac[i], m.Bz[i, :2]) / (s - lam)
        G += term if m.fac[i] == 1.0 else term + np.conj(np.outer(m.Cy[:, i] / m.fac[i], m.Bz[i, :2])) / (s - np.conj(lam))
    return G + m.Dy[:, :2]


def reduction_error(model: Model, frequencies_hz) -> float:
    """Largest relative error (per channel, against the channel's largest response over
    both actuators) of the simulated modal model against the full model."""
    err = 0.0
    for f in np.atleast_1d(frequencies_hz):
        Gf = frequency_response(model, f)
        Gr = frequency_response(model, f, reduced=True)
        err = max(err, float(np.max(np.abs(Gr - Gf).max(axis=1) / np.abs(Gf).max(axis=1))))
    return err

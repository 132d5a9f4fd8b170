"""The time-stepping loop of a classical real-time hybrid test (RTHT, docs/method.md §4): :func:`simulate`
(the hybrid loop), :func:`simulate_emulated` (the monolithic reference), :class:`Excitation`,
:class:`ClassicalResult`, and the size check of a run (:func:`check_run_size`).

The loop
--------
A hybrid structure is a numerical substructure (NS, a :class:`~hbtest.method.substructure.Substructure`
with ``n`` DOFs) and a physical substructure (PS) sharing ``n_ch`` interface channels (one
actuator each; the NS and PS interface lists correspond entry by entry). Every real-time step
``dt`` (1 ms .. 0.2 ms is typical) the controller

1. reads the measured PS interface force ``r`` and actuator displacement ``x`` (samples),
2. advances the NS ``M q'' + C q' + K q = f_ext(t) - E r`` one step and takes its interface
   demand ``z = E^T q`` (with ``z'``, ``z''`` from the NS's own velocity and acceleration),
3. passes the demand through a compensator (:class:`NoCompensation`,
   :class:`PolynomialPredictor`, :class:`AdaptiveForwardPredictor`,
   :class:`InverseModelCompensator`, :class:`MinimalControlSynthesis`) to the command ``u``,
4. sends ``u`` to the transfer system (:class:`TransferSystem`: pure delay, first- or
   second-order lag, each with a delay), which moves the PS.

Time integration (exact, unconditionally stable)
-----------------------------------------------
Every continuous part is a linear state space discretised *exactly* for a first-order hold
(inputs linear between samples; block matrix exponential, :func:`discretize_foh`):

- the NS, states ``[q; q']``, inputs the measured force and the harmonic external force;
- the "plant" = transfer system in series with the PS, states ``[actuator; PS bulk q_b, q_b']``,
  inputs the delayed command ``(u, u', u'')``, outputs the interface force ``r`` and the
  actuator motion ``(x, x', x'')``. The PS is driven by prescribed interface motion:
  ``M_bb q_b'' + C_bb q_b' + K_bb q_b = -(M_bi x'' + C_bi x' + K_bi x)`` and
  ``r = M_ii x'' + C_ii x' + K_ii x + M_ib q_b'' + C_ib q_b' + K_ib q_b``; its transfer
  function is the condensed ``D_P(s)``. A PS with inertia at the interface needs ``x''``
  (the neutral delay equation of continuous structures): the pure-delay actuator delivers
  the delayed NS acceleration, a second-order lag its own acceleration.

The command samples reach the actuator as a piecewise-linear signal delayed by ``tau`` (a
fractional number of steps is allowed). Because the force sample at ``t_{k+1}`` depends only
on commands up to ``t_{k+1} - tau``, a delay of at least one step (``tau >= dt``, the
unavoidable computation latency of a digital loop) makes the first-order hold causal, and
the loop approximates the continuous delay equation of :mod:`hbtest.realtime.stability` to
``O(dt^2)``: ``(D_N(s) + D_P(s) G(s) C(s)) U = F`` with ``G`` the transfer system and ``C``
the compensator. (A zero-order hold in the loop would add an effective ``dt/2`` of delay.)

Accuracy measures: synchronisation error ``e2 = z - x``; global error against the emulated
(monolithic, delay-free) structure simulated with the same integrator; subspace plot
(``x`` against ``z``, :func:`subspace_figure`); growth rate from the log-envelope of the
response (:func:`growth_rate`); delay and amplification of each PS interface signal against
its NS counterpart at a periodic point (:func:`delay_and_amplification`).

Size of a run
-------------
The whole history (demand, command, actuator, force, emulated response: about
``8 (4 + 13 n_ch)`` bytes a step) is kept in memory and the loop costs some 20-40 us a step,
so a run is bounded to :data:`hbtest.realtime.classical.limits.MAX_STEPS` steps and its delay line to the run itself
(``tau <= duration``); the external drive is precomputed in blocks of
:data:`DRIVE_BLOCK_STEPS` steps, so memory does not grow with the NS size times the steps.

Units: SI throughout (m, N, s); frequencies in Hz where named ``_hz``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .compensators import Compensator, History, NoCompensation
from .limits import MAX_STEPS
from .response import GrowthRate, fundamental_amplitude, growth_rate
from .systems import HybridSystem, ns_state_space, plant_state_space
from .transfer import TransferSystem, discretize_foh

__all__ = ["DRIVE_BLOCK_STEPS", "check_run_size", "Excitation", "ClassicalResult", "simulate", "simulate_emulated"]

_TWO_PI = 2.0 * np.pi

DRIVE_BLOCK_STEPS = 4096
"""Steps of the harmonic external drive computed at once inside the loop."""

HISTORY_PAD_STEPS = 64
"""Smallest history kept before ``t = 0`` (initial values) for predictors and the delay line."""


def check_run_size(dt: float, duration: float, delay: float = 0.0) -> int:
    """The number of steps of a run of ``duration`` [s] at ``dt`` [s]; ValueError when ``dt``
    or ``duration`` are not positive and finite, the run exceeds :data:`MAX_STEPS` steps, or
    the delay [s] exceeds the run (the delay line would hold more than the run)."""
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError(f"dt must be positive and finite, got {dt}")
    if not (math.isfinite(duration) and duration > 0):
        raise ValueError(f"duration must be positive and finite, got {duration}")
    steps = duration / dt
    if steps > MAX_STEPS:
        raise ValueError(f"a run of {duration:g} s at dt = {dt:g} s has {steps:.3g} steps, more than {MAX_STEPS:,} "
                         "(the loop keeps its whole history in memory)")
    if not (math.isfinite(delay) and 0 <= delay <= duration):
        raise ValueError(f"the delay ({delay:g} s) must be between 0 and the run's duration ({duration:g} s)")
    return int(round(steps))


@dataclass(frozen=True)
class Excitation:
    """Harmonic external force ``amplitude * Re(F e^{i 2 pi f t})`` with ``F`` the
    system's force vector; ``frequency_hz = 0`` or ``amplitude = 0``: none."""

    frequency_hz: float = 0.0
    amplitude: float = 1.0

    @property
    def active(self) -> bool:
        return self.frequency_hz > 0 and self.amplitude != 0

    def harmonic(self, t: np.ndarray) -> np.ndarray:
        """``(cos w t, sin w t)`` columns at the times ``t`` [s] (zeros when inactive)."""
        t = np.asarray(t, dtype=float)
        if not self.active:
            return np.zeros((t.size, 2))
        w = _TWO_PI * self.frequency_hz
        return np.column_stack([np.cos(w * t), np.sin(w * t)])


@dataclass
class ClassicalResult:
    """One classical hybrid-test run. Arrays over time (rows) and interface channels
    (columns), SI units: ``t`` [s], ``z`` demand (NS interface displacement), ``x`` actuator
    (PS interface) displacement, ``u`` command, ``r`` measured PS interface force,
    ``z_emulated`` the emulated structure's interface displacement (or None).
    ``blew_up``: the run stopped early at ``t[-1]`` because ``|z|`` exceeded the blow-up
    limit. ``trace``: adapted compensator parameters over time."""

    t: np.ndarray
    z: np.ndarray
    x: np.ndarray
    u: np.ndarray
    r: np.ndarray
    z_emulated: np.ndarray | None
    dt: float
    delay: float
    excitation: Excitation
    compensator: str
    blew_up: bool = False
    trace: dict = field(default_factory=dict)

    @property
    def sync_error(self) -> np.ndarray:
        """``e2 = z - x``."""
        return self.z - self.x

    @property
    def global_error(self) -> np.ndarray | None:
        """``z - z_emulated``."""
        return None if self.z_emulated is None else self.z - self.z_emulated

    def _tail(self, a: np.ndarray, fraction: float) -> np.ndarray:
        n = a.shape[0]
        return a[int(n * (1 - fraction)) :]

    def rms_sync_error(self, fraction: float = 0.5) -> float:
        """RMS of ``e2`` over the last ``fraction`` of the record (all channels)."""
        return float(np.sqrt(np.mean(self._tail(self.sync_error, fraction) ** 2)))

    def rms_global_error(self, fraction: float = 0.5) -> float:
        g = self.global_error
        return float("nan") if g is None else float(np.sqrt(np.mean(self._tail(g, fraction) ** 2)))

    @property
    def stable(self) -> bool:
        """Neither blown up nor growing (:attr:`GrowthRate.unstable`)."""
        return not self.blew_up and not self.growth().unstable

    def growth(self, skip_fraction: float = 0.2) -> GrowthRate:
        """Growth rate of the demand and the actuator displacement together
        (:func:`growth_rate`, harmonic steady part removed): a loop instability shows in both,
        an instability of the compensator-actuator loop (e.g. adaptive gains) first in ``x``."""
        f = self.excitation.frequency_hz if self.excitation.active else 0.0
        return growth_rate(self.t, np.hstack([self.z, self.x]), f, skip_fraction)

    def steady_amplitude(self, periods: int = 10) -> np.ndarray:
        """Complex amplitude of ``z`` at the forcing frequency from the last ``periods``
        whole periods (per channel)."""
        f = self.excitation.frequency_hz
        n = int(round(periods / f / self.dt)) + 1
        n = min(n, self.t.size)
        return fundamental_amplitude(self.t[-n:], self.z[-n:], f)



@dataclass(frozen=True)
class _DiscreteLoop:
    """The loop's discrete-time matrices (first-order hold): the NS state update split into its
    feedback part (``_r``) and the harmonic drive (``_h``), the NS outputs (z, z', z'') and the
    plant (transfer system with the PS) from the delayed command to (r, x)."""

    Phin: np.ndarray
    Gan_r: np.ndarray
    Gbn_r: np.ndarray
    Gan_h: np.ndarray
    Gbn_h: np.ndarray
    Cz3: np.ndarray
    Dz3_r: np.ndarray
    acc_h: np.ndarray
    harm: np.ndarray
    Php: np.ndarray
    Gap: np.ndarray
    Gbp: np.ndarray
    Cpl: np.ndarray
    Dpl: np.ndarray

    @classmethod
    def build(cls, system: HybridSystem, transfer: TransferSystem, excitation: Excitation, dt: float, t) -> "_DiscreteLoop":
        nc = system.n_ch
        An, Bn, Cz, Czd, Czdd, Dzdd = ns_state_space(system.ns, system.force * excitation.amplitude)
        Phin, Gan, Gbn = discretize_foh(An, Bn, dt)
        Ap, Bp, Cr, Dr, Cx, Dx = plant_state_space(transfer, system.ps)
        Php, Gap, Gbp = discretize_foh(Ap, Bp, dt)
        harm = excitation.harmonic(t)  # (n_steps + 1, 2)
        return cls(Phin=Phin, Gan_r=Gan[:, :nc], Gbn_r=Gbn[:, :nc], Gan_h=Gan[:, nc:], Gbn_h=Gbn[:, nc:],
                   Cz3=np.vstack([Cz, Czd, Czdd]),  # (3 nc, 2 nn)
                   Dz3_r=np.vstack([np.zeros((2 * nc, nc)), Dzdd[:, :nc]]),
                   acc_h=harm @ Dzdd[:, nc:].T,  # (n_steps + 1, nc)
                   harm=harm, Php=Php, Gap=Gap, Gbp=Gbp, Cpl=np.vstack([Cr, Cx]), Dpl=np.vstack([Dr, Dx]))


def _blowup_limit(system: HybridSystem, dt: float, duration: float, excitation: Excitation, initial_displacement,
                  emulated: bool, blowup: float):
    """(the emulated structure's interface response or None, the per-channel blow-up limit)."""
    zem = None
    ref = np.zeros(system.n_ch)
    if emulated:
        zem = simulate_emulated(system, dt, duration, excitation, initial_displacement)
        ref = np.abs(zem).max(axis=0)
    if initial_displacement is not None:
        ref = np.maximum(ref, np.abs(np.asarray(initial_displacement, dtype=float)[system.ns.interface_index]))
    return zem, np.where(ref > 0, blowup * ref, np.inf)


def _march(m: _DiscreteLoop, comp, Z, U, X, R, xn, limit, n_steps: int, dt: float, jd: int, fd: float, pad: int):
    """Step the loop from rest (the plant at rest, the NS at ``xn``), filling the histories;
    returns (last step, blew up)."""
    nc = R.shape[1]
    Phin, Gan_r, Gbn_r, Gan_h, Gbn_h, Cz3, Dz3_r = m.Phin, m.Gan_r, m.Gbn_r, m.Gan_h, m.Gbn_h, m.Cz3, m.Dz3_r
    acc_h, harm, Php, Gap, Gbp, Cpl, Dpl = m.acc_h, m.harm, m.Php, m.Gap, m.Gbp, m.Cpl, m.Dpl
    xp = np.zeros(Php.shape[0])
    Ua = U.a
    Ua_flat = Ua.reshape(Ua.shape[0], -1)

    def delayed(k):
        i = k - jd + pad
        if i <= 0:
            return Ua_flat[0]
        return (1 - fd) * Ua_flat[i] + fd * Ua_flat[i - 1] if fd > 1e-12 else Ua_flat[i]

    # step 0
    w0 = delayed(0)
    y0 = Cpl @ xp + Dpl @ w0
    r0 = y0[:nc]
    z3 = Cz3 @ xn + Dz3_r @ r0
    z3[2 * nc :] += acc_h[0]
    Z[0] = z3.reshape(3, nc)
    Z.a[: Z.pad] = Z[0] * np.array([1.0, 0.0, 0.0])[:, None]
    X[0], R[0] = y0[nc:], r0
    comp.start(dt, nc, n_steps)
    U[0] = comp.command(0, Z, X)
    Za, Xa, zp = Z.a, X.a, Z.pad
    drive, k0 = None, 0
    for k in range(n_steps):
        if k - k0 >= DRIVE_BLOCK_STEPS or drive is None:  # harmonic drive of the next block of steps
            k0 = k
            k1 = min(k0 + DRIVE_BLOCK_STEPS, n_steps)
            drive = harm[k0:k1] @ Gan_h.T + harm[k0 + 1 : k1 + 1] @ Gbn_h.T
        w1 = delayed(k + 1)
        xp = Php @ xp + Gap @ w0 + Gbp @ w1
        y1 = Cpl @ xp + Dpl @ w1
        r1 = y1[:nc]
        xn = Phin @ xn + drive[k - k0] + Gan_r @ r0 + Gbn_r @ r1
        z3 = Cz3 @ xn + Dz3_r @ r1
        z3[2 * nc :] += acc_h[k + 1]
        Za[k + 1 + zp] = z3.reshape(3, nc)
        Xa[k + 1 + zp] = y1[nc:]
        R[k + 1] = r1
        Ua[k + 1 + pad] = comp.command(k + 1, Z, X)
        w0, r0 = w1, r1
        if np.any(np.abs(z3[:nc]) > limit) or np.any(np.abs(y1[nc:]) > limit) or not np.all(np.isfinite(z3[:nc])):
            return k + 1, True
    return n_steps, False


def simulate(system: HybridSystem, transfer: TransferSystem, compensator: Compensator | None = None,
             dt: float = 2e-4, duration: float = 2.0, excitation: Excitation = Excitation(),
             initial_displacement=None, emulated: bool = True, blowup: float = 1e6) -> ClassicalResult:
    """Run a classical real-time hybrid test (see the module docstring for the loop and the
    integrator). ``transfer.delay`` must be at least ``dt`` and at most ``duration``; the run
    at most :data:`MAX_STEPS` steps (:func:`check_run_size`). ``initial_displacement``: NS
    DOF displacements at ``t = 0`` [m | rad] (history: at rest, command zero before 0).
    ``emulated``: also simulate the emulated structure for the global error. The run stops
    early (``blew_up``) when the demand or the actuator displacement of a channel exceeds
    ``blowup`` times that channel's largest emulated (or initial) displacement."""
    if not (math.isfinite(dt) and dt > 0):
        raise ValueError("dt must be positive")
    if transfer.delay < dt * (1 - 1e-9):
        raise ValueError(f"the transfer delay ({transfer.delay:g} s) must be at least one time step ({dt:g} s): a digital loop has one step of latency")
    n_steps = check_run_size(dt, duration, transfer.delay)
    comp = NoCompensation() if compensator is None else compensator
    nc = system.n_ch
    t = dt * np.arange(n_steps + 1)
    m = _DiscreteLoop.build(system, transfer, excitation, dt, t)
    nn = system.ns.structure.n_dof
    xn = np.zeros(2 * nn)
    if initial_displacement is not None:
        xn[:nn] = np.asarray(initial_displacement, dtype=float)
    zem, limit = _blowup_limit(system, dt, duration, excitation, initial_displacement, emulated, blowup)
    # the delayed command at step k: linear interpolation at k - dpos
    dpos = max(transfer.delay / dt, 1.0)
    jd = int(math.floor(dpos + 1e-12))
    fd = dpos - jd  # u(k - dpos) = (1 - fd) u[k - jd] + fd u[k - jd - 1]
    pad = max(HISTORY_PAD_STEPS, jd + 2, int(getattr(comp, "n_samples", 0)) + 1)
    Z = History(n_steps, (3, nc), pad)
    U = History(n_steps, (3, nc), pad)
    X = History(n_steps, (nc,), pad)
    R = np.zeros((n_steps + 1, nc))
    last, blew = _march(m, comp, Z, U, X, R, xn, limit, n_steps, dt, jd, fd, pad)
    sl = slice(0, last + 1)
    tr = {key: v[sl] for key, v in comp.trace().items()}
    return ClassicalResult(
        t=t[sl], z=Z.values(last)[:, 0].copy(), x=X.values(last).copy(), u=U.values(last)[:, 0].copy(), r=R[sl],
        z_emulated=None if zem is None else zem[sl], dt=dt, delay=transfer.delay, excitation=excitation,
        compensator=comp.name, blew_up=blew, trace=tr,
    )


def simulate_emulated(system: HybridSystem, dt: float, duration: float, excitation: Excitation = Excitation(),
                      initial_displacement=None) -> np.ndarray:
    """Interface displacement (n_steps + 1, n_ch) of the emulated (monolithic, delay-free)
    structure with the same exact first-order-hold integrator, forcing and initial NS
    displacement (PS bulk at rest). At most :data:`MAX_STEPS` steps."""
    n_steps = check_run_size(dt, duration)
    S = system.emulated()
    n = S.n_dof
    nn = system.ns.structure.n_dof
    nb = len(system.ns.bulk_index)
    nc = system.n_ch
    # join() orders DOFs as (NS bulk, interface, PS bulk); map NS DOFs into it
    ns_order = system.ns.bulk_index + system.ns.interface_index
    P = np.zeros((n, nn))
    P[np.arange(nn), ns_order] = 1.0
    F = P @ (system.force * excitation.amplitude)
    Minv = np.linalg.inv(S.M)
    A = np.block([[np.zeros((n, n)), np.eye(n)], [-Minv @ S.K, -Minv @ S.C]])
    B = np.vstack([np.zeros((n, 2)), Minv @ np.column_stack([F.real, -F.imag])])
    Phi, Ga, Gb = discretize_foh(A, B, dt)
    H = excitation.harmonic(dt * np.arange(n_steps + 1))
    x = np.zeros(2 * n)
    if initial_displacement is not None:
        x[:n] = P @ np.asarray(initial_displacement, dtype=float)
    out = np.zeros((n_steps + 1, nc))
    sel = slice(nb, nb + nc)
    out[0] = x[sel]
    for k0 in range(0, n_steps, DRIVE_BLOCK_STEPS):
        k1 = min(k0 + DRIVE_BLOCK_STEPS, n_steps)
        drive = H[k0:k1] @ Ga.T + H[k0 + 1 : k1 + 1] @ Gb.T
        for j in range(k1 - k0):
            x = Phi @ x + drive[j]
            out[k0 + j + 1] = x[sel]
    return out

"""The twin's linear physics model, assembled and diagonalised once per (spec, layout, fs).

Units SI; signs of :mod:`hbtest.rig.virtual` (x from the pin axis, ``u`` up, ``theta``
counter-clockwise). Mechanical DOFs: the PS beam's (node 0 = the clamp's u, theta = the
interface), then the two shaker armatures ``z1, z2`` (up). First-order form
``E x' = A x + B u`` with ``x = (q, q', i1, i2)`` (coil currents [A]); inputs ``u`` =
(amplifier input 1 [V], amplifier input 2 [V], friction force on the slider [N], friction
torque on the pin [N m]), then with ``[[virtual.nonlinear]]`` elements one generalised force
[N or N m] on each beam DOF an element acts on (:class:`NonlinearTerms`). Raw outputs
(``C_raw`` rows): one per channel of the sensor layout in its order (a laser at lever
position p: ``u + p theta`` [m]; a gauge at x = d: unfiltered strain ``-(h/2) w''(d)``), then
u' [m/s], theta' [rad/s], then (elements) the displacements and the velocities of the element
DOFs.

The model is diagonalised (generalised eigenproblem, left and right vectors): modes with
``|lambda| < 2 pi modal_cutoff_hz`` kept, the rest a static correction matching the full
model's DC gain; the channel Butterworth filters appended by partial fractions; each mode
discretised exactly for the zero-order-hold DAC with the fractional actuation delay
(``a = e^{lambda dt}``, weights ``c_now``/``c_prev`` of the two held inputs over a sample); a
channel's skew (it samples ``skew`` seconds late) is the same exact partial step from an
earlier sample (``skew_*`` weights).
The amplifier polynomial ``v + a2 v^2 + a3 v^3`` (static, before the gain) is here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.signal

from ...method.sensors import SensorLayout
from ...method.structures import Beam
from ...method.structures import beam as make_beam
from .spec import VirtualSpec

#: |lambda h| below which the first-order-hold weight c1 is taken from its series (the closed
#: form cancels: relative rounding ~ 1e-16 / |lambda h|^2)
FOH_SERIES_BELOW = 1e-4
#: explicit element forces: a contact's stiffness times the element's displacement after one
#: sub-step of unit force from rest (~ (omega h)^2 / 2 of the contact frequency) must stay
#: below this (omega h < 0.1: the extrapolated first-order hold is then stable and within
#: ~1e-4), a friction element's slope F_c / v_s times its velocity after that sub-step
#: (~ c h / m) below EXPLICIT_DAMPING_LIMIT
EXPLICIT_STIFFNESS_LIMIT = 5e-3
EXPLICIT_DAMPING_LIMIT = 0.5
EXPLICIT_FEEDTHROUGH_LIMIT = 0.5

__all__ = ["Model", "NonlinearTerms", "EXPLICIT_STIFFNESS_LIMIT", "EXPLICIT_DAMPING_LIMIT", "EXPLICIT_FEEDTHROUGH_LIMIT", "build_model", "assemble", "channel_filter", "filter_response", "zoh", "amplifier_input", "input_harmonics"]



@dataclass(frozen=True, eq=False)
class Model:
    """Everything derived once from the spec (read-only arrays): built by
    :func:`build_model`, shared by the engine and the exact reference."""

    spec: VirtualSpec
    layout: SensorLayout
    fs: float  # sample rate [Hz] of the discretisation
    scale: np.ndarray  # (n_ch,) per channel: physical units per raw volt, in layout order
    offset: np.ndarray  # (n_ch,) per channel: physical offset
    beam: Beam
    nb: int  # beam DOFs (node 0 = clamp u, theta)
    nm: int  # mechanical DOFs (beam + 2 armatures)
    A: np.ndarray
    E: np.ndarray
    MCK: tuple  # mechanical M, C, K (beam DOFs, armatures)
    B: np.ndarray  # inputs: amplifier inputs (2), slider force, pin torque
    C_raw: np.ndarray  # channels (unfiltered physical, layout order), u', theta'
    channel_filters: tuple  # per channel: None or (poles, gain)
    gauge_rows: np.ndarray  # indices of the gauge channels (mains, gauge noise)
    laser_rows: np.ndarray  # indices of the laser channels
    kept: np.ndarray  # kept eigenvalues (all members of pairs)
    lam: np.ndarray  # simulated modal states (representatives + filter modes)
    fac: np.ndarray
    Cy: np.ndarray  # (n_ch, n_s) complex, factors folded in
    Dy: np.ndarray  # (n_ch, 4) direct feedthrough of held inputs (unfiltered channels)
    Cv: np.ndarray  # (2, n_s) velocities u', theta'
    Dv: np.ndarray
    Bz: np.ndarray  # (n_s, 4)
    Bz2: np.ndarray  # (n_s, 2) actuation columns, contiguous
    a: np.ndarray
    c_now: np.ndarray  # weight of u[n-d] over the interval (actuation inputs)
    c_prev: np.ndarray  # weight of u[n-d-1]
    c_force: np.ndarray  # (e^{lambda dt} - 1)/lambda (undelayed inputs)
    delay_samples: int
    delay_fraction: float
    skew: np.ndarray  # (n_ch,) per channel: the channel samples its signal this late [s]
    skew_rows: np.ndarray  # indices of the skewed channels
    skew_q: np.ndarray  # per skewed channel: whole samples q of skew = (q + beta) dt
    skew_E: np.ndarray  # (n_skewed, n_s): e^{lambda gamma dt}, gamma = 1 - beta
    skew_Wp: np.ndarray  # (n_skewed, n_s): weight of b u[m-d-1] over [t_m, t_m + gamma dt]
    skew_Wn: np.ndarray  # (n_skewed, n_s): weight of b u[m-d]
    skew_late: np.ndarray  # per skewed channel: the held input at t_m + gamma dt is u[m-d]
    skew_history: int  # past samples the skewed outputs look back (max q + 1; 0 = none)
    rig_modes: np.ndarray  # eigenvalues of clamp + shakers without the beam
    max_condition: float
    # nonlinear elements on the PS beam (None without): see NonlinearTerms
    nonlinear: "NonlinearTerms | None" = None


@dataclass(frozen=True, eq=False)
class NonlinearTerms:
    """The element forces of ``[[virtual.nonlinear]]`` as extra inputs of the modal model.

    ``elements``: :class:`~hbtest.numerical.Element` objects on the beam's DOF names;
    ``dofs``: beam DOF indices they act on (the element inputs: one generalised force each,
    applied to the beam, i.e. minus the elements' restoring forces); ``index``: per element
    the positions of its DOFs in ``dofs``. Outputs ``q`` = (displacements of ``dofs``, then
    their velocities) = ``Re Cq z + Dq f + Dq_lin u_held`` over the simulated modal states.
    Inputs: ``Bz_nl`` (n_s, n_f) modal input columns, ``Dy_nl`` (n_ch, n_f) channel
    feedthrough. Sub-steps (``substeps`` per sample, length h = dt / substeps): the state at
    ``t_n + j h`` of the actuation part is ``sub_E[j] z[n] + sub_Wp[j] b u[n-d-1] + sub_Wn[j]
    b u[n-d]`` (exact, as the channel skew) with the held input ``u[n-d]`` once
    ``sub_late[j]``; over one sub-step the element force enters with first-order hold
    (``z <- a_h z + c0 b f_j + c1 b (f_{j+1} - f_j)``, c0 = int_0^h e^{lambda (h - s)} ds,
    c1 = int_0^h e^{lambda (h - s)} s / h ds)."""

    elements: tuple
    dofs: np.ndarray
    index: tuple
    Cq: np.ndarray
    Dq: np.ndarray
    Dq_lin: np.ndarray
    Bz_nl: np.ndarray
    Dy_nl: np.ndarray
    substeps: int
    a_h: np.ndarray
    c0: np.ndarray
    c1: np.ndarray
    sub_E: np.ndarray
    sub_Wp: np.ndarray
    sub_Wn: np.ndarray
    sub_late: np.ndarray

    def explicit_numbers(self) -> list[tuple[int, str, str, float, float]]:
        """The checks of the explicit element forces, one entry per (contact or friction
        element, check): (element index, file key of its rate parameter, ``"substeps"`` or
        ``"feedthrough"``, the number, its limit) — see :data:`EXPLICIT_STIFFNESS_LIMIT`; the
        feedthrough ``k Dq`` (static correction of the truncated modes, explicit too) must stay
        below :data:`EXPLICIT_FEEDTHROUGH_LIMIT`. Cubic springs (amplitude-dependent) are not
        checked."""
        n_f = self.dofs.size
        out = []
        for i, (e, idx) in enumerate(zip(self.elements, self.index)):
            w = np.zeros(n_f)
            w[idx] += e.weights
            z1 = self.c0 * (self.Bz_nl @ w)  # one sub-step of unit element force from rest
            r1 = abs(w @ np.real(self.Cq[:n_f] @ z1))
            v1 = abs(w @ np.real(self.Cq[n_f:] @ z1))
            dq = abs(w @ self.Dq[:n_f] @ w)
            u = e.dofs[0].startswith("u")
            if e.kind == "contact":
                key = "stiffness_n_per_m" if u else "stiffness_nm_per_rad"
                out.append((i, key, "substeps", e.stiffness * r1, EXPLICIT_STIFFNESS_LIMIT))
                out.append((i, key, "feedthrough", e.stiffness * dq, EXPLICIT_FEEDTHROUGH_LIMIT))
            elif e.kind == "friction":
                out.append((i, "velocity_scale_m_per_s" if u else "velocity_scale_rad_per_s", "substeps", e.force_limit / e.velocity_scale * v1, EXPLICIT_DAMPING_LIMIT))
        return out


def channel_filter(ch) -> tuple | None:
    """A channel's analogue Butterworth low-pass as (poles [rad/s], gain), None when off."""
    if ch.lowpass_hz <= 0:
        return None
    _, p, k = scipy.signal.butter(ch.lowpass_order, 2 * np.pi * ch.lowpass_hz, analog=True, output="zpk")
    return (np.asarray(p, complex), float(k))


def filter_response(filt, s) -> np.ndarray:
    """Response of a :func:`channel_filter` at the Laplace variable(s) ``s`` (1 when None)."""
    s = np.asarray(s, dtype=complex)
    if filt is None:
        return np.ones_like(s)
    p, k = filt
    return k / np.prod(s[..., None] - p, axis=-1)


def assemble(spec: VirtualSpec, layout: SensorLayout, with_beam: bool = True):
    """Mechanical M, C, K (beam DOFs, then armature z1, z2) and the first-order (A, E, B)."""
    bs = spec.beam
    if with_beam:
        b = make_beam(
            bs.length, bs.width, bs.thickness, bs.youngs_modulus, bs.density,
            zeta_mass=bs.zeta_mass, zeta_stiffness=bs.zeta_stiffness, left="free", right="free",
            nodes=spec.nodes(layout.gauge_positions),
        )
        nb = b.n_dof
    else:
        b, nb = None, 2
    n = nb + 2
    M = np.zeros((n, n))
    K = np.zeros((n, n))
    C = np.zeros((n, n))
    if b is not None:
        M[:nb, :nb], K[:nb, :nb], C[:nb, :nb] = b.M, b.K, b.C
    cl = spec.clamp
    M[0, 0] += cl.mass
    M[1, 1] += cl.inertia
    K[0, 0] += cl.support_stiffness
    C[0, 0] += cl.support_damping
    K[1, 1] += cl.rotational_stiffness
    C[1, 1] += cl.rotational_damping
    for j, sh in enumerate(spec.shakers):
        z = nb + j
        M[z, z] += sh.moving_mass
        K[z, z] += sh.suspension_stiffness
        C[z, z] += sh.suspension_damping
        e = np.zeros(n)
        e[0], e[1], e[z] = 1.0, sh.position, -1.0  # stinger elongation z - (u + x theta), sign-flipped
        K += sh.stinger_stiffness * np.outer(e, e)
        C += sh.stinger_damping * np.outer(e, e)
    N = 2 * n + 2
    A = np.zeros((N, N))
    E = np.eye(N)
    A[:n, n : 2 * n] = np.eye(n)
    A[n : 2 * n, :n] = -K
    A[n : 2 * n, n : 2 * n] = -C
    E[n : 2 * n, n : 2 * n] = M
    Bm = np.zeros((N, 4))
    for j, sh in enumerate(spec.shakers):
        ii, z = 2 * n + j, nb + j
        A[n + z, ii] = sh.force_constant  # coil force on the armature
        A[ii, n + z] = -sh.force_constant  # back-EMF
        A[ii, ii] = -sh.resistance
        E[ii, ii] = sh.inductance
        Bm[ii, j] = sh.amplifier_gain
    Bm[n + 0, 2] = 1.0  # friction force on the slider
    Bm[n + 1, 3] = 1.0  # friction torque on the pin
    return b, nb, n, A, E, Bm, (M, C, K)


def build_model(spec: VirtualSpec, layout: SensorLayout, fs: float) -> Model:
    """The diagonal, discretised model (cached, one per spec, layout and sample rate, by
    :func:`hbtest.rig.virtual.build.build_model_or_config_error`)."""
    b, nb, nm, A, E, B, MCK = assemble(spec, layout)
    chans = layout.channels
    nc = len(chans)
    C_raw = _raw_outputs(spec, layout, b, nb, nm, A.shape[0])
    # nonlinear elements: their DOFs' displacements and velocities as extra outputs, their
    # forces as extra inputs (columns 4..; none without elements: the linear model unchanged)
    elements = tuple(e.build(b) for e in spec.nonlinear)
    nl_dofs = np.array(sorted({b.index(d) for e in elements for d in e.dofs}), dtype=int)
    n_f = nl_dofs.size
    if n_f:
        C_raw, B = _with_element_ports(C_raw, B, nl_dofs, nm)
    lam, wl, vr, nrm, cond = _kept_modes(A, E, spec.modal_cutoff_hz)
    cm = C_raw @ vr  # (n_ch + 2, k)
    bm = (wl.conj().T @ B) / nrm[:, None]  # (k, 4)
    G0 = -C_raw @ np.linalg.solve(A, B)
    D = np.real(G0 - np.einsum("ik,kj->ij", cm, bm / (-lam)[:, None]))  # static correction

    # representatives: one member of each conjugate pair (factor 2), real modes (factor 1)
    is_real = np.abs(np.imag(lam)) <= 1e-9 * np.abs(lam)
    rep = is_real | (np.imag(lam) > 0)
    lam_r = np.where(is_real, np.real(lam), lam)[rep]
    fac_r = np.where(is_real[rep], 1.0, 2.0)
    filters = tuple(channel_filter(c) for c in chans)
    lam_all, fac_all, Bz, Cy, Dy = _filtered_states(filters, cm, bm, D, lam, rep, lam_r, fac_r, B.shape[1])
    Cv = np.zeros((2, lam_all.size), complex)
    Cv[:, : lam_r.size] = cm[nc : nc + 2, rep] * fac_r[None, :]
    Dv = D[nc : nc + 2, :4]

    dt = 1.0 / fs
    d, alpha, x, phi, a, c_force, c_now, c_prev = _hold_weights(spec.actuation_delay, dt, lam_all)
    skew, rows, sq, sE, sWp, sWn, slate = _skew_terms(chans, dt, x, alpha, phi)
    empty = np.zeros((0, x.size), complex)

    # modes of the rig without the beam (clamp on springs + shakers)
    _, _, _, A0, E0, _, _ = assemble(spec, layout, with_beam=False)
    rig = scipy.linalg.eigvals(A0, E0)
    rig = rig[np.isfinite(rig)]
    rig = rig[np.argsort(np.abs(rig))]
    return Model(
        spec=spec, layout=layout, fs=float(fs), scale=np.array([c.scale for c in chans]), offset=np.array([c.offset for c in chans]),
        beam=b, nb=nb, nm=nm, A=A, E=E, MCK=MCK, B=B, C_raw=C_raw, channel_filters=filters,
        gauge_rows=np.array([j for j, c in enumerate(chans) if c.kind != "laser"], dtype=int),
        laser_rows=np.array([j for j, c in enumerate(chans) if c.kind == "laser"], dtype=int), kept=lam,
        lam=lam_all, fac=fac_all, Cy=Cy, Dy=Dy[:, :4], Cv=Cv, Dv=Dv, Bz=Bz[:, :4], Bz2=np.ascontiguousarray(Bz[:, :2]), a=a, c_now=c_now,
        c_prev=c_prev, c_force=c_force, delay_samples=d, delay_fraction=alpha,
        skew=skew, skew_rows=rows, skew_q=np.array(sq, dtype=int), skew_E=np.array(sE) if sq else empty,
        skew_Wp=np.array(sWp) if sq else empty, skew_Wn=np.array(sWn) if sq else empty, skew_late=np.array(slate, dtype=bool),
        skew_history=int(max(sq) + 1) if sq else 0, rig_modes=rig,
        max_condition=float(cond.max()),
        nonlinear=_nonlinear_terms(spec, elements, tuple(np.searchsorted(nl_dofs, [b.index(d) for d in e.dofs]) for e in elements), nl_dofs, cm, D, rep, fac_r, Bz, Dy, x, dt, alpha, phi, nc) if n_f else None,
    )


def _hold_weights(delay_s: float, dt: float, lam):
    """Exact discretisation of the diagonal states ``lam`` under a held input delayed by
    ``delay_s`` = (d + alpha) dt: (d, alpha, x = lam dt, phi, the state factor e^x, the force
    weight, the weights of the new and the previous held input). The held input changes at
    t_n + alpha dt: u[n-d-1] on [t_n, t_n + alpha dt), u[n-d] after."""
    tau = delay_s / dt
    d = int(math.floor(tau + 1e-9))
    alpha = max(0.0, tau - d)
    x = lam * dt
    phi = lambda y: np.where(np.abs(y) > 0, np.expm1(y) / np.where(y == 0, 1, y), 1.0) * dt  # noqa: E731
    c_now = phi(x * (1 - alpha)) * (1 - alpha)
    c_prev = np.exp(x * (1 - alpha)) * phi(x * alpha) * alpha
    return d, alpha, x, phi, np.exp(x), phi(x), c_now, c_prev


def _raw_outputs(spec, layout, b, nb: int, nm: int, N: int) -> np.ndarray:
    """Raw output rows over the state (N): each channel (laser ``u + x theta``; gauge strain
    ``-h/2`` times the beam curvature at its position), then the interface velocities (u', theta')."""
    h = spec.beam.thickness
    eye = np.eye(nb)
    chans = layout.channels
    nc = len(chans)
    C_raw = np.zeros((nc + 2, N))
    for j, ch in enumerate(chans):
        if ch.kind == "laser":
            C_raw[j, 0], C_raw[j, 1] = 1.0, ch.position
        else:
            C_raw[j, :nb] = -(h / 2) * np.array([b.curvature(eye[k], ch.position) for k in range(nb)])
    C_raw[nc, nm + 0] = 1.0
    C_raw[nc + 1, nm + 1] = 1.0
    return C_raw


def _with_element_ports(C_raw, B, nl_dofs, nm: int):
    """``(C_raw, B)`` with the nonlinear elements' DOFs' (q, q') as extra output rows and their
    forces as extra input columns."""
    N, n_f = C_raw.shape[1], nl_dofs.size
    Cq_raw = np.zeros((2 * n_f, N))
    Cq_raw[np.arange(n_f), nl_dofs] = 1.0
    Cq_raw[n_f + np.arange(n_f), nm + nl_dofs] = 1.0
    B_nl = np.zeros((N, n_f))
    B_nl[nm + nl_dofs, np.arange(n_f)] = 1.0
    return np.vstack([C_raw, Cq_raw]), np.hstack([B, B_nl])


def _kept_modes(A, E, cutoff_hz: float):
    """Eigenvalues below ``cutoff_hz`` of the pencil (A, E), sorted by magnitude then imaginary
    part, with left/right vectors, their normalisations and condition numbers; an unstable or
    ill-conditioned mode is a ValueError."""
    lam, wl, vr = scipy.linalg.eig(A, E, left=True, right=True)
    keep = np.abs(lam) < 2 * np.pi * cutoff_hz
    lam, wl, vr = _refined_pairs(A, E, lam[keep], wl[:, keep], vr[:, keep])
    o = np.lexsort((np.imag(lam), np.abs(lam)))
    lam, wl, vr = lam[o], wl[:, o], vr[:, o]
    nrm = np.einsum("im,ij,jm->m", wl.conj(), E, vr)
    cond = np.linalg.norm(wl, axis=0) * np.linalg.norm(E @ vr, axis=0) / np.abs(nrm)
    if np.any(cond > 1e9) or np.any(np.real(lam) >= 0):
        raise ValueError(f"virtual rig: kept modes are ill-conditioned or unstable (condition {cond.max():.3g})")
    return lam, wl, vr, nrm, cond


#: inverse-iteration steps of :func:`_refined_pairs`
REFINE_STEPS = 2


def _refined_pairs(A, E, lam, wl, vr):
    """The kept eigenpairs of the pencil (A, E) refined by :data:`REFINE_STEPS` steps of
    inverse iteration (right and left vectors through one LU of ``A - lambda E``) and the
    two-sided Rayleigh quotient. The QZ vectors alone are as accurate as the BLAS kernels
    make them: with E's condition number ~1e12 (the beam's mass range), the kept modes' static
    sum (the static correction's subtrahend) differed by 8e-4 relative between OpenBLAS's
    Haswell and Sandybridge kernels and the modal model's error against the full model was
    1.6e-6 on one and 4.2e-5 on the other; refined, the sums agree to 2e-8 and both models are
    within 1.1e-7 of the full one (``tests/test_virtual_rig.py``)."""
    lam, wl, vr = lam.copy(), wl.copy(), vr.copy()
    for k in range(lam.size):
        for _ in range(REFINE_STEPS):
            lu = scipy.linalg.lu_factor(A - lam[k] * E, check_finite=False)
            v = scipy.linalg.lu_solve(lu, E @ vr[:, k], check_finite=False)
            w = scipy.linalg.lu_solve(lu, E.conj().T @ wl[:, k], trans=2, check_finite=False)
            v, w = v / np.linalg.norm(v), w / np.linalg.norm(w)
            vr[:, k], wl[:, k] = v, w
            lam[k] = (w.conj() @ A @ v) / (w.conj() @ E @ v)
    return lam, wl, vr


def _filtered_states(filters, cm, bm, D, lam, rep, lam_r, fac_r, n_in: int):
    """The diagonal states behind the channels: the representative modes, then one per pole of
    each channel's filter (partial fractions). Returns (eigenvalues, conjugate factors, input
    rows ``Bz``, channel output ``Cy`` (factors applied), direct feed-through ``Dy``)."""
    nc = len(filters)
    lam_s, fac_s, Bz = [lam_r], [fac_r], [bm[rep]]
    Cy_m = np.zeros((nc, lam_r.size), complex)
    Cy_f = []
    Dy = np.zeros((nc, n_in))
    for j, filt in enumerate(filters):
        Cy_m[j] = cm[j, rep] * filter_response(filt, lam_r)
        if filt is None:
            Dy[j] = D[j]
            continue
        p, k = filt
        if np.min(np.abs(p[:, None] - lam[None, :])) < 1e-6 * np.abs(p).min():
            raise ValueError("virtual rig: a channel filter pole coincides with a structural mode")
        for i, pi in enumerate(p):
            if np.imag(pi) < -1e-9 * abs(pi):
                continue
            rho = k / np.prod(pi - np.delete(p, i))
            g = rho * (np.einsum("k,kj->j", cm[j] / (pi - lam), bm) + D[j])
            real_pole = abs(np.imag(pi)) <= 1e-9 * abs(pi)
            lam_s.append(np.array([np.real(pi) if real_pole else pi]))
            fac_s.append(np.array([1.0 if real_pole else 2.0]))
            Bz.append(g[None, :])
            Cy_f.append((j, len(Cy_f)))
    lam_all = np.concatenate(lam_s).astype(complex)
    fac_all = np.concatenate(fac_s)
    Bz = np.concatenate(Bz, axis=0)
    Cy = np.zeros((nc, lam_all.size), complex)
    Cy[:, : lam_r.size] = Cy_m
    for j, i in Cy_f:
        Cy[j, lam_r.size + i] = 1.0
    return lam_all, fac_all, Bz, Cy * fac_all[None, :], Dy


def _skew_terms(chans, dt: float, x, alpha: float, phi):
    """Channel skew: the sample n of a skewed channel is its signal at t_n - tau, tau = (q +
    beta) dt, i.e. at t_m + gamma dt with m = n - q - 1, gamma = 1 - beta: the state there is
    e^{lambda gamma dt} z[m] plus the held input integrated over [t_m, t_m + gamma dt] (it
    changes at t_m + alpha dt from u[m-d-1] to u[m-d]) — exact, like the actuation delay.
    Returns (skews [s], skewed rows, q per row, and the :func:`fraction_weights` per row)."""
    skew = np.array([c.skew for c in chans], dtype=float)
    if np.any(skew < 0):
        raise ValueError("virtual rig: a channel skew must not be negative (the twin cannot sample ahead)")
    rows = np.flatnonzero(skew > 0)
    sq, sE, sWp, sWn, slate = [], [], [], [], []
    for r in rows:
        ts = skew[r] / dt
        q = int(math.floor(ts + 1e-12))
        gam = 1.0 - max(0.0, ts - q)
        sq.append(q)
        for acc, v in zip((sE, sWp, sWn, slate), fraction_weights(x, gam, alpha, phi)):
            acc.append(v)
    return skew, rows, sq, sE, sWp, sWn, slate


def fraction_weights(x, gam: float, alpha: float, phi):
    """Exact propagation of the modal state ``exp(x t)`` over the fraction ``gam`` of a sample
    (0..1) with the input held piecewise: (the state factor ``exp(x gam)``, the weight of the
    previous held input, the weight of the new one (after the hold switches at ``alpha``), and
    whether the switch lies inside the fraction). ``phi(y) = (exp(y) - 1) / y * dt``."""
    if gam <= alpha:
        return np.exp(x * gam), phi(x * gam) * gam, np.zeros_like(x), False
    return np.exp(x * gam), np.exp(x * (gam - alpha)) * phi(x * alpha) * alpha, phi(x * (gam - alpha)) * (gam - alpha), True


def _nonlinear_terms(spec, elements, index, nl_dofs, cm, D, rep, fac_r, Bz, Dy, x, dt, alpha, phi, nc) -> NonlinearTerms:
    """The :class:`NonlinearTerms` of a model whose inputs 4.. are the element forces and whose
    raw outputs after the channels and (u', theta') are the element DOFs' (q, q')."""
    n_f = nl_dofs.size
    Cq = np.zeros((2 * n_f, x.size), complex)
    Cq[:, : fac_r.size] = cm[nc + 2 :, rep] * fac_r[None, :]
    S = int(spec.nonlinear_substeps)
    xh = x / S
    a_h = np.exp(xh)
    c0 = phi(xh) / S  # phi carries dt: int_0^h e^{lambda (h - s)} ds
    # c1 = int_0^h e^{lambda (h - s)} s / h ds = h (e^y - 1 - y) / y^2, y = lambda h (series near 0)
    small = np.abs(xh) < FOH_SERIES_BELOW
    ys = np.where(small, 1.0, xh)
    c1 = np.where(small, 0.5 + xh / 6, (np.expm1(ys) - ys) / ys**2) * (dt / S)
    sE, sWp, sWn, late = [], [], [], []
    for j in range(S):
        for acc, v in zip((sE, sWp, sWn, late), fraction_weights(x, j / S, alpha, phi)):
            acc.append(v)
    return NonlinearTerms(
        elements=elements, dofs=nl_dofs, index=index, Cq=Cq, Dq=D[nc + 2 :, 4:], Dq_lin=D[nc + 2 :, :2],
        Bz_nl=np.ascontiguousarray(Bz[:, 4:]), Dy_nl=Dy[:, 4:], substeps=S, a_h=a_h, c0=c0, c1=c1,
        sub_E=np.array(sE), sub_Wp=np.array(sWp), sub_Wn=np.array(sWn), sub_late=np.array(late, dtype=bool),
    )


def zoh(s, dt) -> np.ndarray:
    """Zero-order hold: ``(1 - e^{-s dt}) / (s dt)`` (1 at s = 0)."""
    s = np.asarray(s, dtype=complex)
    x = s * dt
    safe = np.where(x == 0, 1.0, x)
    return np.where(x == 0, 1.0, -np.expm1(-safe) / safe)


def amplifier_input(shakers, v: np.ndarray) -> np.ndarray:
    """The amplifier polynomial ``v + a2 v^2 + a3 v^3`` per actuator of the demand samples
    ``v`` (2, N) [V] (before the gain; a copy)."""
    out = np.array(v, dtype=float, copy=True)
    for j, sh in enumerate(shakers):
        if sh.nonlinear:
            x = v[j]
            out[j] = x + sh.quadratic * x * x + sh.cubic * x * x * x
    return out


def input_harmonics(shakers, voltage, orders, out_orders) -> np.ndarray:
    """Harmonic coefficients (2, n_out) at ``out_orders`` of the amplifier-polynomial output of
    the periodic demand ``voltage`` (2, n_orders) at ``orders`` (hbtest.method.harmonics convention)."""
    orders = np.atleast_1d(np.asarray(orders, dtype=int))
    V = np.asarray(voltage, dtype=complex).reshape(2, orders.size)
    U = np.zeros((2, out_orders.size), complex)
    if not any(s.nonlinear for s in shakers):
        for i, k in enumerate(out_orders):
            hit = np.flatnonzero(orders == k)
            if hit.size:
                U[:, i] = V[:, hit[0]]
        U[:, out_orders == 0] = np.real(U[:, out_orders == 0])
        return U
    kmax = int(max(orders.max(), out_orders.max()))
    M = 16 * (3 * kmax + 1)
    ph = 2 * np.pi * np.arange(M) / M
    v = np.real(V @ np.exp(1j * np.multiply.outer(orders, ph)))
    p = amplifier_input(shakers, v)
    X = np.fft.fft(p, axis=1) / M
    for i, k in enumerate(out_orders):
        U[:, i] = np.real(X[:, 0]) if k == 0 else 2 * X[:, k]
    return U

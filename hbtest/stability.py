"""Delay stability ("substructurability") of real-time hybrid tests (SPEC §4).

Characteristic roots of linear retarded and neutral delay equations, the critical delay of a
hybrid test, stability maps, and the stability of a delay-compensated loop.

Conventions
-----------
- SI units: delays [s], characteristic roots ``s = sigma + i omega`` [rad/s], frequencies
  reported in Hz (``Im s / 2 pi``), masses [kg], stiffnesses [N/m or N m/rad], damping
  [N s/m].  ``Re s > 0`` is a growing solution ``exp(s t)``.
- A delay equation (:class:`DelayEquation`) is

      sum_k  M_k u''(t - tau_k) + C_k u'(t - tau_k) + K_k u(t - tau_k) = 0,

  with characteristic matrix ``T(s) = sum_k (s^2 M_k + s C_k + K_k) exp(-s tau_k)``; its
  roots are the zeros of the *entire* function ``det T(s)``. It is *retarded* when only the
  undelayed term carries the highest derivative and *neutral* when a delayed term does too
  (a delayed mass, as when a continuous structure is split: the physical substructure's
  inertia force is fed back through the actuator delay). A first-order (state-space) system
  is the special case with all ``M_k = 0``.
- Actuator cut-off: actuators do not follow commands above a cut-off frequency ``f_c``
  (default 500 Hz), so only roots with ``|Im s| < 2 pi f_c`` matter. Neutral equations have
  chains of roots going to infinity, possibly in the right half-plane for every delay; those
  above the cut-off are ignored. A system is *unstable* at a delay when a root with
  ``Re s > 0`` and ``|Im s| < 2 pi f_c`` exists (the "unstable box").
- Critical delay: the smallest delay at which the unstable box holds a root. Roots enter the
  box either through the imaginary axis (a Hopf crossing, ``s = i omega``) or through the
  cut-off line (``s = sigma + i 2 pi f_c``, ``sigma > 0``), which is how neutral root chains
  with positive real part arrive.

Classical real-time hybrid test with one actuator delay (:func:`hybrid_system`): the
numerical substructure (NS) computes the interface displacement ``u_i(t)``; the actuator
imposes ``x_i(t) = u_i(t - tau)`` on the physical substructure (PS); the PS force measured
at the interface is fed back to the NS. The characteristic function is
``det(D_N(s) + D_P(s) exp(-s tau))`` (condensed, rational) or, without its poles, the
determinant of the block matrix derived in :func:`hybrid_system`.

Methods: crossing scan on the boundary of the unstable box (exact for one delay, used for
critical delays and maps); Chebyshev collocation of the infinitesimal generator (spectral
method, valid for retarded and neutral equations) with Newton polishing on ``det T``;
argument-principle root counting on rectangles (independent check); a method-of-steps RK4
time integrator; closed forms for the single oscillator split at its spring.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.linalg
import scipy.optimize

from .structures import Structure, beam, chain_links, stamp_link
from .substructure import Substructure

__all__ = [
    "DEFAULT_CUTOFF_HZ",
    "DelayTerm",
    "DelayEquation",
    "SingleDelaySystem",
    "Crossing",
    "CriticalDelay",
    "hybrid_system",
    "sdof_system",
    "chain_hybrid",
    "beam_hybrid",
    "craig_bampton",
    "sdof_critical_delay",
    "sdof_phase_margin",
    "PhaseMargin",
    "sdof_hopf_curve_p",
    "sdof_hopf_curve_zeta",
    "sdof_stable_for_all_delays",
    "small_delay_estimate",
    "polynomial_predictor_weights",
    "predictor_equation",
    "stable_prediction_intervals",
    "count_roots",
    "root_locus",
    "simulate",
    "DelayMap",
    "delay_map",
    "beam_delay_map",
    "ParameterMap",
    "parameter_map",
]

DEFAULT_CUTOFF_HZ = 500.0
TWO_PI = 2.0 * np.pi


# ---------------------------------------------------------------------------------------
# delay equations


@dataclass(frozen=True, eq=False)
class DelayTerm:
    """One term ``(s^2 M + s C + K) exp(-s delay)`` of a characteristic matrix; ``delay`` [s].
    A scalar 0 for M, C or K stands for the zero matrix."""

    delay: float
    M: np.ndarray
    C: np.ndarray
    K: np.ndarray

    def __post_init__(self):
        if not (np.isfinite(self.delay) and self.delay >= 0):
            raise ValueError(f"delay must be finite and non-negative, got {self.delay}")
        mats = [np.atleast_2d(np.asarray(getattr(self, n), dtype=float)) for n in ("M", "C", "K")]
        n = max(m.shape[0] for m in mats)
        mats = [np.zeros((n, n)) if m.size == 1 and m.item() == 0 and n > 1 else m for m in mats]
        for name, m in zip(("M", "C", "K"), mats):
            if m.shape != (n, n):
                raise ValueError(f"term matrix {name} must be {n}x{n}, got {m.shape}")
            object.__setattr__(self, name, m)
        object.__setattr__(self, "delay", float(self.delay))

    def matrix(self, s) -> np.ndarray:
        """``s^2 M + s C + K`` (without the exponential), shape (*s.shape, n, n)."""
        s = np.asarray(s, dtype=complex)[..., None, None]
        return s * s * self.M + s * self.C + self.K

    def dmatrix(self, s) -> np.ndarray:
        """``2 s M + C`` (derivative of :meth:`matrix`), shape (*s.shape, n, n)."""
        s = np.asarray(s, dtype=complex)[..., None, None]
        return 2 * s * self.M + self.C + 0 * s


class DelayEquation:
    """A linear delay equation ``sum_k M_k u''(t-tau_k) + C_k u'(t-tau_k) + K_k u(t-tau_k) = 0``.

    Built from :class:`DelayTerm` objects (terms with equal delays are summed). One term
    must have delay 0 (the undelayed part). Characteristic matrix
    ``T(s) = sum_k (s^2 M_k + s C_k + K_k) exp(-s tau_k)``; roots in rad/s.
    """

    def __init__(self, terms: Sequence[DelayTerm]):
        if not terms:
            raise ValueError("a delay equation needs at least one term")
        merged: dict[float, list] = {}
        n = terms[0].M.shape[0]
        for t in terms:
            if t.M.shape[0] != n:
                raise ValueError("all terms must have the same size")
            key = round(t.delay, 15)
            if key in merged:
                a = merged[key]
                merged[key] = [a[0] + t.M, a[1] + t.C, a[2] + t.K]
            else:
                merged[key] = [t.M.copy(), t.C.copy(), t.K.copy()]
        if 0.0 not in merged:
            merged[0.0] = [np.zeros((n, n))] * 3
        self.terms = tuple(DelayTerm(d, *merged[d]) for d in sorted(merged))
        self.n = n

    # -- constructors ------------------------------------------------------------------
    @classmethod
    def from_state_space(cls, A0, delayed=(), neutral=(), E0=None) -> "DelayEquation":
        """``E0 x'(t) + sum E_k x'(t - tau_k) = A0 x(t) + sum A_k x(t - tau_k)``.

        ``delayed``: pairs (tau_k [s], A_k); ``neutral``: pairs (tau_k, E_k). Characteristic
        matrix ``s E0 - A0 + sum (s E_k - A_k) exp(-s tau_k)``.
        """
        A0 = np.atleast_2d(np.asarray(A0, dtype=float))
        n = A0.shape[0]
        Z = np.zeros((n, n))
        E0 = np.eye(n) if E0 is None else np.atleast_2d(np.asarray(E0, dtype=float))
        terms = [DelayTerm(0.0, Z, E0, -A0)]
        terms += [DelayTerm(t, Z, Z, -np.atleast_2d(np.asarray(A, float))) for t, A in delayed]
        terms += [DelayTerm(t, Z, np.atleast_2d(np.asarray(E, float)), Z) for t, E in neutral]
        return cls(terms)

    # -- properties --------------------------------------------------------------------
    @property
    def delays(self) -> np.ndarray:
        return np.array([t.delay for t in self.terms])

    @property
    def max_delay(self) -> float:
        return float(self.delays.max())

    @property
    def order(self) -> int:
        """2 for second-order (some M_k nonzero), else 1."""
        return 2 if any(np.any(t.M != 0) for t in self.terms) else 1

    @property
    def is_neutral(self) -> bool:
        """True when a delayed term carries the highest derivative."""
        if self.order == 2:
            return any(np.any(t.M != 0) for t in self.terms if t.delay > 0)
        return any(np.any(t.C != 0) for t in self.terms if t.delay > 0)

    # -- evaluation --------------------------------------------------------------------
    def matrix(self, s) -> np.ndarray:
        """``T(s)``, shape (*s.shape, n, n)."""
        s = np.asarray(s, dtype=complex)
        out = np.zeros(s.shape + (self.n, self.n), dtype=complex)
        for t in self.terms:
            e = np.exp(-s * t.delay)[..., None, None] if t.delay else 1.0
            out += t.matrix(s) * e
        return out

    def dmatrix(self, s) -> np.ndarray:
        """``dT/ds``, shape (*s.shape, n, n)."""
        s = np.asarray(s, dtype=complex)
        out = np.zeros(s.shape + (self.n, self.n), dtype=complex)
        for t in self.terms:
            e = np.exp(-s * t.delay)[..., None, None] if t.delay else 1.0
            out += (t.dmatrix(s) - t.delay * t.matrix(s)) * e
        return out

    def phase(self, s) -> np.ndarray:
        """``arg det T(s)`` [rad] (principal value; NaN where T is singular)."""
        sign, _ = np.linalg.slogdet(self.matrix(s))
        return np.where(sign == 0, np.nan, np.angle(sign))

    # -- first-order form --------------------------------------------------------------
    def first_order(self) -> tuple[np.ndarray, list, list]:
        """The equivalent first-order neutral form ``sum_k E_k x'(t-tau_k) = sum_k A_k
        x(t-tau_k)`` with ``x = [u; u']`` (second order) or ``x = u`` (first order).
        Returns (delays, [E_k], [A_k]); ``det sum (s E_k - A_k) e^{-s tau_k} = det T(s)``."""
        n = self.n
        E, A = [], []
        if self.order == 1:
            for t in self.terms:
                E.append(t.C.copy())
                A.append(-t.K)
        else:
            Z, I = np.zeros((n, n)), np.eye(n)
            for t in self.terms:
                if t.delay == 0:
                    E.append(np.block([[I, Z], [Z, t.M]]))
                    A.append(np.block([[Z, I], [-t.K, -t.C]]))
                else:
                    E.append(np.block([[Z, Z], [Z, t.M]]))
                    A.append(np.block([[Z, Z], [-t.K, -t.C]]))
        return self.delays, E, A

    # -- roots -------------------------------------------------------------------------
    def spectral_roots(self, n_nodes: int | None = None, omega_max: float | None = None) -> np.ndarray:
        """Approximate characteristic roots [rad/s] by Chebyshev collocation of the
        infinitesimal generator on ``[-tau_max, 0]`` (``n_nodes + 1`` nodes; default chosen
        from ``omega_max * tau_max``). The boundary row enforces the equation at theta = 0
        with delayed values and derivatives (``x'(-tau) = lambda x(-tau)``) from the
        barycentric interpolant, so neutral equations are handled. Accurate for
        ``|s| tau_max`` well below ``n_nodes``; polish with :meth:`polish`."""
        delays, E, A = self.first_order()
        tmax = float(delays.max())
        ns = E[0].shape[0]
        if tmax == 0:
            lam = scipy.linalg.eigvals(sum(A), sum(E))
            return lam[np.isfinite(lam)]
        if n_nodes is None:
            wm = omega_max if omega_max is not None else 20.0 / tmax
            n_nodes = int(np.clip(12 + 0.6 * wm * tmax, 16, 160))
        N = int(n_nodes)
        D, x = _cheb(N)
        D = D * (2.0 / tmax)
        bw = np.ones(N + 1)
        bw[0] = bw[-1] = 0.5
        bw *= (-1.0) ** np.arange(N + 1)
        I = np.eye(ns)
        Abig = np.zeros(((N + 1) * ns, (N + 1) * ns))
        Bbig = np.zeros_like(Abig)
        Abig[ns:, :] = np.kron(D[1:, :], I)
        Bbig[ns:, :] = np.kron(np.eye(N + 1)[1:, :], I)
        for d, Ek, Ak in zip(delays, E, A):
            xs = 1.0 - 2.0 * d / tmax  # theta = -d in Chebyshev coordinates
            ell = _barycentric_row(x, bw, xs)
            Abig[:ns, :] += np.kron(ell[None, :], Ak)
            Bbig[:ns, :] += np.kron(ell[None, :], Ek)
        # Bbig is block upper triangular with identity blocks below the first block row: when
        # its leading block is well conditioned, reduce to a (faster) standard eigenproblem.
        if np.linalg.cond(Bbig[:ns, :ns]) < 1e10:
            lam = np.linalg.eigvals(np.linalg.solve(Bbig, Abig))
        else:
            lam = scipy.linalg.eigvals(Abig, Bbig)
        return lam[np.isfinite(lam)]

    def polish(self, s0, tol: float = 1e-11, max_iter: int = 40) -> tuple[np.ndarray, np.ndarray]:
        """Newton iteration on ``det T(s)`` (step ``1 / tr(T^-1 T')``) from each start value.
        Returns (roots, converged flags)."""
        s = np.array(s0, dtype=complex, ndmin=1).copy()
        done = np.zeros(s.shape, bool)
        for _ in range(max_iter):
            idx = np.flatnonzero(~done)
            if idx.size == 0:
                break
            si = s[idx]
            T = self.matrix(si)
            dT = self.dmatrix(si)
            step = np.zeros(idx.size, complex)
            for j in range(idx.size):  # per point: a singular T means we sit on a root
                try:
                    tr = np.trace(np.linalg.solve(T[j], dT[j]))
                except np.linalg.LinAlgError:
                    done[idx[j]] = True
                    continue
                step[j] = 1.0 / tr if tr != 0 else 0.0
            good = np.isfinite(step)
            step = np.where(good, step, 0.0)
            s[idx] = si - step
            small = np.abs(step) <= tol * (1.0 + np.abs(si))
            done[idx[small | ~good]] = True
        ok = done & np.isfinite(s)
        # verify: T(s) numerically singular relative to the size of its terms
        if np.any(ok):
            okk = ok.copy()
            okk[ok] = self.residual(s[ok]) < 1e-7
            ok = okk
        return s, ok

    def residual(self, s) -> np.ndarray:
        """Relative singularity of ``T(s)``: its smallest singular value divided by
        ``sum_k ||s^2 M_k + s C_k + K_k|| |exp(-s tau_k)|`` (small at a root)."""
        s = np.asarray(s, dtype=complex)
        sv = np.linalg.svd(self.matrix(s), compute_uv=False)[..., -1]
        scale = np.zeros(s.shape)
        for t in self.terms:
            scale = scale + np.linalg.norm(t.matrix(s), ord=2, axis=(-2, -1)) * np.abs(np.exp(-s * t.delay))
        return sv / np.maximum(scale, 1e-300)

    def roots(
        self,
        cutoff_hz: float = DEFAULT_CUTOFF_HZ,
        sigma_min: float | None = None,
        n_nodes: int | None = None,
    ) -> np.ndarray:
        """Characteristic roots [rad/s] below the cut-off (``|Im s| <= 2 pi f_c``) and with
        ``Re s >= sigma_min`` (default ``-2 pi f_c``): spectral approximation, Newton
        polishing, de-duplication; sorted by decreasing real part."""
        wc = TWO_PI * cutoff_hz
        smin = -wc if sigma_min is None else sigma_min
        lam = self.spectral_roots(n_nodes=n_nodes, omega_max=1.3 * wc)
        lam = lam[(np.abs(lam.imag) <= 1.3 * wc) & (lam.real >= smin - 0.3 * wc - 10)]
        if lam.size == 0:
            return lam
        r, ok = self.polish(lam)
        r = r[ok]
        r = r[(np.abs(r.imag) <= wc) & (r.real >= smin)]
        return _unique(r)

    def rightmost(self, cutoff_hz: float = DEFAULT_CUTOFF_HZ, n_nodes: int | None = None) -> complex:
        """The root below the cut-off with the largest real part (upper-half-plane member of
        a conjugate pair)."""
        r = self.roots(cutoff_hz, n_nodes=n_nodes)
        if r.size == 0:
            return complex(np.nan, np.nan)
        top = r.real.max()
        cand = r[np.abs(r.real - top) <= 1e-9 * (1 + abs(top))]
        return complex(cand[np.argmax(cand.imag)])

    def sigma_bound(self, omega_max: float) -> float:
        """A real part beyond which no root with ``|Im s| <= omega_max`` lies (approximately:
        sampled). Rouche test on vertical lines ``Re s = sigma``: no root where
        ``rho(T_0^-1 T_1) e^{-sigma tau_1} < 0.9`` (one delayed term) or
        ``sum_k ||T_0^-1 T_k|| e^{-sigma tau_k} < 0.9`` (several). Lines are scanned from far
        right to left with frequency spacing ``<= sigma/2`` (so resonance peaks of width
        ~sigma are resolved); the bound is the last line passing before one fails."""
        t0 = self.terms[0]
        rest = self.terms[1:]
        if not rest:
            lam = self.spectral_roots()
            return float(max(1.0, lam.real.max(initial=0.0) * 1.5 + 1.0))
        tmin = min(t.delay for t in rest)

        def passes(sigma):
            n_w = int(max(41, 2 * omega_max / sigma + 1))
            w = np.linspace(0.0, omega_max, n_w)  # real equation: conjugate symmetry
            s = sigma + 1j * w
            try:
                T0 = t0.matrix(s)
                if len(rest) == 1:
                    X = np.linalg.solve(T0, rest[0].matrix(s))
                    val = np.abs(np.linalg.eigvals(X)).max(axis=-1) * np.exp(-sigma * rest[0].delay)
                else:
                    val = np.zeros(w.shape)
                    for t in rest:
                        X = np.linalg.solve(T0, t.matrix(s))
                        val = val + np.linalg.norm(X, ord=2, axis=(-2, -1)) * np.exp(-sigma * t.delay)
            except np.linalg.LinAlgError:  # T_0 singular on a sample: no bound there
                return False
            return bool(np.all(val < 0.9))

        top = 1e3 * max(omega_max, 1.0 / tmin, 1.0)
        if not passes(top):
            raise RuntimeError("no bound on the real part of the roots was found")
        return _descend(passes, top, floor=max(omega_max, 1.0) * 1e-4, cap_ratio=2 * omega_max / 2000)

    def count_unstable(self, cutoff_hz: float = DEFAULT_CUTOFF_HZ) -> int:
        """Number of roots with ``Re s > 0`` and ``|Im s| < 2 pi f_c`` (argument principle)."""
        wc = TWO_PI * cutoff_hz
        return count_roots(self, 0.0, self.sigma_bound(wc), wc)


def _cheb(N: int) -> tuple[np.ndarray, np.ndarray]:
    """Chebyshev differentiation matrix and points ``x_j = cos(pi j / N)`` (Trefethen)."""
    x = np.cos(np.pi * np.arange(N + 1) / N)
    c = np.ones(N + 1)
    c[0] = c[-1] = 2.0
    c *= (-1.0) ** np.arange(N + 1)
    X = np.tile(x, (N + 1, 1)).T
    dX = X - X.T
    D = np.outer(c, 1.0 / c) / (dX + np.eye(N + 1))
    D -= np.diag(D.sum(axis=1))
    return D, x


def _barycentric_row(x: np.ndarray, w: np.ndarray, xs: float) -> np.ndarray:
    d = xs - x
    hit = np.flatnonzero(np.abs(d) < 1e-14)
    row = np.zeros(x.size)
    if hit.size:
        row[hit[0]] = 1.0
        return row
    q = w / d
    return q / q.sum()


def _unique(r: np.ndarray, rtol: float = 1e-7) -> np.ndarray:
    r = r[np.argsort(-r.real, kind="stable")]
    out: list[complex] = []
    for z in r:
        if all(abs(z - o) > rtol * (1 + abs(z)) for o in out):
            out.append(complex(z))
    return np.array(out, dtype=complex)


def _descend(passes: Callable, top: float, floor: float, cap_ratio: float) -> float:
    """Scan ``sigma`` from ``top`` down (factor 1.25 steps) while ``passes(sigma)``; return the last
    passing value. Stops at ``floor`` or where the frequency sampling would exceed its cap
    (``sigma < cap_ratio``): the counting box starts at ``Re s = 0`` and covers the rest."""
    sigma = top
    last = top
    stop = max(floor, cap_ratio)
    while sigma > stop:
        sigma /= 1.25
        if not passes(sigma):
            break
        last = sigma
    return float(last)


def count_roots(eq: DelayEquation, sigma_lo: float, sigma_hi: float, omega_max: float, n_initial: int = 200) -> int:
    """Number of zeros of ``det T(s)`` inside the rectangle ``sigma_lo < Re s < sigma_hi``,
    ``|Im s| < omega_max`` by the argument principle: the phase of ``det T`` is followed
    along the boundary with adaptive refinement until consecutive samples differ by less
    than 0.5 rad. Raises ``RuntimeError`` if a root lies (numerically) on the contour."""
    a, b, w = float(sigma_lo), float(sigma_hi), float(omega_max)
    corners = np.array([a - 1j * w, b - 1j * w, b + 1j * w, a + 1j * w, a - 1j * w])
    t = np.linspace(0.0, 4.0, 4 * n_initial + 1)

    def at(tt):
        k = np.minimum(np.floor(tt).astype(int), 3)
        f = tt - k
        return corners[k] + f * (corners[k + 1] - corners[k])

    ph = eq.phase(at(t))
    for _ in range(40):
        d = np.angle(np.exp(1j * np.diff(ph)))
        bad = ~(np.abs(d) < 0.5)  # NaN counts as bad
        if not bad.any():
            return int(round(d.sum() / TWO_PI))
        if t.size > 400_000:
            break
        tm = 0.5 * (t[:-1][bad] + t[1:][bad])
        pm = eq.phase(at(tm))
        t = np.concatenate([t, tm])
        ph = np.concatenate([ph, pm])
        o = np.argsort(t)
        t, ph = t[o], ph[o]
    raise RuntimeError("argument principle: a root lies on (or very near) the contour")


# ---------------------------------------------------------------------------------------
# one-delay systems: crossing scan on the boundary of the unstable box


@dataclass(frozen=True)
class Crossing:
    """A delay at which a characteristic root lies on the boundary of the unstable box.

    ``root`` [rad/s] (upper half-plane; its conjugate crosses too); ``boundary`` is
    ``"imaginary-axis"`` (``root = i omega``) or ``"cut-off"`` (``root = sigma + i 2 pi f_c``,
    ``sigma > 0``); ``direction`` +1 when the root enters the box as the delay grows, -1 when
    it leaves; ``multiplicity`` the number of roots crossing (2: a conjugate pair)."""

    delay_s: float
    root: complex
    boundary: str
    direction: int
    multiplicity: int = 2

    @property
    def frequency_hz(self) -> float:
        return float(self.root.imag / TWO_PI)


@dataclass(frozen=True)
class CriticalDelay:
    """Result of :meth:`SingleDelaySystem.critical_delay`.

    ``delay_s``: smallest delay [s] with a root of positive real part below the cut-off
    (``inf`` if none up to ``tau_max_s``; 0 if unstable already without delay).
    ``frequency_hz``: ``Im s / 2 pi`` of the root entering there. ``boundary``:
    ``"imaginary-axis"``, ``"cut-off"``, ``"at-zero"`` or ``"none"``. ``crossings``: all
    boundary events up to ``tau_max_s`` (sorted); ``unstable_at_zero``: roots in the box at
    delay 0+."""

    delay_s: float
    frequency_hz: float
    boundary: str
    cutoff_hz: float
    tau_max_s: float
    crossings: tuple = ()
    unstable_at_zero: int = 0

    def unstable_roots(self, delay_s) -> np.ndarray:
        """Number of roots in the unstable box at each delay [s] (from the crossings; valid
        up to ``tau_max_s``)."""
        d = np.asarray(delay_s, dtype=float)
        n = np.full(d.shape, self.unstable_at_zero, dtype=int)
        for c in self.crossings:
            n = n + np.where(d > c.delay_s, c.direction * c.multiplicity, 0)
        return np.maximum(n, 0)

    def to_dict(self) -> dict:
        return dict(
            critical_delay_s=_json_float(self.delay_s),
            frequency_hz=_json_float(self.frequency_hz),
            boundary=self.boundary,
            cutoff_hz=self.cutoff_hz,
        )


def _json_float(x):
    x = float(x)
    return x if math.isfinite(x) else None


class SingleDelaySystem:
    """A linear system with one delay: ``T(s, tau) = A(s) + exp(-s tau) B(s)``, with
    ``A = s^2 M_A + s C_A + K_A`` and ``B = s^2 M_B + s C_B + K_B`` (entire, polynomial).

    ``pencil(s)`` optionally returns a small pair ``(P(s), Q(s))`` with
    ``det(A + z B) = g(s) det(P + z Q)``, ``g`` free of zeros on the boundary of the unstable
    box (e.g. the interface-condensed dynamic stiffnesses of a hybrid test); by default
    ``(A, B)`` themselves.
    """

    def __init__(self, A: tuple, B: tuple, pencil: Callable | None = None, dof_names=None, label: str = ""):
        self.A = tuple(np.atleast_2d(np.asarray(a, dtype=float)) for a in A)
        self.B = tuple(np.atleast_2d(np.asarray(b, dtype=float)) for b in B)
        n = self.A[0].shape[0]
        for m in self.A + self.B:
            if m.shape != (n, n):
                raise ValueError("A and B matrices must all be n x n")
        self.n = n
        self._pencil = pencil
        self.dof_names = tuple(dof_names) if dof_names is not None else tuple(f"q{i}" for i in range(n))
        self.label = label

    ns: Substructure | None = None  # set by hybrid_system
    ps: Substructure | None = None

    @classmethod
    def from_state_space(cls, A0, A1, E1=None) -> "SingleDelaySystem":
        """``x'(t) + E1 x'(t - tau) = A0 x(t) + A1 x(t - tau)``: ``T = s I - A0 + (s E1 - A1) e^{-s tau}``
        (neutral when ``E1`` is given). Units: 1/s."""
        A0 = np.atleast_2d(np.asarray(A0, dtype=float))
        n = A0.shape[0]
        A1 = np.atleast_2d(np.asarray(A1, dtype=float))
        E1 = np.zeros((n, n)) if E1 is None else np.atleast_2d(np.asarray(E1, dtype=float))
        Z = np.zeros((n, n))
        return cls((Z, np.eye(n), -A0), (Z, E1, -A1), label="state-space")

    @property
    def is_neutral(self) -> bool:
        """A delayed highest derivative: a delayed mass (second order) or, for first-order
        systems (all masses zero), a delayed ``x'`` term."""
        if np.any(self.A[0] != 0) or np.any(self.B[0] != 0):
            return bool(np.any(self.B[0] != 0))
        return bool(np.any(self.B[1] != 0))

    # -- forms ---------------------------------------------------------------------------
    def equation(self, delay: float) -> DelayEquation:
        """The delay equation at ``delay`` [s]."""
        return DelayEquation([DelayTerm(0.0, *self.A), DelayTerm(delay, *self.B)])

    def equation_multi(self, delays, weights) -> DelayEquation:
        """``A(s) + sum_j w_j exp(-s tau_j) B(s)``: the delayed part fed through several
        delays [s] with weights (e.g. a forward predictor before the actuator)."""
        terms = [DelayTerm(0.0, *self.A)]
        for d, w in zip(delays, weights):
            terms.append(DelayTerm(float(d), *(float(w) * m for m in self.B)))
        return DelayEquation(terms)

    def matrices(self, s, which: str) -> np.ndarray:
        M, C, K = self.A if which == "A" else self.B
        s = np.asarray(s, dtype=complex)[..., None, None]
        return s * s * M + s * C + K

    def pencil(self, s) -> tuple[np.ndarray, np.ndarray]:
        if self._pencil is not None:
            return self._pencil(s)
        return self.matrices(s, "A"), self.matrices(s, "B")

    def z_roots(self, s) -> np.ndarray:
        """The values ``z`` with ``det(A(s) + z B(s)) = 0`` (``z = exp(-s tau)`` at a root),
        shape (*s.shape, k); ``inf`` where the pencil degree drops."""
        P, Q = self.pencil(np.asarray(s, dtype=complex))
        return _pencil_roots(P, Q)

    def z_infinity(self) -> np.ndarray:
        """Limits of ``z(s)`` as ``|s| -> inf``: finite eigenvalues of ``M_A + z M_B``
        (neutral chains sit near ``Re s = -ln|z| / tau``); empty for retarded systems."""
        if not self.is_neutral:
            return np.array([], dtype=complex)
        lead = 0 if (np.any(self.A[0] != 0) or np.any(self.B[0] != 0)) else 1
        with np.errstate(divide="ignore", invalid="ignore"):
            z = scipy.linalg.eigvals(self.A[lead], -self.B[lead])
        return z[np.isfinite(z)]

    def eigenvalues_without_delay(self) -> np.ndarray:
        """Roots [rad/s] at delay 0 (the emulated structure)."""
        return self.equation(0.0).spectral_roots()

    # -- crossing scan -------------------------------------------------------------------
    def _direction(self, s: complex, tau: float) -> complex:
        """``ds/dtau`` of a simple root ``s`` at delay ``tau`` (left/right null vectors)."""
        A = self.matrices(s, "A")
        B = self.matrices(s, "B")
        e = np.exp(-s * tau)
        T = A + e * B
        U, _, Vh = np.linalg.svd(T)
        u = Vh[-1].conj()
        v = U[:, -1]
        M_A, C_A, _ = self.A
        M_B, C_B, _ = self.B
        dA = 2 * s * M_A + C_A
        dB = 2 * s * M_B + C_B
        Ts = dA + e * (dB - tau * B)
        Tt = -s * e * B
        den = v.conj() @ Ts @ u
        return complex(-(v.conj() @ Tt @ u) / den) if den != 0 else complex(np.nan)

    def _axis_crossings(self, wc: float, tau_max: float) -> list[Crossing]:
        w = np.unique(np.concatenate([np.linspace(wc / 4000, wc, 4000), wc * np.logspace(-5, -2, 120)]))

        def logmod(ww):
            z = self.z_roots(1j * np.asarray(ww))
            with np.errstate(divide="ignore", invalid="ignore"):
                L = np.log(np.abs(z))
            L = np.where(np.isnan(L), 60.0, L)
            return np.sort(np.clip(L, -60, 60), axis=-1)

        L = logmod(w)
        for _ in range(12):
            dl = np.abs(np.diff(L, axis=0)).max(axis=1)
            near = (np.abs(L[:-1]) < 0.3).any(axis=1) | (np.abs(L[1:]) < 0.3).any(axis=1)
            bad = (dl > 0.05) | (near & (dl > 0.01))
            if not bad.any() or w.size > 60000:
                break
            wm = 0.5 * (w[:-1][bad] + w[1:][bad])
            w = np.concatenate([w, wm])
            L = np.concatenate([L, logmod(wm)])
            o = np.argsort(w)
            w, L = w[o], L[o]
        out = []
        for k in range(L.shape[1]):
            f = L[:, k]
            idx = np.flatnonzero(np.sign(f[:-1]) * np.sign(f[1:]) < 0)
            for j in idx:
                if abs(f[j]) > 5 or abs(f[j + 1]) > 5:
                    continue  # a jump through a pole, not a crossing
                ws = scipy.optimize.brentq(lambda x: logmod(np.array([x]))[0, k], w[j], w[j + 1], xtol=1e-13 * wc, rtol=1e-14)
                z = self.z_roots(1j * ws)
                zk = z[np.argmin(np.abs(np.log(np.abs(z))))]
                tau0 = float(np.mod(-np.angle(zk), TWO_PI) / ws)
                if tau0 <= 1e-15:
                    tau0 += TWO_PI / ws
                taus = tau0 + TWO_PI / ws * np.arange(0, max(1, int(np.floor((tau_max - tau0) * ws / TWO_PI)) + 1))
                # On a root z_k(s) = exp(-s tau): ds/dtau = -s / (d ln z_k/ds + tau), so at s = i w
                # sign Re(ds/dtau) = sign(d ln|z_k(i w)| / dw), the same for every tau of the
                # sequence: a root moves right iff |z_k| grows through 1 with frequency.
                d = int(np.sign(f[j + 1] - f[j]))
                for tau in taus[taus <= tau_max]:
                    out.append(Crossing(float(tau), complex(0.0, ws), "imaginary-axis", d, 2))
        return out

    def _cutoff_crossings(self, wc: float, tau_max: float) -> list[Crossing]:
        sig = wc * np.logspace(-7, 3, 700)

        def zs(sg):
            return self.z_roots(np.asarray(sg) + 1j * wc)

        Z = _track(zs(sig))

        def derived(Z, sig):
            with np.errstate(divide="ignore", invalid="ignore"):
                a = -np.log(np.abs(Z))
                tau = a / sig[:, None]
                psi = np.angle(Z) + wc * tau
            return psi, np.isfinite(a) & (a > 0) & (tau <= 1.05 * tau_max)

        for _ in range(30):
            psi, valid = derived(Z, sig)
            v2 = valid[:-1] & valid[1:]
            dpsi = np.abs(np.angle(np.exp(1j * np.diff(psi, axis=0))))
            with np.errstate(divide="ignore", invalid="ignore"):
                dz = np.abs(np.diff(np.log(Z), axis=0))
            bad = (v2 & ((dpsi > 0.5) | ~(dz < 0.3))).any(axis=1)
            if not bad.any() or sig.size > 300000:
                break
            sm = np.sqrt(sig[:-1][bad] * sig[1:][bad])
            sig = np.concatenate([sig, sm])
            o = np.argsort(sig)
            sig = sig[o]
            Z = _track(zs(sig))
        psi, valid = derived(Z, sig)
        out = []
        for k in range(Z.shape[1]):
            j = 0
            n = sig.size
            while j < n - 1:
                if not (valid[j, k] and valid[j + 1, k]):
                    j += 1
                    continue
                j0 = j  # a run of valid samples: unwrap psi within it
                while j < n - 1 and valid[j + 1, k]:
                    j += 1
                run = slice(j0, j + 1)
                pu = np.unwrap(psi[run, k])
                q = pu / TWO_PI
                for i in range(q.size - 1):
                    lo, hi = sorted((q[i], q[i + 1]))
                    for m in range(int(np.ceil(lo)), int(np.floor(hi)) + 1):
                        if m == lo or m == hi:
                            continue
                        jj = j0 + i
                        s_a, s_b = sig[jj], sig[jj + 1]
                        za, zb = Z[jj, k], Z[jj + 1, k]
                        pa, pb = pu[i], pu[i + 1]

                        def g(x, s_a=s_a, s_b=s_b, za=za, zb=zb, pa=pa, pb=pb, m=m):
                            f = (np.log(x) - np.log(s_a)) / (np.log(s_b) - np.log(s_a))
                            zl = za + f * (zb - za)
                            cand = zs(np.array([x]))[0]
                            z = cand[np.argmin(np.abs(cand - zl))]
                            p = np.angle(z) - wc * np.log(np.abs(z)) / x
                            pl = pa + f * (pb - pa)
                            p += TWO_PI * np.round((pl - p) / TWO_PI)
                            return p - TWO_PI * m

                        try:
                            sx = scipy.optimize.brentq(g, s_a, s_b, xtol=1e-14 * s_b, rtol=1e-14)
                        except ValueError:
                            continue
                        cand = zs(np.array([sx]))[0]
                        f = (np.log(sx) - np.log(s_a)) / (np.log(s_b) - np.log(s_a))
                        z = cand[np.argmin(np.abs(cand - (za + f * (zb - za))))]
                        tau = float(-np.log(np.abs(z)) / sx)
                        if not (0 < tau <= tau_max):
                            continue
                        s = complex(sx, wc)
                        ds = self._direction(s, tau)
                        d = -int(np.sign(ds.imag)) if np.isfinite(ds.imag) else 0
                        out.append(Crossing(tau, s, "cut-off", d, 2))
                j += 1
        return out

    def _unstable_at_zero(self, wc: float) -> tuple[int, bool]:
        """(roots in the unstable box at delay 0+, whether a chain makes every delay unstable)."""
        lam = self.eigenvalues_without_delay()
        n0 = int(np.sum((lam.real > 0) & (np.abs(lam.imag) < wc)))
        zi = self.z_infinity()
        # z_inf = 0: advanced type (a delayed mass with no undelayed one); z_inf in (0, 1):
        # a real root chain with Re s ~ -ln z / tau -> +inf for tau -> 0+
        always = bool(np.any((np.abs(zi) < 1e-12) | ((np.abs(zi.imag) < 1e-9 * np.abs(zi)) & (zi.real > 0) & (zi.real < 1))))
        return n0, always

    def crossings(self, cutoff_hz: float = DEFAULT_CUTOFF_HZ, tau_max: float = 1.0) -> list[Crossing]:
        """All delays ``<= tau_max`` [s] at which a root lies on the boundary of the unstable
        box (imaginary axis below the cut-off, or the cut-off line right of the axis),
        sorted by delay."""
        wc = TWO_PI * cutoff_hz
        out = self._axis_crossings(wc, tau_max) + self._cutoff_crossings(wc, tau_max)
        return sorted(out, key=lambda c: c.delay_s)

    def critical_delay(self, cutoff_hz: float = DEFAULT_CUTOFF_HZ, tau_max: float = 1.0, all_crossings: bool = False) -> CriticalDelay:
        """Smallest delay [s] with a root of positive real part and ``|Im s|/2pi`` below
        ``cutoff_hz``, and the frequency of the root entering there. Searched up to
        ``tau_max``; with ``all_crossings`` every boundary event up to ``tau_max`` is kept
        (for :meth:`CriticalDelay.unstable_roots`), otherwise only those up to the critical
        delay."""
        if not cutoff_hz > 0:
            raise ValueError("cutoff_hz must be positive")
        wc = TWO_PI * cutoff_hz
        n0, always = self._unstable_at_zero(wc)
        if always or n0 > 0:
            cr = tuple(self.crossings(cutoff_hz, tau_max)) if all_crossings else ()
            return CriticalDelay(0.0, float("nan"), "at-zero", cutoff_hz, tau_max, cr, max(n0, 1) if always else n0)
        axis = self._axis_crossings(wc, tau_max)
        limit = tau_max
        if not all_crossings:
            ent = [c.delay_s for c in axis if c.direction > 0]
            if ent:
                limit = min(ent)
        cut = self._cutoff_crossings(wc, limit)
        events = sorted(axis + cut, key=lambda c: c.delay_s)
        count = 0
        first = None
        for c in events:
            count += c.direction * c.multiplicity
            if count > 0 and first is None:
                first = c
        if not all_crossings:
            events = [c for c in events if first is None or c.delay_s <= first.delay_s]
        if first is None:
            return CriticalDelay(float("inf"), float("nan"), "none", cutoff_hz, tau_max, tuple(events), 0)
        return CriticalDelay(first.delay_s, first.frequency_hz, first.boundary, cutoff_hz, tau_max, tuple(events), 0)

    def count_unstable(self, delay: float, cutoff_hz: float = DEFAULT_CUTOFF_HZ) -> int:
        """Roots in the unstable box at ``delay`` by the argument principle on the block
        (entire) determinant, independent of the crossing scan. The right edge is placed
        beyond every root using the pencil: a root needs ``|z_k(s)| = exp(-Re(s) tau)``, so
        lines where ``-ln|z_k| < 0.8 Re(s) tau`` on all samples (spacing ``<= Re(s)/2``) are
        root-free."""
        wc = TWO_PI * cutoff_hz
        eq = self.equation(delay)
        if delay == 0:
            lam = self.eigenvalues_without_delay()
            return int(np.sum((lam.real > 0) & (np.abs(lam.imag) < wc)))
        def passes(sigma):  # no root on the line Re s = sigma: -ln|z_k| < 0.8 sigma tau
            n_w = int(max(41, 2 * wc / sigma + 1))
            z = self.z_roots(sigma + 1j * np.linspace(0.0, wc, n_w))
            with np.errstate(divide="ignore", invalid="ignore"):
                a = np.nan_to_num(-np.log(np.abs(z)), nan=np.inf)
            return bool(np.all(a < 0.8 * sigma * delay))

        top = 1e3 * max(wc, 1.0 / delay)
        if not passes(top):
            raise RuntimeError("no bound on the real part of the roots was found")
        hi = _descend(passes, top, floor=wc * 1e-4, cap_ratio=2 * wc / 2000)
        return count_roots(eq, 0.0, float(hi), wc)


def _pencil_roots(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Roots ``z`` of ``det(P + z Q) = 0`` for stacks of small matrices (..., k, k)."""
    P = np.asarray(P, dtype=complex)
    Q = np.asarray(Q, dtype=complex)
    k = P.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if k == 1:
            return (-P[..., 0, 0] / Q[..., 0, 0])[..., None]
        if k == 2:
            a = Q[..., 0, 0] * Q[..., 1, 1] - Q[..., 0, 1] * Q[..., 1, 0]
            b = P[..., 0, 0] * Q[..., 1, 1] + Q[..., 0, 0] * P[..., 1, 1] - P[..., 0, 1] * Q[..., 1, 0] - Q[..., 0, 1] * P[..., 1, 0]
            c = P[..., 0, 0] * P[..., 1, 1] - P[..., 0, 1] * P[..., 1, 0]
            r = np.sqrt(b * b - 4 * a * c)
            r = np.where((np.conj(b) * r).real >= 0, r, -r)
            q = -0.5 * (b + r)
            z1 = q / a
            z2 = c / q
            z1 = np.where(np.abs(a) <= 1e-300, np.inf + 0j, z1)
            return np.stack([z1, z2], axis=-1)
        flatP = P.reshape(-1, k, k)
        flatQ = Q.reshape(-1, k, k)
        out = np.empty((flatP.shape[0], k), dtype=complex)
        for i in range(flatP.shape[0]):
            lam = scipy.linalg.eigvals(flatP[i], -flatQ[i])
            lam = np.where(np.isfinite(lam), lam, np.inf)
            out[i, : lam.size] = lam
        return out.reshape(P.shape[:-2] + (k,))


def _track(Z: np.ndarray) -> np.ndarray:
    """Reorder the columns of each row of ``Z`` (n, k) to follow continuous branches: the
    permutation matching consecutive rows best in ``log z`` (distance ``|d ln|z|| + |d arg z|``)
    is found for all rows at once and composed cumulatively."""
    k = Z.shape[1]
    if k == 1 or Z.shape[0] < 2:
        return Z.copy()
    import itertools

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = np.isfinite(Z) & (Z != 0)
        lz = np.log(np.where(ok, Z, 1e300))
    lp, lc = lz[:-1], lz[1:]
    perms = list(itertools.permutations(range(k)))
    if len(perms) > 120:
        raise ValueError("branch tracking supports interfaces of at most 5 DOFs")
    cost = np.empty((lp.shape[0], len(perms)))
    for q, p in enumerate(perms):
        d = np.abs(lp.real - lc[:, p].real) + np.abs(np.angle(np.exp(1j * (lp.imag - lc[:, p].imag))))
        cost[:, q] = d.sum(axis=1)
    best = np.argmin(cost, axis=1)
    n = Z.shape[0]
    cols = np.empty((n, k), dtype=int)  # cols[i, j]: raw column of row i on branch j
    cur = np.arange(k)
    start = 0
    for i in np.flatnonzero(best != 0) + 1:  # rows where the matching is not the identity
        cols[start:i] = cur
        cur = np.asarray(perms[best[i - 1]])[cur]
        start = i
    cols[start:] = cur
    return np.take_along_axis(Z, cols, axis=1)


# ---------------------------------------------------------------------------------------
# builders


class _Condensed:
    """Fast ``D_cond(s) = D_ii - D_ib D_bb^-1 D_bi`` of a substructure: in the undamped bulk
    modes when the bulk damping is diagonal in them (proportional damping), else by solves."""

    def __init__(self, S: Structure, iface: list[int]):
        n = S.n_dof
        b = [j for j in range(n) if j not in set(iface)]
        self.i, self.b = list(iface), b
        ix = np.ix_
        self.Mii, self.Cii, self.Kii = (getattr(S, m)[ix(iface, iface)] for m in ("M", "C", "K"))
        self.S = S
        self.modal = False
        if not b:
            return
        Mbb, Cbb, Kbb = (getattr(S, m)[ix(b, b)] for m in ("M", "C", "K"))
        try:
            w2, Phi = scipy.linalg.eigh(Kbb, Mbb)
        except (np.linalg.LinAlgError, ValueError):
            return
        Cm = Phi.T @ Cbb @ Phi
        off = Cm - np.diag(np.diag(Cm))
        if np.abs(off).max(initial=0.0) > 1e-9 * max(np.abs(Cm).max(initial=0.0), 1e-300):
            return
        self.modal = True
        self.w2 = w2
        self.cd = np.diag(Cm)
        self.Gbi = [Phi.T @ getattr(S, m)[ix(b, iface)] for m in ("M", "C", "K")]
        self.Gib = [getattr(S, m)[ix(iface, b)] @ Phi for m in ("M", "C", "K")]

    def __call__(self, s) -> np.ndarray:
        s = np.asarray(s, dtype=complex)
        ss = s[..., None, None]
        Dii = ss * ss * self.Mii + ss * self.Cii + self.Kii
        if not self.b:
            return Dii
        if not self.modal:
            D = self.S.dynamic_stiffness(s)
            i, b = self.i, self.b
            Dib = D[..., i, :][..., :, b]
            Dbi = D[..., b, :][..., :, i]
            Dbb = D[..., b, :][..., :, b]
            return Dii - Dib @ np.linalg.solve(Dbb, Dbi)
        Gbi = ss * ss * self.Gbi[0] + ss * self.Gbi[1] + self.Gbi[2]
        Gib = ss * ss * self.Gib[0] + ss * self.Gib[1] + self.Gib[2]
        d = s[..., None] ** 2 + s[..., None] * self.cd + self.w2
        return Dii - Gib @ (Gbi / d[..., :, None])


def hybrid_system(ns: Substructure, ps: Substructure, label: str = "") -> SingleDelaySystem:
    """The classical real-time hybrid test with actuator delay ``tau``.

    Derivation. Unknowns: NS bulk ``u_b``, interface ``u_i`` (computed by the NS), PS bulk
    ``p_b``. The actuator imposes ``x_i(t) = u_i(t - tau)`` on the PS, so the PS bulk obeys
    ``P_bi x_i + P_bb p_b = 0`` and the measured interface force is
    ``r = P_ii x_i + P_ib p_b``; the NS interface equation is ``N_ib u_b + N_ii u_i + r = F_i``.
    With ``e = exp(-s tau)`` (``x_i = e u_i``) the characteristic matrix in
    (NS bulk, interface, PS bulk) coordinates is

        [[N_bb, N_bi,          0   ],
         [N_ib, N_ii + e P_ii, P_ib],
         [0,    e P_bi,        P_bb]]

    (the delay sits on the PS entries of the interface *column*: the PS sees the delayed
    interface motion). Scaling the PS-bulk column by ``e`` and its row by ``1/e`` gives the
    equivalent form with ``e P_ib`` instead; the determinant is the same. Eliminating the
    bulks, ``det T = det N_bb det P_bb det(D_N(s) + e D_P(s))``: an entire function without
    the rational poles of the condensed form. The ``e s^2 M_P`` entries make it neutral.
    Interface orders of ``ns`` and ``ps`` must correspond; both structures must be symmetric.
    """
    if len(ns.interface) != len(ps.interface):
        raise ValueError("the substructures' interfaces differ in size")
    Ni, Nb = ns.interface_index, ns.bulk_index
    Pi, Pb = ps.interface_index, ps.bulk_index
    nb, ni, pb = len(Nb), len(Ni), len(Pb)
    n = nb + ni + pb
    I_ = slice(nb, nb + ni)
    B_ = slice(nb + ni, n)
    A, B = [], []
    for m in ("M", "C", "K"):
        N = getattr(ns.structure, m)
        P = getattr(ps.structure, m)
        a = np.zeros((n, n))
        bm = np.zeros((n, n))
        no = Nb + Ni
        a[: nb + ni, : nb + ni] = N[np.ix_(no, no)]
        a[I_, B_] = P[np.ix_(Pi, Pb)]
        a[B_, B_] = P[np.ix_(Pb, Pb)]
        bm[I_, I_] = P[np.ix_(Pi, Pi)]
        bm[B_, I_] = P[np.ix_(Pb, Pi)]
        A.append(a)
        B.append(bm)
    cn = _Condensed(ns.structure, Ni)
    cp = _Condensed(ps.structure, Pi)
    names = (
        tuple(f"N.{ns.structure.dof_names[j]}" for j in Nb)
        + tuple(f"I.{q}" for q in ns.interface)
        + tuple(f"P.{ps.structure.dof_names[j]}" for j in Pb)
    )
    sys_ = SingleDelaySystem(A, B, pencil=lambda s: (cn(s), cp(s)), dof_names=names, label=label)
    sys_.ns, sys_.ps = ns, ps
    return sys_


def sdof_system(m: float, c: float, k: float, ks: float) -> SingleDelaySystem:
    """Single oscillator split at its spring: ``m z'' + c z' + k z + k_s z(t - tau) = 0``
    (NS: mass m [kg], damper c [N s/m], spring k [N/m]; PS: spring k_s [N/m] behind the
    actuator)."""
    for name, v in (("m", m), ("k", k)):
        if not v > 0:
            raise ValueError(f"{name} must be positive, got {v}")
    if c < 0:
        raise ValueError(f"c must be non-negative, got {c}")
    return SingleDelaySystem(([[m]], [[c]], [[k]]), ([[0.0]], [[0.0]], [[ks]]), dof_names=("z",), label="sdof")


def chain_hybrid(
    masses,
    springs,
    dampers=None,
    left_wall: bool = True,
    right_wall: bool = False,
    interface=(),
    physical_masses=(),
    physical_links=(),
) -> SingleDelaySystem:
    """A lumped chain split into NS and PS (same link numbering as
    :func:`hbtest.structures.mass_chain`: link i joins element i-1 and i of
    ``[left wall] m_0 .. m_{n-1} [right wall]``). Masses listed in ``physical_masses`` and
    links in ``physical_links`` form the PS; the rest the NS. ``interface`` lists the DOF
    indices driven by the actuators (one actuator each, all with the same delay); every DOF
    touched by both parts must be there. DOFs touched only by the PS are its bulk."""
    m, k, c, ends = chain_links(masses, springs, dampers, left_wall, right_wall)
    n, n_links = m.size, k.size
    iface = [int(i) for i in interface]
    pm = {int(i) for i in physical_masses}
    pl = {int(i) for i in physical_links}
    for i in iface + sorted(pm):
        if not 0 <= i < n:
            raise ValueError(f"DOF index {i} outside 0..{n - 1}")
    for i in pl:
        if not 0 <= i < n_links:
            raise ValueError(f"link index {i} outside 0..{n_links - 1}")
    if not iface:
        raise ValueError("at least one interface DOF is needed")
    if len(set(iface)) != len(iface):
        raise ValueError("interface DOFs repeat")
    mats = {side: [np.zeros((n, n)) for _ in range(3)] for side in ("N", "P")}
    touched = {"N": set(), "P": set()}
    for j in range(n):
        side = "P" if j in pm else "N"
        mats[side][0][j, j] += m[j]
        if m[j] > 0:
            touched[side].add(j)
    for link in range(n_links):
        side = "P" if link in pl else "N"
        a, b = ends[link], ends[link + 1]
        stamp_link(mats[side][2], a, b, k[link])
        stamp_link(mats[side][1], a, b, c[link])
        for p in (a, b):
            if p is not None and (k[link] > 0 or c[link] > 0):
                touched[side].add(p)
    both = touched["N"] & touched["P"]
    missing = sorted(both - set(iface))
    if missing:
        raise ValueError(f"DOFs {missing} belong to both substructures but are not in the interface")
    for i in iface:
        if i not in touched["P"]:
            raise ValueError(f"interface DOF {i} has no physical element attached")
    free = sorted(set(range(n)) - touched["N"] - touched["P"])
    if free:
        raise ValueError(f"DOFs {free} have no mass, spring or damper")
    n_dofs = [j for j in range(n) if j in touched["N"] and j not in iface] + iface
    p_dofs = iface + [j for j in range(n) if j in touched["P"] and j not in iface]
    names = [f"x{j}" for j in range(n)]

    def struct(side, dofs):
        M, C, K = (x[np.ix_(dofs, dofs)] for x in mats[side])
        return Structure(M=M, C=C, K=K, dof_names=tuple(names[j] for j in dofs))

    ns = Substructure(struct("N", n_dofs), tuple(names[j] for j in iface))
    ps = Substructure(struct("P", p_dofs), tuple(names[j] for j in iface))
    return hybrid_system(ns, ps, label="chain")


def craig_bampton(sub: Substructure, max_frequency_hz: float | None = None, n_modes: int | None = None) -> Substructure:
    """Craig–Bampton reduction: interface DOFs plus the fixed-interface modes below
    ``max_frequency_hz`` (or the first ``n_modes``). Basis ``[[I, 0], [Psi, Phi]]`` with
    static constraint modes ``Psi = -K_bb^-1 K_bi`` and mass-normalised bulk modes ``Phi``;
    ``M, C, K`` projected (proportional damping stays proportional). DOFs of the result:
    the interface names, then ``q0, q1, ...``."""
    S = sub.structure
    i, b = sub.interface_index, sub.bulk_index
    if not b:
        return sub
    ix = np.ix_
    w2, Phi = scipy.linalg.eigh(S.K[ix(b, b)], S.M[ix(b, b)])
    f = np.sqrt(np.clip(w2, 0, None)) / TWO_PI
    if n_modes is not None:
        keep = np.arange(min(int(n_modes), f.size))
    elif max_frequency_hz is not None:
        keep = np.flatnonzero(f <= max_frequency_hz)
    else:
        keep = np.arange(f.size)
    Psi = -np.linalg.solve(S.K[ix(b, b)], S.K[ix(b, i)])
    n, ni, nq = S.n_dof, len(i), keep.size
    T = np.zeros((n, ni + nq))
    T[i, :ni] = np.eye(ni)
    T[ix(b, range(ni))] = Psi
    T[ix(b, range(ni, ni + nq))] = Phi[:, keep]
    red = Structure(
        M=T.T @ S.M @ T, C=T.T @ S.C @ T, K=T.T @ S.K @ T, dof_names=tuple(sub.interface) + tuple(f"q{j}" for j in range(nq))
    )
    sym = lambda a: 0.5 * (a + a.T)  # noqa: E731 - remove round-off asymmetry
    red = Structure(M=sym(red.M), C=sym(red.C), K=sym(red.K), dof_names=red.dof_names)
    return Substructure(red, tuple(sub.interface))


def beam_hybrid(
    total_length: float,
    interface_at: float,
    width: float,
    thickness: float,
    youngs_modulus: float,
    density: float,
    zeta_mass: float = 0.0,
    zeta_stiffness: float = 0.0,
    elements_per_metre: float = 60.0,
    physical: dict | None = None,
    modes_up_to_hz: float | None = None,
    root: str = "clamped",
    tip: str = "free",
    min_elements: int = 3,
) -> SingleDelaySystem:
    """Beam split at ``interface_at`` [m from the root]: NS = root part (``root`` BC,
    interface at its end), PS = tip part (interface at its start, ``tip`` BC), interface DOFs
    (u, theta), one delay on both actuators. SI units; damping ``C = zeta_mass M +
    zeta_stiffness K``. ``physical`` overrides the PS section/material (keys of
    :func:`hbtest.structures.beam`). ``modes_up_to_hz`` applies a Craig–Bampton reduction to
    each part (fixed-interface modes up to that frequency)."""
    if not 0 < interface_at < total_length:
        raise ValueError(f"interface at {interface_at} m is outside the beam (0, {total_length})")
    ln, lp = interface_at, total_length - interface_at
    kw = dict(width=width, thickness=thickness, youngs_modulus=youngs_modulus, density=density, zeta_mass=zeta_mass, zeta_stiffness=zeta_stiffness)
    kp = dict(kw, **(physical or {}))
    nn = max(min_elements, int(round(ln * elements_per_metre)))
    npe = max(min_elements, int(round(lp * elements_per_metre)))
    nb_ = beam(ln, n_elements=nn, left=root, right="free", **kw)
    pb_ = beam(lp, n_elements=npe, left="free", right=tip, x_offset=ln, **kp)
    jn = nb_.x_nodes.size - 1
    ns = Substructure(nb_, (f"u{jn}", f"theta{jn}"))
    ps = Substructure(pb_, ("u0", "theta0"))
    if modes_up_to_hz is not None:
        ns = craig_bampton(ns, modes_up_to_hz)
        ps = craig_bampton(ps, modes_up_to_hz)
    return hybrid_system(ns, ps, label=f"beam alpha={interface_at / total_length:.4g}")


# ---------------------------------------------------------------------------------------
# the single oscillator: closed forms


def sdof_critical_delay(m: float, c: float, k: float, ks: float) -> CriticalDelay:
    """Closed-form critical delay [s] of ``m z'' + c z' + k z + k_s z(t - tau) = 0``.

    From ``s = i w``: the crossing frequencies solve ``|k - m w^2 + i c w| = |k_s|``, i.e.
    ``m^2 w^4 + (c^2 - 2 k m) w^2 + k^2 - k_s^2 = 0``; at each, ``exp(-i w tau) = z`` with
    ``z = -(k - m w^2 + i c w)/k_s`` gives ``tau = ((-arg z) mod 2 pi) / w`` (+ multiples of
    ``2 pi / w``). The critical delay is the smallest such tau (the first crossing from a
    stable start is destabilising); ``frequency_hz = w / 2 pi``. No cut-off applies
    (``cutoff_hz = inf``). Undamped or ``k + k_s <= 0``: 0 ("at-zero"); no crossing:
    ``inf`` ("none", stable for all delays)."""
    if not (m > 0 and k > 0 and c >= 0):
        raise ValueError("need m > 0, k > 0, c >= 0")
    if k + ks <= 0 or c == 0:
        return CriticalDelay(0.0, float("nan"), "at-zero", float("inf"), float("inf"), (), 1)
    if ks == 0:
        return CriticalDelay(float("inf"), float("nan"), "none", float("inf"), float("inf"), (), 0)
    w = _sdof_crossing_omegas(m, c, k, ks)
    best = (float("inf"), float("nan"))
    for wi in w:
        z = -(k - m * wi * wi + 1j * c * wi) / ks
        tau = float(np.mod(-np.angle(z), TWO_PI) / wi)
        best = min(best, (tau, wi / TWO_PI))
    if not math.isfinite(best[0]):
        return CriticalDelay(float("inf"), float("nan"), "none", float("inf"), float("inf"), (), 0)
    return CriticalDelay(best[0], best[1], "imaginary-axis", float("inf"), float("inf"), (), 0)


def _sdof_crossing_omegas(m, c, k, ks) -> np.ndarray:
    a, b, cc = m * m, c * c - 2 * k * m, k * k - ks * ks
    disc = b * b - 4 * a * cc
    if disc < 0:
        return np.array([])
    r = np.sqrt(disc)
    W = np.array([(-b + r) / (2 * a), (-b - r) / (2 * a)])
    W = W[W > 0]
    return np.sqrt(np.unique(W))


@dataclass(frozen=True)
class PhaseMargin:
    """Phase-margin estimate of the critical delay: loop ``L(s) = k_s/(m s^2 + c s + k)``,
    crossover ``|L(i w_c)| = 1``, margin ``phi_m = pi + arg L(i w_c)`` (in [0, 2 pi)),
    ``tau_c = phi_m / w_c``. With two crossovers the one giving the smaller delay is
    reported."""

    phase_margin_rad: float
    crossover_hz: float
    critical_delay_s: float

    @property
    def phase_margin_deg(self) -> float:
        return float(np.degrees(self.phase_margin_rad))


def sdof_phase_margin(m: float, c: float, k: float, ks: float) -> PhaseMargin:
    """The phase-margin method for the split oscillator (see :class:`PhaseMargin`). No
    crossover (loop gain never 1): infinite delay margin, NaN margin."""
    if not (m > 0 and k > 0 and c >= 0):
        raise ValueError("need m > 0, k > 0, c >= 0")
    best = PhaseMargin(float("nan"), float("nan"), float("inf"))
    if ks == 0:
        return best
    for w in _sdof_crossing_omegas(m, c, k, ks):
        L = ks / (k - m * w * w + 1j * c * w)
        pm = float(np.mod(np.pi + np.angle(L), TWO_PI))
        tau = pm / w
        if tau < best.critical_delay_s:
            best = PhaseMargin(pm, float(w / TWO_PI), float(tau))
    return best


def sdof_hopf_curve_p(zeta: float, omega_hat, branch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Hopf curve in the (tau_hat, p) plane of ``lam^2 + 2 zeta lam + 1 + p e^{-lam tau_hat}``
    at fixed ``zeta``, parameterised by the crossing frequency ``omega_hat`` (> 0, in units of
    w_n): ``p = sqrt((1 - w^2)^2 + 4 zeta^2 w^2)``,
    ``tau_hat = (atan2(2 zeta w, w^2 - 1) + 2 pi branch) / w``. Returns (tau_hat, p)."""
    w = np.asarray(omega_hat, dtype=float)
    p = np.sqrt((1 - w * w) ** 2 + 4 * zeta * zeta * w * w)
    tau = (np.arctan2(2 * zeta * w, w * w - 1) + TWO_PI * branch) / w
    return tau, p


def sdof_hopf_curve_zeta(p: float, omega_hat, branch: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Hopf curve in the (tau_hat, zeta) plane at fixed ``p > 0``: for
    ``|w^2 - 1| <= p``, ``tau_hat = (arccos((w^2 - 1)/p) + 2 pi branch)/w`` and
    ``zeta = sqrt(p^2 - (w^2 - 1)^2) / (2 w)``. Frequencies outside the range give NaN.
    Returns (tau_hat, zeta)."""
    w = np.asarray(omega_hat, dtype=float)
    x = (w * w - 1) / p
    ok = np.abs(x) <= 1
    xc = np.clip(x, -1, 1)
    tau = np.where(ok, (np.arccos(xc) + TWO_PI * branch) / w, np.nan)
    zeta = np.where(ok, np.sqrt(np.clip(p * p - (w * w - 1) ** 2, 0, None)) / (2 * w), np.nan)
    return tau, zeta


def sdof_stable_for_all_delays(zeta, p) -> np.ndarray:
    """True where ``lam^2 + 2 zeta lam + 1 + p e^{-lam tau}`` is stable for every delay:
    stable without delay (``zeta > 0``, ``p > -1``) and no crossing frequency, i.e. no
    positive root ``W = w^2`` of ``W^2 - (2 - 4 zeta^2) W + 1 - p^2 = 0`` (for ``p >= 0``:
    ``p < 1`` and either ``zeta^2 >= 1/2`` or ``(1 - 2 zeta^2)^2 < 1 - p^2``)."""
    zeta = np.asarray(zeta, dtype=float)
    p = np.asarray(p, dtype=float)
    h = 1 - 2 * zeta * zeta
    disc = h * h - (1 - p * p)
    with np.errstate(invalid="ignore"):
        wplus = h + np.sqrt(np.clip(disc, 0, None))
    crossing = (disc >= 0) & (wplus > 0) & (p != 0)
    return (zeta > 0) & (p > -1) & ~crossing


def small_delay_estimate(c: float, ks: float) -> float:
    """First-order estimate of the critical delay [s]: ``exp(-s tau) ~ 1 - s tau`` turns the
    delayed spring into a negative damper ``-k_s tau``; instability when ``c - k_s tau < 0``,
    so ``tau_c ~ c / k_s`` (accurate for light damping)."""
    return float(c / ks)


# ---------------------------------------------------------------------------------------
# compensated loops


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
    if n_samples < order + 1:
        raise ValueError(f"a polynomial of order {order} needs at least {order + 1} samples, got {n_samples}")
    t = -np.arange(n_samples, dtype=float)
    X = np.vander(t, order + 1, increasing=True)
    pinv = np.linalg.pinv(X)  # = (X^T X)^-1 X^T for full column rank
    h = np.asarray(horizon_samples, dtype=float)
    Xp = h[..., None] ** np.arange(order + 1)
    return Xp @ pinv


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
    delays = delay + sample_time * np.arange(n_samples)
    return system.equation_multi(delays, w)


def stable_prediction_intervals(
    system: SingleDelaySystem,
    delay: float,
    order: int,
    n_samples: int,
    sample_time: float,
    rho_range: tuple[float, float] | None = None,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    n_grid: int = 41,
    tol: float | None = None,
) -> list[tuple[float, float]]:
    """Intervals of prediction horizon ``rho`` [s] for which the predictor-compensated loop
    (:func:`predictor_equation`) has no root with ``Re s > 0`` below the cut-off. The range
    (default ``[0, 3 tau + n dt]``) is scanned on ``n_grid`` points (argument-principle
    count) and the ends refined by bisection to ``tol`` (default ``dt/1000``). An interval
    touching the scanned range's end is clipped there."""
    lo, hi = rho_range if rho_range is not None else (0.0, 3 * delay + n_samples * sample_time)
    tol = sample_time * 1e-3 if tol is None else tol

    def stable(r):
        return predictor_equation(system, delay, order, n_samples, sample_time, r).count_unstable(cutoff_hz) == 0

    grid = np.linspace(lo, hi, n_grid)
    st = [stable(r) for r in grid]

    def edge(a, b, sa):
        while b - a > tol:
            mid = 0.5 * (a + b)
            if stable(mid) == sa:
                a = mid
            else:
                b = mid
        return 0.5 * (a + b)

    out = []
    start = grid[0] if st[0] else None
    for i in range(1, grid.size):
        if st[i] != st[i - 1]:
            x = edge(grid[i - 1], grid[i], st[i - 1])
            if st[i]:
                start = x
            else:
                out.append((float(start), float(x)))
                start = None
    if start is not None:
        out.append((float(start), float(grid[-1])))
    return out


# ---------------------------------------------------------------------------------------
# root locus, time simulation


def root_locus(system: SingleDelaySystem, delays, cutoff_hz: float = DEFAULT_CUTOFF_HZ, sigma_min: float | None = None, n_nodes: int | None = None) -> list[np.ndarray]:
    """Roots [rad/s] below the cut-off for each delay [s] (spectral method + Newton)."""
    return [system.equation(float(d)).roots(cutoff_hz, sigma_min=sigma_min, n_nodes=n_nodes) for d in delays]


def simulate(eq: DelayEquation, t_end: float, dt: float, x0=None, history: Callable | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Integrate the delay equation by the method of steps with classical RK4.

    Uses the first-order form ``E_0 x'(t) = A_0 x(t) + sum_k [A_k x(t - tau_k) - E_k
    x'(t - tau_k)]`` (``x = [u; u']`` for second-order equations), ``E_0`` invertible; delayed
    values and derivatives come from cubic Lagrange interpolation of the stored solution.
    Every delay must be at least ``dt``. Initial history: ``history(t) -> (x, x')`` for
    ``t <= 0`` or the constant ``x0`` (derivative 0). Returns (t, x) with x shape
    (n_steps + 1, n_state). Units: s."""
    delays, E, A = eq.first_order()
    ns = E[0].shape[0]
    E0inv = np.linalg.inv(E[0])
    dl = [(float(d), Ek, Ak) for d, Ek, Ak in zip(delays[1:], E[1:], A[1:])]
    if dl and min(d for d, _, _ in dl) < dt * (1 - 1e-12):
        raise ValueError("every delay must be at least one time step")
    n_steps = int(round(t_end / dt))
    h0 = int(np.ceil(max([d for d, _, _ in dl], default=0.0) / dt)) + 4
    if history is None:
        x0 = np.zeros(ns) if x0 is None else np.asarray(x0, dtype=float)
        history = lambda t: (x0, np.zeros(ns))  # noqa: E731
    X = np.zeros((h0 + n_steps + 1, ns))
    Xd = np.zeros_like(X)
    for j in range(h0 + 1):
        X[j], Xd[j] = history((j - h0) * dt)
    last = h0  # index of the latest known sample (t = 0)

    # With a fixed step the delayed abscissae sit at a fixed offset from the latest sample for
    # each stage (c = 0, 1/2, 1): precompute the cubic Lagrange stencils (start index relative
    # to the latest sample, weights), using known samples only.
    def stencil(u):
        j = int(np.floor(u + 1e-9))
        j0 = min(j - 1, -3)
        xs = np.arange(j0, j0 + 4, dtype=float)
        L = np.ones(4)
        for a in range(4):
            for b in range(4):
                if a != b:
                    L[a] *= (u - xs[b]) / (xs[a] - xs[b])
        return j0, L

    sten = {c: [(*stencil(c - d / dt), Ek, Ak) for d, Ek, Ak in dl] for c in (0.0, 0.5, 1.0)}

    def f(c, x):
        rhs = A[0] @ x
        for j0, L, Ek, Ak in sten[c]:
            i = last + j0
            rhs = rhs + Ak @ (L @ X[i : i + 4]) - Ek @ (L @ Xd[i : i + 4])
        return E0inv @ rhs

    Xd[h0] = f(0.0, X[h0])
    for i in range(n_steps):
        x = X[last]
        k1 = Xd[last]
        k2 = f(0.5, x + dt / 2 * k1)
        k3 = f(0.5, x + dt / 2 * k2)
        k4 = f(1.0, x + dt * k3)
        X[last + 1] = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        last += 1
        Xd[last] = f(0.0, X[last])
    return dt * np.arange(n_steps + 1), X[h0:]


# ---------------------------------------------------------------------------------------
# maps


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


def beam_delay_map(
    alphas,
    delays,
    total_length: float,
    width: float,
    thickness: float,
    youngs_modulus: float,
    density: float,
    zeta_mass: float = 0.0,
    zeta_stiffness: float = 0.0,
    cutoff_hz: float = DEFAULT_CUTOFF_HZ,
    elements_per_metre: float = 60.0,
    physical: dict | None = None,
) -> DelayMap:
    """The (delay, alpha) map of a split beam, ``alpha = L_N / L`` (the interface moved along
    the beam; each part keeps its section). See :func:`beam_hybrid`, :func:`delay_map`."""

    def factory(a):
        return beam_hybrid(total_length, a * total_length, width, thickness, youngs_modulus, density, zeta_mass, zeta_stiffness, elements_per_metre, physical)

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

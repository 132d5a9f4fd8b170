"""Linear delay equations: characteristic matrix, roots, root counting (docs/method.md §4).

A :class:`DelayEquation` is

    sum_k  M_k u''(t - tau_k) + C_k u'(t - tau_k) + K_k u(t - tau_k) = 0,

with characteristic matrix ``T(s) = sum_k (s^2 M_k + s C_k + K_k) exp(-s tau_k)``; its roots
are the zeros of the entire function ``det T(s)``. Retarded when only the undelayed term
carries the highest derivative, neutral when a delayed term does too. A first-order
(state-space) system is the special case with all ``M_k = 0``.

Units: delays [s], roots ``s = sigma + i omega`` [rad/s] (``Re s > 0``: a growing solution
``exp(s t)``), cut-off frequencies [Hz].

Methods: Chebyshev collocation of the infinitesimal generator (spectral method, retarded and
neutral) with Newton polishing on ``det T``; argument-principle root counting on rectangles
(:func:`count_roots`, an independent check).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.linalg

__all__ = ["DEFAULT_CUTOFF_HZ", "TWO_PI", "DelayTerm", "DelayEquation", "count_roots"]

DEFAULT_CUTOFF_HZ = 500.0  # actuator cut-off [Hz]: only roots with |Im s| < 2 pi f_c count
TWO_PI = 2.0 * np.pi



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


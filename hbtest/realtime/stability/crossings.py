"""Crossing scan of a one-delay system on the boundary of the unstable box (docs/method.md §4).

For ``T(s, tau) = A(s) + exp(-s tau) B(s)`` a root ``s`` at delay ``tau`` needs
``z = exp(-s tau)`` to be an eigenvalue ``z_k(s)`` of the pencil ``A(s) + z B(s)`` (or of the
smaller pencil the system provides). Roots enter or leave the *unstable box*
(``Re s > 0``, ``|Im s| < wc``, ``wc = 2 pi f_c`` [rad/s]) through

- the imaginary axis (a Hopf crossing): ``|z_k(i w)| = 1``, then ``tau = (-arg z_k) / w``
  modulo ``2 pi / w`` (:func:`axis_crossings`);
- the cut-off line ``s = sigma + i wc``, ``sigma > 0``, which is how neutral root chains
  arrive: ``tau = -ln|z_k| / sigma`` and the phase condition (:func:`cutoff_crossings`).

Delays in s, roots in rad/s, frequencies reported in Hz. ``direction`` +1: the root enters
the box as the delay grows.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import scipy.linalg
import scipy.optimize

from .equation import TWO_PI

__all__ = ["Crossing", "CriticalDelay", "MAX_CROSSINGS", "axis_crossings", "cutoff_crossings", "root_direction", "pencil_roots", "track_branches"]

# the scan lists every boundary crossing up to tau_max; a branch crossing at frequency f has
# about f * tau_max of them. More than this (per scan) is refused: the list would not fit in
# memory (raise the delay bound or lower the cut-off instead).
MAX_CROSSINGS = 200_000


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


def _check_count(n: int, tau_max: float, w: float) -> None:
    if n > MAX_CROSSINGS:
        raise ValueError(
            f"more than {MAX_CROSSINGS} boundary crossings up to tau_max = {tau_max:g} s (a root branch near "
            f"{w / TWO_PI:g} Hz crosses every {TWO_PI / w:.3g} s): search a shorter delay range"
        )


def _json_float(x):
    x = float(x)
    return x if math.isfinite(x) else None




def pencil_roots(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
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


def track_branches(Z: np.ndarray) -> np.ndarray:
    """Reorder the columns of each row of ``Z`` (n, k) to follow continuous branches: the
    permutation matching consecutive rows best in ``log z`` (distance ``|d ln|z|| + |d arg z|``)
    is found for all rows at once and composed cumulatively."""
    k = Z.shape[1]
    if k == 1 or Z.shape[0] < 2:
        return Z.copy()
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
        start = int(i)
    cols[start:] = cur
    return np.take_along_axis(Z, cols, axis=1)


def root_direction(system, s: complex, tau: float) -> complex:
    """``ds/dtau`` of a simple root ``s`` at delay ``tau`` (left/right null vectors)."""
    A = system.matrices(s, "A")
    B = system.matrices(s, "B")
    e = np.exp(-s * tau)
    T = A + e * B
    U, _, Vh = np.linalg.svd(T)
    u = Vh[-1].conj()
    v = U[:, -1]
    M_A, C_A, _ = system.A
    M_B, C_B, _ = system.B
    dA = 2 * s * M_A + C_A
    dB = 2 * s * M_B + C_B
    Ts = dA + e * (dB - tau * B)
    Tt = -s * e * B
    den = v.conj() @ Ts @ u
    return complex(-(v.conj() @ Tt @ u) / den) if den != 0 else complex(np.nan)


def axis_crossings(system, wc: float, tau_max: float) -> list[Crossing]:
    """Crossings of the imaginary axis below ``wc`` [rad/s] at delays ``<= tau_max`` [s]."""
    w = np.unique(np.concatenate([np.linspace(wc / 4000, wc, 4000), wc * np.logspace(-5, -2, 120)]))

    def logmod(ww):
        z = system.z_roots(1j * np.asarray(ww))
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
    out: list[Crossing] = []
    for k in range(L.shape[1]):
        f = L[:, k]
        idx = np.flatnonzero(np.sign(f[:-1]) * np.sign(f[1:]) < 0)
        for j in idx:
            if abs(f[j]) > 5 or abs(f[j + 1]) > 5:
                continue  # a jump through a pole, not a crossing
            ws = scipy.optimize.brentq(lambda x: logmod(np.array([x]))[0, k], w[j], w[j + 1], xtol=1e-13 * wc, rtol=1e-14)
            z = system.z_roots(1j * ws)
            zk = z[np.argmin(np.abs(np.log(np.abs(z))))]
            tau0 = float(np.mod(-np.angle(zk), TWO_PI) / ws)
            if tau0 <= 1e-15:
                tau0 += TWO_PI / ws
            n_tau = max(1, int(np.floor((tau_max - tau0) * ws / TWO_PI)) + 1)
            _check_count(len(out) + n_tau, tau_max, ws)
            taus = tau0 + TWO_PI / ws * np.arange(0, n_tau)
            # On a root z_k(s) = exp(-s tau): ds/dtau = -s / (d ln z_k/ds + tau), so at s = i w
            # sign Re(ds/dtau) = sign(d ln|z_k(i w)| / dw), the same for every tau of the
            # sequence: a root moves right iff |z_k| grows through 1 with frequency.
            d = int(np.sign(f[j + 1] - f[j]))
            for tau in taus[taus <= tau_max]:
                out.append(Crossing(float(tau), complex(0.0, ws), "imaginary-axis", d, 2))
    return out


def cutoff_crossings(system, wc: float, tau_max: float) -> list[Crossing]:
    """Crossings of the cut-off line ``Im s = wc`` right of the axis at delays ``<= tau_max`` [s]."""
    def zs(sg):
        return system.z_roots(np.asarray(sg) + 1j * wc)

    sig, Z, psi, valid = _cutoff_branches(zs, wc, tau_max)
    out: list[Crossing] = []
    for k in range(Z.shape[1]):
        for j0, j1 in _valid_runs(valid[:, k]):
            pu = np.unwrap(psi[j0 : j1 + 1, k])  # a run of valid samples: unwrap psi within it
            q = pu / TWO_PI
            for i in range(q.size - 1):
                lo, hi = sorted((q[i], q[i + 1]))
                _check_count(len(out) + int(np.floor(hi)) - int(np.ceil(lo)) + 1, tau_max, wc)
                for m in range(int(np.ceil(lo)), int(np.floor(hi)) + 1):
                    if m == lo or m == hi:
                        continue
                    c = _cutoff_crossing(system, zs, wc, tau_max, sig, Z[:, k], pu, j0 + i, i, m)
                    if c is not None:
                        out.append(c)
    return out


def _derived(Z, sig, wc: float, tau_max: float):
    """(psi, valid) of the branches ``Z`` along ``sigma``: the phase ``arg z + wc tau`` and
    whether the sample is a root right of the axis at a delay within the range."""
    with np.errstate(divide="ignore", invalid="ignore"):
        a = -np.log(np.abs(Z))
        tau = a / sig[:, None]
        psi = np.angle(Z) + wc * tau
    return psi, np.isfinite(a) & (a > 0) & (tau <= 1.05 * tau_max)


def _cutoff_branches(zs, wc: float, tau_max: float):
    """(sigma samples, tracked branches z(sigma), psi, valid) along the cut-off line, the
    samples refined until neighbouring samples of a valid branch are close."""
    sig = wc * np.logspace(-7, 3, 700)
    Z = track_branches(zs(sig))
    for _ in range(30):
        psi, valid = _derived(Z, sig, wc, tau_max)
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
        Z = track_branches(zs(sig))
    psi, valid = _derived(Z, sig, wc, tau_max)
    return sig, Z, psi, valid


def _valid_runs(valid):
    """(first, last) index of every run of at least two consecutive valid samples."""
    j = 0
    n = valid.size
    while j < n - 1:
        if not (valid[j] and valid[j + 1]):
            j += 1
            continue
        j0 = j
        while j < n - 1 and valid[j + 1]:
            j += 1
        yield j0, j
        j += 1


def _cutoff_crossing(system, zs, wc: float, tau_max: float, sig, Zk, pu, jj: int, i: int, m: int) -> Crossing | None:
    """The crossing where the unwrapped phase ``pu`` of branch ``Zk`` passes ``2 pi m`` between
    samples ``jj`` and ``jj + 1`` (root-found in sigma), or None outside the delay range."""
    s_a, s_b = sig[jj], sig[jj + 1]
    za, zb = Zk[jj], Zk[jj + 1]
    pa, pb = pu[i], pu[i + 1]

    def g(x):
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
        return None
    cand = zs(np.array([sx]))[0]
    f = (np.log(sx) - np.log(s_a)) / (np.log(s_b) - np.log(s_a))
    z = cand[np.argmin(np.abs(cand - (za + f * (zb - za))))]
    tau = float(-np.log(np.abs(z)) / sx)
    if not (0 < tau <= tau_max):
        return None
    s = complex(sx, wc)
    ds = root_direction(system, s, tau)
    d = -int(np.sign(ds.imag)) if np.isfinite(ds.imag) else 0
    return Crossing(tau, s, "cut-off", d, 2)

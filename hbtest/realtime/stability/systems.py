"""One-delay systems ``T(s, tau) = A(s) + exp(-s tau) B(s)`` and their critical delay (docs/method.md §4).

``A = s^2 M_A + s C_A + K_A`` and ``B = s^2 M_B + s C_B + K_B`` (SI matrices); delays [s],
roots [rad/s], frequencies [Hz]. A system is *unstable* at a delay when a root lies in the
unstable box ``Re s > 0``, ``|Im s| < 2 pi f_c`` (actuator cut-off ``f_c``). The critical delay
is the smallest delay with a root in the box, found by the crossing scan of
:mod:`hbtest.realtime.stability.crossings`; :meth:`SingleDelaySystem.count_unstable` is the
independent argument-principle count.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import scipy.linalg

from ...method.substructure import Substructure
from .crossings import CriticalDelay, Crossing, axis_crossings, cutoff_crossings, pencil_roots
from .equation import DEFAULT_CUTOFF_HZ, TWO_PI, DelayEquation, DelayTerm, _descend, count_roots

__all__ = ["SingleDelaySystem"]


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
        return pencil_roots(P, Q)

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
        out = axis_crossings(self, wc, tau_max) + cutoff_crossings(self, wc, tau_max)
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
        axis = axis_crossings(self, wc, tau_max)
        limit = tau_max
        if not all_crossings:
            ent = [c.delay_s for c in axis if c.direction > 0]
            if ent:
                limit = min(ent)
        cut = cutoff_crossings(self, wc, limit)
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

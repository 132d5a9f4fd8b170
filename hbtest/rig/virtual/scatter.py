"""Demand scatter: the twin's amplifiers deliver a slightly different fundamental from the one
commanded, by a random amount that changes with every change of demand.

Why: the authors' lab residual was not a function of the demand. Fitted ``R = J X + b`` over a
point's own evaluations, one evaluation scatters about the fit by 1.4 mN (front transducer) and
4.6 mN (back) at the median, 2-3x (front) and 60-90x (back) the scatter between consecutive reads
of one evaluation, not proportional to the response (correlation -0.3 with it), with little
memory from one evaluation to the next (README "Two solver profiles";
``scripts/lab_iteration_stats.py``, ``affine.memory``). A random offset of the
applied demand, drawn when the demand changes and held until the next change, reproduces that
signature: it moves each evaluation's residual by ``J delta`` and leaves the reads within an
evaluation alone. It is a model of the signature, not of a mechanism the records identify
(a joint or a plastic part settling after each change, amplifier drift: the records cannot
tell).

Model, per actuator ``a``, on the fundamental's complex coefficient (the convention of
:mod:`hbtest.method.harmonics`: ``v(t) = Re(V e^{i Omega t})`` [V]): at the k-th change of demand
``delta_k = rho delta_{k-1} + sqrt(1 - rho^2) sd_a (xi + i eta)``, ``xi, eta`` standard normal
(so each of the sine and cosine coefficients scatters by ``sd_a`` [V rms]); the applied
fundamental is ``V + delta_k``. A "change" is a new frequency or new coefficients; a demand
set again unchanged keeps its offset, a zero demand gets none (quiet stays quiet), and an
offset that would take the applied peak beyond the rig's voltage limit is not applied. Its own
random stream (seeded from the rig's seed), so the sensor noise draws are those of a twin
without it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["DemandScatterSpec", "DemandScatter"]

#: the scatter's random stream: SeedSequence entropy (rig seed, this tag)
STREAM_TAG = 0x5CA7


@dataclass(frozen=True)
class DemandScatterSpec:
    """``[virtual.demand_scatter]``: ``sd`` [V rms per coefficient] per actuator and the
    correlation ``rho`` between consecutive offsets (0 <= rho < 1)."""

    sd: tuple[float, ...]
    rho: float = 0.0


class DemandScatter:
    """The offsets of one twin (module docstring)."""

    def __init__(self, spec: DemandScatterSpec, seed: int):
        self.sd = np.asarray(spec.sd, dtype=float)
        self.rho = float(spec.rho)
        self._rng = np.random.default_rng([int(seed), STREAM_TAG])
        self._delta = np.zeros(self.sd.size, complex)
        self._last: tuple | None = None

    def applied(self, frequency_hz: float, V: np.ndarray, orders: np.ndarray, limit_v: float) -> np.ndarray:
        """The applied coefficients (actuators x orders) for the commanded ``V``."""
        if 1 not in orders or not np.any(V != 0):
            return V
        key = (float(frequency_hz), tuple(int(o) for o in orders), V.tobytes())
        if key != self._last:
            xi = self._rng.standard_normal((2, self.sd.size))
            self._delta = self.rho * self._delta + np.sqrt(1.0 - self.rho**2) * self.sd * (xi[0] + 1j * xi[1])
            self._last = key
        out = np.array(V, dtype=complex, copy=True)
        out[:, int(np.flatnonzero(orders == 1)[0])] += self._delta
        return out if np.max(np.sum(np.abs(out), axis=1)) <= limit_v else V

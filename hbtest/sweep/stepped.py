"""Stepped sweeps: force families and automatic harmonic selection (a family's backbone, an
analysis of its store: :mod:`hbtest.analysis.backbone`).

Units: SI (force amplitudes [N], frequencies [Hz], interface displacement [m] / rotation
[rad]); coefficients follow :mod:`hbtest.method.harmonics` (``X_k = a_k - i b_k``, amplitude ``|X_k|``).

Stepped-force family (``sweep.force_levels = [F_1, ..., F_L]`` [N])
-------------------------------------------------------------------
One store holds the whole family. Its slots are, in test order, the frequency grid of the
sweep (``SweepSpec.grid_hz``: up, down or up-down) once per level: slot ``l * n_grid + j`` is
grid point ``j`` at level ``l``. The store's ``frequency`` coordinate therefore repeats; the
per-slot coordinates ``force_level`` (the external force amplitude [N] of the slot) and
``leg`` (legs of level ``l`` follow those of level ``l - 1``) tell the curves apart, and
``external_force`` holds the amplitude of every slot. The sweep scales the excitation's force
vector by ``F_l / excitation.amplitude_n``. At the first slot of a level the test starts from
the voltages of the same grid point of the previous level scaled by the force ratio (exact
for a linear structure) with a freshly measured Jacobian; a resumed run does the same from
the store.

Automatic harmonics (``sweep.harmonics = "auto"``)
--------------------------------------------------
The store allocates the candidates ``1 .. K`` (``K = sweep.max_harmonic``, default
:data:`MAX_AUTO_HARMONIC`, lowered so that ``K * stop_hz`` stays below the rig's usable limit
``fs / NYQUIST_MARGIN``) plus ``sweep.forced_harmonics``. The test starts with ``[1]`` plus
the forced orders. After each point it measures, from the final raw record, the power of every
inactive candidate ``k`` as a fraction of the interface displacement power over orders
``1..K`` (noise bias removed, as :func:`hbtest.method.sensors.excluded_energy_fraction`; the larger
of the ``u`` and ``theta`` fractions). A candidate whose fraction exceeds
``sweep.auto_threshold`` (default :data:`AUTO_THRESHOLD` = 1e-4: a harmonic above 1 % of the
motion's amplitude) is activated and the point is **measured again** with it balanced;
activation is kept for the rest of the sweep (never dropped: a harmonic that mattered once is
still cheap to balance). Inactive harmonics are NaN in the store; the boolean
``harmonic_active`` (frequency, harmonic) says which orders each point balanced.

A linear physical substructure driven at the active orders moves at those orders only, so the
measured fraction sees the *physical* side's nonlinearity (and the actuators'). A nonlinear
numerical substructure's harmonics are seen on the numerical side: its harmonic balance over
all candidates under the measured interface force (:func:`numerical_power_fractions`); the
larger of the two fractions decides.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..analysis.backbone import peak_parabola
from ..method import harmonics
from ..method.harmonics import NYQUIST_MARGIN

__all__ = [
    "MAX_AUTO_HARMONIC",
    "AUTO_THRESHOLD",
    "read_family_fields",
    "store_orders",
    "initial_orders",
    "slot_amplitudes",
    "slot_levels",
    "slot_legs",
    "harmonic_power_fractions",
    "orders_to_activate",
    "numerical_power_fractions",
    "expand_record",
    "joined_reference",
    "exact_peak",
    "FamilyRunner",
]

from ..config.family import AUTO_THRESHOLD, MAX_AUTO_HARMONIC, read_family_fields
from ..store.run import sweep_legs
from ..store.variables import expand_record

#: a point's stop reasons that, from a carried start, mean the response left the followed
#: branch (:meth:`FamilyRunner._fresh_after_jump`): not a trip, an over-range sensor or the
#: voltage limit
JUMP_REASONS = ("stalled", "iteration_limit")


def store_orders(sweep, sample_rate_hz: float | None = None) -> tuple[int, ...]:
    """The harmonic orders a store allocates: ``sweep.harmonics``; with ``"auto"`` the
    candidates whose order times ``stop_hz`` lies below the rig's usable limit
    ``sample_rate_hz / NYQUIST_MARGIN`` (forced orders are kept: the Nyquist check refuses them)."""
    orders = tuple(int(k) for k in sweep.harmonics)
    if not getattr(sweep, "auto_harmonics", False) or not sample_rate_hz:
        return orders
    limit = sample_rate_hz / NYQUIST_MARGIN
    forced = set(sweep.forced_harmonics)
    return tuple(k for k in orders if k * sweep.stop_hz < limit or k in forced or k == 1)


def initial_orders(sweep, orders) -> tuple[int, ...]:
    """The orders the test balances at its first point: all of ``orders``, or with ``"auto"``
    ``[1]`` plus the forced ones."""
    if not getattr(sweep, "auto_harmonics", False):
        return tuple(int(k) for k in orders)
    return tuple(sorted({1, *sweep.forced_harmonics} & set(int(k) for k in orders)))


def slot_levels(sweep) -> np.ndarray:
    """Index of the force level of every slot (zeros without ``force_levels``)."""
    n = sweep.grid_hz.size
    return np.repeat(np.arange(max(1, len(sweep.force_levels))), n)


def slot_amplitudes(sweep, amplitude_n: float) -> np.ndarray:
    """External force amplitude [N] of every slot: ``force_levels`` per level, else ``amplitude_n``."""
    levels = np.asarray(sweep.force_levels, dtype=float) if sweep.force_levels else np.array([float(amplitude_n)])
    return levels[slot_levels(sweep)]


def slot_legs(sweep) -> np.ndarray:
    """Leg of every slot: the legs of one grid (+1 at each reversal of direction), the
    levels' legs numbered on after each other."""
    g = sweep_legs(sweep.grid_hz).astype(np.int64)
    n_lev = max(1, len(sweep.force_levels))
    return np.concatenate([g + lev * (int(g.max()) + 1) for lev in range(n_lev)])


# ---------------------------------------------------------------------------------------
# automatic harmonics


def harmonic_power_fractions(acq, layout, max_order: int, method: str = "segment", reject_mains: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(orders ``1..K``, fractions (2, K)): power of each harmonic of the measured interface
    displacement (u, theta) over the power of all orders ``1..K`` in the raw record ``acq``,
    the noise bias ``var X_k`` removed (clipped at 0). ``K = min(max_order, usable limit of
    the record's sample rate)``. DC is fitted and left out. NaN for a DOF without motion."""
    from ..method.sensors import measure_interface

    t = np.asarray(acq.t, dtype=float)
    fs = 1.0 / float(np.median(np.diff(t)))
    top = max(1, min(int(max_order), harmonics.max_usable_harmonic(acq.frequency_hz, fs)))
    orders = np.arange(0, top + 1)
    meas = measure_interface(acq, layout, orders, method, reject_mains=reject_mains)
    power = np.clip(np.abs(meas.displacement) ** 2 - np.nan_to_num(meas.displacement_variance, nan=0.0), 0.0, None)[:, 1:]
    total = power.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return orders[1:], np.where(total > 0, power / total, np.nan)


def numerical_power_fractions(ns, frequency_hz: float, active, candidates, F_P, force_vector) -> dict:
    """``{order: fraction}``: the numerical side's share of the interface motion's power at
    each candidate order, from its harmonic balance over all ``candidates`` under the measured
    interface force ``F_P`` (given at the ``active`` orders, zero at the others) — what a
    nonlinear numerical substructure would make of harmonics the rig is not driving (a linear
    one makes none: ``{}``). Fractions are of ``|U_N,k|^2`` summed over the candidates, the
    larger of u and theta (theta weighted as u: each DOF on its own)."""
    from ..numerical import HarmonicBalanceError, NumericalSubstructure

    if not isinstance(ns, NumericalSubstructure) or ns.is_linear:
        return {}
    cand = [int(k) for k in candidates]
    F = np.zeros((2, len(cand)), dtype=complex)
    for j, k in enumerate(int(k) for k in active):
        F[:, cand.index(k)] = np.asarray(F_P)[:, j]
    try:
        U = ns.interface_response(frequency_hz, np.asarray(cand), F, force_vector).displacement
    except (HarmonicBalanceError, np.linalg.LinAlgError):
        return {}
    P = np.abs(np.asarray(U)) ** 2
    P = np.where(np.asarray(cand) == 0, 0.0, 1.0) * P  # DC is no dynamic energy
    total = P.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        fr = np.where(total > 0, P / total, np.nan)
    return {k: float(np.nanmax(fr[:, j])) if np.isfinite(fr[:, j]).any() else np.nan for j, k in enumerate(cand)}


def orders_to_activate(fractions_by_order: dict, active, candidates, threshold: float) -> tuple[int, ...]:
    """Candidates not in ``active`` whose power fraction (``{order: fraction}``, the larger
    of the DOFs) exceeds ``threshold``."""
    act = set(int(k) for k in active)
    return tuple(k for k in candidates if k not in act and np.isfinite(fractions_by_order.get(k, np.nan)) and fractions_by_order[k] > threshold)


def joined_reference(cfg, rig_cfg, amplitude_n: float | None = None):
    """The emulated (joined) structure of a sweep on a rig with a beam physical substructure:
    the numerical beam joined to the rig file's physical beam, the sweep's nonlinear elements,
    and the point force (``amplitude_n``, default the excitation's) at the sweep's force node.
    Returns ``(NonlinearSubstructure, force vector, interface DOF u name)``; its harmonic
    balance (:func:`hbtest.numerical.trace_response`) is the exact reference of a nonlinear
    hybrid test whose physical side is linear."""
    from ..method.substructure import Substructure
    from .arclength.reference import joined_structure

    ns = cfg.numerical.numerical_substructure()
    tip = Substructure(rig_cfg.physical.build(left="free", right="free", x_offset=cfg.numerical.beam.length), ("u0", "theta0"))
    F = cfg.excitation.force_vector(ns)
    if amplitude_n is not None:
        F = F * (amplitude_n / cfg.excitation.amplitude)
    joined, fv = joined_structure(ns, tip, F)
    return joined, fv, joined.interface[0]


def exact_peak(ns, fv, dof: str, start_hz: float, stop_hz: float, orders, harmonic: int = 1, max_step: float = 0.05) -> tuple[float, float]:
    """(frequency [Hz], amplitude) of the largest ``|U_k|`` of ``dof`` along the harmonic-balance
    response curve traced from ``start_hz`` to ``stop_hz`` through its folds (pseudo-arclength,
    :func:`hbtest.numerical.trace_response`), refined by the parabola through the three highest
    traced points."""
    from ..numerical import ContinuationSettings, trace_response

    cur = trace_response(ns, start_hz, stop_hz, orders, fv, settings=ContinuationSettings(max_step=max_step))
    a = np.abs(cur.coefficients(dof)[:, list(np.asarray(orders)).index(harmonic)])
    i = int(np.argmax(a))
    lo, hi = max(0, i - 1), min(a.size, i + 2)
    fp, ap, _ = peak_parabola(cur.frequencies_hz[lo:hi], a[lo:hi]) if hi - lo == 3 else (cur.frequencies_hz[i], a[i], False)
    return float(fp), float(ap)


# ---------------------------------------------------------------------------------------
# running the slots of a sweep (used by hbtest.sweep.runner)


class FamilyRunner:
    """Runs the slots of a sweep store one at a time: the force level of each slot, the
    active harmonic orders (``"auto"``), the start of each level from the previous one, and
    the record of each point with its sync metrics (:mod:`hbtest.method.ps_ns_sync`), spread over the
    store's orders. ``progress`` receives :class:`hbtest.events.Notice` events when a
    harmonic is activated."""

    def __init__(self, cfg, store, rig, ns, force_vector, settings, progress=None):
        self.cfg = cfg
        self.store = store
        self.rig = rig
        self.ns = ns
        self.F0 = np.asarray(force_vector, dtype=complex)
        self.amp0 = float(cfg.excitation.amplitude)
        self.orders = tuple(int(k) for k in store.harmonics)
        self.freqs = store.frequencies_hz
        self.amps = slot_amplitudes(cfg.sweep, self.amp0)
        self.levels = slot_levels(cfg.sweep)
        self.n_grid = int(cfg.sweep.grid_hz.size)
        self.settings = settings
        self.auto = bool(getattr(cfg.sweep, "auto_harmonics", False))
        self.progress = progress or (lambda *_: None)
        self.active = self._resumed_active()
        self.voltages: dict[int, np.ndarray] = {}  # slot -> converged voltage (n_act, n_store_orders)
        self.loop = self._make_loop()

    @property
    def n_act(self) -> int:
        return self.loop.n_act

    def _make_loop(self):
        from ..point import PointLoop

        return PointLoop(self.rig, self.ns, self.F0, replace(self.settings, orders=tuple(self.active)))

    def _resumed_active(self) -> tuple[int, ...]:
        start = set(initial_orders(self.cfg.sweep, self.orders))
        if self.auto and "harmonic_active" in self.store.variables:
            done = self.store.done()
            if done.any():
                import zarr

                g = zarr.open_group(str(self.store.path), mode="r")
                act = np.asarray(g["harmonic_active"][...], dtype=bool)[done]  # type: ignore[index]  # an array
                start |= {k for k, on in zip(self.orders, act.any(axis=0)) if on}
        return tuple(sorted(start))

    def _stored_voltage(self, i: int) -> np.ndarray | None:
        if i in self.voltages:
            return self.voltages[i]
        if i < 0 or not self.store.done()[i]:
            return None
        rec = self.store.read_point(i)
        return rec.voltage if rec.converged else None

    def _carry_from(self, V: np.ndarray | None, scale: float = 1.0):
        if V is None:
            return self.loop.new_carry()
        idx = [self.orders.index(k) for k in self.active]
        Va = np.nan_to_num(np.asarray(V)[:, idx] * scale, nan=0.0)
        return self.loop.new_carry(start_V=harmonics.pack(Va, self.active).reshape(-1))

    def seed(self, i: int):
        """The carry for the first slot ``i`` a (resumed) run does: from the last converged
        slot before it on the same level, or the same grid point of the previous level."""
        if i <= 0:
            return self.loop.new_carry()
        if self.levels[i] != self.levels[i - 1]:
            return self.level_carry(i)
        done = self.store.done()
        for j in range(i - 1, -1, -1):
            if self.levels[j] != self.levels[i]:
                break
            if done[j]:
                return self._carry_from(self._stored_voltage(j))
        return self.loop.new_carry()

    def level_carry(self, i: int):
        """The carry at the first slot of a level: the previous level's converged voltage at
        the same grid point, scaled by the force ratio (Jacobians measured afresh)."""
        prev = i - self.n_grid
        if prev < 0:
            return self._carry_from(None)
        return self._carry_from(self._stored_voltage(prev), self.amps[i] / self.amps[prev])

    def _activate(self, out) -> tuple[int, ...]:
        """Candidates to activate after a point (empty unless ``"auto"`` and a raw record)."""
        if not self.auto or out.final is None or out.final.acq is None:
            return ()
        from ..method.sensors import EXCLUDED_MAX_ORDER

        ks, fr = harmonic_power_fractions(out.final.acq, self.loop.layout, max(max(self.orders), EXCLUDED_MAX_ORDER),
                                          self.settings.force_method, self.loop.rule.reject_mains)
        worst = {int(k): float(np.nanmax(fr[:, j])) if np.isfinite(fr[:, j]).any() else np.nan for j, k in enumerate(ks)}
        for k, v in numerical_power_fractions(self.ns, float(out.frequency_hz), self.active, self.orders, out.final.meas.force,
                                              self.loop.force_vector).items():
            worst[k] = float(np.nanmax([worst.get(k, np.nan), v]))
        self.last_fractions = worst
        new = orders_to_activate(worst, self.active, self.orders, self.cfg.sweep.auto_threshold)
        return new

    @property
    def force_vector(self) -> np.ndarray:
        """The external force vector of the slot last run [N]."""
        return self.loop.force_vector

    def _fresh_after_jump(self, f: float, out, carry):
        """A point started from the carried state of the previous points (their solution and
        rig Jacobian) that stalls or runs out of iterations has most likely lost the branch it
        followed: past a fold the response jumps to the other branch, and the carried start
        (and the Newton steps of the nonlinear numerical side linearised there) lie on the
        branch left behind. Such a point is measured again from a fresh start: zero volts and
        a new finite-difference rig Jacobian (the first point's start), and its record says
        so; the next points carry from it. Returns ``(outcome, carry)``; the first attempt's
        rig time counts to the point."""
        if out.converged or out.reason not in JUMP_REASONS or not carry.solutions:
            return out, carry
        fresh = self.loop.new_carry()
        again = self.loop.run(f, fresh)
        note = (f"restarted from a fresh start (zero volts, new finite-difference rig Jacobian): from the previous point's "
                f"state it stopped ({out.reason}: {out.message}), the response having left the branch it followed (a jump)")
        return replace(again, rig_periods=again.rig_periods + out.rig_periods, message=f"{again.message}; {note}"), fresh

    def run(self, i: int, carry):
        """Run slot ``i`` at its force level with the active orders (measuring it again when
        ``"auto"`` activates a harmonic); returns ``(outcome, carry for the next slot)``. The
        outcome is over :attr:`active`; build its record over those orders and pass it to
        :meth:`finish`."""
        from ..events import Notice

        f = float(self.freqs[i])
        if i > 0 and self.levels[i] != self.levels[i - 1]:
            carry = self.level_carry(i)
        self.loop.force_vector = self.F0 * (self.amps[i] / self.amp0)
        out = self.loop.run(f, carry)
        out, carry = self._fresh_after_jump(f, out, carry)
        new = self._activate(out)
        if new:
            V_old = None
            if out.final is not None:
                V_old = np.zeros((self.n_act, len(self.orders)), dtype=complex)
                Vu = self.loop.unpack_voltage(out.final.V)
                for j, k in enumerate(self.active):
                    V_old[:, self.orders.index(k)] = Vu[:, j]
            for k in new:
                self.progress(Notice(f"harmonic {k} activated at {f:g} Hz (slot {i}): its share of the interface motion's power "
                                     f"{self.last_fractions[k]:.3g} exceeds sweep.auto_threshold = {self.cfg.sweep.auto_threshold:g}; the point is measured again"))
            self.active = tuple(sorted(set(self.active) | set(new)))
            self.loop = self._make_loop()
            self.loop.force_vector = self.F0 * (self.amps[i] / self.amp0)
            carry = self._carry_from(V_old) if V_old is not None else self.loop.new_carry()
            rig_periods = out.rig_periods
            out = self.loop.run(f, carry)
            out = replace(out, rig_periods=out.rig_periods + rig_periods)  # the first measurement is rig time of this point too
        return out, carry

    def finish(self, i: int, out, rec):
        """The store's record of slot ``i``: ``rec`` (built over :attr:`active`) with the
        sync metrics (:mod:`hbtest.method.ps_ns_sync`) of the reported state and of the last measured one
        (with that state), spread over the store's orders."""
        from ..method.ps_ns_sync import point_sync
        from ..point import NumericalSide

        act = np.asarray(self.active)
        if out.final is not None:
            num = NumericalSide.build(self.ns, self.loop.force_vector, float(out.frequency_hz), act)  # as run (an arclength slot's is traced)

            def sync(e):  # (F_N, ratio, phase) of an evaluation: PS against NS
                F_N = np.asarray(e.meas.force) - num.force_residual(e.meas.displacement, e.meas.force)
                return (F_N, *point_sync(e.meas.displacement, e.meas.force, e.U_N, F_N))

            F_N, ratio, phase = sync(out.final)
            # the last measured state (the paper's table): the reported one may be the pooled
            # fit's solution, where PS and NS agree by construction
            m = out.last_measured
            _, m_ratio, m_phase = sync(m)
            rec = replace(rec, numerical_force=F_N, sync_amplitude_ratio=ratio, sync_phase_deg=phase,
                          measured_interface_displacement=m.meas.displacement, measured_interface_force=m.meas.force,
                          measured_sync_amplitude_ratio=m_ratio, measured_sync_phase_deg=m_phase)
        rec = expand_record(rec, act, self.orders)
        if out.converged:
            self.voltages[i] = rec.voltage
        return rec

"""A frequency sweep: points in order, continuation between them, one store slot per point,
progress, safe interruption and resume (SPEC §2).

Ctrl+C once: finish the current point, write it, ramp the rig to zero, mark the store
``interrupted``. Ctrl+C twice: abort the current point at once (rig to safe state). A killed
run (SIGKILL) leaves every finished point intact; ``hbtest resume STORE`` redoes only the
points whose ``done`` flag is not set, from the sweep and rig texts kept in the store.
"""

from __future__ import annotations

import signal
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from . import harmonics
from .config import SweepConfig, load_rig, load_sweep
from .errors import UserError
from .point import Carry, PointLoop, PointOutcome, PointSettings
from .rig import open_rig
from .store import PointRecord, RunStore

__all__ = ["run", "resume", "point_record"]


class _Interrupt:
    """SIGINT policy: the first request stops after the current point; the second raises."""

    def __init__(self):
        self.requested = False

    def handler(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print("\nhbtest: stopping after this point (Ctrl+C again to abort now)", file=sys.stderr, flush=True)


@contextmanager
def _sigint(policy: _Interrupt):
    try:
        old = signal.signal(signal.SIGINT, policy.handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def history_capacity(max_iterations: int, n_actuators: int, orders) -> int:
    """Rows of per-point history the store must hold: every rig evaluation is recorded, and
    besides one per iteration there are finite-difference Jacobians (one evaluation per packed
    voltage, at most once per three iterations) and line-search trials (two extra every 10th
    iteration of the published profile)."""
    n_v = n_actuators * harmonics.packed_size(orders)
    return (max_iterations + 1) * (1 + n_v) + 1


def point_record(out: PointOutcome, orders, n_act: int, external_amplitude: float, reference=None) -> PointRecord:
    """Everything measured at a point, in the store's shapes."""
    orders = np.asarray(orders)
    e = out.final
    p = harmonics.packed_size(orders)
    ext = np.where(orders == 1, external_amplitude, 0.0).astype(complex)
    H = out.history

    def volt(V):
        return harmonics.unpack(V.reshape(n_act, p), orders)

    return PointRecord(
        frequency_hz=out.frequency_hz,
        interface_displacement=e.meas.displacement,
        interface_force=e.meas.force,
        numerical_displacement=e.U_N,
        external_force=ext,
        voltage=volt(e.V),
        displacement_variance=e.meas.displacement_variance,
        force_variance=e.meas.force_variance,
        converged=bool(out.converged),
        iterations=int(out.iterations),
        residual_norm=float(e.norm),
        rig_periods=float(out.rig_periods),
        history_voltage=np.stack([volt(h.V) for h in H]),
        history_residual=np.stack([h.R for h in H]),
        history_residual_norm=np.array([h.norm for h in H]),
        history_periods=np.array([h.periods for h in H]),
        reference_interface_displacement=reference,
        message=out.message,
    )


def _store_attrs(cfg: SweepConfig, rig_cfg, overrides) -> dict:
    return dict(
        sweep_text=cfg.source.text,
        sweep_sha256=cfg.source.sha256,
        sweep_path=str(Path(cfg.source.path).resolve()),
        rig_text=rig_cfg.source.text,
        rig_sha256=rig_cfg.source.sha256,
        rig_path=str(Path(rig_cfg.source.path).resolve()),
        rig_identity=rig_cfg.identity,
        rig_overrides=list(cfg.rig_overrides),
        overrides=list(overrides),
        profile=cfg.solver.profile,
        tolerance_m=cfg.test.tolerance,
    )


def _seed_carry(store: RunStore, orders, upto: int) -> Carry:
    """On resume, start the first unfinished point from the voltages of the last finished
    converged point before it; the Jacobian is measured afresh."""
    done = store.done()
    for i in range(upto - 1, -1, -1):
        if done[i]:
            rec = store.read_point(i)
            if rec.converged:
                return Carry(start_V=harmonics.pack(rec.voltage, orders).reshape(-1))
            break
    return Carry()


def _execute(cfg: SweepConfig, rig_cfg, store: RunStore, progress, seed=None) -> str:
    freqs = cfg.sweep.frequencies_hz
    orders = np.asarray(cfg.sweep.harmonics)
    settings = PointSettings.from_config(cfg)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    policy = _Interrupt()
    status = "failed"
    done = store.done()
    todo = [i for i in range(freqs.size) if not done[i]]
    say = progress or (lambda *_: None)
    if not todo:
        store.set_status("completed")
        return "completed"
    store.set_status("running")
    with open_rig(rig_cfg, seed=seed) as rig, _sigint(policy):
        loop = PointLoop(rig, ns, F, settings)
        n_act = loop.n_act
        carry = _seed_carry(store, orders, todo[0])
        reference = getattr(rig, "emulated_interface_response", None)
        say(f"hbtest: {cfg.name}: {len(todo)} of {freqs.size} points on rig '{rig_cfg.identity}', profile {cfg.solver.profile}, store {store.path}")
        say(f"{'point':>7} {'f [Hz]':>9} {'iter':>5} {'|R| [mm]':>10} {'rig periods':>12} {'rig s':>7}  status")
        t_wall = time.monotonic()
        try:
            for n, i in enumerate(todo, 1):
                out = loop.run(float(freqs[i]), carry)
                ref = reference(ns, F, float(freqs[i]), orders) if reference is not None else None
                store.write_point(i, point_record(out, orders, n_act, cfg.excitation.amplitude, ref))
                say(
                    f"{n:>3}/{len(todo):<3} {freqs[i]:>9.4f} {out.iterations:>5d} {out.final.norm * 1e3:>10.5f}"
                    f" {out.rig_periods:>12.1f} {out.rig_periods / freqs[i]:>7.1f}  {'converged' if out.converged else 'NOT converged: ' + out.message}"
                )
                if policy.requested:
                    status = "interrupted"
                    break
            else:
                status = "completed"
        except KeyboardInterrupt:
            status = "interrupted"
            rig.safe_state()
            raise
        finally:
            store.set_status(status, wall_seconds=round(time.monotonic() - t_wall, 3))
    return status


def run(cfg: SweepConfig, store_path=None, progress=print, overwrite: bool = False, seed=None, plot: bool | None = None,
        overrides=()):
    """Run a sweep into a new store (default: the sweep file's ``output.store``). Returns the
    store's dataset. Writes the Bode plot next to the store unless ``plot`` is False.
    ``overrides``: the ``--set`` items ``cfg`` was loaded with (kept for resume)."""
    rig_cfg = load_rig(cfg.rig_path, cfg.rig_overrides)
    path = Path(store_path) if store_path is not None else cfg.output.store
    store = RunStore.create(
        path,
        frequencies_hz=cfg.sweep.frequencies_hz,
        harmonics=cfg.sweep.harmonics,
        actuators=rig_cfg.actuators,
        max_iterations=history_capacity(cfg.test.max_iterations, len(rig_cfg.actuators), cfg.sweep.harmonics) - 1,
        attrs=_store_attrs(cfg, rig_cfg, overrides),
        overwrite=overwrite,
    )
    return _finish(cfg, rig_cfg, store, progress, seed, plot)


def _finish(cfg, rig_cfg, store, progress, seed, plot):
    status = _execute(cfg, rig_cfg, store, progress, seed)
    if (cfg.output.plot if plot is None else plot) and status in ("completed", "interrupted"):
        from .plot import bode_png

        png = bode_png(store.path)
        if progress:
            progress(f"hbtest: Bode plot {png}")
    if progress:
        progress(f"hbtest: {status}; store {store.path}")
    return store.dataset()


def resume(store_path, progress=print, seed=None, plot: bool | None = None):
    """Finish an interrupted or killed run: redo only the points not marked done, with the
    sweep and rig definitions kept verbatim in the store."""
    store = RunStore.open(store_path)
    a = store.attrs
    try:
        cfg = load_sweep(a["sweep_path"], a.get("overrides", ()), text=a["sweep_text"])
        rig_cfg = load_rig(a["rig_path"], a.get("rig_overrides", ()), text=a["rig_text"])
    except KeyError as e:
        raise UserError(f"{store_path}: not a store written by 'hbtest sweep' (missing attribute {e})") from None
    return _finish(cfg, rig_cfg, store, progress, seed, plot)

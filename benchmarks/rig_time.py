"""Rig time of the two solver profiles on the same twin and seeds, and where it goes.

Runs the sweep's points through :class:`hbtest.point.PointLoop` directly (no store), so that
every evaluation's rig time is available (:meth:`hbtest.point.PointOutcome.breakdown`).
Prints, per profile and seed: points converged, median iterations per point (as each profile
counts them: the published profile counts residual evaluations, steps + 1, as the paper
does), periods per point and the breakdown per point — by phase (ramp, settling windows
discarded while the transient decays, averaging windows kept, other) and by purpose (start
evaluation, iterations, line-search trials, finite-difference evaluations) — and the worst
FRF error against the twin's exact emulated response (harmonic 1, per interface DOF, the
quantity of :func:`hbtest.analysis.frf.relative_error`). Then ``periods_over_minimum=<x>`` (hbtest
periods per point over the physical minimum below) and, last,
``rig_time_ratio=<published/hbtest>`` (periods per point, all seeds).

Physical minimum of a point (documented estimate): the transient left by moving from the
previous point's converged interface motion, |dU|, must decay to the transient tolerance at the
physical substructure's own damping at the forcing frequency (zeta(w) = zeta_M/(2w) +
zeta_K w/2 of the tip beam): n_settle = f ln(|dU| / tol_tr) / (zeta w); plus one averaging
window long enough for the measured residual noise to reach a third of the tolerance the
point needed: n_avg = n_final (3 sigma_final / tol)^2, at least one period, where sigma_final
is the displacement standard deviation of the final estimate of n_final periods (the periods
behind it: the final window, or every window the pooled estimate of the hbtest profile used).

That minimum counts the laser's displacement noise only. The interface displacement of the
hybrid solution is dominated by the force reconstructed from the gauges (its error is
(D_N + D_P)^-1 times the force noise), and the point's accuracy target (``test.accuracy`` x |U|)
is far tighter than the tolerance, so a second figure is printed beside it,
``periods_over_accuracy_minimum``: the same settling term plus the averaging the reported
displacement needs for its noise to reach the accuracy target at one sigma,
n_acc = n_final (sigma_final / (accuracy |U|))^2, where sigma_final is the noise share of the
reported displacement's standard uncertainty as if every period pooled had been measured at
the reported demand (``PointOutcome.noise_uncertainty``: the hbtest profile's propagation
through the solution of its pooled fit), or where a profile states none the final residual
noise (metres).

Honesty of the stated uncertainty: per sweep, ``uncertainty_calibration`` is the root mean
square over points of |U - U_exact| / sigma_final (weighted norm, harmonic 1): about 1 when
the stated uncertainty is right, above 1 when it understates the error (a bias of the
measurement chain counts too). Beside it, the same with two other uncertainties of the same
estimate: with the fitted rig Jacobian's own uncertainty propagated too
(``PointOutcome.uncertainty_with_jacobian``), and through the twin's exact Jacobian
(:func:`exact_jacobian_uncertainty`). Where the last is about 1 and the stated one is not, the
outputs' noise is stated right and the fitted Jacobian is what understates; the per-point ratio
of the stated uncertainty to the exact-Jacobian one is printed too (median and smallest).
The reference twin's evaluations scatter between demands as the lab's did
(``[virtual.demand_scatter]``): the profile measures the scatter's share of its uncertainty from
the pooled fit (:meth:`hbtest.point.profiles.HbtestProfile.stated_uncertainty`), and so does the
noise share behind ``periods_over_accuracy_minimum`` (``noise_uncertainty``: the averaging the
point needed is then over evaluations, each of which renews the scatter). The exact-Jacobian
figure propagates the stated variances in full, scatter included (the fit the measured share
needs is not kept with the outcome), so it overstates there and is printed for comparison only;
``--rig-set virtual.demand_scatter.sd_v=[0,0]`` gives the repeatable twin, where it applies.

Per sweep (``--sweeps``, default the bare-beam and the paper sweeps) and seed: the lines
above, non-converged points with their stop reasons, and per sweep its
``periods_over_minimum``; then the overall ``periods_over_minimum=<x>`` and, last,
``rig_time_ratio=<published/hbtest>``.

Every sweep runs on the lab-calibrated reference twin (``--rig``, ``REFERENCE_RIG``) unless
``--rig sweep``: the sweep's mechanics overrides are kept, its noise overrides dropped.

    python benchmarks/rig_time.py [--points N] [--sweeps FILE ...] [--seeds 1 2 3] [--profiles published hbtest] [--noise-free] [--rig FILE|sweep] [--rig-set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_rig, load_sweep  # noqa: E402
from hbtest.point import HbtestProfile, PointLoop, PointSettings  # noqa: E402
from hbtest.point.numerical import NumericalSide  # noqa: E402
from hbtest.rig import open_rig  # noqa: E402

PHASES = ("ramp", "settling", "averaging", "other")
PURPOSES = ("start", "iteration", "line_search", "finite_difference")


#: ``--noise-free``: the twin without sensor noise and mains (method against method)
NOISE_FREE = ["virtual.noise.laser_rms_um=0.0", "virtual.noise.gauge_rms_microstrain=0.0", "virtual.mains.amplitude_microstrain=0.0"]


#: ``--rig``: the sweeps run on this rig file (default the lab-calibrated reference twin); the
#: sweep's own ``rig_set`` keeps its mechanics but not its noise (``virtual.noise.*``,
#: ``virtual.mains.*``: e.g. the bare-beam sweep's strong mains, whose point is robustness)
REFERENCE_RIG = ROOT / "instruments" / "virtual-cantilever.toml"
NOISE_KEYS = ("virtual.noise.", "virtual.mains.")


def run_profile(sweep_file: Path, profile: str, points: int | None, seed: int, noise_free: bool = False,
                rig_file: Path | None = REFERENCE_RIG, rig_set=(), frequencies=None):
    """(cfg, rig, outcomes, references, wall seconds, exact-Jacobian uncertainties) of one
    sweep, as the sweep runs it (on ``rig_file`` when given, see ``REFERENCE_RIG``, changed by
    the rig-file overrides ``rig_set``; over ``frequencies`` [Hz] instead of the sweep's grid
    when given); the last is :func:`exact_jacobian_uncertainty` per point."""
    overrides = [f"solver.profile={profile}"] + ([f"sweep.points={points}"] if points else [])
    cfg = load_sweep(sweep_file, overrides)
    if rig_file is not None or rig_set:
        kept = [o for o in cfg.rig_overrides if rig_file is None or not o.startswith(NOISE_KEYS)] + list(rig_set)
        overrides += ([f"rig={Path(rig_file).resolve()}"] if rig_file is not None else []) + [f"rig_set={kept!r}"]
        cfg = load_sweep(sweep_file, overrides)
    if noise_free:
        cfg = load_sweep(sweep_file, overrides + [f"rig_set={list(cfg.rig_overrides) + NOISE_FREE!r}"])
    rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides), seed=seed)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    loop = PointLoop(rig, ns, F, PointSettings.from_config(cfg))
    carry = loop.new_carry()
    outs, refs = [], []
    t0 = time.monotonic()
    for f in cfg.sweep.frequencies_hz if frequencies is None else frequencies:
        outs.append(loop.run(float(f), carry))
        refs.append(rig.emulated_interface_response(ns, F, float(f), loop.orders))
    wall = time.monotonic() - t0
    return cfg, rig, outs, refs, wall, [exact_jacobian_uncertainty(loop, o) for o in outs]


def exact_jacobian_uncertainty(loop, o) -> float:
    """The stated uncertainty of a point reported at the solution of its pooled fit
    (``o.applied`` set: the hbtest profile) recomputed with the twin's exact rig Jacobian at
    the reported demand instead of the fitted one (the same propagation:
    :meth:`hbtest.point.profiles.HbtestProfile.displacement_uncertainty`); NaN elsewhere.
    Where it is calibrated and the stated one is not, the fitted Jacobian is what understates."""
    if o.final is None or o.applied is None or not isinstance(loop.profile, HbtestProfile):
        return float("nan")
    num = NumericalSide.build(loop.ns, loop.force_vector, o.frequency_hz, loop.orders)
    scaleY = loop.output_scale(num)

    def outputs(V):
        ss = loop.rig.steady_state(o.frequency_hz, loop.unpack_voltage(V), loop.orders)
        return scaleY * np.concatenate([loop.pack2(ss.displacement), loop.pack2(ss.force)])

    V = o.final.V
    base = outputs(V)
    # the twin is linear in the demand (single-harmonic sweeps): unit differences are exact
    G = np.stack([outputs(V + d) - base for d in np.eye(V.size)], axis=1)
    prof = loop.profile
    return prof.displacement_uncertainty(loop, num, G, o.final.meas, prof.output_correlation(loop, num, o.applied.meas))


def frf_error(cfg, outs, refs) -> float:
    """Worst |U_measured - U_exact| / |U_exact| at harmonic 1 over points and DOFs."""
    k = list(cfg.sweep.harmonics).index(1)
    errs = [np.abs(o.final.meas.displacement[:, k] - r[:, k]) / np.abs(r[:, k]) for o, r in zip(outs, refs)]
    return float(np.max(errs))


def physical_minimum(cfg, outs) -> np.ndarray:
    ps = load_rig(cfg.rig_path, cfg.rig_overrides).physical
    f = np.array([o.frequency_hz for o in outs])
    w = 2 * np.pi * f
    zeta = ps.zeta_mass / (2 * w) + ps.zeta_stiffness * w / 2
    k = list(cfg.sweep.harmonics).index(1)
    U = np.array([o.final.meas.displacement[:, k] for o in outs])  # (point, dof)
    weights = np.array([1.0, cfg.test.rotation_length])
    dU = np.r_[np.linalg.norm(U[0] * weights), np.linalg.norm(np.diff(U, axis=0) * weights, axis=1)]
    tr = cfg.test.transient_tolerance
    n_settle = f * np.log(np.maximum(dU / tr, 1.0)) / (zeta * w)
    var = np.array([o.final.meas.displacement_variance[:, k] for o in outs])
    sigma = np.sqrt(np.sum(var * weights**2, axis=1))
    n_final = np.array([o.final.meas.n_periods for o in outs], dtype=float)
    n_avg = np.maximum(n_final * (3 * sigma / cfg.test.tolerance) ** 2, 1.0)
    return n_settle + n_avg


def accuracy_minimum(cfg, outs) -> np.ndarray:
    """The settling term of :func:`physical_minimum` plus the averaging for the final residual
    noise to reach ``accuracy * |U|`` at one sigma (see the module docstring)."""
    n_settle = physical_minimum(cfg, outs) - np.array([_n_avg(cfg, o) for o in outs])
    k = list(cfg.sweep.harmonics).index(1)
    weights = np.array([1.0, cfg.test.rotation_length])
    U = np.array([np.linalg.norm(o.final.meas.displacement[:, k] * weights) for o in outs])
    n_final = np.array([o.final.meas.n_periods for o in outs], dtype=float)
    sig = np.array([o.noise_uncertainty if np.isfinite(o.noise_uncertainty) else o.final.noise for o in outs])
    acc = cfg.test.accuracy if cfg.test.accuracy > 0 else cfg.test.tolerance / np.maximum(U, 1e-300)
    return n_settle + np.maximum(n_final * (sig / (acc * U)) ** 2, 1.0)


def uncertainty_calibration(cfg, outs, refs, sigmas=None) -> float:
    """Root mean square of |U - U_exact| / stated uncertainty over the points that state one
    (harmonic 1, weighted norm); NaN when none does. ``sigmas``: per point, instead of each
    outcome's own ``uncertainty`` (e.g. :func:`exact_jacobian_uncertainty`)."""
    k = list(cfg.sweep.harmonics).index(1)
    w = np.array([1.0, cfg.test.rotation_length])
    sig = [o.uncertainty for o in outs] if sigmas is None else sigmas
    z = [np.linalg.norm((o.final.meas.displacement[:, k] - r[:, k]) * w) / s
         for o, r, s in zip(outs, refs, sig) if o.final is not None and np.isfinite(s) and s > 0]
    return float(np.sqrt(np.mean(np.square(z)))) if z else float("nan")


def _n_avg(cfg, o) -> float:
    k = list(cfg.sweep.harmonics).index(1)
    weights = np.array([1.0, cfg.test.rotation_length])
    sigma = float(np.sqrt(np.sum(o.final.meas.displacement_variance[:, k] * weights**2)))
    return max(o.final.meas.n_periods * (3 * sigma / cfg.test.tolerance) ** 2, 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=None, help="sweep points (default: the file's)")
    ap.add_argument("--sweeps", "--sweep", type=Path, nargs="+", dest="sweeps",
                    default=[ROOT / "sweeps" / "bare-beam.toml", ROOT / "sweeps" / "paper-cantilever.toml"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1], help="noise seeds of the twin")
    ap.add_argument("--profiles", nargs="+", default=["published", "hbtest"])
    ap.add_argument("--noise-free", action="store_true", help="the twin without sensor noise and mains (method against method)")
    ap.add_argument("--rig", type=Path, default=REFERENCE_RIG,
                    help="rig file every sweep runs on (default: the lab-calibrated reference twin; 'sweep': each sweep's own)")
    ap.add_argument("--rig-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a rig-file override (repeatable), e.g. the lab's demand scatter: README 'Two solver profiles'")
    a = ap.parse_args()
    totals = {p: [0.0, 0] for p in a.profiles}
    minimum, acc_minimum = [], []
    for sweep in a.sweeps:
        print(f"sweep {sweep.name}")
        sweep_min, sweep_acc, sweep_hb, sweep_cal, sweep_cal_jac, sweep_cal_exact = [], [], [], [], [], []
        sweep_ratio = []  # per point: stated sigma over the one through the exact Jacobian
        for profile in a.profiles:
            for seed in a.seeds:
                cfg, rig, outs, refs, wall, sig_exact = run_profile(
                    sweep, profile, a.points, seed, a.noise_free, None if str(a.rig) == "sweep" else a.rig, a.rig_set
                )
                n = len(outs)
                conv = sum(o.converged for o in outs)
                bd = [o.breakdown() for o in outs]
                mean = {key: float(np.mean([b[key] for b in bd])) for key in bd[0]}
                reasons = sorted({o.reason for o in outs if not o.converged})
                print(
                    f"{profile:>9} seed {seed}: converged {conv}/{n}{' (' + ', '.join(reasons) + ')' if reasons else ''}, "
                    f"median iterations per point {float(np.median([o.iterations for o in outs])):.1f}, "
                    f"periods per point {mean['total']:.0f}, max FRF error {100 * frf_error(cfg, outs, refs):.2f} %, wall {wall:.1f} s"
                )
                print(
                    f"{'':>9}   per point: " + ", ".join(f"{k} {mean[k]:.0f}" for k in PHASES)
                    + " | " + ", ".join(f"{k} {mean[k]:.0f}" for k in PURPOSES)
                    + f" | evaluations {mean['evaluations']:.1f}"
                )
                print(f"{'':>9}   non-converged {n - conv}" + "".join(f"; {o.frequency_hz:g} Hz: {o.message}" for o in outs if not o.converged))
                totals[profile][0] += mean["total"] * n
                totals[profile][1] += n
                if profile == "hbtest":
                    pm, am = physical_minimum(cfg, outs), accuracy_minimum(cfg, outs)
                    sweep_min.extend(pm)
                    sweep_acc.extend(am)
                    sweep_hb.append(mean["total"] * n)
                    sweep_cal.append(uncertainty_calibration(cfg, outs, refs))
                    sweep_cal_jac.append(uncertainty_calibration(cfg, outs, refs, [o.uncertainty_with_jacobian for o in outs]))
                    sweep_cal_exact.append(uncertainty_calibration(cfg, outs, refs, sig_exact))
                    sweep_ratio.extend(o.uncertainty / sx for o, sx in zip(outs, sig_exact) if o.converged and sx > 0)
        if sweep_min:
            per = sum(sweep_hb) / len(sweep_min)
            print(f"{sweep.name}: hbtest periods per point {per:.0f}; physical minimum per point {np.mean(sweep_min):.0f}; "
                  f"periods_over_minimum {per / np.mean(sweep_min):.2f}; periods_over_accuracy_minimum {per / np.mean(sweep_acc):.2f}; "
                  f"uncertainty_calibration {float(np.sqrt(np.nanmean(np.square(sweep_cal)))):.2f}; "
                  f"with the fitted Jacobian's uncertainty {float(np.sqrt(np.nanmean(np.square(sweep_cal_jac)))):.2f}; "
                  f"through the exact Jacobian {float(np.sqrt(np.nanmean(np.square(sweep_cal_exact)))):.2f}; "
                  f"stated over exact-Jacobian sigma median {float(np.median(sweep_ratio or [np.nan])):.2f}, "
                  f"smallest {float(np.min(sweep_ratio or [np.nan])):.2f}")
            minimum.extend(sweep_min)
            acc_minimum.extend(sweep_acc)
    per_point = {p: t / max(n, 1) for p, (t, n) in totals.items()}
    if "hbtest" in per_point:
        m = float(np.mean(minimum))
        print(f"hbtest periods per point {per_point['hbtest']:.0f}; physical minimum per point {m:.0f}; "
              f"accuracy minimum per point {float(np.mean(acc_minimum)):.0f}")
        print(f"periods_over_accuracy_minimum={per_point['hbtest'] / float(np.mean(acc_minimum)):.2f}")
        print(f"periods_over_minimum={per_point['hbtest'] / m:.2f}")
    if {"published", "hbtest"} <= set(per_point):
        print(f"rig_time_ratio={per_point['published'] / per_point['hbtest']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rig time of the two solver profiles on the same twin and seed (bare-beam sweep).

Prints, per profile: points converged, median iterations per point, total forcing periods,
the worst FRF error against the twin's exact emulated response and the resonance error; then
the ratio of the hbtest profile's periods per point to the physical minimum; last line
``rig_time_ratio=<published/hbtest>`` (total forcing periods).

Physical minimum of a point (documented estimate): the transient left by moving from the
previous point's converged interface motion, |dU|, must decay to the transient tolerance at the
physical substructure's own damping at the forcing frequency (zeta(w) = zeta_M/(2w) +
zeta_K w/2 of the tip beam): n_settle = f ln(|dU| / tol_tr) / (zeta w); plus one averaging
window long enough for the measured residual noise to reach a third of the tolerance the
point needed: n_avg = n_final (3 sigma_final / r_target)^2, at least one period.

    python benchmarks/rig_time.py [--points N] [--sweep FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest import frf  # noqa: E402
from hbtest.config import load_rig, load_sweep  # noqa: E402
from hbtest.sweep import run  # noqa: E402


def run_profile(sweep_file: Path, profile: str, points: int | None, out: Path):
    overrides = [f"solver.profile={profile}"] + ([f"sweep.points={points}"] if points else [])
    cfg = load_sweep(sweep_file, overrides)
    t0 = time.monotonic()
    ds = run(cfg, out / f"{profile}.zarr", progress=None, overwrite=True, plot=False, overrides=overrides)
    wall = time.monotonic() - t0
    return cfg, ds.load(), wall


def physical_minimum(cfg, ds) -> np.ndarray:
    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    ps = rig.physical
    f = ds.frequency.values
    w = 2 * np.pi * f
    zeta = ps.zeta_mass / (2 * w) + ps.zeta_stiffness * w / 2
    U = ds.interface_displacement.sel(harmonic=1).values  # (point, dof)
    weights = np.array([1.0, cfg.test.rotation_length])
    dU = np.r_[np.linalg.norm(U[0] * weights), np.linalg.norm(np.diff(U, axis=0) * weights, axis=1)]
    tr = cfg.test.transient_tolerance
    n_settle = f * np.log(np.maximum(dU / tr, 1.0)) / (zeta * w)
    var = ds.interface_displacement_variance.sel(harmonic=1).values
    sigma = np.sqrt(np.sum(var * weights**2, axis=1))
    n_final = cfg.test.averaging_periods  # variance reported for the last window: scale to one period
    n_avg = np.maximum(n_final * (3 * sigma / cfg.test.tolerance) ** 2, 1.0)
    return n_settle + n_avg


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=None, help="sweep points (default: the file's)")
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "bare-beam.toml")
    a = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for profile in ("published", "hbtest"):
            cfg, ds, wall = run_profile(a.sweep, profile, a.points, Path(tmp))
            err = np.abs(frf.relative_error(ds)).max().item()
            res = frf.compare_resonance(ds)
            periods = float(ds.rig_periods.sum())
            results[profile] = (cfg, ds, periods)
            print(
                f"{profile:>9}: converged {int(ds.converged.sum())}/{ds.sizes['frequency']}, "
                f"median iterations per point {float(np.median(ds.iterations)):.1f}, "
                f"total periods {periods:.0f}, max FRF error {100 * err:.2f} %, "
                f"resonance error {100 * abs(res['frequency_relative_difference']):.4f} %, wall {wall:.1f} s"
            )
        cfg, ds, periods = results["hbtest"]
        minimum = physical_minimum(cfg, ds)
        ratio_min = float(np.sum(ds.rig_periods.values) / np.sum(minimum))
        print(f"hbtest periods per point {periods / ds.sizes['frequency']:.0f}; physical minimum per point "
              f"{np.mean(minimum):.0f}; hbtest/minimum={ratio_min:.2f}")
        print(f"rig_time_ratio={results['published'][2] / results['hbtest'][2]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Acceptance of the continuation through folds (slow: the whole band, at most 200 traced
points): `hbtest sweep sweeps/cubic-interface.toml` (continuation = "arclength") on the
pre-calibration twin and on the lab-calibrated reference twin (its demand scatter) passes both folds of the hardening response and the unstable branch between them, every point
converged, the interface response (u, harmonics 1 and 3) within 1 % of the exact harmonic
balance of the joined structure along the whole curve, fold frequencies within 0.1 % (0.2 % with the scatter) of the
exact ones (hbtest.numerical.continuation.trace_response of the same joined structure)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))

from test_arclength import CUBIC, curve_errors, reference  # noqa: E402

from hbtest.config import load_sweep  # noqa: E402
from hbtest.numerical import ContinuationSettings, trace_response  # noqa: E402
from hbtest.sweep.runner import exit_code, run  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("twin, seed", [("virtual-cantilever-harsh-mains.toml", 1), ("virtual-cantilever.toml", 1),
                                        ("virtual-cantilever.toml", 3)])
def test_arclength_trace_passes_both_folds_within_the_acceptance(tmp_path, twin, seed):
    # on the pre-calibration twin (harsh mains: no demand scatter, 4x lower laser noise), where
    # this acceptance was set, and on the lab-calibrated reference twin with its demand scatter
    # (issue 41: the corrector stalled at the second point before the path pool; seed 3's
    # corrector then ran from 19.51 to 15.93 Hz near the upper fold and clipped the sensors
    # before the trust region; figures per seed in docs/sweeps.md, benchmarks/nonlinear.py
    # --twins reference --paths arclength --set sweep.max_points=200).
    # Issue 41's acceptance: both folds,
    # every point converged, within 1 % of the exact curve, folds within 0.2 % (0.1 % asserted on
    # the twin without scatter, as before), at most 200 slots
    over = ["output.plot=false", f"rig=../instruments/{twin}", "sweep.max_points=200"]
    cfg = load_sweep(CUBIC, over)
    ds = run(cfg, tmp_path / "cubic.zarr", seed=seed, overrides=over)
    assert ds.attrs["status"] == "completed" and exit_code(ds) == 0
    done = np.asarray(ds["done"].values, dtype=bool)
    n = int(done.sum())
    assert done[:n].all() and np.asarray(ds["converged"].values)[:n].all()
    f = ds["frequency"].values[:n]
    assert f[0] == cfg.sweep.start_hz and f[-1] > cfg.sweep.stop_hz
    # the unstable branch: the frequency runs back down between the folds
    assert (np.diff(f) < 0).sum() > 10

    joined, fv = reference(cfg, seed)
    # the twin's joined beam rounds its condensation at ~1e-9: a corrector tolerance above that
    exact = trace_response(joined, cfg.sweep.start_hz, cfg.sweep.stop_hz, cfg.sweep.harmonics, fv, settings=ContinuationSettings(max_step=0.2, corrector_tolerance=1e-9, noise_floor=1e-6))
    assert len(exact.folds_hz) == 2
    folds = np.array(ds.attrs["folds_hz"])
    assert folds.size == 2
    rel = np.abs(folds - exact.folds_hz) / exact.folds_hz
    err = curve_errors(ds, cfg, joined, fv)
    periods = float(ds["rig_periods"].values[:n].sum())
    print(f"\nfolds measured {folds} exact {exact.folds_hz} rel {rel}; points {n}; max error u1 {100 * err[:, 0].max():.3f} %"
          f" u3 {100 * err[:, 1].max():.3f} % of |U|; max frequency offset of the nearest exact point {1e3 * np.abs(err[:, 2]).max():.2f} mHz;"
          f" rig periods {periods:.0f} ({periods / n:.0f}/pt)")
    assert rel.max() < (1e-3 if "harsh" in twin else 2e-3)
    assert err[:, :2].max() < 0.01

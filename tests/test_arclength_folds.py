"""Acceptance of the continuation through folds (slow: the whole band, ~215 traced
points): `hbtest sweep sweeps/cubic-interface.toml` (continuation = "arclength") on the pre-calibration twin
passes both folds of the hardening response and the unstable branch between them, every point
converged, the interface response (u, harmonics 1 and 3) within 1 % of the exact harmonic
balance of the joined structure along the whole curve, fold frequencies within 0.1 % of the
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


def test_arclength_trace_passes_both_folds_within_the_acceptance(tmp_path):
    # on the pre-calibration twin (instruments/virtual-cantilever-harsh-mains.toml: no demand
    # scatter, 4x lower laser noise), where this acceptance was set. On the lab-calibrated
    # reference twin the trace does not meet it: with its scatter the corrector stalls at the
    # second point (it pools without a between-evaluation variance, README); without it
    # (virtual.demand_scatter.sd_v=[0, 0], seed 1) every point converges and the folds are within
    # 0.03 % of the exact ones, but the trace takes 509 points (215 here) and u1 is off by up to
    # 1.25 % of |U| (README "Continuation through folds")
    over = ["output.plot=false", "rig=../instruments/virtual-cantilever-harsh-mains.toml"]
    cfg = load_sweep(CUBIC, over)
    ds = run(cfg, tmp_path / "cubic.zarr", seed=1, overrides=over)
    assert ds.attrs["status"] == "completed" and exit_code(ds) == 0
    done = np.asarray(ds["done"].values, dtype=bool)
    n = int(done.sum())
    assert done[:n].all() and np.asarray(ds["converged"].values)[:n].all()
    f = ds["frequency"].values[:n]
    assert f[0] == cfg.sweep.start_hz and f[-1] > cfg.sweep.stop_hz
    # the unstable branch: the frequency runs back down between the folds
    assert (np.diff(f) < 0).sum() > 10

    joined, fv = reference(cfg, 1)
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
    assert rel.max() < 1e-3
    assert err[:, :2].max() < 0.01

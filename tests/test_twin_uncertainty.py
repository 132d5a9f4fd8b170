"""The hbtest profile's stated uncertainty is honest on the lab-calibrated reference twin.

Evidence: the twin's exact emulated response (:meth:`VirtualRig.emulated_interface_response`)
against the reported interface displacement, in units of the stated standard uncertainty:
``uncertainty_calibration`` of ``benchmarks/rig_time.py`` (root mean square of
``|U - U_exact| / sigma`` over points; 1 when the stated uncertainty is right). The bounds were
measured over seeds (see ``CALIBRATION_BOUNDS``).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"

#: rms |U - U_exact| / sigma over the first 8 points of the paper sweep (16-19 Hz, 0.43 Hz apart),
#: measured on seeds 1-8: 1.32, 0.98, 1.19, 0.74, 1.35, 0.85, 1.07, 0.94 (mean 1.06); the whole
#: sweep, seed 1: 1.10 (bare beam 1.06). Before the fits removed the mains' 250 Hz line at the
#: measured mains frequency the whole sweep gave 0.52 (the line's leakage counted as noise: the
#: stated uncertainty twice the error), and with the gauges' correlated noise (-0.33) taken as
#: independent 1.30 over seeds 1, 3, 5, 7 (here 1.23)
CALIBRATION_BOUNDS = (0.5, 1.8)


def _bench():
    spec = importlib.util.spec_from_file_location("rig_time", ROOT / "benchmarks" / "rig_time.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_stated_uncertainty_is_calibrated_on_the_reference_twin():
    """8 points of the paper sweep, seed 3, hbtest profile: every point converges, and the
    stated uncertainty neither hides the error nor inflates it by more than the seed spread."""
    b = _bench()
    cfg, _, outs, refs, _, _ = b.run_profile(PAPER, "hbtest", 8, 3)
    assert all(o.converged for o in outs)
    cal = b.uncertainty_calibration(cfg, outs, refs)
    assert CALIBRATION_BOUNDS[0] < cal < CALIBRATION_BOUNDS[1], cal
    assert b.frf_error(cfg, outs, refs) < 0.01
    assert np.isfinite([o.uncertainty for o in outs]).all()


def test_correlated_gauge_and_laser_variances_are_the_linear_maps():
    """(T, M) and (u, theta) variances of two correlated sensors equal ``J S J^T`` of the
    reduction's own linear map (applied to unit inputs), for several correlations."""
    from hbtest.method.sensors import (
        SensorLayout,
        _force_variance,
        _motion_variance,
        forces_finite_difference,
        lasers_to_motion_ls,
    )

    lay = SensorLayout(laser_spacing=0.03, gauge_positions=(0.005, 0.02), gauge_calibration=918.6)
    v = np.array([2.0, 3.0])
    for rho in (-0.9, -0.33, 0.0, 0.5):
        S = np.array([[v[0], rho * np.sqrt(v[0] * v[1])], [rho * np.sqrt(v[0] * v[1]), v[1]]])
        J = np.array(forces_finite_difference(np.array([1.0, 0.0]), np.array([0.0, 1.0]), lay))  # rows T, M
        np.testing.assert_allclose(_force_variance(v, lay.gauge_positions, lay.gauge_calibration, rho),
                                   np.diag(J @ S @ J.T), rtol=1e-12)
        J = np.array(lasers_to_motion_ls([np.array([1.0, 0.0]), np.array([0.0, 1.0])], lay.laser_positions))
        np.testing.assert_allclose(_motion_variance(v, lay.laser_positions, rho), np.diag(J @ S @ J.T), rtol=1e-12)

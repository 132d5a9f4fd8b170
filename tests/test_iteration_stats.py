"""How a Broyden iteration went (hbtest.rig.virtual.iteration_stats): exact answers on built
records, the affine misfit's calibration on seeded white scatter (a property over seeds), and
the committed lab table (``tests/data/lab_iteration_stats.json``) against its script when the
lab records are on this machine."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hbtest.rig.virtual.iteration_stats import MIN_AFFINE_EVALUATIONS, affine_misfit, step_statistics

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "tests" / "data" / "lab_iteration_stats.json"


def test_step_statistics_of_a_built_record():
    """|R| 8, 10, 4, 2, 1 mN with tol 1 mN: ratios 1.25, 0.4, 0.5, 0.5; above 3 tol the first
    three count (from 8, 10 and 4: median 0.5, one of three raised); steps of 1, 1, 0.5, 1 V:
    two of the three after the first at its length; a second point of one evaluation."""
    R = np.array([[8, 0, 0, 0], [0, 10, 0, 0], [0, 0, 4, 0], [0, 0, 0, 2], [1, 0, 0, 0]]) * 1e-3
    X = np.cumsum([[0, 0, 0, 0], [1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0.5, 0], [0, 0, 0, 1]], axis=0)
    s = step_statistics([(X, R, 1e-3), (X[:1], R[:1], 1e-3)])
    assert s["points"] == 2 and s["evaluations_median"] == 3.0
    assert s["start_over_tolerance_median"] == pytest.approx(8.0)
    assert s["step_ratio_median"] == pytest.approx(0.5) and s["steps_above"] == 3
    assert s["step_raised_fraction"] == pytest.approx(1 / 3)
    assert s["first_step_ratio_median"] == pytest.approx(1.25)
    assert s["steps_at_limit_fraction"] == pytest.approx(2 / 3)


def test_affine_misfit_is_zero_on_an_affine_rig_and_nan_below_the_minimum():
    rng = np.random.default_rng(3)
    J, b = rng.normal(size=(4, 4)), rng.normal(size=4)
    X = rng.normal(size=(MIN_AFFINE_EVALUATIONS, 4))
    assert affine_misfit(X, X @ J.T + b) == pytest.approx(0.0, abs=1e-12)
    assert np.isnan(affine_misfit(X[:-1], X[:-1] @ J.T + b))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), sigma=st.floats(1e-4, 1e-2))
def test_affine_misfit_estimates_the_scatter_of_one_evaluation(seed, sigma):
    """White scatter sigma per component about an affine rig: the misfit over 200 evaluations
    is sigma to within 15 % (its relative s.d. is 1/sqrt(2 * 4 * 195) = 2.5 %)."""
    rng = np.random.default_rng(seed)
    J, b = rng.normal(size=(4, 4)), rng.normal(size=4)
    X = rng.normal(size=(200, 4)) * 0.05
    R = X @ J.T + b + rng.normal(0.0, sigma, (200, 4))
    assert affine_misfit(X, R) == pytest.approx(sigma, rel=0.15)


def test_committed_lab_table_is_what_its_script_writes(tmp_path):
    """The table's lab figures: 11 evaluations at the median; the misfit 3.9 mN, eight times
    the lab's read scatter (0.50 mN, tests/data/lab_noise_fit.json). Recomputed from the lab
    records when they are here (skipped elsewhere: CI may not have them)."""
    table = json.loads(TABLE.read_text())
    assert table["evaluations_median_all_points"] == 11.0
    assert table["affine"]["misfit_n_median_p10_p90"][0] == pytest.approx(3.95e-3, rel=0.01)
    sys.path.insert(0, str(ROOT / "scripts"))
    from fit_lab_noise import default_lab_dir

    if not (Path(default_lab_dir()) / "lab_records.npz").is_file():
        pytest.skip(f"no lab records at {default_lab_dir()}")
    out = tmp_path / "stats.json"
    p = subprocess.run([sys.executable, str(ROOT / "scripts" / "lab_iteration_stats.py"), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    # equal to rounding: the lab's figures go through least squares, whose last bits follow the BLAS kernels
    # (up to 1.2e-9 relative apart between OpenBLAS's Haswell and Sandybridge kernels: the replayed steps amplify them)
    fresh = json.loads(out.read_text())
    assert _paths(fresh) == _paths(table)
    for a, b in zip(_leaves(fresh), _leaves(table), strict=True):
        number = isinstance(b, float) and not isinstance(b, bool)
        assert a == (pytest.approx(b, rel=1e-6, abs=1e-12, nan_ok=True) if number else b)


def _leaves(x) -> list:
    """The numbers (and other leaves) of a JSON value, in order."""
    if isinstance(x, dict):
        return [v for k in sorted(x) for v in _leaves(x[k])]
    if isinstance(x, list):
        return [v for item in x for v in _leaves(item)]
    return [x]


def _paths(x, at: str = "") -> list[str]:
    """The key paths of a JSON value (its shape)."""
    if isinstance(x, dict):
        return [p for k in sorted(x) for p in _paths(x[k], f"{at}/{k}")]
    if isinstance(x, list):
        return [p for i, item in enumerate(x) for p in _paths(item, f"{at}[{i}]")]
    return [at]

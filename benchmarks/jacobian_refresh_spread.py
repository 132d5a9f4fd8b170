"""Seed-to-seed spread of the stated/exact uncertainty ratio with and without the rig
Jacobian refresh (the figures behind the thresholds of
``tests/test_solution_estimate.py::test_refreshed_jacobian_keeps_the_stated_uncertainty_honest``
and its slow companion), on the whole bare-beam sweep.

    python benchmarks/jacobian_refresh_spread.py 1 2 3 4 5 6 7 8

One line per seed, then the spread over the seeds as ``key=value`` lines; the last line is
``refresh_median_gain_mean=<mean over seeds of median(with) - median(without)>``.
Uses the test module's own helpers, so the figures are those the tests judge.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402

from test_solution_estimate import _sweep_ratios  # noqa: E402


def main(seeds):
    rows = []
    for seed in seeds:
        _, a = _sweep_ratios(refresh=True, seed=seed)
        _, b = _sweep_ratios(refresh=False, seed=seed)
        rows.append((np.median(a), a.min(), np.median(b), np.median(a) - np.median(b)))
        print(f"seed={seed} median_with={rows[-1][0]:.4f} min_with={rows[-1][1]:.4f} "
              f"median_without={rows[-1][2]:.4f} gain={rows[-1][3]:.4f}", flush=True)
    r = np.array(rows)
    for j, name in enumerate(("median_with", "min_with", "median_without", "gain")):
        print(f"{name}_range={r[:, j].min():.4f}..{r[:, j].max():.4f} {name}_sd={r[:, j].std(ddof=1):.4f}")
    print(f"refresh_median_gain_se={r[:, 3].std(ddof=1) / np.sqrt(len(r)):.4f}")
    print(f"refresh_median_gain_mean={r[:, 3].mean():.4f}")


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 2, 3, 4])

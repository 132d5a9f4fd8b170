"""Seed-to-seed spread of the off-resonance coverage statistic (the figures behind the bounds of
``tests/test_solution_estimate.py::test_stated_uncertainty_covers_the_error_off_resonance``):
rms of z = |U - U_exact| / stated uncertainty over sets of 12 seeds (the default test's size).

    python benchmarks/off_resonance_coverage.py 1 48      # seeds 1..48: 4 sets of 12, ~4 min

One line per seed, then per set of 12 and over all seeds as ``key=value`` lines. Uses the test
module's own helper, so the figures are those the test judges.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import numpy as np  # noqa: E402

from test_solution_estimate import off_resonance_z  # noqa: E402


def rms(x) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def main(first: int, last: int) -> None:
    z, zj = [], []
    for seed in range(first, last + 1):
        a, b = off_resonance_z(seed)
        z.append(a)
        zj.append(b)
        print(f"seed={seed} z={' '.join(f'{v:.3f}' for v in a)} z_j={' '.join(f'{v:.3f}' for v in b)}", flush=True)
    sets = [rms(z[i:i + 12]) for i in range(0, len(z) - 11, 12)]
    sets_j = [rms(zj[i:i + 12]) for i in range(0, len(zj) - 11, 12)]
    if sets:
        print("rms_z_per_12=" + ",".join(f"{v:.3f}" for v in sets))
        print("rms_zj_per_12=" + ",".join(f"{v:.3f}" for v in sets_j))
    if len(sets) > 1:
        print(f"rms_z_per_12_sd={np.std(sets, ddof=1):.3f}")
        print(f"rms_zj_per_12_sd={np.std(sets_j, ddof=1):.3f}")
    print(f"rms_zj_all={rms(zj):.3f}")
    print(f"rms_z_all={rms(z):.3f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

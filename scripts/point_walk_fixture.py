"""Write the walk of one point of a twin sweep at its first acceptance, for a test to replay.

Usage: ``python scripts/point_walk_fixture.py [--sweep sweeps/paper-cantilever.toml] [--seed 4]
[--frequency 19.0] [--out tests/data/paper_seed4_19hz_walk.npz]`` (~20 s: the sweep runs up to the
point, one BLAS thread).

The sweep runs in-process on its twin (``virtual.seed`` = ``--seed``, 31 points as in
``benchmarks/rig_time_kinds.py``); at the first judgement of the point at ``--frequency`` that
accepts it (:meth:`hbtest.point.profile_hbtest.HbtestProfile.judge`), every evaluation of the
point (demand, outputs, measurement with its variances and raw channels), the pools' prior
Jacobian and its carried row covariance and the loop's output scale are written. The pooled
estimate and the fitted Jacobian are not: a test pools the evaluations again
(``tests/test_carried_prior.py``). Written at 03be94c for the paper sweep, seed 4, 19 Hz (the
accepted solution 4.9 stated sigmas from the exact one)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_sweep  # noqa: E402
from hbtest.point.profile_hbtest import HbtestProfile  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402


def walk_arrays(loop, num, w) -> dict:
    """The arrays of a point's walk ``w`` at the numerical side ``num`` (:class:`hbtest.point.profile_hbtest.Walk`)."""
    H = w.history
    if any(e.overrange for e in H) or w.raw is not H[-1]:
        raise SystemExit("point_walk_fixture: a clipped evaluation or a closing re-measure: not written")

    def m(f):
        return np.stack([f(e) for e in H])

    return dict(scaleY=loop.output_scale(num), prior=w.prior, prior_cov=w.prior_cov,
                V=m(lambda e: e.V), Y=m(lambda e: e.Y), U_N=m(lambda e: e.U_N), R=m(lambda e: e.R),
                norm=m(lambda e: e.norm), vector=m(lambda e: e.vector), noise=m(lambda e: e.noise),
                periods=m(lambda e: e.periods), windows=m(lambda e: e.windows), settled=m(lambda e: e.settled),
                ramp_periods=m(lambda e: e.ramp_periods), kind=m(lambda e: e.kind),
                window_periods=np.array([",".join(str(p) for p in e.window_periods) for e in H]),
                displacement=m(lambda e: e.meas.displacement), force=m(lambda e: e.meas.force),
                displacement_variance=m(lambda e: e.meas.displacement_variance),
                force_variance=m(lambda e: e.meas.force_variance), n_periods=m(lambda e: e.meas.n_periods),
                raw_coef=m(lambda e: e.meas.raw_channels[0]), raw_var=m(lambda e: e.meas.raw_channels[1]),
                channel_correlation=m(lambda e: e.meas.channel_correlation))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", type=Path, default=ROOT / "sweeps" / "paper-cantilever.toml")
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--frequency", type=float, default=19.0)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "paper_seed4_19hz_walk.npz")
    a = ap.parse_args()
    rig_set = [*load_sweep(a.sweep).rig_overrides, f"virtual.seed={a.seed}"]
    cfg = load_sweep(a.sweep, ["sweep.points=31", f"rig_set={rig_set!r}"])
    judge, written = HbtestProfile.judge, []

    def capturing(self, loop, num, carry, w):
        j = judge(self, loop, num, carry, w)
        if abs(num.frequency_hz - a.frequency) < 1e-9 and j.ok and not written:
            np.savez_compressed(a.out, frequency_hz=num.frequency_hz, **walk_arrays(loop, num, w))
            written.append(len(w.history))
        return j

    HbtestProfile.judge = capturing  # the sweep's own profile instance calls it
    with tempfile.TemporaryDirectory() as tmp:
        run(cfg, Path(tmp) / "s.zarr", plot=False)
    if not written:
        raise SystemExit(f"point_walk_fixture: no point at {a.frequency} Hz was accepted")
    print(f"{a.out}: {written[0]} evaluations")


if __name__ == "__main__":
    main()

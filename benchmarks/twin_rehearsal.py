"""Rehearsal on a measured twin: does the paper sweep on a twin that ``hbtest twin`` measured from
a hidden rig go as it goes on the hidden rig itself?

Usage: ``python benchmarks/twin_rehearsal.py [--seeds 1,2,3] [--quick]`` (about 4 minutes per
seed on one core). For each seed: the hidden rig of ``tests/twin_hidden.py`` (noise, mains,
demand scatter, converter, channel gains and lags and clamp drawn by a seeded generator), its
twin measured in-process (``hbtest twin``), the paper sweep (``sweeps/paper-cantilever.toml``) on
both. Prints per seed ``converged_hidden=``, ``converged_twin=``, ``rig_periods_ratio=`` (twin /
hidden, over the points converged on both), ``frf_worst_sigmas=`` (the largest difference of the
interface displacement's fundamental over the combined stated uncertainty
``displacement_uncertainty``, over the points converged on both) and ``twin_rig_time_s=``.
Acceptance (issue 42): same converged count, periods within 20 %, FRF within the stated
uncertainty. The twin takes its mechanics from the reference twin (``--template``: as on hardware;
without it a virtual rig would be its own template, its mechanics exact), the clamp fitted to the
measured modes (:mod:`hbtest.twin.mechanics`).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
import tempfile
from pathlib import Path

import numpy as np
import xarray as xr

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from twin_hidden import rig_text  # noqa: E402

from hbtest.cli import main  # noqa: E402

PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
REFERENCE = ROOT / "instruments" / "virtual-cantilever.toml"


def _quiet(args, codes=(0,)) -> str:
    """Run the command in this process (its stdout kept); its exit code must be in ``codes``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(args)
    assert code in codes, (args, code)
    return buf.getvalue()


def _sweep(rig: Path, store: Path) -> xr.Dataset:
    _quiet(["sweep", str(PAPER), "--store", str(store), "--no-plot", "--quiet", "--set", f"rig='{rig}'"], codes=(0, 1))  # 1: some points not converged
    return xr.open_zarr(store, consolidated=False).load()


def rehearse(seed: int, work: Path, quick: bool) -> None:
    hidden = work / f"hidden{seed}.toml"
    hidden.write_text(rig_text(seed))
    twin = work / f"twin{seed}.toml"
    # as on hardware: the twin's mechanics start from the reference twin (its clamp fitted to the measured modes)
    out = _quiet(["twin", str(hidden), "--out", str(twin), "--template", str(REFERENCE)] + (["--quick"] if quick else []))
    rig_s = float(re.search(r"^twin_rig_time_s=([\d.]+)$", out, re.M).group(1))
    a, b = _sweep(hidden, work / f"hidden{seed}.zarr"), _sweep(twin, work / f"twin{seed}.zarr")
    ok = a.converged.values & b.converged.values
    h = list(a.harmonic.values).index(1)
    xa, xb = a.interface_displacement.values[:, 0, h], b.interface_displacement.values[:, 0, h]
    u = np.hypot(a.displacement_uncertainty.values, b.displacement_uncertainty.values)
    z = np.abs(xa - xb)[ok] / u[ok]
    periods = float(b.rig_periods.values[ok].sum() / a.rig_periods.values[ok].sum())
    print(f"seed={seed} converged_hidden={int(a.converged.sum())} converged_twin={int(b.converged.sum())} of {a.frequency.size}"
          f" rig_periods_ratio={periods:.3f} frf_worst_sigmas={float(np.max(z)):.2f} twin_rig_time_s={rig_s:.1f}", flush=True)


def run(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("--quick", action="store_true", help="the twin measured with hbtest twin --quick")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for seed in (int(s) for s in args.seeds.split(",")):
            rehearse(seed, Path(tmp), args.quick)


if __name__ == "__main__":
    run()

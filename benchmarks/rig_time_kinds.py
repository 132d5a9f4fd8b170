"""Rig time per point on every rig kind against the in-process twin (issue 40).

For each sweep (``paper``: ``sweeps/paper-cantilever.toml``; ``bare``: ``sweeps/bare-beam.toml``)
and seed, the sweep runs in-process on the reference twin (its own modes: the transient fit)
and through each kind's served twin over loopback (``hbtest serve --protocol <kind> --seed
<seed>`` of the same twin, the sweep's twin overrides passed to the server), driven by the
kind's shipped loopback rig file (``instruments/<kind>-loopback.toml``) pointed at the served
ports and otherwise unedited: its ``[identify]`` table has the rig measure its modes from free
decays at the first point (a fresh identification record each run, in a temporary folder: the
identification's rig time is in the first point's rig periods, hence in every ratio below).

Printed per sweep, seed and kind: converged points, the largest FRF error of the fundamental
against the exact emulated structure, rig periods per point, the ratio of the kind's rig
periods over the sweep to the in-process run's, and the identification's rig time [s]; then
per kind the worst over sweeps and seeds; last line ``worst_kind_rig_time_ratio=<x>`` (the
largest ratio of any kind, sweep and seed run).

    python benchmarks/rig_time_kinds.py [--sweeps paper,bare] [--seeds 1,2,3,4] [--points 31]
                                        [--kinds box,helic,scpi,redpitaya] [--keep FOLDER]

The scpi and redpitaya servers run in real time (a sweep's rig time in wall time); box and helic
advance their clock by command. Run a subset on a shared machine (``nice``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from served import serve  # noqa: E402  (tests/served.py: the served twins and their rig files)

from hbtest.config import load_rig, load_sweep  # noqa: E402
from hbtest.rig.virtual import VirtualRig  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

SWEEPS = {"paper": ROOT / "sweeps" / "paper-cantilever.toml", "bare": ROOT / "sweeps" / "bare-beam.toml"}
KINDS = ("box", "helic", "scpi", "redpitaya")
#: the sweep's rig overrides that describe the emulated twin (the server's), not the driven rig file
TWIN_ONLY = ("virtual.",)


def exact_error(ds, cfg) -> float:
    """Largest relative error of the measured fundamental against the exact emulated structure."""
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    twin = VirtualRig(load_rig(cfg.rig_path, cfg.rig_overrides))
    exact = np.stack([twin.emulated_interface_response(ns, F, f, [1])[:, 0] for f in ds.frequency.values])
    measured = ds.interface_displacement.values[:, :, list(ds.harmonic.values).index(1)]
    return float(np.nanmax(np.abs(measured - exact) / np.abs(exact)))


def served_run(kind: str, sweep_file: Path, cfg, seed: int, sets, tmp: Path):
    """The sweep through ``kind``'s served twin: (store dataset, identification rig time [s])."""
    rig_set = list(cfg.rig_overrides)
    served = serve(kind, None, "--seed", str(seed), *[a for s in rig_set for a in ("--set", s)], twin=Path(cfg.rig_path))
    try:
        folder = tmp / f"{kind}-{sweep_file.stem}-{seed}"
        folder.mkdir()
        path = served.rig_file(folder)
        kept = [s for s in rig_set if not s.startswith(TWIN_ONLY)]
        ds = run(load_sweep(sweep_file, list(sets) + [f"rig='{path}'", f"rig_set={kept!r}"]), folder / "s.zarr", plot=False).load()
        record = next(folder.glob("*.modes.json"), None)
        ident = json.loads(record.read_text())["rig_time_s"] if record else float("nan")
        return ds, ident
    except Exception:
        served.process.kill()
        print(f"{kind}: served twin's output: {served.process.communicate()[0][-2000:]}", flush=True)
        raise
    finally:
        served.stop()


def line(label: str, ds, cfg, base_periods: float, ident: float) -> float:
    periods = ds.rig_periods.values
    ratio = float(periods.sum() / base_periods)
    print(f"{label:<28} converged={int(ds.converged.values.sum())}/{periods.size} frf_error_max={exact_error(ds, cfg):.4f} "
          f"periods_per_point={periods.mean():.1f} ratio={ratio:.3f} identification_rig_s={ident:.2f}", flush=True)
    print(f"{'':<28} periods={','.join(f'{p:.0f}' for p in periods)} iterations={','.join(str(int(n)) for n in ds.iterations.values)}")
    for i in np.flatnonzero(~ds.converged.values):  # what ended a point that did not converge
        print(f"{'':<28} point {i + 1} ({ds.frequency.values[i]:.3f} Hz): {ds.stop_reason.values[i]}: {ds.message.values[i]}")
    return ratio


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweeps", default="paper,bare")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--points", type=int, default=31)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--keep", type=Path, help="keep the stores and identification records in this folder")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    worst: dict[str, float] = {}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = a.keep or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        for name in a.sweeps.split(","):
            sweep_file = SWEEPS[name]
            for seed in (int(s) for s in a.seeds.split(",")):
                sets = [f"sweep.points={a.points}"]
                cfg = load_sweep(sweep_file, sets + [f"rig_set={[*_rig_set(sweep_file), f'virtual.seed={seed}']!r}"])
                base = run(cfg, tmp / f"in-{name}-{seed}.zarr", plot=False).load()
                base_periods = float(base.rig_periods.values.sum())
                line(f"{name} seed={seed} in-process", base, cfg, base_periods, 0.0)
                for kind in kinds:
                    try:
                        ds, ident = served_run(kind, sweep_file, cfg, seed, sets, tmp)
                    except Exception as e:  # a run that fails counts against the acceptance, the others go on
                        print(f"{name} seed={seed} {kind:<14} failed: {type(e).__name__}: {e}", flush=True)
                        failures += 1
                        worst[kind] = float("inf")
                        continue
                    r = line(f"{name} seed={seed} {kind}", ds, cfg, base_periods, ident)
                    failures += int((~ds.converged.values).sum()) + int(exact_error(ds, cfg) > 0.01)
                    worst[kind] = max(worst.get(kind, 0.0), r)
    for kind, r in worst.items():
        print(f"{kind}_worst_rig_time_ratio={r:.3f}")
    print(f"kind_runs_failing_acceptance={failures}")
    print(f"worst_kind_rig_time_ratio={max(worst.values()) if worst else float('nan'):.3f}")


def _rig_set(sweep_file: Path) -> list:
    """The sweep file's own ``rig_set`` (the seed is added to it)."""
    return list(load_sweep(sweep_file).rig_overrides)


if __name__ == "__main__":
    main()

"""The threshold audit: how many seed-to-seed (and kernel-to-kernel) spreads each noisy
assertion of the suite sits from its threshold. Runs the suite under several configurations
with ``benchmarks/assertion_log.py`` (each assertion's tightest numeric comparison), then
compares the runs:

    python benchmarks/threshold_audit.py run DIR shift0 npy sandy shift1 shift2   # ~5 min each on 2 free cores
    python benchmarks/threshold_audit.py report DIR

A run name ``shiftK`` shifts every twin seed by 1000 K (``benchmarks/seedshift.py``); ``sandy``
runs OpenBLAS's Sandybridge kernels (no FMA: other rounding); ``npy`` switches off numpy's top
SIMD level this CPU has (``NPY_DISABLE_CPU_FEATURES``, :func:`top_simd_level`: numpy's ufuncs on
the next level's paths, other last bits in ``sin``, ``exp`` and reductions). Extra pytest arguments go after
``--``. The report gives, per assertion that held in every run and whose relative margin
``(threshold - value) / max(|threshold|, |value|)`` moved between runs, the margins, their sd
and ``spreads = mean / sd`` (how many spreads the mean sits from failing; margins equal up to
rounding, relative 1e-6, are fixed figures and left out); then the assertions
that failed in some run. Last lines ``assertions_varying=``, ``below_3_spreads=``,
``failed_somewhere=``, ``min_spreads=``. With four runs an sd is a rough figure (its own
relative uncertainty ~40 %): a flag is a prompt to measure that test's spread properly
(more seeds), as ``benchmarks/off_resonance_coverage.py`` does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
#: margins that differ between runs by less than this (relative) are the same figure up to rounding: not varying
ROUNDING = 1e-6


def top_simd_level() -> str:
    """numpy's top SIMD dispatch level on this CPU and the targets above it, as
    ``NPY_DISABLE_CPU_FEATURES`` takes them: on an AVX-512 machine ``X86_V4 AVX512_ICL`` (numpy
    then runs its AVX2 paths), on an AVX2 machine ``X86_V3`` (its baseline SSE paths)."""
    from numpy._core import _multiarray_umath as umath

    found = [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]
    levels = [t for t in found if t.startswith("X86_V")]
    if not levels:
        raise SystemExit("npy: numpy dispatches no x86-64 level on this CPU; name the features in NPY_DISABLE_CPU_FEATURES")
    return " ".join(found[found.index(levels[-1]):])


def run(folder: Path, names: list[str], extra: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        env = dict(os.environ, ASSERTION_LOG=str(folder / name), PYTHONDONTWRITEBYTECODE="1",
                   PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "benchmarks")]))
        args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "assertion_log",
                "-o", "enable_assertion_pass_hook=true", *extra]
        if name.startswith("shift"):
            env["SEED_SHIFT"] = name[5:]
            args += ["-p", "seedshift"]
        elif name == "sandy":
            env["OPENBLAS_CORETYPE"] = "Sandybridge"
        elif name == "npy":
            env["NPY_DISABLE_CPU_FEATURES"] = top_simd_level()
        rc = subprocess.call(args, cwd=ROOT, env=env)
        print(f"run={name} exit={rc}", flush=True)


def load(folder: Path) -> dict[str, dict[tuple[str, int], dict]]:
    runs: dict[str, dict[tuple[str, int], dict]] = defaultdict(dict)
    for p in sorted(folder.iterdir()):
        name = p.name.split(".")[0]
        for line in p.read_text().splitlines():
            rec = json.loads(line)
            key = (rec["test"], rec["line"])
            old = runs[name].get(key)
            if old is None or rec["margin"] < old["margin"]:
                runs[name][key] = rec
    return runs


def report(folder: Path) -> None:
    runs = load(folder)
    names = sorted(runs)
    keys = sorted({k for r in runs.values() for k in r if k[1] >= 0})
    rows, failed = [], sorted({(n, k[0]) for n, r in runs.items() for k in r if k[1] < 0})
    for key in keys:
        m = [runs[n][key]["margin"] for n in names if key in runs[n]]
        if len(m) < 2 or min(m) < 0:  # failed, or a comparison inside the assertion that is not required to hold
            continue
        sd = float(np.std(m, ddof=1))
        if sd <= ROUNDING * max(abs(float(np.mean(m))), 1e-300):  # the same figure up to rounding
            continue
        rec = next(runs[n][key] for n in names if key in runs[n])
        rows.append((float(np.mean(m)) / sd, key, m, sd, rec["source"]))
    rows.sort(key=lambda r: r[0])
    print("runs=" + ",".join(names))
    for spreads, (test, line), m, sd, source in rows:
        print(f"{spreads:7.1f}  {test}:{line}  margins={','.join(f'{x:.3g}' for x in m)} sd={sd:.2g}  | {source}")
    for name, test in failed:
        print(f"FAILED in {name}: {test}")
    print(f"assertions_varying={len(rows)}")
    print(f"below_3_spreads={sum(r[0] < 3 for r in rows)}")
    print(f"failed_somewhere={len({t for _, t in failed})}")
    print(f"min_spreads={rows[0][0]:.2f}" if rows else "min_spreads=nan")


if __name__ == "__main__":
    cmd, folder = sys.argv[1], Path(sys.argv[2])
    if cmd == "run":
        rest = sys.argv[3:]
        cut = rest.index("--") if "--" in rest else len(rest)
        run(folder, rest[:cut], rest[cut + 1:])
    else:
        report(folder)

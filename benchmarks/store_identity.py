"""Bit-identity guard for refactors: stores built from fixed seeds, hashed variable by variable.

Builds short stores of the reference cases (paper sweep on both profiles, bare beam, two
harmonics, cubic interface stepped and by arclength, contact tip, a force family, automatic
harmonics) through :func:`hbtest.sweep.run` with the twin's seed from the rig file, and hashes
every variable (dtype, shape, bytes) and every attribute of the store and of its variables,
except what a clock, a host or a checkout decides (times, wall seconds, versions, git commit,
absolute paths). The hashes are compared against

- a committed reference (``benchmarks/store_identity.json``, the default), or
- the same cases built at another git revision (``--against REV``: a temporary ``git worktree``
  of REV, this script run there in a subprocess with that tree's ``hbtest`` on ``PYTHONPATH``).

BLAS threading changes the last bits of a sum, so the script pins ``OPENBLAS_NUM_THREADS=1``
(and its siblings) before numpy loads, here and in the subprocess.

    python benchmarks/store_identity.py                    # against the committed reference
    python benchmarks/store_identity.py --against c708278  # against stores built at a revision
    python benchmarks/store_identity.py --write            # regenerate the committed reference
    python benchmarks/store_identity.py --cases paper bare # a subset

Prints one line per case (``identical`` or the variables that differ) and, last,
``store_identity=<identical cases>/<cases>``; exit status 1 on any difference.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "store_identity.json"
#: the reference's entry naming the BLAS kernels it was built with (not a case)
KERNELS_KEY = "blas_kernels"


def blas_kernels() -> str:
    """The BLAS implementations and kernel sets this process runs (threadpoolctl), e.g.
    ``openblas:Haswell``: the same seed gives the same bits only on the same kernels."""
    from threadpoolctl import threadpool_info

    # a set: numpy and scipy each load their own OpenBLAS, the same kernels named twice
    return ",".join(sorted({f"{i.get('internal_api')}:{i.get('architecture')}" for i in threadpool_info()
                            if i.get("user_api") == "blas"}))

#: store attributes a clock, the host or the checkout decides
VOLATILE_ATTRS = {"created_utc", "updated_utc", "finished_utc", "wall_seconds", "versions", "git_commit",
                  "git_dirty", "sweep_path", "rig_path"}
#: per-point variables a clock decides
VOLATILE_VARS = {"written_utc"}

QUIET = ("rig_set=['virtual.noise.laser_rms_um=0.0', 'virtual.noise.gauge_rms_microstrain=0.0', "
         "'virtual.mains.amplitude_microstrain=0.0']")

#: name -> (sweep file under sweeps/, overrides); each a few seconds to a minute
CASES: dict[str, tuple[str, list[str]]] = {
    # tests/test_store_identity.py holds this one in the default suite
    "tiny": ("paper-cantilever.toml", ["sweep.start_hz=18.2", "sweep.stop_hz=18.3", "sweep.points=2"]),
    # 6 points: the every-4th-point Jacobian refresh and the extrapolated start both run
    "paper": ("paper-cantilever.toml", ["sweep.start_hz=18.2", "sweep.stop_hz=18.7", "sweep.points=6"]),
    "paper-published": ("paper-cantilever.toml", ["sweep.start_hz=17.0", "sweep.stop_hz=18.0", "sweep.points=2",
                                                  "solver.profile=published", QUIET]),
    "bare": ("bare-beam.toml", ["sweep.start_hz=18.3", "sweep.stop_hz=18.7", "sweep.points=5"]),
    "two-harmonic": ("two-harmonic.toml", ["sweep.start_hz=18.3", "sweep.stop_hz=18.6", "sweep.points=3"]),
    "cubic-stepped": ("cubic-interface.toml", ["sweep.continuation='stepped'", "sweep.start_hz=18.8",
                                               "sweep.stop_hz=19.4", "sweep.points=4"]),
    "cubic-arclength": ("cubic-interface.toml", ["sweep.start_hz=18.0", "sweep.max_points=5"]),
    "contact": ("contact-tip.toml", ["sweep.start_hz=18.0", "sweep.stop_hz=18.5", "sweep.points=3"]),
    "family": ("paper-cantilever.toml", ["sweep.start_hz=18.3", "sweep.stop_hz=18.5", "sweep.points=2",
                                         "sweep.force_levels=[0.03, 0.05]"]),
    "auto-harmonics": ("cubic-interface.toml", ["sweep.continuation='stepped'", "sweep.harmonics='auto'",
                                                "sweep.max_harmonic=3", "sweep.start_hz=19.0", "sweep.stop_hz=19.3",
                                                "sweep.points=2"]),
}


def _digest(*parts: bytes) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()[:24]


def _canonical(value) -> bytes:
    """Attribute values as bytes: JSON with numpy scalars and arrays made plain."""
    def plain(v):
        if isinstance(v, np.ndarray):
            return {"ndarray": v.tolist(), "dtype": str(v.dtype)}
        if isinstance(v, np.generic):
            return v.item()
        if isinstance(v, dict):
            return {str(k): plain(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [plain(x) for x in v]
        return v
    return json.dumps(plain(value), sort_keys=True, default=repr).encode()


def _array_bytes(values: np.ndarray) -> bytes:
    if values.dtype.kind in "OUT":  # strings: their text, one per element
        return "\x1f".join(str(x) for x in values.ravel()).encode()
    return np.ascontiguousarray(values).tobytes()


def store_hashes(path: Path) -> dict[str, str]:
    """``{variable: hash}`` of every variable (coordinates included) and ``@attrs`` of the store."""
    import xarray as xr

    ds = xr.open_zarr(path, consolidated=False).load()
    out = {}
    for name in sorted(ds.variables):
        if name in VOLATILE_VARS:
            continue
        v = ds.variables[name]
        vals = np.asarray(v.values)
        kind = "str" if vals.dtype.kind in "OUT" else str(vals.dtype)
        out[str(name)] = _digest(kind.encode(), repr(v.dims).encode(), repr(vals.shape).encode(),
                                 _array_bytes(vals), _canonical(dict(v.attrs)))
    attrs = {k: v for k, v in ds.attrs.items() if k not in VOLATILE_ATTRS}
    out["@attrs"] = _digest(_canonical(attrs))
    for k in sorted(attrs):
        out[f"@attr:{k}"] = _digest(_canonical(attrs[k]))
    return out


def build(name: str, workdir: Path) -> dict[str, str]:
    """Run case ``name`` with the ``hbtest`` this interpreter imports; its store's hashes."""
    import hbtest
    from hbtest.config import load_sweep
    from hbtest.sweep import run

    root = Path(hbtest.__file__).resolve().parents[1]
    file, overrides = CASES[name]
    cfg = load_sweep(root / "sweeps" / file, overrides)
    store = workdir / f"{name}.zarr"
    run(cfg, store, progress=None, plot=False, overrides=overrides, overwrite=True)
    return store_hashes(store)


def build_all(names, workdir: Path, verbose: bool = True) -> dict[str, dict[str, str]]:
    out = {}
    for name in names:
        out[name] = build(name, workdir)
        if verbose:
            print(f"built {name}", file=sys.stderr, flush=True)
    return out


def build_at(rev: str, names) -> dict[str, dict[str, str]]:
    """The hashes of the cases built with the ``hbtest`` of git revision ``rev``."""
    repo = HERE.parent
    with tempfile.TemporaryDirectory(prefix="hbtest-identity-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(repo), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
        try:
            out = Path(tmp) / "hashes.json"
            env = dict(os.environ, PYTHONPATH=str(tree))
            subprocess.run([sys.executable, str(Path(__file__).resolve()), "--emit", str(out), "--cases", *names],
                           check=True, env=env, cwd=str(tree))
            return json.loads(out.read_text())
        finally:
            subprocess.run(["git", "-C", str(repo), "worktree", "remove", "--force", str(tree)], check=False,
                           capture_output=True)


def compare(ours: dict[str, dict[str, str]], theirs: dict[str, dict[str, str]]) -> int:
    same = 0
    for name, hashes in ours.items():
        ref = theirs.get(name)
        if ref is None:
            print(f"{name}: no reference")
            continue
        diff = sorted(k for k in set(hashes) | set(ref) if hashes.get(k) != ref.get(k))
        if diff:
            print(f"{name}: DIFFERENT {', '.join(diff)}")
        else:
            same += 1
            print(f"{name}: identical ({len(hashes)} entries)")
    print(f"store_identity={same}/{len(ours)}")
    return 0 if same == len(ours) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    ap.add_argument("--against", metavar="REV", help="build the reference at this git revision")
    ap.add_argument("--write", action="store_true", help=f"write the reference {REFERENCE.name}")
    ap.add_argument("--emit", type=Path, help=argparse.SUPPRESS)  # subprocess of --against
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hbtest-stores-") as tmp:
        ours = build_all(a.cases, Path(tmp))
    if a.emit:
        a.emit.write_text(json.dumps(ours, indent=1, sort_keys=True))
        return 0
    if a.write:
        old = json.loads(REFERENCE.read_text()) if REFERENCE.exists() else {}
        old.update(ours)
        old[KERNELS_KEY] = blas_kernels()  # bit identity holds per BLAS kernel set (README)
        REFERENCE.write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
        print(f"wrote {REFERENCE}")
        return 0
    theirs = build_at(a.against, a.cases) if a.against else json.loads(REFERENCE.read_text())
    return compare(ours, theirs)


if __name__ == "__main__":
    sys.exit(main())

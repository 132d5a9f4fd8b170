"""Bit-identity guard for refactors: stores built from fixed seeds, hashed variable by variable.

Builds short stores of the reference cases (paper sweep on both profiles, bare beam, two
harmonics, cubic interface stepped and by arclength, contact tip, a force family, automatic
harmonics) through :func:`hbtest.sweep.runner.run` with the twin's seed from the rig file, and hashes
every variable (dtype, shape, bytes) and every attribute of the store and of its variables,
except what a clock, a host or a checkout decides (times, wall seconds, versions, git commit,
absolute paths). The hashes are compared against

- a committed reference (``benchmarks/store_identity.json``, the default), or
- the same cases built at another git revision (``--against REV``: a temporary ``git worktree``
  of REV, this script run there in a subprocess with that tree's ``hbtest`` on ``PYTHONPATH``).

BLAS threading changes the last bits of a sum, so the script pins ``OPENBLAS_NUM_THREADS=1``
(and its siblings) before numpy loads, here and in the subprocess.

Bits hold per numeric environment (:func:`hbtest.store.provenance.numeric_environment`: numpy's
SIMD targets in force, the BLAS kernels, versions and threads, numpy and scipy versions). The
reference keeps one entry of hashes per environment it was written in, and beside them each
case's *meaning* (points converged, every FRF value with its stated standard uncertainty). In an
environment with no entry the cases are compared by meaning: the same converged count and every
FRF point within 3 combined standard uncertainties of the reference's (``same meaning``; an
arclength trace's points, which another environment puts elsewhere on the curve, each against the
reference trace at its frequency).
Write an entry per environment you guard, e.g. on an AVX-512 machine both

    python benchmarks/store_identity.py --write
    NPY_DISABLE_CPU_FEATURES="X86_V4 AVX512_ICL" python benchmarks/store_identity.py --write

    python benchmarks/store_identity.py                    # against the committed reference
    python benchmarks/store_identity.py --against c708278  # against stores built at a revision
    python benchmarks/store_identity.py --write            # regenerate the committed reference
    python benchmarks/store_identity.py --cases paper bare # a subset

Prints one line per case (``identical``, or the variables that differ; ``same meaning`` or what
differs where the environment has no entry) and, last, ``store_identity=<identical cases>/<cases>``
(``store_meaning=<cases>/<cases>`` in an environment without an entry); exit status 1 on any
difference.
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
#: a combined-uncertainty multiple for the comparison by meaning: the difference of two
#: estimates of one FRF value, each with its stated standard uncertainty, taken as circular complex
#: Gaussian, exceeds 3 combined sigmas with probability exp(-9) = 1.2e-4 per value
MEANING_SIGMAS = 3.0


def numeric_environment() -> dict:
    """This process's numeric environment (hbtest.store.provenance.numeric_environment)."""
    from hbtest.store.provenance import numeric_environment as env

    return env()


def describe(env: dict | None) -> str:
    """One line naming an environment: ``numpy 2.4.6 simd X86_V3,X86_V4 scipy 1.17.1 blas ...``."""
    if not env:
        return "none recorded"
    return (f"numpy {env['numpy']} simd {','.join(env['numpy_simd']) or 'baseline'} scipy {env['scipy']} "
            f"blas {' '.join(env['blas'])}")


def load_reference(path: Path = None) -> dict:
    """The committed reference: ``{"environments": [{"environment", "cases"}], "meaning": {case: ...}}``."""
    return json.loads((path or REFERENCE).read_text())


def entry_for(reference: dict, env: dict) -> dict | None:
    """The reference's hashes written in environment ``env``, or None."""
    return next((e["cases"] for e in reference.get("environments", []) if e["environment"] == env), None)


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


def store_meaning(path: Path) -> dict:
    """What a store says, as the comparison across environments reads it: the points converged
    and each FRF value ``H`` (harmonic 1, per dof) with its stated standard uncertainty ``u_H``
    (``hbtest.analysis.frf.frf_uncertainty``)."""
    import xarray as xr

    from hbtest.analysis.frf import frf_uncertainty

    ds = xr.open_zarr(path, consolidated=False).load()
    u = frf_uncertainty(ds)
    H = np.asarray(u["H"].values, dtype=complex)
    return {"points": int(ds["done"].sum()), "converged": int(ds["converged"].sum()),
            "trace": ds.attrs.get("continuation") == "arclength",
            "frequency": [float(x) for x in np.asarray(ds["frequency"].values, dtype=float)],
            "converged_at": [bool(c) for c in np.asarray(ds["converged"].values).ravel()],
            "H": [[float(z.real), float(z.imag)] for z in H.ravel()],
            "u_H": [float(x) for x in np.asarray(u["u_H"].values).ravel()]}


def meaning_differences(ours: dict, theirs: dict) -> list[str]:
    """Where two stores' meanings differ (empty: the same meaning): converged or written counts,
    or an FRF value of a point converged in both farther than MEANING_SIGMAS combined standard
    uncertainties from the other's (a non-converged point's value is wherever its iteration
    stopped: another environment's last bits stop it elsewhere)."""
    out = [f"{k} {ours[k]} against {theirs[k]}" for k in ("points", "converged") if ours[k] != theirs[k]]
    if len(ours["H"]) != len(theirs["H"]):
        return out + [f"{len(ours['H'])} FRF values against {len(theirs['H'])}"]
    if ours.get("trace") and theirs.get("trace"):
        return out + _trace_differences(ours, theirs)
    H1, H2 = (np.array([complex(*z) for z in m["H"]]) for m in (ours, theirs))
    sigma = np.hypot(ours["u_H"], theirs["u_H"])
    # a point that did not converge states no FRF value: compared where both converged
    both = np.logical_and(ours.get("converged_at", True), theirs.get("converged_at", True))
    per_point = np.repeat(both, len(H1) // both.size) if both.ndim and both.size else np.ones(len(H1), bool)
    far = np.flatnonzero(per_point & ~(np.abs(H1 - H2) <= MEANING_SIGMAS * sigma))
    return out + [f"FRF value {i}: {abs(H1[i] - H2[i]) / sigma[i]:.2f} combined sigmas apart" for i in far]


def _trace_differences(ours: dict, theirs: dict) -> list[str]:
    """An arclength trace's points are where its steps put them: another environment's last
    bits put them elsewhere on the same curve (18.037 Hz against 18.023 Hz at the cubic trace's
    fourth point). Each converged point of ``ours`` is compared with ``theirs`` interpolated
    linearly at its frequency on every segment of consecutive converged points spanning it
    (the nearest, in combined sigmas, counts: a curve through folds spans a frequency up to
    three times); a point no segment spans is not compared."""
    f1, f2 = np.asarray(ours["frequency"]), np.asarray(theirs["frequency"])
    H1, H2 = (np.array([complex(*z) for z in m["H"]]).reshape(len(m["frequency"]), -1) for m in (ours, theirs))
    u1, u2 = (np.asarray(m["u_H"]).reshape(len(m["frequency"]), -1) for m in (ours, theirs))
    c1, c2 = (np.asarray(m["converged_at"], dtype=bool) for m in (ours, theirs))
    out = []
    for i in np.flatnonzero(c1):
        best = np.inf
        for k in np.flatnonzero(c2[:-1] & c2[1:]):
            lo, hi = f2[k], f2[k + 1]
            if not min(lo, hi) <= f1[i] <= max(lo, hi) or lo == hi:
                continue
            w = (f1[i] - lo) / (hi - lo)
            H = (1 - w) * H2[k] + w * H2[k + 1]
            u = np.maximum(u2[k], u2[k + 1])
            best = min(best, float(np.max(np.abs(H1[i] - H) / np.hypot(u1[i], u))))
        if np.isfinite(best) and best > MEANING_SIGMAS:
            out.append(f"trace point {i} ({f1[i]:.4f} Hz): {best:.2f} combined sigmas from the other trace")
    return out


def build(name: str, workdir: Path, meaning: dict | None = None) -> dict[str, str]:
    """Run case ``name`` with the ``hbtest`` this interpreter imports; its store's hashes."""
    import hbtest
    from hbtest.config import load_sweep
    from hbtest.sweep.runner import run

    root = Path(hbtest.__file__).resolve().parents[1]
    file, overrides = CASES[name]
    cfg = load_sweep(root / "sweeps" / file, overrides)
    store = workdir / f"{name}.zarr"
    run(cfg, store, progress=None, plot=False, overrides=overrides, overwrite=True)
    if meaning is not None:
        meaning[name] = store_meaning(store)
    return store_hashes(store)


def build_all(names, workdir: Path, verbose: bool = True, meaning: dict | None = None) -> dict[str, dict[str, str]]:
    out = {}
    for name in names:
        out[name] = build(name, workdir, meaning)
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
    meaning: dict = {}
    with tempfile.TemporaryDirectory(prefix="hbtest-stores-") as tmp:
        ours = build_all(a.cases, Path(tmp), meaning=meaning)
    if a.emit:
        a.emit.write_text(json.dumps(ours, indent=1, sort_keys=True))
        return 0
    env = numeric_environment()
    if a.write:
        write_reference(ours, meaning, env)
        return 0
    if a.against:
        return compare(ours, build_at(a.against, a.cases))
    reference = load_reference()
    theirs = entry_for(reference, env)
    if theirs is not None:
        return compare(ours, theirs)
    print(f"no reference hashes for this environment ({describe(env)}); comparing by meaning")
    return compare_meaning(meaning, reference.get("meaning", {}))


def write_reference(ours: dict, meaning: dict, env: dict) -> None:
    """Add or replace this environment's hashes. Where this environment's entry existed and a
    case's hashes changed, results changed: the other environments' entries are stale and dropped
    (said), and the cases' meaning is replaced. A new environment adds its entry beside the others
    and keeps the recorded meaning (that of the environment written first)."""
    old = load_reference() if REFERENCE.exists() else {}
    mine = entry_for(old, env)
    changed = sorted(n for n in ours if mine is not None and mine.get(n) not in (None, ours[n]))
    kept = []
    for entry in old.get("environments", []):
        if entry["environment"] == env:
            continue
        if changed:
            print(f"dropped the entry of {describe(entry['environment'])}: {', '.join(changed)} changed here")
        else:
            kept.append(entry)
    kept.append({"environment": env, "cases": {**(mine or {}), **ours}})
    recorded = old.get("meaning", {})
    new_meaning = {**recorded, **meaning} if changed or not recorded else {**meaning, **recorded}
    REFERENCE.write_text(json.dumps({"environments": kept, "meaning": new_meaning}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {REFERENCE} ({len(kept)} environment(s); this one: {describe(env)})")


def compare_meaning(ours: dict, theirs: dict) -> int:
    same = 0
    for name, m in ours.items():
        ref = theirs.get(name)
        diff = ["no reference"] if ref is None else meaning_differences(m, ref)
        print(f"{name}: " + ("same meaning" if not diff else "DIFFERENT " + "; ".join(diff)))
        same += not diff
    print(f"store_meaning={same}/{len(ours)}")
    return 0 if same == len(ours) else 1


if __name__ == "__main__":
    sys.exit(main())

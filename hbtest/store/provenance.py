"""Provenance recorded in every run store: package versions, git state, UTC timestamps, and
conversion of attribute values to JSON (zarr attributes)."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import subprocess
from pathlib import Path

import numpy as np

__all__ = ["utc_now", "jsonable", "package_versions", "git_state", "numeric_environment"]


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def jsonable(value):
    """Attributes must survive JSON (zarr) — convert paths, tuples, numpy scalars."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return jsonable(value.tolist())
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def package_versions() -> dict:
    """Python and package versions recorded in every store."""
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("hbtest", "numpy", "scipy", "xarray", "zarr", "numcodecs", "matplotlib", "h5netcdf", "h5py", "pyvisa", "pyuff"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            if name == "hbtest":
                from .. import __version__

                out[name] = __version__
    return out


def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git checkout holding this package; (None, None) outside one or
    when git is unavailable."""
    here = Path(__file__).resolve().parent
    try:
        r = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if r.returncode != 0:
            return None, None
        commit = r.stdout.strip() or None
        d = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = bool(d.stdout.strip()) if d.returncode == 0 else None
        return commit, dirty
    except (OSError, subprocess.SubprocessError):
        return None, None


def numeric_environment() -> dict:
    """What decides the last bits of a seeded run on this machine, besides the code: numpy's
    SIMD dispatch targets in force (found by the CPU and not switched off by
    ``NPY_DISABLE_CPU_FEATURES``: its ufuncs' ``sin``, ``exp`` and reductions round differently
    per target), every loaded BLAS with its kernel set (``OPENBLAS_CORETYPE``), version and
    thread count, and the numpy and scipy versions. Two runs of one seed are bit-identical only
    where this dict is equal (README, "Reproducibility")."""
    import scipy
    import scipy.linalg  # noqa: F401  (loads scipy's own BLAS, so it is listed)
    from numpy._core import _multiarray_umath as umath  # type: ignore[attr-defined]
    from threadpoolctl import threadpool_info

    features = umath.__cpu_features__
    blas = sorted({f"{i.get('internal_api')}:{i.get('architecture')}:{i.get('version')}:threads={i.get('num_threads')}"
                   for i in threadpool_info() if i.get("user_api") == "blas"})
    return {"numpy": np.__version__, "scipy": scipy.__version__,
            "numpy_simd": [t for t in umath.__cpu_dispatch__ if features.get(t)],
            "blas": blas}

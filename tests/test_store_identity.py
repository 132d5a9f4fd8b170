"""A two-point store of the paper sweep from the twin's fixed seed is bit-identical to the
committed reference (``benchmarks/store_identity.json``, case ``tiny``): every variable's dtype,
shape, bytes and attributes and the store's attributes, clocks, host and checkout excepted.

The guard of refactors: a change that is meant to leave results alone must leave this hash
alone. A change that is meant to change results (the twin's noise model, a profile constant)
regenerates the reference in the same commit and says so:

    python benchmarks/store_identity.py --write             # every case (a few minutes)
    python benchmarks/store_identity.py --write --cases tiny  # this test's case only

The full guard (paper on both profiles, bare beam, two harmonics, cubic interface stepped and
by arclength, contact tip, a force family, automatic harmonics) is the script itself, against
the committed reference or ``--against REV``."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _blas_kernels() -> str:
    """``blas_kernels()`` of benchmarks/store_identity.py (loaded by path: not a package)."""
    spec = importlib.util.spec_from_file_location("store_identity", ROOT / "benchmarks" / "store_identity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.blas_kernels()


def test_tiny_paper_store_is_bit_identical_to_the_committed_reference():
    """Built in a fresh interpreter, as the reference was: in a process that has already run
    other twin sweeps (the pytest session), the same seed has been seen to give other last
    bits (an order dependence not yet explained; README, "Reproducibility"). Bit identity
    holds per BLAS kernel set: on other kernels than the reference's the test is skipped,
    saying which (regenerate there with ``--write`` to guard a refactor on that machine)."""
    reference = json.loads((ROOT / "benchmarks" / "store_identity.json").read_text())
    here = _blas_kernels()
    if reference.get("blas_kernels") != here:
        pytest.skip(f"the reference was built on BLAS kernels {reference.get('blas_kernels')}, this machine runs {here}")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "store_identity.py"), "--cases", "tiny"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0 and "store_identity=1/1" in p.stdout, p.stdout + p.stderr

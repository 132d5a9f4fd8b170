"""A two-point store of the paper sweep from the twin's fixed seed against the committed
reference (``benchmarks/store_identity.json``, case ``tiny``).

- **Bits**, in a numeric environment the reference has an entry for
  (:func:`hbtest.store.provenance.numeric_environment`: numpy's SIMD targets in force, BLAS
  kernels, versions and threads): every variable's dtype, shape, bytes and attributes and the
  store's attributes, clocks, host and checkout excepted. Elsewhere the test is skipped with one
  line naming both environments: the last bits of a noisy iteration follow the numeric
  environment (README, "Reproducibility").
- **Meaning**, everywhere: the same points converged, and every FRF value within 3 combined
  standard uncertainties of the reference's (false alarm exp(-9) = 1.2e-4 per value, 4 values).

The guard of refactors: a change that is meant to leave results alone must leave these hashes
alone. A change that is meant to change results regenerates the reference in the same commit and
says so (``python benchmarks/store_identity.py --write [--cases tiny]``; the script's docstring
says how to write an entry per environment)."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script():
    """benchmarks/store_identity.py (loaded by path: not a package)."""
    spec = importlib.util.spec_from_file_location("store_identity", ROOT / "benchmarks" / "store_identity.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_tiny_paper_store_is_bit_identical_to_the_committed_reference():
    """Built in a fresh interpreter with one BLAS thread, as the reference was: in a process that
    has already run other twin sweeps (the pytest session), the same seed has been seen to give
    other last bits (an order dependence not yet explained; README, "Reproducibility")."""
    si = _script()
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    probe = subprocess.run([sys.executable, "-c", "import json; from hbtest.store.provenance import numeric_environment;"
                            " print(json.dumps(numeric_environment()))"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert probe.returncode == 0, probe.stderr
    import json

    here = json.loads(probe.stdout)
    reference = si.load_reference()
    if si.entry_for(reference, here) is None:
        built = "; ".join(si.describe(e["environment"]) for e in reference["environments"])
        pytest.skip(f"bit identity: the reference was written in {built}; this is {si.describe(here)}")
    p = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "store_identity.py"), "--cases", "tiny"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert p.returncode == 0 and "store_identity=1/1" in p.stdout, p.stdout + p.stderr


def test_tiny_paper_store_means_what_the_committed_reference_means(tmp_path):
    """In any numeric environment: the tiny store built here converges where the reference's did,
    and its FRF values lie within 3 combined standard uncertainties of the reference's."""
    si = _script()
    meaning: dict = {}
    si.build("tiny", tmp_path, meaning)
    ref = si.load_reference()["meaning"]["tiny"]
    assert meaning["tiny"]["converged"] == ref["converged"] == ref["points"] == 2
    assert si.meaning_differences(meaning["tiny"], ref) == []

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
from pathlib import Path

from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parents[1]


def _guard():
    spec = importlib.util.spec_from_file_location("store_identity", ROOT / "benchmarks" / "store_identity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_tiny_paper_store_is_bit_identical_to_the_committed_reference(tmp_path):
    guard = _guard()
    with threadpool_limits(1):  # the reference's BLAS threading (numpy may load before conftest pins it)
        ours = guard.build("tiny", tmp_path)
    ref = json.loads(guard.REFERENCE.read_text())["tiny"]
    differ = sorted(k for k in set(ours) | set(ref) if ours.get(k) != ref.get(k))
    assert not differ, f"store entries differ from the reference: {differ}"

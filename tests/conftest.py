"""Test-session setup: the numeric regime of the ``hbtest`` command (one BLAS thread, pinned
with threadpoolctl for the whole session as ``cli.main`` pins it for a command, so a test's last
bits follow neither the core count nor pytest-xdist), a non-interactive plot backend, and a
deterministic hypothesis profile (every generator seeded: the same examples on every run and
machine, no example database carried between runs).

The environment variables below reach subprocesses and any BLAS loaded later; the fixture holds
the BLAS libraries already loaded (numpy's and scipy's own OpenBLAS), whatever a plugin imported
before this file ran (README, "Reproducibility")."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

settings.register_profile("hbtest", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "hbtest"))


@pytest.fixture(scope="session", autouse=True)
def one_blas_thread():
    """One BLAS thread for every test, as ``hbtest.cli.main`` runs every command; scipy's BLAS
    is loaded first so the limit covers it too (threadpoolctl limits the libraries loaded when
    it is entered)."""
    import scipy.linalg  # noqa: F401  (loads scipy's OpenBLAS before the limit is taken)

    with threadpool_limits(limits=1, user_api="blas"):
        yield

"""Test-session setup: one BLAS thread (the machines have 2 shared cores; threaded BLAS makes
the many small solves of the suite several times slower), a non-interactive plot backend, and
a deterministic hypothesis profile (every generator seeded: the same examples on every run and
machine, no example database carried between runs)."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

from hypothesis import settings  # noqa: E402

settings.register_profile("hbtest", derandomize=True, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "hbtest"))

"""Test-session setup: one BLAS thread (the machines have 2 shared cores; threaded BLAS makes
the many small solves of the suite several times slower) and a non-interactive plot backend."""

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

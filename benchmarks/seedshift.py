"""pytest plugin for auditing thresholds against seed noise: every virtual twin built in the
session draws from its seed shifted by ``1000 * $SEED_SHIFT``, so a test whose statistic sits
on a knife edge of its threshold fails for some shift. Not part of the suite; run as

    SEED_SHIFT=1 PYTHONPATH=benchmarks:. python -m pytest -q -p seedshift tests/test_sweep.py ...

and again with SEED_SHIFT=2, 3, ...; OPENBLAS_CORETYPE=Haswell (or another kernel set) does the
same for BLAS rounding. A test that fails here needs a wider margin or more seeds (docs/reproducibility.md). The shift lives in the pytest
process only: Dask worker *processes* build unshifted twins, so a test comparing a process
cluster with a serial run (tests/test_campaign.py, ``..._of_processes_equals_serial...``) fails
under a shift by construction, not by its threshold."""

import os

from hbtest.rig.virtual import engine

_original_init = engine.Engine.__init__
_OFFSET = 1000 * int(os.environ.get("SEED_SHIFT", "0"))


def _shifted_init(self, model, seed, **kw):
    _original_init(self, model, seed if seed is None else int(seed) + _OFFSET, **kw)


engine.Engine.__init__ = _shifted_init

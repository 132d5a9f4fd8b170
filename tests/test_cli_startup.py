"""Start-up of the command line: ``hbtest --help`` imports none of the numerics, and a command
whose numerics load after the parse still runs every BLAS with one thread (cli docstring)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HELP = """
import io, contextlib, sys
from hbtest import cli
with contextlib.redirect_stdout(io.StringIO()):
    try:
        cli.main(["--help"])
    except SystemExit:
        pass
print(sorted(m for m in ("numpy", "scipy", "xarray", "zarr") if m in sys.modules))
"""

# a command (plot) whose run is replaced by a probe: the numerics imported inside the command,
# as every command does, then each BLAS library's thread count
PROBE = """
import json, sys
import hbtest.commands.plot as plot

def probe(args):
    import numpy, scipy.linalg  # noqa: F401 - numpy's and scipy's BLAS
    from threadpoolctl import threadpool_info
    print(json.dumps([(i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas"]))
    return 0

plot.run = probe
from hbtest import cli
assert "numpy" not in sys.modules
sys.exit(cli.main(["plot", "none.zarr"]))
"""


def _python(code: str, **env) -> str:
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    base["PYTHONPATH"] = str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(base, **env), cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def test_help_imports_no_numerics():
    assert _python(HELP) == "[]"


def test_a_command_runs_every_blas_with_one_thread():
    # asked for 2 threads by the environment (and by default on a 2-core machine), each BLAS
    # loaded inside the command runs one
    for env in ({}, {"OPENBLAS_NUM_THREADS": "2", "OMP_NUM_THREADS": "2"}):
        libs = json.loads(_python(PROBE, **env))
        assert libs, "no BLAS library found"
        assert [n for _, n in libs] == [1] * len(libs), libs

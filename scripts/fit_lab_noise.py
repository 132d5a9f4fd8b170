"""Fit the twin's noise model to the authors' lab records and write the fitted table.

Usage: ``python scripts/fit_lab_noise.py [--lab DIR] [--out tests/data/lab_noise_fit.json]``
(``DIR`` defaults to ``$HBTEST_LAB_DIR`` or ``../shared/lab`` next to the repository or its parent; it
holds ``lab_records.npz``, decoded from the MIT-licensed release of A. Vizzaccaro et al.,
github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing; licence in
``tests/data/LICENSE-av3116-Iterative-method-for-RTHT.txt``). About a minute (one core).

A use of ``hbtest twin instruments/virtual-cantilever.toml --records DIR`` (the fit is
:func:`hbtest.twin.streams.fit_records`; the command writes the same table beside the twin it
fits): the table, rounded to 7 significant digits, plus a small fixture
(``lab_noise_fixture.json`` beside it: the per-point statistics and two raw streams, for
``tests/test_twin_lab.py`` and ``tests/test_twin_streams.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one core: threads only contend on these small fits

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_rig  # noqa: E402
from hbtest.twin.streams import LAB_SOURCE, fit_records, stream  # noqa: E402,F401  (LAB_SOURCE: scripts/lab_iteration_stats.py)

RIG = ROOT / "instruments" / "virtual-cantilever.toml"
FIXTURE_POINTS = 2


def default_lab_dir() -> str:
    """``../shared/lab`` next to the repository (or next to its parent: a git worktree)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "lab" / "lab_records.npz").is_file():
            return str(base / "shared" / "lab")
    return str(ROOT.parent / "shared" / "lab")


def open_lab(prog: str, description: str, out: Path, argv=None):
    """A lab script's arguments (``--lab DIR``, ``--out FILE``) and its records: ``(args, npz)``,
    npz None (and one line on stderr naming the file) when ``DIR/lab_records.npz`` is missing."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--lab", default=os.environ.get("HBTEST_LAB_DIR") or default_lab_dir())
    ap.add_argument("--out", default=str(out))
    a = ap.parse_args(argv)
    src = Path(a.lab) / "lab_records.npz"
    if not src.is_file():
        print(f"{prog}: {src} not found (set --lab or HBTEST_LAB_DIR)", file=sys.stderr)
        return a, None
    return a, np.load(src)


def fixture(d, pts, lines, rms, fm):
    """Per-point statistics (all used points) and FIXTURE_POINTS raw streams (in1, in2, in5, in6)."""
    rows = [0, 1, 4, 5]
    rows_pick = np.linspace(0, pts.size - 1, FIXTURE_POINTS).astype(int)
    streams = []
    for i, p in zip(rows_pick, pts[rows_pick]):
        y, phi, _ = stream(d, p)
        streams.append(
            {
                "row": int(i),
                "point": int(p),
                "file": str(d["file"][p]),
                "index": int(d["point_index"][p]),
                "frequency_hz": float(d["frequency"][p]),
                "phi": [float(x) for x in phi],
                "y": [[float(v) for v in y[r]] for r in rows],
            }
        )
    return {
        "channels": ["in1", "in2", "in5", "in6"],
        "frequency_hz": [float(x) for x in d["frequency"][pts]],
        "mains_amplitude": [[[float(abs(v)) for v in lines[i, r]] for r in rows] for i in range(pts.size)],
        "broadband_rms": [[float(rms[i, r]) for r in rows] for i in range(pts.size)],
        "mains_frequency_hz": [float(x) for x in fm],
        "streams": streams,
    }


def _rounded(o, digits: int):
    """``o`` with every float rounded to ``digits`` significant digits (a compact table; the
    streams are float32 on the box, 9 digits keep them exact)."""
    if isinstance(o, float):
        return float(f"{o:.{digits}g}")
    if isinstance(o, dict):
        return {k: _rounded(v, digits) for k, v in o.items()}
    if isinstance(o, list):
        return [_rounded(v, digits) for v in o]
    return o


def main(argv=None):
    a, d = open_lab("fit_lab_noise", __doc__.splitlines()[0], ROOT / "tests" / "data" / "lab_noise_fit.json", argv)
    if d is None:
        return 2
    doc, stats, arrays = fit_records(a.lab, load_rig(RIG), str(RIG.relative_to(ROOT)))
    doc["provenance"]["script"] = "scripts/fit_lab_noise.py"
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(_rounded(doc, 7), indent=1) + "\n")
    fx = fixture(arrays, stats["points"], stats["lines"], stats["rms"], stats["mains_hz"])
    streams = fx.pop("streams")
    fx = {**_rounded(fx, 6), "streams": _rounded(streams, 9)}
    Path(a.out).with_name("lab_noise_fixture.json").write_text(json.dumps(fx, separators=(",", ":")) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k in ("lab", "twin")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

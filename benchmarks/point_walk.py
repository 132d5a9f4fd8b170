"""The walk of one point: calls that cross between the modules of ``hbtest/point`` (the
numerical side left out) while one point runs — the paper sweep's 18.2 Hz after a point at
18.1 Hz, the twin's seed from its rig file. One line per direction: calls, distinct functions.
Works with the hbtest on ``PYTHONPATH``, so an older revision can be walked too
(``git worktree add /tmp/old c708278; PYTHONPATH=/tmp/old python benchmarks/point_walk.py``).

    python benchmarks/point_walk.py
"""
import collections
import os
import sys
os.environ["OPENBLAS_NUM_THREADS"] = "1"
import hbtest
from pathlib import Path
from hbtest.config import load_rig, load_sweep
from hbtest.rig import open_rig
from hbtest.point import PointLoop, PointSettings
root = Path(hbtest.__file__).parent
cfg = load_sweep(root.parent / "sweeps/paper-cantilever.toml", [])
rig = open_rig(load_rig(cfg.rig_path, cfg.rig_overrides))
ns = cfg.numerical.substructure()
loop = PointLoop(rig, ns, cfg.excitation.force_vector(ns), PointSettings.from_config(cfg))
carry = loop.new_carry()
loop.run(18.1, carry)
point_dir = str(root / "point")
edges = collections.Counter(); funcs = collections.defaultdict(set)
def room(fn):
    return os.path.basename(fn)[:-3] if fn.startswith(point_dir) and os.path.basename(fn) != "numerical.py" else None
def prof(frame, event, arg):
    if event != "call":
        return
    callee = room(frame.f_code.co_filename)
    caller = room(frame.f_back.f_code.co_filename) if frame.f_back else None
    if callee and caller and callee != caller:
        edges[(caller, callee)] += 1
        funcs[(caller, callee)].add(frame.f_code.co_name)
sys.setprofile(prof)
out = loop.run(18.2, carry)
sys.setprofile(None)
for k, v in sorted(edges.items()):
    print(f"{k[0]:>18} -> {k[1]:<18} {v:5d} calls, {len(funcs[k]):2d} functions: {', '.join(sorted(funcs[k]))}")
print("converged", out.converged, "iterations", out.iterations)

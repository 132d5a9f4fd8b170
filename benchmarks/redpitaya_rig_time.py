"""Rig periods per point through two simulated Red Pitaya boards against the in-process twin.

The paper sweep (``sweeps/paper-cantilever.toml``, ``--points`` points) runs in-process on the
virtual twin with the profile's default (the transient fit on the twin's own modes) and through
``hbtest serve --protocol redpitaya`` (the twin behind two simulated STEMlab 125-14 boards, real
time, sampled at 125 MHz / 16384) with ``instruments/redpitaya-loopback.toml``, whose
``[identify]`` table has the rig measure its modes from free decays before the first point
(counted in its rig time), so the loop fits through the transient as on the twin. Printed as
key=value: the rig-period ratio over the sweep (the identification included) and without the
identification, the largest per point, the FRF errors against the exact structure, the wall time
per point and the acquisition's dead time per record (wall time of an acquisition beyond the
periods it records: the record is cut from the live buffer, so this is reading time only).
``--wait`` compares instead with the in-process twin with its ``modes()`` hidden (the rule of a
redpitaya rig file without ``[identify]``: the loop settles window by window) and drops the
file's ``[identify]``.

    python benchmarks/redpitaya_rig_time.py [--points N] [--wait]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from helic_overhead import PAPER  # noqa: E402
from scpi_rig_time import frf_error, keep_identification, point_table, served_sweep, without_identify  # noqa: E402

from hbtest.config import load_sweep  # noqa: E402
from hbtest.rig.virtual import VirtualRig  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

LOOPBACK = ROOT / "instruments" / "redpitaya-loopback.toml"


def rig_file(tmp: Path, ports, wait: bool = False) -> Path:
    text = without_identify(LOOPBACK.read_text()) if wait else LOOPBACK.read_text()
    for default, port in zip((5000, 5001), ports):
        text = text.replace(f"TCPIP0::127.0.0.1::{default}::SOCKET", f"TCPIP0::127.0.0.1::{port}::SOCKET")
    path = tmp / "redpitaya.toml"
    path.write_text(text)
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--wait", action="store_true", help="no modes on either side: [identify] dropped, the twin's hidden")
    a = ap.parse_args()
    sets = [f"sweep.points={a.points}"]
    identified: dict = {}
    from hbtest.rig.scpi.redpitaya_rig import IdentifyingRedPitayaRig

    keep_identification(IdentifyingRedPitayaRig, identified)  # the rig's own identification, for the report
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        exact_modes = VirtualRig.modes
        if a.wait:
            del VirtualRig.modes  # the same settling rule as a rig without modes
        try:
            base = run(load_sweep(PAPER, sets), tmp / "in.zarr", plot=False).load()
        finally:
            VirtualRig.modes = exact_modes
        ds, wall, dead = served_sweep("redpitaya", lambda ports: rig_file(tmp, ports, a.wait), sets, tmp / "rp.zarr")
    ratio = point_table(base, ds, "redpitaya")
    ident_periods = identified.get("seconds", 0.0) * ds.frequency.values[0]
    print(f"redpitaya_rig_ratio={ds.rig_periods.values.sum() / base.rig_periods.values.sum():.3f}")
    print(f"redpitaya_rig_ratio_without_identification="
          f"{(ds.rig_periods.values.sum() - ident_periods) / base.rig_periods.values.sum():.3f}")
    print(f"redpitaya_rig_ratio_max_point={ratio.max():.3f}")
    print(f"identification_rig_s={identified.get('seconds', 0.0):.2f}")
    print(f"dead_time_s_per_record={dead:.3f}")
    print(f"redpitaya_wall_s_per_point={wall / a.points:.1f}")
    print(f"converged={int(ds.converged.values.sum())}/{a.points}")
    print(f"frf_error_max_redpitaya={frf_error(ds, sets).max():.4f}")
    print(f"frf_error_max_inprocess={frf_error(base, sets).max():.4f}")


if __name__ == "__main__":
    main()

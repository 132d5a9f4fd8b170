"""Rig periods per point through the simulated SCPI bench against the in-process twin.

The paper sweep (``sweeps/paper-cantilever.toml``, ``--points`` points, same seed) runs
in-process on the virtual twin with the profile's default (the transient fit on the twin's own
modes) and through ``hbtest serve --protocol scpi`` (the twin behind a simulated 33500B +
InfiniiVision, real time) with the ``scpi`` kind and ``instruments/scpi-loopback.toml``, whose
``[identify]`` table has the rig measure its modes from free decays once per connection
(hbtest/rig/identify.py, before the first point, counted in its rig time) so that the loop fits
through the transient as on the twin. ``--wait`` drops that table: no modes, the loop settles
window by window. Printed as key=value: ``scpi_rig_ratio`` (scpi rig periods / in-process rig
periods over the sweep, the identification included), the same without the identification,
the largest per-point ratio, the identification's rig time, the scope's dead time per record
(wall time of an acquisition beyond the periods it records), the FRF errors against the exact
structure, and the modes identified against the twin's. For comparison, the in-process twin
run once more with its modes taken from the same free-decay experiment on another twin
instance instead of its model (``inprocess_identified_modes_rig_ratio``).

    python benchmarks/scpi_rig_time.py [--points N] [--wait]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from helic_overhead import PAPER, TWIN, serve  # noqa: E402

from hbtest.config import load_rig, load_sweep  # noqa: E402
from hbtest.rig import open_rig  # noqa: E402
from hbtest.rig.virtual import VirtualRig  # noqa: E402
from hbtest.sweep.runner import run  # noqa: E402

LOOPBACK = ROOT / "instruments" / "scpi-loopback.toml"
IDENTIFY_FRACTION = 0.5  # the identification multisine's peak bound, of the voltage limit (as scpi-loopback.toml)


def without_identify(text: str) -> str:
    """A rig file's text without its ``[identify]`` table (through the blank line after it, or
    to the end): the rig offers no modes."""
    head, rest = text.split("[identify]", 1)
    return head + rest[rest.index("\n\n") + 2:] if "\n\n" in rest else head


def keep_identification(rig_class, identified: dict) -> None:
    """Wrap ``rig_class.modes`` (an identifying rig kind) so that the first identification's
    modes and rig time [s] land in ``identified`` (``"modes"``, ``"seconds"``) for the report."""
    measure = rig_class.modes

    def modes(self):
        lam = measure(self)
        identified.setdefault("modes", lam)
        identified.setdefault("seconds", self.identification_s)
        return lam

    rig_class.modes = modes


def rig_file(tmp: Path, gen_port: int, scope_port: int, wait: bool = False) -> Path:
    base = without_identify(LOOPBACK.read_text()) if wait else LOOPBACK.read_text()
    text = (base.replace("TCPIP0::127.0.0.1::5025::SOCKET", f"TCPIP0::127.0.0.1::{gen_port}::SOCKET")
            .replace("TCPIP0::127.0.0.1::5026::SOCKET", f"TCPIP0::127.0.0.1::{scope_port}::SOCKET"))
    path = tmp / "scpi.toml"
    path.write_text(text)
    return path


def frf_error(ds, sets) -> np.ndarray:
    cfg = load_sweep(PAPER, sets)
    ns = cfg.numerical.substructure()
    F = cfg.excitation.force_vector(ns)
    twin = VirtualRig(load_rig(TWIN))
    exact = np.stack([twin.emulated_interface_response(ns, F, f, [1])[:, 0] for f in ds.frequency.values])
    measured = ds.interface_displacement.values[:, :, list(ds.harmonic.values).index(1)]
    return np.abs(measured - exact) / np.abs(exact)


def dead_time(rig_path: Path, n_periods: int = 10, f: float = 16.0) -> float:
    """Wall time of one acquisition of ``n_periods`` beyond the periods themselves [s]."""
    with open_rig(load_rig(rig_path)) as rig:
        rig.set_demand(f, np.array([[0.1], [0.0]]), [1])
        rig.acquire(n_periods)
        t0 = time.monotonic()
        rig.acquire(n_periods)
        return time.monotonic() - t0 - n_periods / f


def served_sweep(protocol: str, make_rig_file, sets, store: Path):
    """The paper sweep (``sets``) through ``hbtest serve --protocol <protocol>`` (free ports):
    (store dataset, wall seconds, scope dead time per record [s]); ``make_rig_file(ports)``
    writes the rig file pointed at the served ports."""
    p, ports = serve(protocol, "--scope-port", "0")
    try:
        path = make_rig_file(ports)
        t0 = time.monotonic()
        ds = run(load_sweep(PAPER, list(sets) + [f"rig='{path}'"]), store, plot=False).load()
        return ds, time.monotonic() - t0, dead_time(path)
    finally:
        p.send_signal(signal.SIGTERM)
        p.communicate(timeout=30)


def point_table(base, ds, label: str) -> np.ndarray:
    """Print rig periods per point, in-process (``base``) against the served run (``ds``);
    returns their ratio per point."""
    ratio = ds.rig_periods.values / base.rig_periods.values
    print(f"{'point':>5} {'f [Hz]':>7} {'in-process':>11} {label:>10} {'ratio':>6}")
    for i, f in enumerate(ds.frequency.values):
        print(f"{i + 1:>5} {f:>7.3f} {base.rig_periods.values[i]:>11.1f} {ds.rig_periods.values[i]:>10.1f} {ratio[i]:>6.2f}")
    return ratio


def modes_text(lam) -> str:
    return " ".join(f"{abs(x) / 2 / np.pi:.2f}Hz/{-x.real / abs(x):.3f}" for x in lam)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5)
    ap.add_argument("--wait", action="store_true", help="drop [identify]: the scpi rig offers no modes")
    a = ap.parse_args()
    sets = [f"sweep.points={a.points}"]
    identified: dict = {}
    from hbtest.rig.identify import free_decay_modes
    from hbtest.rig.scpi.rig import IdentifyingScpiRig

    keep_identification(IdentifyingScpiRig, identified)  # the rig's own identification, for the report
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = run(load_sweep(PAPER, sets), tmp / "in.zarr", plot=False).load()  # the stores go with tmp
        # the twin with its modes from a free decay (another twin instance, another seed), not from its model
        lam = free_decay_modes(VirtualRig(load_rig(TWIN), seed=12345), IDENTIFY_FRACTION * load_rig(TWIN).voltage_limit_v)
        exact_modes = VirtualRig.modes
        VirtualRig.modes = lambda self: lam
        try:
            ident = run(load_sweep(PAPER, sets), tmp / "ident.zarr", plot=False).load()
        finally:
            VirtualRig.modes = exact_modes
        ds, wall, dead = served_sweep("scpi", lambda ports: rig_file(tmp, *ports, a.wait), sets, tmp / "scpi.zarr")
    ratio = point_table(base, ds, "scpi")
    print(f"scpi_rig_ratio={ds.rig_periods.values.sum() / base.rig_periods.values.sum():.3f}")
    ident_periods = identified.get("seconds", 0.0) * ds.frequency.values[0]
    print(f"scpi_rig_ratio_without_identification={(ds.rig_periods.values.sum() - ident_periods) / base.rig_periods.values.sum():.3f}")
    print(f"scpi_rig_ratio_max_point={ratio.max():.3f}")
    print(f"inprocess_rig_periods_per_point={base.rig_periods.values.mean():.1f}")
    print(f"scpi_rig_periods_per_point={ds.rig_periods.values.mean():.1f}")
    print(f"inprocess_identified_modes_rig_ratio={ident.rig_periods.values.sum() / base.rig_periods.values.sum():.3f}")
    print(f"inprocess_identified_modes_converged={int(ident.converged.values.sum())}/{a.points}")
    print(f"frf_error_max_inprocess_identified={frf_error(ident, sets).max():.4f}")
    print(f"modes_identified_inprocess={modes_text(lam)}")
    print(f"identification_rig_s={identified.get('seconds', float('nan')):.2f}")
    print(f"scope_dead_time_s_per_record={dead:.3f}")
    print(f"scpi_wall_s_per_point={wall / a.points:.1f}")
    print(f"converged={int(ds.converged.values.sum())}/{a.points}")
    print(f"scpi_stop_reasons={','.join(str(r) for r in ds.stop_reason.values)}")
    print(f"scpi_iterations={','.join(str(int(n)) for n in ds.iterations.values)}")
    for i in np.flatnonzero(~ds.converged.values):  # what ended a point that did not converge
        print(f"point {i + 1}: {ds.stop_reason.values[i]}: {ds.message.values[i]}")
    print(f"frf_error_max_scpi={frf_error(ds, sets).max():.4f}")
    print(f"frf_error_max_inprocess={frf_error(base, sets).max():.4f}")
    print(f"modes_identified={modes_text(identified.get('modes', []))}")
    print(f"modes_twin={modes_text(VirtualRig(load_rig(TWIN)).modes()[:6])}")


if __name__ == "__main__":
    main()

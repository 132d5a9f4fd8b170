"""How well do the gauge rules measure the PS interface forces? (docs/method.md §3)

Against the virtual twin's exact section forces (noise off), over the 16-19 Hz band of the
reference test:

1. For each frequency, two independent actuator demands; the twin's exact steady-state channel
   volts are turned into one-period records and passed through
   :func:`hbtest.method.sensors.measure_interface` (lag correction included) with each force method
   (finite-difference, inertia, segment). That gives the PS dynamic stiffness "as each method
   measures it", ``D_meas = F_meas U_meas^-1`` (the rig is linear, so any demand is a
   combination of the two). The table gives the relative error of T and M along the interface
   motion of the emulated structure at that frequency (the motion a converged test imposes:
   the numerical root of ``sweeps/paper-cantilever.toml`` and its point force),
   ``|T_meas - T| / |T|`` with ``T = D_P U``, ``T_meas = D_meas U``.
2. ``D_meas`` joined to the numerical root: the hybrid mode-2 resonance (peak of the interface
   response to the sweep's point force) against the exact one, in Hz and in half-power
   bandwidths of the exact resonance.

    PYTHONPATH=. python benchmarks/force_reconstruction.py [--points 13]
"""

from __future__ import annotations

import os

# one process, one thread: a threaded BLAS only loses time on these small problems (and much
# more on a busy 2-core machine); set before numpy is imported
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import argparse  # noqa: E402
from pathlib import Path

import numpy as np  # noqa: E402
import scipy.optimize

from hbtest.method import harmonics
from hbtest.config import load_rig, load_sweep
from hbtest.rig import Acquisition
from hbtest.rig.virtual import CHANNELS, VirtualRig
from hbtest.method.sensors import FORCE_METHODS, measure_interface

ROOT = Path(__file__).resolve().parents[1]
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
SWEEP = ROOT / "sweeps" / "paper-cantilever.toml"
DEMANDS = (np.array([[1.0], [0.0]], complex), np.array([[0.0], [1.0]], complex))


def measured_stiffness(rig: VirtualRig, f: float, method: str) -> np.ndarray:
    """``D_meas = F_meas U_meas^-1`` (2x2) at ``f`` [Hz] from two demands through
    :func:`~hbtest.method.sensors.measure_interface`."""
    U, F = np.zeros((2, 2), complex), np.zeros((2, 2), complex)
    n = 64
    t = np.arange(n) / (n * f)  # one period, exactly sampled
    for j, V in enumerate(DEMANDS):
        ss = rig.steady_state(f, V, [1])
        data = {c: harmonics.reconstruct(t, ss.channels[c], f, [1]) for c in CHANNELS}
        acq = Acquisition(t=t, data=data, frequency_hz=f, sample_rate_hz=n * f, n_periods=1, elapsed_s=0.0)
        m = measure_interface(acq, rig.sensors, [1], method)
        U[:, j], F[:, j] = m.displacement[:, 0], m.force[:, 0]
    return F @ np.linalg.inv(U)


def force_errors(rig: VirtualRig, ns, force, freqs) -> dict:
    """Relative T and M errors along the emulated structure's interface motion:
    {method: (n_f, 2)}."""
    out = {m: [] for m in FORCE_METHODS}
    for f in freqs:
        s = 2j * np.pi * f
        U = rig.emulated_interface_response(ns, force, f, [1])[:, 0]
        F = rig.ps_dynamic_stiffness(s) @ U
        for m in FORCE_METHODS:
            out[m].append(np.abs(measured_stiffness(rig, f, m) @ U - F) / np.abs(F))
    return {m: np.array(v) for m, v in out.items()}


def hybrid_resonance(rig: VirtualRig, ns, force, method: str | None, band=(17.8, 19.2)) -> float:
    """Mode-2 resonance [Hz] of the NS joined to the PS stiffness measured by ``method``
    (None: the exact twin PS): peak of |u| at the interface for the sweep's point force."""

    def neg_amp(f):
        s = 2j * np.pi * f
        DP = rig.ps_dynamic_stiffness(s) if method is None else measured_stiffness(rig, f, method)
        Fc = ns.condensed_force(force, s)
        return -abs(np.linalg.solve(ns.dynamic_stiffness(s) + DP, Fc)[0])

    r = scipy.optimize.minimize_scalar(neg_amp, bounds=band, method="bounded", options={"xatol": 1e-5})
    return float(r.x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=13)
    args = ap.parse_args()
    rig = VirtualRig(load_rig(RIG), noise=False)
    sw = load_sweep(SWEEP)
    ns = sw.numerical.substructure()
    force = sw.excitation.force_vector(ns)
    d1, d2 = rig.sensors.gauge_positions
    print(f"gauges at {d1 * 1e3:g}/{d2 * 1e3:g} mm, {rig.sensors.channel('g1').lowpass_hz:g} Hz order-"
          f"{rig.sensors.channel('g1').lowpass_order} gauge filters (lag corrected); noise off")
    freqs = np.linspace(16.0, 19.0, args.points)
    errs = force_errors(rig, ns, force, freqs)
    head = "  f [Hz] " + "".join(f"| {m[:12]:>12} T {m[:12]:>12} M " for m in FORCE_METHODS)
    print("relative force error along the emulated interface motion")
    print(head)
    for i, f in enumerate(freqs):
        print(f"{f:8.3f} " + "".join(f"| {errs[m][i, 0]:14.2e} {errs[m][i, 1]:14.2e} " for m in FORCE_METHODS))
    print("max over band: " + ", ".join(f"{m}: T {errs[m][:, 0].max():.3g}, M {errs[m][:, 1].max():.3g}" for m in FORCE_METHODS))

    f0 = hybrid_resonance(rig, ns, force, None)
    # half-power bandwidth of the exact resonance from the emulated structure's damping
    from hbtest.method.substructure import join

    modes = join(ns, rig.ps_substructure).modes()
    i2 = int(np.argmin(np.abs(modes.frequencies_hz - f0)))
    bw = 2 * modes.damping_ratios[i2] * modes.frequencies_hz[i2]
    print(f"exact hybrid mode 2: {f0:.4f} Hz (damping {modes.damping_ratios[i2]:.2%}, half-power bandwidth {bw:.3f} Hz)")
    for m in FORCE_METHODS:
        fm = hybrid_resonance(rig, ns, force, m)
        print(f"resonance_shift[{m}] = {fm - f0:+.4f} Hz = {(fm - f0) / bw:+.3f} bandwidths")


if __name__ == "__main__":
    main()

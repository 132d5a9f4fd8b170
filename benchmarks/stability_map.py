"""Critical-delay map of the reference cantilever (docs/method.md §2, §4).

Steel ruler L = 530 mm, b = 25.4 mm, h = 1 mm, E = 217 GPa, rho = 8210 kg/m^3,
zeta_M = 0.9 1/s, zeta_K = 7e-5 s, clamped root, free tip; split at 9 interface positions
alpha = L_N / L; actuator cut-offs 100, 250, 500 Hz. For each case: the critical delay (the
smallest delay with a root of positive real part below the cut-off), the frequency of the
root entering there and where it enters (imaginary axis or cut-off line). Full FE mesh
(60 elements/m), crossing scan on the boundary of the unstable box.

Run: ``python benchmarks/stability_map.py``; prints a table, then ``elapsed_s=<x>`` last.
"""

from __future__ import annotations

import time

import numpy as np

from hbtest.realtime.stability import beam_hybrid

BEAM = dict(width=25.4e-3, thickness=1e-3, youngs_modulus=217e9, density=8210.0, zeta_mass=0.9, zeta_stiffness=7e-5)
LENGTH = 0.53
ALPHAS = np.linspace(0.1, 0.9, 9)
CUTOFFS_HZ = (100.0, 250.0, 500.0)


def main() -> None:
    t0 = time.perf_counter()
    rows = []
    for a in ALPHAS:
        system = beam_hybrid(LENGTH, a * LENGTH, **BEAM, elements_per_metre=60.0)
        rows.append([system.critical_delay(fc) for fc in CUTOFFS_HZ])
    elapsed = time.perf_counter() - t0
    head = "".join(f" | {f'f_c = {fc:g} Hz':^27}" for fc in CUTOFFS_HZ)
    print(f"{'alpha':>6} {'L_N mm':>7}{head}")
    print(f"{'':>6} {'':>7}" + " | tau_c ms    f Hz  entry   " * len(CUTOFFS_HZ))
    for a, res in zip(ALPHAS, rows):
        cells = "".join(
            f" | {r.delay_s * 1e3:>8.4f} {r.frequency_hz:>7.2f}  {'axis' if r.boundary == 'imaginary-axis' else r.boundary:<7}" for r in res
        )
        print(f"{a:>6.2f} {a * LENGTH * 1e3:>7.1f}{cells}")
    print("entry: 'axis' = Hopf crossing of the imaginary axis; 'cut-off' = a neutral root chain entering through the cut-off line")
    print(f"elapsed_s={elapsed:.3f}")


if __name__ == "__main__":
    main()

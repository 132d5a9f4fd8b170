"""Critical delay of the split single oscillator (``m z'' + c z' + k z + k_s z(t - tau) = 0``)
for each delay compensator: from time-domain simulation of the classical real-time loop
(:func:`hbtest.realtime.classical.critical_delay_simulated`: smallest pure delay at which the free
response grows) next to the stability prediction of the compensated delay equation
(:func:`hbtest.realtime.classical.critical_delay_predicted`, :mod:`hbtest.realtime.stability`).

Run: ``python benchmarks/classical_compensators.py [--dt 2e-4] [--duration 3]`` (imports the
repository's ``hbtest``). Prints a table, then ``key=value`` lines: per compensator the
simulated and predicted critical delays [s] and their ratio.
Adaptive compensators have no linear prediction of their own: AFP is predicted frozen at
the horizon and amplitude gain it adapted to in a run at that delay (it lowers the amplitude
gain below 1 at long delays, which the fixed predictor cannot), MCS not at all.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hbtest.realtime import classical as cl  # noqa: E402
from hbtest.realtime import stability as st  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--m", type=float, default=1.0)
    ap.add_argument("--c", type=float, default=6.3)
    ap.add_argument("--k", type=float, default=4000.0)
    ap.add_argument("--ks", type=float, default=4000.0)
    ap.add_argument("--dt", type=float, default=2e-4, help="real-time step [s]")
    ap.add_argument("--duration", type=float, default=3.0, help="simulated seconds per trial delay")
    ap.add_argument("--order", type=int, default=2)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--rtol", type=float, default=0.01, help="relative tolerance of the simulated critical delay")
    args = ap.parse_args(argv)
    m, c, k, ks, dt, N, n = args.m, args.c, args.k, args.ks, args.dt, args.order, args.samples
    system = cl.sdof_benchmark(m, c, k, ks)

    def identified(tau):
        return cl.InverseModelCompensator(cl.identify_lag(cl.TransferSystem("delay", tau), dt), N, n)

    def adapted_afp(tau):
        """AFP after a free-response run at this delay: its adapted horizon and amplitude
        gain are then frozen for the linear prediction."""
        comp = cl.AdaptiveForwardPredictor(N, n, rho0=0.0)
        cl.simulate(system, cl.TransferSystem("delay", tau), comp, dt, args.duration, initial_displacement=[cl.FREE_RESPONSE_DISPLACEMENT], emulated=False)
        return comp

    cases = [  # (label, key, compensator for the simulation, compensator for the prediction)
        ("none", "none", lambda tau: None, lambda tau: None),
        (f"poly N={N} n={n} (horizon = delay)", "poly", lambda tau: cl.PolynomialPredictor(N, n, tau), lambda tau: cl.PolynomialPredictor(N, n, tau)),
        ("afp (from horizon 0; predicted frozen where it adapted)", "afp", lambda tau: cl.AdaptiveForwardPredictor(N, n, rho0=0.0), adapted_afp),
        ("inverse model (identified lag + delay)", "inverse", identified, identified),
        ("mcs", "mcs", lambda tau: cl.MinimalControlSynthesis(), None),
    ]
    closed = st.sdof_critical_delay(m, c, k, ks)
    print(f"Split oscillator m={m:g} kg, c={c:g} N s/m, k={k:g} N/m, ks={ks:g} N/m; dt = {dt * 1e3:g} ms, {args.duration:g} s per trial")
    print(f"closed-form critical delay without compensation: {closed.delay_s * 1e3:.4f} ms at {closed.frequency_hz:.3f} Hz "
          f"(small-delay estimate c/ks = {st.small_delay_estimate(c, ks) * 1e3:.4f} ms)")
    print(f"{'compensator':<58} {'simulated [ms]':>15} {'predicted [ms]':>15} {'ratio':>7} {'time [s]':>9}")
    lines = []
    for name, key, sim_comp, pred_comp in cases:
        t0 = time.perf_counter()
        tc_sim = cl.critical_delay_simulated(system, sim_comp, dt, duration=args.duration, rtol=args.rtol)
        tc_pred = cl.critical_delay_predicted(system, pred_comp, dt) if pred_comp is not None else float("nan")
        el = time.perf_counter() - t0
        ratio = tc_sim / tc_pred if math.isfinite(tc_pred) and tc_pred > 0 else float("nan")
        fmt = lambda x: "n/a" if not math.isfinite(x) else f"{x * 1e3:.4f}"  # noqa: E731
        print(f"{name:<58} {fmt(tc_sim):>15} {fmt(tc_pred):>15} {ratio:>7.3f} {el:>9.1f}", flush=True)
        lines += [f"critical_delay_simulated_{key}_s={tc_sim:.6g}", f"critical_delay_predicted_{key}_s={tc_pred:.6g}",
                  f"critical_delay_ratio_{key}={ratio:.4f}"]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``hbtest compare SWEEPFILE --delay T``: the classical real-time hybrid test against the
iterative Fourier-domain test at every frequency of a sweep (docs/method.md §4). The work is done by
:func:`hbtest.realtime.classical.compare_sweep`; this module parses, checks flags and prints.

Before anything runs: every output path is checked (``--store``: refused if it exists unless
``--overwrite``, and only an hbtest run store or an empty directory is replaced; ``--plot``:
an existing, writable directory), and the sizes are bounded (``--delay`` at most
:data:`hbtest.commands.classical.MAX_DELAY_S` and at most ``--duration``; at most
:data:`hbtest.realtime.classical.limits.MAX_STEPS` steps per frequency). A mistake is one line naming
the flag, exit code 2.

``--plot FILE.png``: FRF magnitude of the emulated structure, iterative points, classical
points where stable and marks where unstable. ``--json`` prints one JSON object on stdout
(progress goes to stderr).
"""

from __future__ import annotations

import json
import sys

from ..errors import UserError
from .classical import check_plot, check_timing, finite_flag, fmt, save_figure, timing_help
from .design import add_file_arguments


def register(sub) -> None:
    if "compare" in set(getattr(sub, "choices", {}) or {}):
        return
    h = timing_help(2e-4)
    p = sub.add_parser("compare", help="classical real-time test vs the iterative test at every sweep frequency")
    add_file_arguments(p)
    p.add_argument("--delay", type=float, required=True, metavar="T", help=h["delay"])
    p.add_argument("--dt", type=float, default=2e-4, metavar="S", help=h["dt"])
    p.add_argument("--duration", type=float, default=6.0, metavar="S", help=h["duration"] + " (default %(default)s)")
    p.add_argument("--actuator-hz", type=float, default=None, metavar="F",
                   help="model the actuator as a second-order low-pass (damping 0.7) at F Hz plus the delay (default: pure delay)")
    p.add_argument("--store", default=None, metavar="PATH", help="store of the iterative sweep (default: a temporary directory)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing run store at --store")
    p.add_argument("--seed", type=int, default=None, help="seed of the virtual rig's noise")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the FRF comparison plot")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _progress(event) -> None:
    from ..realtime import classical as cl

    if isinstance(event, cl.ClassicalPointDone):
        c = event.point
        if c["stable"]:
            line = f"stable, FRF error {c['frf_error']:.3g}"
        else:
            line = (f"unstable, growth {fmt(c['growth_rate_per_s'], '{:.4g}')} 1/s "
                    f"at {fmt(c['dominant_frequency_hz'], '{:.4g}')} Hz")
        print(f"classical {event.frequency_hz:8.4f} Hz: {line}", file=sys.stderr, flush=True)
    else:
        from .render import render

        line = render(event)
        if line is not None:
            print(line, file=sys.stderr, flush=True)


def run(args) -> int:
    from ..config import load_sweep
    from ..realtime import classical as cl

    if args.store is not None:
        cl.check_store_target(args.store, args.overwrite, "--store")
    check_plot(args)
    check_timing(args)
    if args.actuator_hz is not None:
        finite_flag("actuator-hz", args.actuator_hz, positive=True)
        if args.actuator_hz >= 0.5 / args.dt:
            raise UserError(f"--actuator-hz {args.actuator_hz:g} must be below the Nyquist frequency {0.5 / args.dt:g} Hz of --dt")
    cfg = load_sweep(args.file, args.overrides)
    try:
        res = cl.compare_sweep(cfg, args.delay, dt=args.dt, duration=args.duration, actuator_hz=args.actuator_hz,
                               store_path=args.store, overwrite=args.overwrite, seed=args.seed, overrides=tuple(args.overrides),
                               progress=_progress)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = res.to_dict()
    if args.plot:
        save_figure(cl.compare_figure(res), args.plot)
        out["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(out))
        return 0
    _print_compare(args, res)
    return 0


def _print_compare(args, res) -> None:
    stab, summary, n = res.stability, res.summary, res.summary["n_points"]
    print(f"Classical real-time test (delay {args.delay * 1e3:.4g} ms, dt {args.dt * 1e3:.4g} ms, {res.transfer}) vs iterative test: {args.file}")
    if stab and "critical_delay_s" in stab:
        print(f"  predicted critical delay {fmt(stab['critical_delay_s'] and stab['critical_delay_s'] * 1e3)} ms "
              f"({stab['boundary']}, {fmt(stab['frequency_hz'])} Hz, cut-off {stab['cutoff_hz']:g} Hz)")
    print(f"  {'f [Hz]':>9}  {'classical':<34}  iterative")
    for p in res.points:
        c, it = p["classical"], p["iterative"]
        if c["stable"]:
            cs = f"stable, FRF error {c['frf_error']:.3g}"
        else:
            cs = f"UNSTABLE {fmt(c['growth_rate_per_s'], '{:.4g}')} 1/s @ {fmt(c['dominant_frequency_hz'], '{:.4g}')} Hz"
        if it is None:
            its = "-"
        else:
            its = f"{'converged' if it['converged'] else 'NOT converged'} ({it['iterations']} it), FRF error {fmt(it['frf_error'], '{:.3g}')}"
        print(f"  {p['frequency_hz']:>9.4f}  {cs:<34}  {its}")
    print(f"  classical unstable at {summary['classical_unstable']}/{n} points; iterative converged at {summary['iterative_converged']}/{n}")
    for note in res.notes:
        print(f"  note: {note}")
    if args.plot:
        print(f"  plot {args.plot}")


# former names (this command used to live in hbtest.commands.classical)
register_compare = register
run_compare = run

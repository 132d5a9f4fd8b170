"""``hbtest classical {sdof,chain}``: a time-domain classical real-time hybrid test with a
delay compensator (docs/method.md §4). The work is done by :func:`hbtest.realtime.classical.run_loop`; this
module parses, checks flags and prints (and holds the flag checks ``hbtest compare`` shares).

``classical sdof``: the single oscillator split at its spring (``m z'' + c z' + k z +
k_s z(t - tau) = f``); ``classical chain FILE``: a lumped chain file such as
``sweeps/three-mass-chain.toml`` (split as the file says, one actuator per interface DOF).
Printed: whether the loop stayed stable, the growth rate of its response envelope [1/s],
the rms synchronisation error ``z - x`` and global error against the emulated structure
[m] (over the second half of the run), and, for a pure delay with a linear compensator, the
stability prediction (rightmost root of the compensated delay equation).

``--plot FILE.png``: time histories and the subspace plot.

The output path is checked before anything runs; sizes are
bounded (``--delay`` at most :data:`MAX_DELAY_S` and shorter than ``--duration``; at most
:data:`hbtest.realtime.classical.MAX_STEPS` steps per run). ``--json`` prints one JSON object on stdout
(progress goes to stderr).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from ..errors import UserError

MAX_DT_S = 1e-2
"""Coarsest real-time step [s] accepted (a real-time loop runs at 1 ms .. 0.2 ms)."""

MAX_DELAY_S = 1.0
"""Largest actuator delay [s] accepted: real-time actuator delays are milliseconds, and the
loop keeps delay/dt command samples."""

MIN_RUN_STEPS = 20
"""Fewest steps of a run (a growth rate needs several periods)."""


class _RegistryNames:
    """The names of a library registry (``hbtest.realtime.classical.TRANSFERS`` / ``COMPENSATORS``)
    as argparse ``choices``, looked up only when a choice is checked or help is shown (the
    parser of every ``hbtest`` command is built without importing the library)."""

    def __init__(self, registry: str):
        self.registry = registry

    def _names(self) -> tuple:
        from ..realtime import classical as cl

        return tuple(getattr(cl, self.registry))

    def __contains__(self, name) -> bool:
        return name in self._names()

    def __iter__(self):
        return iter(self._names())


def register(sub) -> None:
    """Add ``classical``."""
    names = set(getattr(sub, "choices", {}) or {})
    if "classical" not in names:
        p = sub.add_parser("classical", help="time-domain classical real-time hybrid test with delay compensation")
        csub = p.add_subparsers(dest="classical_command", metavar="SYSTEM")
        q = csub.add_parser("sdof", help="single oscillator split at its spring: m z'' + c z' + k z + ks z(t - tau) = f")
        q.add_argument("--m", type=float, default=1.0, help="mass [kg] (default %(default)s)")
        q.add_argument("--k", type=float, default=4000.0, help="numerical spring [N/m] (default %(default)s)")
        q.add_argument("--c", type=float, default=6.3, help="damper [N s/m] (default %(default)s)")
        q.add_argument("--ks", type=float, default=4000.0, help="physical spring behind the actuator [N/m] (default %(default)s)")
        _loop_arguments(q)
        q.set_defaults(func=run_sdof)
        q = csub.add_parser("chain", help="lumped chain file (e.g. sweeps/three-mass-chain.toml)")
        q.add_argument("file", metavar="FILE", help="chain definition (TOML), format of sweeps/three-mass-chain.toml")
        q.add_argument("--force-dof", default=None, metavar="NAME", help="numerical DOF carrying the external force (default: the first)")
        _loop_arguments(q)
        q.set_defaults(func=run_chain)
        p.set_defaults(func=lambda args: _missing(p))


def timing_help(dt_default: float) -> dict:
    from ..realtime.classical.limits import MAX_STEPS

    return dict(
        delay=f"actuator delay [s]: at least --dt, at most {MAX_DELAY_S:g} s and at most --duration",
        dt=f"real-time step [s], at most {MAX_DT_S:g} (default {dt_default:g})",
        duration=f"simulated seconds per run; --duration/--dt at most {MAX_STEPS:,} steps (the run's history is held in memory)",
    )


def _missing(p) -> int:
    p.print_help(sys.stderr)
    return 2


def _loop_arguments(q) -> None:
    from ..realtime.classical.limits import MAX_PREDICTOR_ORDER, MAX_PREDICTOR_SAMPLES

    h = timing_help(2e-4)
    q.add_argument("--delay", type=float, required=True, metavar="T", help=h["delay"])
    q.add_argument("--transfer", choices=_RegistryNames("TRANSFERS"), default="delay", metavar="KIND",
                   help="transfer system, one of %(choices)s: pure delay, first- or second-order lag (each with --delay)")
    q.add_argument("--lag-time-constant", type=float, default=5e-3, metavar="S", help="first-order lag time constant [s] (default %(default)s)")
    q.add_argument("--lag-hz", type=float, default=50.0, metavar="F", help="second-order lag natural frequency [Hz] (default %(default)s)")
    q.add_argument("--lag-damping", type=float, default=0.7, metavar="Z", help="second-order lag damping ratio (default %(default)s)")
    q.add_argument("--compensator", choices=_RegistryNames("COMPENSATORS"), default="none", metavar="NAME",
                   help="delay compensation, one of %(choices)s (default none)")
    q.add_argument("--predictor-order", type=int, default=2, metavar="N",
                   help=f"polynomial order of the forward predictor, 0..{MAX_PREDICTOR_ORDER} (default 2)")
    q.add_argument("--predictor-samples", type=int, default=3, metavar="n",
                   help=f"samples the predictor fits, order + 1 .. {MAX_PREDICTOR_SAMPLES} (default 3)")
    q.add_argument("--horizon", type=float, default=None, metavar="S",
                   help="prediction horizon [s] of poly (default: the delay plus the lag's low-frequency delay)")
    q.add_argument("--afp-gains", type=float, nargs=3, default=(2e-3, 0.5, 1.0), metavar=("ALPHA", "BETA", "GAMMA"),
                   help="adaptive forward prediction: horizon gain [s], amplitude gain, exponent (default 2e-3 0.5 1)")
    q.add_argument("--mcs-gains", type=float, nargs=2, default=(50.0, 0.5), metavar=("ALPHA", "BETA"),
                   help="minimal control synthesis: integral [1/s] and proportional gains (default 50 0.5)")
    q.add_argument("--dt", type=float, default=2e-4, metavar="S", help=h["dt"])
    q.add_argument("--duration", type=float, default=3.0, metavar="S", help=h["duration"] + " (default %(default)s)")
    q.add_argument("--excitation-hz", type=float, default=0.0, metavar="F", help="harmonic force frequency [Hz] (default: free response)")
    q.add_argument("--amplitude", type=float, default=1.0, metavar="A", help="force amplitude [N] (default %(default)s)")
    q.add_argument("--initial-displacement", type=float, default=None, metavar="X",
                   help="initial displacement of the first interface DOF [m] (default 1e-3 for a free response, 0 when forced)")
    q.add_argument("--plot", default=None, metavar="FILE.png", help="save time histories and the subspace plot")
    q.add_argument("--json", action="store_true", help="print one JSON object")


# ---------------------------------------------------------------------------------------
# flag checks (one line naming the flag, before anything runs)


def finite_flag(name: str, v: float, positive=False, nonnegative=False) -> float:
    if v is None or not math.isfinite(v):
        raise UserError(f"--{name} must be a finite number, got {v}")
    if positive and not v > 0:
        raise UserError(f"--{name} must be positive, got {v:g}")
    if nonnegative and v < 0:
        raise UserError(f"--{name} must not be negative, got {v:g}")
    return float(v)


def check_timing(args) -> None:
    from ..realtime import classical as cl

    dt = finite_flag("dt", args.dt, positive=True)
    if dt > MAX_DT_S:
        raise UserError(f"--dt {dt:g} s is too coarse for a real-time loop (at most {MAX_DT_S:g} s; use 1e-3 .. 2e-4 s)")
    delay = finite_flag("delay", args.delay, nonnegative=True)
    if delay < dt * (1 - 1e-9):
        raise UserError(f"--delay ({delay:g} s) must be at least --dt ({dt:g} s): a digital loop has one step of latency")
    if delay > MAX_DELAY_S:
        raise UserError(f"--delay {delay:g} s is beyond {MAX_DELAY_S:g} s: real-time actuator delays are milliseconds, "
                        "and the loop keeps delay/dt command samples")
    dur = finite_flag("duration", args.duration, positive=True)
    steps = dur / dt
    if steps > cl.MAX_STEPS:
        raise UserError(f"--duration {dur:g} s at --dt {dt:g} s is {steps:.3g} steps, more than {cl.MAX_STEPS:,}: "
                        "the run holds its whole history in memory")
    if steps < MIN_RUN_STEPS:
        raise UserError(f"--duration {dur:g} s is shorter than {MIN_RUN_STEPS} steps of --dt")
    if delay > dur:
        raise UserError(f"--delay {delay:g} s is longer than --duration {dur:g} s: the actuator would never move")


def check_plot(args) -> None:
    from ..realtime import classical as cl

    if args.plot is not None:
        cl.check_file_target(args.plot, "--plot")


def _transfer(args):
    from ..realtime import classical as cl

    if args.transfer == "lag1":
        finite_flag("lag-time-constant", args.lag_time_constant, positive=True)
    if args.transfer == "lag2":
        finite_flag("lag-hz", args.lag_hz, positive=True)
        finite_flag("lag-damping", args.lag_damping, positive=True)
        if args.lag_hz >= 0.5 / args.dt:
            raise UserError(f"--lag-hz {args.lag_hz:g} must be below the Nyquist frequency {0.5 / args.dt:g} Hz of --dt")
    lag = cl.LagParameters(args.lag_time_constant, args.lag_hz, args.lag_damping)
    return cl.make_transfer(args.transfer, args.delay, lag)


def _compensator(args, transfer):
    """The compensator and a dict describing it."""
    from ..realtime import classical as cl

    N, n = args.predictor_order, args.predictor_samples
    if args.compensator in ("poly", "afp", "inverse"):
        if not 0 <= N <= cl.MAX_PREDICTOR_ORDER:
            raise UserError(f"--predictor-order must be 0..{cl.MAX_PREDICTOR_ORDER}, got {N}")
        if n < N + 1:
            raise UserError(f"--predictor-samples ({n}) must be at least --predictor-order + 1 ({N + 1})")
        if n > cl.MAX_PREDICTOR_SAMPLES:
            raise UserError(f"--predictor-samples must be at most {cl.MAX_PREDICTOR_SAMPLES}, got {n}")
    horizon = None if args.horizon is None else finite_flag("horizon", args.horizon, nonnegative=True)
    a, b, g = (finite_flag("afp-gains", v) for v in args.afp_gains)
    if g <= 0:
        raise UserError(f"--afp-gains exponent GAMMA must be positive, got {g:g}")
    ma, mb = (finite_flag("mcs-gains", v) for v in args.mcs_gains)
    opts = cl.CompensatorOptions(N, n, horizon, a, b, g, ma, mb)
    try:
        return cl.make_compensator(args.compensator, transfer, args.dt, opts)
    except ValueError as e:
        raise UserError(f"--compensator {args.compensator}: {e}") from None


def fmt(x, pattern="{:.5g}") -> str:
    """A number for a table, "n/a" for None."""
    return "n/a" if x is None else pattern.format(x)


def save_figure(fig, path) -> None:
    try:
        fig.savefig(Path(path), dpi=110)
    except OSError as e:
        raise UserError(f"--plot {path}: cannot write ({e.strerror or e})") from None


# ---------------------------------------------------------------------------------------
# classical


def run_sdof(args) -> int:
    from ..realtime import classical as cl

    for name in ("m", "k"):
        finite_flag(name, getattr(args, name), positive=True)
    finite_flag("c", args.c, nonnegative=True)
    finite_flag("ks", args.ks, nonnegative=True)
    check_plot(args)
    system = cl.sdof_benchmark(args.m, args.c, args.k, args.ks)
    header = dict(system="sdof", m_kg=args.m, k_n_per_m=args.k, c_n_s_per_m=args.c, ks_n_per_m=args.ks)
    return _run_loop(args, system, header)


def run_chain(args) -> int:
    from ..config import load_chain
    from ..realtime import classical as cl

    check_plot(args)
    chain = load_chain(args.file).chain_kwargs()
    try:
        system = cl.chain_benchmark(chain, args.force_dof, label=Path(args.file).stem)
    except KeyError as e:
        raise UserError(f"--force-dof {e.args[0]} of {args.file}") from None
    except ValueError as e:
        raise UserError(f"{args.file}: {e}") from None
    ns = system.ns
    dof = ns.structure.dof_names[0] if args.force_dof is None else args.force_dof
    header = dict(system="chain", file=str(args.file), interface=list(ns.interface), force_dof=dof)
    return _run_loop(args, system, header)


def _run_loop(args, system, header: dict) -> int:
    from ..realtime import classical as cl

    check_timing(args)
    fx = finite_flag("excitation-hz", args.excitation_hz, nonnegative=True)
    if fx >= 0.25 / args.dt:
        raise UserError(f"--excitation-hz {fx:g} must be below a quarter of the sample rate ({0.25 / args.dt:g} Hz)")
    amp = finite_flag("amplitude", args.amplitude)
    transfer = _transfer(args)
    comp, cinfo = _compensator(args, transfer)
    exc = cl.Excitation(fx, amp)
    x0 = None if args.initial_displacement is None else finite_flag("initial-displacement", args.initial_displacement)
    if not exc.active and x0 == 0:
        raise UserError("nothing moves: give --excitation-hz (and --amplitude) or a non-zero --initial-displacement")
    try:
        rep = cl.run_loop(system, transfer, comp, args.dt, args.duration, exc, x0)
    except ValueError as e:
        raise UserError(str(e)) from None
    out = dict(header)
    out.update(
        delay_s=args.delay, dt_s=args.dt, duration_s=args.duration, transfer=transfer.kind,
        excitation_hz=fx if exc.active else None, amplitude_n=amp if exc.active else None,
        compensator=cinfo,
    )
    out.update(rep.summary())
    if args.plot:
        fig = cl.run_figure(rep.result, f"{header['system']} — {cinfo['name']}, delay {args.delay * 1e3:.3g} ms")
        save_figure(fig, args.plot)
        out["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(out))
        return 0
    _print_loop(args, out, transfer, cinfo)
    return 0


def _print_loop(args, out: dict, transfer, cinfo: dict) -> None:
    pred = out["prediction"]
    print(f"Classical real-time hybrid test: {out['system']}, transfer {transfer.kind}, delay {args.delay * 1e3:.4g} ms, "
          f"dt {args.dt * 1e3:.4g} ms, compensator {cinfo['name']}")
    if cinfo["name"] == "poly":
        print(f"  predictor weights ({cinfo['order']}, {cinfo['samples']}, horizon {cinfo['horizon_s'] * 1e3:.4g} ms): "
              + ", ".join(f"{w:.6g}" for w in cinfo["weights"]))
    if cinfo["name"] == "inverse":
        m = cinfo["identified"]
        print(f"  identified G_n: gain {m['gain']:.5g}, lag {m['time_constant_s'] * 1e3:.5g} ms, delay {m['delay_s'] * 1e3:.5g} ms "
              f"(misfit {m['rms_misfit']:.2g})")
    print(f"  {'stable' if out['stable'] else 'UNSTABLE'}{' (blew up at %.4g s)' % out['simulated_s'] if out['blew_up'] else ''}")
    print(f"  growth rate          {fmt(out['growth_rate_per_s'])} 1/s (± {fmt(out['growth_rate_stderr_per_s'])}) "
          f"at {fmt(out['dominant_frequency_hz'])} Hz")
    if pred:
        print(f"  predicted            {fmt(pred['rightmost_root_real_per_s'])} 1/s at {fmt(pred['rightmost_root_hz'])} Hz (rightmost root)")
    print(f"  rms sync error z-x   {fmt(out['rms_sync_error'])} m")
    print(f"  rms global error     {fmt(out['rms_global_error'])} m")
    for key, v in out.get("adapted", {}).items():
        print(f"  final {key:<14} " + ", ".join(f"{a:.5g}" for a in v))
    if args.plot:
        print(f"  plot {args.plot}")

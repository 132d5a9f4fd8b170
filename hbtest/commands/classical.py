"""``hbtest classical {sdof,chain}`` — a time-domain classical real-time hybrid test with a
delay compensator — and ``hbtest compare SWEEPFILE`` — the classical test against the
iterative Fourier-domain test at every frequency of a sweep (SPEC §4).

``classical sdof``: the single oscillator split at its spring (``m z'' + c z' + k z +
k_s z(t - tau) = f``); ``classical chain FILE``: a lumped chain file such as
``sweeps/three-mass-chain.toml`` (split as the file says, one actuator per interface DOF).
Printed: whether the loop stayed stable, the growth rate of its response envelope [1/s],
the rms synchronisation error ``z - x`` and global error against the emulated structure
[m] (over the second half of the run), and, for a pure delay with a linear compensator, the
stability prediction (rightmost root of the compensated delay equation).

``compare``: for each sweep frequency a steady harmonic forcing run of the classical test of
the sweep's cantilever (NS root beam, PS tip beam with the same damping model, pure
actuator delay, optional actuator cut-off) for ``--duration`` seconds — unstable (growth
rate, dominant frequency) or its FRF error against the emulated structure — next to the
iterative test (``hbtest.sweep.run``): converged, iterations, FRF error against its
reference. ``--plot FILE.png``: FRF magnitude of the emulated structure, iterative points,
classical points where stable and marks where unstable.

``--json`` prints one JSON object on stdout (progress goes to stderr).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

from ..errors import UserError

COMPENSATORS = ("none", "poly", "afp", "inverse", "mcs")
TRANSFERS = ("delay", "lag1", "lag2")


def register(sub) -> None:
    """Add ``classical`` (and ``compare`` unless already registered)."""
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
    if "compare" not in names:
        register_compare(sub)


def register_compare(sub) -> None:
    from .design import add_file_arguments

    p = sub.add_parser("compare", help="classical real-time test vs the iterative test at every sweep frequency")
    add_file_arguments(p)
    p.add_argument("--delay", type=float, required=True, metavar="T", help="actuator delay of the classical test [s]")
    p.add_argument("--dt", type=float, default=2e-4, metavar="S", help="real-time step [s] (default %(default)s)")
    p.add_argument("--duration", type=float, default=6.0, metavar="S", help="simulated seconds per frequency (default %(default)s)")
    p.add_argument("--actuator-hz", type=float, default=None, metavar="F",
                   help="model the actuator as a second-order low-pass (damping 0.7) at F Hz plus the delay (default: pure delay)")
    p.add_argument("--store", default=None, metavar="PATH", help="store of the iterative sweep (default: a temporary directory)")
    p.add_argument("--seed", type=int, default=None, help="seed of the virtual rig's noise")
    p.add_argument("--plot", default=None, metavar="FILE.png", help="save the FRF comparison plot")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run_compare)


def _missing(p) -> int:
    p.print_help(sys.stderr)
    return 2


def _loop_arguments(q) -> None:
    q.add_argument("--delay", type=float, required=True, metavar="T", help="actuator delay [s] (at least --dt)")
    q.add_argument("--transfer", choices=TRANSFERS, default="delay", help="transfer system: pure delay, first- or second-order lag (each with --delay)")
    q.add_argument("--lag-time-constant", type=float, default=5e-3, metavar="S", help="first-order lag time constant [s] (default %(default)s)")
    q.add_argument("--lag-hz", type=float, default=50.0, metavar="F", help="second-order lag natural frequency [Hz] (default %(default)s)")
    q.add_argument("--lag-damping", type=float, default=0.7, metavar="Z", help="second-order lag damping ratio (default %(default)s)")
    q.add_argument("--compensator", choices=COMPENSATORS, default="none", help="delay compensation (default none)")
    q.add_argument("--predictor-order", type=int, default=2, metavar="N", help="polynomial order of the forward predictor (default 2)")
    q.add_argument("--predictor-samples", type=int, default=3, metavar="n", help="samples the predictor fits (default 3)")
    q.add_argument("--horizon", type=float, default=None, metavar="S",
                   help="prediction horizon [s] of poly (default: the delay plus the lag's low-frequency delay)")
    q.add_argument("--afp-gains", type=float, nargs=3, default=(2e-3, 0.5, 1.0), metavar=("ALPHA", "BETA", "GAMMA"),
                   help="adaptive forward prediction: horizon gain [s], amplitude gain, exponent (default 2e-3 0.5 1)")
    q.add_argument("--mcs-gains", type=float, nargs=2, default=(50.0, 0.5), metavar=("ALPHA", "BETA"),
                   help="minimal control synthesis: integral [1/s] and proportional gains (default 50 0.5)")
    q.add_argument("--dt", type=float, default=2e-4, metavar="S", help="real-time step [s] (default %(default)s)")
    q.add_argument("--duration", type=float, default=3.0, metavar="S", help="simulated time [s] (default %(default)s)")
    q.add_argument("--excitation-hz", type=float, default=0.0, metavar="F", help="harmonic force frequency [Hz] (default: free response)")
    q.add_argument("--amplitude", type=float, default=1.0, metavar="A", help="force amplitude [N] (default %(default)s)")
    q.add_argument("--initial-displacement", type=float, default=None, metavar="X",
                   help="initial displacement of the first interface DOF [m] (default 1e-3 for a free response, 0 when forced)")
    q.add_argument("--plot", default=None, metavar="FILE.png", help="save time histories and the subspace plot")
    q.add_argument("--json", action="store_true", help="print one JSON object")


# ---------------------------------------------------------------------------------------
# checks


def _finite(name: str, v: float, positive=False, nonnegative=False) -> float:
    if v is None or not math.isfinite(v):
        raise UserError(f"--{name} must be a finite number, got {v}")
    if positive and not v > 0:
        raise UserError(f"--{name} must be positive, got {v:g}")
    if nonnegative and v < 0:
        raise UserError(f"--{name} must not be negative, got {v:g}")
    return float(v)


def _check_timing(args) -> None:
    dt = _finite("dt", args.dt, positive=True)
    if dt > 1e-2:
        raise UserError(f"--dt {dt:g} s is too coarse for a real-time loop (use 1e-3 .. 2e-4 s)")
    delay = _finite("delay", args.delay, nonnegative=True)
    if delay < dt * (1 - 1e-9):
        raise UserError(f"--delay ({delay:g} s) must be at least --dt ({dt:g} s): a digital loop has one step of latency")
    dur = _finite("duration", args.duration, positive=True)
    if dur / dt > 5e6:
        raise UserError(f"--duration {dur:g} s at --dt {dt:g} s is more than 5 million steps")
    if dur < 20 * dt:
        raise UserError(f"--duration {dur:g} s is shorter than 20 steps")


def _transfer(args):
    from ..classical import TransferSystem

    if args.transfer == "lag1":
        _finite("lag-time-constant", args.lag_time_constant, positive=True)
        return TransferSystem("lag1", args.delay, time_constant=args.lag_time_constant)
    if args.transfer == "lag2":
        _finite("lag-hz", args.lag_hz, positive=True)
        _finite("lag-damping", args.lag_damping, positive=True)
        if args.lag_hz >= 0.5 / args.dt:
            raise UserError(f"--lag-hz {args.lag_hz:g} must be below the Nyquist frequency {0.5 / args.dt:g} Hz of --dt")
        return TransferSystem("lag2", args.delay, natural_frequency_hz=args.lag_hz, damping_ratio=args.lag_damping)
    return TransferSystem("delay", args.delay)


def _effective_delay(transfer) -> float:
    """Low-frequency delay of the transfer system: tau + T (lag1), tau + 2 zeta / w (lag2)."""
    if transfer.kind == "lag1":
        return transfer.delay + transfer.time_constant
    if transfer.kind == "lag2":
        return transfer.delay + 2 * transfer.damping_ratio / (2 * math.pi * transfer.natural_frequency_hz)
    return transfer.delay


def _compensator(args, transfer):
    """The compensator and a dict describing it."""
    from .. import classical as cl

    N, n = args.predictor_order, args.predictor_samples
    if args.compensator in ("poly", "afp", "inverse"):
        if N < 0 or N > 10:
            raise UserError(f"--predictor-order must be 0..10, got {N}")
        if n < N + 1:
            raise UserError(f"--predictor-samples ({n}) must be at least --predictor-order + 1 ({N + 1})")
        if n > 60:
            raise UserError(f"--predictor-samples must be at most 60, got {n}")
    if args.compensator == "none":
        return cl.NoCompensation(), {"name": "none"}
    if args.compensator == "poly":
        h = _effective_delay(transfer) if args.horizon is None else _finite("horizon", args.horizon, nonnegative=True)
        from ..stability import polynomial_predictor_weights

        w = polynomial_predictor_weights(N, n, h / args.dt)
        return cl.PolynomialPredictor(N, n, h), {"name": "poly", "order": N, "samples": n, "horizon_s": h, "weights": [float(x) for x in w]}
    if args.compensator == "afp":
        a, b, g = (_finite("afp-gains", v) for v in args.afp_gains)
        if g <= 0:
            raise UserError(f"--afp-gains exponent GAMMA must be positive, got {g:g}")
        rho_max = max(0.05, 10 * _effective_delay(transfer))
        return cl.AdaptiveForwardPredictor(N, n, 0.0, 1.0, a, b, g, rho_max), {"name": "afp", "order": N, "samples": n, "alpha": a, "beta": b, "gamma": g}
    if args.compensator == "inverse":
        model = cl.identify_lag(transfer, args.dt)
        return cl.InverseModelCompensator(model, N, n), {"name": "inverse", "order": N, "samples": n, "identified": model.to_dict()}
    a, b = (_finite("mcs-gains", v) for v in args.mcs_gains)
    return cl.MinimalControlSynthesis(a, b), {"name": "mcs", "alpha": a, "beta": b}


def _jf(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


# ---------------------------------------------------------------------------------------
# classical


def run_sdof(args) -> int:
    from .. import classical as cl

    for name in ("m", "k"):
        _finite(name, getattr(args, name), positive=True)
    _finite("c", args.c, nonnegative=True)
    _finite("ks", args.ks, nonnegative=True)
    system = cl.sdof_benchmark(args.m, args.c, args.k, args.ks)
    header = dict(system="sdof", m_kg=args.m, k_n_per_m=args.k, c_n_s_per_m=args.c, ks_n_per_m=args.ks)
    return _run_loop(args, system, header)


def run_chain(args) -> int:
    from .. import classical as cl
    from .. import stability as st
    from .stability import read_chain

    spec = read_chain(args.file)
    kw = {k: v for k, v in spec.items() if k not in ("cutoff_hz", "tau_max")}
    try:
        sd = st.chain_hybrid(**kw)
    except ValueError as e:
        raise UserError(f"{args.file}: {e}") from None
    ns, ps = sd.ns, sd.ps
    names = ns.structure.dof_names
    dof = names[0] if args.force_dof is None else args.force_dof
    if dof not in names:
        raise UserError(f"--force-dof {dof!r} is not a numerical DOF of {args.file} (numerical DOFs: {', '.join(names)})")
    F = np.zeros(len(names), complex)
    F[names.index(dof)] = 1.0
    system = cl.HybridSystem(ns, ps, F, label=Path(args.file).stem)
    header = dict(system="chain", file=str(args.file), interface=list(ns.interface), force_dof=dof)
    return _run_loop(args, system, header)


def _run_loop(args, system, header: dict) -> int:
    from .. import classical as cl

    _check_timing(args)
    fx = _finite("excitation-hz", args.excitation_hz, nonnegative=True)
    if fx >= 0.25 / args.dt:
        raise UserError(f"--excitation-hz {fx:g} must be below a quarter of the sample rate ({0.25 / args.dt:g} Hz)")
    amp = _finite("amplitude", args.amplitude)
    transfer = _transfer(args)
    comp, cinfo = _compensator(args, transfer)
    exc = cl.Excitation(fx, amp)
    x0 = args.initial_displacement
    if x0 is None:
        x0 = 0.0 if exc.active else 1e-3
    x0 = _finite("initial-displacement", x0)
    if not exc.active and x0 == 0:
        raise UserError("nothing moves: give --excitation-hz (and --amplitude) or a non-zero --initial-displacement")
    q0 = np.zeros(system.ns.structure.n_dof)
    q0[system.ns.interface_index[0]] = x0  # one DOF only: a symmetric start would miss antisymmetric roots
    try:
        res = cl.simulate(system, transfer, comp, args.dt, args.duration, exc, q0 if x0 else None)
    except ValueError as e:
        raise UserError(str(e)) from None
    g = res.growth()
    out = dict(header)
    out.update(
        delay_s=args.delay, dt_s=args.dt, duration_s=args.duration, transfer=transfer.kind,
        excitation_hz=fx if exc.active else None, amplitude_n=amp if exc.active else None,
        compensator=cinfo,
        stable=bool(res.stable),
        growth_rate_per_s=_jf(g.rate), growth_rate_stderr_per_s=_jf(g.stderr), dominant_frequency_hz=_jf(g.frequency_hz),
        blew_up=bool(res.blew_up), simulated_s=float(res.t[-1]),
        rms_sync_error=_jf(res.rms_sync_error()), rms_global_error=_jf(res.rms_global_error()),
    )
    for key, v in res.trace.items():
        out.setdefault("adapted", {})[key] = [float(a) for a in np.atleast_1d(v[-1])]
    pred = None
    if transfer.kind == "delay" and comp.lti:
        try:
            root = cl.predicted_rightmost(system, transfer, comp, args.dt)
            pred = dict(rightmost_root_real_per_s=_jf(root.real), rightmost_root_hz=_jf(root.imag / (2 * math.pi)))
        except ValueError:
            pred = None
    out["prediction"] = pred
    if args.plot:
        _plot_run(res, args.plot, f"{header['system']} — {cinfo['name']}, delay {args.delay * 1e3:.3g} ms")
        out["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Classical real-time hybrid test: {header['system']}, transfer {transfer.kind}, delay {args.delay * 1e3:.4g} ms, dt {args.dt * 1e3:.4g} ms, compensator {cinfo['name']}")
    if cinfo["name"] == "poly":
        print(f"  predictor weights ({cinfo['order']}, {cinfo['samples']}, horizon {cinfo['horizon_s'] * 1e3:.4g} ms): "
              + ", ".join(f"{w:.6g}" for w in cinfo["weights"]))
    if cinfo["name"] == "inverse":
        m = cinfo["identified"]
        print(f"  identified G_n: gain {m['gain']:.5g}, lag {m['time_constant_s'] * 1e3:.5g} ms, delay {m['delay_s'] * 1e3:.5g} ms (misfit {m['rms_misfit']:.2g})")
    print(f"  {'stable' if out['stable'] else 'UNSTABLE'}{' (blew up at %.4g s)' % out['simulated_s'] if res.blew_up else ''}")
    print(f"  growth rate          {_fmt(out['growth_rate_per_s'])} 1/s (± {_fmt(out['growth_rate_stderr_per_s'])}) at {_fmt(out['dominant_frequency_hz'])} Hz")
    if pred:
        print(f"  predicted            {_fmt(pred['rightmost_root_real_per_s'])} 1/s at {_fmt(pred['rightmost_root_hz'])} Hz (rightmost root)")
    print(f"  rms sync error z-x   {_fmt(out['rms_sync_error'])} m")
    print(f"  rms global error     {_fmt(out['rms_global_error'])} m")
    for key, v in out.get("adapted", {}).items():
        print(f"  final {key:<14} " + ", ".join(f"{a:.5g}" for a in v))
    if args.plot:
        print(f"  plot {args.plot}")
    return 0


def _fmt(x, fmt="{:.5g}") -> str:
    return "n/a" if x is None else fmt.format(x)


def _plot_run(res, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..classical import subspace_figure

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), gridspec_kw={"width_ratios": [2, 1]})
    ax = axes[0]
    ax.plot(res.t, res.z[:, 0], label="demand z (NS)")
    ax.plot(res.t, res.x[:, 0], "--", label="actuator x (PS)")
    if res.z_emulated is not None:
        ax.plot(res.t, res.z_emulated[:, 0], ":", label="emulated")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("interface displacement")
    ax.legend(loc="best", fontsize=8)
    ax.set_title(title)
    subspace_figure(res, 0, axes[1])
    fig.tight_layout()
    _save(fig, path)


def _save(fig, path) -> None:
    import matplotlib.pyplot as plt

    p = Path(path)
    try:
        if p.parent and not p.parent.exists():
            raise UserError(f"--plot {path}: directory {p.parent} does not exist")
        fig.savefig(p, dpi=110)
    except OSError as e:
        raise UserError(f"--plot {path}: cannot write ({e})") from None
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------
# compare


def classical_point(system, transfer, frequency_hz: float, dt: float, duration: float, amplitude: float) -> dict:
    """The classical test at one frequency: a harmonic forcing run from rest for ``duration``
    seconds; stability verdict from the response envelope; when stable, the FRF (u channel,
    per newton of ``amplitude``) from the last tenth of the run against the emulated one."""
    from .. import classical as cl

    res = cl.simulate(system, transfer, None, dt, duration, cl.Excitation(frequency_hz, 1.0))
    g = res.growth()
    H_em = complex(system.interface_response(frequency_hz)[0]) / amplitude
    out = dict(stable=bool(res.stable), blew_up=bool(res.blew_up), simulated_s=float(res.t[-1]),
               growth_rate_per_s=_jf(g.rate), dominant_frequency_hz=_jf(g.frequency_hz),
               emulated_frf_m_per_n=[H_em.real, H_em.imag], frf_error=None, amplitude_error=None, frf_m_per_n=None)
    if out["stable"]:
        periods = max(3, int(0.1 * duration * frequency_hz))
        H = complex(res.steady_amplitude(periods)[0]) / amplitude
        out.update(frf_m_per_n=[H.real, H.imag], frf_error=abs(H - H_em) / abs(H_em), amplitude_error=abs(H) / abs(H_em) - 1.0)
    return out


def _run_sweep(cfg, args, store_path, progress):
    from ..sweep import run

    return run(cfg, store_path, progress=progress, overwrite=True, plot=False, seed=args.seed,
               overrides=tuple(args.overrides))


def iterative_points(ds) -> list[dict]:
    """Per stored frequency: converged, iterations, FRF (u/F, harmonic 1) and its error
    against the store's reference."""
    out = []
    F = ds["external_force"].sel(harmonic=1).values
    U = ds["interface_displacement"].sel(dof="u", harmonic=1).values
    Ur = ds["reference_interface_displacement"].sel(dof="u", harmonic=1).values if "reference_interface_displacement" in ds else None
    conv = ds["converged"].values.astype(bool)
    iters = ds["iterations"].values if "iterations" in ds else [None] * conv.size
    freqs = ds["frequency"].values
    for i in range(freqs.size):
        with np.errstate(divide="ignore", invalid="ignore"):
            H = complex(U[i] / F[i]) if F[i] != 0 else complex("nan")
            Hr = complex(Ur[i] / F[i]) if Ur is not None and F[i] != 0 else complex("nan")
        err = abs(H - Hr) / abs(Hr) if np.isfinite(H) and np.isfinite(Hr) and Hr != 0 else float("nan")
        out.append(dict(frequency_hz=float(freqs[i]), converged=bool(conv[i]), iterations=None if iters[i] is None else int(iters[i]),
                        frf_m_per_n=[_jf(H.real), _jf(H.imag)], reference_frf_m_per_n=[_jf(Hr.real), _jf(Hr.imag)], frf_error=_jf(err)))
    return out


def run_compare(args) -> int:
    import shutil
    import tempfile

    from .. import classical as cl
    from ..config import load_sweep

    cfg = load_sweep(args.file, args.overrides)
    _check_timing(args)
    transfer = cl.TransferSystem("delay", args.delay)
    if args.actuator_hz is not None:
        _finite("actuator-hz", args.actuator_hz, positive=True)
        if args.actuator_hz >= 0.5 / args.dt:
            raise UserError(f"--actuator-hz {args.actuator_hz:g} must be below the Nyquist frequency {0.5 / args.dt:g} Hz of --dt")
        transfer = cl.TransferSystem("lag2", args.delay, natural_frequency_hz=args.actuator_hz, damping_ratio=0.7)
    if args.plot and not Path(args.plot).parent.exists():
        raise UserError(f"--plot {args.plot}: directory {Path(args.plot).parent} does not exist")
    system = cl.cantilever_benchmark(cfg)
    amp = cfg.excitation.amplitude

    def progress(msg):
        print(msg, file=sys.stderr, flush=True)

    freqs = cfg.sweep.frequencies_hz
    cache = {}
    classical = []
    for f in freqs:
        key = round(float(f), 9)
        if key not in cache:
            cache[key] = classical_point(system, transfer, float(f), args.dt, args.duration, amp)
            c = cache[key]
            progress(f"classical {f:8.4f} Hz: " + ("stable, FRF error %.3g" % c["frf_error"] if c["stable"] else
                                                  "unstable, growth %s 1/s at %s Hz" % (_fmt(c["growth_rate_per_s"], "{:.4g}"), _fmt(c["dominant_frequency_hz"], "{:.4g}"))))
        classical.append(dict(cache[key]))

    stab = None
    if transfer.kind == "delay":
        try:
            cd = system.stability_system().critical_delay()
            stab = dict(critical_delay_s=_jf(cd.delay_s), frequency_hz=_jf(cd.frequency_hz), boundary=cd.boundary, cutoff_hz=cd.cutoff_hz,
                        unstable_roots_at_delay=int(cd.unstable_roots(args.delay)) if math.isfinite(cd.delay_s) else 0)
        except Exception as e:  # a prediction is a bonus; never fail the comparison for it
            stab = dict(error=str(e))

    tmp = None
    if args.store is None:
        tmp = tempfile.mkdtemp(prefix="hbtest-compare-")
        store_path = Path(tmp) / f"{cfg.name}.zarr"
    else:
        store_path = Path(args.store)
    try:
        ds = _run_sweep(cfg, args, store_path, progress)
        iterative = iterative_points(ds)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

    points = []
    for i, f in enumerate(freqs):
        it = iterative[i] if i < len(iterative) else None
        points.append(dict(frequency_hz=float(f), classical=classical[i], iterative=it))
    n = len(points)
    summary = dict(
        n_points=n,
        classical_unstable=sum(not p["classical"]["stable"] for p in points),
        iterative_converged=sum(bool(p["iterative"] and p["iterative"]["converged"]) for p in points),
        classical_max_frf_error=_jf(max([p["classical"]["frf_error"] for p in points if p["classical"]["frf_error"] is not None], default=float("nan"))),
        iterative_max_frf_error=_jf(max([p["iterative"]["frf_error"] for p in points if p["iterative"] and p["iterative"]["frf_error"] is not None], default=float("nan"))),
    )
    out = dict(sweep=str(args.file), delay_s=args.delay, dt_s=args.dt, duration_s=args.duration,
               transfer=transfer.kind, actuator_hz=args.actuator_hz, stability=stab, points=points, summary=summary)
    if args.store is not None:
        out["store"] = str(store_path)
    if args.plot:
        _plot_compare(system, cfg, points, args)
        out["plot"] = str(args.plot)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Classical real-time test (delay {args.delay * 1e3:.4g} ms, dt {args.dt * 1e3:.4g} ms, {transfer.kind}) vs iterative test: {args.file}")
    if stab and "critical_delay_s" in stab:
        print(f"  predicted critical delay {_fmt(stab['critical_delay_s'] and stab['critical_delay_s'] * 1e3)} ms "
              f"({stab['boundary']}, {_fmt(stab['frequency_hz'])} Hz, cut-off {stab['cutoff_hz']:g} Hz)")
    print(f"  {'f [Hz]':>9}  {'classical':<34}  iterative")
    for p in points:
        c, it = p["classical"], p["iterative"]
        if c["stable"]:
            cs = f"stable, FRF error {c['frf_error']:.3g}"
        else:
            cs = f"UNSTABLE {_fmt(c['growth_rate_per_s'], '{:.4g}')} 1/s @ {_fmt(c['dominant_frequency_hz'], '{:.4g}')} Hz"
        if it is None:
            its = "-"
        else:
            its = f"{'converged' if it['converged'] else 'NOT converged'} ({it['iterations']} it), FRF error {_fmt(it['frf_error'], '{:.3g}')}"
        print(f"  {p['frequency_hz']:>9.4f}  {cs:<34}  {its}")
    print(f"  classical unstable at {summary['classical_unstable']}/{n} points; iterative converged at {summary['iterative_converged']}/{n}")
    cut = stab.get("cutoff_hz") if stab else None
    fd = [p["classical"]["dominant_frequency_hz"] for p in points if not p["classical"]["stable"] and p["classical"]["dominant_frequency_hz"]]
    if cut and fd and min(fd) > 0.8 * cut:
        print(f"  note: the simulated growth is at {min(fd):.0f}-{max(fd):.0f} Hz, near or above the {cut:g} Hz actuator cut-off of the "
              "stability analysis: the neutral root chain of the split beam (its interface inertia fed back through the delay)")
    if args.plot:
        print(f"  plot {args.plot}")
    return 0


def _plot_compare(system, cfg, points, args) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    f0, f1 = cfg.sweep.start_hz, cfg.sweep.stop_hz
    ff = np.linspace(f0, f1, 600)
    amp = cfg.excitation.amplitude
    H = np.abs(system.interface_response(ff)[:, 0]) / amp
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.semilogy(ff, H, "k-", lw=1.2, label="emulated structure")
    fi = [p["frequency_hz"] for p in points if p["iterative"]]
    hi = [abs(complex(*[v if v is not None else np.nan for v in p["iterative"]["frf_m_per_n"]])) for p in points if p["iterative"]]
    ci = [p["iterative"]["converged"] for p in points if p["iterative"]]
    if fi:
        fi, hi, ci = np.array(fi), np.array(hi), np.array(ci, bool)
        ax.plot(fi[ci], hi[ci], "o", color="C0", label="iterative (converged)")
        if np.any(~ci):
            ax.plot(fi[~ci], hi[~ci], "o", mfc="none", color="C0", label="iterative (not converged)")
    st = [p for p in points if p["classical"]["stable"]]
    if st:
        ax.plot([p["frequency_hz"] for p in st], [abs(complex(*p["classical"]["frf_m_per_n"])) for p in st], "s", mfc="none", color="C1", label="classical (stable)")
    un = [p for p in points if not p["classical"]["stable"]]
    if un:
        import matplotlib.transforms as mtransforms

        fu = np.array([p["frequency_hz"] for p in un])
        lo, hi_ = ax.get_ylim()
        ax.set_ylim(lo / 1.6, hi_)  # a band at the bottom for the marks
        trans = mtransforms.blended_transform_factory(ax.transData, ax.transAxes)
        ax.plot(fu, np.full(fu.size, 0.04), "x", color="C3", ms=9, mew=2, transform=trans, clip_on=False,
                label="classical UNSTABLE (marked at the bottom)")
    ax.set_xlabel("frequency [Hz]")
    ax.set_ylabel("|u / F| [m/N]")
    ax.set_title(f"{cfg.name}: classical (delay {args.delay * 1e3:.3g} ms) vs iterative")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    _save(fig, args.plot)

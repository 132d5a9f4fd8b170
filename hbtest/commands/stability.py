"""``hbtest stability {sdof,chain,beam}``: critical delays of real-time hybrid tests (docs/method.md §4).

- ``sdof --m --k --c --ks [--method roots|phase-margin]``: the single oscillator split at its
  spring; with ``--delay --predictor-order --predictor-samples --sample-time`` the interval of
  prediction horizons that keeps the compensated loop stable.
- ``chain FILE``: a lumped chain split into numerical and physical parts (see
  ``sweeps/three-mass-chain.toml`` for the format; parsed by :func:`hbtest.config.load_chain`).
- ``beam SWEEPFILE``: the beam of a sweep file (:func:`hbtest.config.load_sweep`; the PS beam
  from :func:`hbtest.design.physical_beam_for_design`) split at its interface (or at
  ``--alpha`` / over ``--alpha-grid``).

``--json`` prints one JSON object on stdout; ``--plot FILE.png`` draws a root locus over the
delay (or, with ``--alpha-grid``, the stability map over (delay, alpha)).

Sizes are bounded so that a run stays within seconds and bounded memory; beyond a bound the
command refuses with one line naming the flag (exit 2): cut-off <= ``MAX_CUTOFF_HZ``; every
searched delay (``--tau-max``, the predictor's oldest sample) times the cut-off <=
``MAX_SEARCH_CYCLES`` periods; beam meshes <= :data:`hbtest.realtime.stability.MAX_BEAM_ELEMENTS`;
``--alpha-grid`` <= ``MAX_ALPHA_POINTS`` positions; predictor order, samples and horizon
within :data:`hbtest.realtime.stability.MAX_PREDICTOR_ORDER`, ``MAX_PREDICTOR_SAMPLES`` and
:func:`hbtest.realtime.stability.max_predictor_horizon`.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, UserError
from .design import add_file_arguments

if TYPE_CHECKING:
    import numpy as np

# actuators do not follow commands above ~100 kHz; the scans sample frequencies up to the cut-off
MAX_CUTOFF_HZ = 1e5
# delays searched, in periods of the cut-off frequency: the crossing scan lists every root
# crossing up to tau_max (about f_c * tau_max per root branch) and the argument-principle count
# follows the phase of exp(-s tau) along |Im s| < 2 pi f_c (about f_c * tau turns)
MAX_SEARCH_CYCLES = 1e4
# interface positions of --alpha-grid: each costs a full crossing scan (up to ~10 s on a fine mesh)
MAX_ALPHA_POINTS = 100
DEFAULT_TAU_MAX_S = 1.0
SDOF_TAU_MAX_RADIANS = 50.0  # sdof: search at least 50 / w_n (50 rad of the natural frequency)
BEAM_MIN_ELEMENTS_PER_METRE = 40.0  # beam mesh from the file's [numerical] elements, at least this
LOCUS_DELAYS = 21  # delays drawn in a root locus
MAP_DELAYS = 200  # delays of the (delay, alpha) map
PROGRESS_EVERY = 20  # predictor search: a progress line on stderr every this many root counts


def register(sub) -> None:
    p = sub.add_parser("stability", help="critical actuator delay of a real-time hybrid test (delay/neutral equations)")
    ssub = p.add_subparsers(dest="stability_command", metavar="SYSTEM")

    def common(q, cutoff_default: float | None = 500.0):
        q.add_argument("--cutoff-hz", type=float, default=cutoff_default, metavar="F",
                       help=f"actuator cut-off frequency [Hz], at most {MAX_CUTOFF_HZ:g}: only roots below it count (default %(default)s)")
        q.add_argument("--tau-max", type=float, default=None, metavar="S",
                       help=f"largest delay searched [s] (default 1 s; sdof: 50/w_n if longer); tau-max x cutoff-hz "
                            f"at most {MAX_SEARCH_CYCLES:g} (a default beyond it is shortened to it)")
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.add_argument("--plot", metavar="FILE.png", default=None, help="save a plot (root locus over the delay, or the (delay, alpha) map)")

    q = ssub.add_parser("sdof", help="single oscillator m z'' + c z' + k z + ks z(t - tau) = 0")
    q.add_argument("--m", type=float, required=True, help="mass [kg]")
    q.add_argument("--k", type=float, required=True, help="numerical spring [N/m]")
    q.add_argument("--c", type=float, required=True, help="damper [N s/m]")
    q.add_argument("--ks", type=float, required=True, help="physical spring behind the actuator [N/m]")
    q.add_argument("--method", choices=("roots", "phase-margin"), default="roots",
                   help="characteristic roots (crossing scan) or the loop's phase margin (default roots)")
    q.add_argument("--delay", type=float, default=None, metavar="S",
                   help="actuator delay [s] for the predictor analysis (delay x cutoff-hz at most %g)" % MAX_SEARCH_CYCLES)
    q.add_argument("--predictor-order", type=int, default=None, metavar="N", help="polynomial order of the forward predictor (0..8)")
    q.add_argument("--predictor-samples", type=int, default=None, metavar="n", help="samples the predictor fits (order + 1 .. 100)")
    q.add_argument("--sample-time", type=float, default=None, metavar="DT",
                   help="sample time [s]; the oldest sample's delay x cutoff-hz at most %g, and the horizons searched "
                        "must keep the predictor weights' sum below 1e7 (round-off)" % MAX_SEARCH_CYCLES)
    q.add_argument("--rho-max", type=float, default=None, metavar="S",
                   help="search prediction horizons in [0, S] only [s] (default: from [0, 3 tau + n dt] on until the "
                        "stable interval closes, at most 2x that end)")
    common(q)
    q.set_defaults(func=run_sdof)

    q = ssub.add_parser("chain", help="lumped chain split into numerical and physical parts (TOML file)")
    add_file_arguments(q, "chain")
    common(q, cutoff_default=None)
    q.set_defaults(func=run_chain)

    q = ssub.add_parser("beam", help="split beam of a sweep file")
    add_file_arguments(q)
    g = q.add_mutually_exclusive_group()
    g.add_argument("--alpha", type=float, default=None, help="interface position L_N / L (default: the sweep file's split)")
    g.add_argument("--alpha-grid", default=None, metavar="A:B:N", help=f"N interface positions from A to B (N at most {MAX_ALPHA_POINTS})")
    q.add_argument("--elements-per-metre", type=float, default=None, metavar="E",
                   help="beam mesh density [1/m] (default from the file's [numerical] elements, at least 40); "
                        "the whole beam at most 400 elements (hbtest.realtime.stability.MAX_BEAM_ELEMENTS)")
    common(q)
    q.set_defaults(func=run_beam)
    p.set_defaults(func=lambda args: _missing_system(p))


def _missing_system(p) -> int:
    p.print_help()
    return 2


# ---------------------------------------------------------------------------------------
# checks and rendering


def _check_common(args) -> None:
    c = args.cutoff_hz
    if c is not None and not (math.isfinite(c) and c > 0):
        raise UserError(f"--cutoff-hz must be positive, got {c}")
    if c is not None and c > MAX_CUTOFF_HZ:
        raise UserError(f"--cutoff-hz {c:g} exceeds {MAX_CUTOFF_HZ:g} Hz: no actuator follows commands that fast")
    if args.tau_max is not None and not (math.isfinite(args.tau_max) and args.tau_max > 0):
        raise UserError(f"--tau-max must be positive, got {args.tau_max}")
    if args.plot is not None and not str(args.plot).lower().endswith(".png"):
        raise UserError(f"--plot needs a .png file name, got {args.plot!r}")


def _tau_max(args, default: float, cutoff_hz: float, default_name: str = "the default") -> float:
    """The delay search bound [s]: ``--tau-max`` (refused beyond ``MAX_SEARCH_CYCLES``
    cut-off periods) or ``default`` (shortened to that bound)."""
    bound = MAX_SEARCH_CYCLES / cutoff_hz
    if args.tau_max is None:
        if default > bound and default_name != "the default":
            raise UserError(f"{default_name} = {default:g} s exceeds {bound:g} s at a {cutoff_hz:g} Hz cut-off "
                            f"(delay x cut-off at most {MAX_SEARCH_CYCLES:g} periods)")
        return min(default, bound)
    if args.tau_max > bound:
        raise UserError(f"--tau-max {args.tau_max:g} s exceeds {bound:g} s at a {cutoff_hz:g} Hz cut-off: the crossing scan "
                        f"lists every root crossing up to tau-max (delay x cut-off at most {MAX_SEARCH_CYCLES:g} periods)")
    return args.tau_max


def _fmt(x, unit_scale=1.0, fmt="{:.6g}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return fmt.format(x * unit_scale)


def _jf(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _save_plot(path: str, draw) -> None:
    """Draw on a fresh Axes with ``draw(ax)`` and save the figure as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    try:
        draw(ax)
        fig.tight_layout()
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise UserError(f"--plot: cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


def _plot_locus(system, tau_c: float, tau_max: float, cutoff_hz: float, path: str, title: str) -> None:
    import numpy as np

    from ..realtime.stability import plot_root_locus

    top = 2.0 * tau_c if math.isfinite(tau_c) and tau_c > 0 else min(tau_max, 0.01)
    _save_plot(path, lambda ax: plot_root_locus(ax, system, np.linspace(0.0, top, LOCUS_DELAYS), cutoff_hz, title))


# ---------------------------------------------------------------------------------------
# sdof


def run_sdof(args) -> int:
    import numpy as np

    from ..realtime import stability as st

    _check_common(args)
    for name in ("m", "k"):
        v = getattr(args, name)
        if not (math.isfinite(v) and v > 0):
            raise UserError(f"--{name} must be positive, got {v}")
    if not (math.isfinite(args.c) and args.c >= 0):
        raise UserError(f"--c must be non-negative, got {args.c}")
    if not math.isfinite(args.ks):
        raise UserError(f"--ks must be finite, got {args.ks}")
    pred = [args.delay, args.predictor_order, args.predictor_samples, args.sample_time]
    if any(v is not None for v in pred):
        return _run_predictor(args)
    if args.rho_max is not None:
        raise UserError("--rho-max needs --delay, --predictor-order, --predictor-samples and --sample-time")
    m, k, c, ks = args.m, args.k, args.c, args.ks
    wn = math.sqrt(k / m)
    zeta = c / (2 * math.sqrt(k * m))
    p = ks / k
    tau_max = _tau_max(args, max(DEFAULT_TAU_MAX_S, SDOF_TAU_MAX_RADIANS / wn), args.cutoff_hz)
    out = dict(m_kg=m, k_n_per_m=k, c_n_s_per_m=c, ks_n_per_m=ks, p=p, zeta=zeta, natural_frequency_hz=wn / (2 * np.pi))
    out["stable_for_all_delays"] = bool(st.sdof_stable_for_all_delays(zeta, p))
    out["small_delay_estimate_s"] = _jf(st.small_delay_estimate(c, ks)) if ks > 0 else None
    if args.method == "phase-margin":
        pm = st.sdof_phase_margin(m, c, k, ks)
        out.update(method="phase-margin", critical_delay_s=_jf(pm.critical_delay_s), frequency_hz=_jf(pm.crossover_hz),
                   phase_margin_deg=_jf(pm.phase_margin_deg), crossover_hz=_jf(pm.crossover_hz))
        tau_c = pm.critical_delay_s
    else:
        cd = st.sdof_system(m, c, k, ks).critical_delay(args.cutoff_hz, tau_max=tau_max)
        out.update(method="roots", critical_delay_s=_jf(cd.delay_s), frequency_hz=_jf(cd.frequency_hz), boundary=cd.boundary,
                   cutoff_hz=args.cutoff_hz, tau_max_s=tau_max)
        tau_c = cd.delay_s
    out["tau_hat"] = _jf(tau_c * wn)
    if args.plot:
        _plot_locus(st.sdof_system(m, c, k, ks), tau_c, tau_max, args.cutoff_hz, args.plot, f"split oscillator, p = {p:.3g}, ζ = {zeta:.3g}")
    if args.json:
        print(json.dumps(out))
        return 0
    print("Split oscillator  m z'' + c z' + k z + ks z(t - tau) = 0")
    print(f"  p = ks/k = {p:.6g}, zeta = {zeta:.6g}, f_n = {wn / (2 * np.pi):.6g} Hz")
    print(f"  method: {out['method']}")
    searched = "" if out["critical_delay_s"] is not None or args.method != "roots" else f" (stable up to {tau_max:g} s)"
    print(f"  critical delay      {_fmt(out['critical_delay_s'], 1e3)} ms (tau_hat = {_fmt(out['tau_hat'])}){searched}")
    print(f"  frequency           {_fmt(out['frequency_hz'])} Hz")
    if args.method == "phase-margin":
        print(f"  phase margin        {_fmt(out['phase_margin_deg'])} deg at crossover {_fmt(out['crossover_hz'])} Hz")
    else:
        print(f"  boundary            {out['boundary']} (cut-off {args.cutoff_hz:g} Hz)")
    print(f"  estimate c/ks       {_fmt(out['small_delay_estimate_s'], 1e3)} ms")
    print(f"  stable for all delays: {'yes' if out['stable_for_all_delays'] else 'no'}")
    return 0


def _check_predictor(args) -> None:
    """Refuse predictor settings beyond the bounds of the module docstring (one line each)."""
    from ..realtime import stability as st

    tau, N, n, dt, fc = args.delay, args.predictor_order, args.predictor_samples, args.sample_time, args.cutoff_hz
    if not (math.isfinite(tau) and tau >= 0):
        raise UserError(f"--delay must be non-negative, got {tau}")
    if not (math.isfinite(dt) and dt > 0):
        raise UserError(f"--sample-time must be positive, got {dt}")
    if not 0 <= N <= st.MAX_PREDICTOR_ORDER:
        raise UserError(f"--predictor-order must lie in 0..{st.MAX_PREDICTOR_ORDER} (higher orders make the least-squares fit ill-conditioned), got {N}")
    if n < N + 1:
        raise UserError(f"--predictor-samples must be at least order + 1 = {N + 1}, got {n}")
    if n > st.MAX_PREDICTOR_SAMPLES:
        raise UserError(f"--predictor-samples {n} exceeds {st.MAX_PREDICTOR_SAMPLES}: every sample is one delayed term of the equation")
    cycles = MAX_SEARCH_CYCLES / fc
    if tau > cycles:
        raise UserError(f"--delay {tau:g} s exceeds {cycles:g} s at a {fc:g} Hz cut-off (delay x cut-off at most {MAX_SEARCH_CYCLES:g} periods: root counting)")
    oldest = tau + (n - 1) * dt
    if oldest > cycles:
        raise UserError(f"--sample-time {dt:g} s puts the oldest of {n} samples {oldest:g} s back, beyond {cycles:g} s at a "
                        f"{fc:g} Hz cut-off (delay x cut-off at most {MAX_SEARCH_CYCLES:g} periods: root counting)")
    h_max = st.max_predictor_horizon(N, n, dt)
    if args.rho_max is not None:
        if not (math.isfinite(args.rho_max) and args.rho_max > 0):
            raise UserError(f"--rho-max must be positive, got {args.rho_max}")
        if args.rho_max > h_max:
            raise UserError(f"--rho-max {args.rho_max:g} s exceeds {h_max:g} s, where the order-{N} predictor's weights sum to "
                            f"{st.MAX_PREDICTOR_GAIN:g} (the prediction drowns in round-off)")
    elif 3 * tau + n * dt > h_max:
        h_samples = h_max / dt
        dt_min = 3 * tau / max(h_samples - n, 1e-300)
        raise UserError(f"--sample-time {dt:g} s: horizons up to {3 * tau + n * dt:g} s are {(3 * tau + n * dt) / dt:.3g} samples ahead, "
                        f"where the order-{N} predictor's weights sum beyond {st.MAX_PREDICTOR_GAIN:g} (round-off); "
                        f"use --sample-time >= {dt_min:.3g} s or --rho-max <= {h_max:.3g} s")


def _run_predictor(args) -> int:
    from ..realtime import stability as st

    names = dict(delay="--delay", predictor_order="--predictor-order", predictor_samples="--predictor-samples", sample_time="--sample-time")
    missing = [opt for attr, opt in names.items() if getattr(args, attr) is None]
    if missing:
        raise UserError(f"the predictor analysis also needs {', '.join(missing)}")
    if args.method != "roots":
        raise UserError("--method phase-margin does not apply to the predictor analysis")
    _check_predictor(args)
    tau, N, n, dt = args.delay, args.predictor_order, args.predictor_samples, args.sample_time
    system = st.sdof_system(args.m, args.c, args.k, args.ks)
    rho_range = None if args.rho_max is None else (0.0, args.rho_max)
    counts = []

    def progress(rho, stable):
        counts.append(stable)
        if len(counts) % PROGRESS_EVERY == 0:
            print(f"hbtest: {len(counts)} root counts, horizon {rho * 1e3:.4g} ms {'stable' if stable else 'unstable'}", file=sys.stderr)

    try:
        res = st.prediction_intervals(system, tau, N, n, dt, rho_range=rho_range, cutoff_hz=args.cutoff_hz, progress=progress)
    except RuntimeError as e:  # the argument principle failed (a root on the contour, or round-off)
        raise UserError(f"--sample-time {dt:g} s / horizons to {args.rho_max or 'the default bound'}: the root count failed ({e}); "
                        "change the sample time or --rho-max") from None
    intervals = list(res.intervals)
    chosen = res.containing(tau) or (intervals[0] if intervals else None)  # the one holding rho = tau, else the first
    rho_hi = res.search_range_s[1]
    clipped = bool(chosen is not None and res.open_end and chosen == intervals[-1])
    out = dict(
        delay_s=tau, predictor_order=N, predictor_samples=n, sample_time_s=dt, cutoff_hz=args.cutoff_hz,
        stable_prediction_interval_s=list(chosen) if chosen else None,
        stable_intervals_s=[list(iv) for iv in intervals],
        search_range_s=list(res.search_range_s),
        upper_end_clipped=clipped,
        search_hard_bound=bool(clipped and res.hard_bound),
        weights_at_delay=st.polynomial_predictor_weights(N, n, tau / dt).tolist(),
    )
    if args.plot:
        _plot_locus(system, tau, args.tau_max or DEFAULT_TAU_MAX_S, args.cutoff_hz, args.plot, "split oscillator (uncompensated)")
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Polynomial forward predictor: order {N} through {n} samples, dt = {dt * 1e3:g} ms; actuator delay {tau * 1e3:g} ms")
    if not intervals:
        print(f"  no stable horizon in [0, {rho_hi * 1e3:g}] ms")
        return 0
    print(f"  {'stable horizon rho [ms]':>26}")
    for iv in intervals:
        lo, hi = iv
        mark = "  <- holds rho = tau" if lo <= tau <= hi else ""
        clip = ""
        if res.open_end and iv == intervals[-1]:
            clip = " (still stable at the search's hard bound)" if res.hard_bound else " (end of --rho-max range)"
        print(f"  {lo * 1e3:>11.4f} .. {hi * 1e3:<11.4f}{clip}{mark}")
    return 0


# ---------------------------------------------------------------------------------------
# chain


def run_chain(args) -> int:
    from ..config import load_chain
    from ..realtime import stability as st

    _check_common(args)
    cfg = load_chain(args.file, args.overrides)
    if args.cutoff_hz is None and cfg.cutoff_hz > MAX_CUTOFF_HZ:
        raise ConfigError(args.file, "stability.cutoff_hz", f"{cfg.cutoff_hz:g} exceeds {MAX_CUTOFF_HZ:g} Hz: no actuator follows commands that fast")
    cutoff = args.cutoff_hz if args.cutoff_hz is not None else cfg.cutoff_hz
    tau_max = _tau_max(args, cfg.tau_max_s, cutoff, default_name=f"{args.file}: stability.tau_max_s")
    try:
        system = st.chain_hybrid(**cfg.chain_kwargs())
    except ValueError as e:
        raise ConfigError(args.file, "split", str(e)) from None
    cd = system.critical_delay(cutoff, tau_max=tau_max)
    out = dict(file=str(args.file), interface=[f"x{i}" for i in cfg.interface], **cd.to_dict(), tau_max_s=tau_max,
               neutral=system.is_neutral)
    if args.plot:
        _plot_locus(system, cd.delay_s, tau_max, cutoff, args.plot, f"chain {Path(args.file).name}")
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Lumped chain {args.file}: actuated DOFs {', '.join(out['interface'])} (one delay), "
          f"{'neutral' if system.is_neutral else 'retarded'} equation")
    print(f"  cut-off             {cutoff:g} Hz")
    print(f"  critical delay      {_fmt(cd.delay_s, 1e3)} ms" + ("" if math.isfinite(cd.delay_s) else f" (stable up to {tau_max:g} s)"))
    print(f"  frequency           {_fmt(cd.frequency_hz)} Hz")
    print(f"  boundary            {cd.boundary}")
    return 0


# ---------------------------------------------------------------------------------------
# beam


def _alpha_grid(text: str) -> np.ndarray:
    import numpy as np

    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise UserError(f"--alpha-grid must be A:B:N (e.g. 0.1:0.9:9), got {text!r}") from None
    if not (0 < a < 1 and 0 < b < 1) or n < 1:
        raise UserError(f"--alpha-grid: A and B must lie in (0, 1) and N >= 1, got {text!r}")
    if n > MAX_ALPHA_POINTS:
        raise UserError(f"--alpha-grid: N = {n} exceeds {MAX_ALPHA_POINTS} positions (each costs a full crossing scan)")
    return np.linspace(a, b, n)


def _beam_spec(args) -> dict:
    """The split beam of the sweep file, as keyword arguments of
    :func:`hbtest.realtime.stability.beam_hybrid` plus ``total_length`` and ``interface_at`` [m]."""
    from ..config import load_sweep
    from ..design import physical_beam_for_design
    from ..realtime.stability import BEAM_SECTION_KEYS

    cfg = load_sweep(args.file, args.overrides)
    nb = cfg.numerical.beam
    pb, _ = physical_beam_for_design(cfg)
    physical = {key: getattr(pb, key) for key in BEAM_SECTION_KEYS if getattr(pb, key) != getattr(nb, key)}
    if args.elements_per_metre is not None:
        epm = args.elements_per_metre
        if not (math.isfinite(epm) and epm > 0):
            raise UserError(f"--elements-per-metre must be positive, got {epm}")
    else:
        epm = max(BEAM_MIN_ELEMENTS_PER_METRE, nb.elements / nb.length)
    spec = dict(width=nb.width, thickness=nb.thickness, youngs_modulus=nb.youngs_modulus, density=nb.density,
                zeta_mass=nb.zeta_mass, zeta_stiffness=nb.zeta_stiffness, root=cfg.numerical.root, physical=physical,
                elements_per_metre=epm)
    return dict(spec, total_length=nb.length + pb.length, interface_at=nb.length)


def _alphas(args, split: float) -> np.ndarray:
    """The interface positions (fractions of the length) of ``--alpha-grid``, else ``--alpha``,
    else the file's ``split``."""
    import numpy as np

    if args.alpha_grid is not None:
        return _alpha_grid(args.alpha_grid)
    if args.alpha is not None:
        if not 0 < args.alpha < 1:
            raise UserError(f"--alpha must lie in (0, 1), got {args.alpha}")
        return np.array([args.alpha])
    return np.array([split])


def run_beam(args) -> int:
    import numpy as np

    from ..realtime import stability as st

    _check_common(args)
    spec = _beam_spec(args)
    L = spec.pop("total_length")
    interface_at = spec.pop("interface_at")
    alphas = _alphas(args, interface_at / L)
    epm = spec["elements_per_metre"]
    n_el = max(st.beam_elements(L, a * L, epm) for a in alphas)
    if n_el > st.MAX_BEAM_ELEMENTS:
        source = "--elements-per-metre" if args.elements_per_metre is not None else f"{args.file}: numerical.elements"
        raise UserError(f"{source}: {epm:g} elements per metre give {n_el} elements over the {L * 1e3:g} mm beam, "
                        f"more than {st.MAX_BEAM_ELEMENTS} (dense characteristic matrix)")
    tau_max = _tau_max(args, DEFAULT_TAU_MAX_S, args.cutoff_hz)

    def build(a, **extra):
        try:
            return st.beam_hybrid(L, a * L, **spec, **extra)
        except ValueError as e:
            raise ConfigError(args.file, "numerical", str(e)) from None

    results = []
    for i, a in enumerate(alphas):
        results.append(build(a).critical_delay(args.cutoff_hz, tau_max=tau_max))
        if alphas.size > 1:
            print(f"hbtest: alpha {i + 1}/{alphas.size} = {a:.4f}: critical delay {_fmt(results[-1].delay_s, 1e3)} ms", file=sys.stderr)
    if args.plot:
        if alphas.size > 1:
            finite = [r.delay_s for r in results if math.isfinite(r.delay_s)]
            top = 3.0 * max(finite) if finite else tau_max
            dm = st.delay_map(build, alphas, np.linspace(0.0, top, MAP_DELAYS), args.cutoff_hz)
            _save_plot(args.plot, lambda ax: st.plot_delay_map(ax, dm))
        else:
            red = build(alphas[0], modes_up_to_hz=3 * args.cutoff_hz)
            _plot_locus(red, results[0].delay_s, tau_max, args.cutoff_hz, args.plot,
                        f"split beam, alpha = {alphas[0]:.3g} (Craig–Bampton, modes < {3 * args.cutoff_hz:g} Hz)")
    if args.json:
        if args.alpha_grid is None:
            out = dict(file=str(args.file), alpha=float(alphas[0]), interface_mm=float(alphas[0] * L * 1e3),
                       total_length_mm=L * 1e3, **results[0].to_dict())
        else:
            out = dict(file=str(args.file), total_length_mm=L * 1e3, cutoff_hz=args.cutoff_hz, alpha=alphas.tolist(),
                       interface_mm=(alphas * L * 1e3).tolist(),
                       critical_delay_s=[_jf(r.delay_s) for r in results], frequency_hz=[_jf(r.frequency_hz) for r in results],
                       boundary=[r.boundary for r in results])
        print(json.dumps(out))
        return 0
    print(f"Split beam of {args.file}: L = {L * 1e3:g} mm, cut-off {args.cutoff_hz:g} Hz")
    print(f"  {'alpha':>7} {'interface mm':>12} {'tau_c ms':>10} {'f Hz':>9}  boundary")
    for a, r in zip(alphas, results):
        print(f"  {a:>7.4f} {a * L * 1e3:>12.2f} {_fmt(r.delay_s, 1e3, '{:.4f}'):>10} {_fmt(r.frequency_hz, 1, '{:.2f}'):>9}  {r.boundary}")
    return 0

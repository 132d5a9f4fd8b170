"""``hbtest stability {sdof,chain,beam}``: critical delays of real-time hybrid tests (SPEC §4).

- ``sdof --m --k --c --ks [--method roots|phase-margin]``: the single oscillator split at its
  spring; with ``--delay --predictor-order --predictor-samples --sample-time`` the interval of
  prediction horizons that keeps the compensated loop stable.
- ``chain FILE``: a lumped chain split into numerical and physical parts (see
  ``sweeps/three-mass-chain.toml`` for the format).
- ``beam SWEEPFILE``: the beam of a sweep file split at its interface (or at ``--alpha`` /
  over ``--alpha-grid``).

``--json`` prints one JSON object on stdout; ``--plot FILE.png`` draws a root locus over the
delay (or, with ``--alpha-grid``, the stability map over (delay, alpha)).
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import numpy as np

from ..errors import ConfigError, UserError


def register(sub) -> None:
    p = sub.add_parser("stability", help="critical actuator delay of a real-time hybrid test (delay/neutral equations)")
    ssub = p.add_subparsers(dest="stability_command", metavar="SYSTEM")

    def common(q, cutoff_default: float | None = 500.0):
        q.add_argument("--cutoff-hz", type=float, default=cutoff_default, metavar="F",
                       help="actuator cut-off frequency [Hz]: only roots below it count (default %(default)s)")
        q.add_argument("--tau-max", type=float, default=None, metavar="S",
                       help="largest delay searched [s] (default 1 s; sdof: 50/w_n if longer)")
        q.add_argument("--json", action="store_true", help="print one JSON object")
        q.add_argument("--plot", metavar="FILE.png", default=None, help="save a plot (root locus over the delay, or the (delay, alpha) map)")

    q = ssub.add_parser("sdof", help="single oscillator m z'' + c z' + k z + ks z(t - tau) = 0")
    q.add_argument("--m", type=float, required=True, help="mass [kg]")
    q.add_argument("--k", type=float, required=True, help="numerical spring [N/m]")
    q.add_argument("--c", type=float, required=True, help="damper [N s/m]")
    q.add_argument("--ks", type=float, required=True, help="physical spring behind the actuator [N/m]")
    q.add_argument("--method", choices=("roots", "phase-margin"), default="roots",
                   help="characteristic roots (crossing scan) or the loop's phase margin (default roots)")
    q.add_argument("--delay", type=float, default=None, metavar="S", help="actuator delay [s] for the predictor analysis")
    q.add_argument("--predictor-order", type=int, default=None, metavar="N", help="polynomial order of the forward predictor")
    q.add_argument("--predictor-samples", type=int, default=None, metavar="n", help="samples the predictor fits")
    q.add_argument("--sample-time", type=float, default=None, metavar="DT", help="sample time [s]")
    q.add_argument("--rho-max", type=float, default=None, metavar="S", help="largest prediction horizon searched [s] (default 3 tau + n dt)")
    common(q)
    q.set_defaults(func=run_sdof)

    q = ssub.add_parser("chain", help="lumped chain split into numerical and physical parts (TOML file)")
    q.add_argument("file", metavar="FILE", help="chain definition (TOML), e.g. sweeps/three-mass-chain.toml")
    common(q, cutoff_default=None)
    q.set_defaults(func=run_chain)

    q = ssub.add_parser("beam", help="split beam of a sweep file")
    q.add_argument("file", metavar="SWEEPFILE", help="sweep definition file (TOML)")
    g = q.add_mutually_exclusive_group()
    g.add_argument("--alpha", type=float, default=None, help="interface position L_N / L (default: the sweep file's split)")
    g.add_argument("--alpha-grid", default=None, metavar="A:B:N", help="N interface positions from A to B")
    q.add_argument("--elements-per-metre", type=float, default=None, metavar="E",
                   help="beam mesh density [1/m] (default from the file's [numerical] elements, at least 40)")
    common(q)
    q.set_defaults(func=run_beam)
    p.set_defaults(func=lambda args: _missing_system(p))


def _missing_system(p) -> int:
    p.print_help()
    return 2


# ---------------------------------------------------------------------------------------
# helpers


def _check_common(args) -> None:
    if args.cutoff_hz is not None and not (math.isfinite(args.cutoff_hz) and args.cutoff_hz > 0):
        raise UserError(f"--cutoff-hz must be positive, got {args.cutoff_hz}")
    if args.tau_max is not None and not (math.isfinite(args.tau_max) and args.tau_max > 0):
        raise UserError(f"--tau-max must be positive, got {args.tau_max}")
    if args.plot is not None and not str(args.plot).lower().endswith(".png"):
        raise UserError(f"--plot needs a .png file name, got {args.plot!r}")


def _fmt(x, unit_scale=1.0, fmt="{:.6g}") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return fmt.format(x * unit_scale)


def _jf(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _plot_locus(system, tau_c: float, tau_max: float, cutoff_hz: float, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..stability import root_locus

    top = 2.0 * tau_c if math.isfinite(tau_c) and tau_c > 0 else min(tau_max, 0.01)
    delays = np.linspace(0.0, top, 21)
    wc = 2 * np.pi * cutoff_hz
    roots = root_locus(system, delays, cutoff_hz, sigma_min=-0.5 * wc)
    fig, ax = plt.subplots(figsize=(7, 5))
    cmap = plt.get_cmap("viridis")
    for d, r in zip(delays, roots):
        r = r[r.imag >= 0]
        ax.plot(r.real, r.imag / (2 * np.pi), "o", ms=3, color=cmap(d / top if top > 0 else 0))
    ax.axvline(0.0, color="k", lw=0.8)
    ax.axhline(cutoff_hz, color="r", lw=0.8, ls="--", label=f"cut-off {cutoff_hz:g} Hz")
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, top * 1e3))
    fig.colorbar(sm, ax=ax, label="delay [ms]")
    ax.set_xlabel("Re s [1/s]")
    ax.set_ylabel("Im s / 2π [Hz]")
    ax.set_title(title)
    ax.legend(loc="lower left")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except OSError as e:
        raise UserError(f"--plot: cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


# ---------------------------------------------------------------------------------------
# sdof


def run_sdof(args) -> int:
    from .. import stability as st

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
    tau_max = args.tau_max or max(1.0, 50.0 / wn)
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
        out.update(method="roots", critical_delay_s=_jf(cd.delay_s), frequency_hz=_jf(cd.frequency_hz), boundary=cd.boundary, cutoff_hz=args.cutoff_hz)
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
    print(f"  critical delay      {_fmt(out['critical_delay_s'], 1e3)} ms (tau_hat = {_fmt(out['tau_hat'])})")
    print(f"  frequency           {_fmt(out['frequency_hz'])} Hz")
    if args.method == "phase-margin":
        print(f"  phase margin        {_fmt(out['phase_margin_deg'])} deg at crossover {_fmt(out['crossover_hz'])} Hz")
    else:
        print(f"  boundary            {out['boundary']} (cut-off {args.cutoff_hz:g} Hz)")
    print(f"  estimate c/ks       {_fmt(out['small_delay_estimate_s'], 1e3)} ms")
    print(f"  stable for all delays: {'yes' if out['stable_for_all_delays'] else 'no'}")
    return 0


def _run_predictor(args) -> int:
    from .. import stability as st

    names = dict(delay="--delay", predictor_order="--predictor-order", predictor_samples="--predictor-samples", sample_time="--sample-time")
    missing = [opt for attr, opt in names.items() if getattr(args, attr) is None]
    if missing:
        raise UserError(f"the predictor analysis also needs {', '.join(missing)}")
    if args.method != "roots":
        raise UserError("--method phase-margin does not apply to the predictor analysis")
    tau, N, n, dt = args.delay, args.predictor_order, args.predictor_samples, args.sample_time
    if not (math.isfinite(tau) and tau >= 0):
        raise UserError(f"--delay must be non-negative, got {tau}")
    if not (math.isfinite(dt) and dt > 0):
        raise UserError(f"--sample-time must be positive, got {dt}")
    if N < 0:
        raise UserError(f"--predictor-order must be non-negative, got {N}")
    if n < N + 1:
        raise UserError(f"--predictor-samples must be at least order + 1 = {N + 1}, got {n}")
    rho_hi = args.rho_max if args.rho_max is not None else 3 * tau + n * dt
    if not (math.isfinite(rho_hi) and rho_hi > 0):
        raise UserError(f"--rho-max must be positive, got {rho_hi}")
    system = st.sdof_system(args.m, args.c, args.k, args.ks)
    intervals = st.stable_prediction_intervals(system, tau, N, n, dt, rho_range=(0.0, rho_hi), cutoff_hz=args.cutoff_hz)
    chosen = None
    for lo, hi in intervals:  # the interval holding rho = tau (ideal compensation), else the first
        if lo <= tau <= hi:
            chosen = (lo, hi)
    if chosen is None and intervals:
        chosen = intervals[0]
    out = dict(
        delay_s=tau, predictor_order=N, predictor_samples=n, sample_time_s=dt, cutoff_hz=args.cutoff_hz,
        stable_prediction_interval_s=list(chosen) if chosen else None,
        stable_intervals_s=[list(iv) for iv in intervals],
        search_range_s=[0.0, rho_hi],
        upper_end_clipped=bool(chosen is not None and chosen[1] >= rho_hi),
        weights_at_delay=st.polynomial_predictor_weights(N, n, tau / dt).tolist(),
    )
    if args.plot:
        _plot_locus(system, tau, args.tau_max or 1.0, args.cutoff_hz, args.plot, "split oscillator (uncompensated)")
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"Polynomial forward predictor: order {N} through {n} samples, dt = {dt * 1e3:g} ms; actuator delay {tau * 1e3:g} ms")
    if not intervals:
        print(f"  no stable horizon in [0, {rho_hi * 1e3:g}] ms")
        return 0
    print(f"  {'stable horizon rho [ms]':>26}")
    for lo, hi in intervals:
        mark = "  <- holds rho = tau" if lo <= tau <= hi else ""
        clip = " (end of search range)" if hi >= rho_hi else ""
        print(f"  {lo * 1e3:>11.4f} .. {hi * 1e3:<11.4f}{clip}{mark}")
    return 0


# ---------------------------------------------------------------------------------------
# chain


def _read_toml(path: str) -> dict:
    p = Path(path)
    try:
        with open(p, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(str(path), "", f"invalid TOML: {e}") from None


def _numbers(src, sec: dict, section: str, key: str, required=True, default=None, nonneg=True) -> list[float] | None:
    if key not in sec:
        if required:
            raise ConfigError(src, f"{section}.{key}", "missing")
        return default
    v = sec[key]
    if not isinstance(v, list) or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
        raise ConfigError(src, f"{section}.{key}", "must be a list of numbers")
    if not all(math.isfinite(x) for x in v) or (nonneg and any(x < 0 for x in v)):
        raise ConfigError(src, f"{section}.{key}", "values must be finite and non-negative")
    return [float(x) for x in v]


def read_chain(path: str) -> dict:
    """Read a lumped-chain definition (see ``sweeps/three-mass-chain.toml``). Returns the
    keyword arguments of :func:`hbtest.stability.chain_hybrid` plus ``cutoff_hz``/``tau_max``
    defaults from the optional ``[stability]`` table."""
    data = _read_toml(path)
    src = str(path)
    known_top = {"name", "description", "chain", "split", "stability"}
    for key in data:
        if key not in known_top:
            raise ConfigError(src, key, f"unknown key; expected one of {sorted(known_top)}")
    ch = data.get("chain")
    if not isinstance(ch, dict):
        raise ConfigError(src, "chain", "missing [chain] table")
    known = {"masses_kg", "springs_n_per_m", "dampers_n_s_per_m", "left_wall", "right_wall"}
    for key in ch:
        if key not in known:
            raise ConfigError(src, f"chain.{key}", f"unknown key; expected one of {sorted(known)}")
    masses = _numbers(src, ch, "chain", "masses_kg")
    springs = _numbers(src, ch, "chain", "springs_n_per_m")
    dampers = _numbers(src, ch, "chain", "dampers_n_s_per_m", required=False)
    walls = {}
    for key, default in (("left_wall", True), ("right_wall", False)):
        v = ch.get(key, default)
        if not isinstance(v, bool):
            raise ConfigError(src, f"chain.{key}", "must be true or false")
        walls[key] = v
    n = len(masses)
    if n == 0:
        raise ConfigError(src, "chain.masses_kg", "needs at least one mass")
    n_links = n - 1 + int(walls["left_wall"]) + int(walls["right_wall"])
    if len(springs) != n_links:
        raise ConfigError(src, "chain.springs_n_per_m", f"{n} masses with these walls need {n_links} springs, got {len(springs)}")
    if dampers is not None and len(dampers) != n_links:
        raise ConfigError(src, "chain.dampers_n_s_per_m", f"needs {n_links} values, got {len(dampers)}")
    sp = data.get("split")
    if not isinstance(sp, dict):
        raise ConfigError(src, "split", "missing [split] table")
    known = {"interface", "physical_masses", "physical_links"}
    for key in sp:
        if key not in known:
            raise ConfigError(src, f"split.{key}", f"unknown key; expected one of {sorted(known)}")

    def dofs(key, required):
        if key not in sp:
            if required:
                raise ConfigError(src, f"split.{key}", "missing")
            return []
        v = sp[key]
        if not isinstance(v, list):
            raise ConfigError(src, f"split.{key}", "must be a list of DOF names (x0, x1, ...) or indices")
        out = []
        for x in v:
            if isinstance(x, str) and x.startswith("x") and x[1:].isdigit():
                i = int(x[1:])
            elif isinstance(x, int) and not isinstance(x, bool):
                i = x
            else:
                raise ConfigError(src, f"split.{key}", f"{x!r} is not a DOF name like 'x0' or an index")
            if not 0 <= i < n:
                raise ConfigError(src, f"split.{key}", f"DOF {x!r} outside x0..x{n - 1}")
            out.append(i)
        return out

    interface = dofs("interface", True)
    physical_masses = dofs("physical_masses", False)
    links = sp.get("physical_links", [])
    if not isinstance(links, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in links):
        raise ConfigError(src, "split.physical_links", "must be a list of link indices")
    for i in links:
        if not 0 <= i < n_links:
            raise ConfigError(src, "split.physical_links", f"link {i} outside 0..{n_links - 1}")
    stab = data.get("stability", {})
    if not isinstance(stab, dict):
        raise ConfigError(src, "stability", "must be a table")
    for key in stab:
        if key not in ("cutoff_hz", "tau_max_s"):
            raise ConfigError(src, f"stability.{key}", "unknown key; expected cutoff_hz or tau_max_s")
    defaults = {}
    for key in ("cutoff_hz", "tau_max_s"):
        if key in stab:
            v = stab[key]
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not (math.isfinite(v) and v > 0):
                raise ConfigError(src, f"stability.{key}", "must be a positive number")
            defaults[key] = float(v)
    return dict(
        masses=masses, springs=springs, dampers=dampers, interface=interface, physical_masses=physical_masses,
        physical_links=links, cutoff_hz=defaults.get("cutoff_hz", 500.0), tau_max=defaults.get("tau_max_s", 1.0), **walls,
    )


def run_chain(args) -> int:
    from .. import stability as st

    _check_common(args)
    spec = read_chain(args.file)
    cutoff = args.cutoff_hz if args.cutoff_hz is not None else spec.pop("cutoff_hz")
    spec.pop("cutoff_hz", None)
    tau_max = args.tau_max if args.tau_max is not None else spec.pop("tau_max")
    spec.pop("tau_max", None)
    try:
        system = st.chain_hybrid(**spec)
    except ValueError as e:
        raise ConfigError(args.file, "split", str(e)) from None
    cd = system.critical_delay(cutoff, tau_max=tau_max)
    out = dict(file=str(args.file), interface=[f"x{i}" for i in spec["interface"]], **cd.to_dict(), tau_max_s=tau_max,
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


_BEAM_KEYS = (
    ("width_mm", "width", 1e-3),
    ("thickness_mm", "thickness", 1e-3),
    ("youngs_modulus_gpa", "youngs_modulus", 1e9),
    ("density_kg_m3", "density", 1.0),
    ("zeta_mass_per_s", "zeta_mass", 1.0),
    ("zeta_stiffness_s", "zeta_stiffness", 1.0),
)


def _read_sweep_beam(path: str) -> dict:
    """The split beam of a sweep file, in SI units: ``total_length``, ``interface_at``, NS
    section/material (``width, thickness, youngs_modulus, density, zeta_mass,
    zeta_stiffness``), ``physical`` (PS overrides, possibly empty), ``elements_per_metre``.

    Reads ``[numerical]`` (``length_mm, width_mm, thickness_mm, youngs_modulus_gpa,
    density_kg_m3, zeta_mass_per_s, zeta_stiffness_s``, optional ``elements``) and the PS tip
    from the sweep's ``[physical]`` table (``length_mm``; section/material keys optional,
    defaulting to the NS), else ``[design.physical]``, else the rig file's ``[physical]``.
    Isolated here until ``hbtest.config.load_sweep`` provides it."""
    data = _read_toml(path)
    src = str(path)
    num = data.get("numerical")
    if not isinstance(num, dict):
        raise ConfigError(src, "numerical", "missing [numerical] table")

    def number(sec, sname, key, scale, positive=True, default=None, source=src):
        if key not in sec:
            if default is not None:
                return default
            raise ConfigError(source, f"{sname}.{key}", "missing")
        v = sec[key]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or (v <= 0 if positive else v < 0):
            raise ConfigError(source, f"{sname}.{key}", f"must be a {'positive' if positive else 'non-negative'} number, got {v!r}")
        return float(v) * scale

    ln = number(num, "numerical", "length_mm", 1e-3)
    ns = {}
    for key, attr, scale in _BEAM_KEYS:
        damping = attr.startswith("zeta")
        ns[attr] = number(num, "numerical", key, scale, positive=not damping, default=0.0 if damping else None)
    kind = num.get("kind", "beam")
    if kind != "beam":
        raise ConfigError(src, "numerical.kind", f"the beam stability analysis needs kind = \"beam\", got {kind!r}")
    root = num.get("root", "clamped")
    phys, psrc, pname = None, src, "physical"
    if isinstance(data.get("physical"), dict):
        phys = data["physical"]
    elif isinstance(data.get("design"), dict) and isinstance(data["design"].get("physical"), dict):
        phys, pname = data["design"]["physical"], "design.physical"
    elif isinstance(data.get("rig"), str):
        rig_path = (Path(path).parent / data["rig"]).resolve()
        if not rig_path.exists():
            raise ConfigError(src, "physical.length_mm", f"missing, and the rig file {data['rig']} (for its [physical] beam) does not exist")
        rig = _read_toml(str(rig_path))
        if not isinstance(rig.get("physical"), dict):
            raise ConfigError(str(rig_path), "physical", "missing [physical] table (the PS beam)")
        phys, psrc = rig["physical"], str(rig_path)
    if phys is None:
        raise ConfigError(src, "physical.length_mm", "missing (the physical tip length)")
    lp = number(phys, pname, "length_mm", 1e-3, source=psrc)
    ps = {}
    for key, attr, scale in _BEAM_KEYS:
        if key in phys:
            v = number(phys, pname, key, scale, positive=not attr.startswith("zeta"), source=psrc)
            if v != ns[attr]:
                ps[attr] = v
    epm = 60.0
    if "elements" in num:
        e = num["elements"]
        if not isinstance(e, int) or isinstance(e, bool) or e < 1:
            raise ConfigError(src, "numerical.elements", f"must be a positive integer, got {e!r}")
        epm = max(40.0, e / ln)
    return dict(total_length=ln + lp, interface_at=ln, root=root, physical=ps, elements_per_metre=epm, **ns)


def _alpha_grid(text: str) -> np.ndarray:
    parts = text.split(":")
    try:
        if len(parts) != 3:
            raise ValueError
        a, b, n = float(parts[0]), float(parts[1]), int(parts[2])
    except ValueError:
        raise UserError(f"--alpha-grid must be A:B:N (e.g. 0.1:0.9:9), got {text!r}") from None
    if not (0 < a < 1 and 0 < b < 1) or n < 1:
        raise UserError(f"--alpha-grid: A and B must lie in (0, 1) and N >= 1, got {text!r}")
    return np.linspace(a, b, n)


def run_beam(args) -> int:
    from .. import stability as st

    _check_common(args)
    spec = _read_sweep_beam(args.file)
    L = spec["total_length"]
    if args.elements_per_metre is not None:
        if not (math.isfinite(args.elements_per_metre) and args.elements_per_metre > 0):
            raise UserError(f"--elements-per-metre must be positive, got {args.elements_per_metre}")
        spec["elements_per_metre"] = args.elements_per_metre
    if args.alpha_grid is not None:
        alphas = _alpha_grid(args.alpha_grid)
    elif args.alpha is not None:
        if not 0 < args.alpha < 1:
            raise UserError(f"--alpha must lie in (0, 1), got {args.alpha}")
        alphas = np.array([args.alpha])
    else:
        alphas = np.array([spec["interface_at"] / L])
    tau_max = args.tau_max or 1.0
    kw = {k: spec[k] for k in ("width", "thickness", "youngs_modulus", "density", "zeta_mass", "zeta_stiffness", "elements_per_metre", "physical", "root")}

    def build(a, **extra):
        try:
            return st.beam_hybrid(L, a * L, **kw, **extra)
        except ValueError as e:
            raise ConfigError(args.file, "numerical", str(e)) from None

    results = []
    for a in alphas:
        cd = build(a).critical_delay(args.cutoff_hz, tau_max=tau_max)
        results.append(cd)
    if args.plot:
        if alphas.size > 1:
            _plot_map(build, alphas, results, args, L)
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


def _plot_map(build, alphas, results, args, L) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..stability import delay_map

    finite = [r.delay_s for r in results if math.isfinite(r.delay_s)]
    top = 3.0 * max(finite) if finite else (args.tau_max or 0.01)
    delays = np.linspace(0.0, top, 200)
    dm = delay_map(build, alphas, delays, args.cutoff_hz)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.pcolormesh(delays * 1e3, alphas, dm.unstable_roots, shading="nearest", cmap="Reds")
    ax.plot(dm.critical_delay_s * 1e3, alphas, "k.-", label="critical delay")
    ax.set_xlabel("delay τ [ms]")
    ax.set_ylabel("α = L_N / L")
    ax.set_title(f"unstable roots below {args.cutoff_hz:g} Hz (white: stable)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    try:
        fig.savefig(args.plot, dpi=120)
    except OSError as e:
        raise UserError(f"--plot: cannot write {args.plot}: {e.strerror or e}") from None
    finally:
        plt.close(fig)

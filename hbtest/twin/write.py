"""The twin's rig file: a ``virtual`` rig file whose every fitted value carries a comment naming
the measurement it came from and its standard uncertainty (:class:`~hbtest.twin.fit.Quantity`).

Taken as text, not measured (and said so in the file): ``[sensors]`` and ``[physical]`` from the
user's rig file (the nominal calibration and geometry the reduction uses), the mechanics
(``[virtual]``'s scalars, ``[virtual.clamp]``, ``[virtual.friction]``, ``[[virtual.shakers]]``,
``[[virtual.nonlinear]]``) from the template (the rig file itself when it is virtual, else the
reference twin), and the mains drift's amplitude and period from the template.
"""

from __future__ import annotations

import re

import numpy as np

__all__ = ["twin_text", "blocks"]

_HEADER = re.compile(r"^\s*\[\[?\s*([A-Za-z0-9_.\-]+)\s*\]\]?")
#: tables copied from the template: the mechanics (never its noise, mains, scatter, ADC, true sensors)
MECHANICS = ("virtual", "virtual.clamp", "virtual.friction", "virtual.shakers", "virtual.nonlinear")


def blocks(text: str) -> list[tuple[str, str]]:
    """(table name, its text: header line to the next header) of a TOML file, in order."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for line in text.splitlines():
        m = _HEADER.match(line)
        if m:
            out.append((m.group(1), []))
        out[-1][1].append(line)
    return [(name, "\n".join(lines).rstrip() + "\n") for name, lines in out if name]


def _copied(text: str, keep) -> str:
    return "\n".join(body for name, body in blocks(text) if keep(name))


def _num(x: float) -> str:
    return f"{float(x):.6g}"


def _matrix(m) -> str:
    return "[" + ", ".join("[" + ", ".join(_num(x) for x in row) + "]" for row in np.asarray(m)) + "]"


def _line(key: str, value: str, q=None, text: str = "") -> str:
    comment = q.comment() if q is not None else text
    return f"{key} = {value}" + (f"   # {comment}" if comment else "")


def _mix(C: np.ndarray) -> tuple[float, np.ndarray]:
    """rms of the first channel and the lower-triangular mix with ``rms^2 mix mix^T = C``."""
    w, v = np.linalg.eigh(C)
    C = (v * np.maximum(w, 1e-30 * max(w.max(), 1e-300))) @ v.T
    L = np.linalg.cholesky(C)
    return float(L[0, 0]), L / L[0, 0]


def _noise_table(params: dict, layout, qd: dict) -> list[str]:
    nz = params["quiet"]["noise"]
    names, C = nz["names"], nz["covariance"]
    out = ["[virtual.noise]   # white noise: the broadband residual of the zero-demand records, channel covariance -> rms x mix"]
    for kind, key, unit in (("laser", "laser", "um"), ("strain_gauge", "gauge", "microstrain")):
        idx = [i for i, n in enumerate(names) if layout.channel(n).kind == kind]
        rms, mix = _mix(C[np.ix_(idx, idx)])
        first = names[idx[0]]
        corr = "; ".join(f"{k.split('.')[1]} r = {q.value:.4f} +/- {q.u:.2g}" for k, q in qd.items()
                         if k.startswith("noise.") and k.endswith(".correlation") and all(
                             p in [names[i] for i in idx] for p in k.split(".")[1].split("_")))
        levels = "; ".join(f"{names[i]} {qd[f'noise.{names[i]}.rms'].value:.4g} +/- {qd[f'noise.{names[i]}.rms'].u:.2g} {unit}" for i in idx)
        out.append(_line(f"{key}_rms_{unit}", _num(rms * 1e6), qd[f"noise.{first}.rms"]))
        out.append(_line(f"{key}_mix", _matrix(mix), text=f"lower Cholesky factor of the covariance / {key}_rms: rms {levels}; {corr or 'one channel'}"))
    return out


def _mains_table(params: dict, qd: dict, drift: tuple) -> list[str]:
    q = params["quiet"]
    gauges, lines = q["gauges"], q["lines"]
    M = max(k for _, k in lines) + 1
    amp = np.array([[abs(lines[(g, k)][0]) for k in range(M)] for g in gauges])
    ph = np.array([[np.degrees(np.angle(lines[(g, k)][0])) for k in range(M)] for g in gauges])
    A = float(amp[:, 0].max())
    harm = amp.max(axis=0) / A
    gain = amp / (A * np.where(harm > 0, harm, 1.0))
    per = lambda what, unit: "; ".join(  # noqa: E731
        f"{g}: " + ", ".join(f"{qd[f'mains.{g}.line{k + 1}_{what}'].value:.3g}+/-{qd[f'mains.{g}.line{k + 1}_{what}'].u:.1g}"
                             if f"mains.{g}.line{k + 1}_{what}" in qd else "insignificant" for k in range(M)) for g in gauges) + f" {unit}"
    src = qd[f"mains.{gauges[0]}.line1_amplitude"].source
    return ["[virtual.mains]   # " + src,
            _line("frequency_hz", _num(qd["mains.frequency_hz"].value), qd["mains.frequency_hz"]),
            _line("amplitude_microstrain", _num(A * 1e6), text=f"the largest fundamental; amplitudes per gauge and multiple: {per('amplitude', 'microstrain')}"),
            _line("harmonics", "[" + ", ".join(_num(x) for x in harm) + "]", text="the largest line of each multiple / amplitude (uncertainties: above)"),
            _line("gauge_gain", _matrix(gain), text="each gauge's line / (amplitude x harmonics) (uncertainties: above)"),
            _line("gauge_phase_deg", _matrix(ph), text=f"phases relative to one mains phase: {per('phase_deg', 'deg')}"),
            _line("drift_hz", _num(drift[0]), text=f"NOT MEASURED: taken from {drift[2]} (a drift over half an hour is not identifiable "
                  f"within the command; the records' frequencies spread by {qd['mains.record_spread_hz'].value:.3g} Hz)"),
            _line("drift_period_s", _num(drift[1]), text=f"NOT MEASURED: taken from {drift[2]}")]


def _scatter_adc_tables(params: dict, qd: dict, range_v: float) -> list[str]:
    s = params["scatter"]
    sds = [qd[f"demand_scatter.sd_v.{i}"] for i in range(len(s["sd_v"]))]
    out = ["[virtual.demand_scatter]   # " + sds[0].source,
           _line("sd_v", "[" + ", ".join(_num(q.value) for q in sds) + "]",
                 text="per actuator: " + "; ".join(f"{q.value:.3g} +/- {q.u:.2g} V" + (" LARGE UNCERTAINTY" if q.flagged else "") for q in sds)),
           _line("correlation", _num(qd["demand_scatter.correlation"].value), qd["demand_scatter.correlation"]), "",
           "[virtual.adc]"]
    step = params["quiet"]["noise"]["converter_step_v"]
    bits = np.log2(2 * range_v / step) if step > 0 else 0.0
    if step > 0 and abs(bits - round(bits)) < 0.05 and 8 <= round(bits) <= 32:
        out.append(_line("bits", str(int(round(bits))), text=f"the smallest step between sample values, {step:.4g} V, over the +/-{range_v:g} V range"))
    else:
        out.append(_line("bits", "0", text=f"ideal: no converter step found in the samples (smallest {step:.3g} V)"))
    out.append(_line("range_v", _num(range_v), text="the rig's input range (describe()), not measured"))
    return out


def _true_sensors(params: dict, qd: dict) -> list[str]:
    out = []
    for name, (factor, _) in params["factors"].items():
        if f"channels.{name}.skew_us" not in qd:
            continue
        skew = qd[f"channels.{name}.skew_us"]
        note = "" if skew.value >= 0 else "; CLIPPED to 0: the twin simulates only non-negative skews"
        out += [f"[virtual.true_sensors.{name}]", _line("scale_factor", _num(factor), qd[f"channels.{name}.scale_factor"]),
                _line("skew_us", _num(max(skew.value, 0.0)), text=skew.comment() + note), ""]
    return out


def _clamp_table(clamp: dict, qd: dict, meta: dict) -> list[str]:
    """``[virtual.clamp]`` with the fitted values (:mod:`hbtest.twin.mechanics`) and the
    template's dampings; ``meta["clamp_damping"]``: (support N s/m, rotational N m s/rad)."""
    sd, rd = meta["clamp_damping"]
    out = ["[virtual.clamp]   # fitted to the rig's measured modes (frequencies and damping ratios); dampings: the template's"]
    out += [_line(k, _num(v), qd[f"mechanics.clamp.{k}"]) for k, v in clamp.items()]
    src = f"NOT FITTED: taken from {meta['template']} (the shakers' back-EMF dominates the measured damping ratios; the JSON record compares them)"
    return out + [_line("support_damping_n_s_per_m", _num(sd), text=src), _line("rotational_damping_nms_per_rad", _num(rd), text=src)]


def twin_text(rig_text: str, template_text: str, cfg, params: dict, quantities: list, meta: dict) -> str:
    """The twin's rig file (module docstring). ``cfg``: the user's parsed rig file; ``meta``:
    ``rigfile``, ``template``, ``date``, ``rig_time_s``, ``drift`` (hz, period_s, source),
    ``input_range_v``, ``seed``."""
    qd = {q.key: q for q in quantities}
    ref = next(q for q in quantities if q.key.endswith(".scale_factor") and q.u is None)
    head = [f"# hbtest twin of {cfg.identity!r}: measured from {meta['rigfile']} ({cfg.kind}) by `hbtest twin` on {meta['date']},",
            f"# {meta['rig_time_s']:.0f} s of rig time; the measurements are in the JSON record beside this file.",
            "# Every fitted value carries a comment: the measurement it came from and its standard uncertainty.",
            f"# Taken from the rig file, not measured: [rig] limits, [sensors] (nominal calibration), [physical]; {ref.note}.",
            f"# Taken from {meta['template']}, not measured: the mechanics ([virtual] scalars, friction, shakers; the clamp where not fitted):",
            "# the rig's modes were measured (the record's `decays`): the clamp's mass, inertia and stiffnesses are fitted to their",
            "# frequencies and damping ratios where enough modes were found (its comments say so); `hbtest twin --check` compares them.",
            "", "[rig]", 'kind = "virtual"', f"identity = {('twin of ' + cfg.identity)!r}".replace("'", '"'),
            f"sample_rate_hz = {_num(cfg.sample_rate_hz)}", f"voltage_limit_v = {_num(cfg.voltage_limit_v)}",
            "actuators = [" + ", ".join(f'"{a}"' for a in cfg.actuators) + "]", ""]
    sensors = _copied(rig_text, lambda n: n == "physical" or n == "sensors" or n.startswith("sensors."))
    keep_clamp = "clamp" not in params
    mech = _copied(template_text, lambda n: n in MECHANICS and (keep_clamp or n != "virtual.clamp"))
    mech = re.sub(r"(?m)^seed\s*=.*$", f"seed = {meta['seed']}", mech)
    if not keep_clamp:
        mech += "\n" + "\n".join(_clamp_table(params["clamp"], qd, meta)) + "\n"
    fitted = (_noise_table(params, cfg.sensors, qd) + [""] + _mains_table(params, qd, meta["drift"]) + [""]
              + _scatter_adc_tables(params, qd, meta["input_range_v"]) + [""] + _true_sensors(params, qd))
    return "\n".join(head) + "\n" + sensors + "\n" + mech + "\n" + "\n".join(fitted)


#: tables a twin fitted from stream records replaces; every other table is the template's
STREAM_FITTED = ("virtual.noise", "virtual.mains")


def _stream_tables(v: dict, lab: dict, drift: tuple, src: str) -> list[str]:
    u, ch, mf = v["u"], lab["channels"], lab["mains_frequency"]
    k = np.sqrt(v["sample_rate_hz"] / lab["sample_rate_hz"])
    r = lab["broadband_correlation"]
    lines = lambda c: ", ".join(f"{a * 1e3:.3g}" for a in ch[c]["mains_amplitude_median"])  # noqa: E731
    phase = lab["relative_phase"]["in2/in1"]
    return [
        f"[virtual.noise]   # white noise: the broadband residual of {src}; medians over streams (u: the median's, order statistics)",
        _line("laser_rms_um", _num(v["laser_rms_um"]), text=f"u = {u['laser_rms_um']:.2g} um; lasers in5/in6 {ch['in5']['broadband_rms_median'] * 1e3:.3g}/"
              f"{ch['in6']['broadband_rms_median'] * 1e3:.3g} um at {lab['sample_rate_hz']:g} Hz, x {k:.3g} for equal density here"),
        _line("laser_mix", _matrix(v["laser_mix"]), text=f"lower Cholesky factor / laser_rms: in6/in5 correlation {r['in5_in6']['median']:.3f} +/- {r['in5_in6']['median_u']:.2g}"),
        _line("gauge_rms_microstrain", _num(v["gauge_rms_microstrain"]), text=f"u = {u['gauge_rms_microstrain']:.2g} microstrain; front/back forces in1/in2 "
              f"{ch['in1']['broadband_rms_median'] * 1e3:.3g}/{ch['in2']['broadband_rms_median'] * 1e3:.3g} mN mapped to the gauges by their layout"),
        _line("gauge_mix", _matrix(v["gauge_mix"]), text=f"lower Cholesky factor / gauge_rms: in1/in2 correlation {r['in1_in2']['median']:.3f} +/- {r['in1_in2']['median_u']:.2g}, mapped"),
        "",
        f"[virtual.mains]   # mains lines of {src}: medians of the front/back forces' lines, phases as circular means, mapped to the gauges",
        _line("frequency_hz", _num(v["mains_frequency_hz"]), text=f"u = {u['mains_frequency_hz']:.2g} Hz; median over the streams on the front gauge, "
              f"p10-p90 {mf['p10_hz']:.4g}-{mf['p90_hz']:.4g} Hz"),
        _line("drift_hz", _num(v["mains_drift_hz"] * np.sqrt(2)), text=f"a sine whose rms is the streams' spread {v['mains_drift_hz']:.3g} Hz (1.4826 MAD)"),
        _line("drift_period_s", _num(drift[1]), text=f"NOT MEASURED: taken from {drift[2]} (the records carry no clock across runs)"),
        _line("amplitude_microstrain", _num(v["mains_amplitude_microstrain"]), text=f"u = {u['mains_amplitude_microstrain']:.2g} microstrain; the largest "
              f"fundamental; forces per multiple (mN): front {lines('in1')}, back {lines('in2')}"),
        _line("harmonics", "[" + ", ".join(_num(x) for x in v["mains_harmonics"]) + "]", text="the largest line of each multiple / amplitude"),
        _line("gauge_gain", _matrix(v["mains_gain"]), text="each gauge's line / (amplitude x harmonics)"),
        _line("gauge_phase_deg", _matrix(v["mains_phase_deg"]), text="back/front phase per multiple " + ", ".join(
            f"{p:.0f}+/-{pu:.1g}" for p, pu in zip(phase["phase_deg"], phase["phase_u_deg"])) + " deg, mapped"),
    ]


def stream_twin_text(template_text: str, values: dict, lab: dict, meta: dict) -> str:
    """A twin fitted from stream records (:mod:`hbtest.twin.streams`): the template's rig file
    with ``[virtual.noise]`` and ``[virtual.mains]`` replaced by the fitted ones; ``meta``:
    ``records``, ``template``, ``date``, ``points``, ``drift`` (hz, period_s, source)."""
    src = f"{meta['points']} streams of {meta['records']}"
    head = [f"# hbtest twin fitted from records: {src}, by `hbtest twin --records` on {meta['date']}.",
            "# Fitted (each value's comment names its figure and standard uncertainty): [virtual.noise], [virtual.mains].",
            f"# NOT MEASURED from these records, taken from {meta['template']}: everything else ([rig], [sensors], [physical],",
            "# the mechanics, [virtual.demand_scatter], [virtual.adc], true sensors): streams at converged demands do not identify them.", ""]
    tables = _stream_tables(values, lab, meta["drift"], src)
    body: list[str] = []
    done = False
    for name, text in blocks(template_text):
        if name in STREAM_FITTED:
            if body:  # the comment lines above a replaced table describe the template's values
                kept = body[-1].rstrip("\n").split("\n")
                while kept and (not kept[-1].strip() or kept[-1].lstrip().startswith("#")):
                    kept.pop()
                body[-1] = "\n".join(kept) + "\n"
            if not done:
                body.append("\n".join(tables) + "\n")
                done = True
            continue
        body.append(text)
    if not done:
        body.append("\n".join(tables) + "\n")
    return "\n".join(head) + "\n".join(body)

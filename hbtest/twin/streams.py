"""A twin's noise and mains from records a lab already took (``hbtest twin --records DIR``).

Input: the layout of the authors' lab records (``lab_records.npz``, read by
``../shared/lab/load_lab.py``): per point ``record_sensors`` (point, 9, samples) float32 raw
streams in1..in8 and the box's forcing phase (row 8, one sample late), ``record_sensors_len``,
``frequency`` [Hz], ``sample_rate_hz``, ``complete``, ``stale_stream``, ``file`` and
``point_index``. in1/in2 are the front/back transducer forces [N] of the lab's residual, in5/in6
the front/back lasers [mm].

Per stream (2 forcing periods at the converged demand) and channel: least-squares lines
(:func:`hbtest.rig.virtual.noisefit.line_fit`: DC, 8 forcing orders, mains multiples 1..5 of
50 Hz), the broadband rms, the noise density in ``BAND_HZ``, the broadband correlation of
paired channels, and the mains frequency on the front gauge. Points with a forcing multiple
(1..8) within 1 Hz of a mains multiple are skipped. Figures over points are medians (with the
order-statistic standard uncertainty, :func:`median_u`) and circular means (with their
resultant length: 1 a fixed phase, 0 random; standard uncertainty ``sqrt(-2 ln R / n)``).

:func:`twin_values` maps the table to a twin's noise and mains (the gauges' lines and
broadband to the rig file's two gauge strains by the gauge layout, lasers one to one, white
levels at the twin's sample rate at equal density). What these records cannot identify (the
demand scatter, channel gains and lags, the rig's modes) is taken from the template and said
so in the written twin (:func:`hbtest.twin.write.stream_twin_text`).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..events import Notice
from ..rig.virtual.noisefit import BAND_HZ, band_density, fit_residual, gauge_strain_map, line_fit, mains_frequency

__all__ = ["open_records", "usable_points", "point_statistics", "summarise", "twin_values", "read_noise", "median_u",
           "rig_statistics", "LAB_FILE", "LAB_SOURCE"]

LAB_FILE = "lab_records.npz"
MULTIPLES = (1, 2, 3, 4, 5)
ROWS = {"in1": 0, "in2": 1, "in3": 2, "in4": 3, "in5": 4, "in6": 5}
UNIT = {"in1": "N", "in2": "N", "in3": "N", "in4": "N", "in5": "mm", "in6": "mm"}
PAIRS = {"in1_in2": (0, 1), "in5_in6": (4, 5)}
NOMINAL_MAINS_HZ = 50.0
REQUIRED = ("record_sensors", "record_sensors_len", "frequency", "sample_rate_hz", "complete", "stale_stream", "file",
            "point_index")
#: provenance of every table fitted from the authors' lab records
LAB_SOURCE = (
    "lab_records.npz (decoded from github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing, "
    "PaperFiguresAndResults/*.mat; MIT licence, Copyright (c) 2023 Alessandra Vizzaccaro: "
    "tests/data/LICENSE-av3116-Iterative-method-for-RTHT.txt)"
)


def open_records(path) -> tuple[dict, Path]:
    """``(arrays, directory)`` of ``path`` (a directory holding ``lab_records.npz``, or the file);
    a :class:`UserError` naming the file and the missing key otherwise."""
    p = Path(path)
    f = p / LAB_FILE if p.is_dir() else p
    if not f.is_file():
        raise UserError(f"--records {path}: no {LAB_FILE} there (a lab's stream records, load_lab.py's layout)")
    try:
        npz = np.load(f, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise UserError(f"--records {f}: not a readable .npz ({e})") from None
    missing = [k for k in REQUIRED if k not in npz.files]
    if missing:
        raise UserError(f"--records {f}: no {missing[0]!r} array (load_lab.py's layout is expected)")
    d = {k: npz[k] for k in REQUIRED}
    if d["record_sensors"].ndim != 3 or d["record_sensors"].shape[1] < 9:
        raise UserError(f"--records {f}: record_sensors has shape {d['record_sensors'].shape}, (points, 9, samples) expected")
    return d, f.parent


def usable_points(d) -> np.ndarray:
    """Indices of the points used: complete, own stream, no forcing multiple near a mains multiple."""
    keep = []
    for p in range(d["frequency"].size):
        if not d["complete"][p] or d["stale_stream"][p]:
            continue
        f = float(d["frequency"][p])
        if min(abs(k * f - h * NOMINAL_MAINS_HZ) for k in range(1, 9) for h in MULTIPLES) >= 1.0:
            keep.append(p)
    return np.array(keep, dtype=int)


def stream(d, p) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(y (6, N) in1..in6, phi [rad], t [s])`` of point ``p``; ``phi`` the phase the box used
    for each sample (the stored phase is one sample late, lab README)."""
    L = int(d["record_sensors_len"][p])
    st = d["record_sensors"][p, :, :L].astype(float)
    fs = float(d["sample_rate_hz"])
    phi = st[8] - 2 * np.pi * float(d["frequency"][p]) / fs
    return st[:6], phi, np.arange(L) / fs


def one_stream(y, phi, t) -> dict:
    """The statistics of one record ``y`` (6, N) in in1..in6 order (module docstring)."""
    lines, rms = line_fit(y, phi, t, NOMINAL_MAINS_HZ, MULTIPLES)
    res = {i: fit_residual(y[i], phi, t, NOMINAL_MAINS_HZ, MULTIPLES) for pair in PAIRS.values() for i in pair}
    corr = {k: float(np.corrcoef(res[a], res[b])[0, 1]) for k, (a, b) in PAIRS.items()}
    return {"lines": lines, "rms": rms, "density": band_density(y, phi, t, BAND_HZ, NOMINAL_MAINS_HZ, MULTIPLES),
            "mains_hz": mains_frequency(y[0], phi, t, step=0.01, hi=50.3), "correlation": corr}


def point_statistics(d, points=None, progress=None) -> dict:
    """Per used point: ``points``, ``lines`` (n, 6, 5) complex, ``rms`` (n, 6), ``mains_hz`` (n,),
    ``correlation`` {pair: (n,)}, ``density`` (n, 6). ``progress``: called with a
    :class:`~hbtest.events.Notice` every 25 streams."""
    pts = usable_points(d) if points is None else np.asarray(points, int)
    per = []
    for i, p in enumerate(pts):
        per.append(one_stream(*stream(d, p)))
        if progress is not None and ((i + 1) % 25 == 0 or i + 1 == pts.size):
            progress(Notice(f"twin: {i + 1}/{pts.size} streams fitted"))
    return _stacked(pts, per)


def _stacked(points, per: list) -> dict:
    """The per-stream statistics of :func:`one_stream` as arrays over ``points``."""
    return {"points": points, "lines": np.array([s["lines"] for s in per]), "rms": np.array([s["rms"] for s in per]),
            "mains_hz": np.array([s["mains_hz"] for s in per]), "density": np.array([s["density"] for s in per]),
            "correlation": {k: np.array([s["correlation"][k] for s in per]) for k in PAIRS}}


def median_u(x, axis=0) -> np.ndarray:
    """Standard uncertainty of the median of ``x`` along ``axis``, distribution-free: half the
    distance between the order statistics ``n/2 -+ sqrt(n)/2`` (the median's 68 % interval
    from the binomial distribution of the count below it)."""
    s = np.sort(np.asarray(x, float), axis=axis)
    n = s.shape[axis]
    lo = int(np.clip(np.floor(n / 2 - np.sqrt(n) / 2), 0, n - 1))
    hi = int(np.clip(np.ceil(n / 2 + np.sqrt(n) / 2) - 1, 0, n - 1))
    return (np.take(s, hi, axis=axis) - np.take(s, lo, axis=axis)) / 2


def circ(z) -> tuple[float, float, float]:
    """(circular mean angle [deg], resultant length, its standard uncertainty [deg]) of phasors ``z``."""
    u = np.exp(1j * np.angle(np.asarray(z)))
    m = np.mean(u)
    R = float(np.abs(m))
    return float(np.degrees(np.angle(m))), R, float(np.degrees(np.sqrt(-2 * np.log(max(R, 1e-300)) / u.size)))


def _channel(amp, rms, dens, lines_r) -> dict:
    q = lambda x, p: [float(v) for v in np.atleast_1d(np.percentile(x, p, axis=0))]  # noqa: E731
    out = {"mains_amplitude_median": [float(v) for v in np.median(amp, axis=0)], "mains_amplitude_median_u": [float(v) for v in median_u(amp)],
           "mains_amplitude_p10": q(amp, 10), "mains_amplitude_p90": q(amp, 90),
           "broadband_rms_median": float(np.median(rms)), "broadband_rms_median_u": float(median_u(rms)),
           "broadband_rms_p10": q(rms, 10)[0], "broadband_rms_p90": q(rms, 90)[0],
           "band_density_median": float(np.median(dens)), "band_density_median_u": float(median_u(dens)),
           "band_density_p10": q(dens, 10)[0], "band_density_p90": q(dens, 90)[0]}
    # the waveform: phase of multiple h relative to h x the fundamental's phase
    ph = [circ(lines_r[:, j] / np.exp(1j * h * np.angle(lines_r[:, 0]))) for j, h in enumerate(MULTIPLES)]
    out["harmonic_phase_deg"] = [a for a, _, _ in ph]
    out["harmonic_phase_resultant"] = [R for _, R, _ in ph]
    out["harmonic_phase_u_deg"] = [u for _, _, u in ph]
    return out


def summarise(stats: dict, sample_rate_hz: float, files=None) -> dict:
    """The table of :func:`point_statistics` (the ``lab`` part of ``tests/data/lab_noise_fit.json``);
    ``sample_rate_hz``: the records'; ``files``: per point the run it belongs to (consecutive
    points of one run give the mains frequency's change between points; None: one run)."""
    lines, rms, dens, fm, pts = stats["lines"], stats["rms"], stats["density"], stats["mains_hz"], stats["points"]
    out: dict = {"channels": {}, "relative_phase": {}}
    for name, r in ROWS.items():
        out["channels"][name] = {"unit": UNIT[name], **_channel(np.abs(lines[:, r, :]), rms[:, r], dens[:, r], lines[:, r, :])}
    for a, b in (("in2", "in1"), ("in6", "in5")):
        ph = [circ(lines[:, ROWS[a], j] / lines[:, ROWS[b], j]) for j in range(len(MULTIPLES))]
        out["relative_phase"][f"{a}/{b}"] = {"phase_deg": [x for x, _, _ in ph], "resultant": [R for _, R, _ in ph],
                                             "phase_u_deg": [u for _, _, u in ph]}
    out["broadband_correlation"] = {k: {"median": float(np.median(v)), "median_u": float(median_u(v)),
                                        "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90))}
                                    for k, v in stats["correlation"].items()}
    steps: list[float] = []
    run = np.zeros(fm.size, int) if files is None else np.asarray(files)
    for f in np.unique(run):
        steps += list(np.diff(fm[run == f]))
    med = float(np.median(fm))
    out["mains_frequency"] = {
        "median_hz": med, "median_u_hz": float(median_u(fm)),
        "spread_hz": float(1.4826 * np.median(np.abs(fm - med))),
        "p10_hz": float(np.percentile(fm, 10)), "p90_hz": float(np.percentile(fm, 90)),
        "consecutive_point_change_hz": float(1.4826 * np.median(np.abs(steps)) / np.sqrt(2)) if steps else 0.0,
        "note": "front gauge (in1), 50/150/250 Hz lines; time base = the box's nominal sample rate",
    }
    out["band_hz"] = list(BAND_HZ)
    out["sample_rate_hz"] = float(sample_rate_hz)
    out["points"] = int(pts.size)
    out["multiples"] = list(MULTIPLES)
    return out


def twin_values(summary: dict, cfg, rig_name: str) -> dict:
    """The fitted model in the twin's units (gauge strains, laser metres) for the rig file
    ``cfg`` (its gauge layout and sample rate), with ``u``: the standard uncertainties of the
    scalar levels (the gauge and laser rms and the largest line from their medians', the mains
    frequency from its median's)."""
    lay = cfg.sensors
    fs_twin = float(cfg.sample_rate_hz)
    B = gauge_strain_map(lay.gauge_positions[:2], lay.gauge_calibration)
    ch = summary["channels"]
    rel = summary["relative_phase"]["in2/in1"]
    lines = []  # per multiple: (eps1, eps2) complex phasors [strain], front line at phase 0
    for j in range(len(MULTIPLES)):
        ph = np.radians(ch["in1"]["harmonic_phase_deg"][j])
        front = ch["in1"]["mains_amplitude_median"][j] * np.exp(1j * ph)
        back = ch["in2"]["mains_amplitude_median"][j] * np.exp(1j * (ph + np.radians(rel["phase_deg"][j])))
        lines.append(B @ np.array([front, back]))
    L = np.array(lines).T  # (2 gauges, multiples)
    amp = np.abs(L)
    top, env = float(amp[:, 0].max()), amp.max(axis=0)
    k = np.sqrt(fs_twin / summary["sample_rate_hz"])  # equal density at the twin's rate
    rho = summary["broadband_correlation"]["in1_in2"]["median"]
    s1, s2 = ch["in1"]["broadband_rms_median"] * k, ch["in2"]["broadband_rms_median"] * k
    C = B @ np.array([[s1**2, rho * s1 * s2], [rho * s1 * s2, s2**2]]) @ B.T
    g_rms = float(np.sqrt(np.max(np.diag(C))))
    l1, l2 = ch["in5"]["broadband_rms_median"] * 1e-3 * k, ch["in6"]["broadband_rms_median"] * 1e-3 * k
    rl = summary["broadband_correlation"]["in5_in6"]["median"]
    Ll = np.linalg.cholesky(np.array([[l1**2, rl * l1 * l2], [rl * l1 * l2, l2**2]]))
    l_rms = max(l1, l2)
    rms_u = {c: ch[c]["broadband_rms_median_u"] / ch[c]["broadband_rms_median"] for c in ("in1", "in2", "in5", "in6")}  # relative
    gauge_u = max(rms_u["in1"], rms_u["in2"])
    laser_u = rms_u["in5" if l1 >= l2 else "in6"]
    line_u = max(ch[c]["mains_amplitude_median_u"][0] / ch[c]["mains_amplitude_median"][0] for c in ("in1", "in2"))
    return {
        "rig": rig_name, "sample_rate_hz": fs_twin,
        "gauge_positions_mm": [p * 1e3 for p in lay.gauge_positions[:2]],
        "gauge_calibration_nm_per_strain": float(lay.gauge_calibration),
        "mains_frequency_hz": summary["mains_frequency"]["median_hz"],
        "mains_amplitude_microstrain": top * 1e6,
        "mains_harmonics": [float(x / top) for x in env],
        "mains_gain": [[float(x) for x in row] for row in amp / env[None, :]],
        "mains_phase_deg": [[float(x) for x in row] for row in np.degrees(np.angle(L))],
        "gauge_rms_microstrain": g_rms * 1e6,
        "gauge_mix": [[float(x) for x in row] for row in np.linalg.cholesky(C) / g_rms],
        "laser_rms_um": l_rms * 1e6,
        "laser_mix": [[float(x) for x in row] for row in Ll / l_rms],
        "mains_drift_hz": summary["mains_frequency"]["spread_hz"],
        "u": {"mains_frequency_hz": summary["mains_frequency"]["median_u_hz"], "mains_amplitude_microstrain": top * 1e6 * line_u,
              "gauge_rms_microstrain": g_rms * 1e6 * gauge_u, "laser_rms_um": l_rms * 1e6 * laser_u},
    }


def settle_model(s_mN, threshold_mN: float = 1.3, min_reads: int = 30, trials: int = 4000, seed: int = 1) -> dict:
    """Reads per evaluation and the median change between consecutive reads under the lab's
    settle rule (BroydenMethod.m l.923-950) for i.i.d. reads with per-component s.d. ``s_mN``."""
    rng = np.random.default_rng(seed)
    s = np.asarray(s_mN, float)
    reads, changes = [], []
    for _ in range(trials):
        prev = rng.standard_normal(4) * s
        n = 1
        while True:
            cur = rng.standard_normal(4) * s
            n += 1
            dist = float(np.linalg.norm(cur - prev))
            changes.append(dist)
            if n >= min_reads and dist < threshold_mN:
                break
            prev = cur
        reads.append(n)
    return {"reads_mean": float(np.mean(reads or [0])), "change_median_mN": float(np.median(changes))}


def read_noise(lab_dir: Path) -> dict:
    """The lab's one-read scatter per residual component (``noise_summary.json`` beside the
    records: the stream model scaled to the settle traces) and what the settle rule makes of
    it; empty where that file is absent."""
    src = Path(lab_dir) / "noise_summary.json"
    if not src.is_file():
        return {}
    rn = json.loads(src.read_text())["read_noise"]
    s = rn["fig50_calibrated_per_component"]["per_component_mN"]
    out = {
        "per_component_mN": s,
        "rms_mN": float(np.sqrt(np.mean(np.square(s)))),
        "fig50_rms_mN": rn["fig50_equal_components"]["fits"]["excl_NarrowPlastic_MediumForcing_3"]["exact_shared_reads"],
        "stream_model_n10_mN": rn["stream_model"]["per_component_mN"]["n=10"],
        "components": ["front sin", "front cos", "back sin", "back cos"],
        "source": "noise_summary.json read_noise.fig50_calibrated_per_component (lab README, 'One settle read')",
    }
    out["settle_rule_1.3mN"] = settle_model(s)
    return out


#: unread forcing periods before each record a rig takes the lab's way (as benchmarks/twin_vs_lab.py)
SETTLE_PERIODS = 7.3


def rig_statistics(rig, frequencies, spacing_s: float = 0.0, progress=None) -> dict:
    """:func:`point_statistics` of records taken from ``rig`` the lab's way: per frequency [Hz]
    zero demand, at least :data:`SETTLE_PERIODS` unread and ``spacing_s`` [s] from one record's
    start to the next, then 2 forcing periods; the rig's first two gauges mapped to the lab's
    front/back forces [N] (:func:`~hbtest.rig.virtual.noisefit.lines_to_front_back`), its first
    two lasers to mm, at the lab's 10 kHz by equal density (rms scaled by sqrt(10 kHz / fs);
    lines and densities do not depend on the rate). Channels in3/in4 are zero."""
    from ..rig.virtual.noisefit import lines_to_front_back

    lay = rig.describe().sensors
    gauges, lasers = [c.name for c in lay.gauges][:2], [c.name for c in lay.lasers][:2]
    acts = len(rig.describe().actuators)
    per = []
    for i, f in enumerate(frequencies):
        rig.set_demand(float(f), np.zeros((acts, 1)), [1], ramp_periods=0)
        rig.wait(max(SETTLE_PERIODS, spacing_s * float(f) - 2))
        acq = rig.acquire(2)
        eps = np.stack([acq.data[g] * lay.channel(g).scale for g in gauges])
        fb = lines_to_front_back(eps, lay.gauge_positions[:2], lay.gauge_calibration)
        las = np.stack([acq.data[c] * lay.channel(c).scale * 1e3 for c in lasers])
        y = np.concatenate([fb, np.zeros_like(fb), las])
        s = one_stream(y, 2 * np.pi * float(f) * acq.t, acq.t)
        s["rms"] = s["rms"] * np.sqrt(10000.0 / acq.sample_rate_hz)
        per.append(s)
        if progress is not None:
            progress(Notice(f"twin: {i + 1}/{len(frequencies)} records at {f:g} Hz"))
    return _stacked(np.arange(len(per)), per)


#: the lines compared between twin and lab: the gauges' 50, 150, 250 Hz (multiples with a stable
#: phase in the lab; 100 and 200 Hz and the lasers' lines are at the noise level)
CHECKED_LINES = {"in1": (0, 2, 4), "in2": (0, 2, 4)}
CHECKED_NOISE = ("in1", "in2", "in5", "in6")


def table_quantities(summary: dict, source: str) -> list:
    """The table's figures a twin models, as :class:`~hbtest.twin.fit.Quantity` (standard
    uncertainty: the median's, the circular mean's) for :func:`hbtest.twin.check.compare`:
    gauge lines, relative phase of the back gauge's fundamental, broadband rms per channel,
    paired correlations, mains frequency. Units: the table's (N, mm)."""
    from .fit import Quantity

    ch, out = summary["channels"], []
    for name, idx in CHECKED_LINES.items():
        for j in idx:
            out.append(Quantity(f"mains.{name}.line{j + 1}_amplitude", ch[name]["mains_amplitude_median"][j],
                                ch[name]["mains_amplitude_median_u"][j], ch[name]["unit"], source))
    rel = summary["relative_phase"]["in2/in1"]
    out.append(Quantity("mains.in2.line1_phase_deg", rel["phase_deg"][0], rel["phase_u_deg"][0], "deg", source,
                        "relative to in1's fundamental", floor=180.0))
    for name in CHECKED_NOISE:
        out.append(Quantity(f"noise.{name}.rms", ch[name]["broadband_rms_median"], ch[name]["broadband_rms_median_u"],
                            ch[name]["unit"], source, "at 10 kHz"))
    for k, v in summary["broadband_correlation"].items():
        out.append(Quantity(f"noise.{k}.correlation", v["median"], v["median_u"], "", source, floor=1.0))
    mf = summary["mains_frequency"]
    out.append(Quantity("mains.frequency_hz", mf["median_hz"], mf["median_u_hz"], "Hz", source))
    return out


def band_rows(twin: dict, lab: dict) -> list[tuple[str, float, float]]:
    """(channel, lab, twin) noise densities in ``BAND_HZ``: what a white-noise twin does not
    model (shown apart from the check)."""
    return [(n, lab["channels"][n]["band_density_median"], twin["channels"][n]["band_density_median"]) for n in CHECKED_NOISE]


def fit_records(path, cfg, rig_name: str, progress=None) -> tuple[dict, dict, dict]:
    """``(table, statistics, arrays)`` of the stream records at ``path`` (:func:`open_records`)
    for the rig file ``cfg`` (named ``rig_name``): ``table`` holds ``provenance``, ``lab`` (the
    :func:`summarise` table with the :func:`read_noise` beside the records) and ``twin``
    (:func:`twin_values`): the JSON ``hbtest twin --records`` writes and
    ``tests/data/lab_noise_fit.json`` is."""
    d, where = open_records(path)
    pts = usable_points(d)
    if progress is not None:
        progress(Notice(f"twin: fitting {pts.size} of {d['frequency'].size} streams of {path} (no rig time)"))
    stats = point_statistics(d, pts, progress)
    lab = summarise(stats, float(d["sample_rate_hz"]), d["file"][pts])
    lab["read_noise"] = read_noise(where)
    lab_file = (Path(path) / LAB_FILE) if Path(path).is_dir() else Path(path)
    table = {"provenance": {"source": LAB_SOURCE if lab_file.name == LAB_FILE else str(lab_file),
                            "command": f"hbtest twin {rig_name} --records {path}",
                            "method": "per-stream least squares (DC, 8 forcing orders, mains multiples 1..5 of 50 Hz); medians over points"},
             "lab": lab, "twin": twin_values(lab, cfg, rig_name)}
    return table, stats, d

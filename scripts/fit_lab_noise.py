"""Fit the twin's noise model to the authors' lab records and write the fitted table.

Usage: ``python scripts/fit_lab_noise.py [--lab DIR] [--out tests/data/lab_noise_fit.json]``
(``DIR`` defaults to ``$HBTEST_LAB_DIR`` or ``../shared/lab`` next to the repository or its parent; it
holds ``lab_records.npz``, decoded from the MIT-licensed release of A. Vizzaccaro et al.,
github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing; licence in
``tests/data/LICENSE-av3116-Iterative-method-for-RTHT.txt``). A few minutes (one core).

Per stream (one per lab point: 2 forcing periods at 10 kHz at the converged demand) and per
channel, :func:`hbtest.rig.virtual.noisefit.line_fit` gives the mains lines (50..250 Hz,
complex phasors) and the broadband rms; :func:`~hbtest.rig.virtual.noisefit.mains_frequency`
the mains frequency on the front gauge. Points with a forcing multiple (1..8) within 1 Hz of
a mains multiple are skipped (as in the lab README). Figures are medians (amplitudes, rms) and
circular means (relative phases, with their resultant length: 1 = a fixed phase, 0 = random).

The twin's values: the lab's gauges (in1, in2) are forces in the front/back basis of its
residual, so their lines and broadband are mapped to the twin's two gauge strains by
:func:`~hbtest.rig.virtual.noisefit.gauge_strain_map` with the reference rig's gauge layout;
the lasers (in5 front, in6 back) map to l1, l2 one to one. White levels are converted to the
twin's sample rate at equal noise density. The output JSON also keeps a small fixture
(``lab_noise_fixture.json`` beside it): the per-point statistics and two raw streams (for
``tests/test_twin_lab.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hbtest.config import load_rig  # noqa: E402
from hbtest.rig.virtual.noisefit import BAND_HZ, band_density, gauge_strain_map, line_fit, mains_frequency  # noqa: E402

MULTIPLES = (1, 2, 3, 4, 5)
ROWS = {"in1": 0, "in2": 1, "in3": 2, "in4": 3, "in5": 4, "in6": 5}
UNIT = {"in1": "N", "in2": "N", "in3": "N", "in4": "N", "in5": "mm", "in6": "mm"}
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
FIXTURE_POINTS = 2


def default_lab_dir() -> str:
    """``../shared/lab`` next to the repository (or next to its parent: a git worktree)."""
    for base in (ROOT.parent, ROOT.parent.parent):
        if (base / "shared" / "lab" / "lab_records.npz").is_file():
            return str(base / "shared" / "lab")
    return str(ROOT.parent / "shared" / "lab")


#: provenance of every table written from the lab records
LAB_SOURCE = (
    "lab_records.npz (decoded from github.com/av3116/Iterative-method-for-Real-Time-Hybrid-testing, "
    "PaperFiguresAndResults/*.mat; MIT licence, Copyright (c) 2023 Alessandra Vizzaccaro: "
    "tests/data/LICENSE-av3116-Iterative-method-for-RTHT.txt)"
)


def open_lab(prog: str, description: str, out: Path, argv=None):
    """A lab script's arguments (``--lab DIR``, ``--out FILE``) and its records: ``(args, npz)``,
    npz None (and one line on stderr naming the file) when ``DIR/lab_records.npz`` is missing."""
    ap = argparse.ArgumentParser(prog=prog, description=description)
    ap.add_argument("--lab", default=os.environ.get("HBTEST_LAB_DIR") or default_lab_dir())
    ap.add_argument("--out", default=str(out))
    a = ap.parse_args(argv)
    src = Path(a.lab) / "lab_records.npz"
    if not src.is_file():
        print(f"{prog}: {src} not found (set --lab or HBTEST_LAB_DIR)", file=sys.stderr)
        return a, None
    return a, np.load(src)


def lab_points(d):
    """Indices of the points used: complete, own stream, no forcing multiple near mains."""
    keep = []
    for p in range(d["frequency"].size):
        if not d["complete"][p] or d["stale_stream"][p]:
            continue
        f = float(d["frequency"][p])
        near = min(abs(k * f - h * 50.0) for k in range(1, 9) for h in MULTIPLES)
        if near >= 1.0:
            keep.append(p)
    return np.array(keep)


def stream(d, p):
    """(y (6, N) in1..in6, phi, t) of point ``p``: phase the box used (README: one sample late)."""
    L = int(d["record_sensors_len"][p])
    st = d["record_sensors"][p, :, :L].astype(float)
    fs = float(d["sample_rate_hz"])
    phi = st[8] - 2 * np.pi * float(d["frequency"][p]) / fs
    return st[:6], phi, np.arange(L) / fs


def circ(z):
    """(circular mean angle [deg], resultant length) of phasors ``z``."""
    u = np.exp(1j * np.angle(z))
    m = np.mean(u)
    return float(np.degrees(np.angle(m))), float(np.abs(m))


def fit(d):
    pts = lab_points(d)
    lines, rms, fm, dens = [], [], [], []
    corr = {"in1_in2": [], "in5_in6": []}
    for p in pts:
        y, phi, t = stream(d, p)
        A, r = line_fit(y, phi, t, 50.0, MULTIPLES)
        lines.append(A)
        rms.append(r)
        dens.append(band_density(y, phi, t, BAND_HZ, 50.0, MULTIPLES))
        fm.append(mains_frequency(y[0], phi, t, step=0.01, hi=50.3))
        # broadband correlation between the paired channels (fit residuals)
        for key, (a, b) in (("in1_in2", (0, 1)), ("in5_in6", (4, 5))):
            ra = _residual(y[a], phi, t)
            rb = _residual(y[b], phi, t)
            corr[key].append(float(np.corrcoef(ra, rb)[0, 1]))
    corr_a = {k: np.array(v) for k, v in corr.items()}
    return pts, np.array(lines), np.array(rms), np.array(fm), corr_a, np.array(dens)


def _residual(y, phi, t):
    cols = [np.ones_like(t)] + [g(k * phi) for k in range(1, 9) for g in (np.sin, np.cos)]
    cols += [g(2 * np.pi * h * 50.0 * t) for h in MULTIPLES for g in (np.sin, np.cos)]
    A = np.stack(cols, 1)
    return y - A @ np.linalg.lstsq(A, y, rcond=None)[0]


def summarise(d, pts, lines, rms, fm, corr, dens):
    fs_lab = float(d["sample_rate_hz"])
    out = {"channels": {}, "relative_phase": {}}
    for name, r in ROWS.items():
        amp = np.abs(lines[:, r, :])
        out["channels"][name] = {
            "unit": UNIT[name],
            "mains_amplitude_median": [float(x) for x in np.median(amp, axis=0)],
            "mains_amplitude_p10": [float(x) for x in np.percentile(amp, 10, axis=0)],
            "mains_amplitude_p90": [float(x) for x in np.percentile(amp, 90, axis=0)],
            "broadband_rms_median": float(np.median(rms[:, r])),
            "broadband_rms_p10": float(np.percentile(rms[:, r], 10)),
            "broadband_rms_p90": float(np.percentile(rms[:, r], 90)),
            # per sqrt(Hz), in BAND_HZ: where a harmonic estimate takes its broadband noise from
            "band_density_median": float(np.median(dens[:, r])),
            "band_density_p10": float(np.percentile(dens[:, r], 10)),
            "band_density_p90": float(np.percentile(dens[:, r], 90)),
        }
        # the waveform: phase of multiple h relative to h x the fundamental's phase
        out["channels"][name]["harmonic_phase_deg"] = []
        out["channels"][name]["harmonic_phase_resultant"] = []
        for j, h in enumerate(MULTIPLES):
            ang, R = circ(lines[:, r, j] / np.exp(1j * h * np.angle(lines[:, r, 0])))
            out["channels"][name]["harmonic_phase_deg"].append(ang)
            out["channels"][name]["harmonic_phase_resultant"].append(R)
    for a, b in (("in2", "in1"), ("in6", "in5")):
        ratio = lines[:, ROWS[a], :] / lines[:, ROWS[b], :]
        out["relative_phase"][f"{a}/{b}"] = {
            "phase_deg": [circ(ratio[:, j])[0] for j in range(len(MULTIPLES))],
            "resultant": [circ(ratio[:, j])[1] for j in range(len(MULTIPLES))],
        }
    out["broadband_correlation"] = {
        k: {"median": float(np.median(v)), "p10": float(np.percentile(v, 10)), "p90": float(np.percentile(v, 90))}
        for k, v in corr.items()
    }
    dev = fm - np.median(fm)
    steps = []
    for f in np.unique(d["file"][pts]):
        sel = fm[d["file"][pts] == f]
        steps += list(np.diff(sel))
    out["mains_frequency"] = {
        "median_hz": float(np.median(fm)),
        "spread_hz": float(1.4826 * np.median(np.abs(dev))),
        "p10_hz": float(np.percentile(fm, 10)),
        "p90_hz": float(np.percentile(fm, 90)),
        "consecutive_point_change_hz": float(1.4826 * np.median(np.abs(steps)) / np.sqrt(2)),
        "note": "front gauge (in1), 50/150/250 Hz lines; time base = the box's nominal 10 kHz",
    }
    out["band_hz"] = list(BAND_HZ)
    out["sample_rate_hz"] = fs_lab
    out["points"] = int(pts.size)
    out["multiples"] = list(MULTIPLES)
    return out


def twin_values(summary, rig_path=RIG):
    """The fitted model in the twin's units (gauge strains, laser metres) for ``rig_path``'s
    gauge layout and sample rate."""
    rc = load_rig(rig_path)
    lay = rc.sensors
    fs_twin = float(rc.sample_rate_hz)
    B = gauge_strain_map(lay.gauge_positions[:2], lay.gauge_calibration)
    ch = summary["channels"]
    rel = summary["relative_phase"]["in2/in1"]
    lines = []  # per multiple: (eps1, eps2) complex phasors [strain], front line at phase 0
    for j in range(len(MULTIPLES)):
        front = ch["in1"]["mains_amplitude_median"][j] * np.exp(1j * np.radians(ch["in1"]["harmonic_phase_deg"][j]))
        back = ch["in2"]["mains_amplitude_median"][j] * np.exp(
            1j * np.radians(ch["in1"]["harmonic_phase_deg"][j] + rel["phase_deg"][j])
        )
        lines.append(B @ np.array([front, back]))
    lines = np.array(lines).T  # (2 gauges, multiples)
    amp = np.abs(lines)
    top = float(amp[:, 0].max())
    env = amp.max(axis=0)
    k = np.sqrt(fs_twin / summary["sample_rate_hz"])  # equal density at the twin's rate
    rho = summary["broadband_correlation"]["in1_in2"]["median"]
    s1, s2 = ch["in1"]["broadband_rms_median"] * k, ch["in2"]["broadband_rms_median"] * k
    C_fb = np.array([[s1**2, rho * s1 * s2], [rho * s1 * s2, s2**2]])
    C = B @ C_fb @ B.T
    L = np.linalg.cholesky(C)
    g_rms = float(np.sqrt(np.max(np.diag(C))))
    l1, l2 = ch["in5"]["broadband_rms_median"] * 1e-3 * k, ch["in6"]["broadband_rms_median"] * 1e-3 * k
    rl = summary["broadband_correlation"]["in5_in6"]["median"]
    Ll = np.linalg.cholesky(np.array([[l1**2, rl * l1 * l2], [rl * l1 * l2, l2**2]]))
    l_rms = max(l1, l2)
    return {
        "rig": str(Path(rig_path).relative_to(ROOT)),
        "sample_rate_hz": fs_twin,
        "gauge_positions_mm": [p * 1e3 for p in lay.gauge_positions[:2]],
        "gauge_calibration_nm_per_strain": float(lay.gauge_calibration),
        "mains_amplitude_microstrain": top * 1e6,
        "mains_harmonics": [float(x / top) for x in env],
        "mains_gain": [[float(x) for x in row] for row in amp / env[None, :]],
        "mains_phase_deg": [[float(x) for x in row] for row in np.degrees(np.angle(lines))],
        "gauge_rms_microstrain": g_rms * 1e6,
        "gauge_mix": [[float(x) for x in row] for row in L / g_rms],
        "laser_rms_um": l_rms * 1e6,
        "laser_mix": [[float(x) for x in row] for row in Ll / l_rms],
        "mains_drift_hz": summary["mains_frequency"]["spread_hz"],
    }


def fixture(d, pts, lines, rms, fm):
    """Per-point statistics (all used points) and FIXTURE_POINTS raw streams (in1, in2, in5, in6)."""
    rows = [0, 1, 4, 5]
    rows_pick = np.linspace(0, pts.size - 1, FIXTURE_POINTS).astype(int)
    streams = []
    for i, p in zip(rows_pick, pts[rows_pick]):
        y, phi, _ = stream(d, p)
        streams.append(
            {
                "row": int(i),
                "point": int(p),
                "file": str(d["file"][p]),
                "index": int(d["point_index"][p]),
                "frequency_hz": float(d["frequency"][p]),
                "phi": [float(x) for x in phi],
                "y": [[float(v) for v in y[r]] for r in rows],
            }
        )
    return {
        "channels": ["in1", "in2", "in5", "in6"],
        "frequency_hz": [float(x) for x in d["frequency"][pts]],
        "mains_amplitude": [[[float(abs(v)) for v in lines[i, r]] for r in rows] for i in range(pts.size)],
        "broadband_rms": [[float(rms[i, r]) for r in rows] for i in range(pts.size)],
        "mains_frequency_hz": [float(x) for x in fm],
        "streams": streams,
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
            d = float(np.linalg.norm(cur - prev))
            changes.append(d)
            if n >= min_reads and d < threshold_mN:
                break
            prev = cur
        reads.append(n)
    return {"reads_mean": float(np.mean(reads or [0])), "change_median_mN": float(np.median(changes))}


def read_noise(lab_dir: Path) -> dict:
    """The lab's one-read scatter per residual component (noise_summary.json next to the npz:
    the stream model scaled to the settle traces) and what the settle rule makes of it."""
    src = lab_dir / "noise_summary.json"
    if not src.is_file():
        return {}
    rn = json.loads(src.read_text())["read_noise"]
    s = rn["fig50_calibrated_per_component"]["per_component_mN"]
    out = {
        "per_component_mN": s,
        "rms_mN": float(np.sqrt(np.mean(np.square(s)))),
        "fig50_rms_mN": rn["fig50_equal_components"]["fits"]["excl_NarrowPlastic_MediumForcing_3"][
            "exact_shared_reads"
        ],
        "stream_model_n10_mN": rn["stream_model"]["per_component_mN"]["n=10"],
        "components": ["front sin", "front cos", "back sin", "back cos"],
        "source": "noise_summary.json read_noise.fig50_calibrated_per_component (lab README, 'One settle read')",
    }
    out["settle_rule_1.3mN"] = settle_model(s)
    return out


def _rounded(o, digits: int):
    """``o`` with every float rounded to ``digits`` significant digits (a compact table; the
    streams are float32 on the box, 9 digits keep them exact)."""
    if isinstance(o, float):
        return float(f"{o:.{digits}g}")
    if isinstance(o, dict):
        return {k: _rounded(v, digits) for k, v in o.items()}
    if isinstance(o, list):
        return [_rounded(v, digits) for v in o]
    return o


def main(argv=None):
    a, d = open_lab("fit_lab_noise", __doc__.splitlines()[0], ROOT / "tests" / "data" / "lab_noise_fit.json", argv)
    if d is None:
        return 2
    pts, lines, rms, fm, corr, dens = fit(d)
    summary = summarise(d, pts, lines, rms, fm, corr, dens)
    doc = {
        "provenance": {
            "source": LAB_SOURCE,
            "script": "scripts/fit_lab_noise.py",
            "method": "per-stream least squares (DC, 8 forcing orders, mains multiples 1..5 of 50 Hz); medians over points",
        },
        "lab": {**summary, "read_noise": read_noise(Path(a.lab))},
        "twin": twin_values(summary),
        "fixture": fixture(d, pts, lines, rms, fm),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    fx = doc.pop("fixture")
    streams = fx.pop("streams")
    Path(a.out).write_text(json.dumps(_rounded(doc, 7), indent=1) + "\n")
    fx = {**_rounded(fx, 6), "streams": _rounded(streams, 9)}
    Path(a.out).with_name("lab_noise_fixture.json").write_text(json.dumps(fx, separators=(",", ":")) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k in ("lab", "twin")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

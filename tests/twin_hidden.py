"""Hidden virtual rigs for the ``hbtest twin`` recovery tests (not a test module): the reference
twin with its noise, mains (frequency, drift, lines, phases), demand scatter, converter, channel
gains and lags and clamp (so its modes) replaced by values drawn by a seeded generator inside
plausible ranges (not tuned), and the truth each fitted quantity is compared with."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hbtest.twin.write import blocks

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "instruments" / "virtual-cantilever.toml"
REPLACED = ("virtual.noise", "virtual.mains", "virtual.demand_scatter", "virtual.adc", "virtual.clamp")


def _m(a) -> str:
    return "[" + ", ".join("[" + ", ".join(f"{x:.6g}" for x in row) + "]" for row in np.asarray(a)) + "]"


def draw(seed: int) -> dict:
    """The hidden rig's values (SI-free, as the rig file writes them) drawn from ``seed``."""
    g = np.random.default_rng([42, seed])
    u = g.uniform
    return {
        "laser_rms_um": u(1.0, 4.0), "laser_mix": [[1.0, 0.0], [u(-0.2, 0.2), u(0.7, 1.1)]],
        "gauge_rms_microstrain": u(0.08, 0.3), "gauge_mix": [[1.0, 0.0], [u(-0.6, 0.6), u(0.6, 1.1)]],
        "mains_hz": u(49.9, 50.2), "drift_hz": u(0.0, 0.1), "amplitude_microstrain": u(0.5, 2.0),
        "harmonics": [1.0, u(0.02, 0.1), u(0.5, 1.5), u(0.02, 0.1), u(0.2, 0.8)],
        "gauge_gain": [[u(0.2, 1.0) for _ in range(5)], [1.0] + [u(0.2, 1.0) for _ in range(4)]],
        "gauge_phase_deg": [[u(-180, 180) for _ in range(5)] for _ in range(2)],
        "sd_v": [u(0.0002, 0.0006), u(0.0002, 0.0006)], "correlation": u(0.0, 0.5), "bits": int(g.choice([14, 16])),
        "scale_factor": {"l2": u(0.97, 1.03), "g1": u(0.95, 1.05), "g2": u(0.95, 1.05)},
        "skew_us": {"l2": u(0.0, 30.0), "g1": u(0.0, 30.0), "g2": u(0.0, 30.0)},
        "clamp_mass_kg": 0.6 * u(0.8, 1.25), "support_stiffness_n_per_m": 200.0 * u(0.7, 1.4),
        "rotational_stiffness_nm_per_rad": 0.5 * u(0.7, 1.4),
    }


def rig_text(seed: int) -> str:
    """The hidden rig file of ``seed``."""
    v = draw(seed)
    kept = "\n".join(body for name, body in blocks(REFERENCE.read_text()) if name not in REPLACED
                     and not name.startswith("virtual.true_sensors"))
    kept = "\n".join(line for line in kept.splitlines() if not line.startswith("seed ="))
    kept = kept.replace("[virtual]\n", f"[virtual]\nseed = {1000 + seed}\n", 1)
    tables = [
        "[virtual.clamp]", f"mass_kg = {v['clamp_mass_kg']:.6g}", "inertia_kg_m2 = 1.5e-3",
        f"support_stiffness_n_per_m = {v['support_stiffness_n_per_m']:.6g}", "support_damping_n_s_per_m = 2.0",
        f"rotational_stiffness_nm_per_rad = {v['rotational_stiffness_nm_per_rad']:.6g}", "rotational_damping_nms_per_rad = 0.005", "",
        "[virtual.noise]", f"laser_rms_um = {v['laser_rms_um']:.6g}", f"laser_mix = {_m(v['laser_mix'])}",
        f"gauge_rms_microstrain = {v['gauge_rms_microstrain']:.6g}", f"gauge_mix = {_m(v['gauge_mix'])}", "",
        "[virtual.mains]", f"frequency_hz = {v['mains_hz']:.6g}", f"drift_hz = {v['drift_hz']:.6g}", "drift_period_s = 1800.0",
        f"amplitude_microstrain = {v['amplitude_microstrain']:.6g}", f"harmonics = {_m([v['harmonics']])[1:-1]}",
        f"gauge_gain = {_m(v['gauge_gain'])}", f"gauge_phase_deg = {_m(v['gauge_phase_deg'])}", "",
        "[virtual.demand_scatter]", f"sd_v = {_m([v['sd_v']])[1:-1]}", f"correlation = {v['correlation']:.6g}", "",
        "[virtual.adc]", f"bits = {v['bits']}", "range_v = 10.0", ""]
    for ch in ("l2", "g1", "g2"):
        tables += [f"[virtual.true_sensors.{ch}]", f"scale_factor = {v['scale_factor'][ch]:.6g}", f"skew_us = {v['skew_us'][ch]:.6g}", ""]
    return kept + "\n" + "\n".join(tables)


def truth(seed: int, modes=None) -> dict:
    """The value each fitted quantity of ``hbtest twin`` should recover (key as in
    :class:`hbtest.twin.fit.Quantity`): mains lines per gauge relative to the phase of the gauge
    whose fundamental is largest, as the fit states them; ``modes``: the hidden rig's own
    eigenvalues [rad/s] (its ``modes()``), matched to the measured ones by the caller."""
    v = draw(seed)
    out = {"mains.frequency_hz": v["mains_hz"], "demand_scatter.correlation": v["correlation"]}
    out |= {f"demand_scatter.sd_v.{i}": s for i, s in enumerate(v["sd_v"])}
    out |= {"mechanics.clamp.mass_kg": v["clamp_mass_kg"], "mechanics.clamp.inertia_kg_m2": 1.5e-3,
            "mechanics.clamp.support_stiffness_n_per_m": v["support_stiffness_n_per_m"],
            "mechanics.clamp.rotational_stiffness_nm_per_rad": v["rotational_stiffness_nm_per_rad"]}
    for ch in ("l2", "g1", "g2"):
        out[f"channels.{ch}.scale_factor"] = v["scale_factor"][ch]
        out[f"channels.{ch}.skew_us"] = v["skew_us"][ch]
    for kind, names in (("laser", ("l1", "l2")), ("gauge", ("g1", "g2"))):
        unit = "um" if kind == "laser" else "microstrain"
        C = v[f"{kind}_rms_{unit}"] ** 2 * np.asarray(v[f"{kind}_mix"]) @ np.asarray(v[f"{kind}_mix"]).T
        out[f"noise.{names[0]}.rms"], out[f"noise.{names[1]}.rms"] = np.sqrt(np.diag(C))
        out[f"noise.{names[0]}_{names[1]}.correlation"] = C[0, 1] / np.sqrt(C[0, 0] * C[1, 1])
    amp = v["amplitude_microstrain"] * np.asarray(v["harmonics"])[None, :] * np.asarray(v["gauge_gain"])
    ph = np.radians(np.asarray(v["gauge_phase_deg"]))
    ref = int(np.argmax(amp[:, 0]))
    h = np.arange(1, 6)
    for j, g in enumerate(("g1", "g2")):
        for k in range(5):
            out[f"mains.{g}.line{k + 1}_amplitude"] = amp[j, k]
            rel = np.angle(np.exp(1j * (ph[j, k] - h[k] * ph[ref, 0])))
            out[f"mains.{g}.line{k + 1}_phase_deg"] = float(np.degrees(rel))
    return out

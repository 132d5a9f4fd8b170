"""Statistics (:mod:`.measure`) -> twin parameters, each a :class:`Quantity` with its standard
uncertainty and the measurement it came from.

Uncertainties: a mean over records or evaluations, its standard error (the spread between them
over sqrt(n)) or the fit's own where that is larger; a noise rms from N samples ``rms /
sqrt(2 N)`` combined with the channel gain's; a correlation ``(1 - r^2) / sqrt(N)``; the
demand scatter's sd ``sd sqrt((1 + rho^2) / (1 - rho^2) / (4 n))`` (2 n real deviates, AR(1)
correlated), its correlation ``sqrt((1 - rho^2) / n)``. What the records cannot identify is
taken from the rig file (or the reference twin) and said so: the reference laser's absolute
scale and skew, the mains drift's amplitude and period (the command spans minutes; the drift
half an hour), the rig's mechanics beyond the clamp (:mod:`.mechanics` fits the clamp to the
measured modes; beam and shakers are the template's).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Quantity", "LARGE", "fit_channels", "fit_quiet", "fit_scatter", "fit_modes", "complex_of"]

#: a relative standard uncertainty above this is flagged in the report
LARGE = 0.2
#: a band density further than this factor from white is flagged (the twin's noise is white)
NOT_WHITE = 1.25
#: a skew uncertainty is flagged against this [us] at least (1e-4 rad at 16 Hz)
SKEW_FLOOR_US = 1.0


@dataclass(frozen=True)
class Quantity:
    """One fitted value: ``key`` (dotted), ``value``, standard uncertainty ``u`` (None: not
    measured), ``unit``, ``source`` (the measurement), ``note`` (what is not identified, flags)."""

    key: str
    value: float
    u: float | None
    unit: str
    source: str
    note: str = ""
    floor: float = 0.0  # the scale below which a value counts as zero (flagging: u > LARGE max(|value|, floor))

    @property
    def flagged(self) -> bool:
        scale = max(abs(self.value), self.floor)
        return self.u is not None and scale > 0 and self.u > LARGE * scale

    def comment(self) -> str:
        u = "not measured" if self.u is None else f"u = {self.u:.3g} {self.unit}".rstrip()
        flag = " LARGE UNCERTAINTY" if self.flagged else ""
        note = f"; {self.note}" if self.note else ""
        return f"{self.source}, {u}{flag}{note}"


def complex_of(pairs) -> np.ndarray:
    a = np.asarray(pairs, float)
    return a[..., 0] + 1j * a[..., 1]


def _between_frequencies_us(per_frequency: dict) -> float:
    """Standard error [us] of the skew from the spread of its per-frequency values (lag / omega):
    a lag that is not a pure delay (or a beam model off in phase) shows up as uncertainty."""
    tau = [v["lag_rad"] / (2 * np.pi * float(f)) for f, v in per_frequency.items()]
    return float(np.std(tau, ddof=1) / np.sqrt(len(tau)) * 1e6) if len(tau) > 1 else 0.0


def fit_channels(channels: dict, layout) -> tuple[dict, list]:
    """True scale factor (calibrated / nominal scale) and skew [us] per channel; the reference
    laser's are the rig file's (not identifiable from the rig's own motion). The skew's standard
    uncertainty: the calibration's or the spread between its frequencies', the larger."""
    ref = channels["details"]["reference"]
    per_f = channels["details"]["per_frequency"]
    factors, out = {ref: (1.0, 0.0)}, []
    src = "channel calibration ({} Hz, {} repeats)".format(",".join(f"{f:g}" for f in channels["details"]["frequencies_hz"]),
                                                          channels["details"]["repeats"])
    out.append(Quantity(f"channels.{ref}.scale_factor", 1.0, None, "", "rig file",
                        "absolute scale of the reference laser: not identifiable from the rig's own motion (needs a known displacement)"))
    for name, v in channels["values"].items():
        u = channels["standard_uncertainty"][name]
        nom = layout.channel(name).scale
        factors[name] = (v["scale_per_v"] / nom, u["scale_per_v"] / nom)
        out.append(Quantity(f"channels.{name}.scale_factor", v["scale_per_v"] / nom, u["scale_per_v"] / nom, "", src))
        out.append(Quantity(f"channels.{name}.skew_us", v["skew_us"], max(u["skew_us"], _between_frequencies_us(per_f[name])), "us", src,
                            f"relative to {ref} (whose own lag is the rig file's)", floor=SKEW_FLOOR_US))
    return factors, out


def _mains_frequency(records: list, drift_prior_hz: float) -> list:
    f = np.array([r["mains_hz"] for r in records])
    u_fit = np.array([r["u_mains_hz"] for r in records])
    n = f.size
    spread = float(np.std(f, ddof=1)) if n > 1 else 0.0
    u_stat = max(float(np.sqrt(np.mean(u_fit**2) / n)), spread / np.sqrt(n))
    span = records[-1]["elapsed_s"] - records[0]["elapsed_s"]
    src = f"{n} zero-demand records over {span:.0f} s"
    return [Quantity("mains.frequency_hz", float(f.mean()), float(np.hypot(u_stat, drift_prior_hz / np.sqrt(2))), "Hz", src,
                     f"the long-run mean: includes a drift of {drift_prior_hz:g} Hz (not resolved) / sqrt 2"),
            Quantity("mains.record_spread_hz", spread, spread / np.sqrt(max(2 * (n - 1), 1)), "Hz", src,
                     "the records' spread; drift_hz and drift_period_s are not identifiable within the command")]


def _relative_lines(records: list, gauges: list) -> tuple[np.ndarray, np.ndarray, int]:
    """Per record the lines (n_ch, M) [V] turned to one mains phase: that of the gauge whose
    fundamental is largest; the mean and its standard error per real part."""
    L = np.stack([complex_of(r["lines_v"]) for r in records])  # (K, n_ch, M)
    h = np.arange(1, L.shape[2] + 1)
    ref = gauges[int(np.argmax([np.mean(np.abs(L[:, j, 0])) for j in gauges]))]
    rel = L * np.exp(-1j * h[None, None, :] * np.angle(L[:, ref, 0])[:, None, None])
    K = L.shape[0]
    se = np.hypot(np.std(rel.real, axis=0, ddof=1), np.std(rel.imag, axis=0, ddof=1)) / np.sqrt(max(K, 2))
    return rel.mean(axis=0), se, ref


def fit_quiet(quiet: dict, layout, factors: dict, drift_prior_hz: float) -> tuple[dict, list]:
    """Mains (frequency, lines, phases), noise (rms, correlations, shape) and converter from the
    zero-demand records; ``factors``: channel -> (true scale factor, u) from the channel fit."""
    recs, names = quiet["records"], quiet["channels"]
    scale = np.array([layout.channel(n).scale * factors.get(n, (1.0, 0.0))[0] for n in names])
    rel_u = np.array([factors.get(n, (1.0, 0.0))[1] / factors.get(n, (1.0, 0.0))[0] for n in names])
    gauges = [i for i, n in enumerate(names) if layout.channel(n).kind == "strain_gauge"]
    out = _mains_frequency(recs, drift_prior_hz)
    mean, se, ref = _relative_lines(recs, gauges)
    src_l = f"mains lines of {len(recs)} zero-demand records, phases relative to {names[ref]}'s fundamental"
    lines = {}
    for j, n in enumerate(names):
        for k in range(mean.shape[1]):
            a, ua = abs(mean[j, k]) * scale[j], se[j, k] * scale[j]
            unit = "microstrain" if j in gauges else "um"
            lines[(n, k)] = (mean[j, k] * scale[j], ua)
            if j not in gauges and a <= 3 * ua:
                continue  # an insignificant line on a laser: none in the twin either
            note = "" if j in gauges else "SIGNIFICANT, and the twin puts no mains on lasers"
            out.append(Quantity(f"mains.{n}.line{k + 1}_amplitude", a * 1e6, float(np.hypot(ua, a * rel_u[j])) * 1e6, unit, src_l, note))
            if j in gauges and a > 3 * ua:
                out.append(Quantity(f"mains.{n}.line{k + 1}_phase_deg", float(np.degrees(np.angle(mean[j, k]))),
                                    float(np.degrees(ua / max(a, 1e-300))) if j != ref or k else 0.0, "deg", src_l, floor=180.0))
    noise, qn = _noise(quiet, scale, rel_u, names, layout)
    return {"lines": lines, "gauges": [names[j] for j in gauges], "noise": noise}, out + qn


def _noise(quiet: dict, scale, rel_u, names, layout) -> tuple[dict, list]:
    recs = quiet["records"]
    N = sum(r["n_samples"] for r in recs)
    step = min((s for r in recs for s in r["converter_step_v"] if s > 0), default=0.0)
    C = np.mean([np.asarray(r["covariance_v2"]) for r in recs], axis=0) - np.eye(len(names)) * step**2 / 12
    C = C * np.outer(scale, scale)  # physical units
    rms = np.sqrt(np.diag(C))
    spread = np.std([np.sqrt(np.diag(r["covariance_v2"])) for r in recs], axis=0, ddof=1) / np.sqrt(len(recs)) * scale
    src = f"broadband residual of {len(recs)} zero-demand records ({N} samples per channel)"
    out = []
    for j, n in enumerate(names):
        unit, k = ("um", 1e6) if layout.channel(n).kind == "laser" else ("microstrain", 1e6)
        u = float(np.sqrt(max(rms[j] ** 2 / (2 * N), spread[j] ** 2) + (rms[j] * rel_u[j]) ** 2))
        out.append(Quantity(f"noise.{n}.rms", float(rms[j]) * k, u * k, unit, src))
        fs = quiet["sample_rate_hz"]
        shapes = [r["band_density_v"][j] / (r["rms_v"][j] * np.sqrt(2 / fs)) for r in recs]
        shape = float(np.mean(shapes))
        white = 1 / NOT_WHITE <= shape <= NOT_WHITE
        out.append(Quantity(f"noise.{n}.band_over_white", shape, float(np.std(shapes, ddof=1) / np.sqrt(len(recs))), "",
                            f"density in {quiet['band_hz'][0]:g}-{quiet['band_hz'][1]:g} Hz over the white density of the rms",
                            "" if white else "NOT WHITE: the twin's white noise matches the whole-band rms, not this band"))
        for i in range(j):
            r = C[i, j] / (rms[i] * rms[j])
            out.append(Quantity(f"noise.{names[i]}_{n}.correlation", float(r), float((1 - r * r) / np.sqrt(N)), "", src, floor=1.0))
    return {"covariance": C, "names": list(names), "converter_step_v": step}, out


def fit_scatter(scatter: dict) -> tuple[dict, list]:
    """Between-evaluation scatter of the applied fundamental per actuator [V rms per
    coefficient] and the correlation of consecutive offsets, from the evaluations' scatter about
    their demand's mean, the read noise taken out (module docstring)."""
    ev = scatter["evaluations"]
    X = np.stack([complex_of(e["coefficients_v"]) for e in ev])  # (n, n_ch)
    var = np.stack([np.asarray(e["variance_v2"]) for e in ev])
    a = np.array([e["actuator"] for e in ev])
    levels = np.asarray(scatter["levels_v"])
    n_act, n = levels.size, len(ev)
    mean = np.stack([X[a == k].mean(axis=0) for k in range(n_act)])  # (n_act, n_ch)
    H = (mean / levels[:, None]).T  # (n_ch, n_act): channel volts per demand volt
    w = 1.0 / np.sqrt(np.mean(var, axis=0))
    Hw = H * w[:, None]
    P = np.linalg.pinv(Hw)
    delta = (P @ ((X - mean[a]) * w[None, :]).T).T  # (n, n_act)
    read = np.real(np.diag(P @ np.diag(np.mean(var, axis=0) * w**2) @ P.conj().T))
    dof = n / max(n - n_act, 1)
    power = np.mean(np.abs(delta) ** 2, axis=0) * dof - read
    sd = np.sqrt(np.maximum(power, 0) / 2)
    lag = np.real(np.sum(np.conj(delta[:-1]) * delta[1:], axis=0)) / (n - 1)
    rho = float(np.clip(np.sum(lag) / max(np.sum(power), 1e-300), 0.0, 0.99))
    src = f"{n} evaluations at {scatter['frequency_hz']:g} Hz, each actuator alone in turn"
    k = np.sqrt((1 + rho**2) / (1 - rho**2) / (4 * n / n_act))
    out = [Quantity(f"demand_scatter.sd_v.{i}", float(sd[i]), float(np.hypot(sd[i] * k, np.sqrt(read[i] / 2))), "V", src,
                    "read noise subtracted") for i in range(n_act)]
    out.append(Quantity("demand_scatter.correlation", rho, float(np.sqrt((1 - rho**2) / n)), "", src, floor=1.0))
    return {"sd_v": sd, "correlation": rho}, out


def fit_modes(decays: dict) -> tuple[np.ndarray, list]:
    """The modes found in every free-decay run (matched to the first run's within 10 % in
    frequency): natural frequency [Hz] and damping ratio, mean and standard error."""
    runs = [complex_of(r) if len(r) else np.zeros(0, complex) for r in decays["runs"]]
    out: list[Quantity] = []
    found: list[complex] = []
    for lam in runs[0] if runs else []:
        match = [lam] + [r[np.argmin(np.abs(np.abs(r) - abs(lam)))] for r in runs[1:] if r.size]
        match = [m for m in match if abs(abs(m) - abs(lam)) < 0.1 * abs(lam)]
        if len(match) < len(runs):
            continue
        f = np.abs(match) / (2 * np.pi)
        z = -np.real(match) / np.abs(match)
        m = len(match)
        uf = float(np.std(f, ddof=1) / np.sqrt(m)) if m > 1 else None
        uz = float(np.std(z, ddof=1) / np.sqrt(m)) if m > 1 else None
        i = len(found) + 1
        src = f"free decays ({m} runs)"
        out.append(Quantity(f"modes.{i}.frequency_hz", float(f.mean()), uf, "Hz", src,
                            "measured; the clamp is fitted to these frequencies unless the rig is its own template"))
        out.append(Quantity(f"modes.{i}.damping_ratio", float(z.mean()), uz, "", src))
        found.append(complex(np.mean(match)))
    return np.array(found), out

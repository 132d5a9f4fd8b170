"""Channel levels and demand voltage predicted across the band, before the rig runs.

From the design model of the emulated (hybrid) structure at the sweep's force, per frequency
of the sweep's grid (fundamental only: the force acts at k = 1 and the design model is
linear — nonlinear numerical elements are left out of the prediction):

- interface ``U = (D_N + D_P)^-1 F_N,cond`` (u [m], theta [rad]) and the forces applied to the
  PS ``[T, M] = D_P U`` [N, N m] (conventions of :mod:`hbtest.method.sensors`);
- every sensor channel through the rig file's layout: a laser at lever position ``p`` reads
  ``u + p theta`` [m]; a gauge at ``d`` from the interface reads ``(M - T d) / c`` [strain]
  (the straight moment line of :func:`hbtest.method.sensors.moment_line`, c the gauge calibration; it
  neglects the inertia of the segment: ~1.4 % at 20 mm near 18 Hz on the paper twin),
  times ``|filter response|`` of the channel; raw volts ``(physical - offset) / scale``;
  on a virtual rig the mains interference of its ``[virtual.mains]`` is added to the gauge
  peaks (it is in the signal the ADC sees);
- the demand voltage through the plant model of the twin (virtual rigs: the clamp motion per
  demand volt from the twin's full FE model, :func:`hbtest.rig.virtual.reference.frequency_response`);
  other rig kinds have no plant model here: no voltage prediction (said in the report).

Limits (raw volts, peak): virtual — the ADC input range ``[virtual.adc] range_v`` (a sample at
:data:`hbtest.rig.safety.ADC_FULL_SCALE_FRACTION` of it counts as clipped: the point stops
with ``overrange``); box — ``[box.channel_limits]`` (a trip); scpi — the digitiser channel's
``range_v`` (8 divisions about ``offset_v``: clipped). Demand: the actuator's voltage limit
[V] (the point stops with ``voltage_limit``).

Two peaks per channel and grid point: the converged steady state ``|X_i|``, and a bound on
the way there, ``|X_i| + |X_i - X_prev|``: a demand change excites the free modes with (at
most, for a ramp short against the mode's decay) the change of the steady state, which adds
to the new one in the worst phase; ``X_prev`` is the previous grid point's steady state in
test order (rest, 0, before the first point — the iteration then starts from zero demand).
Near a lightly damped resonance the steady state turns by tens of degrees between grid
points, so this bound, not the steady state, is what clips first (the 300 mm split of the
paper cantilever: gauges at 74 % of range at resonance, clipped on the way). A point after a
clipped one starts from the clipped state: the bound does not hold there (said in the notes).
A steady-state peak above :data:`LEVEL_MARGIN` of a limit is reported as "close".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..rig.safety import ADC_FULL_SCALE_FRACTION, channel_window

__all__ = ["ChannelLevel", "LevelFinding", "LevelPrediction", "predict_levels", "LEVEL_MARGIN", "frequency_ranges"]

#: a predicted peak above this fraction of a limit is reported as "close" (the iteration's
#: trial demands and the noise ride on top of the converged level)
LEVEL_MARGIN = 0.9


@dataclass(frozen=True)
class ChannelLevel:
    """Predicted raw peak [V] of one channel at every grid frequency and its window."""

    name: str
    kind: str
    unit: str
    peak_physical: list  # per frequency [m or strain], signal only
    peak_v: list  # per frequency, raw volts, max |raw| (signal + offset + known interference)
    transient_peak_v: list  # per frequency, raw volts: the bound on the way from the previous point
    window_v: tuple  # (low, high) raw volts, or () when the rig gives no limit for the channel
    limit_source: str  # where the window comes from (file and key)
    action: str  # what reaching the window does: "clip" (overrange) or "trip"


@dataclass(frozen=True)
class LevelFinding:
    """One warning: ``what`` (channel or actuator) exceeds (``kind`` = clip | trip |
    voltage) or comes within :data:`LEVEL_MARGIN` of (``close``) its limit over
    ``ranges_hz`` (closed intervals of grid frequencies)."""

    kind: str
    what: str
    peak: float  # the largest predicted value (raw V for channels, V for demand)
    limit: float
    worst_hz: float
    ranges_hz: list
    text: str
    transient: bool = False  # exceeded only by the bound on the way (not at steady state)


@dataclass
class LevelPrediction:
    """Frequencies [Hz]; interface (u [m], theta [rad], T [N], M [N m]) complex coefficients of
    the fundamental, shape (4, n); channels; demand peak [V] per actuator (n_act, n) or None;
    voltage_limits_v per actuator; findings; ``notes`` (what could not be predicted)."""

    frequencies_hz: list
    interface: np.ndarray
    channels: list
    voltage_peak_v: np.ndarray | None
    voltage_limits_v: list
    actuators: list
    findings: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return dict(
            frequencies_hz=list(self.frequencies_hz),
            interface_amplitude=[np.abs(row).tolist() for row in self.interface],
            channels=[asdict(c) for c in self.channels],
            voltage_peak_v=None if self.voltage_peak_v is None else self.voltage_peak_v.tolist(),
            voltage_limits_v=list(self.voltage_limits_v),
            actuators=list(self.actuators),
            findings=[asdict(f) for f in self.findings],
            notes=list(self.notes),
        )


def frequency_ranges(freqs, mask) -> list:
    """Closed intervals [[lo, hi], ...] of consecutive (in sorted frequency) grid points where
    ``mask`` holds."""
    f = np.asarray(freqs, dtype=float)
    order = np.argsort(f, kind="stable")
    fs, ms = f[order], np.asarray(mask, dtype=bool)[order]
    out, start = [], None
    for i, m in enumerate(ms):
        if m and start is None:
            start = i
        if start is not None and (not m or i == ms.size - 1):
            end = i if m else i - 1
            out.append([float(fs[start]), float(fs[end])])
            start = None
    return out


def _fmt_ranges(r) -> str:
    return ", ".join(f"{a:g} Hz" if a == b else f"{a:g}-{b:g} Hz" for a, b in r)


def _channel_limits(rig_cfg) -> tuple[dict, str, str]:
    """name -> raw window (low, high) [V], their source, and the action on reaching it."""
    layout = rig_cfg.sensors
    src = rig_cfg.source.path
    spec = rig_cfg.spec
    if rig_cfg.kind == "virtual":
        r = float(spec.noise.adc_range_v) * ADC_FULL_SCALE_FRACTION
        return {c.name: (-r, r) for c in layout.channels}, f"{src} [virtual.adc] range_v", "clip"
    if rig_cfg.kind == "box":
        w = {name: channel_window(layout.channel(name).scale, layout.channel(name).offset, lim) for name, lim in spec.channel_limits}
        return w, f"{src} [box.channel_limits]", "trip"
    if rig_cfg.kind == "scpi" and getattr(spec, "digitiser", None) is not None:
        w = {c.sensor: (c.offset_v - c.range_v / 2, c.offset_v + c.range_v / 2) for c in spec.digitiser.channels}
        return w, f"{src} [digitiser] range_v", "clip"
    if rig_cfg.kind == "redpitaya":  # the input jumpers: LV +/-1 V, HV +/-20 V
        fs = {"LV": 1.0, "HV": 20.0}
        return {c.sensor: (-fs[c.jumper], fs[c.jumper]) for c in spec.inputs}, f"{src} [redpitaya.inputs] jumper", "clip"
    return {}, "", "clip"


def _voltage_limits(rig_cfg) -> tuple[list, str]:
    """Peak demand limit per actuator [V] and its source."""
    n = len(rig_cfg.actuators)
    src = rig_cfg.source.path
    spec = rig_cfg.spec
    if rig_cfg.kind == "box" and spec.voltage_limits_v:
        return [float(v) for v in spec.voltage_limits_v], f"{src} [box] voltage_limits_v"
    if rig_cfg.kind == "scpi" and getattr(spec, "generator", None) is not None:
        lim = {c.actuator: c.voltage_limit_v for c in spec.generator.channels}
        return [float(lim.get(a, rig_cfg.voltage_limit_v)) for a in rig_cfg.actuators], f"{src} [generator] voltage_limit_v"
    if rig_cfg.kind == "redpitaya":
        lim = {o.actuator: o.voltage_limit_v for o in spec.outputs}
        return [float(lim[a]) for a in rig_cfg.actuators], f"{src} [redpitaya.outputs] voltage_limit_v"
    return [float(rig_cfg.voltage_limit_v)] * n, f"{src} [rig] voltage_limit_v"


def _mains_peak(rig_cfg) -> float:
    """Peak of the twin's mains interference on a gauge [strain] (0 for other rigs)."""
    if rig_cfg.kind != "virtual":
        return 0.0
    nz = rig_cfg.spec.noise
    return float(nz.mains_amplitude * np.sum(np.abs(nz.mains_harmonics)))


def _plant_voltage(rig_cfg, freqs, lasers_target) -> np.ndarray | None:
    """Demand coefficients (n_act, n) that give the predicted laser readings on the twin's
    plant (least squares over the lasers), or None for a rig without a plant model."""
    if rig_cfg.kind != "virtual":
        return None
    from ..rig.virtual.build import build_model_or_config_error
    from ..rig.virtual.reference import frequency_response

    spec = rig_cfg.spec
    model = build_model_or_config_error(spec, spec.simulated_sensors(rig_cfg.sensors), rig_cfg.sample_rate_hz, rig_cfg.source)
    names = list(model.layout.channel_names)
    rows = [names.index(c.name) for c in rig_cfg.sensors.lasers]
    V = np.zeros((model.spec.shakers.__len__(), len(freqs)), complex)
    for i, f in enumerate(freqs):
        G = frequency_response(model, f)[rows]  # per volt of amplifier input (= demand, linear amplifier)
        V[:, i] = np.linalg.lstsq(G, lasers_target[:, i], rcond=None)[0]
    return V


def _channel_findings(ch, fu, amp, extra: float, steady, transient, win, lim_src: str, action: str) -> list:
    """The findings of one channel against its window ``win`` [V]: over it at steady state
    (``steady`` = highest, lowest raw volts and peak), on the way from the previous point
    (``transient``, same), or close to it."""
    hi, lo, peak = steady
    thi, tlo, tpeak = transient
    wmax = float(max(abs(win[0]), abs(win[1])))
    over = (hi >= win[1]) | (lo <= win[0])
    tover = ((thi >= win[1]) | (tlo <= win[0])) & ~over
    close = (np.maximum(hi / win[1], lo / win[0]) >= LEVEL_MARGIN) & ~over & ~tover
    verb = {"clip": "clips (over range: the point stops)", "trip": "trips the rig's channel limit"}[action]
    findings = []
    for kind, mask, pk, is_transient, how in (
        (action, over, peak, False, f"{verb} at steady state"),
        (action, tover, tpeak, True, f"may {'clip' if action == 'clip' else 'trip'} on the way from the previous point's demand (worst-case transient bound)"),
        ("close", close, peak, False, f"comes within {1 - LEVEL_MARGIN:.0%} of its window at steady state"),
    ):
        if not mask.any():
            continue
        r = frequency_ranges(fu, mask)
        j = int(np.flatnonzero(mask)[np.argmax(pk[mask])])
        text = (f"channel {ch.name} {how} at {_fmt_ranges(r)}: predicted peak {pk[j]:.3g} V at {fu[j]:g} Hz"
                f" (steady {amp[j]:.3g} {ch.unit}{f' + interference {extra:.3g}' if extra else ''}) against {wmax:.3g} V ({lim_src})")
        findings.append(LevelFinding(kind, ch.name, float(pk[j]), wmax, float(fu[j]), r, text, is_transient))
    return findings


def _voltage_findings(actuators, fu, vpeak, vlim, vsrc: str) -> list:
    """The findings of every actuator's predicted demand peak against its voltage limit."""
    findings = []
    for a, name in enumerate(actuators):
        frac = vpeak[a] / vlim[a]
        for kind, mask in (("voltage", frac >= 1.0), ("close", (frac >= LEVEL_MARGIN) & (frac < 1.0))):
            if not mask.any():
                continue
            r = frequency_ranges(fu, mask)
            j = int(np.flatnonzero(mask)[np.argmax(frac[mask])])
            verb = "exceeds its voltage limit (the point stops at the limit)" if kind == "voltage" else f"comes within {1 - LEVEL_MARGIN:.0%} of its voltage limit"
            text = f"demand on {name} {verb} at {_fmt_ranges(r)}: predicted {vpeak[a, j]:.3g} V at {fu[j]:g} Hz against {vlim[a]:g} V ({vsrc})"
            findings.append(LevelFinding(kind, name, float(vpeak[a, j]), float(vlim[a]), float(fu[j]), r, text))
    return findings


def predict_levels(cfg, rig_cfg, frequencies_hz=None) -> LevelPrediction:
    """Predict every channel's peak and the demand peak across the sweep (see the module
    docstring). ``frequencies_hz``: default the sweep's grid."""
    from .model import split_substructures

    fu = np.asarray(cfg.sweep.frequencies_hz if frequencies_hz is None else frequencies_hz, dtype=float)
    ns, ps, _ = split_substructures(cfg)
    F = cfg.excitation.force_vector(ns)
    s = 2j * np.pi * fu
    Fc = ns.condensed_force(F, s)  # (n, 2)
    U = np.linalg.solve(ns.dynamic_stiffness(s) + ps.dynamic_stiffness(s), Fc[..., None])[..., 0]
    TM = (ps.dynamic_stiffness(s) @ U[..., None])[..., 0]
    inter = np.concatenate([U.T, TM.T])  # (4, n)
    layout = rig_cfg.sensors
    windows, lim_src, action = _channel_limits(rig_cfg)
    mains = _mains_peak(rig_cfg)
    c = layout.gauge_calibration
    channels, findings, notes = [], [], []
    laser_coef = []
    for ch in layout.channels:
        if ch.kind == "laser":
            x = U[:, 0] + ch.position * U[:, 1]
            laser_coef.append(x)
            extra = 0.0
        else:
            x = (TM[:, 1] - TM[:, 0] * ch.position) / c
            extra = mains
        xf = x * np.array([ch.filter_response(f) for f in fu])
        amp = np.abs(xf)
        way = amp + np.abs(np.diff(np.concatenate([[0.0], xf])))  # bound on the way from the previous point

        def raw(a):
            return (a + extra - ch.offset) / ch.scale, (-(a + extra) - ch.offset) / ch.scale

        hi, lo = raw(amp)
        thi, tlo = raw(way)
        peak = np.maximum(np.abs(hi), np.abs(lo))
        tpeak = np.maximum(np.abs(thi), np.abs(tlo))
        win = windows.get(ch.name, ())
        channels.append(ChannelLevel(ch.name, ch.kind, ch.unit, amp.tolist(), peak.tolist(), tpeak.tolist(), tuple(win), lim_src if win else "", action))
        if not win:
            continue
        findings += _channel_findings(ch, fu, amp, extra, (hi, lo, peak), (thi, tlo, tpeak), win, lim_src, action)
    if any(f.kind in ("clip", "trip") for f in findings):
        notes.append("after a point that clipped, the next starts from the clipped state: expect the failure to carry on beyond the ranges predicted")
    if not windows:
        notes.append(f"rig kind {rig_cfg.kind!r} gives no channel ranges in {rig_cfg.source.path}: channel levels are not checked")
    vlim, vsrc = _voltage_limits(rig_cfg)
    Vc = _plant_voltage(rig_cfg, fu, np.array(laser_coef))
    vpeak = None
    if Vc is None:
        notes.append(f"no plant model for rig kind {rig_cfg.kind!r}: the demand voltage is not predicted")
    else:
        vpeak = np.abs(Vc)  # one harmonic: the peak of a sinusoid is |V_1|
        findings += _voltage_findings(rig_cfg.actuators, fu, vpeak, vlim, vsrc)
    return LevelPrediction(fu.tolist(), inter, channels, vpeak, vlim, list(rig_cfg.actuators), findings, notes)

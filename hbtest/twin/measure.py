"""The twin's measurements, through the :class:`hbtest.rig.Rig` protocol only (any kind of rig).
Each step returns plain statistics (JSON-able: the record ``hbtest twin`` writes; complex numbers
as ``[re, im]``) and never leaves a demand applied; :mod:`.fit` turns them into twin parameters.

``quiet`` — zero-demand records (:func:`hbtest.calibration.procedures.acquire_zero`): per record,
the mains frequency (:func:`~hbtest.calibration.procedures.mains_from_record`, the ``calibrate``
fit with its Gauss–Newton uncertainty), then per channel the mains lines at that frequency, DC
and the broadband residual (:func:`hbtest.rig.virtual.noisefit.line_fit`): the residual's
covariance between channels, its rms, its density in :data:`~hbtest.rig.virtual.noisefit.BAND_HZ`
(:func:`~hbtest.rig.virtual.noisefit.band_density`: the spectrum's shape against white), and the
smallest step between sample values (the converter's step).

``decays`` — the rig's modes from its free decays (:func:`rig_modes`, the one use of
:mod:`hbtest.rig.identify`), repeated to give their scatter.

``channels`` — gains and lags of the channels relative to the first laser,
:func:`hbtest.calibration.procedures.calibrate_channels` as ``hbtest calibrate`` runs it, with
the measured mains rejected.

``scatter`` — repeated evaluations at fixed demands: each actuator alone at a demand sized by
:func:`~hbtest.calibration.procedures.probed_level`, alternately, so every evaluation follows a
change of demand; per evaluation the fundamental of every channel and its read variance
(:func:`hbtest.method.harmonics.fit`, the measured mains rejected).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..calibration.procedures import (
    ChannelSettings,
    MainsSettings,
    acquire_zero,
    calibrate_channels,
    mains_from_record,
    probed_level,
)
from ..method import harmonics
from ..rig import identify
from ..rig.virtual.noisefit import BAND_HZ, band_density, line_fit

__all__ = ["TwinSettings", "measure_quiet", "rig_modes", "measure_decays", "measure_channels", "measure_scatter", "pairs", "settle_s"]


@dataclass(frozen=True)
class TwinSettings:
    """How much of each measurement (the defaults take about 6 minutes of rig time on the paper
    rig). quiet: records of ``quiet_record_s`` [s] after ``quiet_settle_s`` [s] each; decays:
    repeats of the free-decay experiment at ``decay_voltage_fraction`` of the voltage limit;
    channels: the channel calibration's settings; scatter: evaluations at ``scatter_hz`` of
    ``scatter_periods`` periods after each change of demand, settled for :data:`SETTLE_TIME_CONSTANTS`
    time constants of the slowest measured mode, at least ``scatter_settle_s`` and at most
    ``scatter_settle_max_s`` [s] (a transient left in the record would count as read noise)."""

    quiet_records: int = 6
    quiet_record_s: float = 4.0
    quiet_settle_s: float = 2.0
    mains_multiples: int = 5  # lines measured (at least the rig file's mains_multiples; below Nyquist)
    decay_repeats: int = 2
    decay_voltage_fraction: float = 0.5
    channels: ChannelSettings = field(default_factory=lambda: ChannelSettings(
        frequencies_hz=(2.0, 3.0, 14.0), n_periods=20, repeats=4, settle_s=4.0))
    scatter_hz: float = 5.0
    scatter_evaluations: int = 50
    scatter_periods: int = 10
    scatter_settle_s: float = 1.0
    scatter_settle_max_s: float = 3.0

    def bounds_s(self, n_actuators: int) -> dict:
        """The most rig time [s] each step takes (ramps of 2 periods and probes included)."""
        c = self.channels
        per_f = [(4 + c.settle_s * f * 2 + max(2, c.n_periods // 4) + c.repeats * c.n_periods) / f for f in c.frequencies_hz]
        decay = 4.0 / (150.0 / 24) + 1.5 + 0.1  # identify's defaults: a 6.25 Hz multisine, 1.5 s of decay
        scatter = (2 + self.scatter_settle_max_s * self.scatter_hz + self.scatter_periods) / self.scatter_hz
        probe = (4 + 2 * c.settle_s * self.scatter_hz + 2) / self.scatter_hz
        return {"quiet": self.quiet_records * (self.quiet_record_s + self.quiet_settle_s + 2.0),
                "decays": self.decay_repeats * n_actuators * decay,
                "channels": n_actuators * sum(per_f) + 2.0 / min(c.frequencies_hz),
                "scatter": n_actuators * probe + self.scatter_evaluations * scatter + 2.0 / self.scatter_hz}


#: the scatter's settling after each change of demand, in time constants of the slowest mode
SETTLE_TIME_CONSTANTS = 6.0


def settle_s(decays: dict, settings: TwinSettings) -> float:
    """The scatter's settling time [s] after each change of demand (:class:`TwinSettings`)."""
    decay_rates = [-re for run in decays["runs"] for re, _ in run if re < 0]
    tau = 1.0 / min(decay_rates) if decay_rates else 0.0
    return float(min(max(SETTLE_TIME_CONSTANTS * tau, settings.scatter_settle_s), settings.scatter_settle_max_s))


def pairs(z) -> list:
    """Complex array -> nested ``[re, im]`` lists (JSON)."""
    z = np.asarray(z, complex)
    return np.stack([z.real, z.imag], axis=-1).tolist()


def _converter_step(y: np.ndarray) -> float:
    """The smallest step between the distinct sample values of a channel (0: none)."""
    d = np.diff(np.unique(y))
    d = d[d > 0]
    return float(d.min()) if d.size else 0.0


def _quiet_record(acq, layout, mains: MainsSettings, multiples: int) -> dict:
    names = layout.channel_names
    fm = mains_from_record(acq, layout, mains)
    f = float(fm.values["mains_hz"])
    t = np.asarray(acq.t, float)
    y = np.stack([np.asarray(acq.data[n], float) for n in names])
    phi = np.zeros_like(t)
    h = np.arange(1, multiples + 1)
    h = h[h * f < 0.45 * acq.sample_rate_hz]
    lines, rms = line_fit(y, phi, t, f, tuple(h), orders=0)
    fitted = np.real(lines @ np.exp(2j * np.pi * np.outer(h * f, t)))
    res = y - fitted
    res -= res.mean(axis=1, keepdims=True)
    return {"t0_s": float(t[0]), "elapsed_s": float(acq.elapsed_s), "n_samples": int(t.size),
            "mains_hz": f, "u_mains_hz": float(fm.standard_uncertainty["mains_hz"]),
            "lines_v": pairs(lines), "rms_v": rms.tolist(), "covariance_v2": np.cov(res).tolist(),
            "band_density_v": band_density(y, phi, t, BAND_HZ, f, tuple(h), orders=0).tolist(),
            "converter_step_v": [_converter_step(row) for row in y]}


def measure_quiet(rig, layout, settings: TwinSettings) -> dict:
    """Zero-demand statistics (module docstring), ``settings.quiet_records`` records."""
    n_act = len(rig.describe().actuators)
    mains = MainsSettings(record_s=settings.quiet_record_s, settle_s=settings.quiet_settle_s)
    multiples = max(1, layout.mains_multiples, settings.mains_multiples)
    records = [_quiet_record(acquire_zero(rig, n_act, mains), layout, mains, multiples) for _ in range(settings.quiet_records)]
    rig.safe_state()
    return {"channels": list(layout.channel_names), "multiples": multiples,
            "sample_rate_hz": float(rig.describe().sample_rate_hz), "input_range_v": rig.describe().input_range_v, "band_hz": list(BAND_HZ), "records": records}


#: harmonics of the free-decay multisine (fewer when the rig's generator offers fewer: a HELIC-DAQ
#: experiment says how many in ``describe().details["harmonics"]``)
DECAY_ORDERS = 24


def rig_modes(rig, voltage_v: float) -> np.ndarray:
    """The rig's modes [rad/s] from its free decays: the one place the twin identifies them
    (:func:`hbtest.rig.identify.free_decay_modes` today; a stored identification record later)."""
    orders = min(DECAY_ORDERS, int(rig.describe().details.get("harmonics", DECAY_ORDERS)))
    return identify.free_decay_modes(rig, voltage_v, orders=orders)


def measure_decays(rig, settings: TwinSettings) -> dict:
    """The modes of ``settings.decay_repeats`` free-decay experiments."""
    v = settings.decay_voltage_fraction * rig.describe().voltage_limit_v
    runs = [pairs(rig_modes(rig, v)) for _ in range(settings.decay_repeats)]
    rig.safe_state()
    return {"voltage_v": v, "runs": runs}


def measure_channels(rig, physical, layout, settings: TwinSettings) -> dict:
    """Gains and lags relative to the first laser (``hbtest calibrate``'s channel procedure)."""
    r = calibrate_channels(rig, physical, layout, settings.channels)
    return {"values": r.values["channels"], "standard_uncertainty": r.standard_uncertainty["channels"],
            "details": r.details["channels"]}


def measure_scatter(rig, layout, settings: TwinSettings, settle: float) -> dict:
    """Evaluations at fixed demands, each actuator alone in turn (module docstring), each
    ``settle`` [s] after its change of demand."""
    desc = rig.describe()
    n_act, f = len(desc.actuators), settings.scatter_hz
    probe = replace(settings.channels, settle_s=settings.scatter_settle_s)
    levels = [probed_level(rig, desc, layout, probe, f, a, desc.input_range_v or 10.0) for a in range(n_act)]
    names = layout.channel_names
    evaluations = []
    for k in range(settings.scatter_evaluations):
        a = k % n_act
        V = np.zeros((n_act, 1), complex)
        V[a, 0] = levels[a]
        rig.set_demand(f, V, [1])
        rig.wait(settle * f)
        acq = rig.acquire(settings.scatter_periods)
        raw = np.stack([np.asarray(acq.data[n], float) for n in names])
        fit = harmonics.fit(acq.t, raw, f, [1], n_periods=acq.n_periods, nuisance_hz=layout.mains_frequencies)
        evaluations.append({"actuator": a, "coefficients_v": pairs(fit.coefficients[:, 0]),
                            "variance_v2": fit.variance[:, 0].tolist()})
    rig.safe_state()
    return {"frequency_hz": f, "settle_s": settle, "levels_v": [float(v) for v in levels], "channels": list(names), "evaluations": evaluations}

"""The classical real-time hybrid test against the iterative Fourier-domain test at every
frequency of a sweep (what ``hbtest compare`` runs; docs/method.md §4).

For each sweep frequency, :func:`classical_point` runs the classical test of the sweep's
cantilever (:func:`~hbtest.realtime.classical.cantilever_benchmark`: NS root beam, PS tip beam with
the same damping model, pure actuator delay or a second-order actuator plus the delay) under
steady harmonic forcing from rest: unstable (growth rate, dominant frequency) or its FRF error
against the emulated structure. The iterative test runs through :func:`hbtest.sweep.runner.run` into
a store; :func:`iterative_points` reads its FRFs with :mod:`hbtest.analysis.frf`. The delay-equation
analysis (:mod:`hbtest.realtime.stability`) predicts the critical delay of the split.

FRFs are interface displacement ``u`` per unit external force [m/N] at the fundamental, as
``[re, im]`` pairs in the JSON-ready dicts (``x(t) = Re(X e^{i w t})``, docs/method.md §0).
Errors are relative, ``|H - H_ref| / |H_ref|``.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ...events import Event
from .loop import Excitation, check_run_size, simulate
from .outputs import check_store_target
from .response import finite_or_none
from .systems import HybridSystem, cantilever_benchmark
from .transfer import TransferSystem

__all__ = [
    "ACTUATOR_DAMPING_RATIO",
    "ClassicalPointDone",
    "CompareResult",
    "classical_point",
    "iterative_points",
    "compare_sweep",
]

ACTUATOR_DAMPING_RATIO = 0.7
"""Damping ratio of the second-order actuator model of a comparison (``actuator_hz``)."""

STEADY_FRACTION = 0.1
"""Share of a forced run (its end) from which a stable point's FRF is taken."""

MIN_STEADY_PERIODS = 3
"""Fewest forcing periods a stable point's FRF is fitted over."""

NEUTRAL_CHAIN_NOTE_FRACTION = 0.8
"""Simulated growth above this fraction of the analysis cut-off is flagged as the neutral
root chain of the split beam."""


def classical_point(system: HybridSystem, transfer: TransferSystem, frequency_hz: float, dt: float, duration: float,
                    amplitude: float) -> dict:
    """The classical test at one frequency: a harmonic forcing run from rest for ``duration``
    seconds; stability verdict from the response envelope; when stable, the FRF (u channel,
    per newton of ``amplitude``) from the last :data:`STEADY_FRACTION` of the run (at least
    :data:`MIN_STEADY_PERIODS` periods) against the emulated one."""
    res = simulate(system, transfer, None, dt, duration, Excitation(frequency_hz, 1.0))
    g = res.growth()
    H_em = complex(system.interface_response(frequency_hz)[0]) / amplitude
    out = dict(stable=bool(res.stable), blew_up=bool(res.blew_up), simulated_s=float(res.t[-1]),
               growth_rate_per_s=finite_or_none(g.rate), dominant_frequency_hz=finite_or_none(g.frequency_hz),
               emulated_frf_m_per_n=[H_em.real, H_em.imag], frf_error=None, amplitude_error=None, frf_m_per_n=None)
    if out["stable"]:
        periods = max(MIN_STEADY_PERIODS, int(STEADY_FRACTION * duration * frequency_hz))
        H = complex(res.steady_amplitude(periods)[0]) / amplitude
        out.update(frf_m_per_n=[H.real, H.imag], frf_error=abs(H - H_em) / abs(H_em), amplitude_error=abs(H) / abs(H_em) - 1.0)
    return out


def iterative_points(ds) -> list[dict]:
    """Per stored frequency of a run store's dataset: converged, iterations, FRF (u/F,
    harmonic 1, :func:`hbtest.analysis.frf.frf`; NaN -> None where the slot is not done), the
    reference FRF and the relative error (:func:`hbtest.analysis.frf.relative_error`) when the store
    has a reference."""
    from ...analysis.frf import frf, relative_error

    H = frf(ds, "measured").sel(dof="u").values
    nan = np.full(H.shape, complex("nan"))
    has_ref = "reference_interface_displacement" in ds
    Hr = frf(ds, "reference").sel(dof="u").values if has_ref else nan
    err = relative_error(ds).sel(dof="u").values if has_ref else nan.real
    conv = ds["converged"].values.astype(bool)
    iters = ds["iterations"].values if "iterations" in ds else [None] * conv.size
    freqs = ds["frequency"].values
    return [
        dict(frequency_hz=float(freqs[i]), converged=bool(conv[i]), iterations=None if iters[i] is None else int(iters[i]),
             frf_m_per_n=[finite_or_none(H[i].real), finite_or_none(H[i].imag)],
             reference_frf_m_per_n=[finite_or_none(Hr[i].real), finite_or_none(Hr[i].imag)], frf_error=finite_or_none(err[i]))
        for i in range(freqs.size)
    ]


@dataclass(frozen=True)
class ClassicalPointDone(Event):
    """Progress event: the classical test at ``frequency_hz`` (point ``index`` of the sweep)
    finished with ``point`` (a :func:`classical_point` dict)."""

    index: int
    frequency_hz: float
    point: dict


@dataclass
class CompareResult:
    """A comparison: settings, the predicted critical delay of the split (``stability``:
    ``critical_delay_s``, ``frequency_hz``, ``boundary``, ``cutoff_hz``,
    ``unstable_roots_at_delay`` — or ``error``), per frequency ``{frequency_hz, classical,
    iterative}`` (``iterative`` None when the sweep stopped before that point), the
    summary counts and largest errors, ``notes`` (sentences worth showing), the store path
    (None when a temporary store was used and removed). ``system``, ``start_hz``,
    ``stop_hz``, ``amplitude``, ``name`` are kept for plotting (not in :meth:`to_dict`)."""

    sweep: str
    name: str
    delay_s: float
    dt_s: float
    duration_s: float
    transfer: str
    actuator_hz: float | None
    stability: dict | None
    points: list
    summary: dict
    store: str | None
    system: HybridSystem
    start_hz: float
    stop_hz: float
    amplitude: float
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        out = dict(sweep=self.sweep, delay_s=self.delay_s, dt_s=self.dt_s, duration_s=self.duration_s, transfer=self.transfer,
                   actuator_hz=self.actuator_hz, stability=self.stability, points=self.points, summary=self.summary)
        if self.store is not None:
            out["store"] = self.store
        return out


def _stability(system: HybridSystem, delay: float) -> dict:
    try:
        cd = system.stability_system().critical_delay()
        return dict(critical_delay_s=finite_or_none(cd.delay_s), frequency_hz=finite_or_none(cd.frequency_hz), boundary=cd.boundary,
                    cutoff_hz=cd.cutoff_hz, unstable_roots_at_delay=int(cd.unstable_roots(delay)) if math.isfinite(cd.delay_s) else 0)
    except Exception as e:  # a prediction is a bonus; never fail the comparison for it
        return dict(error=str(e))


def _summary(points: list) -> dict:
    def largest(values):
        return finite_or_none(max(values, default=float("nan")))

    return dict(
        n_points=len(points),
        classical_unstable=sum(not p["classical"]["stable"] for p in points),
        iterative_converged=sum(bool(p["iterative"] and p["iterative"]["converged"]) for p in points),
        classical_max_frf_error=largest([p["classical"]["frf_error"] for p in points if p["classical"]["frf_error"] is not None]),
        iterative_max_frf_error=largest([p["iterative"]["frf_error"] for p in points
                                         if p["iterative"] and p["iterative"]["frf_error"] is not None]),
    )


def _notes(points: list, stability: dict | None) -> list[str]:
    cut = stability.get("cutoff_hz") if stability else None
    fd = [p["classical"]["dominant_frequency_hz"] for p in points
          if not p["classical"]["stable"] and p["classical"]["dominant_frequency_hz"]]
    if cut and fd and min(fd) > NEUTRAL_CHAIN_NOTE_FRACTION * cut:
        return [f"the simulated growth is at {min(fd):.0f}-{max(fd):.0f} Hz, near or above the {cut:g} Hz actuator cut-off of the "
                "stability analysis: the neutral root chain of the split beam (its interface inertia fed back through the delay)"]
    return []


def compare_sweep(cfg, delay: float, *, dt: float = 2e-4, duration: float = 6.0, actuator_hz: float | None = None,
                  store_path=None, overwrite: bool = False, seed: int | None = None, overrides=(),
                  progress: Callable[[object], None] | None = None) -> CompareResult:
    """Compare the classical test (actuator ``delay`` [s], step ``dt`` [s], ``duration`` [s]
    per frequency; ``actuator_hz``: a second-order actuator of damping
    :data:`ACTUATOR_DAMPING_RATIO` at that frequency plus the delay) with the iterative test
    of the sweep ``cfg`` (a :class:`hbtest.config.SweepConfig` loaded with ``overrides``).

    The iterative sweep is written to ``store_path`` (refused if it exists unless
    ``overwrite``; checked before anything runs) or to a temporary store removed afterwards.
    ``seed``: the virtual rig's noise. ``progress`` receives a :class:`ClassicalPointDone`
    per classical point and the sweep's own :mod:`hbtest.events`. ValueError for settings
    out of range (see :func:`~hbtest.realtime.classical.check_run_size`)."""
    if not (math.isfinite(delay) and delay >= dt * (1 - 1e-9)):
        raise ValueError(f"the delay ({delay:g} s) must be at least one time step ({dt:g} s)")
    check_run_size(dt, duration, delay)
    if store_path is not None:
        check_store_target(store_path, overwrite)
    transfer = TransferSystem("delay", delay)
    if actuator_hz is not None:
        if not (math.isfinite(actuator_hz) and 0 < actuator_hz < 0.5 / dt):
            raise ValueError(f"the actuator frequency ({actuator_hz:g} Hz) must be positive and below the Nyquist frequency {0.5 / dt:g} Hz")
        transfer = TransferSystem("lag2", delay, natural_frequency_hz=actuator_hz, damping_ratio=ACTUATOR_DAMPING_RATIO)
    emit = progress or (lambda event: None)
    system = cantilever_benchmark(cfg)
    amp = cfg.excitation.amplitude
    freqs = [float(f) for f in cfg.sweep.frequencies_hz]

    cache: dict[float, dict] = {}
    classical = []
    for i, f in enumerate(freqs):
        key = round(f, 9)
        if key not in cache:
            cache[key] = classical_point(system, transfer, f, dt, duration, amp)
            emit(ClassicalPointDone(i, f, dict(cache[key])))
        classical.append(dict(cache[key]))
    stab = _stability(system, delay) if transfer.kind == "delay" else None

    iterative = _iterative(cfg, store_path, overwrite, seed, overrides, progress)
    points = [dict(frequency_hz=f, classical=classical[i], iterative=iterative[i] if i < len(iterative) else None)
              for i, f in enumerate(freqs)]
    return CompareResult(
        sweep=str(cfg.source.path), name=cfg.name, delay_s=delay, dt_s=dt, duration_s=duration, transfer=transfer.kind,
        actuator_hz=actuator_hz, stability=stab, points=points, summary=_summary(points),
        store=None if store_path is None else str(store_path), system=system,
        start_hz=cfg.sweep.start_hz, stop_hz=cfg.sweep.stop_hz, amplitude=amp, notes=_notes(points, stab),
    )


def _iterative(cfg, store_path, overwrite, seed, overrides, progress) -> list[dict]:
    """Run the iterative sweep (:func:`hbtest.sweep.runner.run`, no Bode plot) and read its points."""
    from ...sweep.runner import run

    tmp = None
    if store_path is None:
        tmp = tempfile.mkdtemp(prefix="hbtest-compare-")
        store_path = Path(tmp) / f"{cfg.name}.zarr"
    try:
        ds = run(cfg, store_path, progress=progress, overwrite=overwrite, plot=False, seed=seed, overrides=tuple(overrides))
        return iterative_points(ds)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)

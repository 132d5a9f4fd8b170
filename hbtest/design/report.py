"""Test-design report for a sweep file (docs/method.md §1): modes of the emulated (hybrid) structure,
clamped-interface modes of both substructures, nodes of the modes, and warnings.

Why these numbers matter: poles of ``D_N`` and ``D_P`` (clamped-interface modes) are
anti-resonances of the hybrid interface response — exciting near one makes small interface
motion need large forces (ill-conditioning, rig danger); a node of the target mode at the
interface makes the mode uncontrollable from the interface.

Harmonics checked (:func:`harmonic_findings`): k f for the sweep's forcing harmonics and
:data:`CHECKED_HARMONICS` (2, 3 — where amplifier or structural distortion lands), over the
whole band, against the clamped-interface modes (within :data:`CLAMPED_MODE_MARGIN`) and the
mains multiples of the rig file (within :data:`MAINS_SLOW_MARGIN`); each finding names the
sweep frequencies concerned. The report also carries the per-point mains decisions
(:mod:`hbtest.design.mains`) and the channel-level / demand prediction
(:mod:`hbtest.design.levels`). Lengths in mm, frequencies in Hz.

The target mode (``test.target_mode``, counted from 1 in ascending frequency) must be a mode
the rig can test: one of the FE model's modes *and* below the rig's usable frequency limit
(sample rate / :data:`hbtest.method.harmonics.NYQUIST_MARGIN`, the bound a sweep is held to). Otherwise
:func:`design_report` raises a :class:`~hbtest.errors.ConfigError` naming ``test.target_mode``
and how many modes there are. The report lists at least ``n_modes`` modes, and always up to
the target mode.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ..config import SweepConfig
from ..errors import ConfigError
from ..method.substructure import join_beams, mode_nodes
from .model import physical_beam_for_design, split_substructures

__all__ = [
    "DesignReport", "DesignFinding", "design_report", "physical_beam_for_design", "split_substructures",
    "CLAMPED_MODE_MARGIN", "NODE_AMPLITUDE_FRACTION", "CHECKED_HARMONICS", "MAINS_SLOW_MARGIN",
]

# a sweep frequency (or one of its harmonics) within this relative distance of a clamped-
# interface mode triggers a warning
CLAMPED_MODE_MARGIN = 0.10
#: harmonics of the band checked besides the sweep's own forcing harmonics (distortion of the
#: amplifiers and of a nonlinear structure lands there)
CHECKED_HARMONICS = (2, 3)
#: a harmonic within this relative distance of a mains multiple averages out slowly
MAINS_SLOW_MARGIN = 0.02
# the interface is "near a node" when the target mode's interface displacement is below this
# fraction of the mode's largest displacement
NODE_AMPLITUDE_FRACTION = 0.10


@dataclass
class DesignReport:
    """All lengths in mm from the root, frequencies in Hz."""

    hybrid_modes_hz: list
    hybrid_damping_ratios: list
    ns_clamped_interface_modes_hz: list
    ps_clamped_interface_modes_hz: list
    mode_nodes_mm: list
    interface_mm: float
    total_length_mm: float
    target_mode: int
    target_mode_hz: float
    interface_relative_amplitude: float
    sweep_hz: tuple
    harmonics: tuple
    ps_source: str
    warnings: list = field(default_factory=list)
    #: the warnings as data (:class:`DesignFinding` dicts), with the frequency range concerned
    findings: list = field(default_factory=list)
    #: channel levels and demand predicted across the band (:meth:`LevelPrediction.to_dict`)
    levels: dict | None = None
    #: the per-point mains decisions the sweep will apply (:meth:`MainsPlan.to_dict`)
    mains: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class DesignFinding:
    """One warning of the design check. ``kind``: clamped_mode | mains_slow | mains_coincidence
    | target_outside | node | clip | trip | voltage | close; ``harmonic``: the order k concerned
    (0 when none); ``range_hz``: the sweep frequencies concerned, [lo, hi] (fundamental, Hz);
    ``at_hz``: the frequency of the mode or mains multiple met (Hz, 0 when none)."""

    kind: str
    text: str
    range_hz: tuple
    harmonic: int = 0
    at_hz: float = 0.0


def _check_target_mode(cfg: SweepConfig, tm: int, freqs_hz) -> None:
    """ConfigError (naming ``test.target_mode``) for a mode the emulated structure does not
    have, or has only above the frequencies the rig can excite."""
    from ..config import load_rig
    from ..method.harmonics import NYQUIST_MARGIN

    n_all = int(np.size(freqs_hz))
    if tm > n_all:
        raise ConfigError(cfg.source.path, "test.target_mode", f"mode {tm} does not exist: the emulated structure's model has {n_all} modes")
    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    limit = rig.sample_rate_hz / NYQUIST_MARGIN
    f = float(freqs_hz[tm - 1])
    if f >= limit:
        n_ok = int(np.count_nonzero(np.asarray(freqs_hz) < limit))
        raise ConfigError(
            cfg.source.path, "test.target_mode",
            f"mode {tm} of the emulated structure is at {f:.4g} Hz, above the usable limit {limit:g} Hz of rig {rig.source.path}"
            f" (sample rate {rig.sample_rate_hz:g} Hz / {NYQUIST_MARGIN}); the structure has {n_ok} modes below it",
        )


def _target_findings(tm: int, f_target: float, rel_amp: float, nodes_mm, ln: float, lo: float, hi: float) -> list:
    """The target mode outside the band [lo, hi] Hz, or the interface (at ``ln`` [m]) near one
    of its nodes (``nodes_mm``)."""
    warnings = []
    if not lo <= f_target <= hi:
        warnings.append(f"target mode {tm} ({f_target:.3f} Hz) lies outside the sweep band {lo:g}-{hi:g} Hz")
    if rel_amp < NODE_AMPLITUDE_FRACTION:
        near = min(nodes_mm, key=lambda x: abs(x - ln * 1e3), default=None)
        warnings.append(
            f"the interface at {ln * 1e3:g} mm is near a node of mode {tm}"
            + (f" (node at {near:.1f} mm)" if near is not None else "")
            + f": interface amplitude {rel_amp:.1%} of the mode's maximum — the mode is barely controllable"
        )
    return [DesignFinding("target_outside" if "outside" in w else "node", w, (lo, hi)) for w in warnings]


def design_report(cfg: SweepConfig, n_modes: int = 6, with_levels: bool = True) -> DesignReport:
    """The design report of a sweep file (see the module docstring); ``with_levels=False``
    skips the channel-level prediction (:func:`hbtest.design.levels.predict_levels`)."""
    from ..config import load_rig
    from .levels import predict_levels
    from .mains import plan_mains

    rig = load_rig(cfg.rig_path, cfg.rig_overrides)
    ns, ps, ps_source = split_substructures(cfg)
    ln = cfg.numerical.beam.length
    hybrid = join_beams(ns, ps)
    modes = hybrid.modes()
    tm = cfg.test.target_mode
    _check_target_mode(cfg, tm, modes.frequencies_hz)
    n = max(min(n_modes, modes.frequencies_hz.size), tm)
    nodes = [(mode_nodes(hybrid, modes.shapes[:, i]) * 1e3).tolist() for i in range(n)]
    ns_cim = ns.clamped_interface_modes()
    ps_cim = ps.clamped_interface_modes()
    f_target = float(modes.frequencies_hz[tm - 1])
    shape = hybrid.full_vector(modes.shapes[:, tm - 1])[:, 0]
    j_if = ns.structure.x_nodes.size - 1
    rel_amp = float(abs(shape[j_if]) / np.abs(shape).max())
    lo, hi = cfg.sweep.start_hz, cfg.sweep.stop_hz
    findings = _target_findings(tm, f_target, rel_amp, nodes[tm - 1], ln, lo, hi)
    findings += harmonic_findings(ns_cim, ps_cim, cfg.sweep.harmonics, lo, hi, rig.sensors)
    plan = plan_mains(cfg, rig.sensors)
    for d in plan.decisions:
        findings.append(DesignFinding("mains_coincidence", f"point {d.index + 1}: {d.note}", (d.requested_hz, d.requested_hz), d.pairs[0][0],
                                      d.pairs[0][1] * rig.sensors.mains_hz))
    levels = predict_levels(cfg, rig) if with_levels else None
    if levels is not None:
        findings += [DesignFinding(f.kind, f.text, (f.ranges_hz[0][0], f.ranges_hz[-1][1])) for f in levels.findings]
    warnings = [f.text for f in findings]
    return DesignReport(
        hybrid_modes_hz=modes.frequencies_hz[:n].tolist(),
        hybrid_damping_ratios=modes.damping_ratios[:n].tolist(),
        ns_clamped_interface_modes_hz=ns_cim[:n].tolist(),
        ps_clamped_interface_modes_hz=ps_cim[:n].tolist(),
        mode_nodes_mm=nodes,
        interface_mm=ln * 1e3,
        total_length_mm=(ln + ps.structure.length) * 1e3,
        target_mode=tm,
        target_mode_hz=f_target,
        interface_relative_amplitude=rel_amp,
        sweep_hz=(lo, hi),
        harmonics=cfg.sweep.harmonics,
        ps_source=ps_source,
        warnings=warnings,
        findings=[asdict(f) for f in findings],
        levels=None if levels is None else levels.to_dict(),
        mains=plan.to_dict(),
    )


def _range_near(center: float, rel: float, k: int, lo: float, hi: float):
    """Fundamentals f in [lo, hi] with ``|k f - center| <= rel * center``, or None."""
    a, b = max(lo, center * (1 - rel) / k), min(hi, center * (1 + rel) / k)
    return (a, b) if a <= b else None


def harmonic_findings(ns_cim, ps_cim, sweep_harmonics, lo: float, hi: float, layout) -> list:
    """Harmonics k of the band (the sweep's forcing harmonics and :data:`CHECKED_HARMONICS`)
    against the clamped-interface modes (within :data:`CLAMPED_MODE_MARGIN`) and the mains
    multiples (within :data:`MAINS_SLOW_MARGIN`), one :class:`DesignFinding` per (k, mode or
    multiple) with the band's fundamentals concerned."""
    from .mains import mains_multiples

    solved = {int(k) for k in sweep_harmonics if k > 0}
    out = []
    for k in sorted(solved | set(CHECKED_HARMONICS)):
        role = "forcing harmonic" if k in solved else "distortion harmonic (not balanced)"
        for side, cim in (("numerical", ns_cim), ("physical", ps_cim)):
            for fc in cim:
                r = _range_near(float(fc), CLAMPED_MODE_MARGIN, k, lo, hi)
                if r is None:
                    continue
                inside = k * lo <= fc <= k * hi
                where = "inside" if inside else f"within {CLAMPED_MODE_MARGIN:.0%} of"
                out.append(DesignFinding(
                    "clamped_mode",
                    f"clamped-interface mode of the {side} substructure at {fc:.2f} Hz is {where} {role} {k} of the sweep"
                    f" ({k * lo:g}-{k * hi:g} Hz), for sweep frequencies {r[0]:.4g}-{r[1]:.4g} Hz: large interface forces for small motion",
                    r, k, float(fc)))
        for m, fm in enumerate(mains_multiples(layout), 1):
            r = _range_near(float(fm), MAINS_SLOW_MARGIN, k, lo, hi)
            if r is None:
                continue
            out.append(DesignFinding(
                "mains_slow",
                f"{role} {k} of the sweep comes within {MAINS_SLOW_MARGIN:.0%} of mains multiple {m} ({fm:g} Hz)"
                f" for sweep frequencies {r[0]:.4g}-{r[1]:.4g} Hz: averaging converges slowly there",
                r, k, float(fm)))
    return out

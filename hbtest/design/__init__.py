"""Test design (docs/method.md §1): what a sweep will meet before the rig runs. Frequencies in Hz,
lengths in mm in the report (SI inside the modules); see each module's docstring.

- :mod:`.report` — the design report: hybrid and clamped-interface modes, nodes, and the
  warnings of the band and its harmonics (k = 1 and the forcing harmonics, plus 2 and 3)
  against clamped-interface modes and mains multiples, each with the frequency range concerned;
- :mod:`.levels` — every channel's peak and the demand voltage predicted across the band
  against the rig's ranges and limits (clip / trip / voltage limit, with frequency ranges);
- :mod:`.mains` — forcing harmonics on a mains multiple: the per-point decision the sweep
  applies (move the point) and the explanation of a point that failed.
"""

from .levels import LEVEL_MARGIN, ChannelLevel, LevelFinding, LevelPrediction, frequency_ranges, predict_levels
from .mains import (
    DIVERGENCE_GROWTH,
    DIVERGENCE_MIN_EVALUATIONS,
    MAINS_CLEAR_BINS,
    MAINS_MULTIPLES_CHECKED,
    MAINS_RESOLUTION_WINDOWS,
    MainsDecision,
    MainsPlan,
    coincidences,
    explain_stop,
    plan_mains,
    resolution_hz,
)
from .report import (
    CHECKED_HARMONICS,
    CLAMPED_MODE_MARGIN,
    MAINS_SLOW_MARGIN,
    NODE_AMPLITUDE_FRACTION,
    DesignFinding,
    DesignReport,
    design_report,
    physical_beam_for_design,
    split_substructures,
)

__all__ = [
    "DesignReport", "DesignFinding", "design_report", "physical_beam_for_design", "split_substructures",
    "CLAMPED_MODE_MARGIN", "NODE_AMPLITUDE_FRACTION", "CHECKED_HARMONICS", "MAINS_SLOW_MARGIN",
    "ChannelLevel", "LevelFinding", "LevelPrediction", "predict_levels", "frequency_ranges", "LEVEL_MARGIN",
    "MainsDecision", "MainsPlan", "plan_mains", "coincidences", "resolution_hz", "explain_stop",
    "MAINS_RESOLUTION_WINDOWS", "MAINS_CLEAR_BINS", "MAINS_MULTIPLES_CHECKED", "preflight",
    "DIVERGENCE_GROWTH", "DIVERGENCE_MIN_EVALUATIONS",
]


def preflight(cfg, rig_cfg) -> tuple:
    """What a sweep checks before the rig runs (fast: no modes, one solve per frequency):
    ``(plan, lines)`` — the :class:`MainsPlan` the sweep applies and one line per predicted
    clip, trip or voltage limit (:func:`predict_levels`). A prediction the design model cannot
    make (a structure it does not model) is said in a line, never raised: it must not stop a
    run the rig itself can judge."""
    plan = plan_mains(cfg, rig_cfg.sensors)
    try:
        lv = predict_levels(cfg, rig_cfg)
    except (ValueError, ArithmeticError, TypeError, AttributeError) as e:  # noqa: BLE001 - reported, see docstring
        return plan, [f"design: channel levels not predicted ({type(e).__name__}: {e})"]
    return plan, [f"design: {f.text}" for f in lv.findings if f.kind in ("clip", "trip", "voltage")]

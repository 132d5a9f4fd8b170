"""The figures a campaign keeps per case, by kind, and how each is computed from a case's
result. Units: relative errors and fractions [1], rig time in forcing periods, delays [ms],
frequencies [Hz].

- ``sweep`` (a :func:`hbtest.sweep.runner.run` of the base sweep on its virtual twin): FRF errors
  against the twin's exact reference (:func:`hbtest.analysis.frf.relative_error`, both interface
  DOFs, over the finished points), converged fraction, rig periods, mean iterations, and the
  relative shift of the fitted resonance (:func:`hbtest.analysis.frf.compare_resonance`; NaN when the
  band holds no fittable peak).
- ``classical`` (:func:`hbtest.realtime.classical.compare_sweep` at the case's actuator delay): the
  largest FRF errors of the classical and the iterative test, the classical test's unstable
  fraction, the iterative converged fraction and the predicted critical delay.
- ``stability`` (the beam of the sweep split at its interface, as ``hbtest stability
  beam``): critical delay and the frequency of the crossing root.
"""

from __future__ import annotations

import math

import numpy as np

from ..config import CAMPAIGN_FIGURES

__all__ = ["FIGURES", "FIGURE_INFO", "sweep_figures", "classical_figures", "stability_figures", "BEAM_MIN_ELEMENTS_PER_METRE"]

#: name -> (units, long name)
FIGURE_INFO = {
    "frf_error_max": ("1", "largest relative FRF error against the twin's exact reference (u and theta, finished points)"),
    "frf_error_rms": ("1", "rms relative FRF error against the twin's exact reference (u and theta, finished points)"),
    "converged_fraction": ("1", "fraction of the sweep's points that converged"),
    "rig_periods": ("periods", "rig time of the whole sweep, in forcing periods"),
    "iterations_mean": ("1", "mean solver iterations per finished point"),
    "resonance_shift": ("1", "relative difference of the fitted resonance frequency, measured vs reference"),
    "classical_frf_error_max": ("1", "largest relative FRF error of the classical (real-time) test"),
    "iterative_frf_error_max": ("1", "largest relative FRF error of the iterative test"),
    "classical_unstable_fraction": ("1", "fraction of frequencies at which the classical test went unstable"),
    "critical_delay_ms": ("ms", "critical actuator delay of the split structure (inf: none below the cut-off)"),
    "critical_frequency_hz": ("Hz", "frequency of the root crossing at the critical delay"),
}

#: figure names of each campaign kind (defined with the campaign file schema)
FIGURES = CAMPAIGN_FIGURES

#: beam mesh of a stability case when the campaign gives no ``elements_per_metre`` (as ``hbtest stability beam``)
BEAM_MIN_ELEMENTS_PER_METRE = 40.0


def _num(x) -> float:
    return float("nan") if x is None else float(x)


def sweep_figures(ds) -> dict:
    from ..analysis.frf import compare_resonance, relative_error

    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    n = done.size
    out = {"converged_fraction": float(conv.sum()) / n if n else float("nan"),
           "rig_periods": float(np.nansum(np.asarray(ds["rig_periods"].values, dtype=float)[done])),
           "iterations_mean": float(np.mean(np.asarray(ds["iterations"].values, dtype=float)[done])) if done.any() else float("nan")}
    if "reference_interface_displacement" in ds:
        e = np.asarray(relative_error(ds).values, dtype=float)[done]
        e = e[np.isfinite(e)]
        out["frf_error_max"] = float(e.max()) if e.size else float("nan")
        out["frf_error_rms"] = float(np.sqrt(np.mean(e**2))) if e.size else float("nan")
        try:
            out["resonance_shift"] = float(compare_resonance(ds)["frequency_relative_difference"])
        except (ValueError, ArithmeticError, np.linalg.LinAlgError):
            out["resonance_shift"] = float("nan")  # no fittable peak in the band (too few points, off resonance)
    else:
        out.update(frf_error_max=float("nan"), frf_error_rms=float("nan"), resonance_shift=float("nan"))
    return out


def classical_figures(result) -> dict:
    s = result.summary
    n = max(1, int(s["n_points"]))
    st = result.stability
    if not st or "error" in st:
        cd_ms = float("nan")  # no prediction (an actuator model other than a pure delay, or the analysis failed)
    elif st.get("critical_delay_s") is None:
        cd_ms = float("inf")  # no crossing below the cut-off
    else:
        cd_ms = float(st["critical_delay_s"]) * 1e3
    return {
        "classical_frf_error_max": _num(s["classical_max_frf_error"]),
        "iterative_frf_error_max": _num(s["iterative_max_frf_error"]),
        "classical_unstable_fraction": s["classical_unstable"] / n,
        "converged_fraction": s["iterative_converged"] / n,
        "critical_delay_ms": cd_ms,
    }


def stability_figures(cfg, analysis: dict) -> dict:
    """Critical delay of the sweep ``cfg``'s beam split at its interface (ValueError for a
    mesh over :data:`hbtest.realtime.stability.MAX_BEAM_ELEMENTS`)."""
    from ..design import physical_beam_for_design
    from ..realtime.stability import BEAM_SECTION_KEYS, beam_hybrid

    nb = cfg.numerical.beam
    pb, _ = physical_beam_for_design(cfg)
    physical = {key: getattr(pb, key) for key in BEAM_SECTION_KEYS if getattr(pb, key) != getattr(nb, key)}
    epm = float(analysis.get("elements_per_metre") or 0.0) or max(BEAM_MIN_ELEMENTS_PER_METRE, nb.elements / nb.length)
    system = beam_hybrid(nb.length + pb.length, nb.length, width=nb.width, thickness=nb.thickness, youngs_modulus=nb.youngs_modulus,
                         density=nb.density, zeta_mass=nb.zeta_mass, zeta_stiffness=nb.zeta_stiffness, root=cfg.numerical.root,
                         physical=physical, elements_per_metre=epm)
    r = system.critical_delay(float(analysis["cutoff_hz"]), tau_max=float(analysis["tau_max_s"]))
    return {"critical_delay_ms": r.delay_s * 1e3 if math.isfinite(r.delay_s) else float("inf"),
            "critical_frequency_hz": float(r.frequency_hz)}

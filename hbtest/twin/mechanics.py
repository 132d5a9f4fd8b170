"""The twin's clamp fitted to the rig's measured modes (``hbtest twin``, the ``decays`` step).

The template's mechanics (beam, shakers, stingers) are kept; the clamp's mass [kg], rotary
inertia [kg m^2], support stiffness [N/m] and rotational stiffness [N m/rad] (:data:`FITTED`)
are fitted so that the modes of the assembled twin (beam on the clamp with its shakers, the
structure :func:`hbtest.rig.virtual.model.assemble` builds; eigenvalues of the pencil (A, E))
match the measured ones: weighted least squares on their frequencies and damping ratios (each
difference over its measured standard uncertainty), parameters in log scale, bounded to a factor
:data:`RANGE` of the template's. The clamp's dampings are the template's (the shakers' back-EMF
dominates the measured damping ratios): a rig whose clamp damps differently shows in the fit's
chi-square.

Standard uncertainties: ``(J^T J)^-1`` of the weighted residuals in the log parameters, scaled
by the reduced chi-square where that exceeds 1 (a template whose beam, shakers or dampings
differ from the rig's shows up there, not as false precision).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import scipy.linalg
from scipy.optimize import least_squares

from .fit import Quantity

__all__ = ["FITTED", "structure_modes", "fit_clamp"]

#: (ClampSpec field, rig-file key, unit)
FITTED = (("mass", "mass_kg", "kg"), ("inertia", "inertia_kg_m2", "kg m^2"),
          ("support_stiffness", "support_stiffness_n_per_m", "N/m"),
          ("rotational_stiffness", "rotational_stiffness_nm_per_rad", "N m/rad"))
#: each fitted value stays within this factor of the template's
RANGE = 4.0
#: the least standard uncertainty of a measured frequency (relative) or damping ratio: the
#: eigenvalues' own numerical noise is 1e-7
U_FLOOR = 1e-6


def structure_modes(spec, layout, clamp=None) -> np.ndarray:
    """Eigenvalues [rad/s] of the assembled twin (``spec`` with ``clamp`` if given) below its
    modal cutoff, Im >= 0, sorted by modulus."""
    from ..rig.virtual.model import assemble

    s = spec if clamp is None else replace(spec, clamp=clamp)
    _, _, _, A, E, _, _ = assemble(s, layout)
    lam = scipy.linalg.eigvals(A, E)
    lam = lam[np.isfinite(lam) & (np.imag(lam) > 0) & (np.abs(lam) < 2 * np.pi * spec.modal_cutoff_hz)]
    return lam[np.argsort(np.abs(lam))]


def _matched(model: np.ndarray, measured: np.ndarray) -> np.ndarray:
    """Per measured eigenvalue the model's nearest in frequency."""
    return np.array([model[np.argmin(np.abs(np.abs(model) - abs(m)))] for m in measured])


def fit_clamp(spec, layout, measured, u_frequency_hz, u_damping) -> tuple[dict, list[Quantity], dict]:
    """``(clamp values by rig-file key, quantities, detail)`` fitting :data:`FITTED` to the
    measured eigenvalues ``measured`` [rad/s]: their frequencies and damping ratios, each
    residual over its standard uncertainty (``u_frequency_hz`` [Hz], ``u_damping``; floored at
    :data:`U_FLOOR`); ``detail``: measured and fitted frequencies [Hz] and damping ratios, the
    reduced chi-square, the condition number of the fit."""
    measured = np.asarray(measured, complex)
    f_meas, z_meas = np.abs(measured) / (2 * np.pi), -measured.real / np.abs(measured)
    uf = np.maximum(np.asarray(u_frequency_hz, float), U_FLOOR * f_meas)
    uz = np.maximum(np.asarray(u_damping, float), U_FLOOR)
    c0 = spec.clamp
    x0 = np.log([getattr(c0, name) for name, _, _ in FITTED])

    def clamp(x):
        return replace(c0, **{name: float(v) for (name, _, _), v in zip(FITTED, np.exp(x))})

    def residual(x):
        lam = _matched(structure_modes(spec, layout, clamp(x)), measured)
        return np.concatenate([(np.abs(lam) / (2 * np.pi) - f_meas) / uf, (-lam.real / np.abs(lam) - z_meas) / uz])

    # the low eigenvalues of the refined mesh carry ~1e-7 relative noise: differences over 1e-3 in the log parameters
    sol = least_squares(residual, x0, bounds=(x0 - np.log(RANGE), x0 + np.log(RANGE)), diff_step=1e-3, xtol=1e-8, ftol=1e-10)
    n, p = sol.fun.size, x0.size
    chi2 = float(np.sum(sol.fun**2) / max(n - p, 1))
    JtJ = sol.jac.T @ sol.jac
    u_log = np.sqrt(np.diag(np.linalg.pinv(JtJ)) * max(chi2, 1.0))
    fitted = _matched(structure_modes(spec, layout, clamp(sol.x)), measured)
    src = (f"the rig's {measured.size} measured modes (free decays), {p} clamp values fitted to their frequencies and damping"
           f" ratios (reduced chi-square {chi2:.2g})")
    values, out = {}, []
    for (name, key, unit), x, ux in zip(FITTED, sol.x, u_log):
        v = float(np.exp(x))
        values[key] = v
        at_bound = abs(x - np.log(getattr(c0, name))) > np.log(RANGE) * 0.999
        out.append(Quantity(f"mechanics.clamp.{key}", v, v * float(ux), unit, src,
                            "AT ITS BOUND (a factor 4 of the template's)" if at_bound else ""))
    detail = {"measured_hz": f_meas.tolist(), "fitted_hz": (np.abs(fitted) / (2 * np.pi)).tolist(),
              "measured_damping": z_meas.tolist(), "fitted_damping": (-fitted.real / np.abs(fitted)).tolist(),
              "reduced_chi_square": chi2, "condition": float(np.linalg.cond(JtJ))}
    return values, out, detail

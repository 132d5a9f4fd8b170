"""The twin's clamp fitted to the rig's measured modes (``hbtest twin``, the ``decays`` step).

The template's mechanics (beam, shakers, stingers) are kept; the clamp's mass [kg], rotary
inertia [kg m^2], support stiffness [N/m] and rotational stiffness [N m/rad] (:data:`FITTED`)
are fitted so that the natural frequencies of the assembled twin (beam on the clamp with its
shakers, the structure :func:`hbtest.rig.virtual.model.assemble` builds; eigenvalues of the
pencil (A, E)) match the measured ones: least squares on the relative frequency differences,
parameters in log scale, bounded to a factor :data:`RANGE` of the template's. The clamp's
dampings are the template's: the shakers' back-EMF dominates the measured damping ratios, so
they are compared (in the record), not fitted.

Standard uncertainties: ``s^2 (J^T J)^-1`` of the log parameters, ``s`` the larger of the
measured frequencies' relative standard uncertainty and the fit's residual rms (a template
whose beam or shakers differ from the rig's shows up there, not as false precision).
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


def fit_clamp(spec, layout, measured, u_frequency_hz) -> tuple[dict, list[Quantity], dict]:
    """``(clamp values by rig-file key, quantities, detail)`` fitting :data:`FITTED` to the
    measured eigenvalues ``measured`` [rad/s] (standard uncertainties of their frequencies
    ``u_frequency_hz`` [Hz]); ``detail``: measured and fitted frequencies [Hz] and damping ratios,
    the residual rms, the condition number of the fit."""
    measured = np.asarray(measured, complex)
    f_meas = np.abs(measured) / (2 * np.pi)
    c0 = spec.clamp
    x0 = np.log([getattr(c0, name) for name, _, _ in FITTED])

    def clamp(x):
        return replace(c0, **{name: float(v) for (name, _, _), v in zip(FITTED, np.exp(x))})

    def residual(x):
        return np.abs(_matched(structure_modes(spec, layout, clamp(x)), measured)) / (2 * np.pi) / f_meas - 1

    # the low eigenvalues of the refined mesh carry ~1e-7 relative noise: differences over 1e-3 in the log parameters
    sol = least_squares(residual, x0, bounds=(x0 - np.log(RANGE), x0 + np.log(RANGE)), diff_step=1e-3, xtol=1e-8, ftol=1e-10)
    n, p = f_meas.size, x0.size
    rms = float(np.sqrt(np.sum(sol.fun**2) / max(n - p, 1)))
    s = max(rms, float(np.max(np.asarray(u_frequency_hz) / f_meas)))
    JtJ = sol.jac.T @ sol.jac
    cond = float(np.linalg.cond(JtJ))
    u_log = np.sqrt(np.diag(np.linalg.pinv(JtJ))) * s
    fitted = _matched(structure_modes(spec, layout, clamp(sol.x)), measured)
    src = f"the rig's {n} measured modes (free decays), {p} clamp values fitted to their frequencies (residual rms {rms:.2g})"
    values, out = {}, []
    for (name, key, unit), x, ux in zip(FITTED, sol.x, u_log):
        v = float(np.exp(x))
        values[key] = v
        at_bound = abs(x - np.log(getattr(c0, name))) > np.log(RANGE) * 0.999
        note = "AT ITS BOUND (a factor 4 of the template's)" if at_bound else ""
        out.append(Quantity(f"mechanics.clamp.{key}", v, v * float(ux), unit, src, note))
    detail = {"measured_hz": f_meas.tolist(), "fitted_hz": (np.abs(fitted) / (2 * np.pi)).tolist(),
              "measured_damping": (-measured.real / np.abs(measured)).tolist(),
              "fitted_damping": (-fitted.real / np.abs(fitted)).tolist(), "residual_rms": rms, "condition": cond}
    return values, out, detail

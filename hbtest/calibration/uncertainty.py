"""First-order effect of calibration uncertainties on the measured interface quantities (used by
:func:`hbtest.analysis.frf.frf_uncertainty`).

The reduction (:mod:`hbtest.method.sensors`) corrects channel j's raw coefficient at harmonic k of
``f`` as ``c_j = raw_j scale_j / (h_j(kf) exp(-i 2 pi k f skew_j))`` and maps the corrected
coefficients linearly to ``(u, theta, T, M)`` (every force reconstruction is linear in the
gauge strains and the interface motion at a given frequency): ``[U; F] = L c``. A relative
scale error ``ds_j / s_j`` and a skew error ``dtau_j`` [s] change ``c_j`` by
``c_j (ds_j / s_j + i 2 pi k f dtau_j)``, hence ``d[U; F] = L[:, j] c_j (...)``.

``L`` is evaluated through the public reduction
(:func:`hbtest.method.sensors.measure_interface_from_coefficients`) on unit channel coefficients.
The channel coefficients ``c`` are those consistent with the stored interface state: lasers
``c_j = u + p_j theta`` (exact), gauges the (least-squares, exact for two gauges) solution of
the force rows of ``[U; F] = L c`` given the lasers.

Not propagated: the mains frequency. Its uncertainty (a few 1e-6 Hz from a 10 s record)
shifts the rejected interference by far less than the coefficient fit's resolution
``1 / (record length)``; an error there changes the fitted harmonics by the leakage of the
(small) residual interference only: a second-order effect next to the channel terms.

Units: record units (``scale_per_v`` per V, ``skew_us`` µs) converted to SI with
:data:`hbtest.calibration.record.CHANNEL_VALUES`; the sensitivities are in the units of the
interface quantities (m, rad, N, N m) per standard uncertainty.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from .record import CalibrationRecord

__all__ = ["reduction_matrix", "channel_coefficients", "calibration_perturbations"]


def reduction_matrix(layout, frequency_hz: float, harmonic: int, method: str) -> np.ndarray:
    """``L`` (4, n_channels), complex: ``(u, theta, T, M)`` at harmonic ``harmonic`` per unit
    corrected (scaled, lag- and skew-free) coefficient of each channel (layout order)."""
    from ..method.sensors import measure_interface_from_coefficients

    names = layout.channel_names
    k = int(harmonic)
    cols = []
    for j, _ in enumerate(names):
        coef, var = {}, {}
        for i, spec in enumerate(layout.channels):
            g = spec.response(k * frequency_hz)
            coef[spec.name] = np.array([(1.0 if i == j else 0.0) * g / spec.scale], dtype=complex)
            var[spec.name] = np.zeros(1)
        rec = SimpleNamespace(orders=np.array([k]), coefficients=coef, variance=var, frequency_hz=float(frequency_hz), n_periods=1)
        m = measure_interface_from_coefficients(rec, layout, [k], method)
        cols.append(np.concatenate([m.displacement[:, 0], m.force[:, 0]]))
    return np.stack(cols, axis=1)


def channel_coefficients(layout, L: np.ndarray, displacement, force) -> np.ndarray:
    """Corrected channel coefficients (layout order) consistent with the interface state
    ``displacement = (u, theta)``, ``force = (T, M)`` under the reduction ``L``."""
    u, th = complex(displacement[0]), complex(displacement[1])
    kinds = [c.kind for c in layout.channels]
    las = [j for j, kd in enumerate(kinds) if kd == "laser"]
    gau = [j for j, kd in enumerate(kinds) if kd != "laser"]
    c = np.zeros(len(kinds), dtype=complex)
    for j in las:
        c[j] = u + layout.channels[j].position * th
    rhs = np.asarray(force, dtype=complex) - L[2:, las] @ c[las]
    c[gau] = np.linalg.lstsq(L[2:, gau], rhs, rcond=None)[0]
    return c


def calibration_perturbations(layout, record: CalibrationRecord, frequency_hz: float, harmonic: int, method: str,
                              displacement, force) -> np.ndarray:
    """One row per calibrated value with a standard uncertainty (channel scale or skew): the
    change of ``(u, theta, T, M)`` (complex, shape (n, 4)) that one standard uncertainty of it
    makes at this point. Values without an uncertainty (or of channels the layout lacks)
    contribute nothing. Rows are independent (the record states no covariances)."""
    unc = (record.standard_uncertainty or {}).get("channels") or {}
    L = reduction_matrix(layout, frequency_hz, harmonic, method)
    c = channel_coefficients(layout, L, displacement, force)
    omega = 2 * np.pi * int(harmonic) * float(frequency_hz)
    rows = []
    for j, spec in enumerate(layout.channels):
        cu = unc.get(spec.name) or {}
        if cu.get("scale_per_v"):
            rows.append(L[:, j] * c[j] * (float(cu["scale_per_v"]) / spec.scale))
        if cu.get("skew_us"):
            rows.append(L[:, j] * c[j] * (1j * omega * float(cu["skew_us"]) * 1e-6))
    return np.array(rows, dtype=complex).reshape(-1, 4)

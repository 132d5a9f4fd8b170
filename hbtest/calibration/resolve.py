"""Hybrid re-solution with another calibration (``hbtest reduce``): the hybrid
solution a re-run of the sweep with the new calibration would converge to, computed from what
the run measured, without the rig.

Why the final window alone is not enough: the rig was driven to compatibility as the OLD
calibration measured it. Re-reduced with the new calibration, that state is the true physical
state plus a compatibility residual; the re-run would converge at another voltage, where the
NEW measurement is compatible.

Method (per point, at its fixed frequency ``f``):

1. Every evaluation ``e`` of the point (start, iterations, line-search and finite-difference
   trials) left its voltage coefficients ``V_e`` and the raw channel coefficients
   ``c_e`` [V] with their variances of the mean (store variables ``history_voltage``,
   ``history_channel_coefficients``, ``history_channel_variance``). Each ``c_e`` is reduced
   with the NEW calibration to ``Y_e = [U_P; F_P]`` (:func:`hbtest.method.sensors.measure_interface_from_coefficients`).
2. Candidate models of the physical side at a fixed frequency, each then solved for ``V*``
   where the sweep's hybrid residual vanishes (its residual form; the numerical side rebuilt
   from the store's verbatim sweep text; Newton iterations, one step for a linear numerical
   side); the point's FRF is the model's ``U_P(V*)``:

   - ``"affine_fit"``: ``Y(V) = a + B (V - V_ref)`` in the real packed coordinates
     (:func:`hbtest.method.harmonics.pack`; ``V_ref`` the final voltage), exact for a linear rig and
     first order for a nonlinear one, by weighted least squares (each output weighted by the
     inverse variance of that coefficient at each evaluation; real and imaginary parts take
     half a complex variance each). Needs ``n_v + 1`` evaluations whose centred voltages span
     every packed direction (condition number of the column-normalised design below
     :data:`MAX_DESIGN_CONDITION`).
   - ``"complex_fit"``: per harmonic ``Y_k = a_k + B_k (V_k - V_ref,k)`` with complex
     ``B_k`` (a linear time-invariant rig: harmonic k of the response comes from harmonic k
     of the drive only). Needs only ``n_act + 1`` evaluations (the hbtest profile often makes
     4 per point: start + 3 iterations).
   - ``"model_jacobian"`` (a linear numerical side and a PS model, the rig file's
     ``[physical]`` beam): an anchor — the complex fit's prediction at the final voltage
     (every evaluation averaged) or else the final evaluation — moved to compatibility along
     the MODEL dynamic stiffness ``D_P``: ``dU = -(D_N + D_P)^-1 D_N R``, ``F = F_a + D_P dU``.
     The model's error enters multiplied by the step only; the stored force variance adds
     ``(ps_model_uncertainty |D_P dU|)^2`` (:data:`PS_MODEL_UNCERTAINTY`). ``V*``: the voltage
     that moves the complex fit's displacement map to the solution.

   Of the candidates that apply, the one with the smallest stated relative force variance at
   its solution is kept (the hybrid solution near resonance is most sensitive to the force).
   Why the model candidate: when the old calibration was far off (on the miscalibrated twin
   the nominal FRF misses by 50-150 %), the re-run converges at voltages 3-20x the spread of
   the measured ones away, and a data-only fit extrapolated that far amplifies the force
   noise (0.3-15 % FRF error measured) while the model's step from a well-averaged anchor
   does not. Without either (too few evaluations, no PS model) the point keeps its final state
   re-reduced (``"state_only"``, residual reported).

What the new calibration cannot change here: the mains frequency the run's harmonic fits
rejected (the channel coefficients were fitted with the run's assumption; only raw samples
could be refitted). Everything else a calibration record holds (channel scales, offsets,
skews, filters) acts on the coefficients and is applied exactly.

Extrapolation: ``|V* - V_final|`` (Euclidean over packed voltages [V]) relative to the spread
of the measured voltages (the rms distance of the evaluations from their mean); a ratio above
:data:`EXTRAPOLATION_WARNING` is flagged (the affine model is then used outside the region it
was fitted in: exact for a linear rig, suspect for a nonlinear one).

Uncertainty: the stored interface variances are the chosen model's prediction variances at
``V*`` (from the weighted fit's parameter covariance; plus the model term above), so :func:`hbtest.analysis.frf.frf_uncertainty`
propagates them as for a measured point.

Units: V [V], interface displacement (u, theta) [m, rad], forces (T, M) [N, N m].
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from ..method import harmonics

__all__ = [
    "RESOLVE_METHODS",
    "MAX_DESIGN_CONDITION",
    "EXTRAPOLATION_WARNING",
    "PS_MODEL_UNCERTAINTY",
    "NEWTON_ITERATIONS",
    "NEWTON_TOLERANCE",
    "Resolved",
    "history_channels",
    "reduce_evaluations",
    "fit_affine",
    "resolve_point",
]

#: how a point was re-solved: the affine fit over its evaluations, the final evaluation plus the
#: PS model's dynamic stiffness, or the final state re-reduced only (no compatibility solve)
RESOLVE_METHODS = ("affine_fit", "complex_fit", "model_jacobian", "state_only")
#: the largest condition number of the column-normalised design matrix ``[1, V_e - V_ref]``
#: for which the affine fit is trusted (beyond it some voltage direction was never explored)
MAX_DESIGN_CONDITION = 1e6
#: extrapolation ratio |V* - V_final| / spread above which a point is flagged
EXTRAPOLATION_WARNING = 1.0
#: relative standard uncertainty assumed for the PS model's dynamic stiffness on the
#: ``model_jacobian`` path: the model's force step ``D_P dU`` adds this fraction of itself
#: (per coefficient, as a standard uncertainty) to the stored force variance
PS_MODEL_UNCERTAINTY = 0.01
#: Newton iterations on the fitted model (a linear numerical side needs one)
NEWTON_ITERATIONS = 30
#: relative step size at which the Newton iteration stops
NEWTON_TOLERANCE = 1e-12
#: relative perturbation of the packed voltages for the model residual's Jacobian
JACOBIAN_STEP = 1e-6


@dataclasses.dataclass
class Resolved:
    """One point re-solved with a new calibration. ``voltage`` (n_act, n_orders) [V];
    ``displacement``/``force`` (2, n_orders) [m, rad | N, N m] with their ``*_variance``;
    ``numerical_displacement`` the numerical side's answer to ``force``; ``residual_norm`` [m]
    the displacement-form residual norm (rotations weighted by ``rotation_length``) left at the
    solution; ``method`` one of :data:`RESOLVE_METHODS`; ``n_evaluations`` used;
    ``voltage_change`` ``|V* - V_final|`` [V] and ``extrapolation`` that over the spread of the
    measured voltages (NaN for ``state_only``)."""

    voltage: np.ndarray
    displacement: np.ndarray
    force: np.ndarray
    displacement_variance: np.ndarray
    force_variance: np.ndarray
    numerical_displacement: np.ndarray
    residual_norm: float
    method: str
    n_evaluations: int
    voltage_change: float
    extrapolation: float

    @property
    def extrapolated(self) -> bool:
        return bool(np.isfinite(self.extrapolation) and self.extrapolation > EXTRAPOLATION_WARNING)

    def summary(self, index: int, frequency_hz: float) -> dict:
        """JSON-able per-point summary (stored in the new store's ``reduction`` attribute)."""
        return dict(index=int(index), frequency_hz=float(frequency_hz), method=self.method, n_evaluations=int(self.n_evaluations),
                    voltage_change_v=float(self.voltage_change), extrapolation=float(self.extrapolation),
                    extrapolated=self.extrapolated, residual_norm_m=float(self.residual_norm))


def history_channels(history, n_channels: int | None, n_orders: int):
    """The store's per-evaluation raw channel coefficients and variances of a point from its
    evaluation history (objects with ``meas.raw_channels``, :class:`hbtest.point.Evaluation`):
    ``(coefficients, variance)``, each (n_eval, n_channels, n_orders), NaN rows for an
    evaluation without them; ``(None, None)`` when ``n_channels`` is None (not recorded)."""
    if n_channels is None:
        return None, None
    coef = np.full((len(history), n_channels, n_orders), complex(np.nan, np.nan))
    var = np.full((len(history), n_channels, n_orders), np.nan)
    for r, h in enumerate(history):
        raw = getattr(getattr(h, "meas", None), "raw_channels", None)
        if raw is not None:
            coef[r], var[r] = raw
    return coef, var


def reduce_evaluations(coefficients, variance, channel_names, layout, frequency_hz: float, orders, method: str):
    """Reduce raw channel coefficients (n_eval, n_channels, n_orders) [V] with ``layout``:
    ``(U, F, var_U, var_F)``, each (n_eval, 2, n_orders)."""
    from ..method.sensors import measure_interface_from_coefficients

    orders = np.asarray(orders, dtype=int)
    out = []
    for c, v in zip(coefficients, variance):
        rec = SimpleNamespace(orders=orders, coefficients={n: c[j] for j, n in enumerate(channel_names)},
                              variance={n: v[j] for j, n in enumerate(channel_names)}, frequency_hz=float(frequency_hz), n_periods=1)
        m = measure_interface_from_coefficients(rec, layout, orders, method)
        out.append((m.displacement, m.force, m.displacement_variance, m.force_variance))
    return tuple(np.array(x) for x in zip(*out))


def _packed_variance(var, orders) -> np.ndarray:
    """Variance of each packed real entry from complex-coefficient variances (…, n_orders):
    half to the real and half to the imaginary part (all of it to a real DC value)."""
    orders = np.asarray(orders)
    half = np.where(orders == 0, var, var / 2.0)
    return np.abs(harmonics.pack(half + 1j * half, orders))


def fit_affine(X, Y, var_Y):
    """Weighted least squares ``Y_e ≈ a + B x_e`` per output row: ``X`` (n_eval, n_v) centred
    inputs, ``Y`` (n_eval, n_out), ``var_Y`` (n_eval, n_out) variances (0 or NaN: unit
    weight relative to the row's smallest positive variance). Returns ``(theta (n_v + 1,
    n_out), covariance (n_out, n_v + 1, n_v + 1), condition)``; ``condition`` is that of the
    column-normalised design (inf when singular)."""
    X = np.asarray(X, dtype=float)
    n, nv = X.shape
    A = np.hstack([np.ones((n, 1)), X])
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    sv = np.linalg.svd(A / norms, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv.size == nv + 1 and sv[-1] > 0 else float("inf")
    theta = np.zeros((nv + 1, Y.shape[1]))
    cov = np.zeros((Y.shape[1], nv + 1, nv + 1))
    for r in range(Y.shape[1]):
        v = np.asarray(var_Y[:, r], dtype=float)
        pos = v[np.isfinite(v) & (v > 0)]
        floor = pos.min() if pos.size else 1.0
        v = np.where(np.isfinite(v) & (v > 0), v, floor)
        w = 1.0 / np.sqrt(v)
        Aw = A * w[:, None]
        sol, *_ = np.linalg.lstsq(Aw, Y[:, r] * w, rcond=None)
        theta[:, r] = sol
        cov[r] = np.linalg.pinv(Aw.T @ Aw)
    return theta, cov, cond


def _unpack_y(y, orders):
    """Packed [U; F] (4p,) -> (U (2, n_orders), F (2, n_orders))."""
    p = harmonics.packed_size(orders)
    Z = harmonics.unpack(np.asarray(y).reshape(4, p), orders)
    return Z[:2], Z[2:]


def _residual_vector(num, U, F, form: str, orders, rotation_length: float) -> np.ndarray:
    """The sweep's residual (displacement form [m, rad x l] or force form [N, N m / l]), packed."""
    w = np.repeat([1.0, rotation_length], harmonics.packed_size(orders))
    if form == "force":
        return harmonics.pack(num.force_residual(U, F), orders).reshape(-1) / w
    return harmonics.pack(U - num.numerical_displacement(F), orders).reshape(-1) * w


def _displacement_norm(num, U, F, orders, rotation_length: float) -> tuple[np.ndarray, float]:
    U_N = num.numerical_displacement(F)
    w = np.repeat([1.0, rotation_length], harmonics.packed_size(orders))
    return U_N, float(np.linalg.norm(w * harmonics.pack(U - U_N, orders).reshape(-1)))


def fit_complex(V, Z, var_Z, V_ref):
    """Per-harmonic complex weighted least squares ``Z_e ≈ a + B (V_e - V_ref)`` (a linear
    time-invariant physical side: each harmonic driven by the same harmonic of the voltages
    only). ``V`` (n_eval, n_act), ``Z`` (n_eval, n_out) complex, ``var_Z`` (n_eval, n_out)
    complex-coefficient variances. Returns ``(theta (n_act + 1, n_out), covariance (n_out,
    n_act + 1, n_act + 1) Hermitian, condition)``."""
    A = np.hstack([np.ones((V.shape[0], 1)), V - V_ref]).astype(complex)
    norms = np.linalg.norm(A, axis=0)
    norms[norms == 0] = 1.0
    sv = np.linalg.svd(A / norms, compute_uv=False)
    cond = float(sv[0] / sv[-1]) if sv.size == A.shape[1] and sv[-1] > 0 else float("inf")
    theta = np.zeros((A.shape[1], Z.shape[1]), dtype=complex)
    cov = np.zeros((Z.shape[1], A.shape[1], A.shape[1]), dtype=complex)
    for r in range(Z.shape[1]):
        v = np.asarray(var_Z[:, r], dtype=float)
        pos = v[np.isfinite(v) & (v > 0)]
        v = np.where(np.isfinite(v) & (v > 0), v, pos.min() if pos.size else 1.0)
        w = 1.0 / np.sqrt(v)
        Aw = A * w[:, None]
        theta[:, r] = np.linalg.lstsq(Aw, Z[:, r] * w, rcond=None)[0]
        cov[r] = np.linalg.pinv(Aw.conj().T @ Aw)
    return theta, cov, cond


def _newton(residual, x0: np.ndarray) -> np.ndarray:
    """Zero of ``residual`` (packed real) by Newton steps with a finite-difference Jacobian."""
    xv = np.array(x0, dtype=float)
    for _ in range(NEWTON_ITERATIONS):
        r0 = residual(xv)
        h = JACOBIAN_STEP * max(1.0, float(np.max(np.abs(xv))))
        J = np.empty((r0.size, xv.size))
        for j in range(xv.size):
            dx = np.zeros(xv.size)
            dx[j] = h
            J[:, j] = (residual(xv + dx) - r0) / h
        step = np.linalg.lstsq(J, -r0, rcond=None)[0]
        xv = xv + step
        if np.linalg.norm(step) <= NEWTON_TOLERANCE * max(1.0, float(np.linalg.norm(xv))):
            break
    return xv


def _relative_force_variance(F, vF) -> float:
    """Sum of the force coefficients' variances relative to their squared magnitudes (the
    quantity the hybrid solution is most sensitive to): compares the candidate methods."""
    return float(np.sum(np.asarray(vF) / np.maximum(np.abs(F) ** 2, 1e-300)))


def _affine_model(x, x_ref, U, F, vU, vF, orders):
    """The real affine fit of the packed interface state over the packed voltages: a model
    ``xv -> (U, F, var U, var F)``, or None when the design is too ill-conditioned."""
    n_ok = x.shape[0]
    Y = np.concatenate([harmonics.pack(U, orders).reshape(n_ok, -1), harmonics.pack(F, orders).reshape(n_ok, -1)], axis=1)
    vY = np.concatenate([_packed_variance(vU, orders).reshape(n_ok, -1), _packed_variance(vF, orders).reshape(n_ok, -1)], axis=1)
    theta, cov, cond = fit_affine(x - x_ref, Y, vY)
    if not cond < MAX_DESIGN_CONDITION:
        return None

    def real_model(xv, theta=theta, cov=cov):
        z = np.concatenate([[1.0], xv - x_ref])
        return (*_unpack_y(z @ theta, orders), *_unpack_var(np.einsum("i,rij,j->r", z, cov, z), orders))

    return real_model


def _complex_fits(Vs, U, F, vU, vF, orders) -> list:
    """Per harmonic, the complex affine fit of (U, F) over the voltages about the final one:
    ``[(theta, cov), ...]``, or [] when any design is too ill-conditioned."""
    fits = []
    for i in range(orders.size):
        Z = np.concatenate([U[:, :, i], F[:, :, i]], axis=1)
        vZ = np.concatenate([vU[:, :, i], vF[:, :, i]], axis=1)
        th, cv, cond = fit_complex(Vs[:, :, i], Z, vZ, Vs[-1, :, i])
        if not cond < MAX_DESIGN_CONDITION:
            return []
        fits.append((th, cv))
    return fits


def _complex_model(fits, Vs, orders, n_act: int):
    """The per-harmonic complex fits as a model ``xv -> (U, F, var U, var F)``."""
    def complex_model(xv, fits=fits):
        V = harmonics.unpack(xv.reshape(n_act, -1), orders)
        Z = np.empty((4, orders.size), dtype=complex)
        vZ = np.empty((4, orders.size))
        for i, (th, cv) in enumerate(fits):
            z = np.concatenate([[1.0], V[:, i] - Vs[-1, :, i]])
            Z[:, i] = z @ th
            vZ[:, i] = np.real(np.einsum("i,rij,j->r", z.conj(), cv, z))
        return Z[:2], Z[2:], vZ[:2], vZ[2:]

    return complex_model


def _model_jacobian_state(num, ps_model, frequency_hz: float, orders, anchor, fits, Vs, ps_model_uncertainty: float):
    """(voltage or None, U, F, var U, var F) of the ``model_jacobian`` candidate: one Newton step
    from ``anchor`` with the PS model's dynamic stiffness; the voltage from the complex fits."""
    Ua, Fa, vUa, vFa = anchor
    DP = ps_model.dynamic_stiffness(2j * np.pi * frequency_hz * orders)
    R = Ua - num.numerical_displacement(Fa)
    dU = -np.einsum("kij,kjl,lk->ik", np.linalg.inv(num.D + DP), num.D, R)
    dF = np.einsum("kij,jk->ik", DP, dU)
    Us = Ua + dU
    best_x = None
    if fits:  # the voltage that moves the fitted (precise) displacement map to U*
        Vk = np.stack([Vs[-1, :, i] + np.linalg.lstsq(th[1:, :2].T, Us[:, i] - th[0, :2], rcond=None)[0]
                       for i, (th, _) in enumerate(fits)], axis=1)
        best_x = harmonics.pack(Vk, orders).reshape(-1)
    return best_x, Us, Fa + dF, vUa, vFa + (float(ps_model_uncertainty) * np.abs(dF)) ** 2


def resolve_point(*, voltages, coefficients, variance, channel_names, layout, frequency_hz: float, orders, method: str,
                  num, residual_form: str = "displacement", rotation_length: float = 0.1, ps_model=None,
                  ps_model_uncertainty: float = PS_MODEL_UNCERTAINTY) -> Resolved:
    """Re-solve one point (see the module docstring). ``voltages`` (n_eval, n_act, n_orders)
    [V], the last row the point's final evaluation; ``coefficients``/``variance`` its raw
    channel coefficients (n_eval, n_channels, n_orders) (rows with NaN are left out);
    ``layout`` the NEW sensor layout; ``method`` the force reconstruction; ``num`` the
    :class:`hbtest.point.NumericalSide` at this frequency; ``ps_model`` a substructure with
    ``dynamic_stiffness(s)`` for the ``model_jacobian`` candidate (None: none) and
    ``ps_model_uncertainty`` its relative standard uncertainty (:data:`PS_MODEL_UNCERTAINTY`).
    Of the candidates that apply, the one with the smallest stated relative force variance at
    its solution is returned."""
    orders = np.asarray(orders, dtype=int)
    voltages = np.asarray(voltages, dtype=complex)
    ok = np.isfinite(coefficients).all(axis=(1, 2)) & np.isfinite(voltages).all(axis=(1, 2))
    if not ok.any():
        raise ValueError("the point has no evaluation with channel coefficients")
    n_ok = int(ok.sum())
    U, F, vU, vF = reduce_evaluations(coefficients[ok], variance[ok], channel_names, layout, frequency_hz, orders, method)
    Vs = voltages[ok]
    n_act = voltages.shape[1]
    x = harmonics.pack(Vs, orders).reshape(n_ok, -1)  # (n_eval, n_v)
    x_ref = x[-1]
    nv = x.shape[1]
    spread = float(np.sqrt(np.mean(np.sum((x - x.mean(axis=0)) ** 2, axis=1)))) if n_ok > 1 else 0.0

    def residual_of(model):
        return lambda xv: _residual_vector(num, *model(xv)[:2], residual_form, orders, rotation_length)

    def result(name, xv, Us, Fs, varU, varF):
        U_N, norm = _displacement_norm(num, Us, Fs, orders, rotation_length)
        dv = float(np.linalg.norm(xv - x_ref)) if xv is not None else float("nan")
        ratio = (dv / spread if spread > 0 else float("inf")) if xv is not None else float("nan")
        V_out = harmonics.unpack(xv.reshape(n_act, -1), orders) if xv is not None else Vs[-1]
        return Resolved(V_out, Us, Fs, varU, varF, U_N, norm, name, n_ok, dv, ratio)

    candidates = []
    # 1. real affine fit over the packed voltages (general: nonlinear rigs to first order)
    real_model = _affine_model(x, x_ref, U, F, vU, vF, orders) if n_ok >= nv + 1 else None
    if real_model is not None:
        xv = _newton(residual_of(real_model), x_ref)
        candidates.append(result("affine_fit", xv, *real_model(xv)))
    # 2. per-harmonic complex fit (linear time-invariant physical side): n_act + 1 evaluations
    fits = _complex_fits(Vs, U, F, vU, vF, orders) if n_ok >= n_act + 1 else []
    if fits:
        complex_model = _complex_model(fits, Vs, orders, n_act)
        xv = _newton(residual_of(complex_model), x_ref)
        candidates.append(result("complex_fit", xv, *complex_model(xv)))
    # 3. the PS model's dynamic stiffness from an anchor: the complex fit's prediction at the
    # final voltage (all evaluations averaged) or else the final evaluation
    if ps_model is not None and num.is_linear:
        anchor = complex_model(x_ref) if fits else (U[-1], F[-1], vU[-1], vF[-1])
        candidates.append(result("model_jacobian", *_model_jacobian_state(num, ps_model, frequency_hz, orders, anchor, fits, Vs,
                                                                         ps_model_uncertainty)))
    if candidates:
        return min(candidates, key=lambda r: _relative_force_variance(r.force, r.force_variance))
    return result("state_only", None, U[-1], F[-1], vU[-1], vF[-1])


def _unpack_var(var_packed, orders):
    """Packed prediction variances (4p,) -> complex-coefficient variances (var U, var F), each
    (2, n_orders): the real and imaginary parts' variances added (DC: its one entry)."""
    orders = np.asarray(orders)
    p = harmonics.packed_size(orders)
    v = np.asarray(var_packed).reshape(4, p)
    out = np.zeros((4, orders.size))
    j = 0
    for i, k in enumerate(orders):
        if k == 0:
            out[:, i] = v[:, j]
            j += 1
        else:
            out[:, i] = v[:, j] + v[:, j + 1]
            j += 2
    return out[:2], out[2:]

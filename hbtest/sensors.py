"""From sensor signals to the physical substructure's interface quantities (SPEC §3).

Sign conventions (those of :mod:`hbtest.structures`): x runs from the interface into the
physical substructure (PS); ``u`` up, ``theta = du/dx`` counter-clockwise. The interface
forces ``(T, M)`` are the generalized forces *applied to the PS* at its interface, conjugate to
``(u, theta)``: ``D_P(s) [u, theta] = [T, M]``.

- Lasers: ``l1`` on the vertical slider (at the pin axis), ``l2`` on the clamp at distance
  ``d_l`` further along x: ``u = l1``, ``theta = (l2 - l1) / d_l``. (SPEC writes
  ``(l1 - l2)/d_l`` for a laser placed on the *other* side of the pin; the sign is carried by
  ``laser_spacing`` being negative in that case.)
- Strain gauges on the upper surface at ``x = d1 < d2``: ``eps = -(h/2) u''``. The
  calibration constant ``c`` [N m per unit strain] is ``2 EI / h`` so that ``c eps(x) =
  -EI u''(x) = M(x)``, the generalized moment the inner part applies to the outer part at a
  cut at x. With that convention ``T(x) = -dM/dx``.
  Finite-difference rule (published): ``T = -c (eps2 - eps1)/(d2 - d1)``,
  ``M = c (eps1 - d1 (eps2 - eps1)/(d2 - d1))`` (linear extrapolation of M to x = 0).
  It ignores the distributed inertia of the segment [0, d2]: see :func:`forces_segment`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.signal

from . import harmonics

__all__ = [
    "SensorLayout",
    "ChannelSpec",
    "lasers_to_motion",
    "forces_finite_difference",
    "forces_inertia_corrected",
    "forces_segment",
    "FORCE_METHODS",
    "InterfaceMeasurement",
    "measure_interface",
]

FORCE_METHODS = ("finite-difference", "inertia", "segment")


@dataclass(frozen=True)
class ChannelSpec:
    """One acquisition channel: raw volts times ``scale`` (+ ``offset``) gives the physical
    quantity (m for lasers, strain for gauges). ``lowpass_hz``/``lowpass_order`` describe the
    analogue anti-alias filter (Butterworth) whose lag is removed per harmonic; 0 = none.
    ``lag_table`` (optional): measured ((f_hz, phase_lag_rad), ...) interpolated linearly,
    used instead of the filter model when given."""

    name: str
    kind: str  # "laser" | "strain_gauge"
    unit: str  # physical unit after scaling
    scale: float = 1.0
    offset: float = 0.0
    lowpass_hz: float = 0.0
    lowpass_order: int = 2
    lag_table: tuple = ()

    def response(self, frequency_hz: float) -> complex:
        """Complex response of the channel's filter at ``frequency_hz`` (1 when none)."""
        if self.lag_table:
            f, lag = np.asarray(self.lag_table, dtype=float).T
            return complex(np.exp(-1j * np.interp(frequency_hz, f, lag)))
        if self.lowpass_hz <= 0:
            return 1.0 + 0j
        b, a = scipy.signal.butter(self.lowpass_order, 2 * np.pi * self.lowpass_hz, analog=True)
        _, h = scipy.signal.freqs(b, a, worN=[2 * np.pi * frequency_hz])
        return complex(h[0])


@dataclass(frozen=True)
class SensorLayout:
    """Where the interface sensors sit and the local section properties of the PS between
    the interface and the gauges (used by the segment reconstruction). SI units.

    laser_spacing: d_l [m]; gauge_positions: (d1, d2) [m from the interface];
    gauge_calibration: c [N m per strain]; EI [N m^2], rhoA [kg/m], thickness h [m];
    zeta_mass [1/s], zeta_stiffness [s] of the segment (C = zeta_M M + zeta_K K);
    channels: the four channels named l1, l2, g1, g2 (order irrelevant);
    mains_hz, mains_multiples: the lab's mains frequency and how many of its multiples a fit
    may estimate and remove (:func:`hbtest.harmonics.fit` ``nuisance_hz``).
    """

    laser_spacing: float
    gauge_positions: tuple[float, float]
    gauge_calibration: float
    EI: float
    rhoA: float
    thickness: float
    zeta_mass: float = 0.0
    zeta_stiffness: float = 0.0
    channels: tuple[ChannelSpec, ...] = field(default=())
    mains_hz: float = 50.0
    mains_multiples: int = 3

    @property
    def mains_frequencies(self) -> tuple[float, ...]:
        """Known interference frequencies [Hz] a fit may reject (mains and its multiples)."""
        return tuple(self.mains_hz * m for m in range(1, self.mains_multiples + 1)) if self.mains_hz > 0 else ()

    def __post_init__(self):
        d1, d2 = self.gauge_positions
        if not 0 <= d1 < d2:
            raise ValueError(f"gauge positions must satisfy 0 <= d1 < d2, got {self.gauge_positions}")
        if self.laser_spacing == 0:
            raise ValueError("laser spacing must be non-zero")

    def channel(self, name: str) -> ChannelSpec:
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(f"no channel named {name!r}")


def lasers_to_motion(l1, l2, laser_spacing: float):
    """``(u, theta)`` from the two laser readings (signals or coefficients) [m, rad]."""
    l1 = np.asarray(l1)
    return l1, (np.asarray(l2) - l1) / laser_spacing


def forces_finite_difference(eps1, eps2, layout: SensorLayout):
    """Published rule: shear from the moment slope between the gauges, moment extrapolated
    linearly to the interface. Works on signals or coefficients. Returns (T [N], M [N m])."""
    d1, d2 = layout.gauge_positions
    c = layout.gauge_calibration
    slope = (np.asarray(eps2) - np.asarray(eps1)) / (d2 - d1)
    return -c * slope, c * (np.asarray(eps1) - d1 * slope)


def forces_inertia_corrected(eps1, eps2, u0, theta0, s, layout: SensorLayout):
    """Finite-difference rule with the section's viscoelastic factor ``(1 + zeta_K s)`` plus the
    inertia of the segment up to the gauge midpoint:
    ``T(0) = T_fd + rhoA s^2 int_0^xm (u0 + theta0 x) dx`` (rigid-segment approximation),
    ``M(0) = M_fd + rhoA s^2 int_0^d1 int_0^x (u0 + theta0 y) dy dx``-style terms are
    neglected. Coefficient domain: ``s = i k Omega`` broadcast against the harmonic axis."""
    T, M = forces_finite_difference(eps1, eps2, layout)
    # the section stress carries the stiffness-proportional (Kelvin–Voigt) damping too
    visco = 1.0 + layout.zeta_stiffness * s
    d1, d2 = layout.gauge_positions
    xm = 0.5 * (d1 + d2)
    lam = layout.rhoA * (s * s + layout.zeta_mass * s)
    return visco * T + lam * (u0 * xm + theta0 * xm * xm / 2), visco * M


def forces_segment(eps1, eps2, u0, theta0, s, layout: SensorLayout):
    """Exact Euler–Bernoulli state of the segment [0, d2] from the interface motion and the two
    gauge strains, per harmonic (``s = i k Omega``; coefficient domain).

    The segment obeys ``EI (1 + zeta_K s) w'''' + rhoA (s^2 + zeta_M s) w = 0``; its general
    solution ``w = A cos bx + B sin bx + C cosh bx + D sinh bx`` (``b^4 = -rhoA (s^2 + zeta_M
    s) / (EI (1 + zeta_K s))``) is fixed by ``w(0) = u0``, ``w'(0) = theta0``,
    ``w''(d_j) = -2 eps_j / h``. Then ``M(0) = -EI (1 + zeta_K s) w''(0)`` and
    ``T(0) = EI (1 + zeta_K s) w'''(0)``. At s = 0 this reduces to the static cubic, where the
    finite-difference rule is exact.
    """
    d1, d2 = layout.gauge_positions
    h, EI = layout.thickness, layout.EI
    eps1, eps2, u0, theta0, s = np.broadcast_arrays(*(np.asarray(a, dtype=complex) for a in (eps1, eps2, u0, theta0, s)))
    out_T = np.empty(s.shape, dtype=complex)
    out_M = np.empty(s.shape, dtype=complex)
    flat = [a.reshape(-1) for a in (eps1, eps2, u0, theta0, s)]
    for n, (e1, e2, w0, t0, sn) in enumerate(zip(*flat)):
        Ec = EI * (1.0 + layout.zeta_stiffness * sn)
        b4 = -layout.rhoA * (sn * sn + layout.zeta_mass * sn) / Ec
        k1, k2 = -2.0 * e1 / h, -2.0 * e2 / h
        if abs(b4) * d2**4 < 1e-10:
            # static cubic: w = w0 + t0 x + a x^2 + c x^3, w'' = 2a + 6c x
            A = np.array([[2.0, 6.0 * d1], [2.0, 6.0 * d2]])
            a, c = np.linalg.solve(A, np.array([k1, k2]))
            w2, w3 = 2 * a, 6 * c
        else:
            b = b4 ** 0.25
            # basis f(x) = [cos bx, sin bx, cosh bx, sinh bx] and its derivatives
            def basis(x, order):
                c_, s_, ch, sh = np.cos(b * x), np.sin(b * x), np.cosh(b * x), np.sinh(b * x)
                rows = {
                    0: [c_, s_, ch, sh],
                    1: [-b * s_, b * c_, b * sh, b * ch],
                    2: [-(b**2) * c_, -(b**2) * s_, b**2 * ch, b**2 * sh],
                    3: [b**3 * s_, -(b**3) * c_, b**3 * sh, b**3 * ch],
                }
                return rows[order]

            A = np.array([basis(0.0, 0), basis(0.0, 1), basis(d1, 2), basis(d2, 2)], dtype=complex)
            coef = np.linalg.solve(A, np.array([w0, t0, k1, k2]))
            w2 = np.dot(basis(0.0, 2), coef)
            w3 = np.dot(basis(0.0, 3), coef)
        out_M.reshape(-1)[n] = -Ec * w2
        out_T.reshape(-1)[n] = Ec * w3
    return out_T, out_M


@dataclass(frozen=True)
class InterfaceMeasurement:
    """Harmonic coefficients of the PS interface, shape (2, n_orders): rows (u, theta) for
    ``displacement`` [m, rad] and (T, M) for ``force`` [N, N m]; ``*_variance`` the variance of
    the mean of each coefficient (from the per-period spread), same shape."""

    orders: np.ndarray
    displacement: np.ndarray
    force: np.ndarray
    displacement_variance: np.ndarray
    force_variance: np.ndarray
    n_periods: int


def measure_interface(acq, layout: SensorLayout, orders, method: str = "segment", reject_mains: bool = False) -> InterfaceMeasurement:
    """Fit harmonics to an acquisition's channels (raw volts), remove each channel's filter
    lag, and reconstruct (u, theta, T, M). ``acq`` has ``t`` [s, demand time base], ``data``
    (channel name -> raw volts), ``frequency_hz`` and ``n_periods``. ``reject_mains``:
    estimate and subtract the layout's mains frequencies instead of only averaging them."""
    orders = np.asarray(orders, dtype=int)
    names = ("l1", "l2", "g1", "g2")
    raw = np.stack([np.asarray(acq.data[n], dtype=float) for n in names])
    nuisance = layout.mains_frequencies if reject_mains else ()
    fit = harmonics.fit(acq.t, raw, acq.frequency_hz, orders, n_periods=acq.n_periods, nuisance_hz=nuisance)
    return _reduce(
        {n: fit.coefficients[i] for i, n in enumerate(names)},
        {n: fit.variance[i] for i, n in enumerate(names)},
        acq.frequency_hz, acq.n_periods, layout, orders, method,
    )


def measure_interface_from_coefficients(rec, layout: SensorLayout, orders, method: str = "segment") -> InterfaceMeasurement:
    """As :func:`measure_interface`, from per-channel coefficients averaged on the device
    (:class:`hbtest.rig.ChannelCoefficients`: raw volts, the record's orders)."""
    orders = np.asarray(orders, dtype=int)
    rec_orders = [int(k) for k in np.asarray(rec.orders)]
    idx = [rec_orders.index(int(k)) for k in orders]
    coef = {n: np.asarray(rec.coefficients[n])[idx] for n in ("l1", "l2", "g1", "g2")}
    var = {n: np.asarray(rec.variance[n])[idx] for n in ("l1", "l2", "g1", "g2")}
    return _reduce(coef, var, rec.frequency_hz, rec.n_periods, layout, orders, method)


def _reduce(raw_coef: dict, raw_var: dict, f: float, n_periods: int, layout: SensorLayout, orders, method: str) -> InterfaceMeasurement:
    """Raw-volt channel coefficients -> calibrated, lag-corrected interface quantities. The
    scale is linear, so scaling coefficients equals fitting scaled samples; the offset enters
    the DC coefficient only."""
    if method not in FORCE_METHODS:
        raise ValueError(f"unknown force reconstruction {method!r}; use one of {FORCE_METHODS}")
    coef, var = {}, {}
    for n in ("l1", "l2", "g1", "g2"):
        spec = layout.channel(n)
        g = np.array([spec.response(k * f) for k in orders])
        c = np.asarray(raw_coef[n], dtype=complex) * spec.scale + np.where(orders == 0, spec.offset, 0.0)
        coef[n] = c / g
        var[n] = np.asarray(raw_var[n], dtype=float) * spec.scale**2 / np.abs(g) ** 2
    u, th = lasers_to_motion(coef["l1"], coef["l2"], layout.laser_spacing)
    dl = layout.laser_spacing
    var_u = var["l1"]
    var_th = (var["l1"] + var["l2"]) / dl**2
    s = 2j * np.pi * f * orders
    if method == "finite-difference":
        T, M = forces_finite_difference(coef["g1"], coef["g2"], layout)
    elif method == "inertia":
        T, M = forces_inertia_corrected(coef["g1"], coef["g2"], u, th, s, layout)
    else:
        T, M = forces_segment(coef["g1"], coef["g2"], u, th, s, layout)
    # first-order variance propagation through the finite-difference rule (the dominant,
    # gauge-noise part for all methods)
    d1, d2 = layout.gauge_positions
    c = layout.gauge_calibration
    var_T = c**2 * (var["g1"] + var["g2"]) / (d2 - d1) ** 2
    var_M = c**2 * ((1 + d1 / (d2 - d1)) ** 2 * var["g1"] + (d1 / (d2 - d1)) ** 2 * var["g2"])
    # DC coefficients are real by convention
    for arr in (u, th, T, M):
        arr[..., orders == 0] = np.real(arr[..., orders == 0])
    return InterfaceMeasurement(
        orders=orders,
        displacement=np.stack([u, th]),
        force=np.stack([T, M]),
        displacement_variance=np.stack([var_u, var_th]),
        force_variance=np.stack([var_T, var_M]),
        n_periods=n_periods,
    )

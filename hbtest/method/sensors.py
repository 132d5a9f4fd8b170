"""From sensor signals to the physical substructure's interface quantities (docs/method.md §3).

Sign conventions (those of :mod:`hbtest.method.structures`): x runs from the interface into the
physical substructure (PS); ``u`` up, ``theta = du/dx`` counter-clockwise. The interface
forces ``(T, M)`` are the generalized forces *applied to the PS* at its interface, conjugate to
``(u, theta)``: ``D_P(s) [u, theta] = [T, M]``.

Channels are declared by the rig file (:class:`ChannelSpec`), each with a *role*:

- A laser (``kind = "laser"``) at lever position ``p`` [m] along the clamp measures the
  transverse displacement ``u + p theta`` (the clamp is rigid; ``p = 0`` is the pin axis, the
  interface). Two or more lasers at distinct positions are reduced to ``(u, theta)`` by least
  squares (:func:`lasers_to_motion_ls`; exact for two). The published pair ``l1`` (on the
  vertical slider, ``p = 0``) and ``l2`` (on the clamp at ``p = d_l``) gives ``u = l1``,
  ``theta = (l2 - l1) / d_l``. (docs/method.md §3 writes ``(l1 - l2)/d_l`` for a laser placed on the *other*
  side of the pin; the sign is carried by ``laser_spacing`` being negative in that case.)
- A strain gauge (``kind = "strain_gauge"``) on the upper surface at ``x = d`` [m] from the
  interface reads ``eps = -(h/2) u''``. The calibration constant ``c`` [N m per unit strain] is
  ``2 EI / h`` so that ``c eps(x) = -EI u''(x) = M(x)``, the generalized moment the inner part
  applies to the outer part at a cut at x. With that convention ``T(x) = -dM/dx``.
  Finite-difference rule (published, two gauges ``d1 < d2``): ``T = -c (eps2 - eps1)/(d2 -
  d1)``, ``M = c (eps1 - d1 (eps2 - eps1)/(d2 - d1))`` (linear extrapolation of M to x = 0).
  With more gauges the straight line ``M(x) = M0 - T x`` is fitted to ``c eps_j`` by least
  squares (:func:`moment_line`; the two-gauge rule is its exact special case). It ignores the
  distributed inertia of the segment: see :func:`forces_inertia_corrected` and
  :func:`forces_segment`.

Each channel may lag: an analogue anti-alias filter (or a measured lag table) and a time
**skew** ``tau`` [s] (a multiplexed ADC samples the channels one after another; cables and
amplifiers differ): the sample nominally at ``t_n`` is the signal at ``t_n - tau``, so harmonic
``k`` is multiplied by ``exp(-i k Omega tau)``. :meth:`ChannelSpec.response` is the product;
the reduction divides by it (removes the skew by ``exp(+i k Omega tau)``).
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import asdict, dataclass, field, fields, replace

import numpy as np

from . import harmonics
from .force_methods import FORCE_METHODS

__all__ = [
    "SensorLayout",
    "ChannelSpec",
    "CHANNEL_KINDS",
    "lasers_to_motion",
    "lasers_to_motion_ls",
    "moment_line",
    "forces_finite_difference",
    "forces_inertia_corrected",
    "forces_segment",
    "FORCE_METHODS",
    "InterfaceMeasurement",
    "measure_interface",
    "measure_interface_from_coefficients",
    "excluded_energy_fraction",
    "EXCLUDED_MAX_ORDER",
]

#: highest harmonic order :func:`excluded_energy_fraction` fits by default (lower when the
#: sample rate allows fewer, :func:`hbtest.method.harmonics.max_usable_harmonic`)
EXCLUDED_MAX_ORDER = 5

CHANNEL_KINDS = ("laser", "strain_gauge")
#: a channel name: an identifier (it appears in box commands and store attributes)
CHANNEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the channel names of the published layout (legacy rig files), in their canonical order
LEGACY_CHANNELS = ("l1", "l2", "g1", "g2")


@dataclass(frozen=True)
class ChannelSpec:
    """One acquisition channel: raw volts times ``scale`` (+ ``offset``) gives the physical
    quantity (m for lasers, strain for gauges). ``lowpass_hz``/``lowpass_order`` describe the
    analogue anti-alias filter (Butterworth) whose lag is removed per harmonic; 0 = none.
    ``lag_table`` (optional): measured ((f_hz, phase_lag_rad), ...) interpolated linearly,
    used instead of the filter model when given. ``position`` [m]: the channel's role — a
    laser's lever position along the clamp (it reads ``u + position theta``), a gauge's
    distance from the interface along the PS. ``skew`` [s]: the channel samples the signal at
    ``t_n - skew`` (extra lag on top of the filter; may be negative). ``full_scale_v`` [V]:
    the sensor's own output range (+/-; a laser's analogue output saturates there, whatever
    the digitiser's range): a record reaching it is clipped (None: not known; the digitiser's
    own full scale still applies)."""

    name: str
    kind: str  # "laser" | "strain_gauge"
    unit: str  # physical unit after scaling
    scale: float = 1.0
    offset: float = 0.0
    lowpass_hz: float = 0.0
    lowpass_order: int = 2
    lag_table: tuple = ()
    position: float = 0.0
    skew: float = 0.0
    full_scale_v: float | None = None

    def filter_response(self, frequency_hz: float) -> complex:
        """Complex response of the channel's filter (or lag table) alone at ``frequency_hz``."""
        if self.lag_table:
            f, lag = np.asarray(self.lag_table, dtype=float).T
            return complex(np.exp(-1j * np.interp(frequency_hz, f, lag)))
        if self.lowpass_hz <= 0:
            return 1.0 + 0j
        return _butterworth_response(int(self.lowpass_order), float(self.lowpass_hz), float(frequency_hz))

    def response(self, frequency_hz: float) -> complex:
        """Complex response of the channel at ``frequency_hz``: filter (1 when none) times the
        skew's ``exp(-i 2 pi f skew)``."""
        h = self.filter_response(frequency_hz)
        if self.skew == 0.0:
            return h
        return complex(h * np.exp(-2j * np.pi * frequency_hz * self.skew))


@dataclass(frozen=True)
class SensorLayout:
    """Where the interface sensors sit and the local section properties of the PS between
    the interface and the gauges (used by the segment reconstruction). SI units.

    channels: the acquisition channels with their roles (:class:`ChannelSpec`: at least two
    lasers at distinct lever positions and two gauges at distinct positions >= 0);
    gauge_calibration: c [N m per strain]; EI [N m^2], rhoA [kg/m], thickness h [m];
    zeta_mass [1/s], zeta_stiffness [s] of the segment (C = zeta_M M + zeta_K K);
    mains_hz, mains_multiples: the lab's mains frequency and how many of its multiples a fit
    may estimate and remove (:func:`hbtest.method.harmonics.fit` ``nuisance_hz``);
    calibration: identification of the calibration record applied to the nominal values
    (``""`` = the rig file's nominal values; :mod:`hbtest.calibration`).

    laser_spacing [m] and gauge_positions [m from the interface] are the published two-laser,
    two-gauge geometry: given alone (no channels) they place lasers at (0, laser_spacing) and
    gauges at gauge_positions; with channels they are derived from the channels' positions
    (laser_spacing = last minus first laser position, gauge_positions = the gauges' positions
    in increasing order) and, when given, must agree with them.
    """

    laser_spacing: float = 0.0
    gauge_positions: tuple = ()
    gauge_calibration: float = 0.0
    EI: float = 0.0
    rhoA: float = 0.0
    thickness: float = 0.0
    zeta_mass: float = 0.0
    zeta_stiffness: float = 0.0
    channels: tuple[ChannelSpec, ...] = field(default=())
    mains_hz: float = 50.0
    mains_multiples: int = 3
    calibration: str = ""

    @property
    def mains_frequencies(self) -> tuple[float, ...]:
        """Known interference frequencies [Hz] a fit may reject (mains and its multiples)."""
        return tuple(self.mains_hz * m for m in range(1, self.mains_multiples + 1)) if self.mains_hz > 0 else ()

    def __post_init__(self):
        object.__setattr__(self, "gauge_positions", tuple(float(d) for d in self.gauge_positions))
        object.__setattr__(self, "channels", tuple(self.channels))
        if self.channels:
            names = [c.name for c in self.channels]
            if len(set(names)) != len(names):
                raise ValueError(f"channel names must be distinct, got {names}")
            for c in self.channels:
                if c.kind not in CHANNEL_KINDS:
                    raise ValueError(f"channel {c.name!r}: kind must be one of {CHANNEL_KINDS}, got {c.kind!r}")
            lp = [c.position for c in self.lasers]
            gp = [c.position for c in self.gauges]
            if len(lp) < 2 or len(set(lp)) != len(lp):
                raise ValueError(f"need at least two lasers at distinct positions, got {lp}")
            if len(gp) < 2 or len(set(gp)) != len(gp) or min(gp) < 0:
                raise ValueError(f"need at least two gauges at distinct positions >= 0, got {gp}")
            spacing = lp[-1] - lp[0]
            gauges = tuple(sorted(gp))
            if self.gauge_positions and self.gauge_positions != gauges:
                raise ValueError(f"gauge_positions {self.gauge_positions} disagree with the gauge channels {gauges}")
            if self.laser_spacing and len(lp) == 2 and self.laser_spacing != spacing:
                raise ValueError(f"laser_spacing {self.laser_spacing} disagrees with the laser channels {lp}")
            object.__setattr__(self, "gauge_positions", gauges)
            if not self.laser_spacing:
                object.__setattr__(self, "laser_spacing", float(spacing))
        if len(self.gauge_positions) == 2:
            d1, d2 = self.gauge_positions
            if not 0 <= d1 < d2:
                raise ValueError(f"gauge positions must satisfy 0 <= d1 < d2, got {self.gauge_positions}")
        elif len(self.gauge_positions) < 2:
            raise ValueError(f"need at least two gauge positions, got {self.gauge_positions}")
        if self.laser_spacing == 0:
            raise ValueError("laser spacing must be non-zero")

    def with_channels(self, changes: dict | None = None, **layout_changes) -> "SensorLayout":
        """A copy with channel fields changed (``changes``: channel name -> {field: value},
        fields of :class:`ChannelSpec`) and layout fields changed (``layout_changes``); the
        laser spacing and gauge positions are re-derived from the channels."""
        changes = dict(changes or {})
        unknown = set(changes) - set(self.channel_names)
        if unknown:
            raise KeyError(f"no channel named {sorted(unknown)[0]!r}")
        chans = tuple(replace(c, **changes.get(c.name, {})) for c in self.channels)
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw.update(layout_changes)
        kw.update(channels=chans)
        if chans:
            kw.update(laser_spacing=0.0, gauge_positions=())
        return SensorLayout(**kw)

    def channel(self, name: str) -> ChannelSpec:
        for c in self.channels:
            if c.name == name:
                return c
        raise KeyError(f"no channel named {name!r}")

    @property
    def channel_names(self) -> tuple[str, ...]:
        """The channels' names in the layout's (acquisition) order."""
        return tuple(c.name for c in self.channels)

    @property
    def lasers(self) -> tuple[ChannelSpec, ...]:
        """The laser channels in layout order."""
        return tuple(c for c in self.channels if c.kind == "laser")

    @property
    def gauges(self) -> tuple[ChannelSpec, ...]:
        """The gauge channels in increasing position (the order of :attr:`gauge_positions`)."""
        return tuple(sorted((c for c in self.channels if c.kind == "strain_gauge"), key=lambda c: c.position))

    @property
    def laser_positions(self) -> tuple[float, ...]:
        """Lever positions [m] of the lasers (layout order; (0, laser_spacing) without channels)."""
        if self.channels:
            return tuple(c.position for c in self.lasers)
        return (0.0, self.laser_spacing)

    def roles(self) -> dict:
        """name -> (kind, quantity measured, position [m], skew [s]) for every channel; the
        quantity is ``"u + x theta"`` for lasers, ``"strain at x"`` for gauges."""
        q = {"laser": "u + x theta", "strain_gauge": "strain at x"}
        return {c.name: (c.kind, q[c.kind], c.position, c.skew) for c in self.channels}

    def to_dict(self) -> dict:
        """Every constant the reduction uses, as plain JSON-able data (SI units; see
        :meth:`from_dict`; ``json.dumps(layout.to_dict())`` is the store attribute)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "channels"}
        d["gauge_positions"] = list(self.gauge_positions)
        d["channels"] = [_channel_dict(c) for c in self.channels]
        return d

    @classmethod
    def from_dict(cls, data) -> "SensorLayout":
        """Inverse of :meth:`to_dict` (also accepts its JSON text)."""
        if isinstance(data, str):
            data = json.loads(data)
        d = dict(data)
        chans = tuple(ChannelSpec(**dict(c, lag_table=tuple(tuple(float(x) for x in r) for r in c.get("lag_table", ())))) for c in d.pop("channels", ()))
        d["gauge_positions"] = tuple(d.get("gauge_positions", ()))
        return cls(channels=chans, **d)


def _channel_dict(c: ChannelSpec) -> dict:
    """One channel of :meth:`SensorLayout.to_dict`; ``full_scale_v`` only when given (the
    stored layout of a rig file without it is the one stored before the field existed)."""
    d = dict(asdict(c), lag_table=[list(r) for r in c.lag_table])
    if c.full_scale_v is None:
        del d["full_scale_v"]
    return d


def lasers_to_motion(l1, l2, laser_spacing: float):
    """``(u, theta)`` from the two laser readings (signals or coefficients) [m, rad]."""
    l1 = np.asarray(l1)
    return l1, (np.asarray(l2) - l1) / laser_spacing


def _line_weights(positions) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares weights of the intercept and slope of a straight line through
    ``(positions[j], y_j)``: ``intercept = a @ y``, ``slope = b @ y``."""
    x = np.asarray(positions, dtype=float)
    xm = x.mean()
    sxx = np.sum((x - xm) ** 2)
    b = (x - xm) / sxx
    a = 1.0 / x.size - xm * b
    return a, b


def lasers_to_motion_ls(readings, positions):
    """``(u, theta)`` [m, rad] from laser readings ``readings`` (n_lasers, ...) at lever
    positions ``positions`` [m] (each reads ``u + p theta``): least squares, exact for two
    lasers (and for any number on a rigid-body motion)."""
    y = np.asarray(readings)
    p = list(positions)
    if len(p) == 2:
        th = (y[1] - y[0]) / (p[1] - p[0])
        return (y[0] if p[0] == 0 else y[0] - p[0] * th), th
    a, b = _line_weights(p)
    return np.tensordot(a, y, axes=1), np.tensordot(b, y, axes=1)


def _motion_variance(var, positions, rho: float = 0.0):
    """Variance of (u, theta) from laser variances ``var`` (n, ...); two lasers may be
    correlated by ``rho``, more are taken as independent."""
    v = np.asarray(var, dtype=float)
    p = list(positions)
    if len(p) == 2:
        dl = p[1] - p[0]
        cov = rho * np.sqrt(v[0] * v[1])
        var_u = (p[1] ** 2 * v[0] + p[0] ** 2 * v[1] - 2 * p[0] * p[1] * cov) / dl**2
        return var_u, (v[0] + v[1] - 2 * cov) / dl**2
    a, b = _line_weights(p)
    return np.tensordot(a**2, v, axes=1), np.tensordot(b**2, v, axes=1)


def moment_line(eps, positions, calibration: float):
    """(T [N], M [N m]) at the interface from gauge strains ``eps`` (n_gauges, ...) at
    ``positions`` [m]: the line ``M(x) = M0 - T x`` fitted to ``c eps_j`` by least squares (the
    published finite-difference rule for two gauges, computed exactly as
    :func:`forces_finite_difference`)."""
    e = np.asarray(eps)
    p = list(positions)
    c = calibration
    if len(p) == 2:
        d1, d2 = p
        slope = (e[1] - e[0]) / (d2 - d1)
        return -c * slope, c * (e[0] - d1 * slope)
    a, b = _line_weights(p)
    return -c * np.tensordot(b, e, axes=1), c * np.tensordot(a, e, axes=1)


def _force_variance(var, positions, calibration, rho: float = 0.0):
    """Variance of (T, M) through :func:`moment_line` from gauge variances; two gauges may be
    correlated by ``rho`` (``T = -c (e2 - e1) / (d2 - d1)``, ``M = c (a e1 + b e2)`` with
    ``a = 1 + d1 / (d2 - d1)``, ``b = -d1 / (d2 - d1)``), more are taken as independent."""
    v = np.asarray(var, dtype=float)
    p = list(positions)
    c = calibration
    if len(p) == 2:
        d1, d2 = p
        cov = rho * np.sqrt(v[0] * v[1])
        a, b = 1 + d1 / (d2 - d1), -d1 / (d2 - d1)
        var_T = c**2 * (v[0] + v[1] - 2 * cov) / (d2 - d1) ** 2
        var_M = c**2 * (a**2 * v[0] + b**2 * v[1] + 2 * a * b * cov)
        return var_T, var_M
    a, b = _line_weights(p)
    return c**2 * np.tensordot(b**2, v, axes=1), c**2 * np.tensordot(a**2, v, axes=1)


def forces_finite_difference(eps1, eps2, layout: SensorLayout):
    """Published rule: shear from the moment slope between the gauges, moment extrapolated
    linearly to the interface. Works on signals or coefficients. Returns (T [N], M [N m])."""
    d1, d2 = layout.gauge_positions[:2]
    c = layout.gauge_calibration
    slope = (np.asarray(eps2) - np.asarray(eps1)) / (d2 - d1)
    return -c * slope, c * (np.asarray(eps1) - d1 * slope)


def forces_inertia_corrected(eps1, eps2, u0, theta0, s, layout: SensorLayout):
    """Finite-difference rule with the section's viscoelastic factor ``(1 + zeta_K s)`` plus the
    inertia of the segment up to the gauge midpoint:
    ``T(0) = T_fd + rhoA s^2 int_0^xm (u0 + theta0 x) dx`` (rigid-segment approximation),
    ``M(0) = M_fd + rhoA s^2 int_0^d1 int_0^x (u0 + theta0 y) dy dx``-style terms are
    neglected. Coefficient domain: ``s = i k Omega`` broadcast against the harmonic axis.
    With more than two gauges (``eps2=None``, ``eps1`` stacked (n_gauges, ...) in the order of
    ``layout.gauge_positions``) the least-squares line :func:`moment_line` replaces the
    finite difference and ``xm`` is the gauges' mean position (where the least-squares slope
    of a smooth moment is the local shear)."""
    if eps2 is None:
        T, M = moment_line(eps1, layout.gauge_positions, layout.gauge_calibration)
        xm = float(np.mean(layout.gauge_positions))
    else:
        T, M = forces_finite_difference(eps1, eps2, layout)
        d1, d2 = layout.gauge_positions[:2]
        xm = 0.5 * (d1 + d2)
    # the section stress carries the stiffness-proportional (Kelvin–Voigt) damping too
    visco = 1.0 + layout.zeta_stiffness * s
    lam = layout.rhoA * (s * s + layout.zeta_mass * s)
    return visco * T + lam * (u0 * xm + theta0 * xm * xm / 2), visco * M


def _interface_derivatives(pos, k, w0, t0, b4, dmax: float):
    """(second, third) derivative of the segment's deflection at the interface, given
    ``w(0) = w0``, ``w'(0) = t0`` and the curvatures ``k`` at the gauge positions ``pos``
    (exactly for two gauges, else in the least-squares sense): the static cubic when
    ``|b^4| dmax^4`` is negligible, else the dynamic solution."""
    ng = len(k)
    if abs(b4) * dmax**4 < 1e-10:
        # static cubic: w = w0 + t0 x + a x^2 + c x^3, w'' = 2a + 6c x
        A = np.array([[2.0, 6.0 * d] for d in pos])
        if ng == 2:
            a, c = np.linalg.solve(A, np.array(k))
        else:
            a, c = np.linalg.lstsq(A.astype(complex), np.array(k), rcond=None)[0]
        return 2 * a, 6 * c
    b = b4 ** 0.25
    if ng == 2:
        A = np.array([_segment_basis(b, 0.0, 0), _segment_basis(b, 0.0, 1), _segment_basis(b, pos[0], 2),
                      _segment_basis(b, pos[1], 2)], dtype=complex)
        coef = np.linalg.solve(A, np.array([w0, t0, k[0], k[1]]))
    else:
        coef = _constrained_lstsq(
            np.array([_segment_basis(b, d, 2) for d in pos], dtype=complex), np.array(k),
            np.array([_segment_basis(b, 0.0, 0), _segment_basis(b, 0.0, 1)], dtype=complex), np.array([w0, t0]),
        )
    return np.dot(_segment_basis(b, 0.0, 2), coef), np.dot(_segment_basis(b, 0.0, 3), coef)


def _segment_basis(b, x, order: int) -> list:
    """Derivative ``order`` of the basis f(x) = [cos bx, sin bx, cosh bx, sinh bx]."""
    c_, s_, ch, sh = np.cos(b * x), np.sin(b * x), np.cosh(b * x), np.sinh(b * x)
    rows = {
        0: [c_, s_, ch, sh],
        1: [-b * s_, b * c_, b * sh, b * ch],
        2: [-(b**2) * c_, -(b**2) * s_, b**2 * ch, b**2 * sh],
        3: [b**3 * s_, -(b**3) * c_, b**3 * sh, b**3 * ch],
    }
    return rows[order]


def forces_segment(eps1, eps2, u0, theta0, s, layout: SensorLayout):
    """Exact Euler–Bernoulli state of the segment [0, d2] from the interface motion and the two
    gauge strains, per harmonic (``s = i k Omega``; coefficient domain).

    The segment obeys ``EI (1 + zeta_K s) w'''' + rhoA (s^2 + zeta_M s) w = 0``; its general
    solution ``w = A cos bx + B sin bx + C cosh bx + D sinh bx`` (``b^4 = -rhoA (s^2 + zeta_M
    s) / (EI (1 + zeta_K s))``) is fixed by ``w(0) = u0``, ``w'(0) = theta0``,
    ``w''(d_j) = -(c / EI) eps_j`` (the gauge constant ``c = layout.gauge_calibration``;
    ``-2 eps_j / h`` for the default ``c = 2 EI / h``, also when c is 0). Then ``M(0) = -EI (1 + zeta_K s) w''(0)`` and
    ``T(0) = EI (1 + zeta_K s) w'''(0)``. At s = 0 this reduces to the static cubic, where the
    finite-difference rule is exact.

    More than two gauges (``eps2=None``, ``eps1`` stacked (n_gauges, ...) in the order of
    ``layout.gauge_positions``): ``w(0), w'(0)`` hold exactly and the gauge equations in the
    least-squares sense (equality-constrained least squares); exact when the gauges read a
    true segment state.
    """
    pos = list(layout.gauge_positions)
    if eps2 is None:
        eps = [np.asarray(e, dtype=complex) for e in np.asarray(eps1)]
    else:
        eps = [np.asarray(eps1, dtype=complex), np.asarray(eps2, dtype=complex)]
        pos = pos[:2]
    ng = len(eps)
    dmax = max(pos)
    h, EI = layout.thickness, layout.EI
    # curvature per unit strain: c / EI (= 2 / h for the default c = 2 EI / h); a calibrated
    # gauge constant c scales the curvature the gauges report, hence T and M
    kappa = (layout.gauge_calibration / EI) if layout.gauge_calibration > 0 else 2.0 / h
    arrs = np.broadcast_arrays(*eps, *(np.asarray(a, dtype=complex) for a in (u0, theta0, s)))
    s = arrs[-1]
    out_T = np.empty(s.shape, dtype=complex)
    out_M = np.empty(s.shape, dtype=complex)
    flat = [a.reshape(-1) for a in arrs]
    for n, vals in enumerate(zip(*flat)):
        e, w0, t0, sn = vals[:ng], vals[ng], vals[ng + 1], vals[ng + 2]
        Ec = EI * (1.0 + layout.zeta_stiffness * sn)
        b4 = -layout.rhoA * (sn * sn + layout.zeta_mass * sn) / Ec
        k = [-kappa * ej for ej in e]
        w2, w3 = _interface_derivatives(pos, k, w0, t0, b4, dmax)
        out_M.reshape(-1)[n] = -Ec * w2
        out_T.reshape(-1)[n] = Ec * w3
    return out_T, out_M


def _constrained_lstsq(A, y, C, d):
    """``argmin |A x - y|`` subject to ``C x = d`` (null-space method; C full row rank)."""
    q, r = np.linalg.qr(C.conj().T, mode="complete")
    m = C.shape[0]
    x0 = q[:, :m] @ np.linalg.solve(r[:m].conj().T, d)
    Z = q[:, m:]
    z = np.linalg.lstsq(A @ Z, y - A @ x0, rcond=None)[0]
    return x0 + Z @ z


def _gauge_forces(eps, u, th, s, layout: SensorLayout, method: str):
    """(T, M) from gauge coefficients ``eps`` (n_gauges, n_orders) ordered as
    ``layout.gauge_positions``: the two-gauge functions unchanged for two gauges, their
    least-squares forms for more."""
    if len(eps) == 2:
        e1, e2 = eps
        if method == "finite-difference":
            return forces_finite_difference(e1, e2, layout)
        if method == "inertia":
            return forces_inertia_corrected(e1, e2, u, th, s, layout)
        return forces_segment(e1, e2, u, th, s, layout)
    E = np.stack(eps)
    if method == "finite-difference":
        return moment_line(E, layout.gauge_positions, layout.gauge_calibration)
    if method == "inertia":
        return forces_inertia_corrected(E, None, u, th, s, layout)
    return forces_segment(E, None, u, th, s, layout)


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
    #: the reduction's input: raw channel coefficients [V] (before scale, offset and lag
    #: correction) and their variances of the mean [V^2], each (n_channels, n_orders) in the
    #: layout's channel order — what re-reducing with another calibration needs
    #: (:mod:`hbtest.calibration.resolve`); None where not measured
    raw_channels: tuple | None = None
    #: correlation of the raw channels' noise (n_channels, n_channels), layout's channel order;
    #: None: independent (the variances above include it, see :func:`_pair_correlation`)
    channel_correlation: np.ndarray | None = None


def measure_interface(acq, layout: SensorLayout, orders, method: str = "segment", reject_mains: bool = False) -> InterfaceMeasurement:
    """Fit harmonics to an acquisition's channels (raw volts), remove each channel's filter
    lag and skew, and reconstruct (u, theta, T, M). ``acq`` has ``t`` [s, demand time base],
    ``data`` (channel name -> raw volts; every channel of the layout), ``frequency_hz`` and
    ``n_periods``. ``reject_mains``: estimate and subtract the layout's mains frequencies
    instead of only averaging them."""
    orders = np.asarray(orders, dtype=int)
    names = layout.channel_names
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
    names = layout.channel_names
    coef = {n: np.asarray(rec.coefficients[n])[idx] for n in names}
    var = {n: np.asarray(rec.variance[n])[idx] for n in names}
    corr = getattr(rec, "correlation", None)
    if corr is not None:
        where = [list(rec.coefficients).index(n) for n in names]
        corr = np.asarray(corr, dtype=float)[np.ix_(where, where)]
    return _reduce(coef, var, rec.frequency_hz, rec.n_periods, layout, orders, method, corr)


def _pair_correlation(corr, layout: SensorLayout, pair) -> float:
    """Noise correlation of two channels (specs ``pair``) in calibrated units (the raw
    correlation times the sign of their scales); 0 without ``corr`` or for other than two."""
    if corr is None or len(pair) != 2:
        return 0.0
    i, j = (layout.channels.index(c) for c in pair)
    return float(corr[i, j]) * float(np.sign(pair[0].scale * pair[1].scale))


def _reduce(raw_coef: dict, raw_var: dict, f: float, n_periods: int, layout: SensorLayout, orders, method: str,
            corr=None) -> InterfaceMeasurement:
    """Raw-volt channel coefficients -> calibrated, lag- and skew-corrected interface
    quantities. The scale is linear, so scaling coefficients equals fitting scaled samples;
    the offset enters the DC coefficient only. ``corr``: the raw channels' noise correlation
    (layout order; None: independent), propagated into the (u, theta) and (T, M) variances of
    two lasers and two gauges."""
    if method not in FORCE_METHODS:
        raise ValueError(f"unknown force reconstruction {method!r}; use one of {FORCE_METHODS}")
    coef, var = {}, {}
    for spec in layout.channels:
        n = spec.name
        g = np.array([spec.response(k * f) for k in orders])
        c = np.asarray(raw_coef[n], dtype=complex) * spec.scale + np.where(orders == 0, spec.offset, 0.0)
        coef[n] = c / g
        var[n] = np.asarray(raw_var[n], dtype=float) * spec.scale**2 / np.abs(g) ** 2
    lasers = layout.lasers
    u, th = lasers_to_motion_ls([coef[c.name] for c in lasers], layout.laser_positions)
    u = np.array(u, dtype=complex)  # a copy: the DC fix below must not touch a channel's array
    var_u, var_th = _motion_variance([var[c.name] for c in lasers], layout.laser_positions,
                                     _pair_correlation(corr, layout, lasers))
    s = 2j * np.pi * f * orders
    gauges = layout.gauges
    T, M = _gauge_forces([coef[c.name] for c in gauges], u, th, s, layout, method)
    # first-order variance propagation through the finite-difference (least-squares) rule
    # (the dominant, gauge-noise part for all methods)
    var_T, var_M = _force_variance([var[c.name] for c in gauges], layout.gauge_positions, layout.gauge_calibration,
                                   _pair_correlation(corr, layout, gauges))
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
        raw_channels=(np.array([np.asarray(raw_coef[c.name], dtype=complex) for c in layout.channels]),
                      np.array([np.asarray(raw_var[c.name], dtype=float) for c in layout.channels])),
        channel_correlation=corr,
    )


def excluded_energy_fraction(acq, layout: SensorLayout, solved_orders, max_order: int = EXCLUDED_MAX_ORDER,
                             method: str = "segment", reject_mains: bool = False) -> np.ndarray:
    """Fraction of the measured interface displacement power in harmonics *not* solved for,
    per DOF ``(u, theta)``, shape (2,), from a raw record ``acq`` (as :func:`measure_interface`).

    The record is fitted with every order ``1 .. K`` (``K = min(max_order, highest usable
    order of the record's sample rate)``), the channels reduced to ``(u, theta)``, and the
    power of harmonic k taken as ``|X_k|^2 - var X_k`` (the variance of the mean removes the
    noise bias; clipped at 0): ``sum over k not in solved_orders / sum over all k``. DC is not
    a harmonic and is left out (a static offset is no dynamic energy). Exact for a noise-free
    periodic record with orders up to K; NaN for a DOF without motion."""
    solved = {int(k) for k in np.asarray(solved_orders).ravel()}
    t = np.asarray(acq.t, dtype=float)
    fs = 1.0 / float(np.median(np.diff(t))) if t.size > 1 else 0.0
    top = min(int(max_order), harmonics.max_usable_harmonic(acq.frequency_hz, fs)) if fs > 0 else 0
    top = max(top, max(solved | {1}))
    orders = np.arange(0, top + 1)  # DC is fitted (sensor offsets, static deflection), then left out
    meas = measure_interface(acq, layout, orders, method, reject_mains=reject_mains)
    power = np.clip(np.abs(meas.displacement) ** 2 - np.nan_to_num(meas.displacement_variance, nan=0.0), 0.0, None)[:, 1:]
    orders = orders[1:]
    out_of = np.array([k not in solved for k in orders])
    total = power.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, power[:, out_of].sum(axis=-1) / total, np.nan)


@functools.lru_cache(maxsize=4096)
def _butterworth_response(order: int, cutoff_hz: float, frequency_hz: float) -> complex:
    """Response of an analog Butterworth low-pass of ``order`` and ``cutoff_hz`` at
    ``frequency_hz``. Cached: every reduction of every record asks it for the same few
    (channel filter, harmonic frequency) pairs, and designing the filter each time was most of
    the reduction's cost (a Monte Carlo of 20000 reductions spent 38 of its 61 s here)."""
    import scipy.signal  # here, not at import: ~1 s of every command's start-up

    b, a = scipy.signal.butter(order, 2 * np.pi * cutoff_hz, analog=True)
    _, h = scipy.signal.freqs(b, a, worN=[2 * np.pi * frequency_hz])
    return complex(h[0])

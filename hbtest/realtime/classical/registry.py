"""Transfer systems and compensators by name: the registries the command line and campaigns
build a classical test from.

- :data:`TRANSFERS` — ``name -> constructor(delay, LagParameters) -> TransferSystem``
  (``delay``, ``lag1``, ``lag2``); :func:`make_transfer`.
- :data:`COMPENSATORS` — ``name -> constructor(transfer, dt, CompensatorOptions) ->
  (Compensator, description)`` (``none``, ``poly``, ``afp``, ``inverse``, ``mcs``);
  :func:`make_compensator`. The description is a JSON-ready dict (name, settings, and what
  was derived: predictor weights, identified lag model).

A new kind is one more entry; nothing dispatches on the name elsewhere.

Units: delays, horizons and time constants in s; frequencies in Hz; gains as documented on
each compensator class.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..stability import polynomial_predictor_weights
from .compensators import (
    AdaptiveForwardPredictor,
    Compensator,
    InverseModelCompensator,
    MinimalControlSynthesis,
    NoCompensation,
    PolynomialPredictor,
)
from .limits import MAX_PREDICTOR_ORDER, MAX_PREDICTOR_SAMPLES
from .transfer import TransferSystem, identify_lag

__all__ = [
    "LagParameters",
    "CompensatorOptions",
    "TRANSFERS",
    "COMPENSATORS",
    "make_transfer",
    "make_compensator",
]

AFP_MIN_RHO_MAX_S = 0.05
"""Smallest upper bound [s] of the adaptive horizon; it is at least 10 low-frequency delays."""


@dataclass(frozen=True)
class LagParameters:
    """Parameters of the lag transfer systems: ``time_constant`` [s] (lag1),
    ``natural_frequency_hz`` and ``damping_ratio`` (lag2)."""

    time_constant: float = 5e-3
    natural_frequency_hz: float = 50.0
    damping_ratio: float = 0.7


@dataclass(frozen=True)
class CompensatorOptions:
    """Settings of the compensators (each uses its own): ``order``, ``samples`` of the
    polynomial predictors (poly, afp, inverse); ``horizon`` [s] of poly (None: the transfer
    system's low-frequency delay); AFP gains ``afp_alpha`` [s], ``afp_beta``, ``afp_gamma``;
    MCS gains ``mcs_alpha`` [1/s], ``mcs_beta``."""

    order: int = 2
    samples: int = 3
    horizon: float | None = None
    afp_alpha: float = 2e-3
    afp_beta: float = 0.5
    afp_gamma: float = 1.0
    mcs_alpha: float = 50.0
    mcs_beta: float = 0.5

    def check_predictor(self) -> None:
        """ValueError unless ``0 <= order <= MAX_PREDICTOR_ORDER`` and
        ``order + 1 <= samples <= MAX_PREDICTOR_SAMPLES``."""
        if not 0 <= self.order <= MAX_PREDICTOR_ORDER:
            raise ValueError(f"predictor order must be 0..{MAX_PREDICTOR_ORDER}, got {self.order}")
        if self.samples < self.order + 1:
            raise ValueError(f"predictor samples ({self.samples}) must be at least the order + 1 ({self.order + 1})")
        if self.samples > MAX_PREDICTOR_SAMPLES:
            raise ValueError(f"predictor samples must be at most {MAX_PREDICTOR_SAMPLES}, got {self.samples}")


TransferConstructor = Callable[[float, LagParameters], TransferSystem]
CompensatorConstructor = Callable[[TransferSystem, float, CompensatorOptions], "tuple[Compensator, dict]"]

TRANSFERS: dict[str, TransferConstructor] = {
    "delay": lambda delay, p: TransferSystem("delay", delay),
    "lag1": lambda delay, p: TransferSystem("lag1", delay, time_constant=p.time_constant),
    "lag2": lambda delay, p: TransferSystem("lag2", delay, natural_frequency_hz=p.natural_frequency_hz, damping_ratio=p.damping_ratio),
}


def make_transfer(kind: str, delay: float, parameters: LagParameters = LagParameters()) -> TransferSystem:
    """The transfer system ``kind`` (a key of :data:`TRANSFERS`) with ``delay`` [s]."""
    try:
        build = TRANSFERS[kind]
    except KeyError:
        raise ValueError(f"unknown transfer system {kind!r}; use one of {', '.join(TRANSFERS)}") from None
    return build(delay, parameters)


def _none(transfer: TransferSystem, dt: float, o: CompensatorOptions):
    return NoCompensation(), {"name": "none"}


def _poly(transfer: TransferSystem, dt: float, o: CompensatorOptions):
    o.check_predictor()
    h = transfer.low_frequency_delay if o.horizon is None else float(o.horizon)
    if not (math.isfinite(h) and h >= 0):
        raise ValueError(f"the prediction horizon must be non-negative, got {h}")
    w = polynomial_predictor_weights(o.order, o.samples, h / dt)
    info = {"name": "poly", "order": o.order, "samples": o.samples, "horizon_s": h, "weights": [float(x) for x in w]}
    return PolynomialPredictor(o.order, o.samples, h), info


def _afp(transfer: TransferSystem, dt: float, o: CompensatorOptions):
    o.check_predictor()
    if not o.afp_gamma > 0:
        raise ValueError(f"the AFP exponent gamma must be positive, got {o.afp_gamma}")
    rho_max = max(AFP_MIN_RHO_MAX_S, 10 * transfer.low_frequency_delay)
    comp = AdaptiveForwardPredictor(o.order, o.samples, 0.0, 1.0, o.afp_alpha, o.afp_beta, o.afp_gamma, rho_max)
    info = {"name": "afp", "order": o.order, "samples": o.samples, "alpha": o.afp_alpha, "beta": o.afp_beta, "gamma": o.afp_gamma}
    return comp, info


def _inverse(transfer: TransferSystem, dt: float, o: CompensatorOptions):
    o.check_predictor()
    model = identify_lag(transfer, dt)
    info = {"name": "inverse", "order": o.order, "samples": o.samples, "identified": model.to_dict()}
    return InverseModelCompensator(model, o.order, o.samples), info


def _mcs(transfer: TransferSystem, dt: float, o: CompensatorOptions):
    return MinimalControlSynthesis(o.mcs_alpha, o.mcs_beta), {"name": "mcs", "alpha": o.mcs_alpha, "beta": o.mcs_beta}


COMPENSATORS: dict[str, CompensatorConstructor] = {
    "none": _none,
    "poly": _poly,
    "afp": _afp,
    "inverse": _inverse,
    "mcs": _mcs,
}


def make_compensator(name: str, transfer: TransferSystem, dt: float,
                     options: CompensatorOptions = CompensatorOptions()) -> tuple[Compensator, dict]:
    """The compensator ``name`` (a key of :data:`COMPENSATORS`) for ``transfer`` at the time
    step ``dt`` [s], and its JSON-ready description. ValueError for an unknown name or
    settings out of range."""
    try:
        build = COMPENSATORS[name]
    except KeyError:
        raise ValueError(f"unknown compensator {name!r}; use one of {', '.join(COMPENSATORS)}") from None
    return build(transfer, dt, options)

"""The twin's model as a rig file asks for it: :func:`~hbtest.rig.virtual.model.build_model`
checked against the full model (:mod:`hbtest.rig.virtual.reference`), values it cannot simulate
turned into a :class:`~hbtest.errors.ConfigError` naming the rig file. Relative errors are of
each channel's response against its largest over both actuators (``reference.reduction_error``).
"""

from __future__ import annotations

import functools

import numpy as np

from ...errors import ConfigError
from .model import build_model
from .reference import reduction_error

__all__ = ["build_model_or_config_error", "REDUCTION_CHECK_FRACTIONS", "REDUCTION_TOLERANCE"]


@functools.lru_cache(maxsize=8)
def build_model_or_config_error(spec, sensors, sample_rate_hz: float, source):
    """:func:`~hbtest.rig.virtual.model.build_model`, its ``ValueError`` (values the twin cannot simulate: an
    eigenproblem that overflows or is ill-conditioned) or a modal model further than
    :data:`REDUCTION_TOLERANCE` from the full one turned into a
    :class:`~hbtest.errors.ConfigError` naming the rig file ``source`` (a path or text label)."""
    try:
        model = build_model(spec, sensors, sample_rate_hz)
    except ValueError as e:
        raise ConfigError(str(getattr(source, "path", source)), "virtual", f"the twin cannot simulate these values: {e}") from None
    at = REDUCTION_CHECK_FRACTIONS * spec.modal_cutoff_hz
    err = reduction_error(model, at)
    if not err <= REDUCTION_TOLERANCE:  # NaN included
        raise ConfigError(str(getattr(source, "path", source)), "virtual",
                          f"the twin cannot simulate these values: its modal model (modes below modal_cutoff_hz) departs from"
                          f" the full model by {err:.3g} (relative) at {at[0]:g}-{at[-1]:g} Hz, more than {REDUCTION_TOLERANCE:g}")
    return model


#: where (fractions of ``modal_cutoff_hz``: 15 and 75 Hz on the cantilever, its band and harmonics) and to what relative
#: tolerance the built model is checked against the full one. On the shipped twins the error there is 4e-8 and 4e-6; a
#: suspension damper of 1e6 N s/m gives 1.3e-3, one of 1.2e11 (a value fuzzing found) 6e8.
REDUCTION_CHECK_FRACTIONS = np.array([0.01, 0.05])
REDUCTION_TOLERANCE = 1e-3

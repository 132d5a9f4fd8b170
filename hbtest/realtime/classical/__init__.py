"""Classical real-time hybrid testing (RTHT) in the time domain (docs/method.md §4): the baseline the
iterative Fourier-domain test is compared with, and a design tool for delay compensation.

One module per job (the loop and its integrator are described in :mod:`.loop`):

- :mod:`.transfer` — actuator transfer systems, exact first-order-hold discretisation,
  identification of a lag model;
- :mod:`.compensators` — the compensator interface and the delay compensators;
- :mod:`.registry` — transfer systems and compensators by name;
- :mod:`.systems` — hybrid systems (NS + PS), benchmark splits, state spaces;
- :mod:`.loop` — the time-stepping loop, the emulated reference, results, size bounds;
- :mod:`.response` — growth rate, fundamental amplitude, delay and amplification;
- :mod:`.prediction` — the compensated delay equation and critical delays;
- :mod:`.report` — one test with its verdict and prediction (``hbtest classical``);
- :mod:`.compare` — classical against iterative over a sweep (``hbtest compare``);
- :mod:`.outputs` — output-path checks made before long runs;
- :mod:`.plots` — figures (no backend chosen here);
- :mod:`.limits` — size bounds (a leaf module).

Every public name is importable from the package (``from hbtest.realtime.classical import simulate``);
the submodule holding it is imported on first use, so ``import hbtest.realtime.classical`` (and the
command line's parser) stays cheap until something is used.

Units: SI throughout (m, N, s); frequencies in Hz where named ``_hz``. Harmonic amplitudes in
the one convention of :mod:`hbtest.method.harmonics` (``x(t) = Re(X e^{i w t})``, ``X = a - i b``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

# public name -> submodule holding it (the former single module's names are all here;
# harmonic_fit was removed: use hbtest.method.harmonics.fit or fundamental_amplitude)
_EXPORTS = {
    "discretize_foh": "transfer",
    "TransferSystem": "transfer",
    "LagModel": "transfer",
    "identify_lag": "transfer",
    "History": "compensators",
    "Compensator": "compensators",
    "NoCompensation": "compensators",
    "PolynomialPredictor": "compensators",
    "AdaptiveForwardPredictor": "compensators",
    "InverseModelCompensator": "compensators",
    "MinimalControlSynthesis": "compensators",
    "LagParameters": "registry",
    "CompensatorOptions": "registry",
    "TRANSFERS": "registry",
    "COMPENSATORS": "registry",
    "make_transfer": "registry",
    "make_compensator": "registry",
    "MAX_STEPS": "limits",
    "MAX_PREDICTOR_ORDER": "limits",
    "MAX_PREDICTOR_SAMPLES": "limits",
    "HybridSystem": "systems",
    "sdof_benchmark": "systems",
    "three_mass_benchmark": "systems",
    "chain_benchmark": "systems",
    "cantilever_benchmark": "systems",
    "ns_state_space": "systems",
    "ps_state_space": "systems",
    "plant_state_space": "systems",
    "Excitation": "loop",
    "ClassicalResult": "loop",
    "simulate": "loop",
    "simulate_emulated": "loop",
    "check_run_size": "loop",
    "GrowthRate": "response",
    "growth_rate": "response",
    "fundamental_amplitude": "response",
    "delay_and_amplification": "response",
    "FREE_RESPONSE_DISPLACEMENT": "prediction",
    "predicted_equation": "prediction",
    "predicted_rightmost": "prediction",
    "critical_delay_predicted": "prediction",
    "critical_delay_simulated": "prediction",
    "LoopReport": "report",
    "run_loop": "report",
    "ACTUATOR_DAMPING_RATIO": "compare",
    "ClassicalPointDone": "compare",
    "CompareResult": "compare",
    "classical_point": "compare",
    "iterative_points": "compare",
    "compare_sweep": "compare",
    "check_store_target": "outputs",
    "check_file_target": "outputs",
    "subspace_figure": "plots",
    "run_figure": "plots",
    "compare_figure": "plots",
}

__all__ = list(_EXPORTS)

if TYPE_CHECKING:  # static tools see the names eagerly
    from .compare import (  # noqa: F401
        ACTUATOR_DAMPING_RATIO,
        ClassicalPointDone,
        CompareResult,
        classical_point,
        compare_sweep,
        iterative_points,
    )
    from .compensators import (  # noqa: F401
        AdaptiveForwardPredictor,
        Compensator,
        History,
        InverseModelCompensator,
        MinimalControlSynthesis,
        NoCompensation,
        PolynomialPredictor,
    )
    from .limits import MAX_PREDICTOR_ORDER, MAX_PREDICTOR_SAMPLES, MAX_STEPS  # noqa: F401
    from .loop import ClassicalResult, Excitation, check_run_size, simulate, simulate_emulated  # noqa: F401
    from .outputs import check_file_target, check_store_target  # noqa: F401
    from .plots import compare_figure, run_figure, subspace_figure  # noqa: F401
    from .prediction import (  # noqa: F401
        FREE_RESPONSE_DISPLACEMENT,
        critical_delay_predicted,
        critical_delay_simulated,
        predicted_equation,
        predicted_rightmost,
    )
    from .registry import COMPENSATORS, TRANSFERS, CompensatorOptions, LagParameters, make_compensator, make_transfer  # noqa: F401
    from .report import LoopReport, run_loop  # noqa: F401
    from .response import GrowthRate, delay_and_amplification, fundamental_amplitude, growth_rate  # noqa: F401
    from .systems import (  # noqa: F401
        HybridSystem,
        cantilever_benchmark,
        chain_benchmark,
        ns_state_space,
        plant_state_space,
        ps_state_space,
        sdof_benchmark,
        three_mass_benchmark,
    )
    from .transfer import LagModel, TransferSystem, discretize_foh, identify_lag  # noqa: F401


def __getattr__(name: str):
    """Import the submodule holding ``name`` on first use (PEP 562)."""
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

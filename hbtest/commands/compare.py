"""``hbtest compare SWEEPFILE --delay T``: the classical real-time hybrid test against the
iterative Fourier-domain test at every sweep frequency. Implemented in
:mod:`hbtest.commands.classical` (which also registers ``compare``); this module exists so
that ``hbtest.cli`` finds the command by its name."""

from __future__ import annotations

from .classical import register_compare, run_compare  # noqa: F401


def register(sub) -> None:
    if "compare" not in set(getattr(sub, "choices", {}) or {}):
        register_compare(sub)

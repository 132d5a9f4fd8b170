"""The safe stop of a rig, protected from the user's own signals.

When a run ends (finished, faulted, Ctrl+C, SIGTERM) the rig is ramped to zero and its outputs
are switched off (:meth:`Rig.close`). A second or third Ctrl+C landing in that ramp-down must not
abort it half-way: :func:`signals_masked` holds SIGINT and SIGTERM for its duration (they are
counted, not raised), so ramp-down and output-off always complete — bounded by the instruments'
own timeouts. The signals are only remembered: the run is stopping anyway.

Only the main thread can change signal handlers; elsewhere the context does nothing.
"""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

__all__ = ["MaskedSignals", "close_rig_safely", "signals_masked"]


class MaskedSignals:
    """The signals that arrived while masked (``count``; ``names`` in order)."""

    def __init__(self):
        self.names: list[str] = []

    @property
    def count(self) -> int:
        return len(self.names)

    def handler(self, signum, frame) -> None:
        self.names.append(signal.Signals(signum).name)


@contextmanager
def signals_masked():
    """Within the block SIGINT and SIGTERM do not raise: they are counted (yields a
    :class:`MaskedSignals`). The previous handlers are restored on exit."""
    seen = MaskedSignals()
    if threading.current_thread() is not threading.main_thread():
        yield seen
        return
    old = {s: signal.signal(s, seen.handler) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield seen
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def close_rig_safely(rig) -> str:
    """Close ``rig`` (ramp to zero, outputs off) with SIGINT/SIGTERM masked. Returns "" or a
    clause for the run's last message when the rig could not be ramped down from here (its
    own watchdog must do it) or when signals arrived meanwhile."""
    with signals_masked() as seen:
        try:
            rig.close()
            note = ""
        except Exception as e:  # noqa: BLE001 - the run is ending either way; say what happened
            note = f"; the rig could not be ramped down from here ({e}) — its watchdog must do it"
    if seen.count:
        note += f"; {seen.count} signal(s) ({', '.join(seen.names)}) held until the outputs were off"
    return note

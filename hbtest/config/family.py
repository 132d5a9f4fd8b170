"""The ``[sweep]`` keys of stepped-force families and automatic harmonics (read here, in the
config layer; the behaviour is :mod:`hbtest.sweep.stepped`). Units: force amplitudes [N]."""

from __future__ import annotations

__all__ = ["MAX_AUTO_HARMONIC", "AUTO_THRESHOLD", "read_family_fields"]

#: highest candidate harmonic of ``sweep.harmonics = "auto"`` unless ``sweep.max_harmonic`` says
MAX_AUTO_HARMONIC = 5
#: power fraction of an inactive harmonic above which ``harmonics = "auto"`` activates it
#: (1e-4: amplitude above 1 % of the interface motion) unless ``sweep.auto_threshold`` says
AUTO_THRESHOLD = 1e-4


def read_family_fields(sw) -> tuple[tuple[int, ...], dict]:
    """The ``[sweep]`` keys of this module from a config section: (the orders the store
    allocates, before the rig's Nyquist limit; the extra :class:`~hbtest.config.SweepSpec`
    fields). ``harmonics``: a list of orders, or ``"auto"`` (with optional ``max_harmonic``,
    ``auto_threshold``, ``forced_harmonics``); ``force_levels``: amplitudes [N]."""
    fields: dict = {}
    if sw.has("force_levels"):
        levels = sw.numbers("force_levels", positive=True)
        if not levels or len(set(levels)) != len(levels):
            raise sw.error("force_levels", "needs distinct positive force amplitudes [N]")
        fields["force_levels"] = tuple(levels)
    if sw.value("harmonics", [1]) == "auto":
        sw.string("harmonics", choices=("auto",))
        kmax = sw.integer("max_harmonic", MAX_AUTO_HARMONIC, min=1, max=100)
        thr = sw.number("auto_threshold", AUTO_THRESHOLD, positive=True, max=1.0)
        forced = sw.numbers("forced_harmonics", [], integer=True, nonnegative=True)
        if len(set(forced)) != len(forced):
            raise sw.error("forced_harmonics", "needs distinct orders")
        orders = tuple(sorted(set(range(1, kmax + 1)) | set(forced)))
        fields.update(auto_harmonics=True, max_harmonic=kmax, auto_threshold=thr, forced_harmonics=tuple(sorted(forced)))
        return orders, fields
    for key in ("max_harmonic", "auto_threshold", "forced_harmonics"):
        if sw.has(key):
            raise sw.error(key, 'applies only with harmonics = "auto"')
    orders = sw.numbers("harmonics", [1], integer=True, nonnegative=True)
    if not orders or len(set(orders)) != len(orders) or max(orders) == 0:
        raise sw.error("harmonics", "needs distinct orders including at least one k >= 1")
    return tuple(sorted(orders)), fields



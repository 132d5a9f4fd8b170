"""The run store (zarr v3, one slot per point, one writer): see :mod:`hbtest.store.run` for the
layout, :mod:`hbtest.store.variables` for the schema table (every variable declared once) and the
point record, :mod:`hbtest.store.lock` for the one-writer lock, :mod:`hbtest.store.provenance` for
what every store records about how it was made, :mod:`hbtest.store.slots` for writing one slot
of several arrays in one trip to zarr's event loop (a run store's on one writer thread)."""

from .lock import StoreBusy, StoreLock, lock_path
from .provenance import git_state, package_versions
from .run import DOFS, SCHEMA_VERSION, STATUSES, PointRecord, RunStore, open_run, tolerance_from_attrs
from .slots import SlotWriteError

__all__ = [
    "PointRecord", "RunStore", "open_run", "STATUSES", "DOFS", "SCHEMA_VERSION", "tolerance_from_attrs",
    "StoreLock", "StoreBusy", "lock_path", "package_versions", "git_state", "SlotWriteError",
]

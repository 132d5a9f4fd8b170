"""Writing one slot (one index along the first dimension, one chunk per slot) of several zarr
arrays of a store in ONE trip to zarr's event loop, the arrays concurrently, instead of an
xarray region write per group of variables (each ~2 round trips per array: ~45 per point of
a run store, most of a virtual sweep's store time).

The crash guarantee of the run and campaign stores is kept by the order of the steps, each
finished before the next starts: a slot whose ``flag`` is set is first unflagged, then the
data are written, then the flag is set. A process killed at any moment leaves the flag False
on a slot that is not complete.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_slot"]


def write_slot(path: str | Path, index: int, values: dict, flag: str | None = None) -> None:
    """Write ``values`` (array name -> its value at ``index`` of the first dimension, without
    that axis) into the zarr group at ``path``; with ``flag`` (a boolean array's name, e.g.
    ``done``), by the protocol of the module docstring."""
    from zarr.core.sync import sync

    sync(_write_slot(str(path), int(index), values, flag))


async def _write_slot(path: str, index: int, values: dict, flag: str | None) -> None:
    import zarr.api.asynchronous as za

    group = await za.open_group(store=path, mode="r+")
    names = list(values) + ([flag] if flag else [])
    arrays: dict[str, Any] = dict(zip(names, await asyncio.gather(*(group.getitem(n) for n in names))))
    if flag and bool(await arrays[flag].getitem(index)):
        await arrays[flag].setitem(index, False)
    await asyncio.gather(*(arrays[n].setitem(index, np.asarray(v)) for n, v in values.items()))
    if flag:
        await arrays[flag].setitem(index, True)

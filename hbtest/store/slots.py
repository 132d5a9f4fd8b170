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

__all__ = ["write_slot", "SlotWriter"]


def write_slot(path: str | Path, index: int, values: dict, flag: str | None = None) -> None:
    """Write ``values`` (array name -> its value at ``index`` of the first dimension, without
    that axis) into the zarr group at ``path``; with ``flag`` (a boolean array's name, e.g.
    ``done``), by the protocol of the module docstring."""
    SlotWriter(path).write(index, values, flag)


class SlotWriter:
    """:func:`write_slot` for the slots of one store, one after another: each array is opened
    (its metadata read) at its first write only, not again at every slot. For a store whose
    arrays keep their shapes, chunks and codecs while it is written (a run or campaign store:
    allocated once, then filled slot by slot)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self._arrays: dict[str, Any] = {}

    def write(self, index: int, values: dict, flag: str | None = None) -> None:
        """:func:`write_slot` into this writer's store."""
        from zarr.core.sync import sync

        sync(self._write(int(index), values, flag))

    async def _open(self, names: list) -> dict:
        import zarr.api.asynchronous as za

        new = [n for n in names if n not in self._arrays]
        if new:
            group = await za.open_group(store=self.path, mode="r+")
            self._arrays.update(zip(new, await asyncio.gather(*(group.getitem(n) for n in new))))
        return {n: self._arrays[n] for n in names}

    async def _write(self, index: int, values: dict, flag: str | None) -> None:
        arrays = await self._open(list(values) + ([flag] if flag else []))
        await _write_arrays(arrays, index, values, flag)


async def _write_arrays(arrays: dict, index: int, values: dict, flag: str | None) -> None:
    """The steps of the module docstring's protocol on opened ``arrays``."""
    if flag and bool(await arrays[flag].getitem(index)):
        await arrays[flag].setitem(index, False)
    await asyncio.gather(*(arrays[n].setitem(index, np.asarray(v)) for n, v in values.items()))
    if flag:
        await arrays[flag].setitem(index, True)

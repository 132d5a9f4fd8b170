"""Writing one slot (one index along the first dimension, one chunk per slot) of several zarr
arrays of a store in ONE trip to zarr's event loop, the arrays concurrently, instead of an
xarray region write per group of variables (each ~2 round trips per array: ~45 per point of
a run store, most of a virtual sweep's store time).

The crash guarantee of the run and campaign stores is kept by the order of the steps, each
finished before the next starts: a slot whose ``flag`` is set is first unflagged, then the
data are written, then the flag is set. A process killed at any moment leaves the flag False
on a slot that is not complete.

A :class:`SlotWriter` whose ``background`` is set (a run store while a sweep runs,
:meth:`hbtest.store.RunStore.writing_behind`) hands its slots to one writer thread, in order,
and returns at once: the caller's next point is computed while zarr writes this one. The steps
of each slot keep their order; :meth:`SlotWriter.flush` waits for every slot handed over (the
store's readers call it first). A write that fails stops the writes after it and is raised by
the next ``write`` or ``flush`` as :class:`SlotWriteError` (an OSError naming the slot) or as
the exception itself.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["write_slot", "SlotWriter", "SlotWriteError"]


def write_slot(path: str | Path, index: int, values: dict, flag: str | None = None) -> None:
    """Write ``values`` (array name -> its value at ``index`` of the first dimension, without
    that axis) into the zarr group at ``path``; with ``flag`` (a boolean array's name, e.g.
    ``done``), by the protocol of the module docstring."""
    SlotWriter(path).write(index, values, flag)


class SlotWriteError(OSError):
    """A slot written in the background failed: ``index`` the slot, ``errno`` and ``strerror``
    those of the OSError that stopped it."""

    def __init__(self, index: int, err: OSError):
        super().__init__(err.errno, err.strerror or str(err))
        self.index = int(index)


class SlotWriter:
    """:func:`write_slot` for the slots of one store, one after another: each array is opened
    (its metadata read) at its first write only, not again at every slot. For a store whose
    arrays keep their shapes, chunks and codecs while it is written (a run or campaign store:
    allocated once, then filled slot by slot). While :attr:`background` is set the writes go to
    one writer thread (module docstring); otherwise each returns when its slot is on disk."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self.background = False
        self._arrays: dict[str, Any] = {}
        self._thread: ThreadPoolExecutor | None = None
        self._pending: list[Future] = []
        self._failed: tuple[int, BaseException] | None = None

    def write(self, index: int, values: dict, flag: str | None = None) -> None:
        """:func:`write_slot` into this writer's store (in the background: handed over with
        its values copied; a failure of an earlier slot is raised here instead)."""
        if not self.background:
            self.flush()
            return _sync(self._write(int(index), values, flag))
        self._raise_failed()
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hbtest-store")
        self._pending = [f for f in self._pending if not f.done()]
        copied = {n: np.array(v, copy=True) for n, v in values.items()}
        self._pending.append(self._thread.submit(self._write_in_background, int(index), copied, flag))

    def drain(self) -> None:
        """Wait for every slot handed to the writer thread (a failure is kept for the next
        :meth:`write` or :meth:`flush`)."""
        for f in self._pending:
            f.result()
        self._pending = []

    def flush(self) -> None:
        """:meth:`drain`, then raise the first failure (once; the writes after it were not made)."""
        self.drain()
        self._raise_failed()

    def _write_in_background(self, index: int, values: dict, flag: str | None) -> None:
        if self._failed is not None:  # a slot before this one failed: nothing after it is written
            return
        try:
            _sync(self._write(index, values, flag))
        except BaseException as e:  # noqa: BLE001 - handed to the caller by _raise_failed
            self._failed = (index, e)

    def _raise_failed(self) -> None:
        if self._failed is None:
            return
        self.drain()  # the writes after it return at once
        index, e = self._failed
        self._failed = None
        if isinstance(e, OSError):
            raise SlotWriteError(index, e) from e
        raise e

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


def _sync(coroutine) -> None:
    from zarr.core.sync import sync

    sync(coroutine)


async def _write_arrays(arrays: dict, index: int, values: dict, flag: str | None) -> None:
    """The steps of the module docstring's protocol on opened ``arrays``."""
    if flag and bool(await arrays[flag].getitem(index)):
        await arrays[flag].setitem(index, False)
    await asyncio.gather(*(arrays[n].setitem(index, np.asarray(v)) for n, v in values.items()))
    if flag:
        await arrays[flag].setitem(index, True)

"""One writer per run store: an exclusive, advisory lock held for a whole run.

The lock is the file ``<store>.lock`` beside the store (not inside it, so it also covers the
atomic replacement of the store directory on ``--overwrite``). It is taken with ``flock``
(non-blocking): the kernel releases it when the holding process exits in any way, SIGKILL
included, so a dead writer never blocks the next one. The file holds who took it (pid, host,
command, time, as JSON) so that a second writer is told exactly who holds the store, and a
lock file left behind by a killed writer is recognised and reported as taken over. The lock
is advisory: it binds every hbtest command that writes a store (``sweep``, ``resume``,
``compare``); ``flock`` on network file systems may be local to one host.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from pathlib import Path

from ..errors import UserError
from .provenance import utc_now

__all__ = ["StoreBusy", "StoreLock", "lock_path"]


class StoreBusy(UserError):
    """Another process is writing this store."""


def lock_path(store_path) -> Path:
    p = Path(store_path)
    return p.with_name(p.name + ".lock")


def _describe(holder: dict) -> str:
    if not holder:
        return "another process (no details recorded)"
    cmd = holder.get("command") or ""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')} since {holder.get('since', '?')}" + (f" ({cmd})" if cmd else "")


class StoreLock:
    """Context manager: ``with StoreLock(path) as lock: ...``. Raises :class:`StoreBusy`
    (one line naming the store and the holder) when another process holds it.
    ``lock.taken_over`` is the record of a previous holder that died without releasing
    (or None)."""

    def __init__(self, store_path):
        self.store = Path(store_path)
        self.path = lock_path(store_path)
        self._fd: int | None = None
        self.taken_over: dict | None = None

    @staticmethod
    def _read(fd: int) -> dict:
        os.lseek(fd, 0, os.SEEK_SET)
        raw = os.read(fd, 65536)
        try:
            doc = json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except (ValueError, UnicodeDecodeError):
            doc = {}
        return doc if isinstance(doc, dict) else {}

    def acquire(self) -> "StoreLock":
        if self._fd is not None:
            return self
        for _ in range(10):  # the file may be unlinked by a releasing holder between open and flock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as e:
                raise UserError(f"{self.store}: cannot create the lock file {self.path.name} ({e.strerror or e})") from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._read(fd)
                os.close(fd)
                raise StoreBusy(f"{self.store}: the store is being written by {_describe(holder)}; wait for that run to end or stop it") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            previous = self._read(fd)
            self.taken_over = previous or None
            me = {"pid": os.getpid(), "host": socket.gethostname(), "since": utc_now(), "command": " ".join(sys.argv[:6])}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode())
            os.fsync(fd)
            self._fd = fd
            return self
        raise StoreBusy(f"{self.store}: could not take the lock {self.path} (it keeps being replaced)")

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.unlink(self.path)  # while still holding the lock: a waiter re-checks the inode
        except FileNotFoundError:
            pass
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> "StoreLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()

    @staticmethod
    def holder(store_path) -> dict | None:
        """Who holds the store's lock now (None when nobody does)."""
        p = lock_path(store_path)
        try:
            fd = os.open(p, os.O_RDWR)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return StoreLock._read(fd) or {}
            fcntl.flock(fd, fcntl.LOCK_UN)
            return None
        finally:
            os.close(fd)

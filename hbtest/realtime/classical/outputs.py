"""Checks of output paths before a long computation: a classical test or comparison refuses
a path it could not write *before* it runs, not after (a run store, a plot file).

Each check returns the path (as a :class:`~pathlib.Path`) or raises
:class:`hbtest.errors.UserError` with one line that starts with ``label`` (the caller's name
for the path, e.g. the command-line flag) and says what is wrong. Nothing is created or left
behind: writability is probed with a temporary file that is removed at once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ...errors import UserError
from ...store import RunStore

__all__ = ["check_store_target", "check_file_target"]


def _probe_directory(directory: Path, label: str, path) -> None:
    """UserError unless a file can be created in ``directory`` (an existing directory)."""
    if not directory.is_dir():
        raise UserError(f"{label} {path}: {directory} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as e:
        raise UserError(f"{label} {path}: cannot write in {directory} ({e.strerror or e})") from None


def _nearest_existing(p: Path) -> Path:
    q = p.absolute()
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _non_empty(path, label: str) -> Path:
    if path is None or not str(path).strip():
        raise UserError(f"{label}: empty path")
    return Path(str(path))


def check_store_target(path, overwrite: bool = False, label: str = "store") -> Path:
    """A new run store can be created at ``path``: it does not exist (or ``overwrite`` is
    set and it is an hbtest run store or an empty directory, the only things
    :meth:`hbtest.store.RunStore.create` replaces), and its nearest existing ancestor is a
    writable directory (missing parents are created with the store)."""
    p = _non_empty(path, label)
    if p.exists() or p.is_symlink():
        if not overwrite:
            raise UserError(f"{label} {p}: already exists; pass --overwrite to replace it")
        empty_dir = p.is_dir() and not p.is_symlink() and not any(p.iterdir())
        if not empty_dir:
            try:
                RunStore.open(p)
            except UserError:
                raise UserError(f"{label} {p}: exists and is not an hbtest run store; refusing to overwrite it") from None
        _probe_directory(p.absolute().parent, label, p)
        return p
    _probe_directory(_nearest_existing(p.parent), label, p)
    return p


def check_file_target(path, label: str = "output") -> Path:
    """A file can be written at ``path``: not an existing directory, and its parent is an
    existing, writable directory."""
    p = _non_empty(path, label)
    if p.is_dir():
        raise UserError(f"{label} {p}: is a directory, expected a file name")
    parent = p.absolute().parent
    if not parent.exists():
        raise UserError(f"{label} {p}: directory {p.parent} does not exist")
    _probe_directory(parent, label, p)
    return p

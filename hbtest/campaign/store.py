"""The campaign store: ONE zarr v3 store per campaign, a ``case`` dimension, written by region.

Writer: the campaign process alone (it holds the store's :class:`hbtest.store.StoreLock` for
the whole run). Workers never touch it: they return each case's result to the campaign
process, which writes that case's region (one chunk per case along ``case``, so a write
touches only that case's chunk files). So there is one writer per region and per store, and
no race between workers.

Layout
------
Coordinates: ``case`` (0..n-1), ``parameter`` (the varied keys as written in the campaign
file, e.g. ``sweep.points``, ``rig:virtual.actuation_delay_ms``).

The plan, written at creation: ``value(case, parameter)`` (the numeric value, NaN for a
string or boolean), ``value_text(case, parameter)`` (the value as a TOML literal),
``sweep_overrides(case)`` / ``rig_overrides(case)`` (each case's full ``--set`` lists of the
base sweep and its rig file, JSON arrays), ``rig_seed(case)`` (-1: the rig file's seed).

Results, one region write per case when it finishes: one float64 variable per figure (see
:mod:`hbtest.campaign.figures`; NaN when failed), ``status`` (``""`` not run yet, ``done``,
``failed``), ``error`` (the failed case's one-line error), ``wall_seconds``, ``worker``,
``finished_utc``, ``run_store`` (the kept run store of the case, if any); then ``finished``
(bool) in a second write: the authority on whether a case is finished. A campaign process
killed at any moment leaves every finished case intact; a resumed campaign runs only the
cases whose ``finished`` is False (and, with ``retry_failed``, the failed ones).

Attributes: ``hbtest_store`` (= ``"campaign"``), ``schema_version``, the campaign file's
verbatim text, SHA-256 and path, the base sweep's and its rig file's texts and SHA-256 (a
resume refuses a store made from other texts), ``kind``, ``figures``, ``parameters``,
``seed``, package ``versions``, ``git_commit`` / ``git_dirty``, ``created_utc`` /
``updated_utc``, ``status`` (``running | completed | interrupted``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np

from ..errors import UserError
from ..store.provenance import git_state, jsonable, package_versions, utc_now
from ..store.slots import SlotWriter
from .figures import FIGURE_INFO

__all__ = ["CampaignStore", "open_campaign", "CAMPAIGN_SCHEMA_VERSION", "CASE_STATUSES", "RESULT_VARIABLES"]

CAMPAIGN_SCHEMA_VERSION = 1
CASE_STATUSES = ("", "done", "failed")
_MARKER = "campaign"
#: per-case result variables besides the figures: name -> (kind, units, long name)
RESULT_VARIABLES = {
    "status": ("s", "", "case status: '' not run yet, done, failed"),
    "error": ("s", "", "error of a failed case (one line)"),
    "wall_seconds": ("f", "s", "wall time of the case on its worker"),
    "worker": ("s", "", "host:pid of the worker that ran the case"),
    "finished_utc": ("s", "", "when the case finished (UTC, ISO 8601)"),
    "run_store": ("s", "", "the case's kept run store (keep_runs), else empty"),
}
_DTYPE = {"f": np.float64, "s": object, "b": np.bool_, "i": np.int64}
_FILL = {"f": np.nan, "s": "", "b": False, "i": -1}


def _numeric(v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return float("nan")
    return float(v)


class CampaignStore:
    """A campaign store on disk (see the module docstring)."""

    def __init__(self, path):
        import zarr

        self.path = Path(path)
        g = zarr.open_group(str(self.path), mode="r")
        self.attrs = dict(g.attrs)
        self.n_cases = int(g["case"].shape[0])
        self.figures = tuple(self.attrs.get("figures", ()))
        self._slots = SlotWriter(self.path)

    @classmethod
    def create(cls, path, cases, figures, attrs: dict, overwrite: bool = False) -> "CampaignStore":
        """Allocate the store for ``cases`` (:class:`hbtest.campaign.Case`) and write the plan.
        An existing store is replaced only with ``overwrite`` (the caller holds the lock)."""
        import xarray as xr

        from .cases import toml_literal

        path = Path(path)
        if path.exists():
            if not overwrite:
                raise UserError(f"{path}: exists; resume it with the same campaign file or give --overwrite")
            shutil.rmtree(path)
        n = len(cases)
        keys = [k for k, _ in cases[0].parameters] if cases else []
        value = np.array([[_numeric(v) for _, v in c.parameters] for c in cases], dtype=float).reshape(n, len(keys))
        text = np.array([[toml_literal(v) for _, v in c.parameters] for c in cases], dtype=object).reshape(n, len(keys))
        data = {
            "value": (("case", "parameter"), value, {"units": "as in the file", "long_name": "numeric value of each varied parameter (NaN: not a number)"}),
            "value_text": (("case", "parameter"), text, {"long_name": "value of each varied parameter, as a TOML literal"}),
            "sweep_overrides": ("case", np.array([json.dumps(list(c.sweep_overrides)) for c in cases], dtype=object),
                                {"long_name": "the case's --set items of the base sweep (JSON array)"}),
            "rig_overrides": ("case", np.array([json.dumps(list(c.rig_overrides)) for c in cases], dtype=object),
                              {"long_name": "items the case appends to the sweep's rig_set (JSON array)"}),
            "rig_seed": ("case", np.array([-1 if c.rig_seed is None else c.rig_seed for c in cases], dtype=np.int64),
                         {"long_name": "seed of the case's virtual rig (-1: the rig file's seed)"}),
        }
        encoding = {}
        for name in figures:
            units, long_name = FIGURE_INFO[name]
            data[name] = ("case", np.full(n, np.nan), {"units": units, "long_name": long_name})
            encoding[name] = {"chunks": (1,), "fill_value": np.nan}
        for name, (kind, units, long_name) in RESULT_VARIABLES.items():
            data[name] = ("case", np.broadcast_to(np.array(_FILL[kind], dtype=_DTYPE[kind]), (n,)), {"units": units, "long_name": long_name})
            encoding[name] = {"chunks": (1,), "fill_value": _FILL[kind]}
        data["finished"] = ("case", np.zeros(n, dtype=bool), {"long_name": "the case finished (done or failed); written after its results"})
        encoding["finished"] = {"chunks": (1,), "fill_value": False}
        commit, dirty = git_state()
        now = utc_now()
        root = dict(jsonable(dict(attrs)), hbtest_store=_MARKER, schema_version=CAMPAIGN_SCHEMA_VERSION, title="hbtest campaign",
                    figures=list(figures), parameters=keys, versions=package_versions(), git_commit=commit, git_dirty=dirty,
                    created_utc=now, updated_utc=now, status="running")
        ds = xr.Dataset(data, coords={"case": ("case", np.arange(n, dtype=np.int64), {"long_name": "case index"}),
                                      "parameter": ("parameter", np.array(keys, dtype=object), {"long_name": "varied key"})}, attrs=root)
        # written beside and renamed into place: a campaign killed while allocating leaves no
        # half-made store at ``path``
        tmp = path.with_name(f".{path.name}.new-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if tmp.exists():
                shutil.rmtree(tmp)
            ds.to_zarr(str(tmp), mode="w-", zarr_format=3, consolidated=False, encoding=encoding)
            os.rename(tmp, path)
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise UserError(f"{path}: cannot write the campaign store ({e.strerror or e})") from None
        return cls(path)

    @classmethod
    def open(cls, path) -> "CampaignStore":
        path = Path(path)
        if not path.exists():
            raise UserError(f"{path}: campaign store not found")
        try:
            store = cls(path)
        except Exception as e:  # noqa: BLE001 - not a zarr group, damaged layout
            raise UserError(f"{path}: not an hbtest campaign store ({' '.join(str(e).split())})") from None
        if store.attrs.get("hbtest_store") != _MARKER:
            raise UserError(f"{path}: not an hbtest campaign store (a run store? plot it with hbtest plot)")
        return store

    def same_plan(self, cases, figures, attrs: dict) -> bool:
        """Whether this store was allocated for exactly these cases (overrides, rig seeds,
        analysis settings) and figures: the check before a resume."""
        import zarr

        g = zarr.open_group(str(self.path), mode="r")
        plan = (
            [json.dumps(list(c.sweep_overrides)) for c in cases] == [str(x) for x in g["sweep_overrides"][...]]
            and [json.dumps(list(c.rig_overrides)) for c in cases] == [str(x) for x in g["rig_overrides"][...]]
            and [-1 if c.rig_seed is None else c.rig_seed for c in cases] == [int(x) for x in g["rig_seed"][...]]
        )
        same_attrs = all(self.attrs.get(k) == jsonable(attrs.get(k)) for k in ("kind", "analysis", "seed"))
        return plan and same_attrs and list(figures) == list(self.figures)

    def dataset(self):
        import xarray as xr

        return xr.open_zarr(str(self.path), consolidated=False, zarr_format=3)

    def finished(self) -> np.ndarray:
        import zarr

        return np.asarray(zarr.open_group(str(self.path), mode="r")["finished"][...], dtype=bool)

    def statuses(self) -> np.ndarray:
        import zarr

        return np.asarray(zarr.open_group(str(self.path), mode="r")["status"][...], dtype=object)

    def write_case(self, result: dict) -> None:
        """Write one case's result (a :func:`hbtest.campaign.run_case` dict) into its region:
        data first, then ``finished`` (a case already finished is first marked unfinished,
        so ``finished`` never vouches for a partly rewritten case; one trip to zarr's event
        loop, :func:`hbtest.store.slots.write_slot`)."""
        i = int(result["index"])
        if not 0 <= i < self.n_cases:
            raise IndexError(f"case {i} outside 0..{self.n_cases - 1}")
        data = {name: np.array(result["figures"].get(name, np.nan), dtype=np.float64) for name in self.figures}
        for name, (kind, _, _) in RESULT_VARIABLES.items():
            data[name] = np.array(result.get(name, _FILL[kind]), dtype=_DTYPE[kind])
        if result.get("status") not in CASE_STATUSES[1:]:
            raise ValueError(f"case status must be one of {CASE_STATUSES[1:]}, got {result.get('status')!r}")
        self._slots.write(i, data, flag="finished")

    def set_status(self, status: str, **extra) -> None:
        import zarr

        g = zarr.open_group(str(self.path), mode="r+")
        g.attrs.update(jsonable(dict(extra, status=status, updated_utc=utc_now())))
        self.attrs = dict(g.attrs)


def open_campaign(path):
    """The campaign store at ``path`` as a lazy xarray dataset (UserError if it is not one)."""
    return CampaignStore.open(path).dataset()

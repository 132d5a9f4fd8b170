"""Export a run store to netCDF (h5netcdf) or to universal file format type 58 (pyuff).

netCDF
    The whole dataset, every variable and coordinate. Complex variables are stored natively
    (HDF5 compound ``{r, i}`` as h5py writes complex numbers) — h5netcdf accepts them with
    ``invalid_netcdf=True``; xarray/h5netcdf/h5py read them back exactly, but strict netCDF-4
    readers (netCDF-C, ncdump) do not know the type. ``split_complex=True`` writes a strictly
    valid netCDF-4 file instead: each complex variable ``x`` becomes ``x_real`` and ``x_imag``
    (float64, attribute ``complex_part``; :func:`open_netcdf` joins them again).
    Attributes that netCDF cannot hold faithfully are encoded: dicts and lists as JSON strings
    (their names listed in each object's attribute ``hbtest_json_attrs``), ``None`` as ``""``, booleans as 0/1.
    The file is written to a temporary name beside the target and renamed into place.

UFF type 58
    One record per FRF (harmonic 1 by default): u/F and θ/F, measured (done and converged
    points) and, for virtual rigs, the exact reference; an up-down sweep gives one record per
    leg so the abscissa (uneven spacing, Hz) stays monotone. Function type 4 (FRF), complex
    double ordinate; response node 1 with direction 3 (+Z, u) or -5 (−RY, θ = du/dx),
    reference node 1 direction 3 (the point force on the interface node); ordinate
    displacement [m] or rotation [rad] per force [N].

    Directions: the beam runs along +X, the transverse displacement ``u`` along +Z
    (:mod:`hbtest.method.sensors`: u up, θ counter-clockwise). A positive slope ``θ = du/dx`` turns
    the beam's axis from +X toward +Z, which is a right-handed rotation about **−Y** (a
    rotation ``ω`` about +Y carries +Z into +X: ``ω ŷ × x̂ = −ω ẑ``). UFF 58 field 7 codes a
    −Y rotation as −5, so θ/F is written with direction −5 and its ordinate as measured. pyuff is an optional dependency:
    ``pip install hbtest[uff]``.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import numpy as np

from ..errors import UserError

__all__ = ["to_netcdf", "open_netcdf", "to_uff", "check_intact"]

def check_intact(store_path) -> None:
    """UserError (one line naming the store and what is wrong) unless ``store_path`` is an
    intact hbtest run store (see :meth:`hbtest.store.RunStore.open`, which checks the layout
    before zarr reads it)."""
    from ..store import RunStore

    RunStore.open(store_path)


def _writable_target(out_path) -> Path:
    out = Path(out_path)
    parent = out.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"{parent}: cannot create the output directory ({e.strerror or e})") from None
    if out.is_dir():
        raise UserError(f"{out}: is a directory, expected a file name")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise UserError(f"{out}: cannot write there (permission denied)")
    return out


def _tmp_beside(out: Path) -> Path:
    return out.with_name(f".{out.name}.{os.getpid()}.tmp")


def _netcdf_attrs(attrs: dict) -> dict:
    out: dict[str, object] = {}
    json_keys: list[str] = []
    for k, v in attrs.items():
        if isinstance(v, dict):
            out[k] = json.dumps(v, sort_keys=True)
            json_keys.append(k)
        elif v is None:
            out[k] = ""
        elif isinstance(v, bool):
            out[k] = int(v)
        elif isinstance(v, (list, tuple)):
            # netCDF turns a one-element list into a scalar and cannot hold an empty one
            out[k] = json.dumps(list(v))
            json_keys.append(k)
        else:
            out[k] = v
    if json_keys:
        out["hbtest_json_attrs"] = json_keys
    return out


def _plain_strings(ds):
    """numpy StringDType (as zarr v3 strings decode) -> object, which h5netcdf writes."""
    for name in list(ds.variables):
        if ds[name].dtype.kind == "T":
            ds[name] = ds[name].astype(object)
    return ds


def to_netcdf(store_path, out_path, *, split_complex: bool = False) -> Path:
    """Write the run store as one netCDF file (see module docstring); returns the path."""
    import xarray as xr

    from ..store import open_run

    ds = open_run(store_path).load()
    out = _writable_target(out_path)
    ds = _plain_strings(ds)
    ds.attrs = _netcdf_attrs(dict(ds.attrs))
    for name in ds.variables:
        ds[name].attrs = _netcdf_attrs(dict(ds[name].attrs))
        ds[name].encoding = {}
    if split_complex:
        parts = {}
        for name in list(ds.data_vars):
            v = ds[name]
            if v.dtype.kind == "c":
                for part, fn in (("real", np.real), ("imag", np.imag)):
                    a = xr.DataArray(fn(v.values), dims=v.dims, attrs={**v.attrs, "complex_part": part, "complex_variable": name})
                    parts[f"{name}_{part}"] = a
                ds = ds.drop_vars(name)
        ds = ds.assign(parts)
        ds.attrs["hbtest_complex"] = "split"
    else:
        ds.attrs["hbtest_complex"] = "native"
    try:
        import h5py  # noqa: F401  (h5netcdf's backend)
    except ImportError:
        raise UserError("netCDF export needs h5py: pip install h5py") from None
    tmp = _tmp_beside(out)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*invalid netcdf features.*")
            ds.to_netcdf(tmp, engine="h5netcdf", invalid_netcdf=not split_complex)
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{out}: cannot write the netCDF file ({e.strerror or e})") from None
    return out


def open_netcdf(path):
    """Read an exported netCDF file back into the store's layout (complex joined, JSON
    attributes decoded)."""
    import xarray as xr

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{p}: netCDF file not found")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*invalid netcdf features.*")
        ds = xr.open_dataset(p, engine="h5netcdf").load()
    ds.close()
    for name in [n for n in ds.data_vars if n.endswith("_real") and ds[n].attrs.get("complex_part") == "real"]:
        base = ds[name].attrs["complex_variable"]
        re, im = ds[name], ds[f"{base}_imag"]
        attrs = {k: v for k, v in re.attrs.items() if k not in ("complex_part", "complex_variable")}
        ds = ds.drop_vars([name, f"{base}_imag"])
        ds[base] = xr.DataArray(re.values + 1j * im.values, dims=re.dims, attrs=attrs)

    def decode(attrs):
        keys = attrs.pop("hbtest_json_attrs", [])
        keys = [keys] if isinstance(keys, str) else list(keys)
        for k in keys:
            attrs[k] = json.loads(attrs[k])
        return attrs

    ds.attrs = decode(dict(ds.attrs))
    for name in ds.variables:
        ds[name].attrs = decode(dict(ds[name].attrs))
    return ds


def _uff58(pyuff, name: str, attrs, store_path, info, f, h) -> dict:
    """One UFF type-58 record: the FRF ``h`` [m/N | rad/N] at frequencies ``f`` [Hz] of one
    interface DOF (``info``: direction, ordinate spec type, length exponent, label)."""
    rdir, spec, lexp, lab = info
    return pyuff.prepare_58(
        binary=0,
        id1=name[:80],
        id2=str(attrs.get("rig_identity") or "")[:80] or "NONE",
        id3=str(attrs.get("created_utc") or "")[:80] or "NONE",
        id4=("sweep sha256 " + str(attrs.get("sweep_sha256") or ""))[:80],
        id5=f"{Path(str(store_path)).name} status {attrs.get('status', '')}"[:80],
        func_type=4,
        rsp_ent_name="interface",
        rsp_node=1,
        rsp_dir=rdir,
        ref_ent_name="interface",
        ref_node=1,
        ref_dir=3,
        abscissa_spacing=0,
        abscissa_spec_data_type=18,
        abscissa_axis_units_lab="Hz",
        ordinate_spec_data_type=spec,
        ordinate_len_unit_exp=lexp,
        ordinate_axis_units_lab=lab,
        orddenom_spec_data_type=13,
        orddenom_force_unit_exp=1,
        orddenom_axis_units_lab="N",
        data=h.astype(complex),
        x=f,
    )


def to_uff(store_path, out_path, *, harmonic: int = 1, include_reference: bool = True) -> Path:
    """Write the FRFs of a run as UFF type-58 records (see module docstring); returns the
    path. UserError if pyuff is missing or no point is finished and converged."""
    try:
        import pyuff
    except ImportError:
        raise UserError("UFF export needs the optional dependency pyuff: pip install hbtest[uff]") from None
    from ..store import open_run
    from .frf import frf

    ds = open_run(store_path)
    out = _writable_target(out_path)
    attrs = ds.attrs
    done = np.asarray(ds["done"].values, dtype=bool)
    conv = np.asarray(ds["converged"].values, dtype=bool) & done
    f = np.asarray(ds["frequency"].values, dtype=float)
    leg = np.asarray(ds["leg"].values) if "leg" in ds.coords else np.zeros(f.size, int)
    sources = [("measured", conv)]
    if include_reference and "reference_interface_displacement" in ds:
        sources.append(("reference", done))
    # UFF 58 direction (3: +Z translation; -5: rotation about -Y, see the module docstring),
    # ordinate spec type, length exponent, label
    dof_info = {"u": (3, 8, 1, "m"), "theta": (-5, 8, 0, "rad")}
    sets = []
    for source, mask in sources:
        H = frf(ds, source, harmonic)
        for lg in np.unique(leg):
            for j, dof in enumerate(str(d) for d in ds["dof"].values):
                h = H.values[:, j]
                sel = np.flatnonzero(mask & (leg == lg) & np.isfinite(h))
                if sel.size == 0:
                    continue
                sel = sel[np.argsort(f[sel], kind="stable")]
                name = f"hbtest {source} {dof}/F k={harmonic}" + (f" leg {lg}" if np.unique(leg).size > 1 else "")
                sets.append(_uff58(pyuff, name, attrs, store_path, dof_info[dof], f[sel], h[sel]))
    if not sets:
        raise UserError(f"{store_path}: no finished, converged point to export")
    tmp = _tmp_beside(out)
    try:
        pyuff.UFF(str(tmp)).write_sets(sets, mode="overwrite")
        os.replace(tmp, out)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"{out}: cannot write the UFF file ({e.strerror or e})") from None
    return out

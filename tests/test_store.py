"""The run store: schema, exact round trips, unwritten vs measured, crash safety, provenance.

Records are built from the exact reference hybrid test (split cantilever, docs/method.md §2): the true
interface response and forces, with seeded small perturbations as the "measurement"."""

from __future__ import annotations

import functools
import hashlib
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from hbtest.config import SweepSpec, load_toml
from hbtest.errors import UserError
from hbtest.store import DOFS, PointRecord, RunStore, open_run, tolerance_from_attrs
from hbtest.method.substructure import split_beam

REF = dict(width=0.0254, thickness=0.001, youngs_modulus=217e9, density=8210.0, zeta_mass=0.9, zeta_stiffness=7e-5)
ACTUATORS = ("vertical", "rotational")
AMPLITUDE = 0.02  # N, fundamental of the point force on the NS interface node
REPO = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def model():
    return split_beam(0.53, 0.17, **REF)


def exact_point(frequency_hz: float, orders):
    """Exact hybrid interface response at one frequency: (U, F_P, F_ext, D_N, D_P, F_cond)
    with U, F_P of shape (2, n_orders), F_ext (n_orders,), D_N, D_P (n_orders, 2, 2) and the
    condensed external force F_cond (n_orders, 2)."""
    ns, ps, _ = model()
    orders = np.asarray(orders)
    s = 2j * np.pi * frequency_hz * orders
    DN, DP = ns.dynamic_stiffness(s), ps.dynamic_stiffness(s)
    unit = np.zeros(ns.structure.n_dof, complex)
    unit[ns.interface_index[0]] = 1.0
    Fext = np.where(orders == 1, AMPLITUDE, 0.0).astype(complex)
    Fc = ns.condensed_force(unit, s) * Fext[:, None]  # (n_orders, 2)
    U = np.linalg.solve(DN + DP, Fc[..., None])[..., 0]
    FP = (DP @ U[..., None])[..., 0]
    return U.T, FP.T, Fext, DN, DP, Fc


def make_record(frequency_hz: float, orders, seed: int, *, noise: float = 2e-3, converged: bool = True, max_iterations: int = 10) -> PointRecord:
    """A realistic point: the exact response perturbed (seeded) as the rig would measure it,
    the NS demand computed from the measured force, a Broyden-like history."""
    rng = np.random.default_rng(seed)
    orders = np.asarray(orders)
    U, FP, Fext, DN, DP, Fc = exact_point(frequency_hz, orders)
    n_o = orders.size
    cn = lambda *shape: rng.standard_normal(shape) + 1j * rng.standard_normal(shape)  # noqa: E731
    scale_u = np.abs(U[:, orders == 1]).max(axis=1, keepdims=True)
    UP = U * (1 + noise * cn(2, n_o)) + 1e-2 * noise * scale_u * cn(2, n_o) * (orders != 1)
    # the PS answers the displacement it actually got; the gauges add their own error
    FPm = (DP @ UP.T[..., None])[..., 0].T * (1 + noise * cn(2, n_o))
    UN = np.linalg.solve(DN, (Fc - FPm.T)[..., None])[..., 0].T
    G = np.array([[2.0e3, 40.0], [15.0, 25.0]]) * (1 + 0.1j)
    V = G @ UP
    n_iter = int(rng.integers(2, max_iterations + 2))
    norms = np.linalg.norm(UP - UN) * 10.0 ** np.linspace(2, 0, n_iter)
    hv = V[None] * (1 - 0.5 ** np.arange(n_iter, 0, -1))[:, None, None] + 0j
    hr = (UP - UN)[None] * 10.0 ** np.linspace(2, 0, n_iter)[:, None, None]
    return PointRecord(
        frequency_hz=float(frequency_hz),
        interface_displacement=UP,
        interface_force=FPm,
        numerical_displacement=UN,
        external_force=Fext,
        voltage=V,
        interface_displacement_variance=(noise * np.abs(U)) ** 2 / 30,
        interface_force_variance=(noise * np.abs(FP)) ** 2 / 30,
        converged=converged,
        iterations=n_iter - 1,
        residual_norm=float(norms[-1]),
        rig_periods=float(30 * n_iter + 12),
        history_voltage=hv,
        history_residual=hr,
        history_residual_norm=norms,
        history_periods=np.full(n_iter, 30.0),
        reference_interface_displacement=U,
        message="converged" if converged else "max iterations reached",
        excluded_energy_fraction=rng.uniform(0, 1e-3, 2),
    )


def source_attrs():
    _, sweep = load_toml(REPO / "sweeps" / "paper-cantilever.toml")
    return {
        "sweep_text": sweep.text,
        "sweep_sha256": sweep.sha256,
        "sweep_path": sweep.path,
        "rig_text": "[rig]\nkind = \"virtual\"\n",
        "rig_sha256": hashlib.sha256(b"[rig]\nkind = \"virtual\"\n").hexdigest(),
        "rig_path": "instruments/virtual-cantilever.toml",
        "rig_identity": "virtual-cantilever",
        "overrides": ["sweep.points=7"],
        "profile": "hbtest",
    }


def new_store(path, frequencies, orders=(1, 3), max_iterations=10, **kw) -> RunStore:
    return RunStore.create(path, frequencies_hz=frequencies, harmonics=orders, actuators=ACTUATORS, max_iterations=max_iterations, attrs=source_attrs(), **kw)


FIELDS = [
    ("interface_displacement", "interface_displacement"),
    ("interface_force", "interface_force"),
    ("numerical_displacement", "numerical_displacement"),
    ("external_force", "external_force"),
    ("voltage", "voltage"),
    ("interface_displacement_variance", "interface_displacement_variance"),
    ("interface_force_variance", "interface_force_variance"),
    ("reference_interface_displacement", "reference_interface_displacement"),
    ("excluded_energy_fraction", "excluded_energy_fraction"),
]


def assert_record_equal(a: PointRecord, b: PointRecord):
    for name, _ in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None), name
        if x is not None:
            assert np.asarray(x).dtype == np.asarray(y).dtype or np.iscomplexobj(x) == np.iscomplexobj(y)
            np.testing.assert_array_equal(x, y, err_msg=name)  # exact, bit for bit
    for name in ("history_voltage", "history_residual", "history_residual_norm", "history_periods"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    for name in ("frequency_hz", "converged", "iterations", "residual_norm", "rig_periods", "message"):
        assert getattr(a, name) == getattr(b, name), name


def chunk_files(path: Path) -> dict[str, str]:
    """Every file of the store (relative path -> sha256 of its bytes)."""
    out = {}
    for p in sorted(Path(path).rglob("*")):
        if p.is_file():
            out[str(p.relative_to(path))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def slot_of(rel: str):
    """Slot index of a chunk file (first chunk index along frequency), None for metadata."""
    m = re.match(r"^[^/]+/c/(\d+)(/|$)", rel)
    return int(m.group(1)) if m else None


UPDOWN = SweepSpec(16.0, 19.0, 4, "up-down", (1, 3)).frequencies_hz  # 16 17 18 19 18 17 16


# ---------------------------------------------------------------------------------------


def test_schema_dims_dtypes_units(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN, max_iterations=6)
    ds = open_run(tmp_path / "r.zarr")
    assert dict(ds.sizes) == {"frequency": 7, "dof": 2, "harmonic": 2, "actuator": 2, "iteration": 7}
    np.testing.assert_array_equal(ds["frequency"].values, UPDOWN)
    assert [str(d) for d in ds["dof"].values] == list(DOFS)
    assert [str(a) for a in ds["actuator"].values] == list(ACTUATORS)
    assert ds["harmonic"].values.tolist() == [1, 3]
    # repeated frequencies: position index `point` and sweep `leg`
    assert ds["point"].values.tolist() == list(range(7))
    assert ds["leg"].values.tolist() == [0, 0, 0, 0, 1, 1, 1]
    assert ds.sel(frequency=17.0).sizes["frequency"] == 2
    for name in ("interface_displacement", "interface_force", "numerical_displacement", "reference_interface_displacement"):
        assert ds[name].dims == ("frequency", "dof", "harmonic") and ds[name].dtype == np.complex128
    assert ds["external_force"].dims == ("frequency", "harmonic")
    assert ds["voltage"].dims == ("frequency", "actuator", "harmonic")
    assert ds["history_voltage"].dims == ("frequency", "iteration", "actuator", "harmonic")
    assert ds["history_residual"].dims == ("frequency", "iteration", "dof", "harmonic")
    assert ds["converged"].dtype == bool and ds["done"].dtype == bool
    assert ds["iterations"].dtype == np.int32
    for name, v in ds.data_vars.items():
        assert "units" in v.attrs and "long_name" in v.attrs, name
    assert ds["interface_force"].attrs["dof_units"] == ["N", "N m"]
    assert ds["frequency"].attrs["units"] == "Hz"
    assert s.n_points == 7 and s.harmonics == (1, 3) and s.actuators == ACTUATORS and s.max_iterations == 6


def test_every_store_variable_is_declared_once_in_the_table(tmp_path):
    """The schema table (hbtest.store.variables.VARIABLES) is the one declaration of a store
    variable: the point record's fields are its record variables under the store's names, a
    store created with every option holds exactly its variables, each option allocates the
    variables declaring it, and a write produces exactly the table's per-point variables."""
    from dataclasses import fields

    from hbtest.store.variables import CREATE_OPTIONS, RECORD_EXTRAS, RECORD_VARIABLES, SCHEMA, VARIABLES

    assert {f.name for f in fields(PointRecord)} == set(RECORD_VARIABLES) | set(RECORD_EXTRAS)
    assert not set(RECORD_EXTRAS) & set(SCHEMA)
    coords = {"frequency", "point", "leg", "dof", "harmonic", "actuator", "iteration", "channel", "variable"}
    every = dict(reference=True, raw_records=(("l1", "g1"), 64), sync=True, harmonic_active=True, channels=("l1", "g1"),
                 design=True)
    assert set(every) == set(CREATE_OPTIONS)
    s = new_store(tmp_path / "all.zarr", [17.0, 18.0], **every)
    assert s.variables - coords == set(SCHEMA)
    for option in CREATE_OPTIONS:
        only = dict(every, reference=False, raw_records=None, sync=False, harmonic_active=False, channels=None,
                    design=False)
        only[option] = every[option]
        one = new_store(tmp_path / f"{option}.zarr", [17.0], **only)
        assert one.variables - coords == {v.name for v in VARIABLES if v.when in (None, option)}, option
    values = s.point_values(make_record(17.0, (1, 3), seed=1))
    assert set(values) == {v.name for v in VARIABLES if v.source in ("record", "raw", "store")} - {"done"}
    for name, value in values.items():  # in the table's dtype and the store's shape
        var = SCHEMA[name]
        assert np.asarray(value).dtype == np.dtype(var.dtype), name
        assert np.asarray(value).shape == tuple(s.sizes[d] for d in var.dims), name


def test_write_out_of_order_reads_back_exactly(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN)
    recs = {i: make_record(UPDOWN[i], (1, 3), seed=i, converged=(i != 3)) for i in (5, 0, 3)}
    for i, r in recs.items():
        s.write_point(i, r)
    done = s.done()
    assert done.tolist() == [i in recs for i in range(7)]
    for i, r in recs.items():
        assert_record_equal(s.read_point(i), r)
    ds = s.dataset().load()
    for i, r in recs.items():
        np.testing.assert_array_equal(ds["interface_displacement"].values[i], r.interface_displacement)
        np.testing.assert_array_equal(ds["history_residual_norm"].values[i, : r.history_residual_norm.size], r.history_residual_norm)
        assert np.all(np.isnan(ds["history_residual_norm"].values[i, r.history_residual_norm.size :]))
        assert int(ds["history_length"].values[i]) == r.history_residual_norm.size
    # unwritten slots: NaN data, done False, integer sentinel
    for i in set(range(7)) - set(recs):
        assert not ds["done"].values[i]
        for name in ("interface_displacement", "interface_force", "voltage", "history_voltage", "residual_norm", "rig_periods"):
            assert np.all(np.isnan(ds[name].values[i])), name
        assert ds["iterations"].values[i] == -1 and not ds["converged"].values[i]
    with pytest.raises(ValueError, match="no finished point"):
        s.read_point(1)


def test_measured_zero_is_not_unwritten(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN)
    r = make_record(UPDOWN[2], (1, 3), seed=2)
    r.interface_force = np.zeros((2, 2), complex)
    r.interface_displacement[:, 1] = 0.0  # no third harmonic at all
    s.write_point(2, r)
    ds = s.dataset()
    assert np.all(ds["interface_force"].values[2] == 0)
    assert not np.any(np.isnan(ds["interface_force"].values[2]))
    assert np.all(ds["interface_displacement"].values[2, :, 1] == 0)
    assert np.all(np.isnan(ds["interface_force"].values[1]))


def test_region_writes_touch_only_their_slot(tmp_path):
    path = tmp_path / "r.zarr"
    s = new_store(path, UPDOWN)
    s.write_point(1, make_record(UPDOWN[1], (1, 3), seed=1))
    before = chunk_files(path)
    s.write_point(4, make_record(UPDOWN[4], (1, 3), seed=4))
    after = chunk_files(path)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed, "nothing written"
    assert {slot_of(k) for k in changed} == {4}  # no metadata file, no other slot
    assert not any(k.endswith("zarr.json") for k in changed)


def test_rewriting_a_half_written_point(tmp_path):
    """A kill between a point's data and its done flag leaves done=False: the resumed run
    rewrites the slot; finished points stay bit-identical."""
    import xarray as xr

    path = tmp_path / "r.zarr"
    s = new_store(path, UPDOWN)
    for i in (0, 1):
        s.write_point(i, make_record(UPDOWN[i], (1, 3), seed=i))
    half = make_record(UPDOWN[2], (1, 3), seed=100, converged=False)
    s.write_point(2, half)
    # simulate the kill: the done flag never made it
    xr.Dataset({"done": (("frequency",), [False])}).to_zarr(path, mode="r+", region={"frequency": slice(2, 3)}, consolidated=False)
    finished = {k: v for k, v in chunk_files(path).items() if slot_of(k) in (0, 1)}
    s2 = RunStore.open(path)
    todo = np.flatnonzero(~s2.done())
    assert todo.tolist() == [2, 3, 4, 5, 6]
    good = make_record(UPDOWN[2], (1, 3), seed=2, max_iterations=3)  # shorter history than before
    s2.write_point(2, good)
    assert_record_equal(s2.read_point(2), good)
    ds = s2.dataset()
    assert np.all(np.isnan(ds["history_residual_norm"].values[2, good.history_residual_norm.size :]))  # old rows gone
    assert {k: v for k, v in chunk_files(path).items() if slot_of(k) in (0, 1)} == finished
    # rewriting a *done* point clears done first and ends done again
    s2.write_point(0, make_record(UPDOWN[0], (1, 3), seed=7))
    assert s2.done()[0]


_CHILD = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {tests!r})
    import numpy as np
    from hbtest.store import RunStore
    from test_store import make_record, UPDOWN
    s = RunStore.open({path!r})
    f = s.frequencies_hz
    print("ready", flush=True)
    for i in np.flatnonzero(~s.done()):
        s.write_point(int(i), make_record(f[i], (1, 3), seed=int(i)))
        print("wrote", i, flush=True)
    """
)


def test_sigkill_at_any_moment_then_resume(tmp_path):
    path = tmp_path / "r.zarr"
    f = np.linspace(16, 19, 12)  # two kills after 3 writes each, then the rest
    new_store(path, f)
    code = _CHILD.format(tests=str(Path(__file__).parent), path=str(path))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    rng = np.random.default_rng(3)
    finished: dict[str, str] = {}
    for attempt in range(3):
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, env=env)
        assert child.stdout.readline().strip() == b"ready"
        if attempt < 2:
            # let a few points finish, then kill at a random moment inside a later write
            for _ in range(3):
                assert child.stdout.readline().startswith(b"wrote")
            time.sleep(rng.uniform(0.0, 0.06))
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=120)
        child.stdout.close()
        s = RunStore.open(path)
        done = s.done()
        files = chunk_files(path)
        # points finished before this attempt are bit-identical
        assert {k: files.get(k) for k in finished} == finished
        finished = {k: v for k, v in files.items() if slot_of(k) is not None and done[slot_of(k)]}
    assert s.done().all()
    for i in range(f.size):
        assert_record_equal(s.read_point(i), make_record(f[i], (1, 3), seed=i))


def test_attrs_round_trip_and_status(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN)
    a = s.attrs
    for k, v in source_attrs().items():
        assert a[k] == v, k
    assert a["status"] == "running" and a["hbtest_store"] == "run"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d+Z", a["created_utc"])
    assert a["git_commit"] is None or re.fullmatch(r"[0-9a-f]{40}", a["git_commit"])
    assert {"python", "numpy", "xarray", "zarr", "hbtest"} <= set(a["versions"])
    assert open_run(tmp_path / "r.zarr").attrs["sweep_text"] == source_attrs()["sweep_text"]
    s.set_status("interrupted", message="Ctrl+C at point 3", points_done=3)
    a = RunStore.open(tmp_path / "r.zarr").attrs
    assert a["status"] == "interrupted" and a["message"] == "Ctrl+C at point 3" and a["points_done"] == 3
    assert a["finished_utc"] >= a["created_utc"] and a["sweep_sha256"] == source_attrs()["sweep_sha256"]
    with pytest.raises(ValueError, match="status"):
        s.set_status("paused")
    # tolerance for plots: sweep text + overrides
    assert tolerance_from_attrs(a) == (pytest.approx(0.02e-3), "displacement")
    assert tolerance_from_attrs({**a, "overrides": ["test.tolerance_mm=0.05"]})[0] == pytest.approx(0.05e-3)
    assert tolerance_from_attrs({**a, "tolerance_m": 1e-5})[0] == 1e-5  # stored by the sweep


def test_store_without_reference(tmp_path):
    s = new_store(tmp_path / "r.zarr", [17.0, 18.0], reference=False)
    r = make_record(17.0, (1, 3), seed=0)
    with pytest.raises(ValueError, match="without reference"):
        s.write_point(0, r)
    r.reference_interface_displacement = None
    s.write_point(0, r)
    assert "reference_interface_displacement" not in s.dataset()
    assert s.read_point(0).reference_interface_displacement is None


def test_write_point_validates(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN, max_iterations=3)
    r = make_record(UPDOWN[0], (1, 3), seed=0, max_iterations=3)
    with pytest.raises(ValueError, match="slot 1"):
        s.write_point(1, r)  # 16 Hz record into the 17 Hz slot
    with pytest.raises(IndexError):
        s.write_point(7, r)
    bad = make_record(UPDOWN[0], (1, 3), seed=0, max_iterations=3)
    bad.voltage = bad.voltage[:, :1]
    with pytest.raises(ValueError, match="voltage"):
        s.write_point(0, bad)
    long = make_record(UPDOWN[0], (1, 3), seed=0, max_iterations=30)
    long.history_voltage = np.zeros((5, 2, 2), complex)
    long.history_residual = np.zeros((5, 2, 2), complex)
    long.history_residual_norm = np.ones(5)
    long.history_periods = np.ones(5)
    with pytest.raises(ValueError, match="max_iterations"):
        s.write_point(0, long)
    assert not s.done().any()


def test_user_errors_name_the_path(tmp_path):
    missing = tmp_path / "nope.zarr"
    with pytest.raises(UserError, match="nope.zarr.*not found"):
        RunStore.open(missing)
    with pytest.raises(UserError, match="not found"):
        open_run(missing)
    other = tmp_path / "other"
    other.mkdir()
    (other / "data.txt").write_text("keep me")
    with pytest.raises(UserError, match="other.*not an hbtest run store"):
        RunStore.open(other)
    with pytest.raises(UserError, match="already exists"):
        new_store(other, [17.0])
    with pytest.raises(UserError, match="refusing to overwrite"):
        new_store(other, [17.0], overwrite=True)
    assert (other / "data.txt").read_text() == "keep me"
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(UserError, match="file"):
        new_store(blocker / "r.zarr", [17.0])
    # overwriting an hbtest store is allowed when asked
    s = new_store(tmp_path / "r.zarr", [17.0])
    s.write_point(0, make_record(17.0, (1, 3), seed=0))
    s = new_store(tmp_path / "r.zarr", [17.0, 18.0], overwrite=True)
    assert s.n_points == 2 and not s.done().any()


def test_check_compatible_before_resume(tmp_path):
    s = new_store(tmp_path / "r.zarr", UPDOWN, max_iterations=10)
    s.check_compatible(frequencies_hz=UPDOWN, harmonics=(1, 3), actuators=ACTUATORS, max_iterations=10)
    s.check_compatible(max_iterations=5)
    with pytest.raises(UserError, match=r"r\.zarr.*frequencies differ"):
        s.check_compatible(frequencies_hz=UPDOWN[:-1])
    with pytest.raises(UserError, match="harmonics differ"):
        s.check_compatible(harmonics=(1,))
    with pytest.raises(UserError, match="max_iterations"):
        s.check_compatible(max_iterations=11)


def test_a_finished_store_opens_as_a_user_types_it_and_stays_consolidated_on_resume(tmp_path):
    """``xr.open_zarr(path)`` without arguments: no warning (consolidated metadata present), the
    same variables and attributes as the arrays' own metadata; after a later status change (a
    resume's running then completed) still so; a store written before consolidation (its root
    entry removed) gets it when its status is next made final."""
    import json
    import warnings

    import xarray as xr

    from hbtest.config import load_sweep
    from hbtest.store import RunStore
    from hbtest.sweep.runner import run

    root = Path(__file__).resolve().parents[1]
    over = ["sweep.start_hz=18.2", "sweep.stop_hz=18.3", "sweep.points=2"]
    path = tmp_path / "s.zarr"
    run(load_sweep(root / "sweeps" / "paper-cantilever.toml", over), path, plot=False, overrides=over)

    def opened_as_typed():
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            return xr.open_zarr(path).load()

    plain = xr.open_zarr(path, consolidated=False).load()
    ds = opened_as_typed()
    assert ds.attrs == plain.attrs and set(ds.variables) == set(plain.variables)
    assert bool(ds.done.all()) and ds.attrs["status"] == "completed"
    store = RunStore.open(path)
    store.set_status("running")
    store.set_status("completed", message="resumed")
    assert opened_as_typed().attrs["message"] == "resumed"
    meta = json.loads((path / "zarr.json").read_text())
    meta.pop("consolidated_metadata")
    (path / "zarr.json").write_text(json.dumps(meta))
    with pytest.warns(Warning):
        xr.open_zarr(path)
    RunStore.open(path).set_status("completed")
    assert set(opened_as_typed().variables) == set(plain.variables)

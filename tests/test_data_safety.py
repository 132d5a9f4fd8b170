"""Data safety and bad input, through the command line as a user calls it.

Every case asserts the exit code, that stderr is one line naming the store / file / flag /
field, and that data already on disk is byte-identical afterwards (every file under a store
hashed before and after). Concurrency and signals run ``python -m hbtest.cli`` in a child
process (always with timeouts); everything else calls :func:`hbtest.cli.main` in-process.
Sweeps are kept short: the paper cantilever on 3 points of 16.0-16.4 Hz at a 1 % accuracy target
takes a few seconds.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import hbtest
from hbtest.cli import main
from hbtest.store import RunStore, StoreLock, lock_path

ROOT = Path(__file__).resolve().parents[1]
SWEEP = str(ROOT / "sweeps" / "paper-cantilever.toml")
CHAIN = str(ROOT / "sweeps" / "three-mass-chain.toml")
RIG_SEED = 20240611  # [virtual] seed of instruments/virtual-cantilever.toml


def band(points=3, stop=16.4):
    # test.accuracy 1 % (the file's 0.3 %): these cases are about files, locks and signals, not
    # accuracy; on the lab-calibrated twin the 0.3 % target averages ~3x longer per point.
    return ["--set", "sweep.start_hz=16.0", "--set", f"sweep.stop_hz={stop}", "--set", f"sweep.points={points}",
            "--set", "test.accuracy=0.01", "--no-plot"]


SHORT = band()
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg", "PYTHONUNBUFFERED": "1"}


# -- helpers ----------------------------------------------------------------------------------


def cli(capsys, *args):
    """(exit code, stdout, stderr) of ``hbtest ARGS`` run in-process."""
    capsys.readouterr()
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}:\n{err}"
    assert "Traceback" not in err
    return lines[0]


def tree_hash(path) -> dict:
    """relative path -> SHA-256 of every file under ``path`` (a file: itself)."""
    p = Path(path)
    if p.is_file():
        return {".": hashlib.sha256(p.read_bytes()).hexdigest()}
    return {str(f.relative_to(p)): hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(p.rglob("*")) if f.is_file()}


def slot_hash(store, slots) -> dict:
    """Hashes of the chunk files of the given slots (``<var>/c/<slot>[/...]``)."""
    h = tree_hash(store)
    keep = {str(s) for s in slots}
    return {k: v for k, v in h.items() if len(Path(k).parts) >= 3 and Path(k).parts[1] == "c" and Path(k).parts[2] in keep}


def edit_attrs(store, **changes):
    meta = Path(store) / "zarr.json"
    doc = json.loads(meta.read_text())
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(doc["attributes"].get(k), dict):
            doc["attributes"][k].update(v)
        else:
            doc["attributes"][k] = v
    meta.write_text(json.dumps(doc))


def attrs(store) -> dict:
    return RunStore.open(store).attrs


def spawn(args, cwd, name="run"):
    """A child ``python -m hbtest.cli ARGS`` with stdout/stderr in files (poll them)."""
    out, err = Path(cwd) / f"{name}.out", Path(cwd) / f"{name}.err"
    p = subprocess.Popen([sys.executable, "-m", "hbtest.cli", *map(str, args)], cwd=cwd, env=ENV,
                         stdout=out.open("w"), stderr=err.open("w"))
    p.out, p.err = out, err
    return p


def wait_for(cond, timeout, what, proc=None):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"child ended (rc {proc.returncode}) before {what}:\n{proc.out.read_text()}\n{proc.err.read_text()}")
        time.sleep(0.02)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def completed(tmp_path_factory):
    """A completed 3-point store (copy it before changing anything)."""
    d = tmp_path_factory.mktemp("completed")
    store = d / "done.zarr"
    assert main(["sweep", SWEEP, "--store", str(store), *SHORT, "--quiet"]) == 0
    return store


def copy_of(store, dest: Path) -> Path:
    shutil.copytree(store, dest)
    return dest


# -- 1. one writer ------------------------------------------------------------------------------


def test_second_writer_refused_while_a_sweep_runs(tmp_path, capsys):
    store = tmp_path / "busy.zarr"
    first = spawn(["sweep", SWEEP, "--store", store, *band(points=12, stop=17.0)], tmp_path)
    try:
        wait_for(lambda: StoreLock.holder(store) is not None and " 1/12" in first.out.read_text(), 90, "the first point", first)
        holder = StoreLock.holder(store)
        assert holder["pid"] == first.pid
        for args in (["sweep", SWEEP, "--store", store, "--overwrite", *SHORT], ["resume", store, "--no-plot"]):
            rc, _, err = cli(capsys, *args)
            line = one_line(err)
            assert rc == 2, line
            assert str(store) in line and f"pid {first.pid}" in line, line
        assert first.poll() is None, "the first run ended before the second writers were tried"
        assert first.wait(timeout=120) == 0, first.err.read_text()
    finally:
        stop(first)
    a = attrs(store)
    assert a["status"] == "completed"
    assert RunStore.open(store).done().all()
    assert "completed: 12/12 points converged" in first.out.read_text()
    assert StoreLock.holder(store) is None and not lock_path(store).exists()


# -- 2. stale lock --------------------------------------------------------------------------------


def test_stale_lock_of_a_dead_process_is_taken_over_and_reported(tmp_path, capsys):
    store = tmp_path / "stale.zarr"
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    lock_path(store).write_text(json.dumps({"pid": dead.pid, "host": "benchhost", "since": "2024-06-11T09:00:00Z", "command": "hbtest sweep x"}))
    assert StoreLock.holder(store) is None  # nobody holds the flock
    rc, out, err = cli(capsys, "sweep", SWEEP, "--store", store, *SHORT)
    assert rc == 0, err
    line = one_line(err)
    assert f"pid {dead.pid}" in line and "benchhost" in line and str(store) in line, line
    assert attrs(store)["status"] == "completed"
    assert not lock_path(store).exists()


# -- 3. overwrite is atomic -------------------------------------------------------------------------


def test_failed_overwrite_leaves_the_old_store_byte_identical(tmp_path, capsys, completed):
    store = copy_of(completed, tmp_path / "keep.zarr")
    before = tree_hash(store)
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", store, "--overwrite", *SHORT, "--set", "rig_set=['rig.sample_rate_hz=-1']")
    line = one_line(err)
    assert rc == 2, line
    assert "sample_rate_hz" in line, line
    assert tree_hash(store) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.zarr"]


def test_sigkill_during_overwrite_leaves_the_old_store_or_the_new_one(tmp_path, completed):
    """SIGKILL a ``sweep --overwrite`` at seeded random moments, from the start of the process
    to mid-run, and just as the new store appears beside the old: the path then always holds a
    store that opens, either the old one byte-identical or the new one (never completed)."""
    rng = np.random.default_rng(11)
    old_created = attrs(completed)["created_utc"]
    # (moment kind, seconds): after process start, or after the `.NAME.new-*` sibling appears
    plan = [("start", t) for t in np.sort(rng.uniform(0.05, 4.0, 3))] + [("new", t) for t in rng.uniform(0.0, 0.15, 3)]
    outcomes = []
    for k, (kind, delay) in enumerate(plan):
        work = tmp_path / f"try{k}"
        work.mkdir()
        store = copy_of(completed, work / "s.zarr")
        before = tree_hash(store)
        child = spawn(["sweep", SWEEP, "--store", store, "--overwrite", *band(points=10, stop=17.0)], work)
        try:
            if kind == "new":
                wait_for(lambda: any(p.name.startswith(".s.zarr.new-") for p in work.iterdir()), 60, "the new store beside the old", child)
            time.sleep(delay)
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
        finally:
            stop(child)
        s = RunStore.open(store)  # a complete hbtest store is there, whichever it is
        if tree_hash(store) == before:
            outcomes.append("old")
        else:
            a = s.attrs
            assert a["created_utc"] != old_created, f"attempt {k}: the old store was changed in place"
            assert a["status"] == "running", f"attempt {k}: killed run says {a['status']}"
            assert s.n_points == 10 and s.done().sum() < 10
            outcomes.append("new")
        assert StoreLock.holder(store) is None  # the kernel released the dead child's lock
    # (the seeded plan gave old, new, new, old, old, new on the development machine)
    assert len(outcomes) == len(plan)


def test_successful_overwrite_leaves_no_siblings(tmp_path, capsys, completed):
    store = copy_of(completed, tmp_path / "s.zarr")
    old_created = attrs(store)["created_utc"]
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", store, "--overwrite", *band(points=2))
    assert rc == 0, err
    a = attrs(store)
    assert a["status"] == "completed" and a["created_utc"] != old_created
    assert RunStore.open(store).n_points == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.zarr"]


# -- 4. SIGTERM ------------------------------------------------------------------------------------


def test_sigterm_marks_interrupted_and_resume_finishes(tmp_path, capsys):
    store = tmp_path / "term.zarr"
    child = spawn(["sweep", SWEEP, "--store", store, *band(points=6, stop=17.0)], tmp_path)
    try:
        wait_for(lambda: " 1/6" in child.out.read_text(), 90, "the first point", child)
        child.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        rc = child.wait(timeout=20)
        took = time.monotonic() - t0
    finally:
        stop(child)
    assert rc == 143, child.err.read_text()
    # a hang guard: 0.7-3.9 s measured with two suites loading the 2 cores (the threshold audit)
    assert took < 10.0, f"SIGTERM took {took:.1f} s"
    assert "terminated" in child.err.read_text().lower()
    a = attrs(store)
    assert a["status"] == "interrupted" and a["stop_cause"] == "signal", a
    done = RunStore.open(store).done()
    assert 1 <= done.sum() < 6
    kept = slot_hash(store, np.flatnonzero(done))
    assert kept
    rc, out, err = cli(capsys, "resume", store, "--no-plot")
    assert rc == 0, err
    assert RunStore.open(store).done().all() and attrs(store)["status"] == "completed"
    assert slot_hash(store, np.flatnonzero(done)) == kept


# -- 5. write failure ---------------------------------------------------------------------------------


def test_disk_full_mid_run_exits_4_and_resume_finishes(tmp_path, capsys, monkeypatch):
    store = tmp_path / "full.zarr"
    original = RunStore.write_point
    calls = []

    def full_disk(self, index, rec):
        calls.append(index)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(self, index, rec)

    monkeypatch.setattr(RunStore, "write_point", full_disk)
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", store, *SHORT)
    monkeypatch.undo()
    line = one_line(err)
    assert rc == 4, line
    assert str(store) in line and "No space left on device" in line, line
    a = attrs(store)
    assert a["status"] == "interrupted" and a["stop_cause"] == "store", a
    assert "No space left on device" in a["stop_message"]
    assert RunStore.open(store).done().tolist() == [True, False, False]
    rc, _, err = cli(capsys, "resume", store, "--no-plot")
    assert rc == 0, err
    assert attrs(store)["status"] == "completed" and RunStore.open(store).done().all()


@pytest.mark.parametrize("failing", [1, 2])
def test_disk_full_on_the_writer_thread_names_its_point(tmp_path, capsys, monkeypatch, failing):
    """A sweep's points are written on the store's writer thread (RunStore.writing_behind):
    a write failing there (slot 1: seen when point 2 is handed over; slot 2, the last: seen on
    leaving) gives the same one line, exit 4, the store interrupted with the stop message
    naming that point and its frequency, the points before it done and none after, and resume
    finishes it."""
    from hbtest.store import slots

    store = tmp_path / "full.zarr"
    original = slots.SlotWriter._write

    async def full_disk(self, index, values, flag):
        if index == failing and flag == "done":
            raise OSError(errno.ENOSPC, "No space left on device")
        return await original(self, index, values, flag)

    monkeypatch.setattr(slots.SlotWriter, "_write", full_disk)
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", store, *SHORT)
    monkeypatch.undo()
    line = one_line(err)
    f = RunStore.open(store).frequencies_hz[failing]
    assert rc == 4, line
    assert str(store) in line and "No space left on device" in line, line
    a = attrs(store)
    assert a["status"] == "interrupted" and a["stop_cause"] == "store", a
    assert f"cannot write point {failing} ({f:g} Hz)" in a["stop_message"], a["stop_message"]
    assert RunStore.open(store).done().tolist() == [i < failing for i in range(3)]
    rc, _, err = cli(capsys, "resume", store, "--no-plot")
    assert rc == 0, err
    assert attrs(store)["status"] == "completed" and RunStore.open(store).done().all()


# -- 6. exit status tells the truth -----------------------------------------------------------------


def test_no_point_converged_exits_1_with_the_reason(tmp_path, capsys):
    store = tmp_path / "limit.zarr"
    rc, out, err = cli(capsys, "sweep", SWEEP, "--store", store, *SHORT, "--set", "test.max_iterations=1")
    assert rc == 1, err
    summary = [ln for ln in out.splitlines() if ln.startswith("hbtest: completed")]
    assert len(summary) == 1 and "0/3 points converged" in summary[0] and "3 NOT converged (iteration_limit 3)" in summary[0], out
    ds = RunStore.open(store).dataset()
    assert ds["stop_reason"].values.tolist() == ["iteration_limit"] * 3
    assert not ds["converged"].values.any()


def test_voltage_limit_is_recorded_per_point(tmp_path, capsys):
    store = tmp_path / "volts.zarr"
    rc, out, err = cli(capsys, "sweep", SWEEP, "--store", store, *band(points=2), "--set", "test.max_iterations=5",
                       "--set", "rig_set=['rig.voltage_limit_v=0.05']")
    assert rc == 1, err
    assert "voltage_limit 2" in out
    assert RunStore.open(store).dataset()["stop_reason"].values.tolist() == ["voltage_limit"] * 2


# -- 7. provenance ----------------------------------------------------------------------------------


def test_seed_is_recorded_and_reproduces_the_run(tmp_path, capsys, completed):
    stores = {}
    for name, extra in (("a", ["--seed", "7"]), ("b", ["--seed", "7"])):
        stores[name] = tmp_path / f"{name}.zarr"
        rc, _, err = cli(capsys, "sweep", SWEEP, "--store", stores[name], *SHORT, *extra)
        assert rc == 0, err
    assert attrs(stores["a"])["seed"] == 7 and attrs(stores["b"])["seed"] == 7
    assert attrs(completed)["seed"] == RIG_SEED  # no --seed: the rig file's
    x = [RunStore.open(s).dataset()["interface_displacement"].values for s in (stores["a"], stores["b"], completed)]
    assert np.array_equal(x[0], x[1])
    assert not np.array_equal(x[0], x[2])  # the seed matters: noise differs


def _next_minor(v: str) -> str:
    major, minor = v.split(".")[:2]
    return f"{major}.{int(minor) + 1}.0"


@pytest.mark.parametrize(
    "change, words",
    [
        ({"schema_version": 1}, "written by an older hbtest"),
        ({"versions": {"hbtest": _next_minor(hbtest.__version__)}}, f"written by hbtest {_next_minor(hbtest.__version__)}"),
        ({"rig_reported_identity": "another rig (serial 0000)"}, "another rig (serial 0000)"),
    ],
    ids=["schema-1", "other-release", "other-rig"],
)
def test_resume_refuses_an_incompatible_store(tmp_path, capsys, completed, change, words):
    store = copy_of(completed, tmp_path / "s.zarr")
    edit_attrs(store, status="interrupted", **change)
    before = tree_hash(store)
    rc, _, err = cli(capsys, "resume", store, "--no-plot")
    line = one_line(err)
    assert rc == 2, line
    assert str(store) in line and words in line, line
    assert tree_hash(store) == before
    assert not lock_path(store).exists()


# -- 8. bad input -----------------------------------------------------------------------------------


def _binary(path: Path, seed: int = 8) -> Path:
    path.write_bytes(np.random.default_rng(seed).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    return path


BAD_SETS = {
    "stop-at-nyquist": (["--set", "sweep.stop_hz=3000"], "sweep.stop_hz"),
    "harmonic-2-at-nyquist": (["--set", "sweep.harmonics=[1,2]", "--set", "sweep.stop_hz=1000"], "sweep.stop_hz"),
    "start-too-low": (["--set", "sweep.start_hz=1e-6"], "sweep.start_hz"),
    "points-50000": (["--set", "sweep.points=50000"], "sweep.points"),
    "points-500000": (["--set", "sweep.points=500000"], "sweep.points"),
}


@pytest.mark.parametrize("name", sorted(BAD_SETS))
def test_sweep_refuses_what_the_rig_or_the_store_cannot_do(tmp_path, capsys, name):
    sets, key = BAD_SETS[name]
    store = tmp_path / "never.zarr"
    t0 = time.monotonic()
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", store, *sets, "--no-plot")
    assert time.monotonic() - t0 < 10
    line = one_line(err)
    assert rc == 2, line
    assert "paper-cantilever.toml" in line and key in line, line
    assert not store.exists() and not lock_path(store).exists()


def test_design_refuses_a_target_mode_the_structure_does_not_have(capsys):
    for mode, words in ((60, "modes below it"), (1000, "model has 140 modes")):
        t0 = time.monotonic()
        rc, _, err = cli(capsys, "design", SWEEP, "--set", f"test.target_mode={mode}")
        assert time.monotonic() - t0 < 10
        line = one_line(err)
        if mode == 1000 and "must be <=" in line:  # the config layer bounds it first
            assert rc == 2 and "test.target_mode" in line
            continue
        assert rc == 2, line
        assert "test.target_mode" in line and words in line, line


def test_design_reports_a_target_mode_beyond_the_default_six(capsys):
    rc, out, err = cli(capsys, "design", SWEEP, "--set", "test.target_mode=8", "--json")
    assert rc == 0, err
    rep = json.loads(out)
    assert len(rep["hybrid_modes_hz"]) == 8 and rep["target_mode_hz"] == rep["hybrid_modes_hz"][7]


@pytest.mark.parametrize("kind", ["proc", "empty", "file"])
def test_store_path_that_cannot_be_created(tmp_path, capsys, kind):
    existing = tmp_path / "notes.txt"
    existing.write_text("lab notes\n")
    before = tree_hash(existing)
    path, words = {"proc": ("/proc/hbtest/x.zarr", "/proc/hbtest"), "empty": ("", "--store"), "file": (str(existing), str(existing))}[kind]
    rc, _, err = cli(capsys, "sweep", SWEEP, "--store", path, *SHORT)
    line = one_line(err)
    assert rc == 2, line
    assert words in line, line
    assert tree_hash(existing) == before


def test_directory_given_as_the_sweep_file(tmp_path, capsys):
    rc, _, err = cli(capsys, "sweep", tmp_path, *SHORT)
    line = one_line(err)
    assert rc == 2 and str(tmp_path) in line and "directory" in line, line


@pytest.mark.parametrize("command", [["sweep"], ["design"], ["stability", "chain"], ["classical", "chain", "--delay", "1e-3"]],
                         ids=["sweep", "design", "stability-chain", "classical-chain"])
def test_binary_file_given_as_a_definition(tmp_path, capsys, command):
    f = _binary(tmp_path / "garbage.toml")
    before = tree_hash(f)
    rc, _, err = cli(capsys, *command, f)
    line = one_line(err)
    assert rc == 2 and str(f) in line, line
    assert tree_hash(f) == before


def _damage(store: Path, how: str) -> None:
    if how == "no-done-meta":
        (store / "done" / "zarr.json").unlink()
    elif how == "garbage-group-meta":
        (store / "zarr.json").write_bytes(b"\x00garbage{{")
    elif how == "garbage-array-meta":
        (store / "converged" / "zarr.json").write_text("{not json")


DAMAGE = ["no-done-meta", "garbage-group-meta", "garbage-array-meta"]


@pytest.mark.parametrize("how", DAMAGE)
@pytest.mark.parametrize("command", ["plot", "export"])
def test_damaged_store_given_to_plot_or_export(tmp_path, capsys, completed, how, command):
    store = copy_of(completed, tmp_path / "d.zarr")
    _damage(store, how)
    before = tree_hash(store)
    args = ["plot", store, "--out", tmp_path / "png"] if command == "plot" else ["export", store, "--netcdf", tmp_path / "x.nc"]
    rc, _, err = cli(capsys, *args)
    line = one_line(err)
    assert rc == 2 and str(store) in line, line
    assert tree_hash(store) == before
    assert not (tmp_path / "x.nc").exists() and not (tmp_path / "png").exists()


@pytest.mark.parametrize("how", [
    "no-done-meta",
    "garbage-group-meta",
    "garbage-array-meta",
])
def test_damaged_store_given_to_resume(tmp_path, capsys, completed, how):
    store = copy_of(completed, tmp_path / "d.zarr")
    edit_attrs(store, status="interrupted")
    _damage(store, how)
    before = tree_hash(store)
    try:
        rc, _, err = cli(capsys, "resume", store, "--no-plot")
    except Exception as e:  # a traceback in a terminal
        pytest.fail(f"resume raised {type(e).__name__}: {e}")
    line = one_line(err)
    assert rc == 2 and str(store) in line, line
    assert tree_hash(store) == before


def _as_unprivileged():
    """Command prefix that runs a child without root's power over permission bits: as root, a
    new user namespace without mappings (``unshare --user``: files stay owned by the same
    user, but CAP_DAC_OVERRIDE no longer applies to them); otherwise nothing."""
    if os.geteuid() != 0:
        return []
    try:
        ok = shutil.which("unshare") and subprocess.run(["unshare", "--user", "true"], timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    if not ok:
        pytest.skip("running as root and cannot drop the power to write read-only files (no unshare --user)")
    return ["unshare", "--user"]


def test_read_only_store_given_to_resume(tmp_path, completed):
    prefix = _as_unprivileged()
    base = tmp_path / "ro"
    base.mkdir()
    store = copy_of(completed, base / "ro.zarr")
    edit_attrs(store, status="interrupted")
    try:
        for p in [store, *store.rglob("*")]:
            os.chmod(p, 0o555 if p.is_dir() else 0o444)
        os.chmod(base, 0o555)  # no lock file can be made beside it either
        before = tree_hash(store)
        r = subprocess.run([*prefix, sys.executable, "-m", "hbtest.cli", "resume", str(store), "--no-plot"], cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=60)
        line = one_line(r.stderr)
        assert r.returncode == 2, line
        assert str(store) in line and "read-only" in line, line
        assert tree_hash(store) == before
    finally:
        for p in [base, *base.rglob("*")]:
            os.chmod(p, 0o755 if p.is_dir() else 0o644)


# -- 9. older stores ---------------------------------------------------------------------------------


def test_schema_1_store_still_plots_and_exports_but_is_not_resumed(tmp_path, capsys, completed):
    store = copy_of(completed, tmp_path / "old.zarr")
    shutil.rmtree(store / "stop_reason")
    edit_attrs(store, schema_version=1)
    before = tree_hash(store)
    rc, out, err = cli(capsys, "plot", store, "--out", tmp_path / "png")
    assert rc == 0, err
    assert (tmp_path / "png" / "old-bode.png").stat().st_size > 0
    rc, out, err = cli(capsys, "export", store, "--netcdf", tmp_path / "old.nc")
    assert rc == 0, err
    import xarray as xr

    with xr.open_dataset(tmp_path / "old.nc", engine="h5netcdf") as nc:
        assert nc.sizes["frequency"] == 3 and "stop_reason" not in nc
    rc, _, err = cli(capsys, "resume", store, "--no-plot")
    line = one_line(err)
    assert rc == 2 and str(store) in line and "written by an older hbtest" in line, line
    assert tree_hash(store) == before

"""Virtual campaigns (hbtest.campaign): the campaign file, case expansion (grids, seeded
draws), a campaign on an in-process dask LocalCluster equal to a serial run, failed cases
recorded without stopping the others, kill-and-resume, the per-case rig seed, the CLI."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hbtest.campaign import (
    CampaignFinished, CampaignStarted, CampaignStore, CaseFinished, campaign_figure, expand_cases, open_campaign, run_campaign,
    toml_literal,
)
from hbtest.cli import main
from hbtest.config import load_campaign, parse_override
from hbtest.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
# two points well below the 18.5 Hz resonance, short averaging and a 1 % accuracy target: a few
# seconds per case
SHORT = ["sweep.start_hz=12.0", "sweep.stop_hz=13.0", "sweep.points=2", "test.averaging_periods=10", "test.accuracy=0.01"]
RESULTS = ("status", "error", "frf_error_max", "converged_fraction", "rig_periods", "value", "value_text", "rig_seed",
           "sweep_overrides", "rig_overrides")


def _write(tmp_path, body: str, name="c.toml") -> Path:
    p = tmp_path / name
    p.write_text(f'name = "test"\nbase = "{PAPER}"\nset = {json.dumps(SHORT)}\n'
                 'figures = ["frf_error_max", "converged_fraction", "rig_periods"]\n' + body)
    return p


def _same(a, b, names=RESULTS):
    for v in names:
        assert a[v].equals(b[v]), v


# ---------------------------------------------------------------------------------------
# the campaign file and its cases


@pytest.mark.parametrize("body, key", [
    ('[[grid]]\nkey = "bogus:x"\nvalues = [1]\n', "grid[0].key"),
    ('[[grid]]\nkey = "sweep..points"\nvalues = [1]\n', "grid[0].key"),
    ('[[grid]]\nkey = "sweep.points"\nvalues = []\n', "grid[0].values"),
    ('[[grid]]\nkey = "sweep.points"\nvalues = [2]\n[[random]]\nkey = "sweep.points"\ndistribution = "choice"\nvalues = [3]\n', "grid"),
    ('[[random]]\nkey = "sweep.points"\ndistribution = "uniform"\nlow = 2\nhigh = 1\n', "random[0].high"),
    ('[[grid]]\nkey = "analysis:delay_ms"\nvalues = [1.0]\n', "grid"),  # a sweep campaign has no analysis settings
    ('kind = "classical"\n', "analysis.delay_ms"),
    ('bogus = 1\n', "bogus"),
])
def test_campaign_file_errors_name_the_key(tmp_path, body, key):
    with pytest.raises(ConfigError) as e:
        load_campaign(_write(tmp_path, body))
    assert e.value.key == key


def test_a_figure_of_another_kind_is_refused(tmp_path):
    p = _write(tmp_path, "")
    with pytest.raises(ConfigError, match="critical_delay_ms"):
        load_campaign(p, ['figures=["critical_delay_ms"]'])


def test_cases_are_the_grid_product_times_seeded_draws(tmp_path):
    p = _write(tmp_path, 'seed = 7\ndraws = 3\n'
                         '[[grid]]\nkey = "sweep.points"\nvalues = [2, 3]\n'
                         '[[grid]]\nkey = "rig:virtual.actuation_delay_ms"\nstart = 0.5\nstop = 1.5\nnum = 3\n'
                         '[[random]]\nkey = "rig:virtual.noise.laser_rms_um"\ndistribution = "uniform"\nlow = 0.1\nhigh = 0.2\n'
                         '[[random]]\nkey = "sweep.direction"\ndistribution = "choice"\nvalues = ["up", "down"]\n')
    cfg = load_campaign(p)
    cases = expand_cases(cfg)
    assert cfg.n_cases == len(cases) == 2 * 3 * 3
    grid = [(dict(c.parameters)["sweep.points"], dict(c.parameters)["rig:virtual.actuation_delay_ms"]) for c in cases]
    assert grid[::3] == [(2, 0.5), (2, 1.0), (2, 1.5), (3, 0.5), (3, 1.0), (3, 1.5)]  # last grid key fastest, draws innermost
    assert all(grid[i] == grid[i // 3 * 3] for i in range(len(grid)))
    laser = np.array([dict(c.parameters)["rig:virtual.noise.laser_rms_um"] for c in cases])
    assert np.all((laser >= 0.1) & (laser < 0.2)) and np.unique(laser).size == laser.size
    c = cases[4]
    assert c.sweep_overrides[:len(SHORT)] == tuple(SHORT)
    assert c.sweep_overrides[len(SHORT):] == (f"sweep.points={dict(c.parameters)['sweep.points']}",
                                              f'sweep.direction="{dict(c.parameters)["sweep.direction"]}"')
    assert c.rig_overrides[0] == f"virtual.actuation_delay_ms={dict(c.parameters)['rig:virtual.actuation_delay_ms']!r}"
    assert len({c.rig_seed for c in cases}) == len(cases)
    # the same seed draws the same cases; another seed other draws
    assert [c.parameters for c in expand_cases(load_campaign(p))] == [c.parameters for c in cases]
    other = expand_cases(load_campaign(p, ["seed=8"]))
    assert [dict(c.parameters)["rig:virtual.noise.laser_rms_um"] for c in other] != list(laser)


@given(st.one_of(st.integers(-2**62, 2**62), st.floats(allow_nan=False), st.booleans(), st.text(max_size=20)))
def test_toml_literal_reads_back_as_the_same_override_value(v):
    key, back = parse_override(f"a.b={toml_literal(v)}")
    assert key == "a.b" and back == v and type(back) is type(v)


# ---------------------------------------------------------------------------------------
# running


def test_in_process_local_cluster_equals_serial_and_records_failed_cases(tmp_path):
    distributed = pytest.importorskip("distributed")
    # sweep.points = 1 is a bad override: those two cases fail, the two others complete
    p = _write(tmp_path, '[[grid]]\nkey = "sweep.points"\nvalues = [2, 1]\n'
                         '[[grid]]\nkey = "rig:virtual.actuation_delay_ms"\nvalues = [0.5, 1.5]\n')
    cfg = load_campaign(p)
    events = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        # the engine's --scheduler path: a Client of its own on this cluster's scheduler
        ds = run_campaign(cfg, tmp_path / "d.zarr", scheduler=cluster.scheduler_address, progress=events.append).load()
    status = list(ds["status"].values)
    assert status == ["done", "done", "failed", "failed"]
    assert all("sweep.points" in str(e) and "ConfigError" in str(e) for e in ds["error"].values[2:])
    assert np.all(np.isfinite(ds["frf_error_max"].values[:2])) and np.all(np.isnan(ds["frf_error_max"].values[2:]))
    assert list(ds["converged_fraction"].values[:2]) == [1.0, 1.0]
    assert ds["frf_error_max"].values[0] < 0.02  # the twin's exact reference, off resonance
    assert ds["finished"].values.all() and ds.attrs["status"] == "completed"
    assert json.loads(str(ds["rig_overrides"].values[3])) == ["virtual.actuation_delay_ms=1.5"]
    assert ds.attrs["campaign_text"] == p.read_text() and ds.attrs["base_text"] == PAPER.read_text()
    started = [e for e in events if isinstance(e, CampaignStarted)]
    assert started[0].n_todo == 4 and started[0].workers == 2 and started[0].scheduler == cluster.scheduler_address
    done = [e for e in events if isinstance(e, CaseFinished)]
    assert sorted(e.case for e in done) == [0, 1, 2, 3] and done[-1].n_failed == 2 and done[-1].eta_seconds == 0.0
    assert [e.n_done for e in events if isinstance(e, CampaignFinished)] == [2]

    serial = run_campaign(cfg, tmp_path / "s.zarr", workers=0).load()
    _same(ds, serial)
    assert not ds["finished_utc"].equals(serial["finished_utc"])  # two runs indeed

    # the plot: a heat map over the two grid parameters (failed cells blank); CLI exit 0
    out = tmp_path / "map.png"
    assert main(["campaign-plot", str(tmp_path / "d.zarr"), "--out", str(out)]) == 0 and out.stat().st_size > 0
    fig = campaign_figure(ds)
    grid = fig.axes[0].collections[0].get_array()
    assert grid.shape == (2, 2) and grid.mask[:, 0].all()  # points = 1 sorts first: every cell failed
    assert np.allclose(grid[:, 1], ds["frf_error_max"].values[:2])


def test_local_cluster_of_processes_equals_serial_with_the_workers_settings(tmp_path):
    """The engine's own LocalCluster (worker processes): stores equal the serial run's; the
    workers run without the nanny's MALLOC_TRIM_THRESHOLD_ and without the sampling profiler
    (engine.LOCAL_WORKER_CONFIG)."""
    pytest.importorskip("distributed")
    from hbtest.campaign.engine import _client

    p = _write(tmp_path, '[[grid]]\nkey = "rig:virtual.actuation_delay_ms"\nvalues = [0.5, 1.5]\n')
    cfg = load_campaign(p)
    client, cluster, _ = _client(None, 1, True)
    try:
        settings = client.run(lambda: (os.environ.get("MALLOC_TRIM_THRESHOLD_"), __import__("dask").config.get("distributed.worker.profile.enabled")))
        assert list(settings.values()) == [(None, False)]
        ds = run_campaign(cfg, tmp_path / "d.zarr", client=client).load()
    finally:
        client.close()
        cluster.close()
    assert {str(w).rsplit(":", 1)[1] for w in ds["worker"].values} != {str(os.getpid())}  # run in the worker
    serial = run_campaign(cfg, tmp_path / "s.zarr", workers=0).load()
    _same(ds, serial)
    assert list(ds["status"].values) == ["done", "done"]


def test_per_case_rig_seed_draws_other_noise_and_file_seed_repeats(tmp_path):
    p = _write(tmp_path, 'draws = 2\nseed = 5\n')
    per_case = run_campaign(load_campaign(p), tmp_path / "a.zarr", workers=0).load()
    e = per_case["frf_error_max"].values
    assert np.all(np.isfinite(e)) and e[0] != e[1]
    fixed = run_campaign(load_campaign(p, ['rig_seed="file"']), tmp_path / "b.zarr", workers=0).load()
    assert list(fixed["rig_seed"].values) == [-1, -1]
    assert fixed["frf_error_max"].values[0] == fixed["frf_error_max"].values[1]


def test_killed_campaign_resumes_only_unfinished_cases(tmp_path):
    p = _write(tmp_path, '[[grid]]\nkey = "rig:virtual.actuation_delay_ms"\nvalues = [0.3, 0.6, 0.9, 1.2]\n')
    store = tmp_path / "k.zarr"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "hbtest.cli", "campaign", str(p), "--store", str(store), "--workers", "0", "--quiet"],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if store.exists() and CampaignStore(store).finished().sum() >= 1:  # the store appears complete (renamed in)
                break
            assert proc.poll() is None, proc.stderr.read().decode()
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
        proc.stderr.close()
    before = CampaignStore(store).finished()
    assert 1 <= before.sum() < 4, "the campaign must be killed mid-run"
    stamps = open_campaign(store)["finished_utc"].values.copy()
    events = []
    ds = run_campaign(load_campaign(p), store, workers=0, progress=events.append).load()
    assert [e.n_todo for e in events if isinstance(e, CampaignStarted)] == [int((~before).sum())]
    assert sorted(e.case for e in events if isinstance(e, CaseFinished)) == list(np.flatnonzero(~before))
    assert list(ds["finished_utc"].values[before]) == list(stamps[before])  # finished cases untouched
    assert list(ds["status"].values) == ["done"] * 4 and ds.attrs["status"] == "completed"
    # the cases the resume ran equal an uninterrupted serial run in this process (the cases the
    # killed process finished were computed in another process: a threaded BLAS there may round
    # differently, and an iterated point amplifies last-bit differences to ~1e-5 of the FRF)
    ref = run_campaign(load_campaign(p), tmp_path / "ref.zarr", workers=0).load()
    todo = np.flatnonzero(~before)
    _same(ds.isel(case=todo), ref.isel(case=todo))
    # one parameter: lines, the mean per value equals the cases (one draw each)
    fig = campaign_figure(ds, ["rig_periods"])
    assert np.allclose(fig.axes[0].lines[1].get_ydata(), ds["rig_periods"].values)


def test_cli_refuses_another_campaign_text_and_bad_arguments(tmp_path, capsys):
    p = _write(tmp_path, 'draws = 1\n')
    store = tmp_path / "c.zarr"
    assert main(["campaign", str(p), "--store", str(store), "--workers", "0", "--set", "rig_seed=\"file\""]) == 0
    err = capsys.readouterr().err
    assert "1 of 1 cases to run" in err and "1/1 cases done, 0 failed" in err
    assert main(["campaign", str(p), "--store", str(store), "--workers", "0", "--set", "rig_seed=\"file\""]) == 0
    assert "already finished" in capsys.readouterr().err
    assert main(["campaign", str(p), "--store", str(store), "--workers", "0"]) == 2  # other cases (rig seeds): refused
    assert "holds other cases" in capsys.readouterr().err
    p.write_text(p.read_text() + "# edited\n")
    assert main(["campaign", str(p), "--store", str(store), "--workers", "0", "--set", "rig_seed=\"file\""]) == 2
    assert "made from another campaign file" in capsys.readouterr().err
    assert main(["campaign", str(tmp_path / "none.toml"), "--store", str(store)]) == 2
    assert main(["campaign", str(p), "--store", str(tmp_path / "x.zarr"), "--workers", "-1"]) == 2
    assert main(["campaign-plot", str(tmp_path / "none.zarr")]) == 2
    assert main(["campaign-plot", str(store), "--figure", "bogus"]) == 2


def test_stability_case_equals_hbtest_stability_beam(tmp_path, capsys):
    p = tmp_path / "s.toml"
    p.write_text(f'kind = "stability"\nbase = "{PAPER}"\n[analysis]\ncutoff_hz = 400.0\n')
    ds = run_campaign(load_campaign(p), tmp_path / "s.zarr", workers=0).load()
    assert main(["stability", "beam", str(PAPER), "--cutoff-hz", "400", "--json"]) == 0
    ref = json.loads(capsys.readouterr().out)
    assert list(ds["status"].values) == ["done"]
    assert ds["critical_delay_ms"].values[0] == pytest.approx(ref["critical_delay_s"] * 1e3, rel=1e-12)
    assert ds["critical_frequency_hz"].values[0] == pytest.approx(ref["frequency_hz"], rel=1e-12)

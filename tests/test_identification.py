"""Identification records (issue 40): a hardware kind's modes measured from its own free decays,
kept beside the rig file, reused by later connections and sweeps, measured again when the rig
reports another identity. End to end over a real loopback socket: ``hbtest serve`` of the twin
as a box, driven by the shipped ``instruments/box-loopback.toml`` (only its port changed)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from served import PAPER, ROOT, frf_error, serve

from hbtest.cli import main
from hbtest.commands.design import identification_rig_time_s
from hbtest.config import load_rig, load_sweep
from hbtest.errors import ConfigError
from hbtest.rig import open_rig
from hbtest.rig.capabilities import KnownModes
from hbtest.rig.identification import IdentificationRecord, load_identification, save_identification
from hbtest.rig.virtual import VirtualRig
from hbtest.sweep.runner import run

BOX = "instruments/box-loopback.toml"


def test_record_round_trips_every_mode_exactly(tmp_path):
    """JSON numbers carry a float64 exactly: the record gives back the very eigenvalues."""
    lam = VirtualRig(load_rig("instruments/virtual-cantilever.toml")).modes()
    rec = IdentificationRecord("2026-11-28T17:00:00Z", {"identity": "x", "kind": "box", "instruments": {"idn": "A"}},
                               {"voltage_v": 2.5, "band_hz": 150.0, "decay_s": 1.5, "orders": 24}, 4.5, lam)
    save_identification(rec, tmp_path / "m.json")
    back = load_identification(tmp_path / "m.json")
    np.testing.assert_array_equal(back.modes, lam)
    assert back.rig == rec.rig and back.experiment == rec.experiment and back.date_utc == rec.date_utc


@pytest.mark.parametrize("override, key", [("identify.voltage_v=6.0", "identify.voltage_v"),
                                           ("identify.orders=1", "identify.orders"), ("identify.bogus=1", "identify.bogus")])
def test_identify_mistakes_name_the_key(override, key):
    with pytest.raises(ConfigError) as e:
        load_rig(BOX, [override])
    assert e.value.key == key


def _rig_check(path, capsys) -> str:
    capsys.readouterr()
    assert main(["rig", "check", str(path)]) == 0
    return next(line for line in capsys.readouterr().out.splitlines() if line.startswith("identification:"))


def test_box_reuses_its_identification_and_measures_again_on_another_identity(tmp_path, capsys):
    """Served box (seed 1): no record -> `rig check` says so; `rig identify` measures the free
    decays (the modes the twin's records carry: 2.85, 10.4, 41.5 and 113 Hz within 2 %) and writes
    the record with the box's *IDN; `rig check` then calls it valid, and a sweep through the box
    uses it as it is (the record is not rewritten: no rig time spent on it), converged within 1 %
    of the exact structure. Another box (seed 2: another *IDN serial) is measured again."""
    first = serve("box", None, "--seed", "1")
    try:
        path = first.rig_file(tmp_path)
        record = tmp_path / "box-loopback.modes.json"
        assert "none on file" in _rig_check(path, capsys)
        assert main(["rig", "identify", str(path)]) == 0
        written = record.read_bytes()
        doc = json.loads(written)
        assert doc["hbtest_identification"] == 1 and doc["rig"]["kind"] == "box"
        assert doc["rig"]["instruments"]["idn"].split(",")[2].endswith("-s1")
        # `hbtest design` states the experiment's rig time from its settings alone: the box's clock agrees
        assert abs(identification_rig_time_s(2, load_rig(path).identify) - doc["rig_time_s"]) < 2e-3, doc["rig_time_s"]
        exact = VirtualRig(load_rig("instruments/virtual-cantilever.toml")).modes()
        lam = load_identification(record).modes
        for x in exact[(np.abs(exact) < 2 * np.pi * 150) & (-exact.real / np.abs(exact) < 0.5)]:
            assert np.min(np.abs(lam - x)) < 0.02 * abs(x), (x, lam)
        assert _rig_check(path, capsys).startswith("identification: valid")
        sets = ["sweep.points=2", "sweep.start_hz=17.0", "sweep.stop_hz=17.2", f"rig='{path}'"]
        ds = run(load_sweep(PAPER, sets), tmp_path / "s.zarr", plot=False).load()
        assert bool(ds.converged.all()) and frf_error(ds, sets).max() < 0.01
        assert record.read_bytes() == written  # reused, not measured again
        assert json.loads(ds.attrs["identification"])["spent_s"] == 0.0  # the store names the record its fits used
    finally:
        assert first.stop() == 0
    second = serve("box", None, "--seed", "2")
    try:
        path = second.rig_file(tmp_path, name="box2.toml")
        with open_rig(load_rig(path)) as rig:
            assert isinstance(rig, KnownModes)
            rig.modes()
            assert rig.identification_s > 1.0  # measured: four drive-and-decay records of 1.5 s and more
        doc = json.loads((tmp_path / "box-loopback.modes.json").read_text())
        assert doc["rig"]["instruments"]["idn"].split(",")[2].endswith("-s2")
    finally:
        assert second.stop() == 0


def _lab_template(served) -> str:
    """``instruments/lab-33500b-scope.toml`` with its instruments' addresses (documentation
    addresses) put at the served bench's ports: the one edit a lab makes too."""
    gen, scope = served.ports
    text = (ROOT / "instruments" / "lab-33500b-scope.toml").read_text()
    return (text.replace("TCPIP0::192.0.2.10::5025::SOCKET", f"TCPIP0::127.0.0.1::{gen}::SOCKET")
            .replace("TCPIP0::192.0.2.11::5025::SOCKET", f"TCPIP0::127.0.0.1::{scope}::SOCKET"))


@pytest.mark.slow
@pytest.mark.parametrize("kind, template", [("helic", "helic-loopback"), ("scpi", "lab-33500b-scope"),
                                            ("redpitaya", "redpitaya-loopback")])
def test_a_stored_identification_takes_the_sweep_through_the_transient_fit(tmp_path, kind, template):
    """Each shipped template on its served twin (seed 1), unedited but for its addresses:
    `hbtest rig identify` stores the record beside the rig file; a sweep then fits through the
    transient with that record's modes, as the store says (its ``identification`` attribute:
    the very record, no rig time spent measuring it again), the record is not rewritten, and
    the points converge within 1 % of the exact structure."""
    served = serve(kind, None, "--seed", "1")
    try:
        edit = (lambda _: _lab_template(served)) if template == "lab-33500b-scope" else (lambda t: t)
        path = served.rig_file(tmp_path, edit, name=f"{template}.toml")
        assert main(["rig", "identify", str(path)]) == 0
        record = tmp_path / f"{template}.modes.json"
        written = record.read_bytes()
        sets = ["sweep.points=2", "sweep.start_hz=17.0", "sweep.stop_hz=17.2", f"rig='{path}'"]
        ds = run(load_sweep(PAPER, sets), tmp_path / "s.zarr", plot=False).load()
    finally:
        assert served.stop() == 0
    used = json.loads(ds.attrs["identification"])
    assert used["spent_s"] == 0.0 and Path(used["record"]).resolve() == record.resolve()
    assert used["modes"] == json.loads(written)["modes"] and used["rig"]["kind"] == kind
    assert record.read_bytes() == written
    assert bool(ds.converged.all()) and frf_error(ds, sets).max() < 0.01

"""Smoke test of both SCPI drivers through real pyvisa with the pyvisa-sim backend
(instruments/sims/lab-33500b-scope.yaml, addressed as in instruments/lab-33500b-scope.toml)."""

from pathlib import Path

import pytest

from hbtest.config import load_rig
from hbtest.rig.scpi import InfiniiVision, Keysight33500B, ScpiLink
from hbtest.rig.scpi.link import open_resource

pytest.importorskip("pyvisa_sim")
ROOT = Path(__file__).resolve().parents[1]
SIM = f"{ROOT / 'instruments/sims/lab-33500b-scope.yaml'}@sim"
CFG = load_rig(ROOT / "instruments/lab-33500b-scope.toml")


def link(resource, name):
    return ScpiLink(open_resource(resource, name, library=SIM, timeout_ms=1000), name)


def test_generator_through_pyvisa_sim():
    g = Keysight33500B(link(CFG.spec.generator.resource, "generator"))
    assert g.identify().startswith("Keysight Technologies,33522B,")
    g.link.write("*CLS")
    g.set_load_infinity(1)
    g.set_amplitude(1, 2.5)
    g.set_offset(1, -0.25)
    assert g.link.query_float("SOUR1:VOLT?") == 2.5
    assert g.link.query_float("SOUR1:VOLT:OFFS?") == -0.25
    g.output_off(2)
    assert g.link.query("OUTP2?") == "OFF"
    assert g.errors() == []


def test_digitiser_through_pyvisa_sim():
    d = InfiniiVision(link(CFG.spec.digitiser.resource, "digitiser"))
    assert d.identify().startswith("KEYSIGHT TECHNOLOGIES,DSOX3024T,")
    d.configure_channel(1, 24.0, 0.0)
    assert d.link.query_float(":CHAN1:RANG?") == 24.0
    d.link.write(":WAV:SOUR CHAN1")
    pre = d.preamble()
    assert (pre.format, pre.points, pre.x_increment, pre.y_reference) == (1, 1000, 2e-4, 32768.0)

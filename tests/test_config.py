"""Sweep-file validation: every user mistake gives one line naming file and key, exit 2."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hbtest.cli import main
from hbtest.config import load_sweep, parse_override
from hbtest.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"


def test_paper_file_parses_to_si():
    c = load_sweep(PAPER)
    assert c.numerical.beam.length == pytest.approx(0.17)
    assert c.numerical.beam.youngs_modulus == pytest.approx(217e9)
    assert c.sweep.frequencies_hz[0] == 16.0 and c.sweep.frequencies_hz[-1] == 19.0
    assert c.test.tolerance == pytest.approx(2e-5)
    assert c.rig_path.resolve() == (ROOT / "instruments" / "virtual-cantilever.toml").resolve()


def test_set_overrides_and_directions():
    c = load_sweep(PAPER, ["sweep.points=61", "sweep.direction=down", "solver.profile=published"])
    assert c.sweep.points == 61 and c.sweep.frequencies_hz[0] == 19.0
    assert c.solver.profile == "published"
    c = load_sweep(PAPER, ["sweep.points=3", "sweep.direction=up-down"])
    assert list(c.sweep.frequencies_hz) == [16.0, 17.5, 19.0, 17.5, 16.0]
    assert parse_override("a.b=[1, 2]") == ("a.b", [1, 2])
    assert parse_override("a=word") == ("a", "word")


BAD = [
    ("numerical.length_mm=-170", "numerical.length_mm", "positive"),
    ("numerical.length_mm='long'", "numerical.length_mm", "number"),
    ("numerical.colour=3", "numerical.colour", "unknown key"),
    ("sweep.stop_hz=15", "sweep.stop_hz", "empty"),
    ("sweep.points=1", "sweep.points", ">= 2"),
    ("sweep.points=2.5", "sweep.points", "integer"),
    ("sweep.direction=sideways", "sweep.direction", "one of"),
    ("sweep.harmonics=[0]", "sweep.harmonics", "k >= 1"),
    ("excitation.position_mm=400", "excitation.position_mm", "outside"),
    ("test.residual=energy", "test.residual", "one of"),
    ("test.tolerance_mm=0", "test.tolerance_mm", "positive"),
    ("solver.profile=fast", "solver.profile", "one of"),
    ("output.plot=3", "output.plot", "true or false"),
    ("numerical.youngs_modulus_gpa=true", "numerical.youngs_modulus_gpa", "number"),
    ("numerical=3", "numerical", "table"),
]


@pytest.mark.parametrize("override,key,problem", BAD)
def test_bad_values_name_file_and_key(override, key, problem):
    with pytest.raises(ConfigError) as e:
        load_sweep(PAPER, [override])
    msg = str(e.value)
    assert "paper-cantilever.toml" in msg and key in msg and problem in msg, msg
    assert "\n" not in msg


NUMERIC_KEYS = ["numerical.length_mm", "numerical.width_mm", "numerical.thickness_mm", "numerical.density_kg_m3",
                "sweep.start_hz", "excitation.amplitude_n", "test.tolerance_mm", "solver.max_step_v"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(NUMERIC_KEYS),
       value=st.one_of(st.floats(max_value=0.0, allow_nan=False), st.text(max_size=5), st.booleans(), st.lists(st.integers(), max_size=2)))
def test_any_non_positive_or_mistyped_value_is_rejected_cleanly(key, value):
    ov = f"{key}={value!r}" if not isinstance(value, (bool, list)) else f"{key}={str(value).lower()}"
    if isinstance(value, str):
        ov = f'{key}="{value}"' if '"' not in value and "\\" not in value else f"{key}=[]"
    with pytest.raises(ConfigError) as e:
        load_sweep(PAPER, [ov])
    assert key.split(".")[-1] in str(e.value) or key.split(".")[0] in str(e.value)


@settings(max_examples=40, deadline=None)
@given(text=st.text(max_size=200))
def test_arbitrary_text_never_crashes_the_loader(tmp_path_factory, text):
    p = tmp_path_factory.mktemp("cfg") / "s.toml"
    p.write_text(text, encoding="utf-8")
    try:
        load_sweep(p)
    except ConfigError as e:
        assert str(p) in str(e)


def test_cli_bad_file_is_one_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text(PAPER.read_text().replace("length_mm = 170.0", "length_mm = -170.0"))
    assert main(["design", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "numerical.length_mm" in err and "bad.toml" in err
    assert main(["design", str(tmp_path / "missing.toml")]) == 2
    assert main(["design", str(PAPER), "--set", "nonsense"]) == 2


def test_cli_subprocess_has_no_traceback(tmp_path):
    r = subprocess.run([sys.executable, "-m", "hbtest.cli", "design", str(PAPER), "--set", "sweep.points=0"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and re.search(r"sweep\.points", r.stderr)

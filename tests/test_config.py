"""Sweep- and rig-file validation: every user mistake gives one line naming file and key, exit 2;
rig files dispatch through the kind registry."""

import dataclasses
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from hbtest import config
from hbtest.config import section
from hbtest.cli import main
from hbtest.config import RigConfig, load_rig, load_sweep, parse_override
from hbtest.errors import ConfigError
from hbtest.rig import open_rig, registry, virtual

ROOT = Path(__file__).resolve().parents[1]
PAPER = ROOT / "sweeps" / "paper-cantilever.toml"
RIG = ROOT / "instruments" / "virtual-cantilever.toml"


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
    ("sweep.stop_hz=1e308", "sweep.stop_hz", "100000"),  # found by tests/test_fuzz_files.py (design crashed)
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


# ---------------------------------------------------------------------------------------
# files that are not TOML text


def test_a_directory_is_not_a_definition_file(tmp_path):
    for load in (load_sweep, load_rig):
        with pytest.raises(ConfigError) as e:
            load(tmp_path)
        assert e.value.problem == "is a directory, expected a file"
        assert str(e.value) == f"{tmp_path}: is a directory, expected a file"
    with pytest.raises(ConfigError, match="file not found"):
        load_sweep(tmp_path / "missing.toml")


@pytest.mark.parametrize(
    "content, detail",
    [
        (b"name = 'x'\x00\x01\x02", "NUL byte at offset 10"),
        (b"name = '\xff\xfe'\n", "invalid UTF-8 at byte 8"),
        (bytes(range(256)), "NUL byte at offset 0"),
    ],
)
def test_a_binary_file_is_not_a_text_toml_file(tmp_path, content, detail):
    p = tmp_path / "sweep.toml"
    p.write_bytes(content)
    for load in (load_sweep, load_rig):
        with pytest.raises(ConfigError) as e:
            load(p)
        msg = str(e.value)
        assert msg.startswith(f"{p}: not a text TOML file") and detail in msg and "\n" not in msg


def test_cli_directory_and_binary_file_are_one_line_exit_2(tmp_path, capsys):
    assert main(["design", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("is a directory, expected a file")
    p = tmp_path / "bin.toml"
    p.write_bytes(b"\x00\xff")
    assert main(["design", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not a text TOML file" in err and err.count("\n") == 0


# ---------------------------------------------------------------------------------------
# rig files: the common part and the kind registry


def rig_file(tmp_path, old: str, new: str) -> Path:
    text = RIG.read_text()
    assert old in text
    p = tmp_path / "rig.toml"
    p.write_text(text.replace(old, new, 1))
    return p


def test_schema_names_are_re_exported_by_config():
    assert config.Section is section.Section and config.BeamSpec is section.BeamSpec
    assert config.SourceFile is section.SourceFile and config.read_beam is section.read_beam
    assert config.RigCommon is section.RigCommon


def test_registry_knows_the_kinds():
    assert registry.names()[:3] == ("virtual", "box", "scpi")
    assert set(registry.KIND_MODULES) == {"virtual", "box", "scpi", "helic", "redpitaya"}
    kind = registry.get("virtual")
    assert kind is virtual.KIND and kind.name == "virtual" and kind.tables == ("virtual",)
    assert kind.parse is virtual.parse_virtual_kind and kind.open is virtual.open_virtual
    with pytest.raises(KeyError):
        registry.get("nonsense")
    with pytest.raises(TypeError):
        registry.register("virtual")
    impostor = registry.RigKind("virtual", ("virtual",), virtual.parse_virtual_kind, lambda cfg, seed: None)
    with pytest.raises(ValueError, match="already registered"):
        registry.register(impostor)
    assert registry.get("virtual") is kind


def test_unknown_rig_kind_is_one_config_error_naming_file_and_key(tmp_path):
    p = rig_file(tmp_path, 'kind = "virtual"', 'kind = "hydraulic"')
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.source == str(p) and e.value.key == "rig.kind"
    assert "must be one of virtual, box, scpi" in e.value.problem and "'hydraulic'" in e.value.problem
    assert "\n" not in str(e.value)


def test_unavailable_rig_kind_is_a_config_error(tmp_path, monkeypatch):
    """A kind the registry knows whose module cannot be imported (e.g. a driver's dependency
    missing): one ConfigError on rig.kind carrying the import error."""
    monkeypatch.setitem(registry.KIND_MODULES, "ghost", "hbtest.rig.no_such_kind_module")
    with pytest.raises(registry.KindUnavailable) as k:
        registry.get("ghost")
    assert isinstance(k.value, KeyError) and "No module named 'hbtest.rig.no_such_kind_module'" in k.value.reason
    p = rig_file(tmp_path, 'kind = "virtual"', 'kind = "ghost"')
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.source == str(p) and e.value.key == "rig.kind"
    assert e.value.problem == "rig kind 'ghost' is not available: ModuleNotFoundError: No module named 'hbtest.rig.no_such_kind_module'"


def test_box_kind_is_registered_or_cleanly_unavailable(tmp_path):
    """Until the box driver exists (or when its dependencies are missing) a box rig file is a
    clean ConfigError on rig.kind; once it exists, the kind is registered under its name."""
    try:
        kind = registry.get("box")
    except registry.KindUnavailable as e:
        p = rig_file(tmp_path, 'kind = "virtual"', 'kind = "box"')
        with pytest.raises(ConfigError) as err:
            load_rig(p)
        assert err.value.key == "rig.kind" and err.value.problem == f"rig kind 'box' is not available: {e.reason}"
    else:
        assert kind.name == "box" and "box" in kind.tables


def test_load_rig_dispatches_to_the_kind_and_open_rig_opens_it(monkeypatch):
    """The kind gets the common part (RigCommon) and parses only its own table; its spec is
    RigConfig.spec (and .virtual); open_rig calls its open."""
    seen = {}

    def parse(top, common):
        seen["common"] = common
        sec = top.sub("virtual")
        seen["keys"] = set(sec.data)
        sec.data.clear()  # a stand-in kind: the whole table is "read"
        return ("spec", common.identity)

    def open_(cfg, seed):
        return ("rig", cfg.spec, seed)

    fake = registry.RigKind("virtual", ("virtual",), parse, open_)
    monkeypatch.setattr(registry, "get", lambda name: fake)
    cfg = load_rig(RIG)
    c = seen["common"]
    assert isinstance(c, section.RigCommon) and c.path == str(RIG)
    assert c.identity == cfg.identity and c.actuators == ("vertical", "rotational") and c.sample_rate_hz == 5000.0
    assert c.sensors is cfg.sensors and c.physical == cfg.physical and c.voltage_limit_v == cfg.voltage_limit_v
    assert cfg.common == c
    assert {"seed", "clamp", "shakers"} <= seen["keys"]
    assert cfg.spec == ("spec", cfg.identity) and cfg.virtual is cfg.spec and cfg.kind == "virtual"
    assert open_rig(cfg, seed=3) == ("rig", cfg.spec, 3)


def test_a_kind_reading_tables_it_does_not_own_is_a_programming_error(monkeypatch):
    def greedy(top, common):
        top.sub("virtual").data.clear()
        top.sub("sensors")
        return None

    monkeypatch.setattr(registry, "get", lambda name: registry.RigKind("virtual", ("virtual",), greedy, None))
    with pytest.raises(RuntimeError, match=r"rig kind 'virtual' read the table \[sensors\]"):
        load_rig(RIG)


def test_tables_of_no_kind_and_missing_physical_are_config_errors(tmp_path):
    p = rig_file(tmp_path, "[physical]", "[box]\nresource = 'x'\n\n[physical]")
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.key == "box" and e.value.problem == "unknown key"
    p = rig_file(tmp_path, "[physical]", "[physique]")
    with pytest.raises(ConfigError) as e:
        load_rig(p)
    assert e.value.key == "physical" and "needs the [physical] beam" in e.value.problem


def test_rig_config_keeps_the_older_virtual_keyword():
    cfg = load_rig(RIG)
    fields = [getattr(cfg, f.name) for f in dataclasses.fields(cfg)]
    assert RigConfig(*fields) == cfg
    old = RigConfig(cfg.source, cfg.kind, cfg.identity, cfg.actuators, cfg.sample_rate_hz, cfg.voltage_limit_v, cfg.sensors, virtual=cfg.spec, physical=cfg.physical)
    assert old == cfg and old.spec is cfg.spec
    with pytest.raises(TypeError, match="not both"):
        RigConfig(*fields[:7], spec=cfg.spec, virtual=("another",))
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.spec = None

"""Fuzzing the reference sweep and rig files: a mutated file (a value of another
type, a number out of range, a key deleted, an unknown key added, the file truncated at a
byte, bytes replaced by garbage) given to the command line ends cleanly — exit 0, 1 (a sweep
that ran but did not converge) or 2 (one line on stderr), within a time bound, never a
traceback.

Sweep files go through ``hbtest design FILE`` (parses the sweep and its rig, runs the design
checks); rig files through a copy of the sweep file whose ``rig`` points at the mutated copy.
A few cases run a real two-point sweep (``hbtest sweep``, in a child process with a timeout,
so a hang is caught rather than suffered). Mutations are line-based on the TOML text, drawn by
hypothesis (derandomized profile of the suite's conftest: the same cases on every run).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hbtest.cli import main

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "sweeps" / "paper-cantilever.toml"
RIG = ROOT / "instruments" / "virtual-cantilever.toml"
#: a mutated file's short sweep ends (error or result) within this: a bound against hangs, not a
#: timing figure (the slowest example per run took 4.7-14.7 s in the threshold audit's five runs, machine load 2-11)
TIME_BOUND_S = 20.0
RUN_ARGS = ["--set", "sweep.points=2", "--set", "test.max_iterations=1", "--no-plot", "--quiet"]

_ASSIGN = re.compile(r"^(\s*[A-Za-z0-9_]+\s*=\s*)(.*?)(\s+#.*)?$")
_NUMBER = re.compile(r"^[+-]?(\d[\d_]*)?(\.\d+)?([eE][+-]?\d+)?$")

OTHER_TYPES = ['"text"', "true", "false", "[1, \"a\"]", "[]", "{ x = 1 }", "1979-05-27T07:32:00Z", '""', "[[1, 2], [3]]", "1.5", "7"]
UNKNOWN_VALUES = ["1", '"x"', "[1]", "true"]
OUT_OF_RANGE = ["-1", "0", "-0.0", "1e308", "-1e308", "1e-300", "inf", "-inf", "nan", "123456789012", "1e9", "-5e-7", "2147483648"]


# (key, value) of a line that the CLI does not yet turn into one line and exit 2 (bugs of the
# config layer, hbtest/config/section.py: no bounds on beam properties and laser spacing); kept out of
# the random cases and pinned by test_known_bad_value below (strict xfail: it tells when fixed)
#: values the fuzzing once found the CLI crashing on (now refused by the config layer with one
#: line): kept as explicit regression cases
FOUND_CRASHES = (
    ("length_mm", "1e308"), ("width_mm", "1e308"), ("youngs_modulus_gpa", "1e308"), ("zeta_stiffness_s", "1e308"),
    ("thickness_mm", "1e308"), ("length_mm", "1e-300"), ("density_kg_m3", "1e-300"),
    ("laser_spacing_mm", "0"), ("laser_spacing_mm", "-0.0"),
    # the twin's model cannot be built (overflowing or ill-conditioned modes)
    ("mass_kg", "1e308"),
)
#: values the fuzzing found the CLI crashing on that the twin now simulates faithfully, each with the line of
#: ``hbtest design`` that reports its consequence: a 1.2e11 N s/m damper on the first shaker (its QZ eigenvectors were
#: ill-conditioned before the twin refined them; refined, its modal model is within 5e-6 of the full one) holds
#: that shaker still, so the demand exceeds the voltage limit
FOUND_AND_SIMULATED = (("suspension_damping_n_s_per_m", "123456789012", "demand on vertical exceeds its voltage limit"),)
#: keys of FOUND_CRASHES that live in the rig file (the rest are the sweep file's)
RIG_KEYS = {"laser_spacing_mm", "mass_kg", "suspension_damping_n_s_per_m"}


def assignment_lines(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if _ASSIGN.match(ln) and not ln.lstrip().startswith("#")]


def numeric_lines(lines: list[str]) -> list[int]:
    out = []
    for i in assignment_lines(lines):
        value = _ASSIGN.match(lines[i]).group(2).strip()
        if _NUMBER.match(value) and value:
            out.append(i)
    return out


def header_lines(lines: list[str]) -> list[int]:
    return [i for i, ln in enumerate(lines) if ln.lstrip().startswith("[")]


@st.composite
def mutated(draw, text: str) -> tuple[str, bytes]:
    """(description, mutated file bytes) of one mutation of ``text``."""
    lines = text.splitlines()
    kind = draw(st.sampled_from(["type", "range", "delete", "unknown", "truncate", "garbage"]))
    if kind in ("type", "range"):
        pool = assignment_lines(lines) if kind == "type" else numeric_lines(lines)
        i = draw(st.sampled_from(pool))
        value = draw(st.sampled_from(OTHER_TYPES if kind == "type" else OUT_OF_RANGE))
        m = _ASSIGN.match(lines[i])
        lines[i] = m.group(1) + value
        return f"{kind}: line {i + 1} -> {lines[i]!r}", ("\n".join(lines) + "\n").encode()
    if kind == "delete":
        i = draw(st.sampled_from(assignment_lines(lines)))
        gone = lines.pop(i)
        return f"delete line {i + 1} {gone!r}", ("\n".join(lines) + "\n").encode()
    if kind == "unknown":
        i = draw(st.sampled_from([-1] + header_lines(lines)))
        name = draw(st.sampled_from(["bogus_key", "stop_hz_typo", "sample_rate", "Points", "seed2"]))
        lines.insert(i + 1, f"{name} = {draw(st.sampled_from(UNKNOWN_VALUES))}")
        return f"unknown key after line {i + 1}: {lines[i + 1]!r}", ("\n".join(lines) + "\n").encode()
    raw = text.encode()
    if kind == "truncate":
        n = draw(st.integers(0, len(raw) - 1))
        return f"truncated at byte {n}", raw[:n]
    start = draw(st.integers(0, len(raw) - 1))
    junk = draw(st.binary(min_size=1, max_size=64))
    return f"garbage {junk!r} at byte {start}", raw[:start] + junk + raw[start + len(junk):]


def _sweep_text_pointing_at(rig: Path) -> str:
    return re.sub(r'(?m)^rig = ".*"$', f'rig = "{rig.as_posix()}"', SWEEP.read_text())


def _check(rc: int, err: str, took: float, what: str) -> None:
    assert "Traceback" not in err, f"{what}: traceback\n{err}"
    assert rc in (0, 1, 2), f"{what}: exit {rc}\n{err}"
    if rc == 2:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert len(lines) <= 1, f"{what}: {len(lines)} lines on stderr\n{err}"
        assert lines and lines[0].startswith("hbtest"), f"{what}: no error line\n{err}"
    assert took < TIME_BOUND_S, f"{what}: took {took:.1f} s"


def _write_case(d: Path, which: str, data: bytes) -> Path:
    """The sweep file of a case in folder ``d``: a mutated sweep file (its rig path made
    absolute), or the reference sweep pointing at a mutated rig file."""
    sweep = d / "sweep.toml"
    if which == "sweep":
        sweep.write_bytes(data.replace(b'"../instruments/virtual-cantilever.toml"', f'"{RIG.as_posix()}"'.encode()))
    else:
        rig = d / "rig.toml"
        rig.write_bytes(data)
        sweep.write_text(_sweep_text_pointing_at(rig))
    return sweep


def design_case(capsys, which: str, case) -> int:
    return design_output(capsys, which, case)[0]


def design_output(capsys, which: str, case) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``hbtest design`` on one case, checked by :func:`_check`."""
    description, data = case
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sweep = _write_case(d, which, data)
        capsys.readouterr()
        t0 = time.monotonic()
        try:
            rc = main(["design", str(sweep)])
        except BaseException as e:  # noqa: BLE001 - anything escaping main is a traceback
            pytest.fail(f"{which} {description}: {type(e).__name__}: {e}")
        took = time.monotonic() - t0
        out = capsys.readouterr()
        _check(rc, out.err, took, f"{which} {description}")
        return rc, out.out, out.err


def run_case(which: str, case) -> None:
    description, data = case
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        sweep = _write_case(d, which, data)
        t0 = time.monotonic()
        try:
            r = subprocess.run([sys.executable, "-m", "hbtest.cli", "sweep", str(sweep), "--store", str(d / "s.zarr"), *RUN_ARGS],
                               capture_output=True, text=True, timeout=TIME_BOUND_S, cwd=d)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{which} {description}: sweep still running after {TIME_BOUND_S} s")
        _check(r.returncode, r.stderr, time.monotonic() - t0, f"{which} {description}")


SWEEP_TEXT = SWEEP.read_text()
RIG_TEXT = RIG.read_text()
FUZZ = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@settings(max_examples=150, **FUZZ)
@given(case=mutated(SWEEP_TEXT))
def test_mutated_sweep_file_through_design(capsys, case):
    design_case(capsys, "sweep", case)


@settings(max_examples=150, **FUZZ)
@given(case=mutated(RIG_TEXT))
def test_mutated_rig_file_through_design(capsys, case):
    design_case(capsys, "rig", case)


@settings(max_examples=3, **FUZZ)
@given(which=st.sampled_from(["sweep", "rig"]), data=st.data())
def test_mutated_file_through_a_short_sweep(which, data):
    run_case(which, data.draw(mutated(SWEEP_TEXT if which == "sweep" else RIG_TEXT)))


@pytest.mark.slow
@settings(max_examples=1000, **FUZZ)
@given(which=st.sampled_from(["sweep", "rig"]), data=st.data())
def test_mutated_files_through_design_many(capsys, which, data):
    design_case(capsys, which, data.draw(mutated(SWEEP_TEXT if which == "sweep" else RIG_TEXT)))


@pytest.mark.slow
@settings(max_examples=150, **FUZZ)
@given(which=st.sampled_from(["sweep", "rig"]), data=st.data())
def test_mutated_files_through_a_short_sweep_many(which, data):
    run_case(which, data.draw(mutated(SWEEP_TEXT if which == "sweep" else RIG_TEXT)))


def _with_value(text: str, key: str, value: str, nth: int = 0) -> bytes:
    lines = text.splitlines()
    i = [j for j in assignment_lines(lines) if _ASSIGN.match(lines[j]).group(1).split("=")[0].strip() == key][nth]
    lines[i] = _ASSIGN.match(lines[i]).group(1) + value
    return ("\n".join(lines) + "\n").encode()


@pytest.mark.parametrize("key, value", [pytest.param(k, v, id=f"{k}={v}") for k, v in FOUND_CRASHES])
def test_values_the_fuzzing_found_are_refused_in_one_line(capsys, key, value):
    """Each value the fuzzing once found the CLI crashing on is now refused (exit 2, one line
    naming the key)."""
    which, text = ("rig", RIG_TEXT) if key in RIG_KEYS else ("sweep", SWEEP_TEXT)
    code = design_case(capsys, which, (f"{key} = {value}", _with_value(text, key, value)))
    assert code == 2


@pytest.mark.parametrize("key, value, line", [pytest.param(k, v, x, id=f"{k}={v}") for k, v, x in FOUND_AND_SIMULATED])
def test_values_the_fuzzing_found_are_simulated_and_their_consequence_reported(capsys, key, value, line):
    code, out, _ = design_output(capsys, "rig", (f"{key} = {value}", _with_value(RIG_TEXT, key, value)))
    assert code == 0
    assert line in out


def test_values_whose_modal_model_departs_from_the_full_model_are_refused_naming_the_file(capsys, tmp_path):
    """Both shakers on 1e8 N s/m dampers: the twin's modal model (modes below the cutoff plus
    the static correction) is 1e7 off the full model at 15 Hz; refused in one line."""
    text = _with_value(_with_value(RIG_TEXT, "suspension_damping_n_s_per_m", "1e8").decode(), "suspension_damping_n_s_per_m", "1e8", nth=1)
    code, _, err = design_output(capsys, "rig", ("both dampers 1e8", text))
    assert code == 2
    assert "rig.toml" in err and "modal model" in err, err

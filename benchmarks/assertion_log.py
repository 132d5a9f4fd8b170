"""pytest plugin for the threshold audit (``benchmarks/threshold_audit.py``): the tightest
instance of every numeric comparison an assertion made, per test and assertion line, written as
JSON lines to ``$ASSERTION_LOG.<worker>`` at the end of the session. Not part of the suite; the
audit runs it as

    ASSERTION_LOG=DIR/run PYTHONPATH=benchmarks:. python -m pytest -p assertion_log \\
        -o enable_assertion_pass_hook=true ...

A comparison ``a < b`` (or ``<=``, ``>``, ``>=``, chained) between two numbers in the first line of
pytest's explanation of a passing assertion is recorded with its relative margin
``(b - a) / max(|a|, |b|)`` (positive: holds); failing assertions are recorded from their report
with margin -inf. Assertions inside loops keep their tightest instance and a count."""

from __future__ import annotations

import json
import os
import re
import sys

_NUM = r"(?:np\.\w+\()?(-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|-?inf)\)?"
_CMP = re.compile(_NUM + r"\s*(<=|>=|<|>)\s*(?=" + _NUM + r")")
_TAIL = re.compile(r"\s*(<=|>=|<|>)\s*" + _NUM)
_records: dict[tuple[str, int], dict] = {}


def comparisons(line: str) -> list[tuple[float, str, float]]:
    """The numeric comparisons ``(a, op, b)`` in one line of an explanation."""
    out = []
    for m in _CMP.finditer(line):
        a, op = float(m.group(1)), m.group(2)
        t = _TAIL.match(line, m.end() - len(m.group(0)) + m.group(0).rfind(op))
        if t:
            out.append((a, op, float(t.group(2))))
    return out


def margin(a: float, op: str, b: float) -> float:
    """Relative margin of ``a op b``: positive when it holds, in units of the larger value."""
    gap = (b - a) if op in ("<", "<=") else (a - b)
    scale = max(abs(a), abs(b))
    return gap / scale if scale > 0 and scale != float("inf") else gap


def _keep(nodeid: str, lineno: int, orig: str, cmps, failed: bool) -> None:
    m = min((margin(*c) for c in cmps), default=None) if not failed else float("-inf")
    if m is None:
        return
    key = (nodeid, lineno)
    rec = _records.get(key)
    if rec is None:
        _records[key] = rec = {"test": nodeid, "line": lineno, "source": orig[:200], "count": 0}
    rec["count"] += 1
    if "margin" not in rec or m < rec["margin"]:
        rec.update(margin=m, comparisons=[list(c) for c in cmps])


def _asserting_file() -> str:
    """The file of the frame whose assertion passed (the first frame outside pytest, pluggy
    and this plugin)."""
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_filename
        if not any(part in name for part in ("/_pytest/", "/pluggy/", "assertion_log")):
            return name
        f = f.f_back
    return ""


def pytest_assertion_pass(item, lineno, orig, expl):
    if f"{os.sep}tests{os.sep}" not in _asserting_file():  # the suite's own assertions, not its libraries'
        return
    first = expl.splitlines()[0] if expl else ""
    _keep(item.nodeid, lineno, orig, comparisons(first), False)


def pytest_runtest_logreport(report):
    if report.failed and report.when == "call":
        text = str(report.longrepr)
        line = next((ln for ln in text.splitlines() if ln.startswith("E   ")), "")
        _keep(report.nodeid, -1, line, comparisons(line), True)


def pytest_sessionfinish(session):
    base = os.environ.get("ASSERTION_LOG")
    if not base:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    with open(f"{base}.{worker}", "w") as fh:
        for rec in _records.values():
            fh.write(json.dumps(rec) + "\n")

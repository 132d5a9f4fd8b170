"""The documentation of record resolves: every relative link in the README, ``docs/`` and
``instruments/README.md`` points at a file that exists, and every repository path they name in
backticks (``hbtest/...py``, ``benchmarks/...``, ``sweeps/...toml``, ...) exists, so a move
cannot leave a document pointing at a room that is gone. The README stays a newcomer's page."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", ROOT / "instruments" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")
#: paths named in the documents that belong to another repository (said beside them there)
EXTERNAL = {"docs/protocol.md"}  # HELIC-DAQ's specification (docs/helic.md)
PATH = re.compile(r"`((?:hbtest|benchmarks|scripts|tests|instruments|sweeps|campaigns|docs)/[\w./-]*\w)(?::[\w.]+)?`")


def _links(doc: Path):
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        yield target.split("#")[0]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc):
    missing = [t for t in _links(doc) if t and not (doc.parent / t).exists()]
    assert not missing, missing


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(doc):
    named = set(PATH.findall(doc.read_text(encoding="utf-8")))
    missing = sorted(p for p in named if not (ROOT / p).exists() and p not in EXTERNAL and not any(c in p for c in "*<>"))
    assert not missing, missing


def test_the_readme_is_a_newcomers_page():
    """At most ~200 lines, the two commands first."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    assert text.index("## The two commands") < text.index("## A tour of the store")

"""The shape of the house (docs/architecture.md): no import cycle among hbtest modules, TOML is read only
by the config layer, and the leaf modules stay leaves.

Every ``hbtest`` module is parsed with :mod:`ast` (nothing is imported). Its imports are
collected at module level *and* inside functions/classes (a lazy import still couples two
rooms), relative imports resolved; only imports under ``if TYPE_CHECKING:`` are ignored (never
executed). ``import a.b.c`` from outside package ``a.b`` also runs ``a/__init__`` and
``a/b/__init__``: those edges are included. Works on whatever modules exist (packages being
split by other work included).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hbtest"
TOML_READERS = {"hbtest.config.files", "hbtest.config.section"}  # the one TOML reader (load_toml), and the leaf schema
# leaf modules and the hbtest modules each may import (docs/architecture.md)
LEAVES = {
    "hbtest.errors": set(),
    # structures: lazily, in BeamSpec.build (the import runs hbtest.method's __init__, a docstring)
    "hbtest.config.section": {"hbtest.errors", "hbtest.method", "hbtest.method.structures"},
    "hbtest.rig.registry": {"hbtest.errors"},
}


def module_name(path: Path, root: Path = PACKAGE) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    return {module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.AST):
    """Every Import/ImportFrom node, at any depth, outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        if is_type_checking_block(node):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_names(name: str, path: Path, known=frozenset()) -> set[str]:
    """Absolute names of the modules ``name`` imports. ``from pkg import x``: ``pkg.x`` when
    that is a ``known`` module (a submodule), else ``pkg`` (an attribute of it)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in import_nodes(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
            continue
        if node.level:
            base = name.split(".")
            if not is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            stem = ".".join(base + ([node.module] if node.module else []))
        else:
            stem = node.module
        for a in node.names:
            sub = f"{stem}.{a.name}"
            out.add(sub if sub in known else stem)
    return out


def import_graph(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (directly, or as parent packages run)."""
    mods = modules(root)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = set()
        for target in imported_names(name, path, mods.keys()):
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                t = ".".join(parts[:i])
                if t not in mods or t == name:
                    continue
                is_ancestor_of_importer = name.startswith(t + ".")
                if i < len(parts) and is_ancestor_of_importer:
                    continue  # a parent package of the importer is already initialised
                edges.add(t)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle as a list of modules (first == last), or None. Iterative three-colour DFS."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = {n: WHITE for n in graph}
    for root in sorted(graph):
        if colour[root] != WHITE:
            continue
        path = [root]
        iters = [iter(sorted(graph[root]))]
        colour[root] = GREY
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                colour[path.pop()] = BLACK
                iters.pop()
            elif colour[nxt] == GREY:
                return path[path.index(nxt) :] + [nxt]
            elif colour[nxt] == WHITE:
                colour[nxt] = GREY
                path.append(nxt)
                iters.append(iter(sorted(graph[nxt])))
    return None


def test_the_cycle_finder_finds_cycles():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}) is None


def test_imports_resolve_on_a_small_package(tmp_path):
    files = {
        "pkg/__init__.py": "",
        "pkg/base.py": "import numpy\n",
        "pkg/sub/__init__.py": "from .leaf import X\n",
        "pkg/sub/leaf.py": "from .. import base\nfrom ..base import numpy\nX = 1\n",
        "pkg/sub/user.py": (
            "from typing import TYPE_CHECKING\nfrom . import leaf\nfrom .. import sub\n"
            "if TYPE_CHECKING:\n    from pkg import lazy\n"
            "def f():\n    import pkg.other.deep\n"
        ),
        "pkg/other/__init__.py": "",
        "pkg/other/deep.py": "",
        "pkg/lazy.py": "",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    g = import_graph(tmp_path / "pkg")
    assert module_name(tmp_path / "pkg" / "sub" / "__init__.py", tmp_path / "pkg") == "pkg.sub"
    assert g["pkg.base"] == set()
    assert g["pkg.sub"] == {"pkg.sub.leaf"}
    assert g["pkg.sub.leaf"] == {"pkg.base"}
    # own package by name (an attribute import), a submodule, a function-level import with the
    # parent packages it runs; the TYPE_CHECKING import is not followed
    assert g["pkg.sub.user"] == {"pkg.sub.leaf", "pkg.sub", "pkg.other", "pkg.other.deep"}
    assert find_cycle(g) is None
    (tmp_path / "pkg" / "base.py").write_text("def f():\n    from .sub import user\n")
    assert find_cycle(import_graph(tmp_path / "pkg")) is not None  # base -> sub.user -> sub -> leaf -> base


def test_no_import_cycle_among_hbtest_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_only_the_config_layer_imports_tomllib():
    readers = {n for n, p in modules().items() if any(t.split(".")[0] == "tomllib" for t in imported_names(n, p))}
    assert readers <= TOML_READERS, readers - TOML_READERS


@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_leaf_modules_stay_leaves(leaf):
    g = import_graph()
    assert leaf in g
    assert g[leaf] <= LEAVES[leaf], g[leaf] - LEAVES[leaf]


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen, stack = set(), [start]
    while stack:
        for t in graph.get(stack.pop(), ()):
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return seen


def _room(name: str, room: str) -> bool:
    return name == room or name.startswith(room + ".")


#: layering rules (docs/architecture.md): a room and the rooms it must never reach, directly or
#: through others
NEVER_REACHES = {
    "hbtest.config": ("hbtest.point", "hbtest.calibration"),  # definition files, not the method
    "hbtest.store": ("hbtest.config",),  # the store takes values, never parses a file
    "hbtest.analysis": ("hbtest.sweep",),  # analysis reads stores; it never runs a sweep
}


#: the rooms the package top holds besides its folders (docs/architecture.md)
TOP_MODULES = {"hbtest", "hbtest.cli", "hbtest.errors", "hbtest.events"}


def test_the_package_top_holds_only_the_command_line_errors_and_events():
    top = {n for n in modules() if n.count(".") <= 1 and not (PACKAGE / n.split(".")[-1]).is_dir()}
    assert top == TOP_MODULES, sorted(top ^ TOP_MODULES)


def test_the_method_imports_nothing_of_hbtest_but_itself_and_errors():
    """``method/`` is the equations: no config, no rig, no store."""
    g = import_graph()
    bad = {(m, t) for m, ts in g.items() if _room(m, "hbtest.method") for t in ts
           if not (_room(t, "hbtest.method") or t in ("hbtest", "hbtest.errors"))}
    assert not bad, sorted(bad)


def test_the_simulated_instruments_are_imported_only_by_the_commands():
    """``serve/`` (simulated instruments) is used by ``hbtest serve`` and the tests; a driver in
    ``rig/`` never imports the fake that tests it (the fake must not share the driver's code)."""
    g = import_graph()
    users = {m for m, ts in g.items() if any(_room(t, "hbtest.serve") for t in ts) and not _room(m, "hbtest.serve")}
    assert all(_room(m, "hbtest.commands") for m in users), sorted(users)
    assert not [m for m in g if _room(m, "hbtest.rig") and any(_room(t, "hbtest.serve") for t in reachable(g, m))]


#: the direct imports that still break a rule, each to be removed (not to be added to):
#: ``config.rig`` applies a calibration record while parsing ``[sensors]`` (the record format
#: belongs beside the sensors, not in ``calibration/`` with the rig procedures: a move left for
#: the renaming of rooms), and ``config.sweep`` checks ``solver.profile`` against the registry
#: of profiles in ``point`` (wants a lazy name registry like the rig kinds'), and reads the
#: arclength defaults from ``continuation.settings``, whose package runs the arclength corrector
#: (the settings want a home outside that package); ``store.run.tolerance_from_attrs``
#: re-parses the stored sweep text for stores written before ``tolerance_m`` was stored (it
#: belongs with its one user, the convergence plot)
#: the arclength settings import runs ``hbtest.sweep`` and ``hbtest.sweep.arclength`` too
KNOWN_BREACHES = {("hbtest.config.rig", "hbtest.calibration"), ("hbtest.config.sweep", "hbtest.point"),
                  ("hbtest.config.sweep", "hbtest.sweep"), ("hbtest.config.sweep", "hbtest.sweep.arclength"),
                  ("hbtest.config.sweep", "hbtest.sweep.arclength.settings"), ("hbtest.store.run", "hbtest.config")}


@pytest.mark.parametrize("room", sorted(NEVER_REACHES))
def test_layering_rules(room):
    g = {m: {t for t in ts if (m, t) not in KNOWN_BREACHES} for m, ts in import_graph().items()}
    bad = {(m, t) for m in g if _room(m, room) for t in reachable(g, m)
           if any(_room(t, forbidden) for forbidden in NEVER_REACHES[room])}
    assert not bad, sorted(bad)


def test_the_known_breaches_are_still_there():
    """Each allowed breach exists (remove it from the list once the import is gone)."""
    g = import_graph()
    assert all(t in g[m] for m, t in KNOWN_BREACHES), [b for b in KNOWN_BREACHES if b[1] not in g[b[0]]]


def test_the_commands_are_the_only_command_line():
    """Only ``hbtest.cli`` and ``hbtest.commands`` parse arguments: the library takes values."""
    parsers = {n for n, p in modules().items() if "argparse" in imported_names(n, p)}
    assert all(n == "hbtest.cli" or _room(n, "hbtest.commands") for n in parsers), parsers


MAX_FUNCTION_LINES = 60
#: functions allowed over MAX_FUNCTION_LINES, each with its reason (remove an entry once it is split)
#: functions allowed over MAX_FUNCTION_LINES, each with its reason (none today: keep it that way)
LONG_FUNCTIONS: dict[str, str] = {}


def function_lengths() -> dict[str, int]:
    """``module.function`` -> lines from the ``def`` line to the last line (nested functions
    counted on their own as well as inside their parent)."""
    out = {}
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{name}.{node.name}"
                out[key] = max(out.get(key, 0), node.end_lineno - node.lineno + 1)
    return out


def test_functions_are_at_most_60_lines():
    """A function reads top-down in one screen: longer ones are split into named steps; the
    few exceptions are listed with their reason in LONG_FUNCTIONS."""
    long = {k: n for k, n in function_lengths().items() if n > MAX_FUNCTION_LINES and k not in LONG_FUNCTIONS}
    assert not long, sorted(long.items(), key=lambda kv: -kv[1])


def test_the_long_function_allowlist_is_current():
    """Every allowed long function still exists and is still long, and says why it is allowed."""
    lengths = function_lengths()
    stale = [k for k in LONG_FUNCTIONS if lengths.get(k, 0) <= MAX_FUNCTION_LINES]
    assert not stale, stale
    assert all(reason.strip() for reason in LONG_FUNCTIONS.values())

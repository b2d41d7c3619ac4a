"""Imports point down: the runtime never imports the tests' tooling, the core never imports an engine.

Every ``.py`` file of the runtime packages is parsed (nothing is imported), and every
import in it is checked - module level or inside a function, ``import x``, ``from x
import y``, relative imports, and ``importlib.import_module("x")`` / ``__import__("x")``
with a literal name:

- no runtime package imports ``tests`` (``tests/toolchain`` fetches and starts the
  servers the tests use; ``tests/services`` runs them) nor the removed
  ``omni_iceberg.toolchain``;
- the core (``omni_iceberg``, ``catalog_ext``, ``governance``) never imports
  ``spark_udfs``: Spark registers itself through :mod:`omni_iceberg.engines`.

Layers only point down. A unit is ``catalog_ext``, ``governance``, ``spark_udfs``, or one
subpackage or module of ``omni_iceberg`` (``omni_iceberg/explore/``, ``omni_iceberg/engines.py``);
the layers, lowest first:

1. ``catalog_ext``: imports none of the others;
2. the core, ``omni_iceberg``'s units below the facade: no governance, no engine. Its
   shared read layer, ``omni_iceberg/read/`` (reader, SQL guard, scopes, DuckDB sandbox),
   imports nothing of ``omni_iceberg``; explore, index, hot, backfill and features read
   through it. Explore and hot sit beside each other (the facade plugs the hot route
   into the planner), and features do not import explore;
3. ``governance`` and the engines (``spark_udfs``): governance imports no engine and
   nothing imports an engine (Spark registers itself through :mod:`omni_iceberg.engines`);
4. the facade: ``omni_iceberg/api.py``, ``cli/``, ``demo/`` and ``omni_iceberg/__init__.py``,
   which only the facade imports.

No two units import each other, however indirectly, and no two modules either (an
import under ``TYPE_CHECKING`` or inside a function is an import); no unit imports
another's private (``_name``) names.

The Maven locks the runtime reads ship with it: each ``*.lock.toml`` under a runtime
package is named by pyproject.toml's package data, and pins a SHA-1 per artifact.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ("omni_iceberg", "catalog_ext", "governance", "spark_udfs")
CORE = ("omni_iceberg", "catalog_ext", "governance")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # as written, relative imports made absolute
    name: str | None = None  # ``from module import name``; None for ``import module`` and import_module


def imports_of(path: Path, module: str | None = None) -> list[Import]:
    """Every import in the file at ``path`` (module ``module``, by default the one its place in
    the repository makes it): module level or inside a function, relative ones made absolute,
    ``import_module`` / ``__import__`` with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = module or _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found += [Import(node.lineno, target, alias.name) for alias in node.names]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append(Import(node.lineno, node.args[0].value))
    return found


def imported_modules(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in the file at ``path`` (see :func:`imports_of`)."""
    found: list[tuple[int, str]] = []
    for imp in imports_of(path, module):
        found.append((imp.line, imp.module))
        if imp.name and imp.name != "*":  # ``from pkg import sub``: ``sub`` may be a module of ``pkg``
            found.append((imp.line, f"{imp.module}.{imp.name}"))
    return found


def _under(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _violations(packages: tuple[str, ...], forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            seen = set()
            for line, module in imported_modules(path):
                if line not in seen and any(_under(module, f) for f in forbidden):
                    seen.add(line)
                    out.append(f"{path.relative_to(ROOT)}:{line} imports {module}")
    return out


def test_the_runtime_never_imports_the_tests_or_their_tooling():
    assert _violations(RUNTIME, ("tests", "omni_iceberg.toolchain")) == []
    assert not list((ROOT / "omni_iceberg").glob("toolchain/*.py")), "dev tooling lives in tests/toolchain"


def test_the_core_never_imports_the_spark_engine():
    assert _violations(CORE, ("spark_udfs",)) == []


def test_the_scan_sees_lazy_and_relative_imports(tmp_path):
    """The checker itself: an import inside a function, a relative one and import_module are all seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from spark_udfs.compaction import x\n    from . import compaction\n"
                     "    import importlib\n    importlib.import_module('tests.toolchain.trino')\n")
    modules = [m for _, m in imported_modules(probe, "governance.probe")]
    assert "spark_udfs.compaction" in modules and "governance.compaction" in modules
    assert "tests.toolchain.trino" in modules


#: the facade: the units only the facade imports (it may import any unit)
FACADE = frozenset({"omni_iceberg", "omni_iceberg.api", "omni_iceberg.cli", "omni_iceberg.demo"})

#: units of the core that sit beside each other, though no cycle would stop one importing the other
BESIDE: dict[tuple[str, str], str] = {
    ("omni_iceberg.explore", "omni_iceberg.hot"):
        "the planner consults the hot route the facade registers (omni_iceberg.explore.routes)",
    ("omni_iceberg.hot", "omni_iceberg.explore"): "hot reads through omni_iceberg.read, as explore does",
    ("omni_iceberg.features", "omni_iceberg.explore"): "a feature's filter is checked by omni_iceberg.read.guard",
}

#: (unit, unit) imports that break the layers today, each owned by work under way, with why
#: and who removes it. The list only shrinks: an entry whose import is gone fails the test.
#: Empty: the last ones (omni_iceberg/toolchain -> spark_udfs, governance -> spark_udfs,
#: omni_iceberg.engines <-> omni_iceberg.backfill) went with the work that owned them.
ALLOWED: dict[tuple[str, str], str] = {}


def unit_of(module: str) -> str:
    """The unit a module belongs to: its top package, or ``omni_iceberg``'s subpackage or module."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "omni_iceberg" and len(parts) > 1 else parts[0]


@dataclass(frozen=True)
class Edge:
    source: str  # module importing
    target: str  # module imported
    where: str  # file:line
    name: str | None  # the name imported from ``target``, when one is


@cache
def runtime_modules() -> dict[str, Path]:
    return {_module_of(path): path for package in RUNTIME for path in sorted((ROOT / package).rglob("*.py"))}


@cache
def runtime_imports() -> tuple[Edge, ...]:
    """Every import of a runtime module by a runtime module: ``from a import b`` imports module
    ``a.b`` when there is one, else ``a`` (``b`` a name of it)."""
    modules = runtime_modules()
    edges = []
    for source, path in modules.items():
        for imp in imports_of(path, source):
            target, name = imp.module, imp.name
            if name and f"{target}.{name}" in modules:
                target, name = f"{target}.{name}", None
            while target and target not in modules:  # ``import a.b.c`` where c is a name, not a module
                target = target.rpartition(".")[0]
            if target and target != source:
                edges.append(Edge(source, target, f"{path.relative_to(ROOT)}:{imp.line}", name))
    return tuple(edges)


def unit_graph(edges=None) -> nx.DiGraph:
    """Units and the imports between them; each edge's ``at`` lists where (file:line -> module)."""
    graph = nx.DiGraph()
    graph.add_nodes_from({unit_of(m) for m in runtime_modules()})
    for e in runtime_imports() if edges is None else edges:
        a, b = unit_of(e.source), unit_of(e.target)
        if a != b:
            graph.add_edge(a, b)
            at = graph.edges[a, b].setdefault("at", [])
            if f"{e.where} -> {e.target}" not in at:
                at.append(f"{e.where} -> {e.target}")
    return graph


def _layer_refusal(source: str, target: str) -> str | None:
    """Why unit ``source`` may not import unit ``target`` (None: it may)."""
    if source == "catalog_ext":
        return "catalog_ext is the lowest layer: it imports nothing above it"
    if target in FACADE and source not in FACADE:
        return "only the facade (api, cli, demo, omni_iceberg/__init__) imports the facade"
    if target == "spark_udfs" and source != "spark_udfs":
        return "nothing imports an engine: Spark registers itself through omni_iceberg.engines"
    if target == "governance" and source.startswith("omni_iceberg.") and source not in FACADE:
        return "the core imports no governance: governance re-lays out tables from above it"
    if source == "omni_iceberg.read" and target.startswith("omni_iceberg."):
        return "the read layer imports nothing of omni_iceberg: explore, index, hot, backfill and features share it"
    return BESIDE.get((source, target))


def _cycles_text(graph: nx.DiGraph, label) -> list[str]:
    out = []
    for cycle in sorted(nx.simple_cycles(graph), key=lambda c: (len(c), c))[:10]:
        steps = [f"{a} -> {b}: {', '.join(label(a, b)[:3])}" for a, b in zip(cycle, cycle[1:] + cycle[:1])]
        out.append(" -> ".join(cycle + cycle[:1]) + "\n    " + "\n    ".join(steps))
    return out


def test_no_import_cycle_among_units():
    graph = unit_graph()
    graph.remove_edges_from(ALLOWED)
    cycles = _cycles_text(graph, lambda a, b: graph.edges[a, b]["at"])
    assert not cycles, "units importing each other (file:line of each step):\n  " + "\n  ".join(cycles)


def test_no_import_cycle_among_modules():
    """Within a unit too: two modules that need each other are one module, or share a third below both."""
    graph = nx.DiGraph()
    for e in runtime_imports():
        if (unit_of(e.source), unit_of(e.target)) not in ALLOWED:
            graph.add_edge(e.source, e.target)
            at = graph.edges[e.source, e.target].setdefault("at", [])
            if e.where not in at:
                at.append(e.where)
    cycles = _cycles_text(graph, lambda a, b: graph.edges[a, b]["at"])
    assert not cycles, "modules importing each other (file:line of each step):\n  " + "\n  ".join(cycles)


def test_layers_only_point_down():
    wrong = dict.fromkeys(f"{e.where} imports {e.target}: {why}" for e in runtime_imports()
                          if unit_of(e.source) != unit_of(e.target)
                          and (unit_of(e.source), unit_of(e.target)) not in ALLOWED
                          and (why := _layer_refusal(unit_of(e.source), unit_of(e.target))))
    assert not wrong, "imports against the layers:\n  " + "\n  ".join(wrong)


def _private_across_units(edges) -> list[str]:
    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    return [f"{e.where} imports {e.target}{'.' + e.name if e.name else ''}" for e in edges
            if unit_of(e.source) != unit_of(e.target)
            and (private(e.name or "") or any(private(part) for part in e.target.split(".")))]


def test_no_private_name_is_imported_across_units():
    wrong = _private_across_units(runtime_imports())
    assert not wrong, "private names imported from another unit (make them public where they live):\n  " + \
        "\n  ".join(wrong)


def test_the_allowlist_only_shrinks():
    """Each allowed import is still there: once its work removed it, so goes its entry."""
    graph = unit_graph()
    gone = [f"{a} -> {b} ({why})" for (a, b), why in ALLOWED.items() if not graph.has_edge(a, b)]
    assert not gone, "no longer imported, remove from ALLOWED:\n  " + "\n  ".join(gone)


def test_the_checks_see_cycles_layers_and_private_names():
    """The checker itself, on a made-up graph: a lazy cycle, an upward import, a private name."""
    edges = [Edge("omni_iceberg.hot.route", "omni_iceberg.explore.planner", "hot/route.py:3", "plan_query"),
             Edge("omni_iceberg.explore.planner", "omni_iceberg.hot.route", "explore/planner.py:9", "decide"),
             Edge("omni_iceberg.index.lookup", "omni_iceberg.explore.reader", "index/lookup.py:5", "_flatten")]
    graph = unit_graph(edges)
    assert [sorted(c) for c in nx.simple_cycles(graph)] == [["omni_iceberg.explore", "omni_iceberg.hot"]]
    assert "index/lookup.py:5 -> omni_iceberg.explore.reader" in graph.edges["omni_iceberg.index",
                                                                           "omni_iceberg.explore"]["at"]
    assert _layer_refusal("omni_iceberg.explore", "governance") and _layer_refusal("governance", "spark_udfs")
    assert _layer_refusal("catalog_ext", "omni_iceberg.features") and _layer_refusal("spark_udfs", "omni_iceberg.api")
    assert _layer_refusal("omni_iceberg.cli", "omni_iceberg.api") is None
    assert _layer_refusal("governance", "omni_iceberg.explore") is None
    assert _layer_refusal("omni_iceberg.read", "omni_iceberg.context") and _layer_refusal("omni_iceberg.hot",
                                                                                          "omni_iceberg.explore")
    assert _layer_refusal("omni_iceberg.explore", "omni_iceberg.read") is None
    assert unit_of("omni_iceberg.engines") == "omni_iceberg.engines" and unit_of("omni_iceberg") == "omni_iceberg"
    assert _private_across_units(edges) == ["index/lookup.py:5 imports omni_iceberg.explore.reader._flatten"]


def _package_data() -> dict[str, list[str]]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-data"]


@pytest.mark.parametrize("lock", sorted(p.relative_to(ROOT).as_posix() for package in RUNTIME
                                        for p in (ROOT / package).rglob("*.lock.toml")))
def test_the_runtimes_maven_locks_ship_with_it_and_pin_every_sha1(lock):
    package, _, inside = lock.partition("/")
    assert any(fnmatch.fnmatch(inside, pattern) for pattern in _package_data().get(package, [])), \
        f"add {inside!r} to [tool.setuptools.package-data] {package} in pyproject.toml"
    _pins_every_sha1(ROOT / lock)


def test_the_tests_maven_locks_pin_every_sha1():
    locks = sorted((ROOT / "tests" / "toolchain").glob("*.lock.toml"))
    assert locks
    for lock in locks:
        _pins_every_sha1(lock)


def _pins_every_sha1(lock: Path) -> None:
    from omni_iceberg.jvm.maven_lock import read_lock

    with open(lock, "rb") as f:
        tables = [name for name, value in tomllib.load(f).items()
                  if isinstance(value, dict) and all(isinstance(v, str) for v in value.values())]
    assert tables, f"{lock} has no table of artifacts"
    for table in tables:
        for artifact in read_lock(lock, table):
            assert len(artifact.sha1) == 40 and int(artifact.sha1, 16) >= 0, (lock, artifact.coordinates)

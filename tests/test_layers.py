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

The Maven locks the runtime reads ship with it: each ``*.lock.toml`` under a runtime
package is named by pyproject.toml's package data, and pins a SHA-1 per artifact.
"""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = ("omni_iceberg", "catalog_ext", "governance", "spark_udfs")
CORE = ("omni_iceberg", "catalog_ext", "governance")


def _module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(path: Path, module: str | None = None) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in the file at ``path`` (module ``module``, by default
    the one its place in the repository makes it), relative imports made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    module = module or _module_of(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # ``from pkg import sub``: ``sub`` may be a module of ``pkg``
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names if alias.name != "*"]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("import_module", "__import__"):
                found.append((node.lineno, node.args[0].value))
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

"""The engine registry: which backfill engines, SQL executors and engine operations are installed.

The core never imports an engine, and the registry imports nothing of the core.
Engines register themselves here - the core's own (local) when the core first looks
one up (:func:`omni_iceberg.backfill.choose.backfill_engine`), others (Spark) through
the entry-point group
:data:`ENTRY_POINT_GROUP`, whose entries are registration hooks: callables taking
no argument that call :func:`register_backfill_engine` / :func:`register_sql_executor`
/ :func:`register_engine_operation`. The group is loaded once, lazily, the first time a
name is not yet known, so a plain ``import omni_iceberg`` starts no engine.

A backfill engine factory is called as ``factory(ctx, **options)`` (``ctx``: the catalog's
:class:`~omni_iceberg.context.OmniContext`) and returns a
:class:`~omni_iceberg.backfill.protocol.BackfillEngine` (a context manager that
executes a finished plan's units). A SQL executor is ``fn(ctx, sql_text) -> pyarrow.Table``
for SQL already rewritten to the engine's dialect. An engine operation is any other
function of an engine the core calls by name, with the arguments :data:`OPERATIONS`
lists (governance's rewrites on Spark, the settings ``omni spark-config`` writes).

>>> register_sql_executor("echo", lambda ctx, sql: sql)
>>> sql_executor("echo")(None, "SELECT 1")
'SELECT 1'
>>> sql_executor("no-such-engine")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
catalog_ext.errors.ConfigError: no SQL executor named 'no-such-engine' is installed (installed: ...
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from catalog_ext.errors import ConfigError

#: the entry-point group engines declare in their package metadata
ENTRY_POINT_GROUP = "omni_iceberg.engines"

#: the extra that installs an engine shipped with omni-iceberg, for the "install it" hint
KNOWN_EXTRAS = {"spark": "omni-iceberg[spark]"}

#: the engine operations the core calls, and how: ``engine_operation(engine, name)(...)``
OPERATIONS = {
    "settings": "(config) -> dict[str, str]: the settings that make the engine read omni's catalog",
    "compact": "(session, catalog_name, writer, snapshot_id, paths, properties): rewrite files onto a staged write",
    "rebucket": "(session, catalog_name, writer, snapshot_id, buckets, properties): rewrite a table onto a staged "
                "write with a new bucket count",
    "sweep_orphans": "(session, catalog, state, *, older_than_s, dry_run) -> SweepReport: find and delete a "
                     "family's orphan files",
    "orphan_grace_blocker": "(older_than_s) -> str | None: why the engine cannot sweep with this grace period",
}

BackfillEngineFactory = Callable[..., Any]
SqlExecutor = Callable[[Any, str], Any]

_BACKFILL: dict[str, BackfillEngineFactory] = {}
_SQL: dict[str, SqlExecutor] = {}
_OPERATIONS: dict[str, dict[str, Callable[..., Any]]] = {}
_lock = threading.RLock()
_loaded = False
_load_errors: dict[str, str] = {}


def register_backfill_engine(name: str, factory: BackfillEngineFactory) -> None:
    """Make ``factory(ctx, **options)`` the backfill engine called ``name`` (last registration wins).

    A factory may carry ``factory.unavailable(config) -> str | None``: why the engine
    cannot run for that configuration here (``--engine auto`` then stays local).
    """
    with _lock:
        _BACKFILL[name] = factory


def register_sql_executor(name: str, fn: SqlExecutor) -> None:
    """Make ``fn(ctx, sql_text) -> pyarrow.Table`` the SQL executor called ``name``."""
    with _lock:
        _SQL[name] = fn


def register_engine_operation(engine: str, operation: str, fn: Callable[..., Any]) -> None:
    """Make ``fn`` the operation ``operation`` (one of :data:`OPERATIONS`) of engine ``engine``."""
    if operation not in OPERATIONS:
        raise ValueError(f"unknown engine operation {operation!r} (known: {', '.join(sorted(OPERATIONS))})")
    with _lock:
        _OPERATIONS.setdefault(operation, {})[engine] = fn


def backfill_engine(name: str) -> BackfillEngineFactory:
    """The factory of the backfill engine ``name``; a ConfigError saying what to install if none."""
    return _lookup(_BACKFILL, name, "backfill engine")


def sql_executor(name: str) -> SqlExecutor:
    """The SQL executor ``name`` (``fn(ctx, sql_text) -> pyarrow.Table``)."""
    return _lookup(_SQL, name, "SQL executor")


def engine_operation(engine: str, operation: str) -> Callable[..., Any]:
    """Operation ``operation`` of engine ``engine``; a ConfigError saying what to install if none."""
    return _lookup(_OPERATIONS.setdefault(operation, {}), engine, f"engine providing the {operation!r} operation")


def backfill_engines() -> list[str]:
    """Names of every installed backfill engine."""
    _load_entry_points()
    return sorted(_BACKFILL)


def sql_executors() -> list[str]:
    """Names of every installed SQL executor."""
    _load_entry_points()
    return sorted(_SQL)


def engine_unavailable(name: str, config: Any) -> str | None:
    """Why engine ``name`` cannot run here for ``config`` (not installed, or its own check), or None."""
    try:
        factory = backfill_engine(name)
    except ConfigError as e:
        return str(e)
    check = getattr(factory, "unavailable", None)
    return check(config) if check is not None else None


def _lookup(table: dict[str, Any], name: str, kind: str) -> Any:
    found = table.get(name)
    if found is None:
        _load_entry_points()
        found = table.get(name)
    if found is not None:
        return found
    hint = f"; install it: pip install '{KNOWN_EXTRAS[name]}'" if name in KNOWN_EXTRAS else ""
    broken = f"; its entry point failed to load: {_load_errors[name]}" if name in _load_errors else ""
    raise ConfigError(f"no {kind} named {name!r} is installed (installed: {', '.join(sorted(table)) or 'none'})"
                      f"{broken}{hint}")


def _load_entry_points() -> None:
    """Run every registration hook of :data:`ENTRY_POINT_GROUP` once."""
    global _loaded
    with _lock:
        if _loaded:
            return
        _loaded = True
        from importlib.metadata import entry_points

        for ep in entry_points(group=ENTRY_POINT_GROUP):
            try:
                ep.load()()
            except Exception as e:  # noqa: BLE001 - one broken plugin must not hide the others
                _load_errors[ep.name] = f"{ep.value}: {type(e).__name__}: {e}"


def reload_entry_points() -> None:
    """Forget that the entry points were loaded (after installing a plugin in this process)."""
    global _loaded
    with _lock:
        _loaded = False
        _load_errors.clear()


__all__ = ["ENTRY_POINT_GROUP", "OPERATIONS", "backfill_engine", "backfill_engines", "engine_operation",
           "engine_unavailable", "register_backfill_engine", "register_engine_operation", "register_sql_executor",
           "reload_entry_points", "sql_executor", "sql_executors"]

"""The engine registry: which engines are installed, and what each can do.

An engine offers CAPABILITIES (:data:`CAPABILITIES`) and registers only those it has,
each under its own name: ``register("backfill", "spark", factory)``. The core asks for a
capability by engine name - ``lookup("rewrite", "spark")`` - and a name nothing offers
that capability under is one :class:`~catalog_ext.errors.ConfigError` saying what is
installed, what the engine offers instead, or that no installed engine offers it, and
what to install. :func:`offering` lists the engines that offer a capability.

The core never imports an engine, and the registry imports nothing of the core. The
core's own engine (``local``: backfill, rewrite) registers when the core first looks one
up (:func:`omni_iceberg.backfill.choose.backfill_engine`,
:func:`governance.rewrite.rewrite_engine`); others (Spark) through the entry-point group
:data:`ENTRY_POINT_GROUP`, whose entries are registration hooks: callables taking no
argument that call :func:`register`. The group is loaded once, lazily, the first time a
name is not yet known, so a plain ``import omni_iceberg`` starts no engine.

A provider may carry ``provider.unavailable(config) -> str | None``: why the engine
cannot run for that configuration here (``--engine auto`` then stays local).

>>> register("sql", "echo", lambda ctx, sql: sql)
>>> lookup("sql", "echo")(None, "SELECT 1")
'SELECT 1'
>>> "echo" in offering("sql") and "sql" in capabilities_of("echo")
True
>>> lookup("sql", "no-such-engine")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
catalog_ext.errors.ConfigError: no SQL executor named 'no-such-engine' is installed (installed: ...
>>> lookup("export", "echo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
catalog_ext.errors.ConfigError: no export engine named 'echo' is installed (...); echo offers sql only
"""

from __future__ import annotations

import threading
from typing import Any

from catalog_ext.errors import ConfigError

#: the entry-point group engines declare in their package metadata
ENTRY_POINT_GROUP = "omni_iceberg.engines"

#: the extra that installs an engine shipped with omni-iceberg, for the "install it" hint
KNOWN_EXTRAS = {"spark": "omni-iceberg[spark]"}

#: what an engine can offer, and the provider it registers for it
CAPABILITIES = {
    "backfill": "factory(ctx, **options) -> BackfillEngine (omni_iceberg.backfill.protocol): executes the units "
                "of a finished plan; the core plans, tunes and commits",
    "rewrite": "factory(ctx=None, **options) -> RewriteEngine (governance.rewrite): writes governance's rewrites "
               "(compaction, re-bucketing) onto staging branches and finds orphan files; governance plans and commits",
    "ingest": "factory(ctx, **options): reads sources into staged batches; the core commits",
    "export": "factory(ctx, **options) -> runner: check() fails fast, run_parts(job, parts) writes the parts "
              "the core planned with omni_iceberg.explore.export.export_part; the core writes the manifest",
    "sql": "fn(ctx, sql_text) -> pyarrow.Table: runs SQL already rewritten to the engine's dialect",
    "settings": "fn(config) -> dict[str, str]: the settings that make the engine read omni's catalog",
}

#: how an error message names a provider of a capability
_NOUNS = {"sql": "SQL executor", "settings": "settings provider"}

_PROVIDERS: dict[str, dict[str, Any]] = {capability: {} for capability in CAPABILITIES}
_lock = threading.RLock()
_loaded = False
_load_errors: dict[str, str] = {}


def register(capability: str, name: str, provider: Any) -> None:
    """Make ``provider`` engine ``name``'s ``capability`` (one of :data:`CAPABILITIES`; last registration wins)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown engine capability {capability!r} (known: {', '.join(CAPABILITIES)})")
    with _lock:
        _PROVIDERS[capability][name] = provider


def lookup(capability: str, name: str) -> Any:
    """Engine ``name``'s provider of ``capability``; a ConfigError saying what is installed and what to install."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown engine capability {capability!r} (known: {', '.join(CAPABILITIES)})")
    found = _PROVIDERS[capability].get(name)
    if found is None:
        _load_entry_points()
        found = _PROVIDERS[capability].get(name)
    if found is not None:
        return found
    raise ConfigError(_missing(capability, name))


def offering(capability: str) -> list[str]:
    """Names of the installed engines that offer ``capability`` (empty: none does)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown engine capability {capability!r} (known: {', '.join(CAPABILITIES)})")
    _load_entry_points()
    return sorted(_PROVIDERS[capability])


def capabilities_of(name: str) -> list[str]:
    """The capabilities installed engine ``name`` offers (empty: no engine of that name is installed)."""
    _load_entry_points()
    return [c for c in CAPABILITIES if name in _PROVIDERS[c]]


def unavailable(capability: str, name: str, config: Any) -> str | None:
    """Why engine ``name`` cannot do ``capability`` here for ``config`` (not installed, or its own check), or None."""
    try:
        provider = lookup(capability, name)
    except ConfigError as e:
        return str(e)
    check = getattr(provider, "unavailable", None)
    return check(config) if check is not None else None


def sql_executor(name: str) -> Any:
    """Engine ``name``'s ``sql`` capability: ``fn(ctx, sql_text) -> pyarrow.Table``."""
    return lookup("sql", name)


def _missing(capability: str, name: str) -> str:
    noun = _NOUNS.get(capability, f"{capability} engine")
    installed = sorted(_PROVIDERS[capability])
    text = f"no {noun} named {name!r} is installed " + (
        f"(installed: {', '.join(installed)})" if installed else f"(no installed engine offers {capability})")
    offers = [c for c in CAPABILITIES if name in _PROVIDERS[c]]
    if offers:
        return f"{text}; {name} offers {', '.join(offers)} only"
    if name in _load_errors:
        text += f"; its entry point failed to load: {_load_errors[name]}"
    if name in KNOWN_EXTRAS:
        text += f"; install it: pip install '{KNOWN_EXTRAS[name]}'"
    return text


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


__all__ = ["CAPABILITIES", "ENTRY_POINT_GROUP", "KNOWN_EXTRAS", "capabilities_of", "lookup", "offering", "register",
           "reload_entry_points", "sql_executor", "unavailable"]

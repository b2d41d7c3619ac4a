"""The typed context every layer below the facade takes: configuration, catalog, store, id index.

:class:`~omni_iceberg.api.Omni` is what users call; explore, backfill, hot, index,
governance and the engines take an :class:`OmniContext` instead. It holds what they
may use and nothing more, so a lower layer cannot call back up into the facade's
verbs. The lookups every layer needs (a table's state at a version, its log, its tags,
a tag's version) are implemented here once; the facade delegates to them.

Work that follows a commit (hot-column syncs, automatic maintenance) is not the
context's: it registers on the store (:meth:`catalog_ext.store.FamilyStore.on_commit`),
wired by the facade.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catalog_ext.catalog import open_catalog
from catalog_ext.config import OmniConfig
from catalog_ext.contract import split_qualified
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore, VersionInfo
from catalog_ext.tags import resolve, tags_from_summaries
from omni_iceberg.index.core import IdIndex
from omni_iceberg.index.select import indexing_enabled, open_index
from omni_iceberg.index.staged import IndexingHook


@dataclass(frozen=True, eq=False)
class OmniContext:
    """One catalog's configuration, catalog and family store (see the module docstring)."""

    config: OmniConfig
    catalog: Any
    store: FamilyStore

    @classmethod
    def open(cls, config: OmniConfig, catalog: Any = None) -> OmniContext:
        """The context of ``config`` (``catalog``: already opened on it); its store indexes every
        write it makes before the logical commit that publishes it (write-then-commit)."""
        catalog = open_catalog(config) if catalog is None else catalog
        ctx = cls(config, catalog, FamilyStore(catalog))
        ctx.store.index_opener = ctx.index_opener
        ctx.store.write_hooks.append(IndexingHook(ctx.index_opener))
        return ctx

    def index_opener(self, identifier: str) -> IdIndex | None:
        """The index the writes of logical table ``identifier`` go to; None when ``OMNI_INDEX=off``
        (read per write, so turning indexing off needs no new context)."""
        return open_index(self.config, identifier) if indexing_enabled() else None

    def open_index(self, identifier: str, spec: str | None = None) -> IdIndex:
        """The id index of logical table ``identifier`` on ``spec``'s backend (default: the
        configured one), whether or not writes are indexed: lookups, verify, rebuild."""
        return open_index(self.config, identifier, spec)

    def state(self, name: str, as_of: int | str | None = None) -> FamilyState:
        """The five-layer mapping of ``name`` at logical version ``as_of`` (a number or a tag; default latest)."""
        ns, table = split_qualified(name)
        return self.store.load(ns, table, self.version_of(name, as_of))

    def log(self, name: str) -> list[VersionInfo]:
        """Every logical version of ``name``, oldest first."""
        ns, table = split_qualified(name)
        return self.store.log(ns, table)

    def tags(self, name: str) -> dict[str, int]:
        """Tag -> logical version of ``name``."""
        return tags_from_summaries([v.summary for v in self.log(name)])

    def version_of(self, name: str, as_of: int | str | None) -> int | None:
        """``as_of`` as a version number: ints and digits pass, a tag is looked up, None stays latest."""
        if as_of is None or isinstance(as_of, int) or str(as_of).strip().lstrip("-").isdigit():
            return resolve(name, {}, as_of)
        return resolve(self.state(name).table.identifier, self.tags(name), as_of)


__all__ = ["OmniContext"]

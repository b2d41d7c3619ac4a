"""Verbs on a logical table as a whole: drop it, tag a version, pin a version as a plain view.

Each takes the catalog's :class:`~omni_iceberg.context.OmniContext`;
:class:`~omni_iceberg.api.Omni` delegates to them (``omni table drop``, ``omni tag``,
``omni pin``).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from catalog_ext.contract import split_qualified
from catalog_ext.errors import NoSuchVersionError
from catalog_ext.family import FamilyState
from catalog_ext.family_document import folder_of, segment_location
from catalog_ext.pinned_views import PinnedViewError, drop_pinned_view, pin_view, pinned_views, tag_view_name
from catalog_ext.store import SUMMARY_FAMILY
from catalog_ext.tags import TagVersion, check_label, resolve
from catalog_ext.views import NoSuchViewError
from omni_iceberg.context import OmniContext
from omni_iceberg.hot.store import HotStoreError, store_for


def drop_table(ctx: OmniContext, name: str, *, purge: bool = False) -> dict[str, Any]:
    """Drop logical table ``name``: its view first (it disappears in one step), its pinned views,
    every physical table of its family, and with ``purge`` its files, documents and view metadata."""
    from pyiceberg.io import load_file_io

    store, catalog = ctx.store, ctx.catalog
    ns, table = split_qualified(name)
    state = store.load(ns, table)  # names the table and lists known ones when it is missing
    view = store.views.load_view(ns, table)
    documents = [v["summary"][SUMMARY_FAMILY] for v in view.metadata["versions"]
                 if SUMMARY_FAMILY in v.get("summary", {})]
    segments = _segment_files(ctx, documents) if purge else []
    store.views.drop_view(ns, table)
    for pinned in pinned_views(store, ns, table):  # they read tables that are going away
        drop_pinned_view(store, pinned)
    dropped, missing = [], []
    for t in state.tables:
        if not catalog.table_exists(t.identifier):
            missing.append(t.identifier)
            continue
        (catalog.purge_table if purge else catalog.drop_table)(t.identifier)
        dropped.append(t.identifier)
    deleted = 0
    if purge:
        io = load_file_io(catalog.properties, view.metadata_location)
        for path in documents + segments + [view.metadata_location]:
            try:
                io.delete(path)
                deleted += 1
            except FileNotFoundError:
                pass
    hot = _forget_hot(ctx, state)
    return {"logical_table": state.table.identifier, "physical_tables": dropped, "already_gone": missing,
            "purged": purge, "files_deleted": deleted, "hot_data_dropped": hot}


def _forget_hot(ctx: OmniContext, state: FamilyState) -> bool:
    """Drop a dropped table's hot data (derived state: a failure is reported, not raised)."""
    if state.hot is None:
        return False
    try:
        store_for(ctx).forget(state.table.identifier)
        return True
    except HotStoreError as e:
        print(f"warning: the hot data of {state.table.identifier} stays in the hot store: {e}", file=sys.stderr)
        return False


def _segment_files(ctx: OmniContext, documents: list[str]) -> list[str]:
    """The segment files the family documents share (see catalog_ext.family_document)."""
    out: set[str] = set()
    for document in documents:
        try:
            out.update(segment_location(folder_of(document), n) for n in ctx.store.document_segments(document))
        except FileNotFoundError:
            continue  # a document already gone names nothing left to delete
    return sorted(out)


def tag(ctx: OmniContext, name: str, label: str, version: int | str | None = None,
        command: str = "") -> dict[str, Any]:
    """Name logical version ``version`` (default: the latest) ``label``, in one logical commit
    (:class:`catalog_ext.tags.TagVersion`), then bring the tag's pinned view to it."""
    check_label(label)
    ns, table = split_qualified(name)
    tags = ctx.tags(name)  # read once: it walks the kept versions
    clash = [t for t in tags if t != label and tag_view_name(table, t) == tag_view_name(table, label)]
    if clash:
        raise PinnedViewError(f"tag {label!r} of {ns}.{table} would share the view {tag_view_name(table, label)} "
                              f"with tag {clash[0]!r} (view names fold case, '.' and '-'); pick another name")
    previous = tags.get(label)
    latest = ctx.state(name).version
    target = resolve(f"{ns}.{table}", tags, version) if version is not None else latest
    if not 1 <= target <= latest:
        raise NoSuchVersionError(f"cannot tag version {target} of {name}: it has versions 1..{latest} "
                                 f"(see 'omni log {name}')")
    update = TagVersion(label, target)

    def updates(_latest: FamilyState) -> tuple:
        # checked again on every attempt: retention may have expired the version meanwhile
        # (its commit then also makes this attempt lose the swap and come back here)
        ctx.store.load(ns, table, target)
        return (update,)

    new_state = ctx.store.commit(ns, table, updates, operation="tag",
                                 command=command or f"tag {ns}.{table} {label} --version {target}",
                                 summary=lambda _latest: update.summary())
    out = {"logical_table": new_state.table.identifier, "tag": label, "version": target,
           "moved_from": previous if previous not in (None, target) else None,
           "logical_version": new_state.version, "view": None}
    out["view"] = _tag_view(ctx, ns, table, label, target)
    return out


def _tag_view(ctx: OmniContext, ns: str, table: str, label: str, version: int) -> str | None:
    """The tag's pinned view, brought to ``version``; derived state, so a failure only warns."""
    try:
        return pin_view(ctx.store, ns, table, version, tag=label).name
    except Exception as e:  # noqa: BLE001 - the tag is committed; 'omni pin NAME TAG' retries the view
        warnings.warn(f"tag {label!r} of {ns}.{table} is committed, but its view was not made: {e}; "
                      f"'omni pin {ns}.{table} {label}' makes it", stacklevel=4)
        return None


def pin(ctx: OmniContext, name: str, version: int | str) -> dict[str, Any]:
    """A plain Iceberg view of logical version ``version`` (or of a tag) for Spark SQL and Trino
    (:mod:`catalog_ext.pinned_views`), with the query that reads it."""
    ns, table = split_qualified(name)
    target = ctx.version_of(name, version)
    latest = ctx.state(name).version
    if target is None or not 1 <= target <= latest:
        raise NoSuchVersionError(f"cannot pin version {version} of {ns}.{table}: it has versions 1..{latest}")
    ctx.store.load(ns, table, target)  # an expired version says so, naming the oldest kept one
    is_tag = not (isinstance(version, int) or str(version).strip().isdigit())
    view = pin_view(ctx.store, ns, table, target, tag=str(version) if is_tag else None)
    catalog_name = ctx.config.catalog_name
    return {**view.to_dict(), "catalog": catalog_name,
            "spark": f"SELECT * FROM {catalog_name}.{view.name}",
            "trino": f"SELECT * FROM {catalog_name}.{view.name}"}


def unpin(ctx: OmniContext, name: str, version: int | str) -> dict[str, Any]:
    """Drop the pinned view of ``version`` (or of a tag); retention may then expire the version."""
    ns, table = split_qualified(name)
    is_tag = not (isinstance(version, int) or str(version).strip().isdigit())
    views = [v for v in pinned_views(ctx.store, ns, table)
             if (v.tag == str(version) if is_tag else (v.tag is None and v.version == int(version)))]
    if not views:
        raise NoSuchViewError(f"{ns}.{table} has no pinned view of {'tag ' if is_tag else 'version '}{version} "
                              f"(see 'omni pin {ns}.{table} --list')")
    return {"dropped": [v.name for v in views if drop_pinned_view(ctx.store, v)]}


def list_pinned_views(ctx: OmniContext, name: str) -> list[dict[str, Any]]:
    """Every pinned view of ``name``: version views and tag views."""
    ns, table = split_qualified(name)
    ctx.store.load(ns, table)  # names the table when it is missing
    return [v.to_dict() for v in pinned_views(ctx.store, ns, table)]


__all__ = ["drop_table", "list_pinned_views", "pin", "tag", "unpin"]

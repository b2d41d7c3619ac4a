"""Pinned views: one logical version (or a tag) of a logical table, as a plain Iceberg view.

Spark and Trino cannot time-travel a view (``VERSION AS OF`` is for tables), so a
reader of logical version 16 or of tag ``train-v1`` gets a view of its own, next to the
logical one::

    SELECT ... FROM omni.aidata.web__v16            -- omni pin aidata.web 16
    SELECT ... FROM omni.aidata.web__tag_train_v1   -- omni tag aidata.web train-v1

Its body is that version's own view SQL (every physical table ``VERSION AS OF`` the
snapshot the version pinned), so it reads exactly what ``omni sql --as-of`` reads, and
it prunes like the logical view. Each is a derived object: the family documents stay
the only truth, and a pinned view can be dropped and rebuilt at any time.

Lifetimes: a tag view follows its tag (moving the tag rewrites it); a version view
lives until ``omni pin --drop`` and keeps its version from retention meanwhile, like a
tag does; dropping the logical table drops them all. The ``__`` in the names is the
separator users cannot put in a logical table's name, so no pinned view can shadow a
logical table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from catalog_ext.contract import PHYSICAL_SEPARATOR
from catalog_ext.errors import CommitConflictError, OmniError
from catalog_ext.views import NoSuchViewError, ViewExistsError, ViewRepresentation, new_view_metadata, with_new_version

PROP_PINNED_OF = "omni.pinned-of"
PROP_PINNED_VERSION = "omni.pinned-version"
PROP_PINNED_TAG = "omni.pinned-tag"


class PinnedViewError(OmniError):
    """A pinned view that cannot be made: its name is taken by something else."""


@dataclass(frozen=True)
class PinnedView:
    name: str  # namespace.view
    of: str  # the logical table
    version: int
    tag: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"view": self.name, "of": self.of, "version": self.version, "tag": self.tag}


def version_view_name(table: str, version: int) -> str:
    return f"{table}{PHYSICAL_SEPARATOR}v{version}"


def tag_view_name(table: str, label: str) -> str:
    # tags may hold '.' and '-', which would need quoting in every engine; Trino folds case
    return f"{table}{PHYSICAL_SEPARATOR}tag_{re.sub(r'[^a-z0-9_]', '_', label.lower())}"


def _metadata_for(store: Any, namespace: str, table: str, version: int, tag: str | None,
                  current: dict[str, Any] | None) -> dict[str, Any]:
    from catalog_ext import view_sql

    state, logical = store._load_with_view(namespace, table, version)
    representations = [ViewRepresentation(d, view_sql.render_view_sql(state, d)) for d in ("spark", "trino")]
    properties = {PROP_PINNED_OF: f"{namespace}.{table}", PROP_PINNED_VERSION: str(version),
                  "comment": f"{namespace}.{table} as of logical version {version}"
                             + (f" (tag '{tag}')" if tag else "") + "; made by omni, read-only"}
    if tag:
        properties[PROP_PINNED_TAG] = tag
    summary = {"omni.pinned-version": str(version)}
    schema = view_sql.view_schema(state)
    if current is None:
        name = tag_view_name(table, tag) if tag else version_view_name(table, version)
        location = f"{logical.metadata['location'].rstrip('/')}/pinned/{name}"
        return new_view_metadata(location, schema, representations, [namespace], properties, summary,
                                 default_catalog=store.catalog.name)
    moved = with_new_version(current, schema, representations, [namespace], properties, summary,
                             default_catalog=store.catalog.name)
    return only_current_version(moved)


def only_current_version(metadata: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` without the versions a moved tag left behind.

    A pinned view means one version; where a tag pointed before is in the logical table's
    own log (``omni log``). Kept, every move would copy all earlier versions into the next
    metadata file - a tag moved 400 times made 112 MB of view metadata.
    """
    vid = metadata["current-version-id"]
    out = dict(metadata)
    out["versions"] = [v for v in metadata["versions"] if v["version-id"] == vid]
    out["version-log"] = [e for e in metadata["version-log"] if e["version-id"] == vid][-1:]
    used = {v["schema-id"] for v in out["versions"]}
    out["schemas"] = [x for x in metadata["schemas"] if x["schema-id"] in used]
    return out


def pin_view(store: Any, namespace: str, table: str, version: int, tag: str | None = None) -> PinnedView:
    """Create (or bring up to date) the view of ``version``; a tag's view when ``tag`` is given."""
    name = tag_view_name(table, tag) if tag else version_view_name(table, version)
    for _attempt in range(5):
        try:
            current = store.views.load_view(namespace, name)
        except NoSuchViewError:
            current = None
        if current is not None:
            props = current.properties
            if props.get(PROP_PINNED_OF) != f"{namespace}.{table}" or props.get(PROP_PINNED_TAG) != tag:
                raise PinnedViewError(
                    f"cannot make pinned view {namespace}.{name}: a view of that name exists and is not the "
                    f"{'tag ' + repr(tag) if tag else 'version ' + str(version)} view of {namespace}.{table}"
                    + (" (two tags that differ only in case or in '.', '-', '_' share a view name)" if tag else ""))
            if props.get(PROP_PINNED_VERSION) == str(version):
                return PinnedView(f"{namespace}.{name}", f"{namespace}.{table}", version, tag)
        metadata = _metadata_for(store, namespace, table, version, tag, current.metadata if current else None)
        try:
            if current is None:
                store.views.create_view(namespace, name, metadata)
            else:
                store.views.replace_view(current, metadata)
        except (ViewExistsError, CommitConflictError):
            continue  # a concurrent pin of the same view: look again
        return PinnedView(f"{namespace}.{name}", f"{namespace}.{table}", version, tag)
    raise PinnedViewError(f"pinned view {namespace}.{name} kept changing under concurrent pins; retry")


def pinned_views(store: Any, namespace: str, table: str) -> list[PinnedView]:
    """Every pinned view of ``namespace.table`` (version and tag views), by name."""
    out = []
    prefix = f"{table}{PHYSICAL_SEPARATOR}"
    for name in store.views.list_views(namespace):
        if not name.startswith(prefix):
            continue
        try:
            props = store.views.load_view(namespace, name).properties
        except NoSuchViewError:
            continue
        if props.get(PROP_PINNED_OF) == f"{namespace}.{table}" and props.get(PROP_PINNED_VERSION, "").isdigit():
            out.append(PinnedView(f"{namespace}.{name}", f"{namespace}.{table}", int(props[PROP_PINNED_VERSION]),
                                  props.get(PROP_PINNED_TAG)))
    return out


def drop_pinned_view(store: Any, view: PinnedView) -> bool:
    namespace, name = view.name.split(".", 1)
    try:
        store.views.drop_view(namespace, name)
        return True
    except NoSuchViewError:
        return False


def engine_reads(catalog_name: str, namespace: str, table: str, version: int,
                 views: list[PinnedView]) -> dict[str, str]:
    """How Spark SQL and Trino read ``version``: its pinned view, or the command that makes one."""
    view = next((v for v in views if v.version == version and v.tag is None), None) \
        or next((v for v in views if v.version == version), None)
    if view is None:
        name = f"{namespace}.{version_view_name(table, version)}"
        return {"spark": f"SELECT * FROM {catalog_name}.{name}", "trino": f"SELECT * FROM {catalog_name}.{name}",
                "make_view": f"omni pin {namespace}.{table} {version}"}
    return {"spark": f"SELECT * FROM {catalog_name}.{view.name}", "trino": f"SELECT * FROM {catalog_name}.{view.name}"}

"""Point lookups in logical SQL: scans pinned to ids are read through the id index.

``WHERE _ai_unique_id_ = '…'`` or ``_ai_unique_id_ IN ('…', …)`` (a top-level
conjunct, so every row the query keeps has one of those ids) pins a logical table's
scans to a few ids. For each physical scan of that table where the index is
authoritative (see :mod:`omni_iceberg.index.core`), the rows are read by position -
only the row groups holding them, only the scanned columns - instead of scanning
the ids' bucket files. The query itself still runs on the result, WHERE clause and
all, so the index only decides which rows are read, never which rows are returned.

Any doubt falls back to the ordinary scan for that table, and ``--explain`` says
which path each scan took and why: the index lags, an id has two locations, or a
read row holds another id than its entry says.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.family import FamilyState

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

#: more ids than this and a scan of their buckets is as cheap as position reads
MAX_IDS = 10_000
_ID = re.compile(r"^[0-9a-f]{32}$")


def pinned_ids(ctx: Any, alias: str) -> list[str] | None:
    """The ids the query's top-level conjuncts pin ``alias`` to (sorted), or None if not pinned.

    Literals that are not ids (wrong length, upper case) can never equal one, so they
    are dropped: ``= 'nope'`` pins to no id at all.
    """
    sets: list[set[str]] = []
    for cond in ctx.pushed.get(alias, []):
        if isinstance(cond, exp.EQ):
            col, lits = (cond.left, [cond.right]) if isinstance(cond.left, exp.Column) else (cond.right, [cond.left])
        elif isinstance(cond, exp.In) and not cond.args.get("query"):
            col, lits = cond.this, cond.expressions
        else:
            continue
        if not isinstance(col, exp.Column) or ctx.resolved.get(id(col), (None, None))[1] != ID_COLUMN:
            continue
        if not all(isinstance(v, exp.Literal) and v.is_string for v in lits):
            continue
        sets.append({v.this for v in lits if _ID.match(v.this)})
    if not sets:
        return None
    ids = set.intersection(*sets)
    return sorted(ids) if len(ids) <= MAX_IDS else None


@dataclass
class IndexRoute:
    """How the scans of one id-pinned logical table are read; filled at plan time."""

    ids: list[str]
    index: str  # where the index lives, for the explain
    view: Any = None  # IndexView at the table's version; None when the index could not be opened
    reasons: dict[str, str] = field(default_factory=dict)  # table key -> why it is scanned instead ("" = index)

    def uses_index(self, key: str) -> bool:
        return self.view is not None and self.reasons.get(key) == ""

    def describe(self, key: str) -> str:
        if self.uses_index(key):
            return f"read {len(self.ids)} id(s) through the id index ({self.index})"
        return f"scanned for {len(self.ids)} id(s): {self.reasons.get(key) or 'index not used'}"


def plan_route(context: OmniContext, state: FamilyState, ids: list[str], keys: list[str]) -> IndexRoute:
    """Decide per physical table whether the index can answer (authoritative at its pinned snapshot)."""
    from omni_iceberg.index.select import open_index

    try:
        index = open_index(context.config, state.table.identifier)
    except Exception as e:  # noqa: BLE001 - an unreachable index only costs the faster path
        return IndexRoute(ids, "unavailable", None, {k: f"the id index cannot be opened ({e})" for k in keys})
    route = IndexRoute(ids, index.backend.location, index.at(context.catalog, state))
    for key in keys:
        if state.physical_table(key).snapshot_id is None:
            route.reasons[key] = "the table has no data yet"
            continue
        cov = route.view.coverage(key)
        route.reasons[key] = "" if cov.authoritative else "the id index lags: " + "; ".join(cov.lag)
    return route


def read_through_index(route: IndexRoute, key: str, table: Any, columns: list[str],
                       batches: list[str] | None) -> pa.Table | None:
    """The rows of ``route.ids`` in one physical table, shaped like a pyiceberg scan of ``columns``.

    None when the index cannot vouch for the answer (the caller scans instead and
    records why in ``route.reasons``).
    """
    from omni_iceberg.index.parquet_rows import by_file, read_located

    target = table.schema().select(*columns).as_arrow()
    files, problem = by_file(route.view.locations(key, route.ids))
    if not problem:
        done, problem = read_located(files, _leaf_names(target), table.io)
    if problem:
        route.reasons[key] = problem
        return None
    pieces = []
    for wanted, values, _ in done:
        piece = pa.Table.from_arrays([_build(f, values, "", len(wanted)) for f in target], schema=target)
        if batches:  # read from the rows: a compacted file holds several batches
            piece = piece.filter(pc.is_in(values[BATCH_COLUMN].cast(pa.string()), value_set=pa.array(batches)))
        pieces.append(piece)
    return pa.concat_tables(pieces) if pieces else target.empty_table()


def _leaf_names(schema: pa.Schema, prefix: str = "") -> list[str]:
    out = []
    for f in schema:
        if pa.types.is_struct(f.type):
            out += _leaf_names(pa.schema(list(f.type)), f"{prefix}{f.name}.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def _build(f: pa.Field, values: dict[str, pa.Array], prefix: str, n: int) -> pa.Array:
    name = f"{prefix}{f.name}"
    if pa.types.is_struct(f.type):
        children = [_build(child, values, f"{name}.", n) for child in f.type]
        return pa.StructArray.from_arrays(children, fields=list(f.type))
    arr = values.get(name)
    return pa.nulls(n, f.type) if arr is None else arr.cast(f.type)


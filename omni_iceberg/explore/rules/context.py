"""What the rules read and annotate: the parsed query and, per table alias, what to scan."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from sqlglot import exp

from catalog_ext.family import FamilyState, PhysicalTable
from omni_iceberg.read.scope import Scopes, from_items


@dataclass
class BoundTable:
    alias: str
    identifier: str  # logical table, namespace.name
    state: FamilyState
    node: exp.Table


@dataclass
class SystemTable:
    """A read-only reference to ``omni_sys.<name>`` (query log, runs, errors, ...), read whole."""

    alias: str
    identifier: str
    name: str
    columns: list[str]
    node: exp.Table


def _no_counts(table: PhysicalTable) -> int | None:
    return None


@dataclass
class QueryContext:
    """The query being planned. The first fields are inputs; the rest are filled by the rules in order.

    ``load_state(namespace, name, version)`` and ``known_tables()`` come from the
    family store; ``row_count(table)`` is a physical table's live row count at its
    pinned snapshot from metadata (None when unknown: then no rule may rely on it).
    """

    sql: str
    load_state: Callable[[str, str, int | None], FamilyState] | None = None
    known_tables: Callable[[], list[str]] = list
    as_of: int | None = None
    row_count: Callable[[PhysicalTable], int | None] = _no_counts
    tree: exp.Query | None = None
    scopes: Scopes | None = None  # what each table name and column means, by SQL scope (bind_tables)
    tables: dict[str, BoundTable] = field(default_factory=dict)  # alias -> table
    system: dict[str, SystemTable] = field(default_factory=dict)  # alias -> system table (read-only)
    resolved: dict[int, tuple[str, str]] = field(default_factory=dict)  # id(Column) -> (alias, logical path)
    star: set[str] = field(default_factory=set)  # aliases whose every column is needed
    columns: dict[str, list[str]] = field(default_factory=dict)  # alias -> logical paths read
    batches: dict[str, list[str] | None] = field(default_factory=dict)  # alias -> batches (None: all)
    pushed: dict[str, list[exp.Expression]] = field(default_factory=dict)  # alias -> conjuncts pushed to scans
    filter_columns: dict[str, list[str]] = field(default_factory=dict)  # alias -> paths used in WHERE
    drivers: dict[str, str] = field(default_factory=dict)  # alias -> physical table key whose rows are read
    driver_reasons: dict[str, str] = field(default_factory=dict)  # alias -> why the base table is not read


def top_where(ctx: QueryContext) -> list[exp.Expression]:
    """The conjuncts of the outermost SELECT's WHERE (none for UNION and friends).

    None either when that SELECT samples rows (``USING SAMPLE``, or ``TABLESAMPLE`` on
    a table it reads): the sample is drawn before WHERE filters, so rules that use the
    filter to read fewer rows, batches or tables would change which rows are drawn.
    """
    select = ctx.tree if isinstance(ctx.tree, exp.Select) else None
    where = select.args.get("where") if select is not None else None
    if where is None or samples_rows(select):
        return []
    return conjuncts(where.this)


def samples_rows(select: exp.Select) -> bool:
    """True when ``select`` draws a sample of its rows or of a table it reads."""
    return select.args.get("sample") is not None or any(
        item.args.get("sample") is not None for item in from_items(select))


def conjuncts(node: exp.Expression | None) -> list[exp.Expression]:
    """The terms of ``a AND b AND (c AND d)``, in order (a loop: a WHERE may chain thousands)."""
    out: list[exp.Expression] = []
    stack = [node] if node is not None else []
    while stack:
        item = stack.pop()
        if isinstance(item, exp.And):
            stack += [item.right, item.left]
        elif isinstance(item, exp.Paren):
            stack.append(item.this)
        else:
            out.append(item)
    return out

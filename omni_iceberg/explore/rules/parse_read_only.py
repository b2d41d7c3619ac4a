"""Rule: the text is exactly one read-only query made only of allowed parts."""

from __future__ import annotations

from omni_iceberg.explore.rules.context import QueryContext
from omni_iceberg.read.guard import parse_query


def parse_read_only(ctx: QueryContext) -> QueryContext:
    """Parse ``ctx.sql`` (DuckDB dialect) and refuse anything but reading (see :mod:`..guard`).

    A tree that is already set (``omni export`` builds its query as a tree) is checked
    the same way, never re-parsed from text.

    >>> from omni_iceberg.explore.rules.context import QueryContext
    >>> parse_read_only(QueryContext("SELECT quality FROM web -- a comment")).tree.sql()
    'SELECT quality FROM web'
    >>> parse_read_only(QueryContext("DELETE FROM web"))
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: DELETE is not allowed in the query: only queries are allowed (one SELECT or WITH); omni sql is read-only
    """
    from omni_iceberg.read.guard import QueryError, check_tree

    if ctx.tree is None:
        ctx.tree = parse_query(ctx.sql)
    else:
        check_tree(ctx.tree)
        if not hasattr(ctx.tree, "selects"):
            raise QueryError(f"only queries are allowed, not {ctx.tree.key.upper()}")
    return ctx

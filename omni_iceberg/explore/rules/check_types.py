"""Rule: a column compared with a literal of another kind (number vs text) is an error."""

from __future__ import annotations

from sqlglot import exp

from omni_iceberg.explore.rules.context import QueryContext
from omni_iceberg.read.guard import QueryError, at

_NUMERIC = {"long", "int", "double", "float"}


def _column_type(ctx: QueryContext, col: exp.Column) -> str | None:
    hit = ctx.resolved.get(id(col))
    if hit is None:
        return None
    alias, path = hit
    state = ctx.tables[alias].state
    return state.column(path).type if state.has_column(path) else None


def check_types(ctx: QueryContext) -> QueryContext:
    """Comparisons of a typed column with a literal must agree in kind; the error names the place.

    Numeric text (``quality > '0.5'``) is accepted: engines cast it.

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> check_types(example_context("SELECT 1 FROM web WHERE quality > '0.5'", until="check_types")).sql
    "SELECT 1 FROM web WHERE quality > '0.5'"
    >>> check_types(example_context("SELECT 1 FROM web WHERE lang = 5", until="check_types"))
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: type error at line 1, column 32: lang is string, compared with number 5; quote the value
    """
    for cmp in ctx.tree.find_all(exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE):
        left, right = cmp.left, cmp.right
        for col, lit in ((left, right), (right, left)):
            if not isinstance(col, exp.Column) or not isinstance(lit, exp.Literal):
                continue
            typ = _column_type(ctx, col)
            where = at(lit) or " in the query"
            if typ in _NUMERIC and lit.is_string:
                try:
                    float(lit.this)
                except ValueError:
                    raise QueryError(f"type error{where}: {col.sql()} is {typ}, compared with text "
                                     f"{lit.sql()}") from None
            if typ == "string" and not lit.is_string:
                raise QueryError(f"type error{where}: {col.sql()} is string, compared with number "
                                 f"{lit.sql()}; quote the value")
            if typ == "boolean" and lit.is_string:
                raise QueryError(f"type error{where}: {col.sql()} is boolean, compared with {lit.sql()}")
    return ctx

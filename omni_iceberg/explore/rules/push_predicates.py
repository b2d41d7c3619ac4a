"""Rule: simple top-level conjuncts on one table go into its scans (fewer files and rows read)."""

from __future__ import annotations

from sqlglot import exp

from omni_iceberg.explore.rules.context import QueryContext, top_where

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE)
#: conjuncts pushed into one table's scans at most: the scan filter is one AND chain that
#: pyiceberg evaluates by recursion, and a WHERE may chain thousands (the rest still filter)
MAX_PUSHED = 64


def push_predicates(ctx: QueryContext) -> QueryContext:
    """``column op literal``, ``IN (literals)``, ``IS [NOT] NULL`` on one table are pushed.

    They stay in the query too: pushing is only an optimisation (so at most
    :data:`MAX_PUSHED` per table are pushed).

    >>> from omni_iceberg.explore.rules.examples import example_context
    >>> sql = "SELECT 1 FROM web WHERE quality > 0.5 AND (quality < 2 OR lang = 'en')"
    >>> [c.sql() for c in push_predicates(example_context(sql, until="push_predicates")).pushed["web"]]
    ['quality > 0.5']
    """
    ctx.pushed = {alias: [] for alias in ctx.tables}
    ctx.filter_columns = {alias: [] for alias in ctx.tables}
    filled = null_filled(ctx.tree)
    for cond in top_where(ctx):
        cols = list(cond.find_all(exp.Column))
        hits = {ctx.resolved.get(id(c)) for c in cols}
        if None in hits or not hits:
            continue
        aliases = {a for a, _ in hits}
        for a, path in hits:
            ctx.filter_columns[a].append(path)
        if len(aliases) == 1 and pushable(cond):
            alias = aliases.pop()
            if alias in filled and not rejects_null(cond):
                continue  # m.x IS NULL after a LEFT JOIN also holds for the rows the join fills with NULL
            if len(ctx.pushed[alias]) < MAX_PUSHED:
                ctx.pushed[alias].append(cond)
    return ctx


def null_filled(tree: exp.Expression) -> set[str]:
    """Names of the outermost SELECT's FROM items an outer join may fill with NULLs (the optional side).

    >>> sorted(null_filled(exp.maybe_parse("SELECT 1 FROM a LEFT JOIN b ON TRUE JOIN c ON TRUE RIGHT JOIN d ON TRUE")))
    ['a', 'b', 'c']
    """
    if not isinstance(tree, exp.Select):
        return set()
    before = [from_.this.alias_or_name] if (from_ := tree.args.get("from_")) is not None else []
    out: set[str] = set()
    for join in tree.args.get("joins") or []:
        side = (join.side or "").upper()
        name = join.this.alias_or_name
        if side in ("LEFT", "FULL"):
            out.add(name)
        if side in ("RIGHT", "FULL"):
            out.update(before)
        before.append(name)
    return out


def pushable(cond: exp.Expression) -> bool:
    if isinstance(cond, _COMPARISONS):
        return {type(cond.left), type(cond.right)} <= {exp.Column, exp.Literal} and \
            isinstance(cond.left, exp.Column) != isinstance(cond.right, exp.Column)
    if isinstance(cond, exp.In):
        return isinstance(cond.this, exp.Column) and all(isinstance(v, exp.Literal) for v in cond.expressions)
    if isinstance(cond, exp.Is):
        return isinstance(cond.this, exp.Column) and isinstance(cond.expression, exp.Null)
    if isinstance(cond, exp.Not) and isinstance(cond.this, exp.Is):
        return pushable(cond.this)
    return False


def rejects_null(cond: exp.Expression) -> bool:
    """True when a pushable conjunct is false or NULL for a row whose column is NULL (not ``IS NULL``)."""
    if isinstance(cond, exp.Is):
        return False
    if isinstance(cond, exp.Not):
        return isinstance(cond.this, exp.Is)
    return pushable(cond)

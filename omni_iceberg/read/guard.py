"""What user-written SQL may contain: one read-only query over named tables, allowed functions.

Everything a user writes for the engines - ``omni sql`` queries, ``omni export``
columns and ``--where``, feature ``filter:`` expressions - is parsed by sqlglot and
checked here before any engine sees it. The engines then get SQL generated from the
checked tree, never text spliced around user input, so a quote in an alias or a comment
stays an identifier or disappears. The check is an allow-list: a function that is not
known to be a pure computation on values is refused, so a new file-reading or
settings-reading function of some engine version is refused too until someone adds it.
The embedded DuckDB runs locked besides (:mod:`omni_iceberg.read.sandbox`): two
independent walls.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, SqlglotError

from catalog_ext.errors import OmniError

READ_DIALECT = "duckdb"
#: names of the scans the planner generates (``__omni_scan_0``); users may not write them
GENERATED_PREFIX = "__omni"


class QueryError(OmniError):
    """User SQL that cannot be planned or run: syntax, not read-only, unknown name, types, refused function."""

    exit_code = 2


#: Functions that compute on values only: no file, network, setting, variable or
#: environment access in DuckDB, Spark or Trino. Names are sqlglot's (``sql_name()``
#: for the functions it knows, the written name otherwise), lower case. sqlglot models a
#: few operators (AND, OR, EXISTS) as functions too; they are listed first.
ALLOWED_FUNCTIONS = frozenset("""
and or xor exists collate regexp_i_like array_contains_all array_contained_by
abs age any_value approx_distinct arg_max arg_min array array_agg array_concat array_contains
array_distinct array_extract array_max array_min array_overlaps array_position array_size array_slice
array_sort array_to_string array_value ascii atan2 avg base64 bit_count bit_length cardinality case cast
cbrt ceil chr coalesce concat concat_ws contains corr cos count count_if covar_pop covar_samp cume_dist
current_date current_timestamp date_add date_bin date_diff date_from_parts date_part date_sub date_trunc
datediff day day_of_month day_of_week day_of_year dayname decode degrees dense_rank element_at encode
ends_with even exp explode extract factorial filter first first_value flatten floor format from_base64
gcd greatest group_concat hash hex histogram hour if initcap is_inf is_nan isfinite jarowinkler_similarity
json_extract json_extract_scalar lag last last_day last_value lcm lead least left length length_grapheme
levenshtein list_aggregate list_any_value list_avg list_count list_element list_extract list_first
list_has_all list_has_any list_last list_max list_median list_min list_position list_reverse list_slice
list_sort list_string_agg list_sum list_unique list_zip ln log log10 log2 logical_and logical_or lower
map_keys map_values max md5 median min minute mode month monthname nfc_normalize now nth_value ntile
nullif octet_length pad percent_rank percentile_cont percentile_disc pi pow power prefix printf quarter
radians rank regexp_extract regexp_extract_all regexp_full_match regexp_like regexp_replace regexp_split
regexp_split_to_array repeat replace reverse right round row row_number second sha2 sign sin split
split_part sqrt starts_with stddev stddev_pop stddev_samp str_position str_to_time strip_accents strlen
struct struct_extract substring suffix sum tan time_to_str time_to_unix timestamp_trunc to_json
transform translate trim trunc try_cast typeof unhex unicode unix_to_time upper variance var_pop week
year
""".split())

#: Refused with a reason of their own (they are never on the allow-list; the reason
#: just makes the message clearer than "not allowed").
DENIED_FUNCTIONS = {
    **{f: "it reads engine settings" for f in (
        "current_setting", "duckdb_settings", "getvariable", "current_setting_value", "pragma_version",
        "version", "pg_settings", "get_current_setting")},
    **{f: "it reads the environment of the server" for f in ("getenv", "current_user", "user", "session_user")},
    **{f: "it reads or lists files" for f in (
        "read_csv", "read_csv_auto", "read_parquet", "parquet_scan", "read_json", "read_json_auto",
        "read_json_objects", "read_ndjson", "read_text", "read_blob", "glob", "parquet_metadata",
        "parquet_schema", "iceberg_scan", "delta_scan", "sniff_csv", "input_file_name", "read_xlsx", "st_read")},
    **{f: "it runs another query or engine code" for f in (
        "query", "query_table", "reflect", "java_method", "try_reflect", "from_json_schema")},
    **{f: "it lists the engine's databases, tables or extensions" for f in (
        "duckdb_databases", "duckdb_tables", "duckdb_extensions", "duckdb_functions", "duckdb_columns",
        "duckdb_secrets", "which_secret", "current_database", "current_schema", "current_catalog")},
}

# Statements and clauses that are never part of a read-only query. Checked on every
# node, so a nested one (``SELECT ... INTO``) is refused as well as a top-level one.
_NOT_READ_ONLY = tuple(getattr(exp, n) for n in (
    "Insert", "Update", "Delete", "Create", "Drop", "Alter", "Merge", "TruncateTable", "Command", "Set",
    "Use", "Copy", "Attach", "Detach", "Pragma", "Install", "Describe", "Show", "Summarize", "Into",
    "Transaction", "Commit", "Rollback", "Cache", "Uncache", "Refresh", "LoadData", "Kill", "Export",
    "Analyze", "Grant", "Revoke", "Comment", "Declare", "Execute", "Lock", "Put", "Get", "ToFile",
    "ReadCSV", "ReadParquet") if hasattr(exp, n))
# Parameters and session variables have no value in omni sql; in some engines they read settings.
_NO_PARAMETERS = tuple(getattr(exp, n) for n in ("Placeholder", "Parameter", "SessionParameter", "Variable")
                       if hasattr(exp, n))
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

#: How deeply user SQL may nest (parentheses, CASE, function calls, subqueries), counted
#: on the parsed tree; a chain of one operator (a AND b AND c ..., a + b + c ...) counts
#: once. sqlglot generates SQL with a few Python frames per level, so a tree this deep is
#: planned and generated within Python's default recursion limit.
MAX_NESTING = 128
#: sqlglot's parser takes ~25 Python frames per level of parentheses: parsing runs under
#: this recursion limit (raised for the parse only), enough for MAX_NESTING levels and more
PARSE_RECURSION_LIMIT = 10_000


def at(node: exp.Expression | None) -> str:
    """`` at line L, column C`` of a node as the user wrote it (empty when sqlglot kept no position)."""
    meta = getattr(node, "meta", None) or {}
    if not meta and node is not None and isinstance(node, (exp.Column, exp.Table, exp.Func)):
        inner = node.this if isinstance(node.this, exp.Expression) else None
        meta = getattr(inner, "meta", None) or {}
    if "line" in meta:
        # sqlglot reports where a token ends; users look for where it starts
        col = meta["col"] - (meta["end"] - meta["start"]) if "start" in meta else meta["col"]
        return f" at line {meta['line']}, column {col}"
    return ""


def parse_query(sql: str, what: str = "the query") -> exp.Query:
    """Parse exactly one read-only query and check it (see :func:`check_tree`).

    >>> parse_query("SELECT avg(t_len) FROM web").sql()
    'SELECT AVG(t_len) FROM web'
    >>> parse_query("SELECT current_setting('threads') FROM web")
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: function current_setting at line 1, column 8 is refused in the query: it reads engine settings
    """
    statements = _parse(sql, what)
    if len(statements) != 1:
        raise QueryError(f"expected exactly one statement in {what}, got {len(statements)}: omni sql runs one query")
    tree = statements[0]
    check_tree(tree, what)
    if not isinstance(tree, exp.Query):
        raise QueryError(f"only queries are allowed in {what}, not {tree.key.upper()}: omni sql is read-only")
    return tree


def parse_condition(text: str, what: str) -> exp.Expression:
    """Parse one boolean expression (a ``--where`` or a feature ``filter:``) and check it.

    It may not contain a query of its own: a filter sees only the row it filters.

    >>> parse_condition("t_len > 100 AND lang = 'en'", "the filter").sql()
    "t_len > 100 AND lang = 'en'"
    >>> parse_condition("1 = 1; COPY web TO '/tmp/x.csv'", "the filter")
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: expected one expression in the filter, got 2 statements: write a condition such as "t_len > 100"
    """
    statements = _parse(text, what)
    if len(statements) != 1:
        raise QueryError(f"expected one expression in {what}, got {len(statements)} statements: "
                         f'write a condition such as "t_len > 100"')
    node = statements[0]
    check_tree(node, what)
    if isinstance(node, exp.Query) or node.find(exp.Query, exp.Table) is not None:
        raise QueryError(f"{what} may not contain a query or a table reference: {node.sql(READ_DIALECT)!r}; "
                         f"write a condition on columns, such as \"t_len > 100\"")
    return node


def parse_column_name(text: str, what: str) -> exp.Column:
    """A column name as written in ``--columns`` (``t_len``, ``RawData.url``): names only, nothing else.

    >>> parse_column_name("RawData.url", "--columns").sql()
    'RawData.url'
    """
    parts = text.strip().split(".")
    if not 1 <= len(parts) <= 2 or not all(_PLAIN_NAME.match(p) for p in parts):
        raise QueryError(f"invalid column {text!r} in {what}: use a column name (t_len) or a stage field "
                         f"(RawData.url) - letters, digits and '_' only")
    if len(parts) == 1:
        return exp.column(parts[0])
    return exp.column(parts[1], table=parts[0])


def _parse(sql: str, what: str) -> list[exp.Expression]:
    if not isinstance(sql, str) or not sql.strip():
        raise QueryError(f"{what} is empty")
    try:
        with _parser_stack(), _quiet_fallback():
            statements = [s for s in sqlglot.parse(sql, read=READ_DIALECT) if s is not None]
    except RecursionError:
        raise QueryError(f"{what} nests deeper than omni sql allows ({MAX_NESTING} levels of parentheses, CASE, "
                         f"function calls or subqueries): flatten it, e.g. with a CTE") from None
    except ParseError as e:
        err = e.errors[0] if e.errors else {}
        near = (err.get("start_context", "") + err.get("highlight", "")).strip()[-40:]
        raise QueryError(f"syntax error in {what} at line {err.get('line')}, column {err.get('col')}: "
                         f"{_plain(err.get('description', str(e)), err.get('highlight', ''))} (near {near!r})") from e
    except SqlglotError as e:  # tokenizer errors (an unterminated quote) are not ParseErrors
        raise QueryError(f"syntax error in {what}: {e}") from e
    for statement in statements:
        levels = nesting(statement)
        if levels > MAX_NESTING:
            raise QueryError(f"{what} nests {levels} levels deep; omni sql allows {MAX_NESTING} levels of "
                             f"parentheses, CASE, function calls or subqueries: flatten it, e.g. with a CTE")
        for node in statement.walk():
            node.comments = None  # comments carry nothing for the engines; gone, they cannot be misquoted
            if isinstance(node, exp.Identifier) and node.name.lower().startswith(GENERATED_PREFIX):
                # the planner names its scans so; a CTE of that name would stand in for one
                raise QueryError(f"the name {node.name!r}{at(node)} in {what} is reserved for omni's generated "
                                 f"scans (names starting with {GENERATED_PREFIX!r}); choose another")
    return statements


_MISSING = re.compile(r"^Required keyword: '\w+' missing for <class '[\w.]+'>$")
_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")


def _plain(description: str, highlight: str) -> str:
    """sqlglot's description of a syntax error without its internals (class and token reprs).

    >>> _plain("Required keyword: 'expression' missing for <class 'sqlglot.expressions.core.GT'>", ">")
    "expected an expression after '>'"
    >>> _plain("Expected table name but got <Token token_type: TokenType.SENTINEL, text: SENTINEL, line: 1>", "")
    'Expected table name but got the end of the text'
    """
    if _MISSING.match(description):
        return f"expected an expression after {highlight!r}"
    return _TOKEN.sub(lambda m: "the end of the text" if m.group(1) == "SENTINEL" else repr(m.group(2)), description)


def nesting(tree: exp.Expression) -> int:
    """How many levels ``tree`` nests, a chain of one operator (``a AND b AND c``) counting once.

    >>> nesting(sqlglot.parse_one("SELECT ((1)) FROM web WHERE a AND b AND c AND d"))
    5
    """
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, level = stack.pop()
        deepest = max(deepest, level)
        for key, value in node.args.items():
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, exp.Expression):
                    # sqlglot parses and generates such chains in a loop, not by recursion
                    chain = key == "this" and isinstance(node, exp.Binary) and type(child) is type(node)
                    stack.append((child, level if chain else level + 1))
    return deepest


@contextmanager
def too_deep_is_an_error(what: str = "the query") -> Iterator[None]:
    """A RecursionError inside the block is the user's deeply nested SQL: exit 2 naming the limit, not a bug."""
    try:
        yield
    except RecursionError:
        raise QueryError(f"{what} nests too deeply to plan: omni sql allows {MAX_NESTING} levels of parentheses, "
                         f"CASE, function calls or subqueries; flatten it, e.g. with a CTE") from None


_stack_lock = threading.Lock()
_stack_users = 0
_stack_saved = 0


@contextmanager
def _parser_stack() -> Iterator[None]:
    """Python's recursion limit raised to PARSE_RECURSION_LIMIT while any thread parses (restored after the last)."""
    global _stack_users, _stack_saved
    with _stack_lock:
        if _stack_users == 0:
            _stack_saved = sys.getrecursionlimit()
            sys.setrecursionlimit(max(_stack_saved, PARSE_RECURSION_LIMIT))
        _stack_users += 1
    try:
        yield
    finally:
        with _stack_lock:
            _stack_users -= 1
            if _stack_users == 0:
                sys.setrecursionlimit(_stack_saved)


class _FallbackFilter(logging.Filter):
    """Drops sqlglot's "contains unsupported syntax. Falling back to parsing as a 'Command'" while omni parses.

    The guard refuses every such statement with a message of its own; the warning would
    print a second line (with the statement) before it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.active = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        return not (getattr(self.active, "on", False) and "unsupported syntax" in record.getMessage())


_FALLBACK = _FallbackFilter()
logging.getLogger("sqlglot").addFilter(_FALLBACK)


@contextmanager
def _quiet_fallback() -> Iterator[None]:
    _FALLBACK.active.on = True
    try:
        yield
    finally:
        _FALLBACK.active.on = False


def function_name(node: exp.Func) -> str:
    return (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()


def check_tree(tree: exp.Expression, what: str = "the query") -> None:
    """Refuse anything but reading: statements, parameters, table functions, unlisted functions.

    Table names are checked by the planner (only logical tables bind); here a FROM
    item must be a name, a subquery, ``VALUES`` or ``unnest``.
    """
    for node in tree.walk():
        if isinstance(node, _NOT_READ_ONLY):
            kind = node.key.upper() if not isinstance(node, exp.Command) else str(node.this).upper()
            raise QueryError(f"{kind}{at(node)} is not allowed in {what}: only queries are allowed "
                             f"(one SELECT or WITH); omni sql is read-only")
        if isinstance(node, _NO_PARAMETERS):
            raise QueryError(f"parameter or variable {node.sql(READ_DIALECT)!r}{at(node)} is not "
                             f"allowed in {what}: write the value itself")
        if isinstance(node, exp.Table):
            _check_table(node, what)
        elif isinstance(node, exp.Func):
            _check_function(node, what)


def _check_table(node: exp.Table, what: str) -> None:
    source = node.this
    if isinstance(source, exp.Unnest):
        return
    if isinstance(source, exp.Func):
        raise QueryError(f"table function {function_name(source)}{at(source)} is not allowed in "
                         f"{what}: omni sql reads logical tables only (FROM NAME or FROM NAMESPACE.NAME)")
    if not isinstance(source, exp.Identifier):
        raise QueryError(f"{node.sql(READ_DIALECT)!r}{at(node)} is not a table name in {what}: "
                         f"omni sql reads logical tables only")
    for part in (node.args.get("catalog"), node.args.get("db"), source):
        if isinstance(part, exp.Identifier) and not _PLAIN_NAME.match(part.name):
            # DuckDB reads FROM '/etc/passwd' and Spark FROM csv.`/path` as files
            raise QueryError(f"{node.sql(READ_DIALECT)!r}{at(node)} is not a table name in {what}: "
                             f"table names are letters, digits and '_' (file paths are not readable)")


def _check_function(node: exp.Func, what: str) -> None:
    name = function_name(node)
    if name in DENIED_FUNCTIONS:
        raise QueryError(f"function {name}{at(node)} is refused in {what}: {DENIED_FUNCTIONS[name]}")
    if name not in ALLOWED_FUNCTIONS:
        raise QueryError(f"function {name}{at(node)} is not on omni sql's allow-list of functions "
                         f"that compute on values only; see omni_iceberg.read.guard.ALLOWED_FUNCTIONS")


def filter_query(condition: str, columns: list[str], table: str, what: str) -> str:
    """DuckDB SQL computing a feature's ``filter:`` per row of ``table`` as a non-null boolean ``m``.

    ``columns`` are the names the filter may use (the feature's inputs); anything else,
    a query, a table or a refused function is an error naming ``what`` (the feature).

    >>> filter_query("length(raw_data) < 6000", ["raw_data"], "rows_in", "feature f@1")
    'SELECT COALESCE((LENGTH(raw_data) < 6000), FALSE) AS m FROM rows_in'
    >>> filter_query("getenv('HOME') = ''", ["raw_data"], "rows_in", "feature f@1")
    Traceback (most recent call last):
    ...
    omni_iceberg.read.guard.QueryError: function getenv at line 1, column 1 is refused in the filter of feature f@1: it reads the environment of the server
    """
    node = parse_condition(condition, f"the filter of {what}")
    for col in node.find_all(exp.Column):
        if col.table or col.name not in columns:
            raise QueryError(f"unknown column {col.sql(READ_DIALECT)!r}{at(col)} in the filter of {what}: a filter "
                             f"may use only the feature's inputs ({', '.join(columns)})")
    check = exp.Coalesce(this=exp.Paren(this=node), expressions=[exp.false()])
    return exp.select(check.as_("m")).from_(exp.to_identifier(table)).sql(dialect=READ_DIALECT)

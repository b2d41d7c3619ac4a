"""Row groups sized by bytes: what bounds the cost of reading one row by position.

pyarrow decodes whole row groups (it cannot read one page of a column chunk), so a
point read through the id index decodes the row group holding the row, every asked
column of it. pyiceberg 0.12's writer bounds row groups by rows only
(``write.parquet.row-group-limit``, default 1,048,576): a data file of a family table is
then one row group - ~40,000 short records (a 15 ms decode for one row) or thousands of
HTML pages (tens of MB). It ignores ``write.parquet.row-group-size-bytes`` (warning
that the option is not implemented).

Family tables are created with ``write.parquet.row-group-size-bytes`` (the Iceberg
property Spark's writer honours, so its compaction keeps the layout), and every omni
write turns it into the row limit pyiceberg does honour, from the average size of the
rows being written: a row group then holds about that many bytes of Arrow data whatever
the rows are. 1 MiB is about one default data page per column (pyiceberg's
``write.parquet.page-size-bytes``), so a scan decompresses the same pages as before and
a point read decodes about one page's worth; measured, see benchmarks/index.py.

Pages: pyarrow cuts a page, and checks whether the dictionary outgrew
``write.parquet.dict-size-bytes``, only between write batches (pyiceberg's
``write.parquet.page-row-limit``, 20,000 rows), so 1 MiB groups were one dictionary page
holding every distinct value plus one page of indices per column. Omni's writes set
64 KiB pages, a 64 KiB dictionary bound (then PLAIN pages) and the page row limit from
the rows' size, so the page reader decodes ~64 KiB per column of a point read. Spark's
rewrites honour these only where the table sets them as properties.
"""

from __future__ import annotations

from typing import Any, Mapping

#: the Iceberg table property (bytes of a row group); Spark honours it, pyiceberg does not
ROW_GROUP_BYTES_PROPERTY = "write.parquet.row-group-size-bytes"
#: the row limit pyiceberg honours
ROW_GROUP_LIMIT_PROPERTY = "write.parquet.row-group-limit"
#: the value family tables are created with (uncompressed Arrow bytes for omni's writes)
DEFAULT_ROW_GROUP_BYTES = 1 << 20
#: pyiceberg's own default row limit, when the table sets none
PYICEBERG_ROW_GROUP_LIMIT = 1_048_576

#: the Iceberg page-size property; pyarrow cuts pages only between write batches of
#: ``write.parquet.page-row-limit`` rows (pyiceberg's write_batch_size, default 20,000), so
#: on its own it changes nothing for groups of a few thousand rows
PAGE_BYTES_PROPERTY = "write.parquet.page-size-bytes"
PAGE_ROW_LIMIT_PROPERTY = "write.parquet.page-row-limit"
#: the dictionary size at which a chunk falls back to PLAIN pages; a point read of a
#: dictionary-encoded page also decodes the dictionary, so it is kept near a page
DICT_BYTES_PROPERTY = "write.parquet.dict-size-bytes"
PYICEBERG_PAGE_ROW_LIMIT = 20_000
#: the page size (and dictionary bound) omni writes family tables with when the table sets
#: none: a point read decodes one page (:mod:`omni_iceberg.index.page_reads`). The smallest
#: size that keeps full scans within 10% of 1 MiB pages (benchmarks/index.py --page-probe;
#: the figures are in benchmarks/RESULTS.md)
DEFAULT_PAGE_BYTES = 64 << 10
DEFAULT_DICT_BYTES = 64 << 10


def _positive(properties: Mapping[str, str], key: str, identifier: str) -> int | None:
    raw = properties.get(key)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"table {identifier}: property {key}={raw!r} is not a positive whole number of "
                         f"{'bytes' if key.endswith('-bytes') else 'rows'}")
    return value


def rows_per_group(properties: Mapping[str, str], rows: int, nbytes: int, identifier: str = "?") -> int | None:
    """The row-group row limit for writing ``rows`` rows of ``nbytes`` Arrow bytes, or None
    when the table sets no byte size (pyiceberg's own limit then applies).

    The smaller of the table's row limit and the rows that fit the byte size; at least 1.

    >>> rows_per_group({ROW_GROUP_BYTES_PROPERTY: "1000"}, rows=100, nbytes=10_000)
    10
    >>> rows_per_group({ROW_GROUP_BYTES_PROPERTY: "1000", ROW_GROUP_LIMIT_PROPERTY: "4"}, 100, 10_000)
    4
    >>> rows_per_group({}, 100, 10_000) is None
    True
    """
    return _rows_within(properties, ROW_GROUP_BYTES_PROPERTY, ROW_GROUP_LIMIT_PROPERTY, PYICEBERG_ROW_GROUP_LIMIT,
                        rows, nbytes, identifier)


def rows_per_page(properties: Mapping[str, str], rows: int, nbytes: int, identifier: str = "?") -> int | None:
    """The page row limit (pyarrow's write batch) for ``rows`` rows of ``nbytes`` Arrow bytes,
    or None when the table sets no page size (pyiceberg's own limit then applies).

    >>> rows_per_page({PAGE_BYTES_PROPERTY: "1000"}, rows=100, nbytes=10_000)
    10
    >>> rows_per_page({}, 100, 10_000) is None
    True
    """
    return _rows_within(properties, PAGE_BYTES_PROPERTY, PAGE_ROW_LIMIT_PROPERTY, PYICEBERG_PAGE_ROW_LIMIT,
                        rows, nbytes, identifier)


def _rows_within(properties: Mapping[str, str], size_key: str, limit_key: str, default_limit: int, rows: int,
                 nbytes: int, identifier: str) -> int | None:
    """The rows of average size ``nbytes / rows`` that fit the table's ``size_key`` bytes, at most
    its ``limit_key`` rows (``default_limit`` when unset), at least 1; None without a size."""
    size = _positive(properties, size_key, identifier)
    limit = _positive(properties, limit_key, identifier) or default_limit
    if size is None:
        return None
    if rows <= 0 or nbytes <= 0:
        return limit
    return max(1, min(limit, int(size * rows // nbytes)))


def for_write(metadata: Any, data: Any) -> Any:
    """``metadata`` (pyiceberg TableMetadata) as pyiceberg's writer should see it for ``data``:
    the byte size turned into a row limit and taken out (pyiceberg would only warn about it)."""
    props = metadata.properties
    if ROW_GROUP_BYTES_PROPERTY not in props:
        return metadata
    limit = rows_per_group(props, data.num_rows, data.nbytes, metadata.location)
    updated = {k: v for k, v in props.items() if k != ROW_GROUP_BYTES_PROPERTY}
    updated[ROW_GROUP_LIMIT_PROPERTY] = str(limit)
    # pages sized by bytes too, on the family tables' defaults unless the table sets its own
    updated.setdefault(PAGE_BYTES_PROPERTY, str(DEFAULT_PAGE_BYTES))
    updated.setdefault(DICT_BYTES_PROPERTY, str(DEFAULT_DICT_BYTES))
    updated[PAGE_ROW_LIMIT_PROPERTY] = str(rows_per_page(updated, data.num_rows, data.nbytes, metadata.location))
    return metadata.model_copy(update={"properties": updated})

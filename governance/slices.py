"""A bucket's rows in slices of bounded memory, in (batch, id) order (issue #37).

Why: regroup, split and materialize join the physical tables of a logical table on the
keys. They used to read one id bucket of every table whole: memory followed the table
(a bucket is a 1/N share of it), not a setting. Here a bucket whose files would weigh
more than :func:`slice_bytes` in memory is read as several key ranges instead:

- **where to cut**: the keys (batch, id) of the bucket's files are read once, streamed,
  and a fixed-size random sample of them gives the cut points (ids need not be md5s);
- **each slice**: every file is read with the range as its filter, so only the rows of
  the slice are held (row groups whose statistics fall outside are skipped);
- **too big after all** (a skewed sample): the slice is cut again at the median key of
  what was read, until it fits or holds one key. One key whose rows alone exceed
  ``OMNI_MEMORY_LIMIT_MB`` is :class:`RecordTooLargeError`, naming it and the limit;
  the caller's staged writes are then abandoned, so nothing is half-committed.

Slices come in ascending (batch, id) order, so concatenating the results of a sorted
merge gives the bucket's sorted result as before. A bucket that fits is read in one
piece, exactly as before: no sample, no second read.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN
from catalog_ext.errors import OmniError

KEYS = [ID_COLUMN, BATCH_COLUMN]
#: Arrow bytes per stored byte assumed when sizing a bucket from its files (compressed
#: Parquet: text and ids grow 2-4x); a wrong guess costs a re-cut or an extra slice only
EXPANSION = 3
#: keys sampled to place the cuts, per slice wanted
SAMPLE_PER_SLICE = 64


class RecordTooLargeError(OmniError):
    """One record's values, read for a join, exceed the memory one operation may hold."""


def memory_limit_bytes() -> int:
    """``OMNI_MEMORY_LIMIT_MB`` in bytes."""
    from catalog_ext import settings

    return int(float(settings.value("OMNI_MEMORY_LIMIT_MB")) * 2 ** 20)


def slice_bytes() -> int:
    """What one slice of input may weigh in memory: a quarter of the limit, since the join
    holds the inputs, the joined result and the table handed to the writer at once."""
    return memory_limit_bytes() // 4


@dataclass
class Part:
    """Some data files of one physical table, read with one projection."""

    table: Any  # the pyiceberg table
    files: list[Any]
    columns: tuple[str, ...] | None  # top-level names; None: every column
    row_filter: Any = None  # a pyiceberg expression every read of the part also applies

    @property
    def name(self) -> str:
        return ".".join(self.table.name()) if hasattr(self.table, "name") else str(self.table)


def estimate_bytes(parts: list[Part]) -> int:
    """In-memory size of the parts' projected columns, guessed from the files' metadata."""
    total = 0
    for part in parts:
        ids = _field_ids(part)
        for f in part.files:
            sizes = getattr(f, "column_sizes", None) or {}
            stored = sum(v for k, v in sizes.items() if ids is None or k in ids) if sizes else f.file_size_in_bytes
            total += int(stored) * EXPANSION
    return total


def _field_ids(part: Part) -> set[int] | None:
    if part.columns is None:
        return None
    schema = part.table.schema().select(*part.columns)
    return set(schema.field_ids) | set(part.table.schema().select(*KEYS).field_ids)


def read(part: Part, bounds: tuple[Any, Any] = (None, None)) -> pa.Table:
    """The part's rows whose (batch, id) lies in ``bounds`` ([low, high); None: open),
    through pyiceberg's reader (field ids decide; files older than a column read it as NULL)."""
    from pyiceberg.expressions import And
    from pyiceberg.io.pyarrow import ArrowScan

    table = part.table
    schema = table.schema() if part.columns is None else table.schema().select(*part.columns)
    if not part.files:
        return schema.as_arrow().empty_table()
    row_filter = _range_filter(*bounds)
    if part.row_filter is not None:
        row_filter = And(part.row_filter, row_filter)
    return ArrowScan(table.metadata, table.io, schema, row_filter).to_table(_tasks(part))


def _range_filter(low: tuple[str, str] | None, high: tuple[str, str] | None) -> Any:
    """(batch, id) >= low and < high, as a pyiceberg expression (None: no bound)."""
    from pyiceberg.expressions import (AlwaysTrue, And, EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, Or)

    out: Any = AlwaysTrue()
    if low is not None:
        out = And(out, Or(GreaterThan(BATCH_COLUMN, low[0]),
                          And(EqualTo(BATCH_COLUMN, low[0]), GreaterThanOrEqual(ID_COLUMN, low[1]))))
    if high is not None:
        out = And(out, Or(LessThan(BATCH_COLUMN, high[0]),
                          And(EqualTo(BATCH_COLUMN, high[0]), LessThan(ID_COLUMN, high[1]))))
    return out


def _tasks(part: Part) -> list[Any]:
    from pyiceberg.table import FileScanTask

    for f in part.files:
        try:
            f.spec_id
        except AttributeError:  # written by this process, not read back from a manifest: the default spec
            f.spec_id = part.table.metadata.default_spec_id
    return [FileScanTask(f) for f in part.files]


def _stream(part: Part, columns: tuple[str, ...]) -> Iterator[pa.RecordBatch]:
    """The part's rows, a record batch at a time, projected to ``columns``."""
    from pyiceberg.expressions import AlwaysTrue
    from pyiceberg.io.pyarrow import ArrowScan

    if not part.files:
        return iter(())
    schema = part.table.schema().select(*columns)
    return ArrowScan(part.table.metadata, part.table.io, schema,
                     part.row_filter or AlwaysTrue()).to_record_batches(_tasks(part))


def distinct_batches(part: Part) -> set[str]:
    """The batches the part's rows belong to, read a record batch at a time."""
    out: set[str] = set()
    for rb in _stream(part, (BATCH_COLUMN,)):
        out.update(pc.unique(rb.column(0)).cast(pa.string()).to_pylist())
    return out


def sample_cuts(parts: list[Part], slices: int, seed: int = 37) -> list[tuple[str, str]]:
    """``slices - 1`` ascending (batch, id) cut points from a streamed sample of the parts' keys."""
    rows = sum(int(f.record_count) for p in parts for f in p.files) or 1
    rate = min(1.0, slices * SAMPLE_PER_SLICE / rows)
    gen = np.random.default_rng(seed)  # the same cuts for the same files
    sample: set[tuple[str, str]] = set()
    for part in parts:
        for rb in _stream(part, tuple(KEYS)):
            picked = np.flatnonzero(gen.random(rb.num_rows) < rate)
            if len(picked):
                taken = rb.take(pa.array(picked))
                sample.update(zip(taken.column(BATCH_COLUMN).cast(pa.string()).to_pylist(),
                                  taken.column(ID_COLUMN).cast(pa.string()).to_pylist()))
    keys = sorted(sample)
    if len(keys) < 2:
        return []
    cuts = {keys[min(len(keys) - 1, round(i * len(keys) / slices))] for i in range(1, slices)}
    return sorted(cuts - {keys[0]})


def iter_slices(parts: list[Part], *, limit: int | None = None, what: str = "") -> Iterator[list[pa.Table]]:
    """Yield, slice by ascending (batch, id) slice, one table per part (the part's rows in it).

    ``limit``: what a slice may weigh (default :func:`slice_bytes`); ``what`` names the
    operation in the error for a record that cannot fit.
    """
    limit = slice_bytes() if limit is None else limit
    estimate = estimate_bytes(parts)
    if estimate <= limit:
        yield [read(p) for p in parts]
        return
    slices = max(2, math.ceil(estimate / limit))
    cuts = sample_cuts(parts, slices)
    bounds = list(zip([None] + cuts, cuts + [None]))
    pending = bounds[::-1]  # a stack: the first slice on top
    while pending:
        low, high = pending.pop()
        got = [read(p, (low, high)) for p in parts]
        weight = sum(t.nbytes for t in got)
        if weight <= 2 * limit:  # an estimate's slack; above it, cut again
            yield got
            continue
        keys = sorted({k for t in got for k in zip(t.column(BATCH_COLUMN).cast(pa.string()).to_pylist(),
                                                   t.column(ID_COLUMN).cast(pa.string()).to_pylist())})
        if len(keys) == 1:
            if weight > memory_limit_bytes():
                batch, rid = keys[0]
                tables = ", ".join(p.name for p in parts)
                raise RecordTooLargeError(
                    f"{what + ': ' if what else ''}record {rid} of batch {batch!r} holds {weight / 2**20:.1f} MiB "
                    f"in {tables}, more than OMNI_MEMORY_LIMIT_MB={memory_limit_bytes() / 2**20:g} MiB allows one "
                    "operation to hold; nothing was committed. Raise OMNI_MEMORY_LIMIT_MB to process it")
            yield got
            continue
        del got
        mid = keys[len(keys) // 2]
        pending += [(mid, high), (low, mid)]


def iter_logical_slices(catalog: Any, state: Any, columns: list[str], batch: str, *,
                        limit: int | None = None) -> Iterator[pa.Table]:
    """One batch of the logical table, bucket by bucket and within a bucket slice by slice:
    flat columns named by logical path, plus the keys (what
    :func:`omni_iceberg.read.reader.iter_logical_slices` yields a bucket at a time).

    A bucket that fits is read and joined whole, its rows in the base table's order as
    before; a larger one slice by id range (rows in base order within each slice).
    """
    from catalog_ext import iceberg_io
    from catalog_ext.contract import check_batch_name
    from omni_iceberg.read.reader import assemble_flat, coalesce_parts, expand_columns, flatten, left_join, plan_columns
    from pyiceberg.expressions import EqualTo

    limit = slice_bytes() if limit is None else limit
    _, leaves = expand_columns(state, columns)
    check_batch_name(batch)
    per_table = plan_columns(state, leaves)
    planned = {}
    for key, cols in per_table.items():
        table = catalog.load_table(state.physical_table(key).identifier)
        # nested names (RawData.url) read only that field, not the whole struct
        top = tuple(KEYS + list(dict.fromkeys(n for n, _ in cols)))
        only = EqualTo(BATCH_COLUMN, batch)
        _, groups = iceberg_io.scan_tasks_by_bucket(table, state.physical_table(key).snapshot_id, top, only)
        planned[key] = (table, top, only, groups)
    base_groups = planned[state.base_table.key][3]
    for bucket in sorted(base_groups):
        parts = [Part(table, [t.file for t in groups.get(bucket, [])], top, only)
                 for table, top, only, groups in planned.values()]
        for got in iter_slices(parts, limit=limit, what=f"materialize of {state.table.identifier}"):
            joined = None
            for data, cols in zip(got, per_table.values()):
                part = flatten(data, cols)
                joined = part if joined is None else left_join(joined, part)
            joined = coalesce_parts(joined)
            if not joined.num_rows:
                continue
            yield assemble_flat(state, joined, leaves)

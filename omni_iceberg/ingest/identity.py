"""Row identity: ``_ai_unique_id_`` is md5 of the raw content (dedup for free) or a uuid."""

from __future__ import annotations

import hashlib
import threading
import uuid
from typing import Any

import pyarrow as pa

#: below this many values a Python loop is cheaper than starting a DuckDB query (and importing DuckDB)
VECTOR_MIN = 4096

_local = threading.local()


def content_id(raw: str) -> str:
    """md5 hex of the UTF-8 raw content: equal content, equal id, in any batch or table."""
    return hashlib.md5(raw.encode("utf-8"), usedforsecurity=False).hexdigest()


def content_ids(raws: pa.Array | pa.ChunkedArray | list[str]) -> pa.Array:
    """:func:`content_id` of every value of a string array without nulls (or of a list of
    strings), as a string array.

    Large arrays are hashed by DuckDB's ``md5`` over the Arrow buffers: the same digest of
    the same UTF-8 bytes, with no Python string or call per value (a Python loop spends
    more on the calls than on hashing ~175-byte records).
    """
    if isinstance(raws, list):
        if len(raws) < VECTOR_MIN:  # a few (often large) documents: no copy of them into Arrow
            return pa.array([content_id(r) for r in raws], pa.string())
        raws = pa.array(raws, pa.string())
    if isinstance(raws, pa.ChunkedArray):
        raws = raws.chunk(0) if raws.num_chunks == 1 else raws.combine_chunks()
    if raws.null_count:
        raise ValueError("content ids of null raw content")
    if len(raws) < VECTOR_MIN:
        return pa.array([content_id(r) for r in raws.to_pylist()], pa.string())
    # DuckDB hashes each Arrow chunk in a thread of its own, in order: two halves use two cores
    half = len(raws) // 2
    table = pa.table({"raw": pa.chunked_array([raws.slice(0, half), raws.slice(half)], raws.type)})
    out = _duckdb().from_arrow(table).project("md5(raw)").to_arrow_table().column(0)
    ids = out.chunk(0) if out.num_chunks == 1 else out.combine_chunks()
    if len(ids) != len(raws) or ids.null_count:
        raise RuntimeError(f"md5 of {len(raws)} values gave {len(ids)} ids ({ids.null_count} null)")
    return ids


def random_id() -> str:
    """For tables where identical content must stay separate rows (e.g. SFT samples)."""
    return uuid.uuid4().hex


def _duckdb() -> Any:
    """This thread's in-memory DuckDB connection (one thread each: the ingest is one stream)."""
    con = getattr(_local, "con", None)
    if con is None:
        import duckdb

        con = _local.con = duckdb.connect(config={"threads": 2})
    return con

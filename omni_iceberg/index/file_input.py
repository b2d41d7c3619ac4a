"""Opening an indexed data file for reading, wherever the warehouse keeps it.

Shared by the index's two readers of data files: :mod:`omni_iceberg.index.inline`
(indexing a file: its ids and small leaves) and :mod:`omni_iceberg.index.parquet_rows`
(reading rows by position).
"""

from __future__ import annotations

from typing import Any


def open_input(path: str, io: Any = None) -> Any:
    """A seekable input for ``path``: local files directly; others through ``io``.

    ``io`` is the table's or catalog's pyiceberg FileIO: object stores need its settings
    (endpoint, region, credentials from .pyiceberg.yaml), which a bare URI does not carry.
    """
    if io is not None and not is_local(path):
        return io.new_input(path).open(seekable=True)
    filesystem, inner = _filesystem(path)
    return filesystem.open_input_file(inner)


def is_local(path: str) -> bool:
    return path.startswith("file:") or "://" not in path


def _filesystem(path: str) -> tuple[Any, str]:
    from urllib.parse import urlparse

    from pyarrow import fs as pafs

    if path.startswith("file:"):  # Spark writes "file:/x", pyiceberg "file:///x"; pyarrow takes only the latter
        return pafs.LocalFileSystem(), urlparse(path).path
    return pafs.FileSystem.from_uri(path) if "://" in path else (pafs.LocalFileSystem(), path)

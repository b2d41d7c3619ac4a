"""The global id index: ``_ai_unique_id_`` -> where each row lives, per physical table.

Two backends behind one protocol (:class:`~omni_iceberg.index.backend.IndexBackend`):
embedded LMDB (default) and a real HBase through Thrift, picked by ``OMNI_INDEX``
(:func:`open_index`). Entries are written before the logical commit and become visible
only through the runs the family's pinned snapshots name
(:mod:`omni_iceberg.index.visibility`); when the index cannot vouch for a table,
lookups scan instead and say so.

Example (the verb that loads a version by name, :func:`omni_iceberg.explore.lookup.get_rows`,
takes the context, which opens the index, so it lives above this package)::

    >>> from omni_iceberg.index import lookup_rows, open_index
    >>> lookup_rows(omni.catalog, omni.state("web"), open_index(omni.config, "aidata.web"), ids)  # doctest: +SKIP
"""

from omni_iceberg.index.core import IdIndex, IndexView, IndexWriter, Location
from omni_iceberg.index.errors import IndexCorruptError, IndexUnavailableError, MalformedIdError
from omni_iceberg.index.lookup import FOUND_COLUMN, Lookup, lookup_rows
from omni_iceberg.index.maintenance import RebuildReport, VerifyReport, rebuild, verify
from omni_iceberg.index.select import open_index

__all__ = [
    "FOUND_COLUMN", "IdIndex", "IndexCorruptError", "IndexUnavailableError", "IndexView", "IndexWriter", "Location",
    "Lookup", "MalformedIdError", "RebuildReport", "VerifyReport", "lookup_rows", "open_index", "rebuild", "verify",
]

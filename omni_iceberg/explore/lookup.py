"""``get_rows``: a logical table's rows for a list of ids, at a version given by name or tag.

The version comes from the context; the rows from
:func:`omni_iceberg.index.lookup.lookup_rows`, which reads them through the id index, or
scans where the index cannot vouch for a table. This verb lives above the index, not in
it, because it takes the context and the context opens the index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import pyarrow as pa

from catalog_ext.contract import split_qualified
from catalog_ext.family import FamilyState
from omni_iceberg.index.core import IdIndex
from omni_iceberg.index.keys import check_ids
from omni_iceberg.index.lookup import Lookup, lookup_rows
from omni_iceberg.index.select import open_index

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext


def get_rows(ctx: OmniContext, name: str, ids: Sequence[str], columns: list[str] | None = None,
             as_of: int | None = None, explain: bool = False, index: IdIndex | str | None = None
             ) -> pa.Table | Lookup:
    """Logical rows of ``name`` for ``ids`` at version ``as_of`` (default latest).

    Returns a table with one row per distinct id, in the order asked, the requested
    columns (default: the whole logical row; nested fields like ``RawData.url`` allowed)
    and ``_found`` (False rows carry only the id). With ``explain=True`` returns a
    :class:`~omni_iceberg.index.lookup.Lookup` whose ``explain()`` says, per physical
    table, index or scan and why. Malformed ids raise
    :class:`~omni_iceberg.index.errors.MalformedIdError` naming the id; an index backend
    that cannot be reached raises :class:`~omni_iceberg.index.errors.IndexUnavailableError`
    naming where.

    Example::

        >>> ctx = omni.context  # doctest: +SKIP
        >>> get_rows(ctx, "web", ["9e107d9d372bb6826bd81d3542a419d6"], columns=["RawData.url"])  # doctest: +SKIP
    """
    wanted = check_ids(ids)
    ns, table = split_qualified(name)
    state: FamilyState = ctx.state(f"{ns}.{table}", as_of)
    idx = index if isinstance(index, IdIndex) else open_index(ctx.config, state.table.identifier, index)
    result = lookup_rows(ctx.catalog, state, idx, wanted, columns)
    return result if explain else result.rows


__all__ = ["get_rows"]

"""A pyiceberg cost that grew with table history, removed: ``Transaction.table_metadata``.

pyiceberg 0.12 recomputes a transaction's metadata on every access of this property:
it applies all staged updates to the table's metadata and deep-copies the result. One
omni submit reads it ~29 times across only 7 distinct states, and the deep copy costs
in proportion to the table's snapshots, snapshot log and metadata log - measured 4 ms
a copy at 44 snapshots and a 100-entry log, a third of a 10-record submit late in a
table's life, against a fraction of that on a young table.

The result depends only on the table's metadata object and the tuple of staged
updates. Both are immutable (pydantic models declared frozen, tuples), and a new
update replaces the tuple, so the result is memoised per transaction on the identity
of the two: the same value pyiceberg would compute, computed once per state.
``install`` is idempotent and runs when :mod:`catalog_ext` is imported.
"""

from __future__ import annotations

from typing import Any

_MEMO_ATTR = "_omni_table_metadata_memo"


def install() -> None:
    from pyiceberg.table import Transaction

    original = Transaction.table_metadata
    if getattr(original.fget, "_omni_memo", False):
        return
    compute = original.fget

    def table_metadata(self: Any) -> Any:
        base, updates = self._table.metadata, self._updates
        memo = self.__dict__.get(_MEMO_ATTR)
        if memo is not None and memo[0] is base and memo[1] is updates:
            return memo[2]
        result = compute(self)
        self.__dict__[_MEMO_ATTR] = (base, updates, result)  # holds base and updates: ids stay theirs
        return result

    prop = property(table_metadata, doc=original.__doc__)
    prop.fget._omni_memo = True  # type: ignore[attr-defined]
    Transaction.table_metadata = prop


def installed() -> bool:
    from pyiceberg.table import Transaction

    return bool(getattr(Transaction.table_metadata.fget, "_omni_memo", False))

"""Governance work that follows a logical commit, as :meth:`catalog_ext.store.FamilyStore.on_commit` hooks.

The facade registers them when it builds the store, so whichever writer commits - a
submit, a backfill on any engine, a batch drop - the work follows the commit, and
catalog_ext never imports governance.
"""

from __future__ import annotations

import sys

from catalog_ext.errors import OmniError
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore
from governance.maintenance import maintain_if_due


class AutoMaintenanceHook:
    """:func:`governance.maintenance.maintain_if_due` after the commit that made a version.

    A maintenance that fails is reported on stderr: the commit stands, and the next due
    run retries.
    """

    def __init__(self, store: FamilyStore):
        self.store = store

    def __call__(self, state: FamilyState) -> None:
        try:
            maintain_if_due(self.store, state.table.identifier, state.version)
        except OmniError as e:
            print(f"warning: automatic maintenance of {state.table.identifier} failed: {e}", file=sys.stderr)


__all__ = ["AutoMaintenanceHook"]

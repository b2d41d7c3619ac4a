"""The hot route: another store the planner may answer a query from, plugged in from above.

The planner knows Iceberg only. The hot-column store (:mod:`omni_iceberg.hot.route`)
sits beside explore, not below it, so the facade registers its route here
(:func:`register_hot_route`) and the planner consults what is registered: per planned
query whether the store gives exactly the Iceberg answer (``QueryPlan.hot``), the SQL it
would run (``--explain``), and the answer itself, falling back to Iceberg when the store
fails with one of the route's ``unavailable`` errors. With nothing registered every
query is answered from Iceberg.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    import pyarrow as pa

    from omni_iceberg.context import OmniContext
    from omni_iceberg.explore.rules.context import QueryContext


@dataclass(frozen=True)
class HotRoute:
    """What the planner calls; a decision has ``use``, ``reason`` and ``to_dict()``."""

    #: (context, query) -> the decision, or None when no table the query reads has hot columns
    decide: Callable[[OmniContext, QueryContext], Any]
    #: (query, decision) -> the SQL the store runs
    sql: Callable[[QueryContext, Any], str]
    #: (query, decision) -> the store's answer
    execute: Callable[[QueryContext, Any], pa.Table]
    #: errors of an unreachable or failing store: the query is answered from Iceberg instead
    unavailable: tuple[type[Exception], ...] = ()


_route: HotRoute | None = None


def register_hot_route(route: HotRoute | None) -> None:
    """The route the planner consults from now on (None: none)."""
    global _route
    _route = route


def hot_route() -> HotRoute | None:
    return _route


__all__ = ["HotRoute", "hot_route", "register_hot_route"]

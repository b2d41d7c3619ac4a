"""Register feature definitions on a logical table: validate, create storage, commit.

Registration checks everything that can be checked before any work starts: unknown
inputs (with the nearest name), output collisions, dependency cycles (named), a
``filter:`` the explore guard refuses, and a version reused with different code (the
same code registered again from a moved .py file is the same version: its new place
is recorded). A new version gets a new physical table and
column; the logical output name moves to it and the previous version stays
queryable as ``<output>_v<old version>``. Every registration is appended to the
``omni_sys.features`` Iceberg table (append-only history, readable from Spark/Trino).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import networkx as nx

from catalog_ext import system_tables
from catalog_ext.contract import PHYSICAL_SEPARATOR, RAW_STAGE, READER_RAW_FIELDS, STAGES
from catalog_ext.family import FamilyState, FeatureBinding, LogicalColumn, PhysicalColumn, PhysicalTable, PhysicalTableGroup
from catalog_ext.physical import create_physical_table, first_snapshot_id
from catalog_ext.types import to_iceberg
from catalog_ext.store import FamilyStore
from catalog_ext.suggest import did_you_mean
from catalog_ext.updates import AddLogicalColumns, AddPhysicalTable, BindFeature, RecordFeatureSource
from omni_iceberg.features.graph import feature_graph
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError, same_identity_json
from omni_iceberg.features.udf import get_udf


@dataclass
class Registration:
    definition: FeatureDefinition
    logical_version: int | None
    changed: bool
    physical_table: str


#: raw fields a feature may read before any batch brought them (``RawData.content_type``):
#: registering such a feature declares the column, which reads as NULL until a batch has it
READER_FIELDS = {f"{RAW_STAGE}.{name}": typ for name, typ in READER_RAW_FIELDS.items()}


def physical_key(definition: FeatureDefinition) -> str:
    return f"f_{definition.name}_{_safe(definition.version)}"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", text)[:40]


def physical_column_name(output: str) -> str:
    return output.rsplit(".", 1)[-1]


def resolve_definition(state: FamilyState, definition: FeatureDefinition, pending: dict[str, FeatureDefinition]
                       ) -> FeatureDefinition:
    """Resolve input names to logical paths and fill the version from the UDF's code hash."""
    spec = get_udf(definition.udf)
    producible = {o.name for d in pending.values() for o in d.outputs}
    known = [c.path for c in state.columns] + sorted(producible)
    inputs = []
    for name in definition.inputs:
        if state.has_column(name) or name in producible or name in READER_FIELDS:
            inputs.append(name)
            continue
        by_leaf = [p for p in known if p.rsplit(".", 1)[-1] == name]
        if len(by_leaf) == 1:
            inputs.append(by_leaf[0])
            continue
        raise FeatureDefinitionError(
            f"feature {definition.name!r}: unknown input column {name!r} in {state.table.identifier}"
            f"{did_you_mean(name, known)}"
        )
    if spec.input_params and len(spec.input_params) != len(inputs):
        raise FeatureDefinitionError(
            f"feature {definition.name!r}: UDF {spec.name!r} takes inputs {list(spec.input_params)}, "
            f"the definition gives {inputs}"
        )
    resolved = definition.model_copy(update={"inputs": tuple(inputs), "table": state.table.identifier})
    return resolved.with_version(spec.code_hash)


def check_outputs(state: FamilyState, d: FeatureDefinition) -> None:
    for out in d.outputs:
        if out.name.startswith(RAW_STAGE + ".") or out.name in STAGES:
            raise FeatureDefinitionError(
                f"feature {d.name!r}: output {out.name!r} is ingested raw data; features write "
                f"ProcessedData./TrainableData. fields or their own columns"
            )
        if not state.has_column(out.name):
            continue
        col = state.column(out.name)
        producer = state.producer_of(out.name)
        if producer is not None and producer.name != d.name:
            raise FeatureDefinitionError(
                f"feature {d.name!r}: output {out.name!r} collides with the column produced by {producer.key}"
            )
        if producer is None and col.kind != "stage":
            raise FeatureDefinitionError(
                f"feature {d.name!r}: output {out.name!r} collides with an existing {col.kind} column"
            )
        if col.type != out.type:
            raise FeatureDefinitionError(
                f"feature {d.name!r}: output {out.name!r} is {col.type} in {state.table.identifier}, not {out.type}; "
                f"a changed type needs a new output name"
            )


def check_cycles(state: FamilyState, new: list[FeatureDefinition]) -> nx.DiGraph:
    """Feature dependency graph (producer -> consumer) of the current features plus ``new``."""
    defs: dict[str, FeatureDefinition] = {}
    for b in state.features:
        if b.current:
            defs[b.name] = FeatureDefinition.model_validate_json(b.definition)
    for d in new:
        defs[d.name] = d
    graph = feature_graph(defs)
    try:
        cycle = nx.find_cycle(graph)
    except nx.NetworkXNoCycle:
        return graph
    path = " -> ".join([cycle[0][0]] + [v for _, v in cycle])
    raise FeatureDefinitionError(f"feature dependency cycle: {path}")


class _NothingLeft(Exception):
    """Every definition was registered by another writer meanwhile: commit nothing."""


def check_registrable(state: FamilyState, resolved: list[FeatureDefinition]) -> None:
    """Everything that must hold on ``state`` before these definitions can be bound to it."""
    for d in resolved:
        for inp in d.inputs:
            if not state.has_column(inp) and inp not in READER_FIELDS and not any(
                    inp in other.output_names for other in resolved):
                raise FeatureDefinitionError(
                    f"feature {d.name!r}: input column {inp!r} is not in {state.table.identifier}"
                )
        check_outputs(state, d)
        check_filter(d)
        existing = state.feature(d.name, d.version)
        spec = get_udf(d.udf)
        # the source path is not compared: the same code from a moved file is the same feature
        if existing is not None and (not spec.same_code(existing.code_hash)
                                     or same_identity_json(existing.definition) != d.identity_json()):
            raise FeatureDefinitionError(
                f"feature {d.key} is already registered on {state.table.identifier} with different code or "
                f"parameters; bump its version"
            )
    check_cycles(state, resolved)


def check_filter(d: FeatureDefinition) -> None:
    """Refuse a ``filter:`` the backfill would refuse, now rather than at the first batch.

    The same guard checks it as when it runs (``omni_iceberg.read.guard.filter_query``):
    syntax, a single condition, only the feature's inputs, only allow-listed functions.
    """
    if not d.filter:
        return
    from omni_iceberg.read.guard import QueryError, filter_query

    names = [p.rsplit(".", 1)[-1] for p in d.inputs]  # what the filter sees, as in the worker
    try:
        filter_query(d.filter, names, "rows_in", f"feature {d.key}")
    except QueryError as e:
        raise FeatureDefinitionError(f"feature {d.name!r}: invalid filter {d.filter!r}: {e}") from e


def _moved(state: FamilyState, d: FeatureDefinition) -> bool:
    """``d`` is registered already, but its stored definition records another UDF file.

    Only a new file is recorded, never none: a definition without a source (a UDF
    imported by name in this process) must not erase where another process finds the code.
    """
    existing = state.feature(d.name, d.version)
    return d.source is not None and existing is not None and existing.definition != d.canonical_json()


def register(store: FamilyStore, namespace: str, name: str, definitions: list[FeatureDefinition],
             command: str = "") -> list[Registration]:
    """Register several definitions atomically (one logical version for all of them).

    Validation and storage creation happen once, up front; the commit's updates are
    rebuilt from the latest state on every attempt, so a registration that lost a race
    aliases the version that actually became current meanwhile.
    """
    state = store.load(namespace, name)
    pending = {d.name: d for d in definitions}
    resolved = [resolve_definition(state, d, pending) for d in definitions]
    check_registrable(state, resolved)
    todo = [d for d in resolved if state.feature(d.name, d.version) is None]
    if not todo and not any(_moved(state, d) for d in resolved):
        return [Registration(d, state.version, False, state.feature(d.name, d.version).table_key) for d in resolved]

    first_snapshots: dict[str, int] = {}
    for d in todo:  # storage first: a crash here leaves an unbound table that a rerun adopts
        ident = _physical_identifier(namespace, name, d)
        columns = {physical_column_name(o.name): to_iceberg(o.type) for o in d.outputs}
        _create_or_reuse(store, ident, columns, state.table.bucket_count, namespace, name, d)
        first_snapshots[d.key] = first_snapshot_id(store.catalog, ident)

    bound: list[FeatureDefinition] = []

    def updates(latest: FamilyState) -> tuple[Any, ...]:
        check_registrable(latest, resolved)
        fresh = [d for d in todo if latest.feature(d.name, d.version) is None]
        # a feature re-registered from a moved .py file: record where its code lives now,
        # so 'omni backfill' in another process loads it from there
        moved = [d for d in resolved if d not in fresh and _moved(latest, d)]
        if not fresh and not moved:
            raise _NothingLeft()
        bound[:] = fresh
        out: list[Any] = []
        for d in fresh:
            out += binding_updates(latest, d, _physical_identifier(namespace, name, d), first_snapshots[d.key])
        out += [RecordFeatureSource(d.name, d.version, d.canonical_json(), get_udf(d.udf).code_hash) for d in moved]
        return tuple(out)

    try:
        new_state = store.commit(namespace, name, updates, operation="register", command=command,
                                 summary=lambda latest: {"omni.features": ",".join(
                                     d.key for d in todo if latest.feature(d.name, d.version) is None),
                                     "omni.moved-sources": ",".join(d.key for d in resolved if _moved(latest, d))})
    except _NothingLeft:
        latest = store.load(namespace, name)
        return [Registration(d, latest.version, False, latest.feature(d.name, d.version).table_key)
                for d in resolved]
    _record_history(store, new_state, bound)
    return [Registration(d, new_state.version, d in bound, physical_key(d)) for d in resolved]


def binding_updates(latest: FamilyState, d: FeatureDefinition, identifier: str, first_snapshot: int | None
                    ) -> list[Any]:
    """The typed updates that bind ``d`` to ``latest``: its table, columns, and aliases of the
    version it replaces - computed from ``latest``, never from an earlier read."""
    key = physical_key(d)
    group = "features-gpu" if d.engine == "gpu" else "features-cpu"
    declared = tuple(LogicalColumn(path=p, type=READER_FIELDS[p], kind="stage",
                                   comment="MIME type of raw_data as its reader knew it (NULL: unknown)")
                     for p in d.inputs if p in READER_FIELDS and not latest.has_column(p))
    out: list[Any] = [AddLogicalColumns(declared)] if declared else []
    out += [
        AddPhysicalTable(
            PhysicalTable(key=key, identifier=identifier, group=group, snapshot_id=first_snapshot, role="feature"),
            PhysicalTableGroup(name=group, purpose=f"{group.split('-')[1].upper()} feature outputs"),
        ),
        AddLogicalColumns(tuple(
            LogicalColumn(path=o.name, type=o.type, kind="stage" if "." in o.name else "feature",
                          comment=o.comment or d.comment, producer=d.name)
            for o in d.outputs)),
    ]
    previous = latest.feature(d.name)
    aliases = []
    if previous is not None:
        for out_col in previous.outputs:
            alias = f"{out_col}_v{_safe(previous.version)}"
            col = latest.column(out_col)
            alias_col = LogicalColumn(path=alias, type=col.type, kind=col.kind, producer=d.name,
                                      comment=f"{out_col} as computed by {previous.key}")
            aliases.append((alias_col, PhysicalColumn(table=previous.table_key, name=physical_column_name(out_col),
                                                      logical=alias)))
            # values a column group holds (governance.column_groups) stay readable under the alias too
            aliases += [(alias_col, PhysicalColumn(table=pc.table, name=pc.name, logical=alias))
                        for pc in latest.physical_columns_of(out_col)
                        if latest.physical_table(pc.table).role == "column-group"]
    binding = FeatureBinding(
        name=d.name, version=d.version, definition=d.canonical_json(), code_hash=get_udf(d.udf).code_hash,
        table_key=key, outputs=tuple(o.name for o in d.outputs), registered_version=latest.version + 1,
    )
    remap = tuple(PhysicalColumn(table=key, name=physical_column_name(o.name), logical=o.name) for o in d.outputs)
    out.append(BindFeature(binding, remap=remap, aliases=tuple(aliases)))
    return out


def as_if_registered(state: FamilyState, definitions: list[FeatureDefinition]) -> FamilyState:
    """``state`` as registering ``definitions`` (resolved against it) would leave it.

    Nothing is created or committed: the planner plans on this state a backfill that
    registers missing built-in producers before it runs, so the plan shown is the plan run.
    """
    from catalog_ext.updates import apply_updates

    ns, name = state.table.namespace, state.table.name
    for d in definitions:
        ups = binding_updates(state, d, _physical_identifier(ns, name, d), None)
        state = apply_updates(state, tuple(ups), operation="register", command="", summary={},
                              now_ms=state.committed_ms)
    return state


def _physical_identifier(namespace: str, name: str, d: FeatureDefinition) -> str:
    return f"{namespace}.{name}{PHYSICAL_SEPARATOR}{physical_key(d)}"


def _create_or_reuse(store: FamilyStore, ident: str, columns: dict[str, Any], buckets: int, namespace: str,
                     name: str, d: FeatureDefinition) -> None:
    from pyiceberg.exceptions import TableAlreadyExistsError

    try:
        create_physical_table(store.catalog, ident, columns, buckets,
                              {"omni.logical-table": f"{namespace}.{name}", "omni.role": "feature",
                               "omni.feature": d.key})
    except TableAlreadyExistsError:
        # left by a registration that crashed before its commit, or made by a concurrent
        # registration of the same name and version: either way it is ours to bind
        table = store.catalog.load_table(ident)
        if table.properties.get("omni.feature") != d.key:
            raise FeatureDefinitionError(f"physical table {ident} exists and belongs to something else") from None


def _record_history(store: FamilyStore, state: FamilyState, defs: list[FeatureDefinition]) -> None:
    now = datetime.now(timezone.utc)
    system_tables.append_rows(store.catalog, system_tables.FEATURES, [
        {"logical_table": state.table.identifier, "name": d.name, "version": d.version, "udf": d.udf,
         "code_hash": get_udf(d.udf).code_hash, "engine": d.engine, "inputs": json.dumps(list(d.inputs)),
         "outputs": json.dumps([o.model_dump() for o in d.outputs]), "definition": d.canonical_json(),
         "logical_version": state.version, "registered_at": now}
        for d in defs
    ])

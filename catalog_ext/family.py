"""The five-layer mapping between one logical wide table and its physical family.

LogicalTable -> LogicalColumn -> PhysicalColumn <- PhysicalTable <- PhysicalTableGroup.
One :class:`FamilyState` is the whole mapping at one logical version. It is an
immutable, canonically serialisable record: changes are made by the typed updates in
:mod:`catalog_ext.updates`, which return a new state, never by mutation.

Links are stored once, by name, and navigated both ways through indexes built on
first use (``physical_columns_of`` / ``logical_column_of``, ``tables_in_group`` /
``group_of`` ...), so the stored document can never hold two disagreeing copies of
the same link.
"""

from __future__ import annotations

import json
from operator import is_
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_serializer

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, STAGES

ColumnKind = Literal["key", "stage", "feature"]
IdMode = Literal["md5", "uuid"]


class _Frozen(BaseModel):
    # extra="ignore": documents written by a newer release still load
    model_config = ConfigDict(frozen=True, extra="ignore")


class LogicalTable(_Frozen):
    """What users name in SQL: ``aidata.web``."""

    namespace: str
    name: str
    id_mode: IdMode = "md5"
    bucket_count: int = 16
    created_ms: int = 0
    comment: str = ""

    @property
    def identifier(self) -> str:
        return f"{self.namespace}.{self.name}"


class LogicalColumn(_Frozen):
    """A column of the logical contract. Stage fields are named ``Stage.field``."""

    path: str
    type: str
    kind: ColumnKind
    comment: str = ""
    #: name@version of the feature that produces it, for feature and derived stage columns
    producer: str | None = None

    @property
    def stage(self) -> str | None:
        head = self.path.split(".", 1)[0]
        return head if head in STAGES and "." in self.path else None

    @property
    def leaf(self) -> str:
        return self.path.rsplit(".", 1)[-1]


class PhysicalColumn(_Frozen):
    """Where a logical column's values physically live."""

    table: str  # key of the PhysicalTable
    name: str  # column path inside that Iceberg table, e.g. ``RawData.url``
    logical: str  # LogicalColumn.path


class PhysicalTable(_Frozen):
    """One real Iceberg table of the family, pinned to one snapshot per version.

    Roles: ``base`` (every row's keys and stage fields), ``feature`` (where a feature
    version writes its outputs), ``materialized`` (a pre-joined copy, see
    :class:`MaterializedCopy`) and ``column-group`` (the columns of several feature
    tables merged into one table by ``governance.column_groups``, so a view of N
    features needs a join per group, not per feature).
    """

    key: str
    identifier: str  # namespace.table in the catalog
    group: str
    snapshot_id: int | None = None  # None: nothing committed yet
    role: Literal["base", "feature", "materialized", "column-group"] = "base"
    #: the pinned snapshot holds no rows: every value moved to a column group. Readers
    #: skip the table (no join) until a writer pins a snapshot with rows again.
    emptied: bool = False

    @model_serializer(mode="wrap")
    def _without_default_emptied(self, handler):
        # tables never emptied serialise as before: older documents keep their bytes
        out = handler(self)
        if isinstance(out, dict) and not out.get("emptied"):
            out.pop("emptied", None)
        return out


class PhysicalTableGroup(_Frozen):
    """Physical tables grouped by function (base rows, CPU features, ...)."""

    name: str
    purpose: str = ""


class Batch(_Frozen):
    """One committed ingest batch (``_ai_append_name_`` value)."""

    name: str
    rows: int
    read: int
    duplicates: int
    rejected: int
    sources: list[str] = Field(default_factory=list)
    version: int
    committed_ms: int
    #: the submit attempt that committed this batch: its rejects are the batch's rejects
    #: (earlier, failed attempts of the same batch name wrote rejects under other ids)
    submit_id: str = ""


class FeatureBinding(_Frozen):
    """A feature version registered on this table, and where its outputs live."""

    name: str
    version: str
    definition: str  # canonical JSON of the FeatureDefinition
    code_hash: str
    table_key: str  # the physical table holding this version's outputs
    outputs: tuple[str, ...]  # logical paths it produces
    current: bool = True  # False once a newer version of the feature is registered
    registered_version: int = 0

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"


class ComputedUnit(_Frozen):
    """Feature ``name@version`` has been computed for batch ``batch`` (errors are null outputs).

    ``data_version`` identifies the values themselves: the feature's version and code
    plus the data versions of the features that produced its inputs (see
    :mod:`catalog_ext.data_versions`). ``upstream`` names those producers
    (``column<-feature@version#data_version`` or ``column<-ingest``), so a stale unit
    can say what changed. Documents written before data versions have both empty.
    """

    feature: str
    version: str
    batch: str
    run_id: str
    rows: int
    errors: int
    reused: int = 0
    logical_version: int
    data_version: str = ""
    upstream: tuple[str, ...] = ()
    #: retry runs that added values to this unit since it was computed (``omni backfill
    #: --retry-failed``): its values changed though its data version did not
    retried: int = 0

    @model_serializer(mode="wrap")
    def _without_zero_retried(self, handler):
        # units never retried serialise as before: their segments keep their names and bytes
        out = handler(self)
        if isinstance(out, dict) and not out.get("retried"):
            out.pop("retried", None)
        return out


#: navigation indexes (column by path, table by key, ...) by the identity of the tuples they
#: index: a state's tuples are immutable, so the same tuple objects give the same index, and a
#: changed copy (model_copy) holds new tuples. Without it a 2,500-column view rendered in
#: O(columns x physical columns). Values are shared: callers must not mutate them.
_INDEX_MEMO: dict[tuple[object, ...], tuple[tuple[object, ...], object]] = {}
_INDEX_MEMO_SIZE = 256


def _memo(kind: str, inputs: tuple[object, ...], build):
    key = (kind, *map(id, inputs))
    hit = _INDEX_MEMO.get(key)
    # map(is_) rather than a generator: this runs on every navigation call (a point lookup makes ~15)
    if hit is not None and all(map(is_, hit[0], inputs)):
        return hit[1]
    value = build()
    _INDEX_MEMO[key] = (inputs, value)  # holding the inputs keeps their ids from being reused
    while len(_INDEX_MEMO) > _INDEX_MEMO_SIZE:
        _INDEX_MEMO.pop(next(iter(_INDEX_MEMO)))
    return value


#: fresh_materialized_tables answers, by the identity of their inputs (oldest evicted first)
_FRESH_MEMO: dict[tuple[int, ...], tuple[tuple[object, ...], frozenset[str]]] = {}
_FRESH_MEMO_SIZE = 64


class MaterializedCopy(_Frozen):
    """A physical table holding pre-joined copies of ``columns`` (``role="materialized"``).

    ``signature`` is :meth:`FamilyState.coverage_signature` of ``columns`` when its rows
    were written: the batches and the data versions of every value. While the state's
    signature is the same, the copy holds exactly the values the source tables hold and
    readers prefer it (one table instead of a join); once a batch arrives or a column is
    recomputed it is stale and readers go back to the sources until it is refreshed
    (governance/materialize.py).
    """

    table_key: str
    columns: tuple[str, ...]
    batches: tuple[str, ...]  # the batches whose rows it holds
    signature: str  # coverage_signature(columns, batches) when written
    built_version: int


class HotColumns(_Frozen):
    """Feature columns kept in a ClickHouse hot store for fast aggregation (``omni accelerate --hot``).

    The choice is part of the logical table; the hot store's rows are derived state: the
    store records the :meth:`FamilyState.coverage_signature` of ``columns`` it holds, and a
    query reads it only while that equals the signature at the query's version.
    """

    columns: tuple[str, ...]
    #: sync the store after every commit that changes these columns (else ``--sync`` by hand)
    sync_on_commit: bool = False


class FamilyState(_Frozen):
    """The full mapping at one logical version."""

    format_version: int = 1
    version: int
    parent_version: int | None = None
    operation: str
    command: str = ""
    committed_ms: int
    summary: dict[str, str] = Field(default_factory=dict)
    table: LogicalTable
    columns: tuple[LogicalColumn, ...]
    groups: tuple[PhysicalTableGroup, ...]
    tables: tuple[PhysicalTable, ...]
    physical_columns: tuple[PhysicalColumn, ...]
    batches: tuple[Batch, ...] = ()
    features: tuple[FeatureBinding, ...] = ()
    computed: tuple[ComputedUnit, ...] = ()
    materializations: tuple[MaterializedCopy, ...] = ()
    hot: HotColumns | None = None

    # ---- serialisation -------------------------------------------------------------
    def to_json(self) -> str:
        """Canonical JSON (sorted keys) so equal states serialise to equal bytes."""
        doc = self.model_dump(mode="json")
        if not doc["materializations"]:
            del doc["materializations"]  # documents without one stay byte-identical to older ones
        if doc["hot"] is None:
            del doc["hot"]
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "FamilyState":
        return cls.model_validate_json(text)

    # ---- navigation, both ways -----------------------------------------------------
    # Indexes are memoised by the identity of the tuples they index (see _memo), never
    # stored on the instance: model_copy would carry such a cache over to a changed copy.
    @property
    def _columns_by_path(self) -> dict[str, LogicalColumn]:
        return _memo("columns", (self.columns,), lambda: {c.path: c for c in self.columns})

    @property
    def _tables_by_key(self) -> dict[str, PhysicalTable]:
        return _memo("tables", (self.tables,), lambda: {t.key: t for t in self.tables})

    @property
    def _pcols_by_logical(self) -> dict[str, list[PhysicalColumn]]:
        # which copies are fresh follows the materializations, batches, computed units and features
        inputs = (self.physical_columns, self.materializations, self.batches, self.computed, self.features)
        return _memo("pcols", inputs, self._build_pcols_by_logical)

    def _build_pcols_by_logical(self) -> dict[str, list[PhysicalColumn]]:
        out: dict[str, list[PhysicalColumn]] = {}
        for pc in self.physical_columns:
            out.setdefault(pc.logical, []).append(pc)
        if self.materializations:
            # a fresh copy first: every reader takes the first physical column of a path
            fresh = self.fresh_materialized_tables()
            stale = {m.table_key for m in self.materializations} - fresh
            for path, pcs in out.items():
                pcs = [pc for pc in pcs if pc.table not in stale]  # a stale copy is never read
                out[path] = sorted(pcs, key=lambda pc: pc.table not in fresh)
        return out

    def coverage_signature(self, columns: tuple[str, ...] | list[str],
                           batches: tuple[str, ...] | list[str] | None = None) -> str:
        """What the values of ``columns`` are at this version: every batch (or ``batches``),
        and per column the data version (or ingest) of the unit that wrote them in that
        batch. Equal signatures, equal values."""
        import hashlib

        chosen = sorted((b for b in self.batches if batches is None or b.name in batches), key=lambda b: b.name)
        if batches is not None and len(chosen) != len(set(batches)):
            return "missing-batch"  # a copied batch was dropped: never equal to a copy's signature
        units = {(u.feature, u.version, u.batch): u for u in self.computed}  # the latest record wins
        parts = []
        for path in sorted(columns):
            producer = self.producer_of(path)
            for b in chosen:
                if producer is None:
                    parts.append(f"{path}|{b.name}|ingest:{b.submit_id or b.version}")
                else:
                    unit = units.get((producer.name, producer.version, b.name))
                    parts.append(f"{path}|{b.name}|{producer.key}#"
                                 + (f"{unit.data_version or unit.run_id}" if unit else "missing")
                                 + (f"~retried{unit.retried}" if unit and unit.retried else ""))
        return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]

    def fresh_materialized_tables(self) -> set[str]:
        """Keys of the materialized tables whose values equal their sources' at this version.

        Every ``physical_columns_of`` asks this, so the answer is memoised by the identity of
        the four tuples it depends on (the memo holds them, so their ids cannot be reused).
        """
        if not self.materializations:
            return set()
        inputs = (self.materializations, self.batches, self.computed, self.features)
        key = tuple(id(x) for x in inputs)
        hit = _FRESH_MEMO.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], inputs)):
            return set(hit[1])
        names = {b.name for b in self.batches}
        fresh = frozenset(m.table_key for m in self.materializations
                          if set(m.batches) == names and m.signature == self.coverage_signature(m.columns))
        _FRESH_MEMO[key] = (inputs, fresh)
        while len(_FRESH_MEMO) > _FRESH_MEMO_SIZE:
            _FRESH_MEMO.pop(next(iter(_FRESH_MEMO)))
        return set(fresh)

    @property
    def _pcols_by_table(self) -> dict[str, list[PhysicalColumn]]:
        def build() -> dict[str, list[PhysicalColumn]]:
            out: dict[str, list[PhysicalColumn]] = {}
            for pc in self.physical_columns:
                out.setdefault(pc.table, []).append(pc)
            return out

        return _memo("pcols_by_table", (self.physical_columns,), build)

    def column(self, path: str) -> LogicalColumn:
        try:
            return self._columns_by_path[path]
        except KeyError:
            raise KeyError(f"no logical column {path!r} in {self.table.identifier}") from None

    def has_column(self, path: str) -> bool:
        return path in self._columns_by_path

    def physical_table(self, key: str) -> PhysicalTable:
        return self._tables_by_key[key]

    def read_parts(self, logical_path: str) -> list[PhysicalColumn]:
        """The physical columns a reader combines into ``logical_path``: COALESCE of them, by keys.

        A fresh materialized copy holds every value: it alone. Otherwise a column has
        one part per non-copy table that holds rows: its feature table and, once
        ``governance.column_groups`` moved values, the column group. The parts are
        disjoint - a moved value leaves its feature table, and a recomputed value is
        nulled in the group by the same commit - so COALESCE in any order is exact.
        """
        pcs = self.physical_columns_of(logical_path)
        if len(pcs) <= 1:
            return pcs
        tables = self._tables_by_key  # a reader may pass a state cut down to the tables it scans
        first = tables.get(pcs[0].table)
        if first is not None and first.role == "materialized":
            return pcs[:1]
        parts = [pc for pc in pcs if (t := tables.get(pc.table)) is not None and t.role != "materialized"
                 and not t.emptied]
        return parts or pcs[:1]

    def physical_columns_of(self, logical_path: str) -> list[PhysicalColumn]:
        """Logical -> physical. Empty when the column has no values anywhere yet."""
        return list(self._pcols_by_logical.get(logical_path, ()))

    def logical_column_of(self, table_key: str, physical_name: str) -> LogicalColumn:
        """Physical -> logical."""
        for pc in self._pcols_by_table.get(table_key, ()):
            if pc.name == physical_name:
                return self.column(pc.logical)
        raise KeyError(f"physical column {table_key}.{physical_name} maps to no logical column")

    def columns_of_table(self, table_key: str) -> list[PhysicalColumn]:
        """PhysicalTable -> its PhysicalColumns (key columns are implicit in every table)."""
        return list(self._pcols_by_table.get(table_key, ()))

    def tables_in_group(self, group: str) -> list[PhysicalTable]:
        """PhysicalTableGroup -> PhysicalTables."""
        return [t for t in self.tables if t.group == group]

    def group_of(self, table_key: str) -> PhysicalTableGroup:
        """PhysicalTable -> PhysicalTableGroup."""
        name = self.physical_table(table_key).group
        return next(g for g in self.groups if g.name == name)

    def tables_for(self, logical_paths: list[str]) -> list[PhysicalTable]:
        """The minimal set of physical tables that hold the given logical columns."""
        keys: dict[str, None] = {}
        for path in logical_paths:
            for pc in self.read_parts(path):
                keys.setdefault(pc.table, None)
        return [self._tables_by_key[k] for k in keys]

    @property
    def base_table(self) -> PhysicalTable:
        """The table that holds every row's keys (the left side of every family join)."""
        return next(t for t in self.tables if t.role == "base")

    def batch(self, name: str) -> Batch | None:
        return next((b for b in self.batches if b.name == name), None)

    def feature(self, name: str, version: str | None = None) -> FeatureBinding | None:
        """The current binding of feature ``name`` (or the given version)."""
        for f in self.features:
            if f.name == name and (f.version == version if version else f.current):
                return f
        return None

    def producer_of(self, logical_path: str) -> FeatureBinding | None:
        """The current feature that produces ``logical_path`` (None for ingested columns)."""
        return next((f for f in self.features if f.current and logical_path in f.outputs), None)

    def computed_batches(self, name: str, version: str) -> set[str]:
        """Batches with a computed unit of ``name@version``, fresh or stale (see data_versions)."""
        return {u.batch for u in self.computed if u.feature == name and u.version == version}

    def computed_unit(self, name: str, version: str, batch: str) -> ComputedUnit | None:
        """The latest unit recorded for ``name@version`` on ``batch``."""
        found = None
        for u in self.computed:
            if u.feature == name and u.version == version and u.batch == batch:
                found = u
        return found

    def stage_fields(self, stage: str) -> list[LogicalColumn]:
        return [c for c in self.columns if c.stage == stage]

    def top_level_columns(self) -> list[str]:
        """Logical column order of the wide table: keys, stages, then features."""
        out = [ID_COLUMN, BATCH_COLUMN]
        out += [s for s in STAGES if self.stage_fields(s)]
        out += [c.path for c in self.columns if c.kind == "feature"]
        return out

    @property
    def pins(self) -> dict[str, int | None]:
        """Physical table identifier -> pinned snapshot id."""
        return {t.identifier: t.snapshot_id for t in self.tables}

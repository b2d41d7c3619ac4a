"""The Python API: one :class:`Omni` object per catalog.

Example::

    from omni_iceberg import Omni
    omni = Omni()                                   # embedded SQLite catalog in ./.omni
    omni.create_table("web")
    omni.submit("web", ["crawl.warc.gz"], batch="cc")
    omni.read("web", columns=["RawData.url"], batches=["cc"]).num_rows
    omni.register_builtins("web", ["html_parser", "detected_lang"])
    omni.backfill("web", ["detected_lang"])
    omni.tag("web", "release-1")                    # then as_of="release-1" anywhere
    omni.compact("web", dry_run=True)

Every ``omni`` command is a method here (``tests/test_cli_parity.py`` keeps it so). The
methods parse and delegate: the layers below take the typed
:class:`~omni_iceberg.context.OmniContext` (``omni.context``), never this facade, and
the governance verbs live in :mod:`governance.verbs`.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import pyarrow as pa

from catalog_ext.contract import BATCH_COLUMN, ID_COLUMN, split_qualified
from catalog_ext.family import FamilyState
from catalog_ext.store import FamilyStore, VersionInfo
from catalog_ext.config import OmniConfig
from governance import verbs as governance
from governance.hooks import AutoMaintenanceHook
from omni_iceberg import tables
from omni_iceberg.context import OmniContext
from omni_iceberg.explore.routes import HotRoute, register_hot_route
from omni_iceberg.hot.store import HotStoreError
from omni_iceberg.hot.sync import HotSyncHook
from omni_iceberg.ingest.pipeline import SubmitReport, submit

#: the commits that set off the work following a commit (hot-column syncs, the automatic
#: maintenance): submits, backfills and batch drops, as when the facade ran it after those
#: verbs itself. Governance's own commits set off nothing, so maintenance never runs
#: inside itself, and ``accelerate --hot`` reports the sync it runs, not one a hook ran.
FOLLOWED_OPERATIONS = ("ingest", "backfill", "drop-batch")


def _hot(name: str) -> Any:
    """omni_iceberg.hot.route's function ``name``, imported when a query first calls it (with sqlglot)."""
    def call(*args: Any) -> Any:
        from omni_iceberg.hot import route

        return getattr(route, name)(*args)

    return call


# the planner does not import hot, which sits beside explore, not below it: the facade plugs the
# hot store's route into the planner
register_hot_route(HotRoute(_hot("decide"), _hot("hot_sql"), _hot("execute_hot"), (HotStoreError,)))


def _looks_like_path(text: str) -> bool:
    """A definition file's name (missing: its own error says so), not a built-in feature's."""
    from pathlib import Path

    return "/" in text or Path(text).suffix in (".py", ".yaml", ".yml", ".json")


class Omni:
    """Entry point for platform teams: tables, ingestion, status, versions and reads."""

    def __init__(self, config: OmniConfig | None = None, **resolve_kwargs: Any):
        self.config = config or OmniConfig.resolve(**resolve_kwargs)

    @cached_property
    def catalog(self) -> Any:
        from catalog_ext.catalog import open_catalog

        return open_catalog(self.config)  # without the store: physical tables of any catalog type

    @cached_property
    def context(self) -> OmniContext:
        """What the layers below take: config, catalog, family store (its commits followed by the
        hot-column sync and the automatic maintenance), id index."""
        ctx = OmniContext.open(self.config, self.catalog)
        ctx.store.on_commit(HotSyncHook(ctx), FOLLOWED_OPERATIONS)
        ctx.store.on_commit(AutoMaintenanceHook(ctx.store), FOLLOWED_OPERATIONS)
        return ctx

    @property
    def store(self) -> FamilyStore:
        """The family store of :attr:`context`."""
        return self.context.store

    # ---- tables -------------------------------------------------------------------------
    def create_table(self, name: str, *, id_mode: str = "md5", bucket_count: int = 16, comment: str = "",
                     command: str = "") -> FamilyState:
        """Create logical table ``name`` (``web`` or ``namespace.web``)."""
        from catalog_ext.errors import InvalidIdentifierError

        if id_mode not in ("md5", "uuid"):
            raise InvalidIdentifierError(f"invalid id mode {id_mode!r}: use md5 or uuid")
        if not 1 <= bucket_count <= 1024:
            raise InvalidIdentifierError(f"invalid bucket count {bucket_count}: use 1..1024")
        ns, table = split_qualified(name)
        return self.store.create(ns, table, id_mode=id_mode, bucket_count=bucket_count, comment=comment,
                                 command=command or f"create {ns}.{table}")

    def list_tables(self) -> list[str]:
        """Every logical table of the catalog, as ``namespace.name``."""
        return self.store.list_tables()

    def drop_table(self, name: str, *, purge: bool = False) -> dict[str, Any]:
        """Drop logical table ``name``: its view, every physical table of its family, its documents.

        The view goes first, so the logical table disappears in one step; physical tables
        follow. Without ``purge`` data files stay on storage (as with Iceberg's DROP TABLE);
        with it, data files, family documents and view metadata are deleted too.
        """
        return tables.drop_table(self.context, name, purge=purge)

    def state(self, name: str, as_of: int | str | None = None) -> FamilyState:
        """The five-layer mapping of ``name`` at logical version ``as_of`` (a number or a tag; default latest)."""
        return self.context.state(name, as_of)

    def log(self, name: str) -> list[VersionInfo]:
        """Every logical version of ``name``, oldest first."""
        return self.context.log(name)

    def tags(self, name: str) -> dict[str, int]:
        """Tag -> logical version of ``name`` (see :meth:`tag`)."""
        return self.context.tags(name)

    def version_of(self, name: str, as_of: int | str | None) -> int | None:
        """``as_of`` as a version number: ints and digits pass, a tag is looked up, None stays latest."""
        return self.context.version_of(name, as_of)

    def tag(self, name: str, label: str, version: int | str | None = None, command: str = "") -> dict[str, Any]:
        """Name logical version ``version`` (default: the latest) ``label``; ``as_of=label`` reads it.

        One logical commit through the typed update :class:`catalog_ext.tags.TagVersion`;
        tagging a label again moves it (the log keeps the history).
        """
        return tables.tag(self.context, name, label, version, command=command)

    def pin(self, name: str, version: int | str) -> dict[str, Any]:
        """A plain Iceberg view of logical version ``version`` (or of a tag) for Spark SQL and Trino.

        ``<table>__v<N>`` for a version - kept from retention until :meth:`unpin` - and
        ``<table>__tag_<label>`` for a tag (it follows the tag). See catalog_ext/pinned_views.py.
        """
        return tables.pin(self.context, name, version)

    def unpin(self, name: str, version: int | str) -> dict[str, Any]:
        """Drop the pinned view of ``version`` (or of a tag); retention may then expire the version."""
        return tables.unpin(self.context, name, version)

    def pinned_views(self, name: str) -> list[dict[str, Any]]:
        """Every pinned view of ``name``: version views and tag views."""
        return tables.list_pinned_views(self.context, name)

    # ---- add rows -----------------------------------------------------------------------
    def submit(self, name: str, sources: list[str], batch: str, *, field_map: dict[str, str] | list[str] | None = None,
               kind: str | None = None, max_reject_ratio: float | None = None, progress: bool | None = None,
               command: str = "", follow_links: bool = False, engine: str = "local",
               spark_master: str | None = None) -> SubmitReport:
        """Ingest ``sources`` as batch ``batch``; returns counts and the new logical version.

        ``follow_links`` reads symbolic links in a submitted folder that lead out of it;
        by default each is a reject naming it. ``engine``: ``local`` (this process), ``spark``
        (``spark_master``: ``spark://host:port``, default ``local[2]``) or ``auto``, as
        ``omni submit --engine`` (:meth:`ingest_engine` says which; the same rows either way).
        """
        ns, table = split_qualified(name)
        command = command or f"submit {ns}.{table} --batch {batch}"
        runner, note = self.ingest_engine(engine, [str(s) for s in sources], spark_master=spark_master, kind=kind,
                                          follow_links=follow_links)
        if note:
            import logging

            logging.getLogger("omni_iceberg").info(note)
        if runner is not None:
            with runner:
                return runner.submit(name, [str(s) for s in sources], batch, field_map=field_map, kind=kind,
                                     max_reject_ratio=max_reject_ratio, command=command, follow_links=follow_links)
        return submit(self.store, ns, table, [str(s) for s in sources], batch, field_map=field_map, kind=kind,
                      max_reject_ratio=max_reject_ratio, progress=progress, command=command,
                      follow_links=follow_links, spill_dir=str(self.config.home / "spill"))

    def ingest_engine(self, engine: str, sources: list[str], *, spark_master: str | None = None,
                      kind: str | None = None, follow_links: bool = False) -> tuple[Any, str | None]:
        """(the Spark ``ingest`` engine ``engine`` asks for, master checked - or None for this
        process; a note saying why, for ``auto``).

        ``auto``: local where Spark cannot run (the embedded catalog, no pyspark), else Spark when
        the source files weigh ``OMNI_SPARK_THRESHOLD_BYTES`` or more. An unreachable master, a
        master for the local engine or ``spark`` where Spark cannot run is a ConfigError before any work.
        """
        from catalog_ext.errors import ConfigError

        if engine not in ("local", "spark", "auto"):
            raise ConfigError(f"unknown submit engine {engine!r}: local, spark or auto")
        if engine == "local":
            if spark_master:
                raise ConfigError(f"a Spark master ({spark_master}) was given for engine 'local': use --engine spark")
            return None, None
        from omni_iceberg.engines import lookup, unavailable

        blocker = unavailable("ingest", "spark", self.config)
        if blocker:
            if engine == "spark":
                raise ConfigError(f"omni submit --engine spark cannot run here: {blocker}")
            return None, f"--engine auto: local (Spark cannot run here: {blocker})"
        runner = lookup("ingest", "spark")(self.context, master=spark_master)
        runner.check()  # an unreachable master fails before any work
        if engine == "spark":
            return runner, None
        from catalog_ext import settings

        size, threshold = runner.source_bytes(sources, kind, follow_links), \
            int(settings.value("OMNI_SPARK_THRESHOLD_BYTES"))
        if size < threshold:
            runner.close()
            return None, (f"--engine auto: local (the sources weigh {size} B, below the Spark threshold of "
                          f"{threshold} B)")
        return runner, f"--engine auto: spark (the sources weigh {size} B, at or above {threshold} B)"

    # ---- look ---------------------------------------------------------------------------
    def status(self, name: str, as_of: int | str | None = None) -> dict[str, Any]:
        """Batches, columns, physical tables (files, bytes) and the version of ``name``."""
        from omni_iceberg.explore.status import table_status

        return table_status(self.catalog, self.state(name, as_of))

    def read(self, name: str, columns: list[str] | None = None, batches: list[str] | None = None,
             as_of: int | str | None = None) -> pa.Table:
        """Rows of the logical table at one version, reading only the physical tables needed."""
        from omni_iceberg.read.reader import read_logical

        state = self.state(name, as_of)
        if as_of is not None:
            self._check_columns_existed(name, state, columns or [])
        unknown = [b for b in batches or () if state.batch(b) is None]
        if unknown:
            from catalog_ext.errors import InvalidIdentifierError
            from catalog_ext.suggest import did_you_mean

            raise InvalidIdentifierError(
                f"{state.table.identifier} has no batch {unknown[0]!r} at version {state.version}"
                f"{did_you_mean(unknown[0], [b.name for b in state.batches])} "
                f"(batches: {', '.join(b.name for b in state.batches) or 'none'}; see 'omni status')")
        return read_logical(self.catalog, state, columns, batches)

    def _check_columns_existed(self, name: str, state: FamilyState, columns: list[str]) -> None:
        """A column missing at an old version but present now: say at which version it was added."""
        from catalog_ext.contract import STAGES
        from catalog_ext.errors import SchemaConflictError

        missing = [c for c in columns if c not in STAGES and c not in (ID_COLUMN, BATCH_COLUMN)
                   and not state.has_column(c)]
        if not missing:
            return
        latest = self.state(name)
        for column in missing:
            if not latest.has_column(column):
                continue  # unknown at every version: the reader's own error suggests a name
            # columns are only ever added, so the first version that has it is found by bisection
            # (over the versions still in the log: retention may have expired some in between)
            later = [v.version for v in self.log(name) if state.version < v.version <= latest.version]
            lo_i, hi_i = 0, len(later) - 1
            while lo_i < hi_i:
                mid = (lo_i + hi_i) // 2
                if self.state(name, later[mid]).has_column(column):
                    hi_i = mid
                else:
                    lo_i = mid + 1
            lo = later[lo_i] if later else latest.version
            before = ([state.version] + later)[lo_i] if later else state.version
            added = (f"it was added at version {lo}" if lo == before + 1 else
                     f"it was added after version {before} and is in version {lo} (retention expired those between)")
            raise SchemaConflictError(
                f"column {column!r} of {state.table.identifier} does not exist at version {state.version}: "
                f"{added}; read a version from {lo} on (latest: {latest.version})")

    def rejects(self, name: str, batch: str | None = None) -> pa.Table:
        """Rejected records of ``name`` (optionally one batch), from ``omni_sys.rejects``.

        For a committed batch, only the committing attempt's rejects (a failed attempt's are not the batch's).
        """
        from catalog_ext import system_tables

        return system_tables.read_rejects(self.catalog, self.state(name), batch)

    # ---- add columns ------------------------------------------------------------------------
    def register_features(self, name: str, definitions: list[Any], command: str = "") -> list[Any]:
        """Register feature definitions: objects, ``@feature``-decorated UDFs, YAML/JSON/.py paths,
        or built-in features by name (``"detected_lang"``; :meth:`udfs` lists them).

        All of them are validated first and committed as one logical version.
        """
        from pathlib import Path

        from omni_iceberg.features.loading import load_definition, load_definitions_file
        from omni_iceberg.features.registry import register
        from omni_iceberg.features.spec import FeatureDefinition
        from omni_iceberg.features.udf import list_udfs

        defs: list[FeatureDefinition] = []
        for item in definitions:
            if isinstance(item, FeatureDefinition):
                defs.append(item)
            elif hasattr(item, "definition"):
                defs.append(item.definition)
            elif isinstance(item, str) and not Path(item).exists() and not _looks_like_path(item):
                # a name, as `omni feature register --builtin NAME` takes it (a file of that name wins)
                known = [u.name for u in list_udfs()]
                if item not in known:
                    from catalog_ext.errors import SourceError
                    from catalog_ext.suggest import did_you_mean

                    raise SourceError(f"{item!r} is neither a feature definition file nor a built-in feature"
                                      f"{did_you_mean(item, known)}; 'omni feature udfs' lists the built-ins")
                defs.append(load_definition({"udf": item}, f"built-in {item!r}"))
            else:
                defs += load_definitions_file(str(item))
        ns, table = split_qualified(name)
        return register(self.store, ns, table, defs, command=command or f"feature register {ns}.{table}")

    def register_builtins(self, name: str, builtins: list[str], command: str = "") -> list[Any]:
        """Register built-in features by name (``detected_lang``, ...) with their own inputs and outputs."""
        from omni_iceberg.features.loading import load_definition

        return self.register_features(name, [load_definition({"udf": b}, f"built-in {b!r}") for b in builtins],
                                      command=command or f"feature register {name} --builtin {' '.join(builtins)}")

    def udfs(self) -> list[dict[str, Any]]:
        """Every UDF this process knows (built-ins included): form, inputs and outputs with types."""
        from omni_iceberg.features.udf import list_udfs

        out = []
        for u in list_udfs():
            d = u.definition
            out.append({
                "name": u.name, "form": u.form, "engine": d.engine if d else None,
                "inputs": list(d.inputs) if d else list(u.input_params),
                "outputs": [{"name": o.name, "type": o.type} for o in d.outputs] if d else [],
                "params": list(u.config_params), "code_hash": u.code_hash,
                "comment": d.comment if d else "",
            })
        return out

    def load_udfs(self, name: str, features: list[str] | None = None) -> None:
        """Load, in this process, the UDFs of ``name``'s current features (default: all of them).

        UDFs declared in a user's .py file are imported again from the path recorded at
        registration, so ``omni backfill`` works in a fresh process; built-ins load by name.
        """
        from omni_iceberg.features.spec import FeatureDefinition
        from omni_iceberg.features.udf import load_udf_sources

        state = self.state(name)
        wanted = None if features is None else set(features)
        load_udf_sources([FeatureDefinition.model_validate_json(b.definition) for b in state.features
                          if b.current and (wanted is None or b.name in wanted)])

    def features(self, name: str) -> list[dict[str, Any]]:
        """Registered features of ``name``: version, inputs, outputs, engine, computed batches, status.

        ``status`` (computed / partial / missing / stale / superseded) comes from the
        planner's ``feature_status`` where this release has it; ``udf_source`` is the
        .py file a user's UDF was registered from.
        """
        import json

        from omni_iceberg.backfill import planner

        state = self.state(name)
        statuses = {}
        if hasattr(planner, "feature_status"):  # data versions: stale when an upstream changed
            statuses = {(r["name"], r["version"]): r for r in planner.feature_status(state)}
        out = []
        for b in state.features:
            d = json.loads(b.definition)
            row = {"name": b.name, "version": b.version, "current": b.current, "udf": d["udf"],
                   "engine": d["engine"], "inputs": d["inputs"], "outputs": list(b.outputs),
                   "physical_table": state.physical_table(b.table_key).identifier,
                   "computed_batches": sorted(state.computed_batches(b.name, b.version)),
                   "udf_source": (d.get("source") or {}).get("path")}
            extra = statuses.get((b.name, b.version), {})
            row.update({k: extra[k] for k in ("status", "stale", "missing_batches") if k in extra})
            out.append(row)
        return out

    def plan(self, name: str, features: list[str], batches: list[str] | None = None, has_gpu: bool | None = None):
        """The backfill plan (minimal closure, stages, routes) without running it.

        The UDFs it would run are loaded; one whose file changed since it was registered
        is a warning of the plan here (the backfill itself refuses to run it).
        """
        from omni_iceberg.backfill.planner import plan_backfill
        from omni_iceberg.features.spec import FeatureDefinitionError

        plan = plan_backfill(self.state(name), features, batches, has_gpu)
        try:
            self.load_udfs(name, [f for stage in plan.stages for f in stage.features])
        except FeatureDefinitionError as e:
            plan.warnings.append(str(e))
        return plan

    def backfill(self, name: str, features: list[str], batches: list[str] | None = None, *, dry_run: bool = False,
                 isolation: str = "process", max_error_ratio: float | None = 0.1, progress: bool | None = None,
                 has_gpu: bool | None = None, command: str = "", engine: str = "local",
                 spark_master: str | None = None, plan: Any = None) -> Any:
        """Compute ``features`` (and their missing ancestors) for ``batches``; one logical commit.

        ``engine``: ``local``, ``spark`` (``spark_master``: ``spark://host:port``, default local[2])
        or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES`` of input up); the report says which and why.
        """
        from omni_iceberg.backfill.choose import run_backfill

        # planned once, here or by the caller, and handed down: the engine runs this plan
        plan = plan or self.plan(name, features, batches, has_gpu)
        # only the UDFs that will run are loaded: a stale file of a computed ancestor does not block
        self.load_udfs(name, [f for stage in plan.stages for f in stage.features])
        return run_backfill(self.context, name, features, batches, engine=engine, spark_master=spark_master,
                            dry_run=dry_run, isolation=isolation, max_error_ratio=max_error_ratio,
                            progress=progress, has_gpu=has_gpu, plan=plan,
                            command=command or f"backfill {name} --features {','.join(features)}")

    def retry_failed(self, name: str, features: list[str], error_classes: list[str] | None = None, *,
                     isolation: str = "process", progress: bool | None = None, command: str = "",
                     engine: str = "local", spark_master: str | None = None) -> Any:
        """Recompute only the records ``features`` failed on (optionally only these exception classes)."""
        from omni_iceberg.backfill.choose import run_retry_failed

        self.load_udfs(name, features)
        return run_retry_failed(self.context, name, features, error_classes, engine=engine, spark_master=spark_master,
                                isolation=isolation, progress=progress, max_error_ratio=None,
                                command=command or f"backfill {name} --features {','.join(features)} --retry-failed")

    def errors(self, name: str, run_id: str | None = None, *, all_attempts: bool = False) -> pa.Table:
        """Failed records of ``name`` from ``omni_sys.errors`` (optionally one run).

        A rerun of the same command is another attempt of the same run: per unit, only the
        records of the attempt whose work stands are returned, unless ``all_attempts`` (each
        row has its ``attempt``).
        """
        from catalog_ext.contract import check_identifier
        from omni_iceberg.backfill.errors import errors_of

        if run_id:
            check_identifier(run_id.replace("-", "_"), "run id")
        return errors_of(self.catalog, self.state(name).table.identifier, run_id or None, all_attempts=all_attempts)

    def lineage(self, name: str, column: str):
        """The upstream tree of a logical column (features, versions, inputs, runs)."""
        from omni_iceberg.backfill.lineage import lineage_tree

        return lineage_tree(self.context, name, column)

    def query(self, sql: str, as_of: int | str | None = None, engine: str = "local",
              stream: bool = False, spark_master: str | None = None) -> pa.Table | pa.RecordBatchReader:
        """Run a read-only SQL query over logical tables (embedded DuckDB, or Spark); logged.

        The embedded engine reads the tables as streams and spills past ``OMNI_MEMORY_LIMIT_MB``;
        the answer is a table, or with ``stream=True`` a record batch reader that yields it
        as it is computed (what ``omni sql`` prints from).
        """
        from omni_iceberg.explore.planner import run_query

        return run_query(self.context, sql, as_of=self._query_version(as_of), engine=engine, stream=stream,
                         spark_master=spark_master)  # with engine="spark": spark://host:port (default local[2])

    def flush_query_log(self) -> int:
        """Push the spooled query-log rows into ``omni_sys.query_log`` now (Spark and Trino
        otherwise see them once the spool is due); returns how many rows."""
        from omni_iceberg.explore.query_log import flush_query_log

        return flush_query_log(self.context)

    def _query_version(self, as_of: int | str | None) -> int | None:
        """A tag in ``omni sql --as-of`` must name one version number in every table that has it."""
        if as_of is None or isinstance(as_of, int) or str(as_of).strip().lstrip("-").isdigit():
            return None if as_of is None else int(as_of)
        found = {t: self.tags(t)[str(as_of)] for t in self.list_tables() if str(as_of) in self.tags(t)}
        if len(set(found.values())) == 1:
            return next(iter(found.values()))
        from catalog_ext.errors import NoSuchVersionError

        if not found:
            raise NoSuchVersionError(f"no logical table has a tag {as_of!r}; --as-of takes a version number from "
                                     f"'omni log' or a tag from 'omni tag'")
        raise NoSuchVersionError(
            f"tag {as_of!r} names different versions in different tables "
            f"({', '.join(f'{t} v{v}' for t, v in sorted(found.items()))}); use a version number")

    def export(self, name: str, out_dir: str, *, columns: list[str] | None = None, where: str | None = None,
               fmt: str = "parquet", as_of: int | str | None = None, progress: bool | None = None,
               engine: str = "local", spark_master: str | None = None) -> Any:
        """Stream a filtered projection to ``out_dir`` (a folder or ``s3://`` prefix) with a manifest that
        re-creates it exactly; ``engine``: local, spark or auto (the same files either way)."""
        from omni_iceberg.explore.export import export

        return export(self.context, name, columns, where, fmt, out_dir, as_of=self.version_of(name, as_of), progress=progress,
                      engine=engine, spark_master=spark_master)

    def export_from_manifest(self, manifest: str, out_dir: str, progress: bool | None = None, engine: str = "local",
                             spark_master: str | None = None) -> Any:
        """Re-create an earlier export byte for byte from its manifest (on ``engine``)."""
        from omni_iceberg.explore.export import export_from_manifest

        return export_from_manifest(self.context, manifest, out_dir, progress=progress, engine=engine,
                                    spark_master=spark_master)

    def explain(self, sql: str, as_of: int | str | None = None) -> str:
        """The physical plan of a logical query: tables, snapshots, columns, pushed filters."""
        from omni_iceberg.explore.planner import plan_query

        return plan_query(self.context, sql, self._query_version(as_of)).explain()

    def explain_dict(self, sql: str, as_of: int | str | None = None) -> dict[str, Any]:
        """:meth:`explain` as a structure: per logical table its version, batches, scans and pruned tables."""
        from omni_iceberg.explore import planner

        if hasattr(planner, "explain_dict"):
            return planner.explain_dict(self.context, sql, self._query_version(as_of))
        plan = planner.plan_query(self.context, sql, self._query_version(as_of))
        if hasattr(plan, "to_dict"):
            return plan.to_dict()
        read = set(plan.tables())
        tables = []
        for alias, t in plan.ctx.tables.items():
            tables.append({
                "alias": alias, "logical_table": t.identifier, "logical_version": t.state.version,
                "batches": plan.ctx.batches.get(alias), "columns": list(plan.ctx.columns[alias]),
                "scans": [{"table": s.table.identifier, "snapshot_id": s.table.snapshot_id,
                           "columns": list(s.columns), "pushed": [f.sql() for f in s.filters]}
                          for s in plan.scans if s.alias == alias],
                "pruned": [x.identifier for x in t.state.tables if x.identifier not in read],
            })
        return {"tables": tables, "physical_sql": {"duckdb": plan.sql("duckdb")}}

    def translate(self, sql: str, dialect: str, as_of: int | str | None = None) -> str:
        """The same query over pinned physical tables, in ``spark`` or ``trino`` SQL."""
        from omni_iceberg.explore.planner import plan_query

        return plan_query(self.context, sql, self._query_version(as_of)).sql(dialect)

    # ---- point lookups (the id index) -----------------------------------------------------
    def get(self, name: str, ids: list[str], columns: list[str] | None = None, as_of: int | str | None = None,
            explain: bool = False, index: str | None = None) -> Any:
        """Logical rows by ``_ai_unique_id_`` through the id index (LMDB by default, ``hbase://`` too).

        One row per distinct id in the order asked, with ``_found`` False for ids the table
        does not hold; where the index lags the version asked for, the physical table is read
        by a bucket-pruned scan instead (``explain=True`` returns a lookup that says which).

        >>> omni.get("web", ["9e107d9d372bb6826bd81d3542a419d6"], columns=["RawData.url"])  # doctest: +SKIP
        """
        from omni_iceberg.explore.lookup import get_rows

        return get_rows(self.context, name, ids, columns=columns, as_of=self.version_of(name, as_of),
                        explain=explain, index=index)

    def verify_index(self, name: str, as_of: int | str | None = None, index: str | None = None,
                     progress: bool | None = None) -> Any:
        """Compare the id index with the tables: missing, stale and dangling entries (nothing changes)."""
        from omni_iceberg.index.maintenance import verify

        state = self.state(name, as_of)
        return verify(self.catalog, state, self.context.open_index(state.table.identifier, index), progress=progress)

    def rebuild_index(self, name: str, fresh: bool = False, index: str | None = None,
                      progress: bool | None = None) -> Any:
        """Index every row of every version still in the tables' history (resumable; ``fresh`` starts over)."""
        from omni_iceberg.index.maintenance import rebuild

        state = self.state(name)
        return rebuild(self.catalog, state, self.context.open_index(state.table.identifier, index), fresh=fresh,
                       progress=progress)

    def seal_index(self, name: str, index: str | None = None, progress: bool | None = None,
                   dry_run: bool = False) -> dict[str, Any] | None:
        """Merge the index's unsealed entries into the sorted segment bulk lookups search
        (LMDB; readers never wait). None where the backend does not seal (HBase compacts itself).
        Returns what :func:`omni_iceberg.index.maintenance.seal_if_due` returns, run with ``force``."""
        from omni_iceberg.index.maintenance import seal_if_due

        state = self.state(name)
        return seal_if_due(self.context.open_index(state.table.identifier, index), force=True, dry_run=dry_run,
                           progress=progress)

    # ---- govern (governance/verbs.py) ---------------------------------------------------
    def plan_compaction(self, name: str, min_files: int = 2) -> Any:
        """Which partitions of which physical tables :meth:`compact` would rewrite (nothing runs)."""
        return governance.plan_compaction(self.context, name, min_files)

    def compact(self, name: str, min_files: int = 2, dry_run: bool = False,
                progress: bool | None = None, *, engine: str = "local", spark_master: str | None = None,
                spark: Any = None) -> dict[str, Any]:
        """Merge the small files of partitions holding at least ``min_files`` of them, across batches;
        one logical commit (old versions keep reading their files).

        ``engine``: ``local``, ``spark`` or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES`` of
        partitions to rewrite, as backfills choose); ``spark`` is a running SparkSession to use,
        else one is started on ``spark_master`` (default ``local[2]``) only if Spark is chosen.
        """
        return governance.compact(self.context, name, min_files, dry_run, progress, engine=engine,
                                  spark_master=spark_master, spark=spark)

    def regroup(self, name: str, *, tables: list[str] | None = None, dry_run: bool = False,
                progress: bool | None = None, command: str = "", engine: str = "local",
                spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
        """Merge narrow feature tables into column groups (the system picks them, or ``tables``):
        the view then joins one table per group, not one per feature. One logical commit;
        old versions keep reading the old layout (governance/column_groups.py).

        ``engine``: ``local``, ``spark`` or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES`` of
        moving tables), as :meth:`compact`'s; ``spark``: a running SparkSession to use.
        """
        return governance.regroup(self.context, name, tables=tables, dry_run=dry_run, progress=progress,
                                  command=command, engine=engine, spark_master=spark_master, spark=spark)

    def rebucket(self, name: str, buckets: int | None = None, *, dry_run: bool = False,
                 progress: bool | None = None, command: str = "", engine: str = "local",
                 spark_master: str | None = None, spark: Any = None) -> dict[str, Any]:
        """Change the family's id-bucket count - ``buckets`` (a multiple or divisor of the current
        count), or the count the data's size calls for - by rewriting every physical table.
        One logical commit; old versions keep reading the old layout (governance/rebucket.py).

        ``engine``: ``local``, ``spark`` or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES`` of
        tables to rewrite), as :meth:`compact`'s; ``spark``: a running SparkSession to use.
        """
        return governance.rebucket(self.context, name, buckets, dry_run=dry_run, progress=progress, command=command,
                                   engine=engine, spark_master=spark_master, spark=spark)

    def coread_regroup(self, name: str, *, dry_run: bool = False, progress: bool | None = None,
                       command: str = "") -> dict[str, Any]:
        """Move the columns that logged reads keep joining across column groups into one table,
        when that makes the logged workload join fewer tables (governance/coread.py). One
        logical commit; old versions keep reading the old layout."""
        return governance.coread_regroup(self.context, name, dry_run=dry_run, progress=progress, command=command)

    def split_columns(self, name: str, columns: list[str], *, dry_run: bool = False, progress: bool | None = None,
                      command: str = "") -> dict[str, Any]:
        """Move ``columns`` out of their column groups into one table of their own (cold or huge
        columns), in one logical commit; old versions keep reading them where they were."""
        return governance.split_columns(self.context, name, columns, dry_run=dry_run, progress=progress,
                                        command=command)

    def accelerate(self, name: str, *, materialize: list[str] | None = None, refresh: bool = False,
                   hot: list[str] | None = None, drop_hot: bool = False, sync: bool = False,
                   sync_on_commit: bool = False, dry_run: bool = False, progress: bool | None = None,
                   engine: str = "local", spark_master: str | None = None) -> Any:
        """``omni accelerate``, one action: :meth:`materialize` ``materialize`` columns, ``refresh`` every
        stale copy, keep ``hot`` columns in the ClickHouse hot store (:meth:`set_hot_columns`),
        ``drop_hot`` them, or ``sync`` the hot store to the latest version (:meth:`sync_hot`).
        ``engine``/``spark_master``: as :meth:`materialize`'s (a materialization or a refresh only)."""
        return governance.accelerate(self.context, name, materialize=materialize, refresh=refresh, hot=hot,
                                     drop_hot=drop_hot, sync=sync, sync_on_commit=sync_on_commit, dry_run=dry_run,
                                     progress=progress, engine=engine, spark_master=spark_master)

    def runs(self, name: str, *, stats: bool = False) -> Any:
        """Backfill runs of ``name`` (every attempt, oldest first, from ``omni_sys.runs``); with
        ``stats``, per feature set and overall: first-submit success rate, attempts, automatic
        reruns, failures by cause and median throughput (omni_iceberg/backfill/run_stats.py)."""
        from omni_iceberg.backfill.run_stats import run_stats, runs_of

        rows = runs_of(self.context, self.state(name).table.identifier)
        return run_stats(rows) if stats else rows

    def advise(self, name: str, *, apply: bool = False, progress: bool | None = None) -> Any:
        """What the query log says to accelerate (hot columns, a materialization), with each
        proposal's observed benefit and measured storage cost; ``apply`` runs them
        (governance/advise.py). Returns an ``Advice`` (``.describe()``, ``.to_dict()``)."""
        return governance.advise(self.context, name, apply=apply, progress=progress)

    def set_hot_columns(self, name: str, columns: list[str] | None, *, sync_on_commit: bool = False,
                        progress: bool | None = None, command: str = "") -> dict[str, Any]:
        """Keep ``columns`` (scalar features; None: none) of ``name`` in the ClickHouse hot store: one
        logical commit records the choice, then the store is synced (omni_iceberg/hot/sync.py).
        ``omni sql`` answers from the store when every column a query needs is hot and fresh."""
        return governance.set_hot_columns(self.context, name, columns, sync_on_commit=sync_on_commit,
                                          command=command, progress=progress)

    def sync_hot(self, name: str, *, dry_run: bool = False, progress: bool | None = None) -> dict[str, Any]:
        """Load into the hot store the batches whose hot values changed since its last sync."""
        return governance.sync_hot(self.context, name, dry_run=dry_run, progress=progress)

    def materialize(self, name: str, columns: list[str], *, dry_run: bool = False, progress: bool | None = None,
                    command: str = "", engine: str = "local", spark_master: str | None = None,
                    spark: Any = None) -> dict[str, Any]:
        """Pre-join ``columns`` into one physical table that every reader prefers while it is fresh
        (builds it, appends new batches, or rebuilds it; governance/materialize.py).

        ``engine``: ``local``, ``spark`` (Spark joins the sources at their pinned snapshots and
        writes the copy on the staging branch) or ``auto`` (Spark from ``OMNI_SPARK_THRESHOLD_BYTES``
        of source columns), as :meth:`compact`'s; ``spark``: a running SparkSession to use.
        """
        return governance.materialize(self.context, name, columns, dry_run=dry_run, progress=progress,
                                      command=command, engine=engine, spark_master=spark_master, spark=spark)

    def plan_materialization(self, name: str, columns: list[str]) -> Any:
        """What :meth:`materialize` would do (``.describe()``, ``.to_dict()``)."""
        return governance.plan_materialization(self.context, name, columns)

    def refresh_materializations(self, name: str, *, dry_run: bool = False, progress: bool | None = None,
                                 engine: str = "local", spark_master: str | None = None,
                                 spark: Any = None) -> list[dict[str, Any]]:
        """Bring every stale materialization of ``name`` back to the latest version (``engine``: as
        :meth:`materialize`'s)."""
        return governance.refresh_materializations(self.context, name, dry_run=dry_run, progress=progress,
                                                   engine=engine, spark_master=spark_master, spark=spark)

    def drop_batch(self, name: str, batch: str, *, dry_run: bool = False, progress: bool | None = None,
                   command: str = "") -> dict[str, Any]:
        """Remove batch ``batch``: its rows leave every physical table and the id index, in one
        logical commit; older versions keep reading it (governance/drop_batch.py)."""
        return governance.drop_batch(self.context, name, batch, dry_run=dry_run, progress=progress, command=command)

    def plan_drop_batch(self, name: str, batch: str) -> Any:
        """The files :meth:`drop_batch` would delete or rewrite (``.describe()``, ``.to_dict()``)."""
        return governance.plan_drop_batch(self.context, name, batch)

    def expire(self, name: str, keep_last: int, *, keep_tagged: bool = True, min_age_s: float | None = None,
               dry_run: bool = False, progress: bool | None = None, command: str = "") -> Any:
        """Retention alone: keep the last ``keep_last`` versions (plus tagged and manifest-pinned ones).

        Returns a :class:`governance.retention.RetentionReport` (``dry_run``: its plan only).
        Expired versions leave ``omni log``; ``as_of`` on one names the oldest kept version.
        """
        return governance.expire(self.context, name, keep_last, keep_tagged=keep_tagged, min_age_s=min_age_s,
                                 dry_run=dry_run, progress=progress, command=command)

    def maintain(self, name: str, keep_last: int | None = None, *, min_age_s: float | None = None,
                 compact_min_files: int | None = None, dry_run: bool = False, progress: bool | None = None,
                 command: str = "", engine: str = "local", spark_master: str | None = None) -> Any:
        """Run the due maintenance of ``name``: stale staging branches, compaction of partitions
        holding ``compact_min_files`` small files, column groups, co-read groups from the query
        log, re-bucketing, retention, orphan files.

        ``engine``: ``local``, ``spark`` or ``auto``, for compaction and re-bucketing (as
        :meth:`compact`'s ``engine``) and the orphan sweep (Iceberg's ``remove_orphan_files`` on Spark; ``auto``:
        from the family's data size).
        Returns a :class:`governance.maintenance.MaintainReport`; meant to run periodically
        (``omni maintain web`` from cron, or after every N commits).
        """
        return governance.maintain(self.context, name, keep_last, min_age_s=min_age_s,
                                   compact_min_files=compact_min_files, dry_run=dry_run, progress=progress,
                                   command=command, engine=engine, spark_master=spark_master)

    # ---- tooling ------------------------------------------------------------------------
    def trino_config(self, out: str) -> str:
        """Write Trino's catalog properties for this catalog to ``out``; returns the file written."""
        from omni_iceberg.engine_config import write_trino_config

        return str(write_trino_config(self.config, out))

    def spark_config(self, out: str | None = None) -> str:
        """Spark settings (spark-defaults.conf) for this catalog: REST or JDBC, S3 or local.

        With ``out`` the full settings are written there (owner-only) and the path is
        returned; without it the text is returned with secrets masked. Storage credentials
        are never included: Spark's S3 client reads the AWS_* environment.
        """
        from omni_iceberg import engine_config

        if out:
            return engine_config.write_spark_defaults(self.config, out)
        return engine_config.render_spark_defaults(engine_config.spark_properties(self.config), mask_secrets=True)

    @staticmethod
    def settings() -> list[dict[str, Any]]:
        """Every setting: its value, where it came from (environment, .pyiceberg.yaml, default), unit and meaning."""
        from catalog_ext import settings

        return [s.as_dict() for s in settings.current()]

    @staticmethod
    def fetch_corpora(names: list[str] | None = None) -> dict[str, str]:
        """Download (once, cached) the real corpora the demo uses; name -> local path."""
        from omni_iceberg.demo import corpora

        return {n: str(corpora.fetch(n)) for n in (names or list(corpora.CORPORA))}

    def demo(self, fresh: bool = False, as_json: bool = False) -> Any:
        """The main job end to end: ingest the real corpora, backfill, query (see ``omni demo``)."""
        from omni_iceberg.demo.run import run_demo

        return run_demo(self, fresh=fresh, as_json=as_json)


__all__ = ["Omni", "ID_COLUMN", "BATCH_COLUMN"]

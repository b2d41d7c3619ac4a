"""Which engine runs a backfill plan: ``local``, ``spark``, or ``auto`` from the input size.

``auto`` measures the bytes the plan's first reads will scan - the stored size of the
input columns (Iceberg's per-column statistics) in the planned batches, scaled down
for a retry of a few records - and picks Spark at or above a threshold: below it, a
Spark session's start-up (seconds) costs more than it saves. The report states the
engine and the reason.

The threshold comes from the caller, else the ``OMNI_SPARK_THRESHOLD_BYTES`` setting,
whose default (1 TiB) comes from benchmarks/spark_crossover (see benchmarks/RESULTS.md):
measure on your cluster and set it.

>>> choose_engine(None, None, "auto", 100, input_size=250)
('spark', 'auto: the inputs are 250 B, at or above the Spark threshold of 100 B')
>>> choose_engine(None, None, "auto", 100, input_size=250, spark_blocker="pyspark is not installed")[0]
'local'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from catalog_ext import settings
from catalog_ext.contract import BATCH_COLUMN
from catalog_ext.errors import ConfigError

if TYPE_CHECKING:
    from omni_iceberg.context import OmniContext

ENGINES = ("local", "spark", "auto")


def threshold_bytes_from_env() -> int:
    """The ``OMNI_SPARK_THRESHOLD_BYTES`` setting: ``--engine auto`` picks Spark from this much input up."""
    return int(settings.value("OMNI_SPARK_THRESHOLD_BYTES"))


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def choose_engine(state: Any, plan: Any, requested: str, threshold_bytes: int | None = None, *,
                  input_size: int | None = None, catalog: Any = None,
                  spark_blocker: str | None = None, what: str = "the inputs are") -> tuple[str, str]:
    """(engine, reason) for running ``plan`` on ``state``.

    ``input_size`` is measured with :func:`measure_input_bytes` when not given (that
    needs ``catalog``). ``spark_blocker`` says why Spark cannot run here (no pyspark,
    an embedded SQLite catalog): ``auto`` then stays local and says so. ``what`` names
    the size in the reason (governance: "the partitions to rewrite hold").
    """
    if requested not in ENGINES:
        raise ConfigError(f"unknown engine {requested!r}: use one of {', '.join(ENGINES)}")
    if requested != "auto":
        return requested, f"requested --engine {requested}"
    if plan is not None and plan.empty:
        return "local", "auto: nothing to compute"
    threshold = threshold_bytes_from_env() if threshold_bytes is None else threshold_bytes
    if input_size is None:
        if catalog is None:
            raise ConfigError("choose_engine('auto') needs the input size or the catalog to measure it")
        input_size = measure_input_bytes(catalog, state, plan)
    if input_size < threshold:
        return "local", f"auto: {what} {_size(input_size)}, below the Spark threshold of {_size(threshold)}"
    if spark_blocker:
        return "local", (f"auto: {what} {_size(input_size)} (Spark threshold {_size(threshold)}), "
                         f"but Spark cannot run here: {spark_blocker}")
    return "spark", f"auto: {what} {_size(input_size)}, at or above the Spark threshold of {_size(threshold)}"


def choose_rewrite_engine(requested: str, input_size: Callable[[], int], *, spark: Any, spark_blocker: str | None,
                          what: str, threshold_bytes: int | None = None, nothing: str = "") -> tuple[str, str]:
    """(engine, reason) for a governance rewrite (compaction, re-bucketing, the orphan sweep).

    As :func:`choose_engine`, with what governance adds: ``nothing`` (say why, e.g. "nothing
    to compact") keeps ``auto`` local without sizing anything; a call offered no Spark
    session (``spark`` None) cannot go to Spark under ``auto``; ``input_size`` is only
    measured when ``auto`` needs it.
    """
    if requested == "auto" and nothing:
        return "local", f"auto: {nothing}"
    blocker = spark_blocker or (None if spark is not None else "no Spark session was offered to this call")
    return choose_engine(None, None, requested, threshold_bytes,
                         input_size=input_size() if requested == "auto" else 0, spark_blocker=blocker, what=what)


def measure_input_bytes(catalog: Any, state: Any, plan: Any) -> int:
    """Stored bytes of the plan's input columns in its batches (planning only, no data read).

    Only inputs that already have values count: what earlier stages of the same plan
    will produce does not exist yet, and is usually much smaller than what they read.
    """
    from pyiceberg.expressions import In

    wanted: dict[str, tuple[set[str], set[str]]] = {}  # table key -> (physical columns, batches)
    for stage in plan.stages:
        for path in stage.inputs:
            for pc in state.physical_columns_of(path):
                cols, batches = wanted.setdefault(pc.table, (set(), set()))
                cols.add(pc.name)
                batches.update(stage.batches)
    total = 0
    for key, (cols, batches) in wanted.items():
        meta = state.physical_table(key)
        if meta.snapshot_id is None or not batches:
            continue
        table = catalog.load_table(meta.identifier)
        schema = table.schema()
        field_ids = {schema.find_field(c).field_id for c in cols}
        scan = table.scan(snapshot_id=meta.snapshot_id, row_filter=In(BATCH_COLUMN, batches))
        for task in scan.plan_files():
            sizes = task.file.column_sizes or {}
            found = [sizes[i] for i in field_ids if i in sizes]
            total += sum(found) if found else task.file.file_size_in_bytes
    if plan.only_ids:  # a retry reads only the failed records of those batches
        rows = sum(b.rows for b in state.batches if b.name in set(plan.batches)) or 1
        total = int(total * min(1.0, sum(len(v) for v in plan.only_ids.values()) / rows))
    return total


def spark_blocker(config: Any) -> str | None:
    """Why Spark cannot run a backfill for ``config`` here (not installed, or its own check), or None."""
    from omni_iceberg.engines import unavailable

    return unavailable("backfill", "spark", config)


def backfill_engine(name: str) -> Any:
    """The factory of engine ``name``'s ``backfill`` capability (:mod:`omni_iceberg.engines`); the
    core's own (``local``) is registered first, so it needs no package metadata."""
    from omni_iceberg.backfill.local import register
    from omni_iceberg.engines import lookup

    register()
    return lookup("backfill", name)


def run_backfill(ctx: OmniContext, name: str, features: list[str], batches: list[str] | None = None, *,
                 engine: str = "local", spark_master: str | None = None, threshold_bytes: int | None = None,
                 has_gpu: bool | None = None, plan: Any = None, dry_run: bool = False,
                 engine_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Choose the engine for the command's plan and run it there; the report's ``engine``/``engine_reason``
    say which and why.

    ``plan`` is the command's one plan (``Omni.backfill`` and ``omni backfill`` make it
    once and hand it down); without it, it is made here. Engines never plan: the plan
    goes to :func:`~omni_iceberg.backfill.run.run_plan`, which places a plan routed for
    this machine for the engine's workers. ``kwargs`` go to ``run_plan``
    (``max_error_ratio``, ``progress``, ``command``); ``isolation`` (local),
    ``spark_master`` (Spark) and ``engine_options`` (a running ``spark`` session,
    ``jar_cache_dir``, ...) go to the engine's factory. The engine comes from
    :mod:`omni_iceberg.engines`; a missing one is a ConfigError naming the extra.
    """
    from catalog_ext.contract import split_qualified
    from omni_iceberg.backfill.planner import plan_backfill
    from omni_iceberg.backfill.run import run_plan, start_report
    from omni_iceberg.features.registry import register

    ns, table = split_qualified(name)
    state = ctx.store.load(ns, table)
    if plan is not None and plan.base_version != state.version:
        # the table moved since the command planned ('omni backfill' prints the plan and loads
        # the UDFs first): plan again on what is there now, so units a concurrent run committed
        # meanwhile are not computed twice and an unrelated commit (a rebucket) is not a conflict
        plan = None
    plan = plan or plan_backfill(state, features, batches, has_gpu)
    registered: list[str] = []
    if plan.registrations and not dry_run:
        # missing built-in producers: registered in a commit of their own, then planned on the
        # state that commit leaves (the plan assumed them registered; now they are)
        defs = list(plan.registrations.values())
        command = kwargs.get("command") or f"backfill {name} --features {','.join(features)}"
        regs = register(ctx.store, ns, table, defs, command=f"{command} (registers built-in producers "
                                                            f"{', '.join(d.name for d in defs)})")
        registered = [r.definition.key for r in regs]
        state = ctx.store.load(ns, table)
        plan = plan_backfill(state, features, batches, has_gpu)
    chosen, reason = choose_engine(state, plan, engine, threshold_bytes, catalog=ctx.catalog,
                                   spark_blocker=spark_blocker(ctx.config) if engine == "auto" else None)
    options = _engine_options(kwargs, spark_master, engine_options)
    if dry_run or plan.empty:  # no engine is started for nothing to run
        report = start_report(state, plan, chosen, reason)
        report.status = "nothing to do" if plan.empty else "dry run"
    else:
        with backfill_engine(chosen)(ctx, **options) as runner:
            report = run_plan(ctx, runner, state, plan, engine_reason=reason, **kwargs)
    report.registered = registered
    return report


def run_retry_failed(ctx: OmniContext, name: str, features: list[str], error_classes: list[str] | None = None, *,
                     engine: str = "local", spark_master: str | None = None, has_gpu: bool | None = None,
                     engine_options: dict[str, Any] | None = None, **kwargs: Any) -> Any:
    """Recompute only the failed records on the chosen engine (``auto`` is local: retries are small).

    The retry is planned once, here (:func:`~omni_iceberg.backfill.planner.plan_retry`), and
    run as :func:`run_backfill` runs a plan.
    """
    from catalog_ext.contract import split_qualified
    from omni_iceberg.backfill.errors import unresolved_errors
    from omni_iceberg.backfill.planner import plan_retry
    from omni_iceberg.backfill.run import run_plan

    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    chosen = "local" if engine == "auto" else engine
    reason = ("auto: a retry recomputes few records, the local engine" if engine == "auto"
              else f"requested --engine {engine}")
    with backfill_engine(chosen)(ctx, **_engine_options(kwargs, spark_master, engine_options)) as runner:
        state = ctx.store.load(*split_qualified(name))
        failed, attempt = unresolved_errors(ctx, state, features, error_classes)
        plan = plan_retry(state, features, failed, attempt, has_gpu)
        return run_plan(ctx, runner, state, plan, engine_reason=reason, **kwargs)


def _engine_options(kwargs: dict[str, Any], spark_master: str | None,
                    engine_options: dict[str, Any] | None) -> dict[str, Any]:
    """Engine options out of ``kwargs``: each engine takes the ones it knows (see :mod:`omni_iceberg.engines`)."""
    options: dict[str, Any] = dict(engine_options or {})
    if "isolation" in kwargs:
        options["isolation"] = kwargs.pop("isolation")
    if spark_master is not None:
        options["master"] = spark_master
    return options

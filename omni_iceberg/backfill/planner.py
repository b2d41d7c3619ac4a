"""The backfill planner: minimal closure, fused stages, CPU/GPU routing.

Given requested features and batches, the planner builds the feature dependency DAG
(networkx), keeps exactly the (feature, batch) units not fresh at the current version -
never computed, or stale because an upstream feature changed since (see
:mod:`catalog_ext.data_versions`) - recursing into ancestors only where they are not
fresh, and groups the
needed features into stages: one stage per dependency level and route, so features
that read the same inputs run in ONE scan over each batch with shared intermediate
results. Stages are ordered topologically.

An input no registered feature produces is resolved as a build system resolves a
missing rule: a column a batch holds (ingested ``RawData`` fields) is an input; one a
built-in produces (``ProcessedData.parsed_text``: ``html_parser``) makes the plan
register that built-in first (:attr:`BackfillPlan.registrations`; the plan is made on
the state the registration leaves, so it is the plan that runs); anything else is a
:class:`MissingProducerError` before anything runs, naming the column, who reads it and
the features known here that could produce it.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import networkx as nx

from catalog_ext import settings
from catalog_ext.contract import RAW_STAGE, check_batch_name
from catalog_ext.data_versions import batch_freshness, current_chains
from catalog_ext.family import FamilyState
from omni_iceberg.features.graph import feature_graph, producers_of
from omni_iceberg.features.spec import FeatureDefinition, FeatureDefinitionError

#: ``auto`` features go to a GPU when one is present and their model is at least this big
AUTO_GPU_MODEL_MB = float(settings.value("OMNI_AUTO_GPU_MODEL_MB"))
#: ... and when the GPU's free memory holds this many times the model (activations, CUDA context)
GPU_MEMORY_FACTOR = float(settings.value("OMNI_GPU_MEMORY_FACTOR"))


class MissingProducerError(FeatureDefinitionError):
    """A planned feature reads a column that nothing produces: no registered feature, no batch,
    no built-in. Raised while planning, so nothing runs and nothing is committed."""


@dataclass
class PlannedFeature:
    name: str
    version: str
    engine: str  # the route: cpu or gpu
    route_reason: str
    batches: list[str]  # batches to compute (missing)
    present: list[str]  # batches already computed at this version
    requested: bool
    inputs: list[str]
    outputs: list[str]
    level: int = 0
    #: batches computed with an outdated upstream chain -> why (they are in ``batches`` too
    #: when the plan covers them: the engine must replace their rows, not add to them)
    stale: dict[str, str] = field(default_factory=dict)
    #: the identity of the values this plan computes (record it in ComputedUnit.data_version)
    data_version: str = ""
    #: the producers of its inputs (record it in ComputedUnit.upstream)
    upstream: list[str] = field(default_factory=list)
    #: a built-in this backfill registers before it runs, and why (the input it produces, for whom)
    registers: str = ""


@dataclass
class Stage:
    index: int
    engine: str
    features: list[str]
    inputs: list[str]  # union of the stage's inputs: read once per batch
    batches: list[str]


@dataclass
class BackfillPlan:
    logical_table: str
    base_version: int
    requested: list[str]
    batches: list[str]
    features: dict[str, PlannedFeature]
    stages: list[Stage]
    graph: Any = field(repr=False, default=None)  # nx.DiGraph of all features involved
    warnings: list[str] = field(default_factory=list)
    #: retry runs only: (feature, batch) -> ids to recompute
    only_ids: dict[tuple[str, str], set[str]] = field(default_factory=dict, repr=False)
    #: retry runs: the round (1 for a first computation), part of the fingerprint; not the
    #: attempt of a run (a rerun of the same plan), which omni_sys.runs and .errors number
    attempt: int = 1
    #: built-ins to register before the run (name -> definition), producers of inputs no
    #: registered feature computes; the rest of the plan assumes them registered
    registrations: dict[str, FeatureDefinition] = field(default_factory=dict, repr=False)
    #: the GPU view its routes were made with when the caller fixed one; None: this machine's,
    #: probed - an engine whose workers see GPUs differently runs it placed for theirs (:func:`place`)
    has_gpu: bool | None = None
    #: the planned features' definitions, which routes follow (:func:`place` re-routes with them)
    definitions: dict[str, FeatureDefinition] = field(default_factory=dict, repr=False)

    @property
    def empty(self) -> bool:
        return not self.stages

    @property
    def units(self) -> list[tuple[str, str]]:
        """(feature, batch) pairs this plan computes."""
        return [(f.name, b) for f in self.features.values() for b in f.batches]

    def fingerprint(self) -> str:
        """Stable id of WHAT is computed (not when): a rerun after a crash finds its checkpoints."""
        payload = json.dumps(sorted(f"{f.name}@{f.version}#{f.data_version}/{b}"
                                    for f in self.features.values() for b in f.batches))
        if self.only_ids:
            payload += json.dumps(sorted(f"{k[0]}/{k[1]}/{i}" for k, ids in self.only_ids.items() for i in ids))
        return hashlib.sha256(f"{self.logical_table}|{self.attempt}|{payload}".encode()).hexdigest()[:16]

    def to_dict(self) -> dict[str, Any]:
        return {"logical_table": self.logical_table, "base_version": self.base_version,
                "requested": self.requested, "batches": self.batches,
                "features": {k: asdict(v) for k, v in self.features.items()},
                "stages": [asdict(s) for s in self.stages], "fingerprint": self.fingerprint(),
                "warnings": self.warnings, "attempt": self.attempt,
                "retry_records": sum(len(v) for v in self.only_ids.values()),
                "registers": [d.key for d in self.registrations.values()]}

    def describe(self) -> str:
        lines = [f"backfill plan for {self.logical_table} (from version {self.base_version}), "
                 f"batches: {', '.join(self.batches) or '(none)'}"]
        for name, d in self.registrations.items():
            lines.append(f"  registers built-in {d.key} first: {self.features[name].registers}")
        if self.empty:
            lines.append("  nothing to do: every requested feature is computed for every batch")
        for s in self.stages:
            lines.append(f"  stage {s.index} [{s.engine}] reads {', '.join(s.inputs)} once per batch:")
            for name in s.features:
                f = self.features[name]
                lines.append(f"    - {f.name}@{f.version} -> {', '.join(f.outputs)}  batches {', '.join(f.batches)}"
                             f"  ({f.route_reason})")
                for batch, why in sorted(f.stale.items()):
                    if batch in f.batches:
                        lines.append(f"        recompute stale batch {batch}: {why}")
        for w in self.warnings:
            lines.append(f"  warning: {w}")
        skipped = [f for f in self.features.values() if not f.batches]
        for f in skipped:
            lines.append(f"  present: {f.name}@{f.version} (batches {', '.join(f.present) or '-'})")
        for f in self.features.values():
            for batch, why in sorted(f.stale.items()):
                if batch not in f.batches:
                    lines.append(f"  stale (not in this plan): {f.name}@{f.version} batch {batch}: {why}")
        return "\n".join(lines)


@functools.lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when torch sees a CUDA device; torch is not imported unless installed."""
    if settings.value("OMNI_FORCE_CPU"):
        return False
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def gpu_free_mb() -> float | None:
    """Free memory of the GPU a model of this process would go to (torch's current device), in MiB;
    None when no GPU is visible. Measured at each call: other processes take and give back memory."""
    if not gpu_available():
        return None
    import torch

    free, _total = torch.cuda.mem_get_info(torch.cuda.current_device())
    return free / (1 << 20)


class _GpuProbe:
    """Asks for a GPU only when a route depends on it: importing torch costs seconds, and
    plans of CPU-only features should not pay that. Its free memory is measured once per
    plan, when an ``auto`` route first needs it, and only when the GPU is this machine's."""

    _UNMEASURED = object()

    def __init__(self, known: bool | None):
        self._value = known
        #: what the caller said (None: nothing, the probe decides)
        self.given = known
        # a caller that fixed the view (an engine whose workers are elsewhere) has no free memory to tell
        self._free: Any = self._UNMEASURED if known is None else None

    def __bool__(self) -> bool:
        if self._value is None:
            self._value = gpu_available()
        return self._value

    @property
    def free_mb(self) -> float | None:
        if self._free is self._UNMEASURED:
            self._free = gpu_free_mb() if self else None
        return self._free


def route(d: FeatureDefinition, has_gpu: bool, free_mb: float | None = None) -> tuple[str, str]:
    """(route, why) of feature ``d``: its declared engine, or for ``auto`` its model's size
    against :data:`AUTO_GPU_MODEL_MB` and against the GPU's free memory.

    ``free_mb``: the GPU's free memory in MiB; by default what ``has_gpu`` measured when it
    is the planner's probe of this machine, else unknown (a cluster's executors: the size rule alone).
    """
    if d.engine == "cpu":
        return "cpu", "engine=cpu"
    if d.engine == "gpu":
        return ("gpu", "engine=gpu") if has_gpu else ("cpu", "engine=gpu, no GPU present: CPU fallback")
    if not has_gpu:
        return "cpu", "auto: no GPU present"
    size = d.model_size_mb
    if size < AUTO_GPU_MODEL_MB:
        return "cpu", f"auto: model {size:.0f} MB < {AUTO_GPU_MODEL_MB:.0f} MB"
    if free_mb is None:
        free_mb = getattr(has_gpu, "free_mb", None)
    if free_mb is None:
        return "gpu", (f"auto: model {size:.0f} MB >= {AUTO_GPU_MODEL_MB:.0f} MB and a GPU is present "
                       "(its free memory not measured here)")
    need = size * GPU_MEMORY_FACTOR
    if need > free_mb:
        return "cpu", (f"auto: model {size:.0f} MB needs {need:.0f} MB of GPU memory ({GPU_MEMORY_FACTOR:g}x), "
                       f"the GPU has {free_mb:.0f} MB free")
    return "gpu", (f"auto: model {size:.0f} MB >= {AUTO_GPU_MODEL_MB:.0f} MB and {need:.0f} MB "
                   f"({GPU_MEMORY_FACTOR:g}x) fit the GPU's {free_mb:.0f} MB free")


def definitions_of(state: FamilyState) -> dict[str, FeatureDefinition]:
    return {b.name: FeatureDefinition.model_validate_json(b.definition) for b in state.features if b.current}


def plan_backfill(state: FamilyState, features: list[str], batches: list[str] | None = None,
                  has_gpu: bool | None = None) -> BackfillPlan:
    """Plan the minimal work that makes ``features`` present on ``batches`` (default: all)."""
    has_gpu = _GpuProbe(has_gpu)
    defs = definitions_of(state)
    for name in features:
        if name not in defs:
            from catalog_ext.suggest import did_you_mean

            raise FeatureDefinitionError(
                f"no feature {name!r} is registered on {state.table.identifier}{did_you_mean(name, defs)} "
                "(see 'omni feature list')")
    base_version = state.version
    registrations, reasons = resolve_producers(state, defs, features)
    if registrations:
        from omni_iceberg.features.registry import as_if_registered

        state = as_if_registered(state, list(registrations.values()))
        defs = definitions_of(state)
    all_batches = [b.name for b in state.batches]
    if batches:
        for b in batches:
            check_batch_name(b)
            if b not in all_batches:
                from catalog_ext.suggest import did_you_mean

                raise FeatureDefinitionError(
                    f"{state.table.identifier} has no batch {b!r}{did_you_mean(b, all_batches)} "
                    f"(batches: {', '.join(all_batches) or 'none'})")
        wanted = list(dict.fromkeys(batches))
    else:
        wanted = all_batches
    producers = producers_of(defs.values())
    graph = feature_graph(defs)

    chains = current_chains(state)
    freshness = {name: batch_freshness(state, name, all_batches, chains) for name in defs}
    fresh = {name: {b for b, (f, _) in fb.items() if f == "fresh"} for name, fb in freshness.items()}

    need: dict[str, set[str]] = {}

    def require(name: str, on: set[str]) -> None:
        missing = on - fresh[name]
        new = missing - need.get(name, set())
        need.setdefault(name, set())
        if not new:
            return
        need[name] |= new
        for parent in graph.predecessors(name):
            require(parent, new)  # only the ancestors missing for exactly these batches

    for name in features:
        require(name, set(wanted))

    involved = set(need) | set(features)

    def wanted_or_needed(name: str) -> set[str]:
        return set(wanted) | need.get(name, set())

    planned: dict[str, PlannedFeature] = {}
    for name in nx.topological_sort(graph.subgraph(involved)):
        d = defs[name]
        engine, reason = route(d, has_gpu)
        parents = [p for p in graph.predecessors(name) if need.get(p)]
        level = 1 + max((planned[p].level for p in parents), default=0)
        present = sorted(fresh[name])
        stale = {b: why for b, (f, why) in freshness[name].items() if f == "stale" and b in wanted_or_needed(name)}
        planned[name] = PlannedFeature(name, d.version, engine, reason, sorted(need.get(name, ())), present,
                                       name in features, list(d.inputs), d.output_names, level if need.get(name) else 0,
                                       stale, chains[name].data_version, list(chains[name].upstream),
                                       reasons.get(name, ""))
    stages = _stages(planned)
    # what resolve_producers left unproduced: raw fields no batch has brought yet (the
    # content type is left out: html_parser reads its NULL as "unknown, sniff")
    from omni_iceberg.features.registry import READER_FIELDS

    warnings = [f"input {inp} of {f.name}: no batch has a field {inp.split('.', 1)[1]!r} yet, it reads as NULL"
                for f in planned.values() if f.batches for inp in f.inputs
                if inp not in producers and not state.physical_columns_of(inp) and inp not in READER_FIELDS]
    return BackfillPlan(state.table.identifier, base_version, list(features), wanted, planned, stages,
                        graph.subgraph(involved).copy(), warnings, registrations=registrations,
                        has_gpu=has_gpu.given, definitions={n: defs[n] for n in planned})


def _stages(planned: dict[str, PlannedFeature]) -> list[Stage]:
    """One stage per dependency level and route, in that order (features with nothing to compute have none)."""
    groups: dict[tuple[int, str], list[str]] = {}
    for f in planned.values():
        if f.batches:
            groups.setdefault((f.level, f.engine), []).append(f.name)
    stages = []
    for i, ((_level, engine), names) in enumerate(sorted(groups.items())):
        inputs = list(dict.fromkeys(inp for n in names for inp in planned[n].inputs))
        batches = sorted(set().union(*(planned[n].batches for n in names)))
        stages.append(Stage(i + 1, engine, sorted(names), inputs, batches))
    return stages


def place(plan: BackfillPlan, has_gpu: bool) -> BackfillPlan:
    """``plan`` routed for workers that have (``has_gpu``) or lack a GPU: the same units, stages regrouped.

    Nothing is read or planned again: each feature's route follows its definition's
    declared engine and model size (:func:`route`), so the work, the fingerprint and the
    run id stay those of ``plan``. An engine whose workers are not this machine (a Spark
    cluster's executors) runs a plan made here placed for them.
    """
    features = {}
    for name, f in plan.features.items():
        engine, reason = route(plan.definitions[name], has_gpu)
        features[name] = dataclasses.replace(f, engine=engine, route_reason=reason)
    return dataclasses.replace(plan, features=features, stages=_stages(features), has_gpu=has_gpu)


def resolve_producers(state: FamilyState, defs: dict[str, FeatureDefinition], features: list[str]
                      ) -> tuple[dict[str, FeatureDefinition], dict[str, str]]:
    """The built-ins to register so every input of ``features`` and their ancestors has a
    producer (name -> definition resolved on ``state``), and why each one; see the module doc.

    Raises :class:`MissingProducerError` for an input nothing can produce.
    """
    producers = producers_of(defs.values())
    registering: dict[str, FeatureDefinition] = {}
    reasons: dict[str, str] = {}
    todo, seen = list(features), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for column in (defs.get(name) or registering[name]).inputs:
            if column in producers:
                todo.append(producers[column])
            elif column.startswith(RAW_STAGE + ".") or state.physical_columns_of(column):
                continue  # ingested: what a batch holds is the value (a raw field no batch has reads as NULL)
            else:
                d = _builtin_producer(state, defs, column, name, registering)
                registering[d.name] = d
                reasons[d.name] = f"it produces {column}, which {name} reads and no registered feature computes"
                producers.update({out: d.name for out in d.output_names})
                todo.append(d.name)
    return registering, reasons


def _builtin_producer(state: FamilyState, defs: dict[str, FeatureDefinition], column: str, reader: str,
                      registering: dict[str, FeatureDefinition]) -> FeatureDefinition:
    """The built-in that outputs ``column``, resolved on ``state``; else :class:`MissingProducerError`."""
    from omni_iceberg.features.library import BUILTINS
    from omni_iceberg.features.registry import resolve_definition
    from omni_iceberg.features.udf import list_udfs

    for target in BUILTINS:
        d = target.definition
        # a registered feature of the same name is another feature: never replaced behind the user's back
        if column in d.output_names and d.name not in defs:
            return resolve_definition(state, d, {**registering, d.name: d})
    known = sorted({s.definition.name for s in list_udfs()
                    if s.definition is not None and column in s.definition.output_names}
                   | {b.name for b in state.features if column in b.outputs})
    could = (f"features that could produce it: {', '.join(known)}; register one of them first"
             if known else f"no feature known here outputs it; register one whose outputs include {column} first")
    raise MissingProducerError(
        f"input {column} of {reader} has no producer: no registered feature computes it and no batch of "
        f"{state.table.identifier} holds it, so every value would be NULL; {could} "
        f"('omni feature register FILE --table {state.table.name}'), then backfill again")


def plan_retry(state: FamilyState, features: list[str], failed: dict[tuple[str, str], set[str]], attempt: int,
               has_gpu: bool | None = None) -> BackfillPlan:
    """Recompute only the records that failed: ``failed`` maps (feature, batch) to ids."""
    has_gpu = _GpuProbe(has_gpu)
    defs = definitions_of(state)
    chains = current_chains(state)
    planned: dict[str, PlannedFeature] = {}
    for name in features:
        d = defs[name]
        engine, reason = route(d, has_gpu)
        batches = sorted(b for (f, b), ids in failed.items() if f == name and ids)
        planned[name] = PlannedFeature(name, d.version, engine, reason, batches, [], True, list(d.inputs),
                                       d.output_names, 1 if batches else 0,
                                       data_version=chains[name].data_version, upstream=list(chains[name].upstream))
    return BackfillPlan(state.table.identifier, state.version, list(features), sorted({b for _, b in failed}),
                        planned, _stages(planned), None, [], {k: v for k, v in failed.items() if v}, attempt,
                        has_gpu=has_gpu.given, definitions={n: defs[n] for n in planned})


def feature_status(state: FamilyState) -> list[dict[str, Any]]:
    """Per registered feature: version, status and which batches are computed, stale or missing.

    ``status`` of a current feature: ``computed`` (fresh on every batch), ``stale`` (some
    batch was computed from an upstream that changed since - see ``stale`` for why),
    ``partial`` (some batches missing) or ``missing`` (none computed). Earlier versions
    are ``superseded``. This is what ``omni feature list`` shows.
    """
    chains = current_chains(state)
    all_batches = [b.name for b in state.batches]
    out = []
    for b in state.features:
        row: dict[str, Any] = {"name": b.name, "version": b.version, "current": b.current,
                               "computed_batches": sorted(state.computed_batches(b.name, b.version))}
        if not b.current:
            row.update(status="superseded", fresh_batches=[], stale={}, missing_batches=[], data_version="")
            out.append(row)
            continue
        fb = batch_freshness(state, b.name, all_batches, chains)
        fresh_ = sorted(x for x, (f, _) in fb.items() if f == "fresh")
        stale = {x: why for x, (f, why) in sorted(fb.items()) if f == "stale"}
        missing = sorted(x for x, (f, _) in fb.items() if f == "missing")
        status = ("stale" if stale else "computed" if not missing and all_batches else
                  "missing" if len(missing) == len(all_batches) else "partial")
        row.update(status=status, fresh_batches=fresh_, stale=stale, missing_batches=missing,
                   data_version=chains[b.name].data_version)
        out.append(row)
    return out


"""Data versions: the identity of computed values, including everything upstream of them.

A feature's version hashes its own code, parameters and input column *names*, not the
versions of the features producing those inputs. So when ``html_parser`` gets a new
version, values of ``math_recall`` computed from the old ``parsed_text`` must not count
as computed. As in Dagster's data versions, the identity of a computed value combines
the code version with the data versions of its inputs:

    data_version(f) = hash(f.version, f.code_hash, [(input, data_version(producer(input)) or "ingest")])

Ingested columns contribute a constant: a committed batch never changes, and in md5 id
mode the record id *is* the content, so values with equal data versions are equal for
equal ids in any logical table - which is what reuse by content relies on.

A unit (feature, batch) is **fresh** when its recorded data version equals the one the
current chain implies, **stale** when it differs (the reason names the input whose
producer changed), **missing** when never computed. Units recorded before data versions
existed are judged by order instead: fresh iff every feature producing an input was
current, and computed on that batch, no later than the unit itself.

Example: with ``t_parse@1 -> ProcessedData.parsed_text -> t_len`` computed on batch ``cc``,
registering ``t_parse@2`` makes ``unit_freshness(state, "t_len", "cc")`` return
``("stale", "ProcessedData.parsed_text was computed by t_parse@1, now by t_parse@2")``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Literal

from catalog_ext.family import ComputedUnit, FamilyState, FeatureBinding

INGEST = "ingest"
Freshness = Literal["fresh", "stale", "missing"]


def feature_inputs(binding: FeatureBinding) -> tuple[str, ...]:
    """The logical input columns of a binding (kept in its canonical definition)."""
    return tuple(json.loads(binding.definition).get("inputs", ()))


@dataclass(frozen=True)
class Chain:
    """The data version a current feature's values have when computed now, and its upstream."""

    data_version: str
    upstream: tuple[str, ...]  # column<-feature@version#data_version, or column<-ingest


def current_chains(state: FamilyState) -> dict[str, Chain]:
    """Every current feature -> its :class:`Chain` on ``state`` (memoised walk up the producers)."""
    chains: dict[str, Chain] = {}

    def visit(name: str, path: tuple[str, ...]) -> Chain:
        if name in chains:
            return chains[name]
        if name in path:  # registration refuses cycles; never loop on a hand-edited document
            raise ValueError(f"feature dependency cycle: {' -> '.join(path + (name,))}")
        b = state.feature(name)
        upstream = []
        for column in feature_inputs(b):
            producer = state.producer_of(column)
            if producer is None or producer.name == name:
                upstream.append(f"{column}<-{INGEST}")
            else:
                up = visit(producer.name, path + (name,))
                upstream.append(f"{column}<-{producer.key}#{up.data_version}")
        payload = json.dumps({"feature": b.key, "code": b.code_hash, "inputs": upstream}, sort_keys=True)
        chain = Chain("d" + hashlib.sha256(payload.encode()).hexdigest()[:16], tuple(upstream))
        chains[name] = chain
        return chain

    for b in state.features:
        if b.current:
            visit(b.name, ())
    return chains


def _producer_of_entry(entry: str) -> str:
    """``col<-t_parse@1#d..`` -> ``t_parse@1``; ``col<-ingest`` -> ``ingest``."""
    return entry.split("<-", 1)[1].split("#", 1)[0]


def _explain(recorded: tuple[str, ...], current: tuple[str, ...]) -> str:
    if not recorded:
        return "an upstream feature changed since it was computed"
    now = {e.split("<-", 1)[0]: e for e in current}
    reasons = []
    for entry in recorded:
        column = entry.split("<-", 1)[0]
        then_by, now_by = _producer_of_entry(entry), _producer_of_entry(now.get(column, f"{column}<-?"))
        if then_by != now_by:
            reasons.append(f"{column} was computed by {then_by}, now by {now_by}")
        elif entry != now.get(column):
            reasons.append(f"{column} from {now_by}, whose own inputs changed")
    return "; ".join(reasons) or "an upstream feature changed since it was computed"


def unit_freshness(state: FamilyState, name: str, batch: str, chains: dict[str, Chain] | None = None
                   ) -> tuple[Freshness, str]:
    """(fresh | stale | missing, reason) of the current version of ``name`` on ``batch``."""
    chains = current_chains(state) if chains is None else chains
    b = state.feature(name)
    unit = state.computed_unit(name, b.version, batch)
    if unit is None:
        return "missing", ""
    if unit.data_version:
        if unit.data_version == chains[name].data_version:
            return "fresh", ""
        return "stale", _explain(unit.upstream, chains[name].upstream)
    return _legacy_freshness(state, b, unit, batch, chains, ())


def _legacy_freshness(state: FamilyState, b: FeatureBinding, unit: ComputedUnit, batch: str,
                      chains: dict[str, Chain], path: tuple[str, ...]) -> tuple[Freshness, str]:
    """A unit without a data version: fresh iff its producers were current and computed before it."""
    for column in feature_inputs(b):
        producer = state.producer_of(column)
        if producer is None or producer.name == b.name or producer.name in path:
            continue
        if producer.registered_version > unit.logical_version:
            return "stale", f"{column} is now produced by {producer.key}, registered after this unit was computed"
        up = state.computed_unit(producer.name, producer.version, batch)
        if up is None:
            return "stale", f"{column} was not computed by {producer.key} on batch {batch} when this unit was"
        if up.logical_version > unit.logical_version:
            return "stale", f"{column} was recomputed by {producer.key} after this unit was computed"
        if not up.data_version:
            state_, reason = _legacy_freshness(state, producer, up, batch, chains, path + (b.name,))
            if state_ == "stale":
                return "stale", f"{column} from {producer.key}, which is stale: {reason}"
        elif up.data_version != chains[producer.name].data_version:
            return "stale", f"{column} from {producer.key}, which is stale"
    return "fresh", ""


def batch_freshness(state: FamilyState, name: str, batches: list[str] | None = None,
                    chains: dict[str, Chain] | None = None) -> dict[str, tuple[Freshness, str]]:
    """Batch -> (freshness, reason) for the current version of ``name`` (default: every batch)."""
    chains = current_chains(state) if chains is None else chains
    names = [b.name for b in state.batches] if batches is None else batches
    return {batch: unit_freshness(state, name, batch, chains) for batch in names}


__all__ = ["Chain", "current_chains", "unit_freshness", "batch_freshness", "feature_inputs", "INGEST"]

"""A wide family on demand: N cheap numeric features, one physical table each.

Width is what makes a logical view expensive (one physical table per feature), so
tests and benchmarks of the engines' view pruning need families of 50-100+ tables
without waiting for real models. Each feature ``wNNN`` is ``(len(raw_data) * k) %
997`` for its own ``k``: deterministic, distinct per feature, computed by pyarrow
in one vectorised call per batch.

    from omni_iceberg.demo.wide import wide_features
    omni.register_features("web", wide_features(100))
    omni.backfill("web", [f.name for f in wide_features(100)])
"""

from __future__ import annotations

from typing import Any

from omni_iceberg.features.spec import FeatureDefinition, OutputColumn
from omni_iceberg.features.udf import feature

MODULUS = 997


@feature(outputs={"wide_score": "long"}, inputs=["RawData.raw_data"], form="batch", params={"k": 1},
         name="wide_score")
def wide_score(raw_data: Any, k: int = 1) -> Any:
    """(len(raw_data) * k) % 997: a cheap, deterministic numeric feature."""
    import pyarrow.compute as pc

    scaled = pc.multiply(pc.utf8_length(raw_data).cast("int64"), k)
    return pc.subtract(scaled, pc.multiply(pc.divide(scaled, MODULUS), MODULUS))  # integer division: modulo


def feature_name(i: int) -> str:
    return f"w{i:03d}"


def wide_features(count: int) -> list[FeatureDefinition]:
    """``count`` feature definitions ``w000..``, each with its own physical table."""
    base = wide_score.definition
    # the UDF by import path: a Spark executor or another process resolves it without this module loaded
    return [base.model_copy(update={"name": feature_name(i), "params": {"k": i + 1}, "udf": f"{__name__}:wide_score",
                                    "outputs": (OutputColumn(name=feature_name(i), type="long"),)})
            for i in range(count)]

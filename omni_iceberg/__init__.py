"""omni-iceberg: one logical wide table per LLM corpus, on Apache Iceberg.

The public API is :class:`Omni`; features are declared with :func:`feature`. Names are
loaded on first use, so that a tool importing one leaf module (the CLI's ``--help``, a
Spark worker unpickling a UDF) does not pay for the whole package.
"""

from typing import Any

__all__ = ["Omni", "OmniError", "FeatureDefinition", "OutputColumn", "feature", "udf"]
__version__ = "0.1.0"

_WHERE = {
    "Omni": "omni_iceberg.api",
    "OmniError": "catalog_ext.errors",
    "FeatureDefinition": "omni_iceberg.features",
    "OutputColumn": "omni_iceberg.features",
    "feature": "omni_iceberg.features",
    "udf": "omni_iceberg.features",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'omni_iceberg' has no attribute {name!r}")

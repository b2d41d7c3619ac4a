"""Add columns: declare a feature (what), register its UDF (how), ask for a backfill.

``FeatureDefinition`` is the frozen, canonically serialised asset; ``@feature`` and
``@udf`` declare one from Python; definitions are kept in ``omni_sys.features``. A
definition from a user's .py file carries its :class:`UdfSource`, so any later process
can load the same code (:func:`load_udf_sources`).
"""

from omni_iceberg.features.spec import FeatureDefinition, OutputColumn, UdfSource
from omni_iceberg.features.udf import (
    UdfSpec,
    feature,
    get_udf,
    list_udfs,
    load_python_features,
    load_udf_sources,
    udf,
    user_modules,
)

__all__ = ["FeatureDefinition", "OutputColumn", "UdfSource", "UdfSpec", "feature", "udf", "get_udf", "list_udfs",
           "load_python_features", "load_udf_sources", "user_modules"]

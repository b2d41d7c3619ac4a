"""Add columns: declare a feature (what), register its UDF (how), ask for a backfill.

``FeatureDefinition`` is the frozen, canonically serialised asset; ``@feature`` and
``@udf`` declare one from Python; definitions are kept in ``omni_sys.features``.
"""

from omni_iceberg.features.spec import FeatureDefinition, OutputColumn
from omni_iceberg.features.udf import UdfSpec, feature, get_udf, list_udfs, udf

__all__ = ["FeatureDefinition", "OutputColumn", "UdfSpec", "feature", "udf", "get_udf", "list_udfs"]

"""omni-iceberg: one logical wide table per LLM corpus, on Apache Iceberg.

The public API is :class:`Omni`; features are declared with :func:`feature`.
"""

from omni_iceberg.api import Omni
from omni_iceberg.errors import OmniError
from omni_iceberg.features import FeatureDefinition, OutputColumn, feature, udf

__all__ = ["Omni", "OmniError", "FeatureDefinition", "OutputColumn", "feature", "udf"]
__version__ = "0.1.0"

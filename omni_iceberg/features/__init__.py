"""Add columns: declare a feature (what), register its UDF (how), ask for a backfill.

``FeatureDefinition`` is the frozen, canonically serialised asset; ``@feature`` and
``@udf`` declare one from Python; definitions are kept in ``omni_sys.features``. A
definition from a user's .py file carries its :class:`UdfSource`, so any later process
can load the same code (:func:`load_udf_sources`).

The built-in UDFs (:mod:`omni_iceberg.features.library`) are declared with ``@feature``
like any other; importing this package tells the UDF lookup where they are, and they
are imported when a name is not found yet.
"""

from omni_iceberg.features.spec import FeatureDefinition, OutputColumn, UdfSource
from omni_iceberg.features.udf import (
    UdfSpec,
    feature,
    get_udf,
    list_udfs,
    load_python_features,
    load_udf_sources,
    set_builtin_loader,
    udf,
    user_modules,
)


def _load_library() -> None:
    import omni_iceberg.features.library  # noqa: F401 - importing the library registers the built-ins


# here, not in udf.py: the library imports udf.py's decorator, so udf.py importing the library
# would make the two need each other
set_builtin_loader(_load_library)

__all__ = ["FeatureDefinition", "OutputColumn", "UdfSource", "UdfSpec", "feature", "udf", "get_udf", "list_udfs",
           "load_python_features", "load_udf_sources", "user_modules"]

"""The control plane: logical tables, their physical families and logical versions.

Everything here is engine-free (no Spark, no models): it speaks pyiceberg and SQL.
"""

from catalog_ext import pyiceberg_memo as _pyiceberg_memo

_pyiceberg_memo.install()

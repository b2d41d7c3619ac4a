"""The control plane: logical tables, their physical families and logical versions.

Everything here is engine-free (no Spark, no models): it speaks pyiceberg and SQL.
"""

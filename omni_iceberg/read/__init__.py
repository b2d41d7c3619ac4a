"""The shared read layer: what explore, index, hot, backfill and features all read through.

:mod:`~omni_iceberg.read.reader` reads a logical table at one version from its pinned
physical snapshots (column and batch pruning, the flat parts and the logical row shape),
:mod:`~omni_iceberg.read.guard` checks every piece of user-written SQL (queries, export
columns and filters, feature filters), :mod:`~omni_iceberg.read.scope` binds a query's
names by SQL scope and builds the physical query from its tree, and
:mod:`~omni_iceberg.read.sandbox` is the locked embedded DuckDB that runs it. It imports
nothing of omni_iceberg: the layers above it never meet here.
"""

"""Hot columns: chosen feature columns kept in ClickHouse for fast aggregation.

:mod:`~omni_iceberg.hot.store` talks to the store (embedded chdb or a server, one client
API), :mod:`~omni_iceberg.hot.sync` chooses columns and keeps the store in step with the
logical table, :mod:`~omni_iceberg.hot.route` answers queries from it when that gives
exactly the Iceberg answer.
"""

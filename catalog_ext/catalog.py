"""Open the pyiceberg catalog an :class:`OmniConfig` names, and translate its errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from catalog_ext.redact import redact


def open_catalog(config: OmniConfig) -> Any:
    """Return a pyiceberg catalog: SQL (SQLite / PostgreSQL), REST, or one named in .pyiceberg.yaml."""
    from catalog_ext.object_store import check_warehouse

    catalog = _open(config)
    check_warehouse(catalog, config.warehouse)  # an s3:// warehouse: fail now, naming endpoint and bucket
    return catalog


def _open(config: OmniConfig) -> Any:
    uri = config.catalog_uri
    props: dict[str, str] = {"warehouse": config.warehouse, **config.extra_properties}
    try:
        if uri.startswith("sqlite:"):
            db = uri.split(":///", 1)[-1].split("?", 1)[0]
            Path(db).parent.mkdir(parents=True, exist_ok=True)
            if config.warehouse.startswith("file:"):
                Path(config.warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
            # several processes may commit at once: wait for SQLite's write lock
            # instead of failing at once with "database is locked"
            if "timeout=" not in uri:
                uri += ("&" if "?" in uri else "?") + "timeout=60"
            return _sql_catalog(config.catalog_name, uri, props)
        if uri.startswith(("postgresql", "mysql")):
            return _sql_catalog(config.catalog_name, uri, props)
        if uri.startswith(("http://", "https://")):
            from pyiceberg.catalog.rest import RestCatalog

            from catalog_ext.rest_commit import bound_request_times, check_reachable

            check_reachable(uri, "the REST catalog")  # pyiceberg's first request has no timeout
            return bound_request_times(RestCatalog(config.catalog_name, uri=uri, **props))
        from pyiceberg.catalog import load_catalog

        from catalog_ext.rest_commit import bound_request_times, is_rest_catalog

        catalog = load_catalog(uri, **({"warehouse": config.warehouse} if config.warehouse else {}))
        return bound_request_times(catalog) if is_rest_catalog(catalog) else catalog
    except ConfigError:
        raise
    except Exception as e:  # noqa: BLE001 - translate every backend failure into one message
        # the URI and the backend's message may both carry the password; the original
        # exception is not chained because its text (and so any traceback) carries it too
        raise ConfigError(
            f"cannot open catalog {redact(uri)!r}: {type(e).__name__}: {redact(str(e))}. "
            "Set --catalog/OMNI_CATALOG to a SQLAlchemy URI, a REST URL or a .pyiceberg.yaml catalog name."
        ) from None


def _sql_catalog(name: str, uri: str, props: dict[str, str]) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    # schema_version v1 adds iceberg_type, which Spark/Trino JDBC catalogs need for views
    return SqlCatalog(name, uri=uri, schema_version="v1", **props)


def is_sql_catalog(catalog: Any) -> bool:
    from pyiceberg.catalog.sql import SqlCatalog

    return isinstance(catalog, SqlCatalog)

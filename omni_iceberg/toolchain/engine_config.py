"""Catalog settings for Spark and Trino on a REST catalog and/or an S3-API warehouse.

``omni spark-config`` and ``omni trino-config`` emit what an engine needs to read the
same logical views omni writes: the catalog (REST URI, or JDBC for SQL catalogs) and the
warehouse's file system (local, or S3 with the endpoint, region and path-style access
omni itself uses). Storage credentials are never emitted: both engines' S3 clients read
the standard AWS credential chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
profiles, instance roles) from their own environment, and a REST catalog may vend
credentials itself. A JDBC catalog password is written only to files (mode 0600),
never to standard output.

Example::

    >>> from pathlib import Path
    >>> from catalog_ext.config import OmniConfig
    >>> cfg = OmniConfig(Path("/h"), "http://rest:8181", "s3://lake/wh", "omni",
    ...                  {"s3.endpoint": "http://s3:9000", "s3.region": "eu-west-1", "s3.secret-access-key": "x"})
    >>> for k, v in trino_properties(cfg, cfg.catalog_uri).items(): print(f"{k}={v}")
    connector.name=iceberg
    iceberg.catalog.type=rest
    iceberg.rest-catalog.uri=http://rest:8181
    fs.native-s3.enabled=true
    s3.endpoint=http://s3:9000
    s3.path-style-access=true
    s3.region=eu-west-1
"""

from __future__ import annotations

from catalog_ext.config import OmniConfig
from catalog_ext.errors import ConfigError
from catalog_ext.object_store import endpoint_for, is_object_store
from catalog_ext.redact import MASK, is_secret_name, redact

#: Maven coordinates of the jar Spark needs for Iceberg's S3FileIO (the AWS SDK, shaded)
SPARK_S3_PACKAGE = "org.apache.iceberg:iceberg-aws-bundle:1.10.2"
#: pyiceberg-only FileIO settings, meaningless (or secret) for the Java engines
_PYICEBERG_ONLY = {"s3.connect-timeout", "s3.request-timeout", "s3.force-virtual-addressing", "s3.region",
                   "s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token"}


def jdbc_connection(catalog_uri: str) -> tuple[str, str | None, str | None]:
    """SQLAlchemy URI -> (JDBC URL, user, password) for Trino's JDBC catalog."""
    from urllib.parse import quote, urlencode

    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(catalog_uri)
    except ArgumentError as e:
        raise ConfigError(f"catalog URI {redact(catalog_uri)!r} is not a SQLAlchemy URL") from None
    backend = url.get_backend_name()
    if backend not in ("postgresql", "postgres"):
        raise ConfigError(
            f"catalog URI {redact(catalog_uri)!r}: Trino reads omni catalogs on PostgreSQL only (its Iceberg "
            f"plugin bundles no {backend} JDBC driver); set OMNI_CATALOG=postgresql+psycopg://user@host:port/db"
        )
    host = url.host or "localhost"
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = f":{url.port}" if url.port else ""
    query = f"?{urlencode(url.query, doseq=True)}" if url.query else ""
    jdbc = f"jdbc:postgresql://{host}{port}/{quote(url.database or '', safe='')}{query}"
    return jdbc, url.username, (str(url.password) if url.password is not None else None)


def _region(config: OmniConfig) -> str | None:
    import os

    return (config.extra_properties.get("s3.region") or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION"))


def trino_properties(config: OmniConfig, uri: str) -> dict[str, str]:
    """Trino Iceberg-connector properties for a REST catalog and/or an S3 warehouse (no secrets)."""
    props: dict[str, str] = {"connector.name": "iceberg"}
    if uri.startswith(("http://", "https://")):
        props.update({"iceberg.catalog.type": "rest", "iceberg.rest-catalog.uri": uri})
    else:
        jdbc_url, user, password = jdbc_connection(uri)
        # schema V1 has the iceberg_type column; without it the JDBC catalog has no views
        props.update({"iceberg.catalog.type": "jdbc", "iceberg.jdbc-catalog.catalog-name": config.catalog_name,
                      "iceberg.jdbc-catalog.schema-version": "V1",
                      "iceberg.jdbc-catalog.driver-class": "org.postgresql.Driver",
                      "iceberg.jdbc-catalog.connection-url": jdbc_url})
        if user:
            props["iceberg.jdbc-catalog.connection-user"] = user
        if password is not None:
            props["iceberg.jdbc-catalog.connection-password"] = password
        props["iceberg.jdbc-catalog.default-warehouse-dir"] = config.warehouse
    if is_object_store(config.warehouse):
        props["fs.native-s3.enabled"] = "true"
        endpoint = endpoint_for(config.extra_properties)
        if endpoint:  # an S3 clone (MinIO, s3proxy, Ceph): its own endpoint, buckets in the path
            props.update({"s3.endpoint": endpoint, "s3.path-style-access": "true"})
        if region := _region(config):
            props["s3.region"] = region
    elif config.warehouse.startswith("file:"):
        # file:///abs (pyiceberg) and file:/abs (Spark) both resolve to /abs under this root
        props.update({"fs.native-local.enabled": "true", "local.location": "/"})
    else:
        raise ConfigError(f"warehouse {config.warehouse!r}: engine settings are generated for file: and s3:// "
                          "warehouses only")
    return props


def spark_properties(config: OmniConfig) -> dict[str, str]:
    """``spark-defaults.conf`` settings that make catalog ``config.catalog_name`` omni's catalog.

    Secrets (a JDBC password) are included; :func:`render_spark_defaults` masks them for
    standard output.
    """
    from spark_udfs.session import VIEW_JOIN_CONF, catalog_properties  # no pyspark import: plain mappings

    name = config.catalog_name
    prefix = f"spark.sql.catalog.{name}"
    conf = {
        "spark.sql.extensions": "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        prefix: "org.apache.iceberg.spark.SparkCatalog",
        "spark.sql.defaultCatalog": name,
        **VIEW_JOIN_CONF,  # runtime filters: planning grew exponentially with the view's joins
    }
    catalog = {k: v for k, v in catalog_properties(config).items() if k not in _PYICEBERG_ONLY}
    if is_object_store(config.warehouse):
        catalog["io-impl"] = "org.apache.iceberg.aws.s3.S3FileIO"
        endpoint = endpoint_for(config.extra_properties)
        if endpoint:
            catalog.update({"s3.endpoint": endpoint, "s3.path-style-access": "true"})
        if region := _region(config):
            catalog["client.region"] = region
        conf["spark.jars.packages"] = SPARK_S3_PACKAGE
    conf.update({f"{prefix}.{k}": v for k, v in catalog.items()})
    _add_extension(conf, prefix)
    return conf


def _add_extension(conf: dict[str, str], catalog_prefix: str) -> None:
    """omni's session extension and catalog class (built by ``make jars``; see
    :mod:`spark_udfs.extension`), when they are there."""
    from spark_udfs.extension import add_to_conf, extension_jar

    jar = extension_jar()
    if jar is not None:
        add_to_conf(conf, catalog_prefix, jar)


def render_spark_defaults(conf: dict[str, str], *, mask_secrets: bool) -> str:
    """``key value`` lines for ``spark-defaults.conf``; secret values masked when ``mask_secrets``."""
    lines = ["# omni catalog for Spark (generated by omni spark-config); storage credentials: the AWS_* "
             "environment of the driver and executors"]
    for key, value in conf.items():
        shown = (MASK if is_secret_name(key.rsplit(".", 1)[-1]) else redact(value)) if mask_secrets else value
        lines.append(f"{key} {shown}")
    return "\n".join(lines) + "\n"


def write_spark_defaults(config: OmniConfig, path: str) -> str:
    """Write the full settings (secrets included) to ``path``, readable by its owner only."""
    import os
    import tempfile
    from pathlib import Path

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)  # 0600
    try:
        with os.fdopen(fd, "w") as out:
            out.write(render_spark_defaults(spark_properties(config), mask_secrets=False))
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return str(target)

"""``spark-defaults.conf`` settings that make a Spark session read omni's catalog (``omni spark-config``).

Registered as the Spark engine's ``settings`` operation (:mod:`spark_udfs.plugin`): the
core asks for them through :func:`omni_iceberg.engine_config.spark_properties`, which also
renders and writes them. The catalog part is the session builder's
(:func:`spark_udfs.session.catalog_properties`) without the pyiceberg-only FileIO
settings; on an object-store warehouse Iceberg's ``S3FileIO`` comes with the endpoint and
region omni uses; omni's session extension is added when it can be built here. No pyspark
import: plain mappings.
"""

from __future__ import annotations

from catalog_ext.config import OmniConfig
from catalog_ext.object_store import endpoint_for, is_object_store
from omni_iceberg.engine_config import region

#: pyiceberg-only FileIO settings, meaningless (or secret) for the Java engines
_PYICEBERG_ONLY = {"s3.connect-timeout", "s3.request-timeout", "s3.force-virtual-addressing", "s3.region",
                   "s3.endpoint", "s3.access-key-id", "s3.secret-access-key", "s3.session-token"}


def spark_properties(config: OmniConfig) -> dict[str, str]:
    """``spark-defaults.conf`` settings that make catalog ``config.catalog_name`` omni's catalog.

    Secrets (a JDBC password) are included; :func:`omni_iceberg.engine_config.render_spark_defaults`
    masks them for standard output.
    """
    from spark_udfs.jars import session_packages
    from spark_udfs.session import VIEW_JOIN_CONF, catalog_properties

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
        if where := region(config):
            catalog["client.region"] = where
        conf["spark.jars.packages"] = ",".join(session_packages("s3"))
    conf.update({f"{prefix}.{k}": v for k, v in catalog.items()})
    _add_extension(conf, prefix, config)
    return conf


def _add_extension(conf: dict[str, str], catalog_prefix: str, config: OmniConfig) -> None:
    """omni's session extension and catalog class (built by ``make jars``; see
    :mod:`spark_udfs.extension`), when they are there."""
    from spark_udfs.extension import add_to_conf, extension_jar

    jar = extension_jar()
    if jar is not None:
        add_to_conf(conf, catalog_prefix, jar, config)

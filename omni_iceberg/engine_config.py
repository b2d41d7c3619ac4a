"""Catalog settings for Spark and Trino on omni's catalog: SQL (JDBC) or REST, local or S3-API warehouse.

``omni spark-config`` and ``omni trino-config`` emit what an engine needs to read the
same logical views omni writes: the catalog (REST URI, or JDBC for SQL catalogs) and the
warehouse's file system (local, or S3 with the endpoint, region and path-style access
omni itself uses). Storage credentials are never emitted: both engines' S3 clients read
the standard AWS credential chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``,
profiles, instance roles) from their own environment, and a REST catalog may vend
credentials itself. A JDBC catalog password is written only to files (mode 0600),
never to standard output.

Spark's settings belong to the Spark engine (its ``settings`` operation, see
:mod:`omni_iceberg.engines`); this module renders and writes them. Trino's are made
here, and so is its catalog file:

- **Local warehouses**: Trino's native local file system serves both the ``local``
  and the ``file`` scheme (``fs.native-local.enabled=true``) and resolves a location's
  path under ``local.location``; with ``local.location=/`` the ``file:///abs/...``
  paths pyiceberg writes and the ``file:/abs/...`` paths Spark writes both land on
  ``/abs/...``.
- **One catalog name everywhere.** The JDBC catalog's ``catalog-name`` is a column of
  the catalog tables, so it must be the omni catalog name (what pyiceberg and Spark
  use). The Trino catalog - the first part of ``omni.aidata.t`` - is named the same:
  Trino analyses a view's body with no session catalog, only the view's
  ``default-catalog``, so a view that names tables ``aidata.t__base`` resolves only when
  ``default-catalog`` names a Trino catalog (without one Trino fails with "Catalog must
  be specified when session catalog is not set"). Trino has no catalog aliases, so a
  Trino catalog under any other name (say ``iceberg.properties``) lists the views but
  fails every query on them with "Catalog 'omni' not found": :func:`write_trino_config`
  refuses such a name.

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

import os
import re
import tempfile
from pathlib import Path

from catalog_ext.config import OmniConfig, resolve_catalog_uri
from catalog_ext.errors import ConfigError
from catalog_ext.object_store import endpoint_for, is_object_store
from catalog_ext.redact import MASK, is_secret_name, redact


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


def region(config: OmniConfig) -> str | None:
    """The S3 region the engines' clients should use: the catalog's ``s3.region``, else the AWS_* environment's."""
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
        if where := region(config):
            props["s3.region"] = where
    elif config.warehouse.startswith("file:"):
        # file:///abs (pyiceberg) and file:/abs (Spark) both resolve to /abs under this root
        props.update({"fs.native-local.enabled": "true", "local.location": "/"})
    else:
        raise ConfigError(f"warehouse {config.warehouse!r}: engine settings are generated for file: and s3:// "
                          "warehouses only")
    return props


def spark_properties(config: OmniConfig) -> dict[str, str]:
    """``spark-defaults.conf`` settings that make catalog ``config.catalog_name`` omni's catalog.

    Made by the Spark engine (its ``settings`` capability); secrets (a JDBC password) are
    included, and :func:`render_spark_defaults` masks them for standard output.
    """
    from omni_iceberg.engines import lookup

    return lookup("settings", "spark")(config)


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


# ---- Trino's catalog file ----------------------------------------------------------------


def _escape(value: str) -> str:
    """A value for a Java ``.properties`` file (backslashes, line breaks, non-ASCII)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    out = "".join(c if ord(c) < 128 else f"\\u{ord(c):04x}" for c in out)
    return "\\" + out if out.startswith((" ", "\t")) else out


def check_trino_catalog_name(config: OmniConfig, catalog_name: str | None = None, *, where: str = "") -> str:
    """``catalog_name`` (default ``config.catalog_name``) if Trino can run omni's views under it.

    Every omni view version records ``default-catalog`` = the omni catalog name, and
    Trino resolves a view's ``aidata.t__base`` only through the Trino catalog of exactly
    that name (it has no aliases and ignores the session catalog for view bodies). A
    Trino catalog under another name would list the views and then fail each query on
    them with "Catalog '<omni name>' not found", so such a name is refused here, with
    the two ways out. ``where`` names the file the name came from, for the message.

    >>> from pathlib import Path
    >>> cfg = OmniConfig(Path("/h"), "postgresql+psycopg://bob@db/cat", "file:///w", "omni")
    >>> check_trino_catalog_name(cfg)
    'omni'
    >>> check_trino_catalog_name(cfg, "iceberg")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    catalog_ext.errors.ConfigError: Trino catalog 'iceberg' cannot run omni's views: ...
    """
    name = catalog_name or config.catalog_name
    if name != config.catalog_name:
        source = f" (from the file name {where})" if where else ""
        raise ConfigError(
            f"Trino catalog {name!r}{source} cannot run omni's views: each view records default-catalog "
            f"{config.catalog_name!r} and Trino resolves the view's tables only through a Trino catalog of that "
            f"name, so every query on a view would fail with \"Catalog '{config.catalog_name}' not found\". "
            f"Name the file {config.catalog_name}.properties (or pass a folder such as etc/catalog), or use an "
            f"omni catalog created under the name {name!r} (OMNI_CATALOG_NAME={name}; the name is stored in the "
            "catalog tables, so an existing catalog cannot be renamed)"
        )
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        # Trino folds catalog names to lower case; an upper-case omni name would never match
        raise ConfigError(
            f"Trino catalog name {name!r} must be lower-case letters, digits and _ (Trino folds catalog names to "
            "lower case, so the views' default-catalog would not match); use an omni catalog whose "
            "OMNI_CATALOG_NAME is such a name"
        )
    return name


def trino_catalog_properties(config: OmniConfig, catalog_name: str | None = None) -> str:
    """The text of ``etc/catalog/<catalog_name>.properties`` for Trino on ``config``'s catalog.

    ``catalog_name`` is what Trino queries call the catalog (``omni.aidata.t``); it
    must be ``config.catalog_name`` (the default), the only name under which omni's views
    resolve their tables in Trino (see :func:`check_trino_catalog_name`). The JDBC ``catalog-name`` inside is
    always ``config.catalog_name``, the name pyiceberg and Spark store in the catalog
    tables. The properties are :func:`trino_properties`'s:
    a PostgreSQL (JDBC) or REST catalog, a ``file:`` or ``s3://`` warehouse. On PostgreSQL the
    catalog tables must exist (omni creates them on first use), else Trino fails with "Cannot
    check and eventually update SQL schema".

    >>> from pathlib import Path
    >>> cfg = OmniConfig(Path("/h"), "postgresql+psycopg://bob@db:5433/cat", "file:///w", "omni")
    >>> print(trino_catalog_properties(cfg).split("\\n", 1)[1], end="")
    connector.name=iceberg
    iceberg.catalog.type=jdbc
    iceberg.jdbc-catalog.catalog-name=omni
    iceberg.jdbc-catalog.schema-version=V1
    iceberg.jdbc-catalog.driver-class=org.postgresql.Driver
    iceberg.jdbc-catalog.connection-url=jdbc:postgresql://db:5433/cat
    iceberg.jdbc-catalog.connection-user=bob
    iceberg.jdbc-catalog.default-warehouse-dir=file:///w
    fs.native-local.enabled=true
    local.location=/
    """
    catalog_name = check_trino_catalog_name(config, catalog_name)
    uri = resolve_catalog_uri(config.catalog_uri)
    props = trino_properties(config, uri)
    header = f"# Trino catalog {catalog_name!r} on the omni catalog {config.catalog_name!r} (generated by omni trino-config)"
    if uri.startswith(("http://", "https://")) or not config.warehouse.startswith("file:"):
        header += "; storage credentials: the AWS_* environment of the Trino server"
    return "\n".join([header, *(f"{k}={_escape(v)}" for k, v in props.items())]) + "\n"


def write_trino_config(config: OmniConfig, path: str | os.PathLike[str], catalog_name: str | None = None) -> Path:
    """Write :func:`trino_catalog_properties` to ``path`` and return the file written.

    ``path`` is either a file whose name ends in ``.properties`` - Trino names the
    catalog after the file, so it must be ``<config.catalog_name>.properties`` - or a
    folder (such as ``etc/catalog``, created if missing) that receives that file. Any
    other file name is refused by :func:`check_trino_catalog_name`, since omni's views
    would not resolve under it. The file is replaced atomically and readable only by
    its owner, since it may hold the catalog database's password.
    """
    target = Path(path)
    if target.suffix == ".properties":
        catalog_name = check_trino_catalog_name(config, target.stem, where=str(target))
    else:
        catalog_name = check_trino_catalog_name(config, catalog_name)
        target = target / f"{catalog_name}.properties"
    text = trino_catalog_properties(config, catalog_name)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text)
        os.replace(tmp_name, target)
    finally:
        Path(tmp_name).unlink(missing_ok=True)
    return target

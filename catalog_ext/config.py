"""Where the catalog and the data live.

Resolution order for the catalog: explicit argument, ``OMNI_CATALOG``, then the
embedded default - a SQLite SQL catalog under ``$OMNI_HOME`` (default ``./.omni``).
``OMNI_CATALOG`` may be a SQLAlchemy URI (``sqlite:///...``,
``postgresql+psycopg://user@host:port/db``), an ``http(s)://`` REST URL, or the name
of a catalog in ``.pyiceberg.yaml``.

The warehouse may be local (a path or ``file://``) or an S3-API bucket (``s3://bucket/prefix``).
Storage credentials come from where pyiceberg and the AWS SDK look: a catalog named in
``.pyiceberg.yaml`` carries its own ``s3.*`` properties; for a URI catalog the ``s3.*``
(and other FileIO) properties of the ``.pyiceberg.yaml`` / ``PYICEBERG_CATALOG__<NAME>__*``
entry named like the catalog (default ``omni``) are used, and otherwise the standard
``AWS_*`` environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``,
``AWS_ENDPOINT_URL``). A REST catalog may also vend credentials per table. Credentials
are only ever passed to the FileIO: never recorded, and redacted from every message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_CATALOG_NAME = "omni"


@dataclass(frozen=True)
class OmniConfig:
    """Resolved settings for one omni session."""

    home: Path
    catalog_uri: str
    warehouse: str
    catalog_name: str = DEFAULT_CATALOG_NAME
    extra_properties: dict[str, str] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        catalog: str | None = None,
        warehouse: str | None = None,
        home: str | os.PathLike[str] | None = None,
        catalog_name: str | None = None,
    ) -> "OmniConfig":
        """Build a config from arguments, falling back to environment and defaults."""
        from catalog_ext import settings

        home_path = Path(home or settings.value("OMNI_HOME")).resolve()
        uri = catalog or settings.value("OMNI_CATALOG") or f"sqlite:///{home_path / 'catalog.db'}"
        wh = warehouse or settings.value("OMNI_WAREHOUSE") or (home_path / "warehouse").as_uri()
        if "://" not in wh:
            wh = Path(wh).resolve().as_uri()
        name = catalog_name or settings.value("OMNI_CATALOG_NAME") or DEFAULT_CATALOG_NAME
        extra = storage_properties(wh, name, rest=uri.startswith(("http://", "https://"))) \
            if "://" in uri or uri.startswith("sqlite:") else {}
        return cls(home=home_path, catalog_uri=uri, warehouse=wh, catalog_name=name, extra_properties=extra)

    @property
    def is_embedded(self) -> bool:
        """True for the SQLite default, which needs no server."""
        return self.catalog_uri.startswith("sqlite:")


def resolve_catalog_uri(uri: str) -> str:
    """A catalog named in ``.pyiceberg.yaml`` (no ``://``) -> its ``uri``; URIs pass through.

    Engines that need a JDBC or REST address (Spark, Trino) call this first.
    """
    from catalog_ext.errors import ConfigError

    if "://" in uri or uri.startswith("sqlite:"):
        return uri
    try:
        from pyiceberg.utils.config import Config

        found = Config().get_catalog_config(uri) or {}
    except Exception as e:  # noqa: BLE001 - a malformed yaml
        raise ConfigError(f"cannot read .pyiceberg.yaml to resolve catalog {uri!r}: {e}") from e
    if not found.get("uri"):
        raise ConfigError(
            f"catalog {uri!r} is neither a URI nor a catalog with a `uri` in .pyiceberg.yaml; "
            "set OMNI_CATALOG to postgresql+psycopg://..., sqlite:///... or http(s)://..."
        )
    return str(found["uri"])


#: FileIO properties that bound how long an unreachable bucket can stall a command (seconds)
S3_TIMEOUTS = {"s3.connect-timeout": "5", "s3.request-timeout": "120"}


def storage_properties(warehouse: str, catalog_name: str, *, rest: bool = False) -> dict[str, str]:
    """FileIO properties for a URI catalog: ``.pyiceberg.yaml``/env entry ``catalog_name``, S3 defaults.

    Only storage settings are taken from the yaml entry (``uri``, ``type`` and ``warehouse``
    stay what omni resolved). For an ``s3://`` warehouse, ``AWS_ENDPOINT_URL`` (the AWS
    SDKs' own variable) fills ``s3.endpoint`` when nothing else set it, and connect/request
    timeouts are bounded. On a REST catalog (``rest``) the server decides where tables
    live, so the same S3 settings apply whatever ``warehouse`` says.
    """
    from catalog_ext.errors import ConfigError

    try:
        from pyiceberg.utils.config import Config

        found = Config().get_catalog_config(catalog_name) or {}
    except Exception as e:  # noqa: BLE001 - a malformed yaml
        raise ConfigError(f"cannot read .pyiceberg.yaml for catalog {catalog_name!r}: {e}") from e
    props = {str(k): str(v) for k, v in found.items() if k not in ("uri", "type", "warehouse")}
    if rest or warehouse.startswith(("s3://", "s3a://")):
        props = {**S3_TIMEOUTS, **props}
        endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        if endpoint and "s3.endpoint" not in props:
            props["s3.endpoint"] = endpoint
        region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region and "s3.region" not in props:  # else pyiceberg asks the endpoint, which S3 clones may not answer
            props["s3.region"] = region
    return props

"""Where the catalog and the data live.

Resolution order for the catalog: explicit argument, ``OMNI_CATALOG``, then the
embedded default - a SQLite SQL catalog under ``$OMNI_HOME`` (default ``./.omni``).
``OMNI_CATALOG`` may be a SQLAlchemy URI (``sqlite:///...``,
``postgresql+psycopg://user@host:port/db``), an ``http(s)://`` REST URL, or the name
of a catalog in ``.pyiceberg.yaml``.
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
        home_path = Path(home or os.environ.get("OMNI_HOME") or ".omni").resolve()
        uri = catalog or os.environ.get("OMNI_CATALOG") or f"sqlite:///{home_path / 'catalog.db'}"
        wh = warehouse or os.environ.get("OMNI_WAREHOUSE") or (home_path / "warehouse").as_uri()
        if "://" not in wh:
            wh = Path(wh).resolve().as_uri()
        name = catalog_name or os.environ.get("OMNI_CATALOG_NAME") or DEFAULT_CATALOG_NAME
        return cls(home=home_path, catalog_uri=uri, warehouse=wh, catalog_name=name)

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

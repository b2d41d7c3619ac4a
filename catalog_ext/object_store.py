"""Fail fast and clearly when an ``s3://`` warehouse's endpoint or bucket cannot be reached.

Without this, an unreachable S3 endpoint surfaces deep inside a write as an AWS SDK
error (after its retries), with no host in it, and a missing bucket as a failed upload.
:func:`check_warehouse` runs once when the catalog opens: a TCP connect to the endpoint
(bounded), then one request for the bucket through the catalog's own FileIO - the same
credentials every later read and write uses. Messages name ``host:port`` and the bucket,
never a credential (everything passes :func:`catalog_ext.redact.redact`).
"""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from catalog_ext.errors import ConfigError
from catalog_ext.redact import redact

CONNECT_TIMEOUT_S = 5.0


def is_object_store(warehouse: str) -> bool:
    return warehouse.startswith(("s3://", "s3a://"))


def endpoint_for(properties: dict[str, Any]) -> str | None:
    """The S3 endpoint URL the FileIO will use: ``s3.endpoint``, else the AWS SDK's environment."""
    return (properties.get("s3.endpoint") or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL"))


def check_warehouse(catalog: Any, warehouse: str) -> None:
    """Raise :class:`ConfigError` naming endpoint and bucket when the warehouse is unusable."""
    if not is_object_store(warehouse):
        return
    from catalog_ext.rest_commit import check_reachable, endpoint_of

    bucket = urllib.parse.urlsplit(warehouse).netloc
    endpoint = endpoint_for(dict(catalog.properties))
    where = f"the object store of warehouse {redact(warehouse)}"
    if endpoint:  # AWS itself needs no probe of its own; a configured endpoint is what goes wrong
        check_reachable(endpoint, where, timeout_s=CONNECT_TIMEOUT_S)
    from catalog_ext.rest_commit import is_rest_catalog

    if is_rest_catalog(catalog):
        return  # a REST catalog may vend credentials per table only: the catalog's own FileIO proves nothing
    from pyarrow.fs import FileType

    from catalog_ext.iceberg_io import file_io

    at = endpoint_of(endpoint) if endpoint else "AWS S3"
    try:
        fs = file_io(catalog, warehouse).fs_by_scheme("s3", bucket)
        info = fs.get_file_info(bucket)
    except Exception as e:  # noqa: BLE001 - auth, DNS, TLS: translate, keep the host, drop secrets
        raise ConfigError(f"cannot use bucket {bucket!r} at {at}: {type(e).__name__}: {redact(str(e))[:400]}; "
                          "check the endpoint and the credentials (AWS_* environment or s3.* in "
                          ".pyiceberg.yaml)") from None
    if info.type == FileType.NotFound:
        raise ConfigError(f"bucket {bucket!r} does not exist at {at}; create it first "
                          f"(e.g. `aws s3 mb s3://{bucket}`) or fix --warehouse")

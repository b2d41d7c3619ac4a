"""The logical contract every omni table follows (the paper's Listing 1).

``_ai_unique_id_`` and ``_ai_append_name_`` are the keys; ``RawData``,
``ProcessedData`` and ``TrainableData`` are stage structs; feature columns follow.
Names starting with ``_ai_`` are reserved for the system.
"""

from __future__ import annotations

import re

from catalog_ext.errors import InvalidIdentifierError

ID_COLUMN = "_ai_unique_id_"
BATCH_COLUMN = "_ai_append_name_"
KEY_COLUMNS = (ID_COLUMN, BATCH_COLUMN)
RAW_STAGE = "RawData"
PROCESSED_STAGE = "ProcessedData"
TRAINABLE_STAGE = "TrainableData"
STAGES = (RAW_STAGE, PROCESSED_STAGE, TRAINABLE_STAGE)
RAW_CONTENT_FIELD = "raw_data"
#: RawData field with the MIME type of ``raw_data`` as its reader knew it (``text/html``,
#: ``text/x-java``, ``text/plain``; a record's own ``content_type`` field wins); NULL in rows
#: stored before readers set it, and where a record says null
RAW_CONTENT_TYPE_FIELD = "content_type"
#: Raw fields omni's readers set, which a feature may read on any table: a registration
#: declares them where no batch has brought them yet (they read as NULL there)
READER_RAW_FIELDS: dict[str, str] = {RAW_CONTENT_TYPE_FIELD: "string"}
#: content types whose text is HTML markup
HTML_CONTENT_TYPES = ("text/html", "application/xhtml+xml")
RESERVED_PREFIX = "_ai_"

#: Stage fields every table declares at creation. Stage fields that no physical
#: column holds yet read as NULL, so the logical schema is stable from day one.
DEFAULT_STAGE_FIELDS: dict[str, dict[str, str]] = {
    RAW_STAGE: {RAW_CONTENT_FIELD: "string"},
    PROCESSED_STAGE: {"parsed_text": "string"},
    TRAINABLE_STAGE: {"text": "string"},
}

DEFAULT_NAMESPACE = "aidata"
SYSTEM_NAMESPACE = "omni_sys"
#: physical tables are named ``<logical>__<suffix>``; a double underscore marks them
PHYSICAL_SEPARATOR = "__"

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_BATCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def check_identifier(name: str, what: str, *, allow_reserved: bool = False) -> str:
    """Return ``name`` if it is a safe SQL identifier, else raise with the rule broken."""
    if not isinstance(name, str) or not _IDENT.match(name):
        raise InvalidIdentifierError(
            f"invalid {what} {name!r}: use letters, digits and '_', starting with a letter or '_' (max 128)"
        )
    if not allow_reserved and name.lower().startswith(RESERVED_PREFIX):
        raise InvalidIdentifierError(f"invalid {what} {name!r}: names starting with '{RESERVED_PREFIX}' are reserved")
    if not allow_reserved and name in STAGES:
        raise InvalidIdentifierError(f"invalid {what} {name!r}: '{name}' is a stage struct of the logical contract")
    return name


def check_table_name(name: str) -> str:
    """Logical table names also may not contain the physical separator."""
    check_identifier(name, "logical table name")
    if PHYSICAL_SEPARATOR in name:
        raise InvalidIdentifierError(
            f"invalid logical table name {name!r}: '{PHYSICAL_SEPARATOR}' is reserved for physical tables"
        )
    return name


def check_batch_name(name: str) -> str:
    """Batch tags end up in partition paths and SQL literals: keep them plain."""
    if not isinstance(name, str) or not _BATCH.match(name):
        raise InvalidIdentifierError(
            f"invalid batch name {name!r}: use letters, digits, '_', '.', '-', starting with a letter or digit (max 128)"
        )
    return name


def check_namespace(ns: str) -> str:
    """A namespace for logical tables: a safe identifier, and never the system namespace.

    ``omni_sys`` holds the query log, rejects, runs, errors and lineage; a logical table
    there would shadow them (a table named ``omni_sys.query_log`` breaks every query).
    Compared without case: SQL engines fold unquoted names.
    """
    check_identifier(ns, "namespace")
    if ns.lower() == SYSTEM_NAMESPACE:
        raise InvalidIdentifierError(
            f"invalid namespace {ns!r}: '{SYSTEM_NAMESPACE}' is reserved for omni's system tables "
            f"(query log, rejects, runs, errors, lineage); put logical tables in another namespace, "
            f"e.g. {DEFAULT_NAMESPACE}"
        )
    return ns


def split_qualified(name: str, default_namespace: str = DEFAULT_NAMESPACE) -> tuple[str, str]:
    """``web`` -> (aidata, web); ``code.py`` -> (code, py). Both parts are checked.

    The system namespace is refused: logical tables never live there.
    """
    parts = name.split(".")
    if len(parts) == 1:
        ns, table = default_namespace, parts[0]
    elif len(parts) == 2:
        ns, table = parts
    else:
        raise InvalidIdentifierError(f"invalid logical table name {name!r}: use NAME or NAMESPACE.NAME")
    check_namespace(ns)
    check_table_name(table)
    return ns, table

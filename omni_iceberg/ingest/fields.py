"""Field mapping and typing of source records into the RawData stage struct."""

from __future__ import annotations

import json
import re
from typing import Any

from catalog_ext.contract import RAW_CONTENT_FIELD, check_identifier
from catalog_ext.errors import InvalidIdentifierError

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")


def parse_field_map(pairs: list[str] | dict[str, str] | None) -> dict[str, str]:
    """``["body_text=raw_data"]`` -> ``{"body_text": "raw_data"}``; targets are validated."""
    if not pairs:
        return {}
    items = pairs.items() if isinstance(pairs, dict) else [_split_pair(p) for p in pairs]
    out: dict[str, str] = {}
    for source, target in items:
        check_identifier(target, f"mapped field name (in --map {source}={target})")
        out[source] = target
    return out


def _split_pair(pair: str) -> tuple[str, str]:
    if "=" not in pair:
        raise InvalidIdentifierError(f"invalid --map {pair!r}: use SOURCE_FIELD=TARGET_FIELD, e.g. body_text=raw_data")
    source, target = pair.split("=", 1)
    if not source:
        raise InvalidIdentifierError(f"invalid --map {pair!r}: the source field name is empty")
    return source, target


def normalise_name(name: str) -> str:
    """Source field names become identifiers: ``WARC-Date`` -> ``WARC_Date``; reserved ones get ``src_``."""
    out = _NOT_IDENT.sub("_", name) or "field"
    if out[0].isdigit():
        out = "_" + out
    if out.lower().startswith("_ai_") or out in ("RawData", "ProcessedData", "TrainableData"):
        out = "src" + ("" if out.startswith("_") else "_") + out
    return out[:128]


def value_type(value: Any) -> str | None:
    """Iceberg type string of a plain Python value (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    return "string"


def plain_value(value: Any) -> Any:
    """Nested JSON values are kept as JSON text; bytes as UTF-8 text where possible."""
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def coerce(value: Any, expected: str) -> tuple[bool, Any]:
    """Fit ``value`` to an established column type; (False, None) when it cannot be done losslessly."""
    actual = value_type(value)
    if actual is None or actual == expected:
        return True, value
    if expected == "double" and actual == "long":
        return True, float(value)
    return False, None


RAW = RAW_CONTENT_FIELD

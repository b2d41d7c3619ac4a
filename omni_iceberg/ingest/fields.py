"""Field mapping and typing of source records into the RawData stage struct.

Every value that reaches a data file passes :func:`plain_value` first, so that a value
the table cannot hold (a lone surrogate, an integer past 64 bits, undecodable bytes)
is named here, as one record's problem, instead of failing a whole chunk later in
Arrow or Parquet.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any

from catalog_ext.contract import RAW_CONTENT_FIELD, check_identifier
from catalog_ext.errors import InvalidIdentifierError, SchemaConflictError

_NOT_IDENT = re.compile(r"[^A-Za-z0-9_]")

#: ``long`` is Iceberg's widest integer: a signed 64-bit value
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class BadValue(ValueError):
    """A source value the table cannot store losslessly; the reason names what is wrong.

    Internal to ingestion: the pipeline turns it into a reject naming file, line and
    field, it never reaches the user as an exception.
    """


def parse_field_map(pairs: list[str] | dict[str, str] | None) -> dict[str, str]:
    """``["body_text=raw_data"]`` -> ``{"body_text": "raw_data"}``; targets are validated.

    Two sources mapped to one target are refused here: every record holding both
    would otherwise lose one value.
    """
    if not pairs:
        return {}
    items = pairs.items() if isinstance(pairs, dict) else [_split_pair(p) for p in pairs]
    out: dict[str, str] = {}
    by_target: dict[str, str] = {}
    for source, target in items:
        check_identifier(target, f"mapped field name (in --map {source}={target})")
        if target in by_target and by_target[target] != source:
            raise InvalidIdentifierError(
                f"invalid --map: both {by_target[target]!r} and {source!r} are mapped to {target!r}; "
                "map each source field to its own name"
            )
        by_target[target] = source
        out[source] = target
    return out


def _split_pair(pair: str) -> tuple[str, str]:
    if "=" not in pair:
        raise InvalidIdentifierError(f"invalid --map {pair!r}: use SOURCE_FIELD=TARGET_FIELD, e.g. body_text=raw_data")
    source, target = pair.split("=", 1)
    if not source:
        raise InvalidIdentifierError(f"invalid --map {pair!r}: the source field name is empty")
    return source, target


#: records a --map is checked against before the batch goes on
MAP_CHECK_RECORDS = 500


class MapCheck:
    """Stops a submit whose ``--map`` names a source field none of its first records has.

    Such a field is almost always misspelt, and the mapping usually feeds ``raw_data``:
    going on would reject every record one by one and store a reject row for each. The
    first :data:`MAP_CHECK_RECORDS` records (or the first block of them) are enough to tell.
    """

    def __init__(self, field_map: dict[str, str], first: int = MAP_CHECK_RECORDS) -> None:
        self.field_map = field_map
        self.unseen = set(field_map)
        self.present: set[str] = set()
        self.records = 0
        self.first = first

    def see(self, names: set[str], count: int) -> None:
        """``count`` records with the field ``names`` were read; raises once the first ones lack a mapped field."""
        if not self.unseen:
            return
        self.unseen -= names
        self.present |= names
        self.records += count
        if self.records >= self.first:
            self.check()

    def check(self) -> None:
        """At the end of the first records, or of the input when it is shorter."""
        if not self.unseen or not self.records:  # no record read at all is the outcome check's to name
            return
        from catalog_ext.suggest import did_you_mean

        source = sorted(self.unseen)[0]
        fields = sorted(self.present)
        listed = ", ".join(fields[:12]) + (f" (+{len(fields) - 12} more)" if len(fields) > 12 else "")
        which = f"the first {self.records}" if self.records >= self.first else f"the {self.records}"
        raise SchemaConflictError(
            f"--map {source}={self.field_map[source]}: none of {which} records of this batch has a field "
            f"{source!r}{did_you_mean(source, fields)} (fields: {listed or 'none'}); nothing committed. "
            "Field names are case-sensitive")


@functools.lru_cache(maxsize=65536)  # called per field per record; sources repeat a few names
def normalise_name(name: str) -> str:
    """Source field names become identifiers: ``WARC-Date`` -> ``WARC_Date``; reserved ones get ``src_``."""
    out = _NOT_IDENT.sub("_", name) or "field"
    if out[0].isdigit():
        out = "_" + out
    if out.lower().startswith("_ai_") or out in ("RawData", "ProcessedData", "TrainableData"):
        out = "src" + ("" if out.startswith("_") else "_") + out
    return out[:128]


def target_name(source: str, field_map: dict[str, str]) -> str:
    """The RawData field a source field lands in: its mapping, else its normalised name."""
    return field_map.get(source) or normalise_name(source)


def collision(names: list[str], field_map: dict[str, str]) -> tuple[str, str, str] | None:
    """``(first, second, target)`` when two source names land in one field, else None.

    >>> collision(["x-y", "x_y"], {})
    ('x-y', 'x_y', 'x_y')
    """
    seen: dict[str, str] = {}
    for name in names:
        target = target_name(name, field_map)
        if target in seen:
            return seen[target], name, target
        seen[target] = name
    return None


def collision_reason(first: str, second: str, target: str, field_map: dict[str, str]) -> str:
    """Why a record (or a source schema) with two fields landing in one cannot be ingested."""
    how = [f"'{n}'" + (" (mapped)" if n in field_map else "") for n in (first, second)]
    unmapped = second if second not in field_map else first
    return (f"fields {how[0]} and {how[1]} both land in RawData.{target}, one value would be lost; "
            f"rename one with --map {unmapped}=OTHER_NAME")


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
    if isinstance(value, bytes):
        return "binary"
    return "string"


def plain_value(value: Any, *, binary: bool = False) -> Any:
    """The value as the table stores it, or :class:`BadValue` saying why it cannot be.

    Nested values become canonical JSON text. Bytes become text when they are valid
    UTF-8 (a Parquet ``binary`` column usually holds text); only where the table's
    column is ``binary`` (``binary=True``) do they stay bytes. Invalid UTF-8 is never
    replaced: a silently altered value would also change the content id.
    """
    if value is None or isinstance(value, (bool, float)):
        return value
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise BadValue(f"integer {_short(str(value))} does not fit a long (64-bit signed); "
                           "quote it in the source to keep it as text")
        return value
    if isinstance(value, str):
        return check_text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return data if binary else decode_utf8(data)
    if isinstance(value, (dict, list, tuple)):
        try:
            text = json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=True, allow_nan=False)
        except RecursionError:
            raise BadValue("nested value is nested too deeply to store as JSON text") from None
        return check_text(text)
    return check_text(str(value))


def check_text(text: str) -> str:
    """``text`` if it can be written as UTF-8; a lone surrogate (from ``"\\ud800"`` in JSON) cannot."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = len(text[: e.start].encode("utf-8", errors="surrogatepass"))
        code = ord(text[e.start])
        hint = (f"; from a file name, it is the undecodable byte 0x{code - 0xDC00:02x}: rename the file to UTF-8"
                if 0xDC80 <= code <= 0xDCFF else "")
        raise BadValue(f"lone surrogate U+{code:04X} at character {e.start} (byte {byte}) is not valid "
                       f"Unicode text; fix the escape in the source{hint}") from None
    return text


def decode_utf8(data: bytes) -> str:
    """Strict UTF-8 decoding; the problem names the 0-based byte offset and the bytes."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = data[e.start : e.start + 4].hex(" ")
        raise BadValue(f"invalid UTF-8 at byte {e.start} (bytes {bad}): {e.reason}") from None


def _jsonable(value: Any) -> Any:
    """Nested value -> what ``json.dumps`` takes, refusing what JSON text cannot say exactly."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            key = k if isinstance(k, str) else str(_jsonable(k))
            if key in out:
                raise BadValue(f"nested keys {key!r} collide once written as JSON text")
            out[key] = _jsonable(v)
        return out
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise BadValue(f"nested value holds {value!r}, which JSON text cannot represent; "
                       "store it as a top-level double column")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return decode_utf8(bytes(value))
    return str(value)  # datetime, Decimal, ...: their text form is exact


def coerce(value: Any, expected: str) -> tuple[bool, Any]:
    """Fit ``value`` to an established column type; (False, None) when it cannot be done losslessly."""
    actual = value_type(value)
    if actual is None or actual == expected:
        return True, value
    if expected == "double" and actual == "long":
        return True, float(value)
    return False, None


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


RAW = RAW_CONTENT_FIELD

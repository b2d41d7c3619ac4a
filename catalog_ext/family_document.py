"""How a :class:`FamilyState` is stored: a small document per version plus shared segments.

Two lists of the state grow with the data, not with the change a commit makes: one
:class:`Batch` per ingest batch and one :class:`ComputedUnit` per feature per batch. Written
whole into every version's document they made every commit - even moving a tag - cost
what the table had accumulated (a 400-batch table: 78 KB parsed and written per commit;
100 features x 1,000 batches would be ~30 MB). So, like Iceberg's manifests:

- each such list is cut by position into chunks of :data:`SEGMENT_ENTRIES`; every full
  chunk is a *segment*, an immutable file named by the hash of its content, which later
  versions share by name; the document keeps the names plus the unsealed tail;
- a commit writes only segments its base version did not name (normally none, or the one
  that just filled) and a document whose size is bounded by the tail, not by history;
- segments read or written in this process are kept parsed (they never change), so a
  long-lived writer does not re-parse them either.

Why a segment the base does not name is always (re)written, even when a file of that name
exists: retention deletes segments no kept version names (``governance.retention``), and
rewriting refreshes the file's mtime past the fence of a concurrent expiry. A segment the
base names cannot disappear while this commit can still win: the base is current until
its compare-and-swap succeeds.

Documents written before segments existed have no ``segments`` key and load as before.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from typing import Any, Callable

from catalog_ext.errors import OmniError
from catalog_ext.family import Batch, ComputedUnit, FamilyState

#: entries per sealed segment: a document carries at most this many of each list (tail) plus
#: one name per 64 sealed entries (10,000 batches: 156 names, ~11 KB)
SEGMENT_ENTRIES = 64
SEGMENTED: dict[str, type] = {"batches": Batch, "computed": ComputedUnit}
SEGMENT_FOLDER = "segments"
SEGMENT_PREFIX = "segment-"
_SEGMENTS_KEY = "segments"

#: segment name -> parsed entries (immutable files, so never stale); oldest evicted first
_PARSED: "OrderedDict[str, tuple[Any, ...]]" = OrderedDict()
#: ids of a chunk's entries -> (the entries, their segment name): names a chunk again
#: without serialising it; holding the entries keeps their ids from being reused
_NAMED: "OrderedDict[tuple[int, ...], tuple[tuple[Any, ...], str]]" = OrderedDict()
_CACHE_SEGMENTS = 4096
_LOCK = threading.Lock()  # concurrent commits in one process share the caches

Opener = Callable[[str], Any]  # location -> a pyiceberg FileIO for it


def _remember(name: str, entries: tuple[Any, ...]) -> None:
    with _LOCK:
        _PARSED[name] = entries
        _PARSED.move_to_end(name)
        _NAMED[tuple(id(e) for e in entries)] = (entries, name)
        while len(_PARSED) > _CACHE_SEGMENTS:
            _PARSED.popitem(last=False)
        while len(_NAMED) > _CACHE_SEGMENTS:
            _NAMED.popitem(last=False)


def _chunk_bytes(chunk: tuple[Any, ...]) -> bytes:
    """A segment's canonical content (sorted keys): equal entries, equal bytes, equal name."""
    return json.dumps([e.model_dump(mode="json") for e in chunk], sort_keys=True, separators=(",", ":")).encode()


def _segment_name(field: str, chunk: tuple[Any, ...]) -> tuple[str, bytes | None]:
    """The chunk's segment name, and its bytes when they had to be serialised to name it."""
    with _LOCK:
        hit = _NAMED.get(tuple(id(e) for e in chunk))
    if hit is not None and all(a is b for a, b in zip(hit[0], chunk)):
        return hit[1], None
    body = _chunk_bytes(chunk)
    return f"{SEGMENT_PREFIX}{field}-{hashlib.sha256(body).hexdigest()[:32]}.json", body


def segment_location(folder: str, name: str) -> str:
    return f"{folder.rstrip('/')}/{SEGMENT_FOLDER}/{name}"


def write(open_io: Opener, folder: str, path: str, state: FamilyState,
          base_segments: frozenset[str] | set[str] = frozenset()) -> tuple[str, ...]:
    """Write ``state``'s document to ``path``, sealing segments under ``folder``; returns its segment names.

    ``base_segments``: the names the base version's document refers to (they exist, see the
    module docstring); every other sealed chunk is written.
    """
    doc = state.model_dump(mode="json", exclude=set(SEGMENTED))
    if not doc["materializations"]:
        del doc["materializations"]  # as FamilyState.to_json: older documents stay byte-identical
    if doc.get("hot") is None:
        doc.pop("hot", None)
    segments: dict[str, list[str]] = {}
    for field in SEGMENTED:
        entries: tuple[Any, ...] = getattr(state, field)
        sealed = len(entries) - len(entries) % SEGMENT_ENTRIES
        known = _field_names(entries)
        if known is not None and len(known) != sealed // SEGMENT_ENTRIES:
            known = None  # named by a document from before segments existed
        names = []
        for i, start in enumerate(range(0, sealed, SEGMENT_ENTRIES)):
            if known is not None and known[i] in base_segments:
                names.append(known[i])  # shared with the base and already remembered: nothing to do
                continue
            chunk = entries[start:start + SEGMENT_ENTRIES]
            name, body = (known[i], None) if known is not None else _segment_name(field, chunk)
            if name not in base_segments:
                location = segment_location(folder, name)
                with open_io(location).new_output(location).create(overwrite=True) as out:
                    out.write(body if body is not None else _chunk_bytes(chunk))
            _remember(name, chunk)
            names.append(name)
        _note_field_names(entries, names)
        if names:
            segments[field] = names
        doc[field] = [_dumped(e) for e in entries[sealed:]]
    if segments:
        doc[_SEGMENTS_KEY] = segments
    with open_io(path).new_output(path).create(overwrite=False) as out:
        out.write(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
    out_names = tuple(n for names in segments.values() for n in names)
    # what a reader of this path would parse is the state just written (frozen): a commit
    # loads its own version right after (tags, pinned views, the caller), without re-reading
    _note_state(path, state, out_names)
    return out_names


def _field_names(entries: tuple[Any, ...]) -> list[str] | None:
    """The segment names of ``entries``' sealed chunks when this very tuple was named before.

    A commit that leaves a list alone (a tag, a feature registration: ``model_copy`` keeps
    the tuple) then names its segments in O(1) instead of walking every entry.
    """
    with _LOCK:
        hit = _FIELD_NAMES.get(id(entries))
        if hit is None or hit[0] is not entries:
            return None
        _FIELD_NAMES.move_to_end(id(entries))
        return hit[1]


def _note_field_names(entries: tuple[Any, ...], names: list[str]) -> None:
    with _LOCK:
        _FIELD_NAMES[id(entries)] = (entries, list(names))  # holding the tuple keeps its id from reuse
        _FIELD_NAMES.move_to_end(id(entries))
        while len(_FIELD_NAMES) > _CACHE_STATES * len(SEGMENTED):
            _FIELD_NAMES.popitem(last=False)


def _dumped(entry: Any) -> dict[str, Any]:
    """``entry.model_dump(mode="json")``, once per (immutable) entry: a document's unsealed
    tail holds up to :data:`SEGMENT_ENTRIES` of them, re-dumped by every commit otherwise."""
    with _LOCK:
        hit = _DUMPED.get(id(entry))
        if hit is not None and hit[0] is entry:
            return hit[1]
    out = entry.model_dump(mode="json")
    with _LOCK:
        _DUMPED[id(entry)] = (entry, out)
        while len(_DUMPED) > _CACHE_DUMPED:
            _DUMPED.popitem(last=False)
    return out


def _note_state(path: str, state: FamilyState, names: tuple[str, ...]) -> None:
    with _LOCK:
        _STATES[path] = (state, names)
        _STATES.move_to_end(path)
        while len(_STATES) > _CACHE_STATES:
            _STATES.popitem(last=False)


#: document path -> (its state, its segment names). A document is written once under a
#: fresh name (``overwrite=False``) and its state is frozen, so a parsed one stays true;
#: validating a 2,500-feature state costs ~0.1 s, which every query on it would repeat.
_STATES: "OrderedDict[str, tuple[FamilyState, tuple[str, ...]]]" = OrderedDict()
_CACHE_STATES = 16
#: id(a state's list) -> (that tuple, its sealed segments' names), see :func:`_field_names`
_FIELD_NAMES: "OrderedDict[int, tuple[tuple[Any, ...], list[str]]]" = OrderedDict()
#: id(entry) -> (entry, its JSON dump), see :func:`_dumped`
_DUMPED: "OrderedDict[int, tuple[Any, dict[str, Any]]]" = OrderedDict()
_CACHE_DUMPED = 4 * SEGMENT_ENTRIES * len(SEGMENTED) * 4


def clear_caches() -> None:
    """Forget every parsed document and segment: what a new process would see."""
    with _LOCK:
        _STATES.clear()
        _PARSED.clear()
        _NAMED.clear()
        _FIELD_NAMES.clear()
        _DUMPED.clear()


def read(open_io: Opener, folder: str, path: str) -> tuple[FamilyState, tuple[str, ...]]:
    """The state stored at ``path`` and the segment names its document refers to."""
    with _LOCK:
        hit = _STATES.get(path)
        if hit is not None:
            _STATES.move_to_end(path)
            return hit
    out = _read(open_io, folder, path)
    _note_state(path, *out)
    return out


def _read(open_io: Opener, folder: str, path: str) -> tuple[FamilyState, tuple[str, ...]]:
    with open_io(path).new_input(path).open() as stream:
        doc = json.loads(stream.read())
    segments: dict[str, list[str]] = doc.pop(_SEGMENTS_KEY, {})
    if not segments:
        return FamilyState.model_validate(doc), ()
    for field, names in segments.items():
        model = SEGMENTED[field]
        entries: list[Any] = []
        for name in names:
            with _LOCK:
                parsed = _PARSED.get(name)
            if parsed is None:
                location = segment_location(folder, name)
                try:
                    with open_io(location).new_input(location).open() as stream:
                        parsed = tuple(model.model_validate(e) for e in json.loads(stream.read()))
                except FileNotFoundError as e:
                    raise OmniError(
                        f"family document {path} names segment {location}, which is missing; the version is "
                        "unreadable - restore the file from a backup, or read a later version ('omni log')") from e
            _remember(name, parsed)
            entries.extend(parsed)
        entries.extend(model.model_validate(e) for e in doc.get(field, ()))
        doc[field] = entries
    state = FamilyState.model_validate(doc)
    for field in SEGMENTED:  # the next commit from this state names its segments in O(1)
        _note_field_names(getattr(state, field), segments.get(field, []))
    return state, tuple(n for names in segments.values() for n in names)


def folder_of(document_path: str) -> str:
    """Documents and their segments live side by side: ``<view>/omni/`` and ``<view>/omni/segments/``."""
    return document_path.rsplit("/", 1)[0]

"""The LMDB index keeps at most a budget of its memory maps resident (``omni_iceberg.index.resident``):
bulk writes, seals and bulk lookups release the pages they mapped, and give the same answers."""

from __future__ import annotations

import random
import sys

import pytest

import omni_iceberg.index.lmdb_backend as lmdb_backend
import omni_iceberg.index.resident as resident
from omni_iceberg.index.backend import entry_value, fkey_bytes
from omni_iceberg.index.keys import file_key
from omni_iceberg.index.lmdb_backend import LmdbBackend

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")

FILES = [file_key(f"file:///f{n}.parquet") for n in range(2)]
MIB = 1 << 20


def _rss_kib(starts: set[int]) -> int:
    """Resident KiB of this process's maps that begin at ``starts``."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = int(head.split("-")[0], 16) in starts
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


def _write(backend: LmdbBackend, ids: list[bytes]) -> None:
    for part in range(0, len(ids), 40_000):  # several writes: the later ones find a big tree
        backend.put_entries([(rid, FILES[n % 2], n, b"v" * (n % 5)) for n, rid in
                             enumerate(ids[part:part + 40_000], part)])


def _entries(backend: LmdbBackend, keys: list[bytes]) -> set:
    got = backend.get_entry_arrays(keys)
    return {(keys[at], fkey_bytes(fk), bytes(v)) for at, fk, v in
            zip(got.asked.tolist(), got.fkeys.tolist(), got.values())}


def _resident_during_writes(tmp_path, monkeypatch, share: int) -> tuple[int, int, LmdbBackend, list[bytes]]:
    """(most KiB of the LMDB map seen resident at a release, the file's KiB) writing 400k random ids."""
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "1024")
    monkeypatch.setattr(resident, "MAP_SHARE", share)
    seen = [0]
    calls = [0]
    real = lmdb_backend.release_range

    def watched(start, length):
        calls[0] += 1
        if calls[0] % 40 == 1:  # reading smaps costs ~1 ms: a sample of the releases
            seen[0] = max(seen[0], _rss_kib({start}))
        return real(start, length)

    monkeypatch.setattr(lmdb_backend, "release_range", watched)
    rng = random.Random(7)
    ids = [rng.randbytes(16) for _ in range(400_000)]
    backend = LmdbBackend(tmp_path / "idx")
    _write(backend, ids)
    return seen[0], (backend._env.info()["last_pgno"] * 4096) >> 10, backend, ids


def test_bulk_writes_keep_a_few_folios_of_a_big_map_resident(tmp_path, monkeypatch):
    # budget 1 MiB: releases every 8 inserts, each of which maps one page-cache folio at most
    seen, file_kib, backend, ids = _resident_during_writes(tmp_path, monkeypatch, share=1024)
    try:
        assert file_kib > 16 * 1024  # the index is many times the budget
        assert 0 < seen <= 8 * lmdb_backend.FOLIO_BYTES // 1024 + 1024
        sample = ids[::997]
        assert _entries(backend, sample) == {(rid, FILES[n % 2], entry_value((rid, FILES[n % 2], n, b"v" * (n % 5))))
                                            for n, rid in enumerate(ids) if n % 997 == 0}
        start = backend._guard.mapping[0]
        assert _rss_kib({start}) <= 8 * lmdb_backend.FOLIO_BYTES // 1024 + 1024  # the walk released too
    finally:
        backend.close()


def test_a_map_within_the_budget_is_left_resident(tmp_path, monkeypatch):
    # the default share: 128 MiB, more than this index - no release at all (nothing changes for small tables)
    seen, file_kib, backend, _ = _resident_during_writes(tmp_path, monkeypatch, share=resident.MAP_SHARE)
    try:
        assert seen == 0 and backend._guard.mapping is None
        found = resident.find_mapping(str(backend.path / "data.mdb"))
        assert _rss_kib({found[0]}) > file_kib // 2  # what the releases keep away, on the same work
    finally:
        backend.close()


def test_a_bulk_lookup_of_a_big_segment_reads_it_in_released_groups(tmp_path, monkeypatch):
    monkeypatch.setenv("OMNI_MEMORY_LIMIT_MB", "1024")
    rng = random.Random(11)
    ids = [rng.randbytes(16) for _ in range(200_000)]
    backend = LmdbBackend(tmp_path / "idx")
    try:
        _write(backend, ids)
        backend.seal(progress=False)
        segment = backend._segment(backend._sealed_now())
        asked = rng.sample(ids, 20_000) + [rng.randbytes(16) for _ in range(50)]  # 50 unknown
        whole = _entries(backend, asked)  # the default budget: the segment fits, one search
        starts = {resident.find_mapping(str(segment.folder / name))[0] for name in ("hi.npy", "rec.npy")}
        assert _rss_kib(starts) > 0  # left mapped
        monkeypatch.setattr(resident, "MAP_SHARE", 1024 * 16)  # 64 KiB: groups of ~1/100 of it
        groups = segment.groups(segment.hi[::10].copy(), resident.map_budget())
        assert groups is not None and len(groups) > 20
        assert _entries(backend, asked) == whole
        assert len(whole) == 20_000
        assert _rss_kib(starts) == 0  # released after the last group
        few = asked[:3]
        assert _entries(backend, few) == {e for e in whole if e[0] in few}  # the point path releases too
        assert _rss_kib(starts) == 0
    finally:
        backend.close()

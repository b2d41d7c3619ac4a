"""One contract, every index backend: embedded LMDB and a real HBase (started by the test).

The backend is a thin key-value adapter (``omni_iceberg.index.backend``); these tests
pin what the rest of the index relies on, so a new backend passes them or is wrong.
"""

from __future__ import annotations

import socket
import threading
import uuid

import pytest

from omni_iceberg.index.backend import FILE_PREFIX, RUN_PREFIX, FileRecord
from omni_iceberg.index.core import IdIndex
from omni_iceberg.index.errors import IndexUnavailableError
from omni_iceberg.index.keys import file_key, id_key
from tests.services import free_port


def _ident() -> str:
    return f"idx_{uuid.uuid4().hex[:8]}.web"  # unique per test: HBase tables outlive a test


def _sealing_lmdb(path):
    """LMDB that seals after every put: the contract checked on the sealed-segment read path
    (deletes are left unsealed, so lookups also meet tombstones over a segment)."""
    from omni_iceberg.index.lmdb_backend import LmdbBackend

    class SealingLmdb(LmdbBackend):
        def put_entries(self, entries):
            super().put_entries(entries)
            self.seal(progress=False)

        def write(self, entries, meta):
            super().write(entries, meta)
            self.seal(progress=False)

    return SealingLmdb(path)


@pytest.fixture(params=["lmdb", "lmdb-sealed", pytest.param("hbase", marks=pytest.mark.hbase)])
def open_backend(request, tmp_path):
    """A factory: each call is a new client (connection) on the same index, like another process."""
    opened = []
    ident = _ident()

    def make():
        if request.param == "lmdb":
            from omni_iceberg.index.lmdb_backend import LmdbBackend

            b = LmdbBackend(tmp_path / "idx")
        elif request.param == "lmdb-sealed":
            b = _sealing_lmdb(tmp_path / "idx")
        else:
            from omni_iceberg.index.hbase_backend import HBaseBackend
            from tests.services.hbase import shared_server

            server = shared_server()
            b = HBaseBackend(server.host, server.thrift_port, ident, timeout_ms=20000)
        opened.append(b)
        return b

    yield make
    for b in opened:
        b.close()


@pytest.fixture
def backend(open_backend):
    return open_backend()


def _id(n: int) -> bytes:
    return id_key(f"{n:032x}")


def test_entries_round_trip_several_files_per_id(backend):
    f1, f2 = file_key("file:///a.parquet"), file_key("file:///b.parquet")
    backend.put_entries([(_id(1), f1, 0), (_id(2), f1, 1, b"\x00inline\xff"), (_id(1), f2, 7)])
    got = backend.get_entries([_id(2), _id(1), _id(3)])
    assert sorted(got[_id(1)]) == sorted([(f1, 0, b""), (f2, 7, b"")])
    assert got[_id(2)] == [(f1, 1, b"\x00inline\xff")]  # inline values come back byte for byte
    assert _id(3) not in got
    assert sorted(backend.scan_entries()) == sorted([(_id(1), f1, 0, b""), (_id(1), f2, 7, b""),
                                                     (_id(2), f1, 1, b"\x00inline\xff")])


def test_entries_of_two_writers_never_overwrite_each_other(open_backend):
    backend, other = open_backend(), open_backend()
    f1, f2 = file_key("file:///w1.parquet"), file_key("file:///w2.parquet")
    ids = [_id(n) for n in range(200)]
    t1 = threading.Thread(target=other.put_entries, args=([(i, f1, n) for n, i in enumerate(ids)],))
    t1.start()
    backend.put_entries([(i, f2, n + 1000) for n, i in enumerate(ids)])
    t1.join()
    got = backend.get_entries(ids)
    assert all(sorted(got[i]) == sorted([(f1, n, b""), (f2, n + 1000, b"")]) for n, i in enumerate(ids))


def test_delete_entries_and_bulk_get_beyond_one_request(backend):
    f = file_key("file:///c.parquet")
    ids = [_id(n) for n in range(2500)]  # more than one HBase multi-get chunk
    backend.put_entries([(i, f, n) for n, i in enumerate(ids)])
    backend.delete_entries([(ids[0], f), (ids[-1], f)])
    got = backend.get_entries(ids)
    assert len(got) == 2498 and ids[0] not in got and got[ids[1]] == [(f, 1, b"")]


def test_meta_records_by_key_and_prefix(backend):
    rec = FileRecord(path="file:///x.parquet", table="ns.t__base", run="r1", batch="b", rows=3)
    backend.put_meta({FILE_PREFIX + b"k1": rec.to_bytes(), RUN_PREFIX + b"ns.t\x00r1": b"{}",
                      RUN_PREFIX + b"ns.t\x00r2": b"{}"})
    assert FileRecord.from_bytes(backend.get_meta([FILE_PREFIX + b"k1"])[FILE_PREFIX + b"k1"]) == rec
    assert backend.get_meta([FILE_PREFIX + b"nope"]) == {}
    assert [k for k, _ in backend.scan_meta(RUN_PREFIX)] == [RUN_PREFIX + b"ns.t\x00r1", RUN_PREFIX + b"ns.t\x00r2"]
    backend.delete_meta([RUN_PREFIX + b"ns.t\x00r1"])
    assert [k for k, _ in backend.scan_meta(RUN_PREFIX)] == [RUN_PREFIX + b"ns.t\x00r2"]


def test_drop_empties_the_index_and_it_stays_usable(backend):
    f = file_key("file:///d.parquet")
    backend.put_entries([(_id(5), f, 0)])
    backend.put_meta({FILE_PREFIX + f: b"{}"})
    backend.drop()
    assert backend.get_entries([_id(5)]) == {} and list(backend.scan_meta(b"")) == []
    backend.put_entries([(_id(6), f, 1)])
    assert backend.get_entries([_id(6)]) == {_id(6): [(f, 1, b"")]}


def test_writer_resumes_an_unfinished_run_without_duplicating(backend):
    index = IdIndex(backend, "ns.t")
    w = index.writer("ns.t__base", "run-1")
    w.add_file("file:///e1.parquet", batch="b", ids=[f"{n:032x}" for n in range(3)])
    again = IdIndex(backend, "ns.t").writer("ns.t__base", "run-1")  # a new process after a crash
    assert again.has_file("file:///e1.parquet") and not again.record.complete
    assert again.add_file("file:///e1.parquet", batch="b", ids=[f"{n:032x}" for n in range(3)]) == 0
    again.add_file("file:///e2.parquet", batch="b", ids=[f"{n:032x}" for n in range(3, 5)])
    rec = again.finish()
    assert rec.complete and rec.rows == 5 and len(rec.files) == 2


@pytest.mark.hbase
def test_hbase_entries_table_is_presplit_on_the_id_space():
    from omni_iceberg.index.hbase_backend import PRESPLIT_REGIONS, HBaseBackend
    from tests.services.hbase import shared_server

    server = shared_server()
    b = HBaseBackend(server.host, server.thrift_port, _ident(), timeout_ms=20000, presplit=server.presplit)
    regions = b._conn.table(b.entries_name).regions()
    assert len(regions) == PRESPLIT_REGIONS
    starts = sorted(r["start_key"] for r in regions)
    assert starts[0] == b"" and starts[1][:1] == bytes([256 // PRESPLIT_REGIONS])
    b.put_entries([(_id(1), file_key("file:///p.parquet"), 3)])
    assert b.get_entries([_id(1)]) == {_id(1): [(file_key("file:///p.parquet"), 3, b"")]}
    b.close()


def test_unreachable_hbase_is_a_clear_error_naming_host_and_port():
    from omni_iceberg.index.hbase_backend import HBaseBackend

    port = free_port()  # nobody listens there
    with pytest.raises(IndexUnavailableError, match=f"127.0.0.1:{port}.*OMNI_INDEX_TIMEOUT_MS"):
        HBaseBackend("127.0.0.1", port, "ns.t", timeout_ms=500)


def test_hung_hbase_fails_within_the_configured_timeout_not_forever():
    from omni_iceberg.index.hbase_backend import HBaseBackend

    # accepts connections (the kernel does, via the backlog) but never answers a call
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        with pytest.raises(IndexUnavailableError, match=f"127.0.0.1:{port} did not answer within 300 ms"):
            HBaseBackend("127.0.0.1", port, "ns.t", timeout_ms=300)


def test_lmdb_map_growth_never_breaks_a_reader_of_another_thread(tmp_path, monkeypatch):
    """Index writes run on a background thread: growing the map under an open read
    transaction of another thread invalidated its cursor ("closed/deleted/dropped")."""
    from omni_iceberg.index import lmdb_backend

    monkeypatch.setattr(lmdb_backend, "MAP_SIZE", 1 << 20)  # 1 MiB: a few writes fill it
    backend = lmdb_backend.LmdbBackend(tmp_path / "grow")
    f = file_key("file:///g.parquet")
    first = [_id(n) for n in range(2000)]
    backend.put_entries([(i, f, n) for n, i in enumerate(first)])
    errors: list[BaseException] = []
    stop = threading.Event()

    def read():
        try:
            while not stop.is_set():
                got = backend.get_entries(first)
                assert len(got) == len(first)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        for chunk in range(12):  # ~30 MiB of entries: the map doubles several times
            backend.put_entries([(_id(100_000 + chunk * 20_000 + n), f, n, b"v" * 48) for n in range(20_000)])
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert not errors, errors[0]
    assert backend._env.info()["map_size"] > 1 << 20
    assert len(backend.get_entries([_id(100_000 + 11 * 20_000 + 5)])) == 1
    backend.close()


def test_lmdb_write_on_a_big_tree_is_split_and_its_records_land_with_the_last_entries(tmp_path, monkeypatch):
    """On a tree of more leaves than the dirty-page budget a write is cut into several
    transactions (memory follows the budget, not the table); the file and run records
    commit with the last of them, and every entry is found."""
    from omni_iceberg.index import lmdb_backend

    monkeypatch.setattr(lmdb_backend, "DIRTY_PAGE_BUDGET", 4)
    backend = lmdb_backend.LmdbBackend(tmp_path / "split")
    f = file_key("file:///big.parquet")
    backend.put_entries([(_id(n), f, n, b"v" * 48) for n in range(5000)])  # one txn: the tree was empty
    assert backend._read(lambda txn: txn.stat(backend._entries)["leaf_pages"]) > 4
    per = backend._entries_per_txn()
    assert per is not None and per < 6000
    commits: list[int] = []
    original = backend._write
    monkeypatch.setattr(backend, "_write", lambda fn: (commits.append(1), original(fn))[1])
    g = file_key("file:///more.parquet")
    more = [_id(10_000 + n) for n in range(6000)]
    backend.write([(i, g, n) for n, i in enumerate(more)], {FILE_PREFIX + g: b"record"})
    assert len(commits) == -(-6000 // per) > 1
    assert backend.get_meta([FILE_PREFIX + g]) == {FILE_PREFIX + g: b"record"}
    assert len(backend.get_entries(more)) == 6000 and len(backend.get_entries([_id(7)])) == 1
    backend.close()


def test_lmdb_index_opened_by_many_threads_at_once_does_not_deadlock(tmp_path):
    """Concurrent submits in one process open a fresh index together: opening its named
    databases from two threads at once deadlocked (LMDB's writer lock against the GIL)."""
    from omni_iceberg.index import lmdb_backend

    for attempt in range(5):
        path = tmp_path / f"fresh{attempt}"
        opened: list[object] = []
        start = threading.Barrier(4)

        def open_it() -> None:
            start.wait()
            opened.append(lmdb_backend.LmdbBackend(path))

        threads = [threading.Thread(target=open_it, daemon=True) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=20)
        assert len(opened) == 4, "opening one LMDB index from several threads hung"
        opened[0].put_meta({b"k": b"v"})
        assert all(b.get_meta([b"k"]) == {b"k": b"v"} for b in opened)
        opened[0].close()

"""The index's memory maps hold at most a share of ``OMNI_MEMORY_LIMIT_MB`` resident.

Why: every page of a memory-mapped file a process touches stays mapped into it, and counts
in its RSS (``ps``, a container's memory limit), until the map is closed. The LMDB map of
the delta and the sealed segments' maps (:mod:`omni_iceberg.index.sealed`) are as large as
the index, so an operation that touches all of them - a rebuild writing every entry, a seal
reading the whole delta, a lookup of 10,000 random ids - ended with the whole index in its
RSS, far above its anonymous memory (benchmarks/bounded_memory.py reports both). Worse, a
page cache that holds files in large folios maps a whole folio on one fault, so one random
read can map megabytes (``MADV_RANDOM`` does not stop it).

Those pages are the page cache's, not the process's: ``madvise(MADV_DONTNEED)`` on a
shared file map only unmaps them (the next read maps them again from the page cache: no
data is lost or re-read from disk). So the
backends release their maps between bounded units of work once the files are larger than
:func:`map_budget` (below it, nothing changes: a table whose index fits keeps every page
mapped, as before).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys

#: the index's maps may hold this share of ``OMNI_MEMORY_LIMIT_MB`` resident between two
#: releases: the rest is the operation's own (read slices, write buffers, the engine)
MAP_SHARE = 8
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", 4)
_libc = None


def map_budget() -> int:
    """Bytes of index maps one process keeps resident before releasing them."""
    from catalog_ext import settings

    return int(float(settings.value("OMNI_MEMORY_LIMIT_MB")) * 2 ** 20) // MAP_SHARE


def find_mapping(path: str) -> tuple[int, int] | None:
    """(start address, length) of this process's largest map of the file at ``path``; None
    where there is none or the system does not say (not Linux)."""
    try:
        st = os.stat(path)
        with open("/proc/self/maps") as f:
            lines = f.readlines()
    except OSError:
        return None
    # a maps line: "start-end perms offset dev inode path"; matched by inode (the path shown
    # is the real one, which may differ from ``path`` through links)
    best = None
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or int(parts[4]) != st.st_ino:
            continue
        major, minor = (int(x, 16) for x in parts[3].split(":"))
        if os.makedev(major, minor) != st.st_dev:
            continue
        start, end = (int(x, 16) for x in parts[0].split("-"))
        if best is None or end - start > best[1]:
            best = (start, end - start)
    return best


def release_range(start: int, length: int) -> bool:
    """Unmap the resident pages of the shared file map at [start, start + length).

    The caller guarantees that range is still that map (not unmapped and reused meanwhile:
    ``MADV_DONTNEED`` on anonymous memory would zero it); the LMDB backend holds its
    transaction guard, which resizes and closes wait for.
    """
    global _libc
    if not sys.platform.startswith("linux"):
        return False
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        _libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    return _libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(length), _MADV_DONTNEED) == 0


def release_map(m: "mmap.mmap | None") -> None:
    """Unmap the resident pages of one of Python's shared read-only file maps."""
    if isinstance(m, mmap.mmap) and not m.closed and hasattr(m, "madvise"):
        m.madvise(_MADV_DONTNEED)

"""The LMDB backend puts a write's entries in bytewise key order, whichever way it sorts them."""

from __future__ import annotations

import numpy as np

from omni_iceberg.index import lmdb_backend
from omni_iceberg.index.backend import FileEntries, key_order


def test_entries_of_several_files_are_sorted_as_their_keys_bytewise():
    rnd = np.random.default_rng(1)
    for trial in range(300):
        shared = rnd.integers(0, 256, (5, 16), dtype=np.uint8)
        group = []
        for _ in range(int(rnd.integers(1, 6))):
            n = int(rnd.integers(1, 200))
            ids = rnd.integers(0, 256, (n, 16), dtype=np.uint8)
            if trial % 3 == 0:  # one id in several files: keys share their first 8 bytes
                k = min(n, 5)
                ids[:k] = shared[:k]
            if trial % 5 == 0:
                ids[:, :8] = 7
            fkey = rnd.integers(0, 256, 16, dtype=np.uint8)
            keys = np.hstack([ids, np.broadcast_to(fkey, (n, 16))])
            group.append(FileEntries(bytes(fkey), keys, rnd.integers(0, 256, (n, 12), dtype=np.uint8)))
        joined_keys = np.vstack([e.key_matrix for e in group])
        order = key_order(joined_keys)
        keys, values = lmdb_backend._sorted_together(group)
        assert np.array_equal(keys, joined_keys[order])
        assert np.array_equal(values, np.vstack([e.value_matrix for e in group])[order])

"""Every pair of writers raced on one logical table (threads, the embedded SQLite catalog, LMDB).

Two writers - submit, backfill, compact, regroup, rebucket, drop-batch, materialize,
retention - start together behind a barrier, each with its own ``Omni`` (its own catalog
connection), on a table where each has work (``tests.faults.race_table``). Each must
succeed or lose cleanly (a conflict or a refusal, nothing half-done); afterwards no
physical table holds an (id, batch) pair twice, every batch is complete, no unit is
recorded twice, no staging branch is left, and ``index verify`` passes with nothing
pending (a loser withdraws its own index entries). ``OMNI_RACE_TRIALS`` sets the trials
per pair (default 2; ``python -m benchmarks.reliability --races N`` runs many, in processes).
"""

from __future__ import annotations

import os
import threading

import pytest

from tests.faults import clean_failure, race_problems, race_table, run_writer, writer_pairs

TRIALS = int(os.environ.get("OMNI_RACE_TRIALS", "2"))


def _race(tmp_path, first: str, second: str) -> tuple[list[str], list[str]]:
    from omni_iceberg.api import Omni

    home = race_table(tmp_path)
    barrier = threading.Barrier(2)
    outcomes: dict[str, BaseException | None] = {}

    def go(writer: str, side: str) -> None:
        omni = Omni(home=home)
        barrier.wait()
        try:
            run_writer(omni, writer, side, tmp_path)
            outcomes[side] = None
        except BaseException as e:  # noqa: BLE001 - judged below: only clean failures may happen
            outcomes[side] = e

    threads = [threading.Thread(target=go, args=(w, s)) for w, s in ((first, "a"), (second, "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    failed = [f"{w} ({s}): {type(e).__name__}: {e}" for w, s in ((first, "a"), (second, "b"))
              if (e := outcomes.get(s)) is not None and not clean_failure(e)]
    problems, _ = race_problems(Omni(home=home), "web")
    return failed, problems


@pytest.mark.slow
@pytest.mark.parametrize("first,second", writer_pairs(), ids=lambda w: w)
def test_two_writers_race_without_duplicates_or_index_damage(tmp_path, first, second):
    for trial in range(TRIALS):
        failed, problems = _race(tmp_path / f"t{trial}", first, second)
        assert not failed and not problems, f"trial {trial}: {failed + problems}"

"""Fuzzed bad records through every reader: no crash, every record accounted for.

300 records per reader (about half corrupted, see :mod:`tests.fuzz_records`) go through
the real pipeline into a real table. The submit must not raise; every good record
lands with its exact text; every bad one lands exactly or is rejected with a reason
naming its place; landed + rejected + duplicates == records written.
"""

import pytest

from omni_iceberg.api import Omni
from tests.fuzz_records import KINDS, check_outcome, make_fuzz_input


@pytest.mark.parametrize("kind", KINDS)
def test_fuzzed_records_never_crash_and_all_are_accounted_for(tmp_path, kind):
    fuzz = make_fuzz_input(kind, tmp_path / "in", n=300, seed=1)
    expected = fuzz.expected_counts()
    assert expected["land"] > 50 and expected["reject"] > 50 and expected.get("duplicate", 0) > 5  # a real mix
    omni = Omni(home=tmp_path / "home")
    omni.create_table("t")
    report = omni.submit("t", fuzz.paths, batch="fuzz", kind=kind, progress=False)
    rows = omni.read("t", columns=["RawData"]).column("RawData").to_pylist()
    rejects = omni.rejects("t", "fuzz").to_pylist()
    assert check_outcome(fuzz, report, rows, rejects) == []
    assert all(r["field"] or r["line"] or r["offset"] is not None or kind == "html_dir" for r in rejects)


def test_check_outcome_catches_a_lost_record(tmp_path):
    """The checker itself can fail: drop one landed row and one reject and it says so."""
    fuzz = make_fuzz_input("jsonl", tmp_path / "in", n=60, seed=3)
    omni = Omni(home=tmp_path / "home")
    omni.create_table("t")
    report = omni.submit("t", fuzz.paths, batch="fuzz", progress=False)
    rows = omni.read("t", columns=["RawData"]).column("RawData").to_pylist()
    rejects = omni.rejects("t", "fuzz").to_pylist()
    assert check_outcome(fuzz, report, rows, rejects) == []
    problems = check_outcome(fuzz, report, rows[1:], rejects[1:])
    assert any("did not land" in p for p in problems) and any("was not rejected" in p for p in problems)

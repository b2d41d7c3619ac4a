"""The one type vocabulary and the one retry loop."""

import pyarrow as pa
import pytest

from catalog_ext import types
from catalog_ext.errors import CommitConflictError, SchemaConflictError
from catalog_ext.retry import retry


def test_type_strings_round_trip_and_map_to_every_engine():
    t = types.parse("list<list<double>>")
    assert types.format_type(t) == "list<list<double>>"
    assert types.to_arrow(t) == pa.list_(pa.list_(pa.float64()))
    assert types.sql_type(t, "spark") == "ARRAY<ARRAY<DOUBLE>>"
    assert types.sql_type(t, "trino") == "ARRAY(ARRAY(DOUBLE))"
    assert types.sql_type("list<string>", "duckdb") == "VARCHAR[]"
    assert str(types.to_iceberg("list<long>")) == "list<long>"
    assert types.to_arrow("timestamptz") == pa.timestamp("us", tz="UTC")


@pytest.mark.parametrize("bad", ["varchar", "list<>", "list<varchar>", "list<double", "map<string,string>"])
def test_unknown_types_are_refused_by_name(bad):
    assert not types.is_valid(bad)
    with pytest.raises(SchemaConflictError, match="unsupported column type"):
        types.parse(bad)


def test_retry_retries_only_what_it_is_told_and_reports_exhaustion():
    calls = []

    def lose_twice():
        calls.append(1)
        if len(calls) < 3:
            raise TimeoutError("lost")
        return len(calls)

    assert retry(lose_twice, on=TimeoutError, attempts=3, backoff=0) == 3
    with pytest.raises(KeyError):  # not a lost race: no retry
        retry(lambda: {}["x"], on=TimeoutError, attempts=5, backoff=0)
    with pytest.raises(CommitConflictError, match="gave up after 2") as info:
        retry(lambda: (_ for _ in ()).throw(TimeoutError("t")), on=lambda e: isinstance(e, TimeoutError),
              attempts=2, backoff=0, exhausted=lambda e: CommitConflictError("gave up after 2"))
    assert isinstance(info.value.__cause__, TimeoutError)

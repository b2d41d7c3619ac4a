"""Column groups (governance/column_groups.py): narrow feature tables merged into one table.

Every reader answers exactly as before a regroup, at the new version and at old ones; a
batch added after it is read from two parts until the next regroup; a recomputed batch
leaves the group in the backfill's own commit. Embedded SQLite catalog, real Parquet;
the last test runs the same on real Spark and Trino through the Iceberg view.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog_ext.view_sql import render_view_sql
from governance.column_groups import plan_column_groups, regroup
from omni_iceberg.api import Omni
from omni_iceberg.cli import main as cli_main
from omni_iceberg.features import feature
from tests import feature_udfs as U
from tests.pages import pages_jsonl as _jsonl

QUERY = ("SELECT _ai_append_name_ AS b, count(*) AS n, sum(t_len) AS words, sum(t_digits) AS digits, "
         "count(t_lang) AS langs FROM {t} GROUP BY 1 ORDER BY 1")
COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "t_len", "t_digits", "t_lang", "RawData.raw_data"]


def _load(omni: Omni, name: str, tmp_path: Path, batches=(("a", 5), ("b", 7))) -> None:
    for tag, n in batches:
        omni.submit(name, [str(_jsonl(tmp_path, tag, n))], batch=tag, progress=False)
    omni.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)


@pytest.fixture
def omni(omni_home, tmp_path):
    """Two tables with the same rows and features: ``web`` is regrouped, ``ref`` never is."""
    o = Omni(config=omni_home)
    for name in ("web", "ref"):
        o.create_table(name)
        o.register_features(name, [U.t_parse, U.t_len, U.t_digits, U.t_lang])
        _load(o, name, tmp_path)
    return o


def _rows(omni: Omni, name: str, as_of: int | None = None):
    return sorted(omni.read(name, columns=COLUMNS, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])


def _same_as_ref(omni: Omni) -> None:
    assert _rows(omni, "web") == _rows(omni, "ref")
    assert omni.query(QUERY.format(t="web")).to_pylist() == omni.query(QUERY.format(t="ref")).to_pylist()
    ids = [r["_ai_unique_id_"] for r in _rows(omni, "ref")]
    picked = ids[::3] + ["0" * 32]  # and one id that is nowhere
    got = omni.get("web", picked, columns=["t_len", "t_digits", "t_lang"]).to_pylist()
    want = omni.get("ref", picked, columns=["t_len", "t_digits", "t_lang"]).to_pylist()
    assert got == want


def _feature_tables(omni: Omni, name: str) -> list[str]:
    state = omni.state(name)
    return [state.feature(f).table_key for f in ("t_len", "t_digits", "t_lang")]


def test_narrow_tables_merge_into_one_group_and_every_reader_answers_the_same(omni):
    before = omni.state("web")
    plan = plan_column_groups(omni.store, "web")
    members = set(_feature_tables(omni, "web")[:2])  # t_len (long), t_digits (double): fixed width
    assert [set(m.members) for m in plan.moves] == [members]
    assert before.feature("t_parse").table_key in plan.skipped  # parsed text is not narrow
    assert "new group" in plan.describe() and "t_len" in plan.describe()

    report = omni.regroup("web")
    state = omni.state("web")
    group = plan.moves[0].group_key
    assert report["logical_version"] == state.version == before.version + 1
    assert state.physical_table(group).role == "column-group"
    assert all(state.physical_table(k).emptied for k in members)
    assert [pc.table for pc in state.read_parts("t_len")] == [group]
    _same_as_ref(omni)
    assert omni.verify_index("web").ok
    # the engines' view joins the group once instead of one table per feature
    for dialect in ("spark", "trino"):
        sql = render_view_sql(state, dialect)
        assert f"__{group}" in sql and not any(f"__{k}" in sql for k in members)
        assert sql.count(f"__{group}") == 1  # Trino: one lateral for the group, not one subquery per column
    # the old version keeps its layout and its answers
    assert _rows(omni, "web", as_of=before.version) == _rows(omni, "ref")
    assert any(f"__{k}" in render_view_sql(omni.state("web", as_of=before.version), "spark") for k in members)
    # nothing left to move: a second regroup changes nothing
    again = omni.regroup("web")
    assert again["plan"]["moves"] == [] and omni.state("web").version == state.version


def test_a_batch_after_the_regroup_is_read_from_both_parts_until_the_next(omni, tmp_path):
    omni.regroup("web")
    group = omni.state("web").read_parts("t_len")[0].table
    for name in ("web", "ref"):
        omni.submit(name, [str(_jsonl(tmp_path, "c", 6))], batch="c", progress=False)
        omni.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    state = omni.state("web")
    len_table = state.feature("t_len").table_key
    assert {pc.table for pc in state.read_parts("t_len")} == {group, len_table}
    assert "COALESCE(" in render_view_sql(state, "spark")
    _same_as_ref(omni)
    # the next regroup moves only batch c: the group's files of batches a and b are not rewritten
    group_ident = state.physical_table(group).identifier
    old_files = {t.file.file_path for t in omni.catalog.load_table(group_ident)
                 .scan(snapshot_id=state.physical_table(group).snapshot_id).plan_files()}
    report = omni.regroup("web")
    assert [m["group_key"] for m in report["plan"]["moves"]] == [group]
    after = omni.state("web")
    new_files = {t.file.file_path for t in omni.catalog.load_table(group_ident)
                 .scan(snapshot_id=after.physical_table(group).snapshot_id).plan_files()}
    assert old_files <= new_files
    assert [pc.table for pc in after.read_parts("t_len")] == [group]
    _same_as_ref(omni)
    assert omni.verify_index("web").ok
    # a dropped batch leaves the group too (its files hold several batches: rewritten without it)
    for name in ("web", "ref"):
        omni.drop_batch(name, "a", progress=False)
    _same_as_ref(omni)
    assert {r["_ai_append_name_"] for r in _rows(omni, "web")} == {"b", "c"}


def test_cli_dry_run_changes_nothing_and_json_names_the_plan(omni, capsys):
    version = omni.state("web").version
    assert cli_main(["--home", str(omni.config.home), "regroup", "web", "--dry-run", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["dry_run"] is True and len(out["plan"]["moves"]) == 1
    assert omni.state("web").version == version
    bad = _feature_tables(omni, "web")[0] + "_nope"
    assert cli_main(["--home", str(omni.config.home), "regroup", "web", "--tables", bad]) != 0
    assert bad in capsys.readouterr().err


def test_maintain_regroups_once_enough_tables_would_merge(omni, monkeypatch):
    import governance.column_groups as cg

    monkeypatch.setattr(cg, "GROUP_DUE_TABLES", 3)
    report = omni.maintain("web")
    assert "not due" in report.column_groups["describe"] and not any(
        t.role == "column-group" for t in omni.state("web").tables)
    monkeypatch.setattr(cg, "GROUP_DUE_TABLES", 2)
    report = omni.maintain("web")
    assert any(t.role == "column-group" for t in omni.state("web").tables)
    assert "column groups" in report.describe()
    _same_as_ref(omni)


# ---- a recomputed batch leaves the group -----------------------------------------------------
def _parser(version: str, fail_on: str | None = None):
    @feature(outputs={"ProcessedData.cg_text": "string"}, inputs=["RawData.raw_data"], name="cg_parse",
             version=version)
    def cg_parse(raw_data):
        if fail_on and fail_on in raw_data:
            raise ValueError("cannot parse this one")
        return raw_data.lower() + (" and two more" if version == "2" else "")

    return cg_parse


@feature(outputs={"cg_len": "long"}, inputs=["ProcessedData.cg_text"])
def cg_len(cg_text):
    return len(cg_text.split())


@feature(outputs={"cg_score": "double"}, inputs=["cg_len"])
def cg_score(cg_len):
    return cg_len / 10


def test_a_recomputed_batch_leaves_the_group_in_the_backfills_commit(omni_home, tmp_path):
    omni = Omni(config=omni_home)
    omni.create_table("st")
    docs = tmp_path / "docs.jsonl"
    docs.write_text("".join(json.dumps({"raw_data": f"doc {i} with words"}) + "\n" for i in range(10)))
    omni.submit("st", [str(docs)], batch="a", progress=False)
    omni.register_features("st", [_parser("1"), cg_len, cg_score])
    omni.backfill("st", ["cg_score"], isolation="inline", progress=False)
    state = omni.state("st")
    omni.regroup("st", tables=[state.feature("cg_len").table_key, state.feature("cg_score").table_key])
    assert {r["cg_len"] for r in omni.read("st", columns=["cg_len"]).to_pylist()} == {4}

    # v2 adds three words, and fails on one record: its values must be NULL, not the old ones
    omni.register_features("st", [_parser("2", fail_on="doc 3 ")])
    report = omni.backfill("st", ["cg_score"], isolation="inline", progress=False)
    assert report.status == "succeeded"
    read = omni.read("st", columns=["RawData", "cg_len", "cg_score"]).to_pylist()
    rows = {r["RawData"]["raw_data"]: r for r in read}
    assert len(rows) == 10
    assert rows["doc 3 with words"]["cg_len"] is None and rows["doc 3 with words"]["cg_score"] is None
    assert {r["cg_len"] for k, r in rows.items() if k != "doc 3 with words"} == {7}
    assert {r["cg_score"] for k, r in rows.items() if k != "doc 3 with words"} == {0.7}
    # and once the feature tables move into the group again, still the same
    omni.regroup("st")
    read = omni.read("st", columns=["RawData", "cg_len", "cg_score"]).to_pylist()
    again = {r["RawData"]["raw_data"]: r for r in read}
    assert again == rows


def _counter(version: str):
    # "cg_words" of its own: the UDF registry is per process and keyed by feature name, so a
    # new version of a shared test feature (t_len) would change what later tests compute
    @feature(outputs={"cg_words": "long"}, inputs=["RawData.raw_data"], name="cg_words", version=version)
    def cg_words(raw_data):
        return len(raw_data.split()) if version == "1" else 0

    return cg_words


def test_a_new_feature_version_keeps_the_grouped_old_values_under_its_alias(omni):
    omni.register_features("web", [_counter("1")])
    omni.backfill("web", ["cg_words"], isolation="inline", progress=False)
    omni.regroup("web")
    assert omni.state("web").physical_table(omni.state("web").read_parts("cg_words")[0].table).role == "column-group"
    old = {r["_ai_unique_id_"]: r["cg_words"] for r in omni.read("web", columns=["_ai_unique_id_", "cg_words"]).to_pylist()}
    assert all(v > 0 for v in old.values())

    omni.register_features("web", [_counter("2")])
    state = omni.state("web")
    alias = next(c.path for c in state.columns if c.path.startswith("cg_words_v"))
    got = {r["_ai_unique_id_"]: r[alias] for r in omni.read("web", columns=["_ai_unique_id_", alias]).to_pylist()}
    assert got == old


# ---- real engines: the Iceberg view of a grouped family ----------------------------------------
def _aggregates_analysed(spark, sql: str) -> int:
    """How many per-key ``any_value`` aggregates Spark's analysed plan of ``sql`` holds."""
    return spark.session.sql(sql)._jdf.queryExecution().analyzed().toString().count("any_value(")


def _with_and_without_pruning(spark, sql: str) -> tuple[list[tuple], list[tuple]]:
    out = []
    for on in ("true", "false"):
        spark.session.conf.set("spark.omni.viewPruning.enabled", on)
        try:
            out.append([tuple(r) for r in spark.session.sql(sql).collect()])
        finally:
            spark.session.conf.unset("spark.omni.viewPruning.enabled")
    return out[0], out[1]


def test_spark_and_trino_read_the_group_once_and_both_parts_after_a_new_batch(spark, trino, tmp_path):
    import re

    from omni_iceberg.demo.wide import feature_name, wide_features

    width, name = 12, "cg_wide"
    omni = Omni(config=spark.config)
    omni.create_table(name)

    def add(batch: str, n: int) -> None:
        src = tmp_path / f"{batch}.jsonl"
        src.write_text("".join(json.dumps({"raw_data": f"<p>{batch} " + "x" * (i % 23) + f" row {i}</p>"}) + "\n"
                               for i in range(n)))
        omni.submit(name, [str(src)], batch=batch, progress=False)
        omni.backfill(name, [feature_name(i) for i in range(width)], isolation="inline", progress=False)

    omni.register_features(name, wide_features(width))
    add("a", 40)
    cols = ", ".join(feature_name(i) for i in range(width))
    full = f"SELECT _ai_unique_id_, _ai_append_name_, {cols} FROM omni.aidata.{name} ORDER BY _ai_unique_id_"
    before = [tuple(r) for r in spark.sql(full)]
    assert len(before) == 40 and all(v is not None for r in before for v in r)

    omni.regroup(name)
    state = omni.state(name)
    group = next(t for t in state.tables if t.role == "column-group")
    scanned = set(re.findall(r"BatchScan omni\.aidata\.(\w+)", spark.session.sql("EXPLAIN " + full).collect()[0][0]))
    assert scanned == {f"{name}__base", group.identifier.split(".")[1]}
    assert [tuple(r) for r in spark.sql(full)] == before
    assert [tuple(r) for r in trino.query(full)] == before
    two = (f"SELECT count(*), sum({feature_name(3)}) FROM omni.aidata.{name} "
           f"WHERE {feature_name(7)} IS NOT NULL AND _ai_append_name_ = 'a'")
    # omni's Spark extension cuts the view to the two columns, and the group's per-key
    # aggregate to those two of its 12 (spark_udfs/java/omni/spark/ViewPruning.java)
    assert _aggregates_analysed(spark, two) == 2
    assert _with_and_without_pruning(spark, two) == ([(40, sum(r[2 + 3] for r in before))],) * 2

    add("b", 25)  # read from the group (batch a) and the feature tables (batch b)
    want = [tuple(d.values()) for d in omni.query(full.replace("omni.aidata.", "")).to_pylist()]
    assert len(want) == 65 and all(v is not None for r in want for v in r)
    assert [tuple(r) for r in spark.sql(full)] == want
    assert [tuple(r) for r in trino.query(full, session={"query_max_stage_count": "400"})] == want
    both = two.replace(" AND _ai_append_name_ = 'a'", "")  # two parts a column: the group and its table
    assert _aggregates_analysed(spark, both) == 4
    assert _with_and_without_pruning(spark, both) == ([(65, sum(r[2 + 3] for r in want))],) * 2
    # the Spark backfill engine's input reader folds the parts too
    from spark_udfs.arrow_stage import input_column
    from spark_udfs.engine import read_unit

    state = omni.state(name)
    assert len(state.read_parts(feature_name(0))) == 2
    for batch in ("a", "b"):
        frame = read_unit(spark.session, spark.config.catalog_name, state, [feature_name(0), feature_name(5)], batch)
        got = sorted((r[0], r[input_column(0)], r[input_column(1)]) for r in frame.collect())
        ref = omni.read(name, columns=["_ai_unique_id_", feature_name(0), feature_name(5)], batches=[batch])
        assert got == sorted(tuple(r.values()) for r in ref.to_pylist())
        assert all(v is not None for r in got for v in r)


def test_a_regroup_loses_cleanly_to_a_concurrent_backfill(omni, tmp_path, monkeypatch):
    """A backfill that commits to a member table while the regroup runs wins; the regroup's
    commit fails, its group files are deleted, and nothing a reader sees changed."""
    from catalog_ext.errors import CommitConflictError

    omni.submit("web", [str(_jsonl(tmp_path, "c", 4))], batch="c", progress=False)
    omni.submit("ref", [str(_jsonl(tmp_path, "c", 4))], batch="c", progress=False)
    omni.backfill("ref", ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    real = omni.store.commit
    raced = []

    def commit(ns, table, updates, **kw):
        if kw.get("operation") == "regroup" and not raced:  # a writer gets in first
            raced.append(omni.backfill("web", ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False))
        return real(ns, table, updates, **kw)

    monkeypatch.setattr(omni.store, "commit", commit)
    version = omni.state("web").version
    with pytest.raises(CommitConflictError):
        omni.regroup("web")
    monkeypatch.undo()
    state = omni.state("web")
    assert raced and state.version == version + 1 and state.operation == "backfill"
    assert not any(t.role == "column-group" or t.emptied for t in state.tables)
    left = [".".join(t) for t in omni.catalog.list_tables("aidata") if "__g_" in t[-1]]
    # its new group table stays, empty (the files written to it are gone): the next regroup of
    # these tables reuses it, and a concurrent one may have adopted it already
    assert len(left) == 1 and not omni.catalog.load_table(left[0]).scan().to_arrow().num_rows
    _same_as_ref(omni)
    omni.regroup("web")  # and run again, it merges everything, batch c included
    assert [t.identifier for t in omni.state("web").tables if t.role == "column-group"] == left
    _same_as_ref(omni)


def test_a_regroup_that_loses_to_the_same_regroup_leaves_the_winners_group_table(omni, monkeypatch):
    """Two regroups of the same tables plan the same group table: the second adopts the one the
    first created. The first then loses its commit - and must not drop the table the winner
    pinned (it did: the version pinned a dropped table, and every read of it failed)."""
    from catalog_ext.errors import CommitConflictError

    real = omni.store.commit
    raced = []

    def commit(ns, table, updates, **kw):
        if kw.get("operation") == "regroup" and not raced:  # the same regroup gets in first
            monkeypatch.setattr(omni.store, "commit", real)
            raced.append(Omni(config=omni.config).regroup("web"))
        return real(ns, table, updates, **kw)

    monkeypatch.setattr(omni.store, "commit", commit)
    with pytest.raises(CommitConflictError):
        omni.regroup("web")
    state = omni.state("web")
    assert raced and state.operation == "regroup"
    groups = [t for t in state.tables if t.role == "column-group"]
    assert groups and all(omni.catalog.table_exists(t.identifier) for t in groups)
    _same_as_ref(omni)


def test_a_split_moves_a_column_out_of_its_group_in_one_commit(omni, tmp_path):
    from governance.column_groups import ColumnGroupError, plan_split

    omni.regroup("web")
    grouped = omni.state("web")
    group = grouped.read_parts("t_len")[0].table
    with pytest.raises(ColumnGroupError, match="in no column group"):
        plan_split(omni.store, "web", ["t_lang"])  # a string feature that stayed alone
    with pytest.raises(ColumnGroupError, match="did you mean 't_len'"):
        plan_split(omni.store, "web", ["t_lem"])
    assert "out of " + group in omni.split_columns("web", ["t_len"], dry_run=True)["describe"]
    assert omni.state("web").version == grouped.version

    report = omni.split_columns("web", ["t_len"])
    state = omni.state("web")
    split = report["plan"]["table_key"]
    assert state.version == grouped.version + 1 and state.operation == "split"
    assert [p.table for p in state.read_parts("t_len")] == [split]
    assert [p.table for p in state.read_parts("t_digits")] == [group]
    _same_as_ref(omni)
    assert f"__{split}" in render_view_sql(state, "spark")
    assert f"__{split}" not in render_view_sql(omni.state("web", as_of=grouped.version), "spark")
    assert _rows(omni, "web", as_of=grouped.version) == _rows(omni, "ref")  # the old layout still reads

    # a new batch's values go to the feature table, and the next regroup takes them to the split table
    for name in ("web", "ref"):
        omni.submit(name, [str(_jsonl(tmp_path, "c", 5))], batch="c", progress=False)
        omni.backfill(name, ["t_len", "t_digits", "t_lang"], isolation="inline", progress=False)
    _same_as_ref(omni)
    moves = {m["group_key"]: m["members"] for m in omni.regroup("web")["plan"]["moves"]}
    state = omni.state("web")
    assert moves == {split: [state.feature("t_len").table_key], group: [state.feature("t_digits").table_key]}
    assert [p.table for p in state.read_parts("t_len")] == [split]
    _same_as_ref(omni)
    assert omni.verify_index("web").ok

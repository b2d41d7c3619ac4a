"""Feature definitions: decorator forms, versions, registration checks, storage as Iceberg."""

import json

import pytest

from omni_iceberg.api import Omni
from omni_iceberg.features import FeatureDefinition, OutputColumn, feature
from omni_iceberg.features.loading import load_definition
from omni_iceberg.features.spec import FeatureDefinitionError
from tests import feature_udfs as U


@pytest.fixture
def omni(tmp_path):
    o = Omni(home=tmp_path / "home")
    o.create_table("web")
    src = tmp_path / "docs.jsonl"
    src.write_text("".join(json.dumps({"raw_data": f"<p>doc {i} the math of sqrt {i}</p>"}) + "\n" for i in range(30)))
    o.submit("web", [str(src)], batch="cc")
    return o


def test_decorated_function_runs_directly_and_infers_inputs():
    @feature(outputs={"n": "long"})
    def count_a(parsed_text, letter="a"):
        return parsed_text.count(letter)

    assert count_a("banana") == 3
    d = count_a.definition
    assert d.inputs == ("parsed_text",) and d.outputs == (OutputColumn(name="n", type="long"),)
    assert count_a.udf_spec.config_params == ("letter",)


def test_versions_are_deterministic_and_follow_code_and_params():
    d = U.t_len.definition
    assert d.version.startswith("h") and d.version == U.t_len.definition.with_version(U.t_len.udf_spec.code_hash).version
    changed = d.model_copy(update={"version": "", "params": {"x": 1}}).with_version(U.t_len.udf_spec.code_hash)
    assert changed.version != d.version
    explicit = FeatureDefinition(name="q", inputs=("a",), outputs=(OutputColumn(name="q"),), udf="q", version="2")
    assert explicit.with_version("whatever").version == "2"
    assert FeatureDefinition.model_validate_json(d.canonical_json()) == d


def test_yaml_style_definition_with_paper_field_names():
    d = load_definition({"name": "math_recall", "inputColumns": ["ProcessedData.parsed_text"],
                         "outputColumns": [{"name": "math_recall", "type": "double", "analysis_type": "score"}],
                         "defaultFeatExpression": "math_recall", "computeEngine": "cpu"})
    assert d.inputs == ("ProcessedData.parsed_text",) and d.udf == "math_recall" and d.engine == "cpu"
    with pytest.raises(FeatureDefinitionError, match=r"f.yaml: field 'outputs.0.type'"):
        load_definition({"name": "x", "inputs": ["a"], "outputs": {"x": "varchar"}, "udf": "x"}, "f.yaml")


def test_register_stores_definitions_as_an_iceberg_table(omni):
    regs = omni.register_features("web", [U.t_parse, U.t_len])
    assert all(r.changed for r in regs)
    again = omni.register_features("web", [U.t_parse, U.t_len])
    assert not any(r.changed for r in again)  # same code, same version: a no-op
    rows = omni.catalog.load_table("omni_sys.features").scan().to_arrow().to_pylist()
    assert sorted(r["name"] for r in rows) == ["t_len", "t_parse"]
    assert json.loads(rows[0]["definition"])["name"] == rows[0]["name"]
    feats = {f["name"]: f for f in omni.features("web")}
    assert feats["t_len"]["inputs"] == ["ProcessedData.parsed_text"]
    assert feats["t_parse"]["outputs"] == ["ProcessedData.parsed_text"]


def test_unknown_input_is_refused_with_a_suggestion(omni):
    @feature(outputs={"z": "long"}, inputs=["ProcessedData.parsed_txt"], name="z_feat")
    def z_feat(parsed_txt):
        return 1

    with pytest.raises(FeatureDefinitionError, match=r"unknown input column 'ProcessedData.parsed_txt'.*did you mean 'ProcessedData.parsed_text'"):
        omni.register_features("web", [z_feat])


def test_cycle_is_refused_and_named(omni):
    @feature(outputs={"cy_a": "long"}, inputs=["cy_b"], name="cy_a")
    def cy_a(cy_b):
        return 1

    @feature(outputs={"cy_b": "long"}, inputs=["cy_a"], name="cy_b")
    def cy_b(cy_a):
        return 1

    with pytest.raises(FeatureDefinitionError, match=r"cycle: cy_[ab] -> cy_[ab] -> cy_[ab]"):
        omni.register_features("web", [cy_a, cy_b])
    assert omni.features("web") == []


def test_output_collisions_are_refused(omni):
    omni.register_features("web", [U.t_len])

    @feature(outputs={"t_len": "long"}, inputs=["RawData.raw_data"], name="other_len")
    def other_len(raw_data):
        return 0

    with pytest.raises(FeatureDefinitionError, match="collides with the column produced by t_len@"):
        omni.register_features("web", [other_len])

    @feature(outputs={"RawData.url": "string"}, inputs=["RawData.raw_data"], name="raw_writer")
    def raw_writer(raw_data):
        return ""

    with pytest.raises(FeatureDefinitionError, match="ingested raw data"):
        omni.register_features("web", [raw_writer])


def test_version_reused_with_different_code_is_refused(omni):
    @feature(outputs={"vv": "long"}, inputs=["RawData.raw_data"], name="vv", version="1")
    def vv(raw_data):
        return 1

    omni.register_features("web", [vv])

    @feature(outputs={"vv": "long"}, inputs=["RawData.raw_data"], name="vv", version="1")
    def vv2(raw_data):
        return 2

    with pytest.raises(FeatureDefinitionError, match="vv@1 is already registered .* different code"):
        omni.register_features("web", [vv2])


def test_new_version_gets_new_column_and_old_stays_queryable(omni):
    @feature(outputs={"ver": "long"}, inputs=["RawData.raw_data"], name="ver", version="1")
    def ver1(raw_data):
        return 1

    omni.register_features("web", [ver1])
    omni.backfill("web", ["ver"], isolation="inline")

    @feature(outputs={"ver": "long"}, inputs=["RawData.raw_data"], name="ver", version="2")
    def ver2(raw_data):
        return 2

    omni.register_features("web", [ver2])
    state = omni.state("web")
    assert state.physical_columns_of("ver")[0].table != state.physical_columns_of("ver_v1")[0].table
    assert set(omni.read("web", columns=["ver", "ver_v1"]).column("ver_v1").to_pylist()) == {1}
    assert set(omni.read("web", columns=["ver"]).column("ver").to_pylist()) == {None}  # v2 not computed yet
    omni.backfill("web", ["ver"], isolation="inline")
    data = omni.read("web", columns=["ver", "ver_v1"])
    assert set(data.column("ver").to_pylist()) == {2} and set(data.column("ver_v1").to_pylist()) == {1}


def test_wrong_type_or_length_fails_at_the_first_batch_naming_the_feature(omni):
    omni.register_features("web", [U.t_badtype, U.t_badlen])
    before = omni.state("web").version
    with pytest.raises(FeatureDefinitionError, match=r"t_badtype@\S+: output 't_badtype' must be double"):
        omni.backfill("web", ["t_badtype"], isolation="inline")
    with pytest.raises(FeatureDefinitionError, match=r"t_badlen@\S+: returned 1 values for 't_badlen' on a batch of 30"):
        omni.backfill("web", ["t_badlen"], isolation="inline")
    assert omni.state("web").version == before


def _ver(version, value):
    @feature(outputs={"ver": "long"}, inputs=["RawData.raw_data"], name="ver", version=version)
    def ver(raw_data):
        return value

    return ver


def _race_before_commit(monkeypatch, store, rival):
    """Run ``rival()`` (another writer, its own catalog connection) between this writer's
    load and its first commit attempt: the commit then loses the race deterministically."""
    real_commit = store.commit

    def commit_after_rival(*args, **kwargs):
        monkeypatch.setattr(store, "commit", real_commit)
        rival()
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", commit_after_rival)


def test_registration_that_loses_a_race_aliases_the_version_that_won(omni, monkeypatch):
    other = Omni(config=omni.config)  # a second writer on the same catalog
    _race_before_commit(monkeypatch, omni.store, lambda: other.register_features("web", [_ver("1", 1)]))
    regs = omni.register_features("web", [_ver("2", 2)])
    state = omni.state("web")
    assert regs[0].changed and regs[0].logical_version == state.version
    v1, v2 = state.feature("ver", "1"), state.feature("ver", "2")
    assert v2.current and not v1.current
    # built from the winner's state: the lost-race commit keeps v1 queryable as ver_v1
    assert state.physical_columns_of("ver_v1")[0].table == v1.table_key
    assert state.physical_columns_of("ver")[0].table == v2.table_key
    assert v2.registered_version == state.version and v1.registered_version == state.version - 1
    history = omni.catalog.load_table("omni_sys.features").scan().to_arrow().to_pylist()
    assert sorted(r["version"] for r in history) == ["1", "2"]


def test_concurrent_registration_of_the_same_version_commits_once(omni, monkeypatch):
    other = Omni(config=omni.config)
    _race_before_commit(monkeypatch, omni.store, lambda: other.register_features("web", [_ver("1", 1)]))
    before = omni.state("web").version
    regs = omni.register_features("web", [_ver("1", 1)])
    state = omni.state("web")
    assert not regs[0].changed and state.version == before + 1  # the rival's commit only
    assert [f.key for f in state.features] == ["ver@1"]
    assert not state.has_column("ver_v1")


RIVAL = r"""
import sys
from omni_iceberg.api import Omni
from omni_iceberg.features import feature

@feature(outputs={"ver": "long"}, inputs=["RawData.raw_data"], name="ver", version="1")
def ver(raw_data):
    return 1

Omni(home=sys.argv[1]).register_features("web", [ver])
"""


def test_registration_that_loses_to_different_code_under_the_same_version_fails_cleanly(omni, monkeypatch):
    import subprocess
    import sys
    from pathlib import Path

    def rival():  # a real second process: its UDF registry has its own code for "ver"
        subprocess.run([sys.executable, "-c", RIVAL, str(omni.config.home)], check=True,
                       cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True)

    _race_before_commit(monkeypatch, omni.store, rival)

    @feature(outputs={"ver": "long"}, inputs=["RawData.raw_data"], name="ver", version="1")
    def ver(raw_data):
        return len(raw_data)  # different code, same explicit version

    with pytest.raises(FeatureDefinitionError, match="ver@1 is already registered .* different code"):
        omni.register_features("web", [ver])
    assert [f.key for f in omni.state("web").features] == ["ver@1"]


def test_a_valid_filter_registers_and_a_bad_one_is_refused_naming_the_feature(omni):
    @feature(outputs={"short_len": "long"}, inputs=["ProcessedData.parsed_text"], name="short_len",
             filter="length(parsed_text) < 6000 AND parsed_text LIKE '%math%'")
    def short_len(parsed_text):
        return len(parsed_text)

    @feature(outputs={"bad_len": "long"}, inputs=["ProcessedData.parsed_text"], name="bad_len",
             filter="parsed_txt IS NOT NULL")
    def bad_len(parsed_text):
        return len(parsed_text)

    assert [r.changed for r in omni.register_features("web", [U.t_parse, short_len])] == [True, True]
    version = omni.state("web").version
    with pytest.raises(FeatureDefinitionError,
                       match=r"feature 'bad_len': invalid filter .*unknown column 'parsed_txt'.*inputs \(parsed_text\)"):
        omni.register_features("web", [bad_len])
    assert omni.state("web").version == version  # nothing committed


PY_FEATURE = '''
from omni_iceberg.features import feature


@feature(outputs={"moved_words": "long"}, inputs=["RawData.raw_data"])
def moved_words(raw_data):
    return len(raw_data.split())
'''


def test_an_unchanged_feature_re_registered_from_a_moved_file_is_the_same_feature(omni, tmp_path):
    first = tmp_path / "a" / "words.py"
    first.parent.mkdir()
    first.write_text(PY_FEATURE)
    [reg] = omni.register_features("web", [str(first)])
    assert reg.changed
    moved = tmp_path / "b" / "words.py"
    moved.parent.mkdir()
    first.rename(moved)
    [again] = omni.register_features("web", [str(moved)])
    # same code and parameters: the same version, no new table; only where the code lives is recorded
    assert not again.changed and again.definition.version == reg.definition.version
    binding = omni.state("web").feature("moved_words")
    assert json.loads(binding.definition)["source"]["path"] == str(moved.resolve())
    assert len([b for b in omni.state("web").features if b.name == "moved_words"]) == 1
    version = omni.state("web").version
    assert omni.register_features("web", [str(moved)])[0].changed is False
    assert omni.state("web").version == version  # now truly a no-op: nothing to record


MODULE_LEVEL_FEATURE = '''
import re

import {helper}
from omni_iceberg.features import feature

WORD = re.compile(r"\\w+")


@feature(outputs={{"{name}": "long"}}, inputs=["RawData.raw_data"]{version})
def {name}(raw_data):
    return len(WORD.findall(raw_data.replace({helper}.DROP, "")))
'''


def test_a_version_covers_the_module_and_the_local_modules_it_imports(omni, tmp_path, monkeypatch):
    """Issue #36: an edit outside the function body (a module-level regex, a local helper
    module) is new code, so a derived version changes with it; built-ins keep theirs."""
    from omni_iceberg.features import get_udf
    from omni_iceberg.features.library import text_length
    from omni_iceberg.features.loading import load_definitions_file
    from omni_iceberg.features.udf import code_hash

    monkeypatch.syspath_prepend(str(tmp_path))
    helper = tmp_path / "issue36_helper.py"
    helper.write_text('DROP = "#"\n')
    path = tmp_path / "words36.py"
    path.write_text(MODULE_LEVEL_FEATURE.format(helper="issue36_helper", name="n_words36", version=""))
    [first] = load_definitions_file(str(path))
    path.write_text(path.read_text().replace(r'r"\w+"', r'r"\w"'))  # the module-level regex only
    [regex] = load_definitions_file(str(path))
    assert regex.version != first.version
    helper.write_text('DROP = "!"\n')  # a local module the file imports
    [helped] = load_definitions_file(str(path))
    assert len({first.version, regex.version, helped.version}) == 3
    [again] = load_definitions_file(str(path))  # nothing changed: the same version
    assert again.version == helped.version
    # built-ins are versioned by their own code and declared dependencies, not their module's other code
    assert get_udf("text_length").code_hash == code_hash(text_length)


def test_an_explicit_version_stays_and_new_code_under_it_is_refused(omni, tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "issue36_helper2.py").write_text('DROP = "#"\n')
    path = tmp_path / "pinned36.py"
    path.write_text(MODULE_LEVEL_FEATURE.format(helper="issue36_helper2", name="pinned36", version=', version="7"'))
    [reg] = omni.register_features("web", [str(path)])
    assert reg.changed and reg.definition.version == "7"
    path.write_text(path.read_text().replace(r'r"\w+"', r'r"\w"'))
    with pytest.raises(FeatureDefinitionError, match="pinned36@7 is already registered .* with different code"):
        omni.register_features("web", [str(path)])


@feature(outputs={"TrainableData.text": "string"}, inputs=["RawData.raw_data"], name="to_trainable36")
def to_trainable36(raw_data):
    return raw_data.upper()


@feature(outputs={"trainable_len36": "long"}, inputs=["TrainableData.text"], name="trainable_len36")
def trainable_len36(text):
    return len(text)


def test_a_missing_custom_producer_names_the_column_and_the_features_that_could_produce_it(omni):
    from omni_iceberg.backfill.planner import MissingProducerError

    omni.register_features("web", [trainable_len36])
    before = omni.state("web").version
    with pytest.raises(MissingProducerError,
                       match=r"input TrainableData.text of trainable_len36 has no producer.*to_trainable36"):
        omni.plan("web", ["trainable_len36"])
    with pytest.raises(MissingProducerError):
        omni.backfill("web", ["trainable_len36"], isolation="inline", progress=False)
    assert omni.state("web").version == before
    omni.register_features("web", [to_trainable36])  # registered: planned as any ancestor
    plan = omni.plan("web", ["trainable_len36"])
    assert [s.features for s in plan.stages] == [["to_trainable36"], ["trainable_len36"]]

"""The CLI and the Python API offer the same verbs, and every option is documented."""

import argparse
import inspect

from omni_iceberg.api import Omni
from omni_iceberg.cli.parser import build_parser, subcommands

#: CLI command -> Omni method, only where the names differ ("table drop" -> drop_table ...)
RENAMED = {
    ("table", "create"): "create_table",
    ("table", "list"): "list_tables",
    ("table", "drop"): "drop_table",
    ("sql",): "query",
    ("feature", "register"): "register_features",
    ("feature", "list"): "features",
    ("feature", "udfs"): "udfs",
    ("trino-config",): "trino_config",
    ("corpus",): "fetch_corpora",
    ("index", "verify"): "verify_index",
    ("index", "rebuild"): "rebuild_index",
    ("index", "seal"): "seal_index",
    ("flush-log",): "flush_query_log",
    ("config",): "settings",
}


def _leaves():
    tree = subcommands(build_parser())
    return {path: p for path, p in tree.items() if not any(other[:len(path)] == path and other != path
                                                           for other in tree)}


def test_every_cli_command_has_an_api_method():
    missing = []
    for path in _leaves():
        method = RENAMED.get(path, path[-1].replace("-", "_"))
        if not callable(getattr(Omni, method, None)):
            missing.append(f"omni {' '.join(path)} -> Omni.{method}")
    assert not missing, f"CLI commands without an API method: {missing}"
    assert set(RENAMED) <= set(_leaves()), "the mapping names a command that no longer exists"


def test_api_verbs_have_docstrings():
    public = [n for n, f in inspect.getmembers(Omni, callable) if not n.startswith("_")]
    assert "compact" in public and "drop_table" in public and "tag" in public
    assert [n for n in public if not inspect.getdoc(getattr(Omni, n))] == []


def test_every_option_has_help_and_every_command_an_example():
    parser = build_parser()
    undocumented, no_example = [], []
    for path, p in [((), parser)] + list(subcommands(parser).items()):
        for action in p._actions:
            if not action.help or action.help == argparse.SUPPRESS:
                undocumented.append(f"omni {' '.join(path)}: {action.option_strings or action.dest}")
        if not (p.epilog and "omni " in p.epilog and p.epilog.startswith("example")):
            no_example.append(f"omni {' '.join(path)}")
    assert not undocumented, f"actions without help text: {undocumented}"
    assert not no_example, f"commands without an example: {no_example}"


def test_help_renders_for_every_command(capsys):
    import pytest

    for path in [()] + list(subcommands(build_parser())):
        with pytest.raises(SystemExit) as done:
            build_parser().parse_args([*path, "--help"])
        assert done.value.code == 0
        out = capsys.readouterr().out
        assert "usage: omni" in out and "example" in out

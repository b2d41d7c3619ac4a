"""Read a source-code tree: one record per code file, tagged with its language."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from omni_iceberg.ingest.sources.files import ReadPolicy, source_files
from omni_iceberg.ingest.sources.html_dir import document_limit, read_text_file, relative_name
from omni_iceberg.ingest.sources.records import RecordProblem, SourceItem, SourceRecord

#: extension -> language name stored in the ``language`` field
LANGUAGES: dict[str, str] = {
    ".py": "python",
    ".c": "c",
    ".h": "c",
    ".go": "go",
    ".rs": "rust",
    ".java": "java",
    ".js": "javascript",
    ".ts": "typescript",
    ".cpp": "cpp",
    ".hpp": "cpp",
    ".sh": "shell",
}

#: Larger files are generated code or vendored data, not something a model should
#: learn from; skipping them also keeps one record's memory bounded.
MAX_CODE_BYTES = 1024 * 1024


def language_of(path: str | Path) -> str | None:
    """Language name for a file by its extension, e.g. ``language_of("a/b.rs") == "rust"``."""
    return LANGUAGES.get(Path(path).suffix.lower())


class CodeTreeReader:
    """Folder of source code -> records ``{raw_data, path, language}``.

    Files with an extension in :data:`LANGUAGES` are read, recursively and sorted.
    A file over :data:`MAX_CODE_BYTES`, a binary file (NUL bytes) or one that is not
    UTF-8 becomes a :class:`RecordProblem`. A single code file is also accepted.
    """

    kind = "code_tree"
    suffixes = tuple(LANGUAGES)

    def matches(self, path: str) -> bool:
        """A folder (any folder: this is the fallback kind) or a file with a code extension."""
        p = Path(path)
        return p.is_dir() or language_of(p) is not None

    def read(self, path: str, policy: ReadPolicy | None = None) -> Iterator[SourceItem]:
        """One :class:`SourceRecord` per code file."""
        policy = policy or ReadPolicy()
        limit, setting = document_limit(MAX_CODE_BYTES, policy)
        for file in source_files(path, self.suffixes, policy):
            if isinstance(file, RecordProblem):
                yield file
                continue
            text = read_text_file(file, limit, setting)
            if isinstance(text, RecordProblem):
                yield text
                continue
            nul = text.find("\x00")
            if nul >= 0:
                # NUL is valid UTF-8 but never appears in source text: it is a binary file
                yield RecordProblem(
                    str(file.path), f"binary file (NUL character at position {nul})", field="raw_data"
                )
                continue
            fields = {
                "raw_data": text,
                "path": relative_name(file.path, file.root),
                "language": language_of(file.path),
            }
            # code is no markup: it reaches parsed_text byte for byte
            yield SourceRecord(fields=fields, source_file=str(file.path), content_type=f"text/x-{fields['language']}")

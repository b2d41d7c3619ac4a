"""Small JSONL inputs shared by the governance tests: ``n`` distinct short HTML pages per batch tag."""

from __future__ import annotations

import json
from pathlib import Path


def pages_jsonl(tmp_path: Path, tag: str, n: int) -> Path:
    """``tmp_path/<tag>.jsonl`` with ``n`` pages whose text (and so id) depends on the tag and the index."""
    path = tmp_path / f"{tag}.jsonl"
    path.write_text("".join(json.dumps({"raw_data": f"<p>the {tag} page {i} has 12{i} words</p>"}) + "\n"
                            for i in range(n)))
    return path


#: the columns the governance-on-Spark tests compare before and after a rewrite
ROW_COLUMNS = ["_ai_unique_id_", "_ai_append_name_", "t_len", "RawData.raw_data"]


def small_family(omni, tmp_path: Path, name: str, batches: int = 3, records: int = 10) -> None:
    """Logical table ``name``: ``batches`` small batches and the ``t_len`` feature backfilled."""
    from tests import feature_udfs as U

    omni.create_table(name)
    omni.register_features(name, [U.t_parse, U.t_len])
    for b in range(batches):
        omni.submit(name, [str(pages_jsonl(tmp_path, f"{name}{b}", records))], batch=f"b{b}", progress=False)
    omni.backfill(name, ["t_len"], isolation="inline", progress=False)


def sorted_rows(omni, name: str, as_of: int | None = None, columns: list[str] = ROW_COLUMNS) -> list[dict]:
    """The logical rows of ``name`` (``columns``), sorted by id: equal before and after a re-layout."""
    return sorted(omni.read(name, columns=columns, as_of=as_of).to_pylist(), key=lambda r: r["_ai_unique_id_"])

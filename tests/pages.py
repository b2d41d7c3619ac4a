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

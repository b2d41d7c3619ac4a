"""Row identity: ``_ai_unique_id_`` is md5 of the raw content (dedup for free) or a uuid."""

from __future__ import annotations

import hashlib
import uuid


def content_id(raw: str) -> str:
    """md5 hex of the UTF-8 raw content: equal content, equal id, in any batch or table."""
    return hashlib.md5(raw.encode("utf-8"), usedforsecurity=False).hexdigest()


def random_id() -> str:
    """For tables where identical content must stay separate rows (e.g. SFT samples)."""
    return uuid.uuid4().hex

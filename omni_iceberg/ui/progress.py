"""Progress bars on a terminal (stderr), nothing when output is piped or disabled."""

from __future__ import annotations

import sys
from typing import Any


def progress_bar(enabled: bool | None, label: str, unit: str, total: int | None = None) -> Any:
    """A tqdm bar, or None. ``enabled=None`` means: only when stderr is a terminal."""
    if not (sys.stderr.isatty() if enabled is None else enabled):
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=label, unit=unit, file=sys.stderr, dynamic_ncols=True)

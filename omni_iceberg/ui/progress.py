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


def silence_library_progress() -> None:
    """Turn off the progress bars libraries draw themselves (model downloads, tokenizers).

    Environment variables, because models load in worker processes that inherit them,
    and because the libraries read them at import time. ``TQDM_DISABLE`` reaches every
    tqdm bar, including those of libraries that do not expose a switch.
    """
    import os

    for var in ("TQDM_DISABLE", "HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS"):
        os.environ[var] = "1"
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    import sys

    if "transformers" in sys.modules:  # already imported: its switch, not the environment, decides
        sys.modules["transformers"].utils.logging.disable_progress_bar()
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].utils.disable_progress_bars()

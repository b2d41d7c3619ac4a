"""Perplexity under SmolLM2-135M-Instruct: how surprising the text is to a small LM.

``perplexity = exp(mean negative log-likelihood per token)`` over the first
:data:`MAX_TOKENS` tokens, each token predicted from the ones before it. The sequence
starts with ``<|endoftext|>`` (the document separator the model was trained with), so
the first real token is scored too and a one-token text still has a value. Fluent
English scores tens; random characters score hundreds or more.

The model runs in float32 on the GPU when there is one and on the CPU otherwise, so
the same text gets the same score on either engine (up to float rounding).
"""

from __future__ import annotations

import math

from omni_iceberg.features.library import models
from omni_iceberg.features.library.text import PARSED_TEXT, builtin, doubles, texts_of

MAX_TOKENS = 128
_DOC_START = "<|endoftext|>"


@builtin({"perplexity": "double"}, name="perplexity", inputs=[PARSED_TEXT], engine="gpu", batch_size=64,
         model_size_mb=540,  # 135M parameters, de-quantised to float32
         depends=[models.CAUSAL_LM_MODEL, MAX_TOKENS, _DOC_START])
class Perplexity:
    """exp(mean token NLL) of the first 128 tokens under SmolLM2-135M; lower is more fluent."""

    def __init__(self) -> None:
        self.lm = None

    def setup(self) -> None:
        self.lm = models.smollm2()
        tokenizer = self.lm[0]
        self.start_id = tokenizer.convert_tokens_to_ids(_DOC_START)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.start_id
        self.micro_batch = 32 if self.lm[2] == "cuda" else 8

    def __call__(self, parsed_text):
        if self.lm is None:  # called directly, without the engine's setup()
            self.setup()
        texts = texts_of(parsed_text)
        keep = [i for i, t in enumerate(texts) if t and t.strip()]
        out: list[float | None] = [None] * len(texts)
        if keep:
            for i, value in zip(keep, self.score([texts[i] for i in keep])):
                out[i] = value
        return doubles(out)

    def score(self, texts: list[str]) -> list[float]:
        """Perplexity of each text (non-empty), in input order."""
        import torch

        tokenizer, model, dev = self.lm
        ids = [[self.start_id] + row[:MAX_TOKENS]
               for row in tokenizer(texts, add_special_tokens=False)["input_ids"]]
        result = [math.nan] * len(texts)
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths pad less
        with torch.inference_mode():
            for start in range(0, len(order), self.micro_batch):
                idx = order[start:start + self.micro_batch]
                width = max(len(ids[i]) for i in idx)
                batch = torch.full((len(idx), width), self.pad_id, dtype=torch.long)
                mask = torch.zeros((len(idx), width), dtype=torch.long)
                for row, i in enumerate(idx):  # right padding: positions stay 0..n-1
                    batch[row, :len(ids[i])] = torch.tensor(ids[i])
                    mask[row, :len(ids[i])] = 1
                batch, mask = batch.to(dev), mask.to(dev)
                logits = model(input_ids=batch, attention_mask=mask).logits[:, :-1].float()
                targets, target_mask = batch[:, 1:], mask[:, 1:].float()
                nll = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
                mean_nll = (nll * target_mask).sum(dim=1) / target_mask.sum(dim=1)
                for i, v in zip(idx, mean_nll.tolist()):
                    result[i] = math.exp(v)
        return result

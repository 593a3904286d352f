"""Embedder: texts or token ids -> sentence vectors with a BERT-family encoder, batched by length.

Owns tokenization for embeddings (truncation to the model's max_seq_length, as
sentence-transformers does), length-sorted batching under a token budget, and token counts for
usage. Synchronous; callers run it in a worker thread. The maths is modelc.models.bert.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc import architectures
from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.kernels.select import KernelSet
from modelc.models.bert import BertModel
from modelc.source import as_source


def supports_embeddings(source: Any) -> bool:
    """True when `source` (model source) is an encoder this module embeds with."""
    return architectures.family(getattr(source, "architecture", None)) in architectures.EMBEDDING


@dataclass(frozen=True, slots=True)
class Embeddings:
    vectors: np.ndarray  # (S, C) float32
    token_counts: tuple[int, ...]  # tokens per input (special tokens included), for usage

    @property
    def num_tokens(self) -> int:
        return sum(self.token_counts)


class Embedder:
    """`Embedder(source).embed(texts) -> (S, C)`; `embed_token_ids(lists) -> (S, C)`; `run(texts) -> Embeddings`."""

    def __init__(
        self,
        source: Any,
        *,
        max_batch_size: int = 32,
        max_batch_tokens: int = 8192,
        kernels: KernelSet | None = None,
    ) -> None:
        source = as_source(source)
        if not supports_embeddings(source):
            raise UnsupportedError(f"architecture {getattr(source, 'architecture', '?')!r} is not an embedding encoder")
        self.model = BertModel(source, kernels)
        self.name = self.model.name
        self.dim = self.model.cfg.hidden_size
        self.max_seq_length = self.model.cfg.max_seq_length
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self._tok = truncating_tokenizer(source.tokenizer_json, self.max_seq_length)

    @property
    def tokenizer(self) -> Any:
        """The `tokenizers.Tokenizer` used for texts (special tokens on, truncating to max_seq_length), or None."""
        return self._tok

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        """Token ids per text, with the tokenizer's special tokens, truncated to max_seq_length."""
        if self._tok is None:
            raise UnsupportedError(f"model {self.name} has no tokenizer; send token ids")
        for t in texts:
            if not isinstance(t, str):
                raise InvalidRequestError("embedding inputs must be strings or lists of token ids", param="input")
        return [e.ids for e in self._tok.encode_batch(list(texts))]

    def run(self, texts: Sequence[str]) -> Embeddings:
        ids = self.encode(texts)
        return Embeddings(self.embed_token_ids(ids), tuple(len(i) for i in ids))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(S, C) float32 sentence vectors (pooled and normalized as the model is configured)."""
        return self.run(texts).vectors

    def embed_token_ids(self, token_id_lists: Sequence[Sequence[int]], *, normalize: bool | None = None) -> np.ndarray:
        """(S, C) vectors for token id lists used as given (no special tokens added); normalize overrides the
        model's configured L2 normalization (False: the pooled vectors as they are)."""
        lists = [np.asarray(ids, dtype=np.int64).reshape(-1) for ids in token_id_lists]
        for i, ids in enumerate(lists):
            if ids.size == 0:
                raise InvalidRequestError(f"input {i} is empty", param="input")
            if ids.size > self.max_seq_length:
                raise InvalidRequestError(
                    f"input {i} has {ids.size} tokens; the model takes at most {self.max_seq_length}", param="input"
                )
        out = np.empty((len(lists), self.dim), np.float32)  # (S, C)
        for batch in self._batches([len(x) for x in lists]):
            T = max(len(lists[i]) for i in batch)
            ids = np.full((len(batch), T), self.model.cfg.pad_token_id, np.int64)  # (S, T)
            mask = np.zeros((len(batch), T), np.int64)
            for row, i in enumerate(batch):
                ids[row, : len(lists[i])] = lists[i]
                mask[row, : len(lists[i])] = 1
            out[batch] = self.model.embed(ids, mask, normalize=normalize)
        return out

    def _batches(self, lengths: list[int]) -> list[list[int]]:
        """Indices grouped into padded batches of similar length (see plan_batches)."""
        return encoder_batches(self.model.cfg, lengths, self.max_batch_size, self.max_batch_tokens)


def encoder_batches(cfg: Any, lengths: list[int], max_batch_size: int, max_batch_tokens: int) -> list[list[int]]:
    """plan_batches with the per-token and attention costs of a BERT-family encoder (cfg: its config)."""
    C, F, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    return plan_batches(
        lengths,
        max_batch_size=max_batch_size,
        max_batch_tokens=max_batch_tokens,
        token_flops=2 * L * (4 * C * C + 2 * C * F),
        attention_flops=4 * L * C,
    )


BATCH_OVERHEAD_TOKENS = 4
"""A forward's fixed cost (Python, kernel launches, small-GEMM inefficiency) in tokens' worth of work."""


def plan_batches(
    lengths: list[int], *, max_batch_size: int, max_batch_tokens: int, token_flops: int, attention_flops: int
) -> list[list[int]]:
    """Split inputs into padded batches minimizing estimated work.

    NOTE: sorted longest-first, a batch is a run [i, j) padded to lengths[i]; its cost is
    (j - i) * T * (token_flops + attention_flops * T) plus a fixed per-batch overhead. A DP over
    run ends picks the cheapest split under the size and token limits, so one long input no
    longer pads a whole batch of short ones (what a plain fixed-size split does).
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    L = [max(1, lengths[i]) for i in order]
    n = len(L)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j - 1, max(-1, j - 1 - max_batch_size), -1):
            size, T = j - i, L[i]
            if size > 1 and size * T > max_batch_tokens:
                break
            cost = best[i] + size * T * (token_flops + attention_flops * T) + BATCH_OVERHEAD_TOKENS * token_flops
            if cost < best[j]:
                best[j], cut[j] = cost, i
    batches: list[list[int]] = []
    j = n
    while j > 0:
        batches.append(order[cut[j] : j])
        j = cut[j]
    return batches[::-1]


def truncating_tokenizer(tokenizer_json: str | None, max_len: int) -> Any:
    """A `tokenizers.Tokenizer` without padding, truncating longest-first to max_len (None without JSON)."""
    if not tokenizer_json:
        return None
    import tokenizers

    tok = tokenizers.Tokenizer.from_str(tokenizer_json)
    tok.no_padding()
    tok.enable_truncation(max_length=max_len, strategy="longest_first")
    return tok

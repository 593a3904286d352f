"""Reranker: (query, documents) -> relevance scores with a cross-encoder, batched by length.

Owns pair tokenization (the model's tokenizer lays out [CLS] q [SEP] d [SEP] / <s> q </s></s> d </s>
with segment ids; a pair beyond max_seq_length is a 400, or cut longest-first when asked, as
transformers does), length-sorted
batching (embedder.encoder_batches) and token counts for usage. Synchronous; callers run it in a worker
thread. The maths is modelc.models.cross_encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.engine.embedder import encoder_batches, truncating_tokenizer
from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.kernels.select import KernelSet
from modelc.models.cross_encoder import CrossEncoderModel, is_cross_encoder, relevance
from modelc.source import as_source


@dataclass(frozen=True, slots=True)
class Ranking:
    logits: np.ndarray  # (S, num_labels) float32, document order
    scores: np.ndarray  # (S,) float64 relevance in [0, 1]
    token_counts: tuple[int, ...]  # tokens per (query, document) pair, special tokens included

    @property
    def num_tokens(self) -> int:
        return sum(self.token_counts)


class Reranker:
    """`Reranker(source).rank(query, documents) -> Ranking`."""

    def __init__(
        self,
        source: Any,
        *,
        max_batch_size: int = 32,
        max_batch_tokens: int = 8192,
        kernels: KernelSet | None = None,
        encoder: Any = None,
    ) -> None:
        """`encoder`: the BertModel an Embedder already built from this source (shared, not built twice)."""
        source = as_source(source)
        if not is_cross_encoder(source):
            raise UnsupportedError(f"model {getattr(source, 'name', '?')} is not a cross-encoder (reranker)")
        if not source.tokenizer_json:
            raise UnsupportedError(f"model {getattr(source, 'name', '?')} has no tokenizer")
        self.model = CrossEncoderModel(source, kernels, encoder)
        self.max_seq_length = self.model.cfg.max_seq_length
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self._tok = truncating_tokenizer(source.tokenizer_json, self.max_seq_length)

    def encode_pairs(self, query: str, documents: Sequence[str]) -> list[Any]:
        return self._tok.encode_batch([(query, d) for d in documents])

    def cut_documents(self, documents: Sequence[str], max_tokens: int) -> list[str]:
        """Each document cut after its first `max_tokens` tokens (at that token's end in the text)."""
        encs = self._tok.encode_batch(list(documents), add_special_tokens=False)
        return [
            d if len(e.ids) <= max_tokens else d[: e.offsets[max_tokens - 1][1]]
            for d, e in zip(documents, encs, strict=True)
        ]

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,
        max_tokens_per_doc: int | None = None,
        max_total_tokens: int | None = None,
    ) -> Ranking:
        """Scores of (query, document) pairs. A pair longer than max_seq_length is a 400 unless
        `truncate`; then it is cut longest-first (transformers' default for pairs). `max_tokens_per_doc`
        first cuts each document to that many tokens (Cohere's parameter); pairs holding more than
        `max_total_tokens` in all are a 400 before the model runs."""
        if max_tokens_per_doc is not None:
            documents = self.cut_documents(documents, max_tokens_per_doc)
        encs = self.encode_pairs(query, documents)
        total = sum(len(e.ids) for e in encs)
        if max_total_tokens is not None and total > max_total_tokens:
            raise InvalidRequestError(
                f"the query and documents hold {total} tokens, over this server's limit of {max_total_tokens} "
                "input tokens per request (--max-request-tokens); send fewer or shorter documents",
                param="documents",
            )
        for i, e in enumerate(encs):
            if not e.ids:
                raise InvalidRequestError(f"document {i} tokenizes to nothing", param="documents")
            if e.overflowing and not truncate:
                raise InvalidRequestError(
                    f"the query and documents[{i}] together exceed this model's context length of "
                    f"{self.max_seq_length} tokens (send truncate: true to cut them, longest first)",
                    param=f"documents[{i}]",
                )
        logits = np.empty((len(encs), self.model.num_labels), np.float32)
        cfg = self.model.cfg
        for batch in encoder_batches(cfg, [len(e.ids) for e in encs], self.max_batch_size, self.max_batch_tokens):
            T = max(len(encs[i].ids) for i in batch)
            ids = np.full((len(batch), T), cfg.pad_token_id, np.int64)  # (S, T)
            types = np.zeros((len(batch), T), np.int64)
            mask = np.zeros((len(batch), T), np.int64)
            for row, i in enumerate(batch):
                n = len(encs[i].ids)
                ids[row, :n] = encs[i].ids
                types[row, :n] = encs[i].type_ids
                mask[row, :n] = 1
            logits[batch] = self.model.scores(ids, mask, types)
        return Ranking(logits, relevance(logits), tuple(len(e.ids) for e in encs))

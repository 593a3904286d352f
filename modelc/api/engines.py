"""Engine-like adapters so one server serves every kind of model through the same routes:
EncoderEngine (BERT-family embeddings: /v1/embeddings, /embeddings, /tokenize; cross-encoders
/v1/rerank and /tokenize instead) and InferEngine
(MLP/ONNX: /infer). Both are server.served.ServedModel; generation routes answer 400 for them
(`serves` has no "generate").

The heavy work runs in a worker thread (anyio.to_thread), one request at a time per model.
"""

from __future__ import annotations

import functools
from typing import Any

import anyio
import numpy as np

from modelc.errors import UnsupportedError
from modelc.source import as_source
from modelc.tokenizer.tokenizer import encode_ids


class EncoderTokenizer:
    """The Tokenizer subset the routes use (server.served.ServedTokenizer), over the embedder's
    `tokenizers` object. encode() does not truncate (so an input beyond the context is seen: a 400);
    encode_truncated() cuts with the tokenizer's own truncation, which keeps the closing special
    tokens ([SEP], </s>). A token's bytes are its vocabulary spelling (encoders generate no text)."""

    def __init__(self, tok: Any) -> None:
        import tokenizers

        self._cut = tok  # the embedder's truncating tokenizer (max_length = the model's max_seq_length)
        self._tok = tokenizers.Tokenizer.from_str(tok.to_str())
        self._tok.no_truncation()
        self.max_length = (tok.truncation or {}).get("max_length")
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self.bos_id: int | None = None
        self._token_bytes: list[bytes] | None = None

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        return encode_ids(self._tok, text, add_special)

    def encode_truncated(self, text: str, limit: int, add_special: bool = True) -> list[int]:
        if limit != self.max_length:
            return self.encode(text, add_special)[:limit]
        return list(self._cut.encode_batch([text], add_special_tokens=add_special)[0].ids)

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def token_bytes(self, token_id: int) -> bytes:
        table = self.all_token_bytes()
        return table[token_id] if 0 <= token_id < len(table) else b""

    def all_token_bytes(self) -> list[bytes]:
        if self._token_bytes is None:
            self._token_bytes = [(self._tok.id_to_token(i) or "").encode() for i in range(self.vocab_size)]
        return self._token_bytes


class _NoLora:
    """The serving contract's engine settings and LoRA side for kinds that have neither: no scheduler or
    KV cache to configure, and no adapters (loading one is a 400, not a missing attribute)."""

    config = None
    name: str
    architecture: str

    @property
    def adapters(self) -> list[str]:
        return []

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any:
        raise UnsupportedError(f"model {self.name!r} ({self.architecture}) takes no LoRA adapters")

    async def unload_adapter(self, name: str) -> None:
        raise UnsupportedError(f"model {self.name!r} ({self.architecture}) takes no LoRA adapters")

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        if scales:
            raise UnsupportedError(f"model {self.name!r} ({self.architecture}) takes no LoRA adapters")

    def adapter_table(self) -> list[tuple[int, str, str, float]]:
        return []

    async def slots(self) -> list[Any] | None:
        return None  # no sequence scheduler: nothing runs in slots


class EncoderEngine(_NoLora):
    def __init__(self, source: Any) -> None:
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.engine.embedder import Embedder

        self.source = source
        self._embedder_source = as_source(source)
        self._embedder = Embedder(self._embedder_source)
        self.name = self._embedder_source.name or self._embedder.name
        self.architecture = self._embedder_source.architecture or "bert"
        self.context_length = self._embedder.max_seq_length  # inputs beyond it: a 400, or cut with `truncate`
        tok = self._embedder.tokenizer  # the truncating tokenizer the embedder itself uses (None without one)
        self.tokenizer = EncoderTokenizer(tok) if tok is not None else None
        self.chat_template = None
        self._limiter = anyio.CapacityLimiter(1)
        self._num_running = 0
        self._reranker = None  # cross-encoders (...ForSequenceClassification) also score pairs: /v1/rerank
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.models.cross_encoder import is_cross_encoder

        if is_cross_encoder(self._embedder_source):
            # lazy: numba kernels load (and compile) only when this path runs
            from modelc.engine.reranker import Reranker

            self._reranker = Reranker(self._embedder_source, encoder=self._embedder.model)

    @property
    def serves(self) -> frozenset[str]:
        # A cross-encoder scores pairs: its pooled hidden state is no embedding (as TEI refuses /embed
        # for a reranker), so /v1/embeddings answers it with a 400 naming /v1/rerank.
        return frozenset({"rerank"}) if self._reranker is not None else frozenset({"embed"})

    async def rerank(self, query: str, documents: list[str], **options: Any) -> Any:
        """modelc.engine.reranker.Ranking of `documents` for `query` (in document order); `options` are
        Reranker.rank's (truncate, max_tokens_per_doc, max_total_tokens)."""
        self._num_running += 1
        try:
            rank = functools.partial(self._reranker.rank, **options)
            return await anyio.to_thread.run_sync(rank, query, documents, limiter=self._limiter)
        finally:
            self._num_running -= 1

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray:
        self._num_running += 1
        try:
            run = functools.partial(self._embedder.embed_token_ids, normalize=None if normalize else False)
            return await anyio.to_thread.run_sync(run, token_id_lists, limiter=self._limiter)
        finally:
            self._num_running -= 1

    def stats(self) -> dict[str, int]:
        return {"running": self._num_running}

    def warmup(self) -> None:
        """One 2-token embedding, so the encoder kernels are compiled (or loaded) before /health says ok."""
        self._embedder.embed_token_ids([[0, 0]])


class InferEngine(_NoLora):
    serves: frozenset[str] = frozenset({"infer"})
    context_length = None  # numeric input: no sequence

    def __init__(self, source: Any) -> None:
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.engine.infer import Inferencer

        self.source = source
        self._inferencer = Inferencer(source)
        self.name = self._inferencer.name  # the source's name, else its architecture's
        self.architecture = self._inferencer.architecture
        self.tokenizer = None
        self.chat_template = None
        self._limiter = anyio.CapacityLimiter(1)
        self._num_running = 0

    async def infer(self, payload: dict[str, Any]) -> dict[str, Any]:
        self._num_running += 1
        try:
            return await anyio.to_thread.run_sync(self._inferencer.infer, payload, limiter=self._limiter)
        finally:
            self._num_running -= 1

    def stats(self) -> dict[str, int]:
        return {"running": self._num_running}

    def warmup(self) -> None:
        """Run the model on each input's zeros (ones for a mask) three times, its last free dimension (the
        batch of an MLP, the sequence of a BERT graph) set to 1, 2 and 64 and any other free one to 1: the
        matmul plan's decode, small-batch and BLAS paths. So the kernels are compiled (or loaded) before
        /health says ok."""
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.onnx.feeds import to_array

        inf = self._inferencer
        specs = inf.program.inputs if inf.program is not None else [inf.spec]
        try:
            for n in (1, 2, 64):
                feeds = {}
                for spec in specs:
                    shape = list(spec.get("shape") or [])
                    free = [i for i, d in enumerate(shape) if not (isinstance(d, int) and d > 0)]
                    dims = [n if free and i == free[-1] else d if i not in free else 1 for i, d in enumerate(shape)]
                    fill = np.ones if "mask" in str(spec.get("name", "")) else np.zeros
                    feeds[spec["name"]] = to_array(fill(dims).tolist(), spec)
                if inf.program is not None:
                    inf.program.run(feeds)
                else:
                    inf.mlp.forward(feeds[inf.spec["name"]])
        except Exception:  # noqa: BLE001 - a graph that rejects these inputs (e.g. values used as shapes)
            return  # it still serves: its first request compiles what this did not reach, as before


def adapter_for(source: Any) -> Any | None:
    """An adapter engine for encoder / MLP / ONNX sources, None for causal LMs (AsyncEngine)."""
    # lazy: numba kernels load (and compile) only when this path runs
    from modelc.engine.embedder import supports_embeddings
    from modelc.engine.infer import supports_infer

    if supports_infer(source):
        return InferEngine(source)
    if supports_embeddings(source):
        return EncoderEngine(source)
    return None

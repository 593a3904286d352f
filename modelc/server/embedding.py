"""Embeddings for /v1/embeddings, /embeddings and /api/embed: texts -> token ids (in a worker thread,
each input within the context length: 400 beyond it, or cut to it with `truncate`) -> engine.embed in
batches of bounded size (a disconnect or shutdown stops between batches) -> optional `dimensions`
truncation (renormalized) -> float lists or base64 (little-endian float32)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError
from modelc.server.context import context_length, encode_bounded
from modelc.server.handling import offload
from modelc.server.prompt import encode_prompt
from modelc.server.run import RequestRun
from modelc.server.served import EMBED, ServedModel, check_serves, embedding

MAX_INPUTS = 2048  # inputs per request (OpenAI's limit)
BATCH_TOKENS = 2048  # tokens per engine call (or one input, when longer)


def too_many_tokens(param: str, num_tokens: int, limit: int, *, more: bool = False) -> InvalidRequestError:
    """A 400 for a request over the server's per-request token budget (ServerConfig.max_request_tokens)."""
    return InvalidRequestError(
        f"'{param}' holds {'at least ' if more else ''}{num_tokens} tokens, over this server's limit of {limit} "
        "input tokens per request (--max-request-tokens); send fewer or shorter inputs",
        param=param,
    )


def embed_inputs(
    engine: ServedModel,
    inputs: list[str | list[int]] | list[Any],  # also llama.cpp's mixed lists of ids and texts
    param: str,
    *,
    truncate: bool = False,
    max_tokens: int | None = None,
) -> tuple[list[list[int]], int]:
    """The token ids of every input and their total, at most `max_tokens` in all (a 400 as soon as the
    inputs tokenized so far pass it). Synchronous: run it in a worker thread."""
    if len(inputs) > MAX_INPUTS:
        raise InvalidRequestError(f"'{param}' may hold at most {MAX_INPUTS} inputs, got {len(inputs)}", param=param)
    check_serves(engine, EMBED, param)
    tok = engine.tokenizer
    if tok is None and any(_has_text(x) for x in inputs):
        raise InvalidRequestError(f"model {engine.name!r} has no tokenizer: send token ids", param=param)
    limit = context_length(engine)
    vocab = tok.vocab_size if tok is not None else None
    ids: list[list[int]] = []
    total = 0
    for x in inputs:
        if isinstance(x, list) and _has_text(x):
            x = _mixed_ids(tok, x, limit, param, truncate)
        ids.append(encode_prompt(tok, x, vocab, param, limit=limit, truncate=truncate))
        total += len(ids[-1])
        if max_tokens is not None and total > max_tokens:
            raise too_many_tokens(param, total, max_tokens, more=len(ids) < len(inputs))
    if any(len(t) == 0 for t in ids):
        raise InvalidRequestError(f"'{param}' must not contain empty inputs", param=param)
    return ids, total


def _has_text(x: Any) -> bool:
    return isinstance(x, str) or (isinstance(x, list) and any(isinstance(p, str) for p in x))


def _mixed_ids(tok: Any, pieces: list[Any], limit: int | None, param: str, truncate: bool) -> list[int]:
    """llama.cpp's mixed input (token ids and texts, /embedding's `content`): each text tokenized, the first
    piece's with the model's special tokens, as llama-server's tokenize_mixed does."""
    ids: list[int] = []
    for i, p in enumerate(pieces):
        if isinstance(p, str):
            ids += encode_bounded(tok, p, add_special=i == 0, limit=limit, param=param, truncate=truncate)
        else:
            ids.append(p)
    return ids


async def embed_batched(engine: ServedModel, ids: list[list[int]], normalize: bool = True) -> np.ndarray:
    """(S, C) vectors, computed BATCH_TOKENS at a time: each engine call is bounded, and cancelling
    the request (client gone, server stopping) ends it at the next batch boundary. normalize=False: the pooled
    vectors before their L2 normalization (only then is the engine asked for it)."""

    async def call(batch: list[list[int]]) -> np.ndarray:
        out = await (engine.embed(batch) if normalize else engine.embed(batch, normalize=False))
        return np.asarray(out, dtype=np.float32)

    budget = max(BATCH_TOKENS, max(len(t) for t in ids))
    parts: list[np.ndarray] = []
    batch: list[list[int]] = []
    num = 0
    for t in ids:
        if batch and num + len(t) > budget:
            parts.append(await call(batch))
            batch, num = [], 0
        batch.append(t)
        num += len(t)
    parts.append(await call(batch))
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)  # (S, C)


async def run_embeddings(
    state: Any,
    engine: ServedModel,
    inputs: list[str | list[int]] | list[Any],
    param: str,
    *,
    truncate: bool = False,
    normalize: bool = True,
) -> tuple[np.ndarray, int]:
    """What every embeddings route does: ids off the loop, a concurrency slot, batched engine calls,
    the request's record and metrics. (S, C) unit vectors and the number of input tokens."""
    budget = state.config.max_request_tokens
    ids, num_tokens = await offload(lambda: embed_inputs(engine, inputs, param, truncate=truncate, max_tokens=budget))
    run = RequestRun(state, engine)
    async with run.slot():
        vectors = await embed_batched(embedding(engine, param), ids, normalize)  # (S, C)
    run.count_prompt(num_tokens)
    return vectors, num_tokens


def truncate(vectors: np.ndarray, dimensions: int | None) -> np.ndarray:
    """Matryoshka-style: keep the first `dimensions` features and L2-normalize again."""
    v = np.asarray(vectors, dtype=np.float32)  # (S, C)
    if dimensions is None:
        return v
    if dimensions > v.shape[1]:
        raise InvalidRequestError(
            f"'dimensions' must be <= {v.shape[1]} for this model, got {dimensions}", param="dimensions"
        )
    v = v[:, :dimensions]  # (S, dimensions)
    norms = np.linalg.norm(v, axis=1, keepdims=True)  # (S, 1)
    return (v / np.maximum(norms, 1e-12)).astype(np.float32)


def encode_vector(v: np.ndarray, encoding_format: str) -> list[float] | str:
    if encoding_format == "base64":
        return base64.b64encode(np.ascontiguousarray(v, dtype="<f4").tobytes()).decode()
    return [float(x) for x in v]

"""Embeddings for /v1/embeddings and /embeddings: token ids -> engine.embed -> optional `dimensions`
truncation (renormalized) -> float lists or base64 (little-endian float32)."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError
from modelc.server.prompt import encode_prompt


def embed_inputs(engine: Any, inputs: list[str | list[int]], param: str) -> tuple[np.ndarray, int]:
    """(S, C) float32 unit vectors and the number of input tokens."""
    if getattr(engine, "embed", None) is None:
        raise InvalidRequestError(f"model {engine.name!r} does not produce embeddings", param=param)
    tok = engine.tokenizer
    if tok is None and any(isinstance(x, str) for x in inputs):
        raise InvalidRequestError(f"model {engine.name!r} has no tokenizer: send token ids", param=param)
    ids = [encode_prompt(tok, x, getattr(tok, "vocab_size", None), param) for x in inputs]
    if any(len(t) == 0 for t in ids):
        raise InvalidRequestError(f"'{param}' must not contain empty inputs", param=param)
    return ids, sum(len(t) for t in ids)


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

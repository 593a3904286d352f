"""Which task head a packed BERT-family checkpoint carries, read from its metadata alone: pure, no numba
(modelc.capabilities reads it for model cards; models/cross_encoder.py builds the head)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CLASSIFIER_SUFFIX = "ForSequenceClassification"  # Hugging Face's cross-encoder (reranker) heads


def is_cross_encoder(architecture: str, metadata: Mapping[str, Any] | None) -> bool:
    """A BERT-family model packed from a `...ForSequenceClassification` checkpoint: it scores (query,
    document) pairs (rerank); its pooled hidden state is not an embedding."""
    hf = (metadata or {}).get("hf_config") or {}
    archs = (hf.get("architectures") or []) if isinstance(hf, Mapping) else []
    return architecture == "bert" and any(str(a).endswith(CLASSIFIER_SUFFIX) for a in archs)

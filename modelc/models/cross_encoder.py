"""Cross-encoders: a BERT-family encoder with Hugging Face's sequence-classification head, scoring
(query, document) pairs for reranking.

Heads (read from the packed HF tensors, the original config in metadata["hf_config"]):
- BertForSequenceClassification: logits = classifier(tanh(bert.pooler.dense(h[CLS])));
- (XLM-)RobertaForSequenceClassification: logits = classifier.out_proj(tanh(classifier.dense(h[<s>]))).
Dropout is off at inference, so these are the whole heads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import FormatError
from modelc.ir import SCALE_SUFFIX, TensorData
from modelc.kernels.select import KernelSet
from modelc.models import heads
from modelc.models.bert import BertModel, _weight_prefix, hf_names
from modelc.models.mlp import Linear


def is_cross_encoder(source: Any) -> bool:
    """A BERT-family source packed from a `...ForSequenceClassification` checkpoint."""
    return heads.is_cross_encoder(str(getattr(source, "architecture", "")), getattr(source, "metadata", None))


def _linear(ks: KernelSet, tensors: dict[str, TensorData], base: str) -> Linear:
    w = tensors.get(f"{base}.weight")
    if w is None:
        raise FormatError(f"cross-encoder has no tensor {base}.weight")
    b = tensors.get(f"{base}.bias")
    bias = None if b is None else ks.dequantize(b).reshape(-1).astype(np.float32)
    return Linear(ks, [w], [tensors.get(f"{base}.weight{SCALE_SUFFIX}")], bias)


class CrossEncoderModel:
    """`scores(ids, mask, type_ids) -> (S, num_labels)` logits for right-padded pair batches."""

    def __init__(self, source: Any, kernels: KernelSet | None = None, encoder: BertModel | None = None) -> None:
        self.encoder = encoder or BertModel(source, kernels)  # `encoder`: one already built from this source
        self.cfg = self.encoder.cfg
        ks = self.encoder.ks
        tensors = hf_names(source.tensors)
        if "classifier.out_proj.weight" in tensors:  # RoBERTa / XLM-R
            self.dense = _linear(ks, tensors, "classifier.dense")
            self.out = _linear(ks, tensors, "classifier.out_proj")
        elif "classifier.weight" in tensors:  # BERT: the pooler, then one linear layer
            self.dense = _linear(ks, tensors, f"{_weight_prefix(tensors)}pooler.dense")
            self.out = _linear(ks, tensors, "classifier")
        else:
            raise FormatError(f"model {getattr(source, 'name', '?')} has no sequence-classification head")
        self.num_labels = self.out.out_features

    def scores(self, ids: np.ndarray, mask: np.ndarray, type_ids: np.ndarray | None = None) -> np.ndarray:
        hidden = self.encoder.encode(ids, mask, type_ids)  # (S, T, C)
        first = np.ascontiguousarray(hidden[:, 0, :])  # (S, C) the [CLS] / <s> token
        return self.out(np.tanh(self.dense(first)))  # (S, num_labels)


def relevance(logits: np.ndarray) -> np.ndarray:
    """(S, L) logits -> (S,) scores in [0, 1]: sigmoid of the one logit (sentence-transformers'
    CrossEncoder default), or the softmax probability of the last label when there are several."""
    logits = np.asarray(logits, dtype=np.float64)
    if logits.shape[1] == 1:
        return 1.0 / (1.0 + np.exp(-logits[:, 0]))
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z[:, -1] / z.sum(axis=1)

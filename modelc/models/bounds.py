"""check_counts: a model config's counts (layers, heads, widths, vocab, context) checked against the
tensors actually present, before any model code allocates from them.

A hostile or broken config (num_hidden_layers = 1e9 beside two layers of weights) must fail here with
one clear FormatError instead of allocating per-layer lists, scratch buffers or KV pages sized by
the claim. The rule is generic, not per architecture: a model has at most as many layers as it has
distinct layer indices in its tensor names, and no width the forward pass allocates per token
(hidden, FFN, heads x head_dim, vocab) exceeds the element count of its largest tensor. A norm epsilon
must be a finite number >= 0 (a NaN one makes every output NaN). No numpy here.
"""

from __future__ import annotations

import math
import re
from typing import Any

from modelc.errors import FormatError

# "model.layers.3.", "blk.3.", "transformer.h.3.", "encoder.layer.3."
_LAYER = re.compile(r"(?:^|\.)(?:layers|blk|h|layer)\.([0-9]+)\.")
MAX_CONTEXT = 1 << 24  # tokens: more than any model trains on; beyond it only allocations grow
MAX_COUNT = 1 << 31
NORM_EPS_KEYS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps")


def _int(cfg: dict[str, Any], key: str, default: Any = None) -> int | None:
    v = cfg.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v != int(v) or not 0 < v < MAX_COUNT:
        raise FormatError(f"model config: {key} = {v!r} is not a positive integer below 2^31")
    return int(v)


def _numel(shape: Any) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def check_counts(source: Any) -> None:
    """Raise FormatError when the source's config claims more than its tensors hold."""
    cfg = dict(getattr(source, "config", None) or {})
    tensors = getattr(source, "tensors", None) or {}
    shapes = [tuple(t.shape) for t in tensors.values()]
    largest = max((_numel(s) for s in shapes), default=0)
    layers_present = {int(m[1]) for name in tensors for m in [_LAYER.search(name)] if m}
    L = _int(cfg, "num_hidden_layers")
    if L is not None and L > len(layers_present):
        raise FormatError(
            f"model config says num_hidden_layers = {L} but the weights hold {len(layers_present)} layers"
        )
    C = _int(cfg, "hidden_size")
    H = _int(cfg, "num_attention_heads")
    K = _int(cfg, "num_key_value_heads")
    D = _int(cfg, "head_dim")
    if D is None and C is not None and H is not None:
        D = max(1, C // H)
    widths = {
        "hidden_size": C,
        "intermediate_size": _int(cfg, "intermediate_size"),
        "vocab_size": _int(cfg, "vocab_size"),
        "num_attention_heads x head_dim": H * D if H and D else None,
        "num_key_value_heads x head_dim": K * D if K and D else None,
    }
    for what, n in widths.items():
        if n is not None and n > largest:
            raise FormatError(f"model config: {what} = {n} is larger than the largest tensor ({largest} elements)")
    ctx = _int(cfg, "max_position_embeddings")
    if ctx is not None and ctx > MAX_CONTEXT:
        raise FormatError(f"model config: max_position_embeddings = {ctx} exceeds the supported {MAX_CONTEXT}")
    for key in NORM_EPS_KEYS:  # every family's norms divide by sqrt(variance + eps)
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not 0 <= v < math.inf):
            raise FormatError(f"model config: {key} = {v!r} is not a finite number >= 0")

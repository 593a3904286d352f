"""The dense reference forward: logits of a llama or gpt2 model ("hf" naming, float weights) in plain numpy.

Every position recomputed from scratch in float64: no paging, no KV cache, no kernels, no
quantized activations. The ground truth the engine (models/llama.py, models/gpt2.py on the
numba kernels) must match in tests; `merged` overrides weights by name (the LoRA tests).
"""

from __future__ import annotations

import math

import numpy as np

from modelc.ir import Model


def _f(model: Model, name: str) -> np.ndarray:
    return model.tensors[name].array().astype(np.float64)


def _attend(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Dense causal attention. q (T, H, D), k/v (T, K, D) -> (T, H, D), float64."""
    T, H, D = q.shape
    rep = H // k.shape[1]
    k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # (T, H, D)
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(D)
    s = np.where(np.tril(np.ones((T, T), bool))[None], s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v)


def _rope_neox(x: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """HF rotate_half rope on x (T, H, D) at positions 0..T-1."""
    ang = np.arange(x.shape[0])[:, None] * inv_freq[None]  # (T, D/2)
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None]
    half = x.shape[-1] // 2
    rot = np.concatenate([-x[..., half:], x[..., :half]], -1)
    return x * cos + rot * sin


def _llama_hidden(model: Model, ids: np.ndarray, lora: dict[str, np.ndarray] | None) -> np.ndarray:
    # lazy: numba kernels load (and compile) only when this path runs
    from modelc.kernels.elementwise.rope import rope_inv_freq

    c = model.config
    H, K, D = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps = c["rms_norm_eps"]
    R = int(D * float(c.get("partial_rotary_factor") or 1.0))  # rotary dims, HF style
    inv = rope_inv_freq(R, c["rope_theta"], c.get("rope_scaling"))

    def rope(x: np.ndarray) -> np.ndarray:
        return np.concatenate([_rope_neox(x[..., :R], inv), x[..., R:]], axis=-1)

    def w(name: str) -> np.ndarray:
        return (lora or {}).get(name, _f(model, name))

    def rms(x: np.ndarray, g: np.ndarray) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g

    def lin(x: np.ndarray, name: str) -> np.ndarray:
        y = x @ w(name + ".weight").T
        return y + _f(model, name + ".bias") if name + ".bias" in model.tensors else y

    x = _f(model, "model.embed_tokens.weight")[ids]
    T = len(ids)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, _f(model, p + "input_layernorm.weight"))
        q = rope(lin(h, p + "self_attn.q_proj").reshape(T, H, D))
        k = rope(lin(h, p + "self_attn.k_proj").reshape(T, K, D))
        v = lin(h, p + "self_attn.v_proj").reshape(T, K, D)
        x = x + lin(_attend(q, k, v).reshape(T, H * D), p + "self_attn.o_proj")
        h = rms(x, _f(model, p + "post_attention_layernorm.weight"))
        g, u = lin(h, p + "mlp.gate_proj"), lin(h, p + "mlp.up_proj")
        x = x + lin(g / (1 + np.exp(-g)) * u, p + "mlp.down_proj")
    return rms(x, _f(model, "model.norm.weight"))


def _gpt2_hidden(model: Model, ids: np.ndarray) -> np.ndarray:
    c = model.config
    H, eps = c["num_attention_heads"], c["layer_norm_eps"]
    C = c["hidden_size"]

    def ln(x: np.ndarray, name: str) -> np.ndarray:
        m, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - m) / np.sqrt(var + eps) * _f(model, name + ".weight") + _f(model, name + ".bias")

    def conv(x: np.ndarray, name: str) -> np.ndarray:
        return x @ _f(model, name + ".weight") + _f(model, name + ".bias")

    T = len(ids)
    x = _f(model, "transformer.wte.weight")[ids] + _f(model, "transformer.wpe.weight")[:T]
    for i in range(c["num_hidden_layers"]):
        p = f"transformer.h.{i}."
        qkv = conv(ln(x, p + "ln_1"), p + "attn.c_attn")
        q, k, v = (qkv[:, j * C : (j + 1) * C].reshape(T, H, C // H) for j in range(3))
        x = x + conv(_attend(q, k, v).reshape(T, C), p + "attn.c_proj")
        u = conv(ln(x, p + "ln_2"), p + "mlp.c_fc")
        u = 0.5 * u * (1 + np.tanh(math.sqrt(2 / math.pi) * (u + 0.044715 * u**3)))
        x = x + conv(u, p + "mlp.c_proj")
    return ln(x, "transformer.ln_f")


def reference_hidden(model: Model, token_ids, *, merged: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Final hidden states (T, C) float64 after the last norm; `merged` overrides weights by name (LoRA tests)."""
    ids = np.asarray(token_ids, np.int64)
    if model.architecture == "gpt2":
        return _gpt2_hidden(model, ids)
    return _llama_hidden(model, ids, merged)


def reference_logits(model: Model, token_ids, *, merged: dict[str, np.ndarray] | None = None) -> np.ndarray:
    """Logits (T, V) float64 of a tiny model ("hf" naming, float weights) at every position."""
    hid = reference_hidden(model, token_ids, merged=merged)
    if model.architecture == "gpt2":
        return hid @ _f(model, "transformer.wte.weight").T
    head = "lm_head.weight" if "lm_head.weight" in model.tensors else "model.embed_tokens.weight"
    return hid @ _f(model, head).T

"""Tiny random-weight models (IR Models, "hf" naming, F32) and a dense numpy reference forward.

For tests across the project: `make_tiny_llama()` / `make_tiny_gpt2()` build a model
in memory; `reference_logits(model, token_ids)` recomputes every position from scratch
with plain numpy (no paging, no kernels), the ground truth the engine must match.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from modelc.ir import Model, TensorData


def tiny_tokenizer_json(vocab_size: int = 96) -> str:
    """A word-level tokenizer.json for the tiny models: <unk>=0, <s>=1, </s>=2, then "w3".."w{V-1}"."""
    import json

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": True} for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))]  # fmt: skip
    return json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
    })  # fmt: skip


def with_tokenizer(model: Model) -> Model:
    """Give a tiny model the word-level tokenizer (BOS <s> = 1, EOS </s> = 2)."""
    model.tokenizer_json = tiny_tokenizer_json(model.config["vocab_size"])
    model.special_tokens.update({"bos_token_id": 1, "eos_token_ids": [2], "bos_token": "<s>", "eos_token": "</s>",
                                 "add_bos_token": True})  # fmt: skip
    return model


def _rand(rng: np.random.Generator, *shape: int, sigma: float = 0.1) -> TensorData:
    return TensorData.from_array((rng.standard_normal(shape) * sigma).astype(np.float32))


def make_tiny_llama(
    seed: int = 0, *, vocab_size: int = 96, hidden_size: int = 64, num_layers: int = 2, num_heads: int = 4,
    num_kv_heads: int = 2, intermediate_size: int = 128, qkv_bias: bool = False, tie: bool = False,
    rope_scaling: dict | None = None, architecture: str = "llama",
) -> Model:  # fmt: skip
    rng = np.random.default_rng(seed)
    C, F, D = hidden_size, intermediate_size, hidden_size // num_heads
    t: dict[str, TensorData] = {"model.embed_tokens.weight": _rand(rng, vocab_size, C, sigma=1.0)}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        t[p + "input_layernorm.weight"] = TensorData.from_array((1 + rng.standard_normal(C) * 0.1).astype(np.float32))
        t[p + "post_attention_layernorm.weight"] = TensorData.from_array(
            (1 + rng.standard_normal(C) * 0.1).astype(np.float32)
        )
        for name, rows in (("q", num_heads * D), ("k", num_kv_heads * D), ("v", num_kv_heads * D)):
            t[p + f"self_attn.{name}_proj.weight"] = _rand(rng, rows, C)
            if qkv_bias:
                t[p + f"self_attn.{name}_proj.bias"] = _rand(rng, rows)
        t[p + "self_attn.o_proj.weight"] = _rand(rng, C, num_heads * D)
        t[p + "mlp.gate_proj.weight"] = _rand(rng, F, C)
        t[p + "mlp.up_proj.weight"] = _rand(rng, F, C)
        t[p + "mlp.down_proj.weight"] = _rand(rng, C, F)
    t["model.norm.weight"] = TensorData.from_array((1 + rng.standard_normal(C) * 0.1).astype(np.float32))
    if not tie:
        t["lm_head.weight"] = _rand(rng, vocab_size, C)
    cfg: dict[str, Any] = {
        "vocab_size": vocab_size, "hidden_size": C, "intermediate_size": F, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads, "head_dim": D,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "rope_scaling": rope_scaling,
        "rope_neox": True, "tie_word_embeddings": tie, "attention_bias": qkv_bias, "hidden_act": "silu",
    }  # fmt: skip
    special = {"bos_token_id": 1, "eos_token_ids": [2], "add_bos_token": True}
    return Model("tiny-llama", architecture, t, cfg, special_tokens=special, source_format="test", naming="hf")


def make_tiny_gpt2(seed: int = 0, *, vocab_size: int = 96, hidden_size: int = 64, num_layers: int = 2,
                   num_heads: int = 4, max_positions: int = 128) -> Model:  # fmt: skip
    """HF GPT-2 layout: Conv1D weights stored (in, out)."""
    rng = np.random.default_rng(seed)
    C, F = hidden_size, 4 * hidden_size
    t: dict[str, TensorData] = {
        "transformer.wte.weight": _rand(rng, vocab_size, C, sigma=1.0),
        "transformer.wpe.weight": _rand(rng, max_positions, C, sigma=0.5),
    }
    for i in range(num_layers):
        p = f"transformer.h.{i}."
        for ln in ("ln_1", "ln_2"):
            t[p + ln + ".weight"] = TensorData.from_array((1 + rng.standard_normal(C) * 0.1).astype(np.float32))
            t[p + ln + ".bias"] = _rand(rng, C)
        for name, cin, cout in (
            ("attn.c_attn", C, 3 * C),
            ("attn.c_proj", C, C),
            ("mlp.c_fc", C, F),
            ("mlp.c_proj", F, C),
        ):
            t[p + name + ".weight"] = _rand(rng, cin, cout)
            t[p + name + ".bias"] = _rand(rng, cout)
    t["transformer.ln_f.weight"] = TensorData.from_array((1 + rng.standard_normal(C) * 0.1).astype(np.float32))
    t["transformer.ln_f.bias"] = _rand(rng, C)
    cfg = {"vocab_size": vocab_size, "hidden_size": C, "intermediate_size": F, "num_hidden_layers": num_layers,
           "num_attention_heads": num_heads, "max_position_embeddings": max_positions, "layer_norm_eps": 1e-5,
           "hidden_act": "gelu_new", "tie_word_embeddings": True}  # fmt: skip
    special = {"bos_token_id": 0, "eos_token_ids": [0], "add_bos_token": False}
    return Model("tiny-gpt2", "gpt2", t, cfg, special_tokens=special, source_format="test", naming="hf")


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
    from modelc.kernels.rope import rope_inv_freq

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

"""Tiny random-weight models (IR Models, "hf" naming, F32) for tests across the project.

`make_tiny_llama()` / `make_tiny_gpt2()` build a model in memory. The ground truth they are
checked against is the dense numpy reference forward in models/dense_reference.py
(`reference_logits`, `reference_hidden`, re-exported here for the tests that import them from here).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.ir import Model, TensorData
from modelc.models.dense_reference import reference_hidden, reference_logits  # noqa: F401  (re-exported)


def tiny_tokenizer_json(vocab_size: int = 96) -> str:
    """A word-level tokenizer.json for the tiny models: <unk>=0, <s>=1, </s>=2, then "w3".."w{V-1}"."""
    import json

    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, vocab_size)}}
    added = [
        {
            "id": i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for t, i in (("<unk>", 0), ("<s>", 1), ("</s>", 2))
    ]
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"},
            "post_processor": None,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"},
        }
    )


def with_tokenizer(model: Model) -> Model:
    """Give a tiny model the word-level tokenizer (BOS <s> = 1, EOS </s> = 2)."""
    model.tokenizer_json = tiny_tokenizer_json(model.config["vocab_size"])
    model.special_tokens.update(
        {"bos_token_id": 1, "eos_token_ids": [2], "bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}
    )
    return model


def _rand(rng: np.random.Generator, *shape: int, sigma: float = 0.1) -> TensorData:
    return TensorData.from_array((rng.standard_normal(shape) * sigma).astype(np.float32))


def make_tiny_llama(
    seed: int = 0,
    *,
    vocab_size: int = 96,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    qkv_bias: bool = False,
    tie: bool = False,
    rope_scaling: dict | None = None,
    architecture: str = "llama",
) -> Model:
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
        "vocab_size": vocab_size,
        "hidden_size": C,
        "intermediate_size": F,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "head_dim": D,
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": rope_scaling,
        "rope_neox": True,
        "tie_word_embeddings": tie,
        "attention_bias": qkv_bias,
        "hidden_act": "silu",
    }
    special = {"bos_token_id": 1, "eos_token_ids": [2], "add_bos_token": True}
    return Model("tiny-llama", architecture, t, cfg, special_tokens=special, source_format="test", naming="hf")


def make_tiny_gpt2(
    seed: int = 0,
    *,
    vocab_size: int = 96,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    max_positions: int = 128,
) -> Model:
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
    cfg = {
        "vocab_size": vocab_size,
        "hidden_size": C,
        "intermediate_size": F,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "max_position_embeddings": max_positions,
        "layer_norm_eps": 1e-5,
        "hidden_act": "gelu_new",
        "tie_word_embeddings": True,
    }
    special = {"bos_token_id": 0, "eos_token_ids": [0], "add_bos_token": False}
    return Model("tiny-gpt2", "gpt2", t, cfg, special_tokens=special, source_format="test", naming="hf")

"""LlamaLayer: one decoder block's weights, and how they are named (HF by norm layout, GGUF) and loaded."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelc.artifact.structure import LLAMA_NAMES
from modelc.errors import FormatError
from modelc.kernels.matmul.linear import Weight
from modelc.models.fused import Fused
from modelc.models.llama_args import LlamaArgs
from modelc.models.weights import WeightReader


@dataclass(slots=True)
class LlamaLayer:
    attn_norm: np.ndarray | None  # (C,) pre-attention norm (None: OLMo 2 has only post-norms)
    q: Weight  # (H*D, C)
    k: Weight  # (K*D, C)
    v: Weight
    o: Weight  # (C, H*D)
    q_bias: np.ndarray | None
    k_bias: np.ndarray | None
    v_bias: np.ndarray | None
    ffn_norm: np.ndarray | None  # (C,) pre-FFN norm
    gate: Weight | None  # (F, C); None in a mixture-of-experts layer
    up: Weight | None
    down: Weight | None  # (C, F)
    o_bias: np.ndarray | None = None  # (C,) HF llama attention_bias=True biases o_proj too
    gate_bias: np.ndarray | None = None  # (F,) HF llama mlp_bias=True
    up_bias: np.ndarray | None = None
    down_bias: np.ndarray | None = None  # (C,)
    q_norm: np.ndarray | None = None  # (D,) per head (Qwen3, Gemma 3) or (H*D,) full width (OLMo 2)
    k_norm: np.ndarray | None = None
    post_attn_norm: np.ndarray | None = None  # (C,) on the attention output before the residual add
    post_ffn_norm: np.ndarray | None = None  # (C,) on the FFN output before the residual add
    sinks: np.ndarray | None = None  # (H,) attention-sink logits (gpt-oss)
    moe: object | None = None  # a models.moe.MoeFFN instead of gate/up/down (Mixtral, Qwen3-MoE)
    qkv: tuple[Fused, ...] = ()  # runs of q, k, v fused into one matmul (fused.py), indexes 0..2
    gate_up: tuple[Fused, ...] = ()  # gate and up fused, indexes 0..1


# The names check_structure knows (artifact/structure.py), plus the norms and projections of the variants.
_HF: dict[str, str | None] = {
    **LLAMA_NAMES["hf"],
    "post_attn_norm": None,  # see HF_NORMS
    "post_ffn_norm": "model.layers.{i}.post_feedforward_layernorm.weight",
    "q_norm": "model.layers.{i}.self_attn.q_norm.weight",
    "sinks": "model.layers.{i}.self_attn.sinks",
    "k_norm": "model.layers.{i}.self_attn.k_norm.weight",
}
_GGUF: dict[str, str | None] = {
    **LLAMA_NAMES["gguf"],  # GGUF phi3 stores gate and up fused in ffn_up (2F rows): gate_up is ffn_up
    "post_attn_norm": "blk.{i}.post_attention_norm.weight",
    "post_ffn_norm": "blk.{i}.post_ffw_norm.weight",
    "q_norm": "blk.{i}.attn_q_norm.weight",
    "sinks": "blk.{i}.attn_sinks.weight",
    "k_norm": "blk.{i}.attn_k_norm.weight",
}
NAMES = {"hf": _HF, "gguf": _GGUF}
# HF spells the norms by position in the block, and "post_attention_layernorm" means the pre-FFN
# norm in LLaMA but the norm on the attention output in OLMo 2 and Gemma. GGUF names are uniform.
HF_NORMS = {
    "pre": {},
    "post": {"attn_norm": None, "ffn_norm": None, "post_attn_norm": "model.layers.{i}.post_attention_layernorm.weight"},
    "sandwich": {
        "post_attn_norm": "model.layers.{i}.post_attention_layernorm.weight",
        "ffn_norm": "model.layers.{i}.pre_feedforward_layernorm.weight",
    },
}
REQUIRED_NORMS = {
    "pre": ("attn_norm", "ffn_norm"),
    "post": ("post_attn_norm", "post_ffn_norm"),
    "sandwich": ("attn_norm", "ffn_norm", "post_attn_norm", "post_ffn_norm"),
}
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")


def load_layer(w: WeightReader, names: dict[str, str], a: LlamaArgs, i: int, moe: object = None) -> LlamaLayer:
    n = {k: v.format(i=i) if v else "" for k, v in names.items()}
    C, F, qd, kd = a.hidden_size, a.intermediate_size, a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    if w.has(n["q"] + ".weight"):
        (q, k, v), qkv = w.matrices([n[p] + ".weight" for p in ("q", "k", "v")], [qd, kd, kd], C)
        qb, kb, vb = (w.maybe_vector(n[p] + ".bias", r) for p, r in (("q", qd), ("k", kd), ("v", kd)))
    elif w.has(n["qkv"] + ".weight"):
        (q, k, v), qkv = w.matrices(n["qkv"] + ".weight", [qd, kd, kd], C)
        qkv_b = n["qkv"] + ".bias"
        qb, kb, vb = w.split_vector(qkv_b, [qd, kd, kd]) if w.has(qkv_b) else (None, None, None)
    else:
        raise FormatError(f"model {w.name} has no attention weights for layer {i} ({n['q']}.weight)")
    gb = ub = None
    gate_up: tuple[Fused, ...] = ()
    if moe is not None:
        gate = up = None
    elif w.has(n["gate"] + ".weight"):
        (gate, up), gate_up = w.matrices([n["gate"] + ".weight", n["up"] + ".weight"], [F, F], C)
        gb, ub = w.maybe_vector(n["gate"] + ".bias", F), w.maybe_vector(n["up"] + ".bias", F)
    else:
        (gate, up), gate_up = w.matrices(n["gate_up"] + ".weight", [F, F], C)
        gu_b = n["gate_up"] + ".bias"
        gb, ub = w.split_vector(gu_b, [F, F]) if w.has(gu_b) else (None, None)
    D, off = a.head_dim, a.norm_offset
    qn, kn = w.maybe_vector(n["q_norm"]), w.maybe_vector(n["k_norm"])
    if qn is not None and (qn.shape[0] not in (D, qd) or kn is None or kn.shape[0] not in (D, kd)):
        raise FormatError(f"model {w.name}: q/k norm of layer {i} fits neither head_dim {D} nor the projections")

    def norm(key: str) -> np.ndarray | None:
        if key in REQUIRED_NORMS[a.norm_layout]:
            v = w.vector(n[key], C)
        else:
            v = w.maybe_vector(n[key], C) if n[key] else None
        return v + np.float32(off) if v is not None and off else v

    def head_norm(v: np.ndarray | None) -> np.ndarray | None:
        return v + np.float32(off) if v is not None and off else v

    return LlamaLayer(
        attn_norm=norm("attn_norm"), q=q, k=k, v=v, o=w.matrix(n["o"] + ".weight", C, qd),
        q_bias=qb, k_bias=kb, v_bias=vb, ffn_norm=norm("ffn_norm"),
        gate=gate, up=up, down=w.matrix(n["down"] + ".weight", C, F) if moe is None else None,
        o_bias=w.maybe_vector(n["o"] + ".bias", C), gate_bias=gb, up_bias=ub,
        down_bias=w.maybe_vector(n["down"] + ".bias", C), q_norm=head_norm(qn), k_norm=head_norm(kn),
        post_attn_norm=norm("post_attn_norm"), post_ffn_norm=norm("post_ffn_norm"),
        sinks=w.maybe_vector(n["sinks"], a.num_heads), moe=moe, qkv=qkv, gate_up=gate_up,
    )  # fmt: skip

"""llama.cpp's per-architecture rules that no GGUF key carries, applied to the normalized config.

Which layers slide (Gemma 2/3, gpt-oss), which skip RoPE (SmolLM3), Gemma 3's local RoPE base and
Gemma's scales, the norm layout (from which norm tensors exist), gpt-oss's pre-FFN norm name and
expert activation, llama.cpp's MoE renormalization default.
"""

from __future__ import annotations

from typing import Any

from modelc.ir import TensorData

# llama.cpp's fixed per-architecture rules that no GGUF key carries:
# (sliding-window layer pattern, RoPE-less layer interval, local RoPE base)
_SWA_EVERY = {"gemma2": 2, "gemma3": 6, "gpt-oss": 2}  # layer i slides unless (i + 1) % every == 0
_NO_ROPE_EVERY = {"smollm3": 4}
_LOCAL_ROPE_BASE = {"gemma3": 10000.0}
_GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}


def layer_rules(cfg: dict[str, Any], arch: str, tensors: dict[str, TensorData]) -> None:
    """Per-layer switches: window pattern, RoPE-less layers, norm layout (from which norms exist), Gemma's scales."""
    n = cfg.get("num_hidden_layers")
    if not isinstance(n, int):
        return
    every = _SWA_EVERY.get(arch)
    if every and cfg.get("sliding_window"):
        cfg["sliding_window_layers"] = [(i + 1) % every != 0 for i in range(n)]
    every = _NO_ROPE_EVERY.get(arch)
    if every:
        cfg["rope_layers"] = [(i + 1) % every != 0 for i in range(n)]
    if arch in _LOCAL_ROPE_BASE:
        cfg["local_rope_theta"] = _LOCAL_ROPE_BASE[arch]
    if arch in ("gemma2", "gemma3") and cfg.get("hidden_size"):
        cfg["embedding_multiplier"] = float(cfg["hidden_size"]) ** 0.5  # (the converter already added 1 to norms)
        # query_pre_attn_scalar is not in the file: llama.cpp uses head_dim except for the 27B models
        # (46 layers in Gemma 2, 62 in Gemma 3), whose scalar is hidden / heads
        if n == _GEMMA_27B_LAYERS[arch] and cfg.get("num_attention_heads"):
            cfg["attention_multiplier"] = (cfg["hidden_size"] / cfg["num_attention_heads"]) ** -0.5
    if arch == "gpt-oss":  # llama.cpp names its pre-FFN norm post_attention_norm; the experts use the clamped SwiGLU
        for i in range(n):
            old = tensors.pop(f"blk.{i}.post_attention_norm.weight", None)
            if old is not None:
                tensors[f"blk.{i}.ffn_norm.weight"] = old
        cfg["moe_activation"] = "oss"
    if cfg.get("num_experts"):  # llama.cpp renormalizes the top-k weights unless told otherwise (qwen2moe)
        cfg.setdefault("norm_topk_prob", arch not in ("qwen2moe",))
    pre, post = "blk.0.attn_norm.weight" in tensors, "blk.0.post_attention_norm.weight" in tensors
    if post:
        cfg["norm_layout"] = "sandwich" if pre else "post"

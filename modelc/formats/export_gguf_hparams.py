"""An HF model's normalized config -> llama.cpp's general.* and {arch}.* keys (GGUF export).

One function per GGUF architecture, writing the keys convert_hf_to_gguf.py writes for it
(LlamaModel, Qwen2Model, Phi3MiniModel, GPT2Model). Configs llama.cpp would run differently from
modelc are refused with UnsupportedError: RoPE scaling other than linear (all) or llama3 (llama,
carried by the rope_freqs tensor, not a key), a sliding window on some layers only, GPT-2's
exact-erf GELU (llama.cpp's gpt2 uses the tanh form).

NOTE: llama.cpp's llama, qwen2 and phi3 graphs ignore `{arch}.attention.sliding_window` (modelc
reads it back and applies it): past the window, llama.cpp attends to every key.
"""

from __future__ import annotations

from typing import Any

from modelc.errors import UnsupportedError

GGUF_ARCH = {"llama": "llama", "qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2"}  # modelc -> GGUF architecture


def hparams(source: Any) -> dict[str, Any]:
    """general.name and the {arch}.* keys of `source` (an HF-named llama/qwen2/phi3/gpt2 model)."""
    arch = GGUF_ARCH[source.architecture]
    cfg = source.config
    kv = {"general.name": source.name, **_BY_ARCH[arch](cfg, arch, _hf_config(source))}
    return {k: v for k, v in kv.items() if v is not None}


def _hf_config(source: Any) -> dict[str, Any]:
    raw = (source.metadata or {}).get("hf_config")
    return raw if isinstance(raw, dict) else {}


def _common(cfg: dict[str, Any], arch: str) -> dict[str, Any]:
    return {
        f"{arch}.context_length": cfg.get("max_position_embeddings"),
        f"{arch}.embedding_length": cfg.get("hidden_size"),
        f"{arch}.block_count": cfg.get("num_hidden_layers"),
        f"{arch}.feed_forward_length": cfg.get("intermediate_size"),
        f"{arch}.attention.head_count": cfg.get("num_attention_heads"),
    }


def _llama(cfg: dict[str, Any], arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    head_dim = cfg.get("head_dim") or (cfg["hidden_size"] // cfg["num_attention_heads"])
    kv = {
        **_common(cfg, arch),
        f"{arch}.attention.head_count_kv": cfg.get("num_key_value_heads") or cfg.get("num_attention_heads"),
        f"{arch}.attention.layer_norm_rms_epsilon": _f(cfg.get("rms_norm_eps")),
        f"{arch}.rope.freq_base": _f(cfg.get("rope_theta")),
        f"{arch}.rope.dimension_count": head_dim,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.value_length": head_dim,
        f"{arch}.vocab_size": cfg.get("vocab_size"),
        **_rope_scaling(cfg, arch, allow_llama3=arch == "llama"),
    }
    window = cfg.get("sliding_window")
    if window:
        if cfg.get("sliding_window_layers") is not None and not all(cfg["sliding_window_layers"]):
            raise UnsupportedError("GGUF export of a sliding window on only some layers is not supported")
        kv[f"{arch}.attention.sliding_window"] = int(window)
    return kv


def _phi3(cfg: dict[str, Any], arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    if cfg.get("head_dim") not in (None, head_dim):
        raise UnsupportedError(f"GGUF phi3 needs head_dim = hidden_size / heads ({head_dim}), not {cfg['head_dim']}")
    rotary = int(head_dim * float(cfg.get("partial_rotary_factor") or 1.0))
    return {
        **_common(cfg, arch),
        f"{arch}.rope.scaling.original_context_length": hf.get("original_max_position_embeddings")
        or cfg.get("max_position_embeddings"),
        f"{arch}.attention.head_count_kv": cfg.get("num_key_value_heads") or cfg.get("num_attention_heads"),
        f"{arch}.attention.layer_norm_rms_epsilon": _f(cfg.get("rms_norm_eps")),
        f"{arch}.rope.dimension_count": rotary,
        f"{arch}.rope.freq_base": _f(cfg.get("rope_theta")),
        f"{arch}.attention.sliding_window": int(cfg.get("sliding_window") or 0),  # 0: none, as the converter says
        **_rope_scaling(cfg, arch, allow_llama3=False),
    }


def _gpt2(cfg: dict[str, Any], arch: str, hf: dict[str, Any]) -> dict[str, Any]:
    act = cfg.get("hidden_act") or "gelu_new"
    if act not in ("gelu_new", "gelu_pytorch_tanh", "gelu_fast"):
        raise UnsupportedError(f"GGUF gpt2 runs the tanh GELU; this model's activation is {act!r}")
    return {**_common(cfg, arch), f"{arch}.attention.layer_norm_epsilon": _f(cfg.get("layer_norm_eps") or 1e-5)}


def _rope_scaling(cfg: dict[str, Any], arch: str, *, allow_llama3: bool) -> dict[str, Any]:
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind in (None, "default") or (kind == "llama3" and allow_llama3):
        return {}  # llama3: the per-dimension factors travel as the rope_freqs tensor
    if kind == "linear":
        return {f"{arch}.rope.scaling.type": "linear", f"{arch}.rope.scaling.factor": _f(scaling.get("factor"))}
    raise UnsupportedError(f"GGUF export of rope_scaling {kind!r} for {arch} is not supported")


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


_BY_ARCH = {"llama": _llama, "qwen2": _llama, "phi3": _phi3, "gpt2": _gpt2}

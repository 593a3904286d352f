"""Hugging Face config.json -> (modelc architecture, normalized config dict). Pure data mapping.

Handles both the transformers 4 spelling (rope_theta, rope_scaling{type|rope_type}) and the
transformers 5 one (rope_parameters{rope_theta, rope_type, ...}), and GPT-2's n_* names.
"""

from __future__ import annotations

from typing import Any

from modelc import architectures
from modelc.errors import FormatError, UnsupportedError

ARCHITECTURES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "phi3": "phi3",
    "qwen3": "qwen3",
    "olmo2": "olmo2",
    "granite": "granite",
    "smollm3": "smollm3",
    "gemma2": "gemma2",
    "gemma3_text": "gemma3",
    "mixtral": "mixtral",
    "qwen3_moe": "qwen3moe",
    "gpt_oss": "gpt-oss",
    "gpt2": "gpt2",
    "bert": "bert",
    "roberta": "bert",
    "xlm-roberta": "bert",
}

# normalized key -> config.json spellings, first found wins
_KEYS: dict[str, tuple[str, ...]] = {
    "vocab_size": ("vocab_size",),
    "hidden_size": ("hidden_size", "n_embd", "d_model"),
    "intermediate_size": ("intermediate_size", "n_inner"),
    "num_hidden_layers": ("num_hidden_layers", "n_layer"),
    "num_attention_heads": ("num_attention_heads", "n_head"),
    "num_key_value_heads": ("num_key_value_heads",),
    "head_dim": ("head_dim",),
    "max_position_embeddings": ("max_position_embeddings", "n_positions", "n_ctx"),
    "rms_norm_eps": ("rms_norm_eps",),
    "layer_norm_eps": ("layer_norm_eps", "layer_norm_epsilon"),
    "tie_word_embeddings": ("tie_word_embeddings",),
    "attention_bias": ("attention_bias",),
    "hidden_act": ("hidden_activation", "hidden_act", "activation_function"),
    "partial_rotary_factor": ("partial_rotary_factor",),
    "sliding_window": ("sliding_window",),
    "type_vocab_size": ("type_vocab_size",),
    "pad_token_id": ("pad_token_id",),
    "position_embedding_type": ("position_embedding_type",),
    "model_type": ("model_type",),
    # Granite's multipliers; Gemma 2's soft-capping
    "embedding_multiplier": ("embedding_multiplier",),
    "residual_multiplier": ("residual_multiplier",),
    "attention_multiplier": ("attention_multiplier",),
    "logits_scaling": ("logits_scaling",),
    "attn_logit_softcapping": ("attn_logit_softcapping",),
    "final_logit_softcapping": ("final_logit_softcapping",),
    # mixture of experts (Mixtral, Qwen3-MoE)
    "num_experts": ("num_local_experts", "num_experts"),
    "num_experts_per_tok": ("num_experts_per_tok",),
    "moe_intermediate_size": ("moe_intermediate_size",),
    "norm_topk_prob": ("norm_topk_prob",),
}
# the switches each decoder family run by models.llama implies beyond its config.json keys
_SWITCHES: dict[str, dict[str, Any]] = {
    "olmo2": {"norm_layout": "post"},
    "gemma2": {"norm_layout": "sandwich", "norm_offset": 1.0},
    "gemma3": {"norm_layout": "sandwich", "norm_offset": 1.0},
    "mixtral": {"norm_topk_prob": True},  # softmax over the top-k router logits = renormalized top-k
    "gpt-oss": {"norm_topk_prob": True, "moe_activation": "oss"},  # the clamped SwiGLU in every expert
}
# families whose window is used only with use_sliding_window (their configs carry one regardless)
_WINDOW_FLAG = ("qwen2", "qwen3", "qwen3moe", "smollm3")

_DEFAULT_TIE = {"gpt2": True, "bert": True}


def _rope(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and "rope_theta" in params:
        out["rope_theta"] = float(params["rope_theta"])
        rtype = params.get("rope_type") or params.get("type") or "default"
        if rtype != "default":
            out["rope_scaling"] = {
                "rope_type": rtype,
                **{k: v for k, v in params.items() if k not in ("rope_theta", "type", "rope_type")},
            }
    if "rope_theta" in cfg and cfg["rope_theta"] is not None:
        out["rope_theta"] = float(cfg["rope_theta"])
    scaling = cfg.get("rope_scaling")
    if isinstance(scaling, dict):
        rtype = scaling.get("rope_type") or scaling.get("type") or "default"
        if rtype != "default":
            out["rope_scaling"] = {
                "rope_type": rtype,
                **{k: v for k, v in scaling.items() if k not in ("type", "rope_type")},
            }


_INT_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)
_FLOAT_KEYS = ("rms_norm_eps", "layer_norm_eps", "rope_theta")


def check_config_types(out: dict[str, Any], source: str = "config.json") -> None:
    """FormatError unless the normalized hyper-parameters have sane types (shared with the GGUF reader)."""
    for k in _INT_KEYS:
        v = out.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v > 1 << 40):
            raise FormatError(f"{source}: {k} must be a positive integer, got {v!r}")
    for k in _FLOAT_KEYS:
        v = out.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or not v > 0):
            raise FormatError(f"{source}: {k} must be a positive number, got {v!r}")
    if out.get("rope_scaling") is not None and not isinstance(out["rope_scaling"], dict):
        raise FormatError(f"{source}: rope_scaling must be an object")


def _default_layer_types(arch: str, cfg: dict[str, Any], n: int) -> list[str]:
    """transformers 4 configs without layer_types: each family's own rule for which layers slide."""
    if arch == "gemma2":
        return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(n)]
    if arch == "gemma3":
        every = cfg.get("sliding_window_pattern") or 6
        return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(n)]
    if arch == "smollm3":  # only the RoPE-less layers slide
        return ["sliding_attention" if not r else "full_attention" for r in _rope_layers(cfg, n)]
    first = cfg.get("max_window_layers")
    first = first if isinstance(first, int) and not isinstance(first, bool) else 28  # transformers' default
    return ["sliding_attention" if i >= first else "full_attention" for i in range(n)]


def _window(arch: str, cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """Which layers slide: layer_types (transformers 5) else the family's rule; Qwen2/Qwen3/SmolLM3 slide
    only with use_sliding_window. Mixed layers -> sliding_window_layers (bools); Mistral slides everywhere."""
    n = out.get("num_hidden_layers")
    n = n if isinstance(n, int) else 0  # a bad type is reported by check_config_types
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and len(types) == n):
        if arch not in _WINDOW_FLAG and arch not in ("gemma2", "gemma3"):
            return  # Mistral: the window applies to every layer
        types = _default_layer_types(arch, cfg, n)
    sliding = [t == "sliding_attention" for t in types]
    used = cfg.get("use_sliding_window") if arch in _WINDOW_FLAG else True
    if not (used and out.get("sliding_window") and any(sliding)):
        out.pop("sliding_window", None)  # Qwen2 configs carry a window they do not use
    elif not all(sliding):
        out["sliding_window_layers"] = sliding


def _rope_layers(cfg: dict[str, Any], n: int) -> list[bool]:
    """SmolLM3: no_rope_layers (1 = rotate) else a RoPE-less layer every no_rope_layer_interval layers."""
    given = cfg.get("no_rope_layers")
    if isinstance(given, list) and len(given) == n:
        return [bool(x) for x in given]
    every = cfg.get("no_rope_layer_interval") or 4
    return [(i + 1) % every != 0 for i in range(n)]


def _gemma(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """Gemma 2/3: embeddings scaled by sqrt(hidden), scores by query_pre_attn_scalar^-0.5, local RoPE base."""
    out["embedding_multiplier"] = float(out["hidden_size"]) ** 0.5
    qpas = cfg.get("query_pre_attn_scalar")
    if qpas:
        out["attention_multiplier"] = float(qpas) ** -0.5
    out.setdefault("hidden_act", "gelu_pytorch_tanh")
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):  # transformers 5 Gemma 3
        _rope({"rope_parameters": params["full_attention"]}, out)
        local = params.get("sliding_attention") or {}
        if local.get("rope_theta"):
            out["local_rope_theta"] = float(local["rope_theta"])
    elif cfg.get("rope_local_base_freq"):
        out["local_rope_theta"] = float(cfg["rope_local_base_freq"])


# Gemma3TextConfig's defaults: a multimodal Gemma 3 config.json stores its text_config as a diff against them
_GEMMA3_TEXT_DEFAULTS: dict[str, Any] = {
    "vocab_size": 262208,
    "hidden_size": 2304,
    "intermediate_size": 9216,
    "num_hidden_layers": 26,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "head_dim": 256,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6,
    "query_pre_attn_scalar": 256,
    "sliding_window": 4096,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "sliding_window_pattern": 6,
    "tie_word_embeddings": True,
}


def _text_of_multimodal(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The text model's config of a multimodal checkpoint modelc runs text-only (Gemma 3), else None."""
    text = cfg.get("text_config")
    if cfg.get("model_type") != "gemma3" or not isinstance(text, dict):
        return None
    return {**_GEMMA3_TEXT_DEFAULTS, **text, "model_type": "gemma3_text", "text_of_multimodal": True}


def normalize_config(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(architecture, normalized config) for a config.json dict; UnsupportedError for unknown model_type."""
    if not isinstance(cfg, dict):
        raise FormatError("config.json is not a JSON object")
    text = _text_of_multimodal(cfg)
    if text is not None:
        arch, out = normalize_config(text)
        out["text_of_multimodal"] = True  # the reader keeps language_model.* tensors only
        return arch, out
    model_type = str(cfg.get("model_type") or "")
    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise UnsupportedError(
            f"unsupported model_type {model_type!r} in config.json (supported: {', '.join(ARCHITECTURES)})"
        )
    out: dict[str, Any] = {}
    for norm, names in _KEYS.items():
        for n in names:
            if cfg.get(n) is not None:
                out[norm] = cfg[n]
                break
    if arch == "gpt2" and "intermediate_size" not in out and "hidden_size" in out:
        out["intermediate_size"] = 4 * out["hidden_size"]
    if architectures.family(arch) == architectures.LLAMA:
        out.setdefault("num_key_value_heads", out.get("num_attention_heads"))
        out.setdefault("rope_theta", 10000.0)
        out["rope_neox"] = True  # HF checkpoints keep Q/K unpermuted: rotate-half RoPE
        _rope(cfg, out)
        if arch in ("gemma2", "gemma3") and "hidden_size" in out:
            _gemma(cfg, out)
        out.setdefault("hidden_act", "silu")
        out.update(_SWITCHES.get(arch, {}))
        _window(arch, cfg, out)
        if arch == "smollm3" and isinstance(out.get("num_hidden_layers"), int):
            out["rope_layers"] = _rope_layers(cfg, out["num_hidden_layers"])
        sc = out.get("rope_scaling")
        if sc and sc.get("rope_type") in ("longrope", "su") and cfg.get("original_max_position_embeddings"):
            sc.setdefault("original_max_position_embeddings", cfg["original_max_position_embeddings"])
    if arch == "qwen2":
        out.setdefault("attention_bias", True)  # Qwen2 always has q/k/v biases
    if out.get("num_attention_heads") and out.get("hidden_size") and "head_dim" not in out:
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    out.setdefault("tie_word_embeddings", _DEFAULT_TIE.get(arch, False))
    out.setdefault("attention_bias", False)
    check_config_types(out)
    return arch, out

"""Hugging Face config.json -> (modelc architecture, normalized config dict). Pure data mapping.

Handles both the transformers 4 spelling (rope_theta, rope_scaling{type|rope_type}) and the
transformers 5 one (rope_parameters{rope_theta, rope_type, ...}), and GPT-2's n_* names.
"""

from __future__ import annotations

from typing import Any

from modelc.errors import FormatError, UnsupportedError

ARCHITECTURES = {
    "llama": "llama",
    "mistral": "llama",
    "qwen2": "qwen2",
    "phi3": "phi3",
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
    "hidden_act": ("hidden_act", "activation_function"),
    "partial_rotary_factor": ("partial_rotary_factor",),
    "sliding_window": ("sliding_window",),
    "type_vocab_size": ("type_vocab_size",),
    "pad_token_id": ("pad_token_id",),
    "position_embedding_type": ("position_embedding_type",),
    "model_type": ("model_type",),
}

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


def _qwen2_window(cfg: dict[str, Any], out: dict[str, Any]) -> None:
    """Qwen2 slides its window only with use_sliding_window, and only on layers >= max_window_layers
    (transformers 5 spells the layers out in layer_types). Mixed layers -> sliding_window_layers (bools)."""
    n = out.get("num_hidden_layers")
    n = n if isinstance(n, int) else 0  # a bad type is reported by check_config_types
    types = cfg.get("layer_types")
    if not (isinstance(types, list) and len(types) == n):
        first = cfg.get("max_window_layers")
        first = first if isinstance(first, int) and not isinstance(first, bool) else 28  # transformers' default
        types = ["sliding_attention" if i >= first else "full_attention" for i in range(n)]
    sliding = [t == "sliding_attention" for t in types]
    if not (cfg.get("use_sliding_window") and out.get("sliding_window") and any(sliding)):
        out.pop("sliding_window", None)  # Qwen2 configs carry a window they do not use
    elif not all(sliding):
        out["sliding_window_layers"] = sliding


def normalize_config(cfg: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(architecture, normalized config) for a config.json dict; UnsupportedError for unknown model_type."""
    if not isinstance(cfg, dict):
        raise FormatError("config.json is not a JSON object")
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
    if arch in ("llama", "qwen2", "phi3"):
        out.setdefault("num_key_value_heads", out.get("num_attention_heads"))
        out.setdefault("rope_theta", 10000.0)
        out["rope_neox"] = True  # HF checkpoints keep Q/K unpermuted: rotate-half RoPE
        _rope(cfg, out)
        out.setdefault("hidden_act", "silu")
    if arch == "qwen2":
        out.setdefault("attention_bias", True)  # Qwen2 always has q/k/v biases
        _qwen2_window(cfg, out)
    if out.get("num_attention_heads") and out.get("hidden_size") and "head_dim" not in out:
        out["head_dim"] = out["hidden_size"] // out["num_attention_heads"]
    out.setdefault("tie_word_embeddings", _DEFAULT_TIE.get(arch, False))
    out.setdefault("attention_bias", False)
    check_config_types(out)
    return arch, out

"""LlamaArgs: the llama family's hyper-parameters and switches, read once from the normalized config.

Families that differ from LLaMA by a switch (Qwen3's per-head q/k norm, OLMo 2's post-norms,
Granite's multipliers, SmolLM3's RoPE-less layers, Gemma's sandwich norms and soft-capping,
Phi-3's long-RoPE factors) set these fields; `forward` never asks which family it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from modelc.errors import FormatError, UnsupportedError

# MLP activations: SwiGLU (silu) or GeGLU with the tanh GELU (Gemma's gelu_pytorch_tanh)
ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_tanh": "gelu_tanh"}
NORM_LAYOUTS = ("pre", "post", "sandwich")


def _per_layer(cfg: dict[str, Any], key: str, n: int, default: Any) -> list:
    v = cfg.get(key)
    if v is None:
        return [default] * n
    if not isinstance(v, list) or len(v) != n:
        raise FormatError(f"{key} must list one entry per layer ({n})")
    return list(v)


# RoPE scalings the runtime computes (kernels/elementwise/rope.py rope_inv_freq) and their numeric fields
ROPE_SCALINGS = ("default", "linear", "yarn", "longrope", "su", "llama3")
_ROPE_POSITIVE = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
    "attention_factor",
)
_ROPE_NONNEGATIVE = ("beta_fast", "beta_slow", "mscale", "mscale_all_dim")  # 0 reads as absent (the default)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def check_rope_scaling(scaling: Any) -> None:
    """FormatError (UnsupportedError for an unknown type) unless `scaling` is a RoPE scaling the runtime computes
    with finite, in-range numbers: a string factor, a zero factor or equal llama3 band edges would otherwise
    fail (or divide by zero into NaN logits) only once the model loads."""
    if scaling is None:
        return
    if not isinstance(scaling, dict):
        raise FormatError(f"rope_scaling must be an object, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind is not None and kind not in ROPE_SCALINGS:
        raise UnsupportedError(f"unsupported rope scaling type {kind!r} (supported: {', '.join(ROPE_SCALINGS)})")
    for key in _ROPE_POSITIVE + _ROPE_NONNEGATIVE:
        v = scaling.get(key)
        if v is not None and not (_is_number(v) and (v > 0 if key in _ROPE_POSITIVE else v >= 0)):
            kind_of = "positive" if key in _ROPE_POSITIVE else "non-negative"
            raise FormatError(f"rope_scaling {key} must be a {kind_of} number, got {v!r}")
    for key in ("short_factor", "long_factor"):
        v = scaling.get(key)
        if v is not None and not (isinstance(v, list) and all(_is_number(x) and x > 0 for x in v)):
            raise FormatError(f"rope_scaling {key} must be a list of positive numbers")
    if kind == "llama3" and scaling.get("low_freq_factor", 1.0) == scaling.get("high_freq_factor", 4.0):
        raise FormatError(
            "rope_scaling low_freq_factor and high_freq_factor must differ (llama3 interpolates between them)"
        )


def longrope_attention_factor(scaling: dict[str, Any] | None, max_pos: int | None) -> float:
    """The cos/sin multiplier of long-RoPE (Phi-3.5/Phi-4): attention_factor, else sqrt(1 + ln s / ln orig);
    of YaRN: attention_factor, else 0.1 ln(factor) + 1 (transformers' defaults for both)."""
    kind = scaling.get("rope_type", scaling.get("type")) if scaling else None
    if kind not in ("longrope", "su", "yarn"):
        return 1.0
    assert scaling is not None
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    if kind == "yarn":
        f = float(scaling.get("factor") or 1.0)
        m, m_all = scaling.get("mscale"), scaling.get("mscale_all_dim")

        def mscale(s: float) -> float:
            return 0.1 * s * math.log(f) + 1.0 if f > 1.0 else 1.0

        return mscale(float(m)) / mscale(float(m_all)) if m and m_all else mscale(1.0)
    orig = float(scaling.get("original_max_position_embeddings") or max_pos or 1)
    factor = scaling.get("factor") or ((max_pos or orig) / orig)
    return math.sqrt(1.0 + math.log(factor) / math.log(orig)) if factor > 1.0 else 1.0


def long_rope_after(cfg: dict[str, Any]) -> int:
    """Long-RoPE with long factors (Phi-3.5/Phi-4): the original context, past which a sequence rotates with
    the long factors (GGUF: rope_factors_long + original_context_length; HF: rope_scaling), else 0."""
    if cfg.get("rope_long_after"):
        return int(cfg["rope_long_after"])
    scaling = cfg.get("rope_scaling") or None
    if not scaling or scaling.get("rope_type", scaling.get("type")) not in ("longrope", "su"):
        return 0
    return int(scaling.get("original_max_position_embeddings") or 0) if scaling.get("long_factor") else 0


# LlamaArgs float field -> (the config key it comes from, its lower bound, whether the bound itself is allowed).
# A NaN, an infinity or a value below the bound (a negative RoPE base, a negative norm epsilon) packed and then
# turned every logit into NaN: the model answered garbage instead of failing to load.
_FLOAT_RANGES = {
    "rms_norm_eps": ("rms_norm_eps", 0.0, True),
    "rope_theta": ("rope_theta", 0.0, False),
    "local_rope_theta": ("local_rope_theta", 0.0, True),
    "rope_attn_factor": ("rope_attn_factor", 0.0, False),
    "norm_offset": ("norm_offset", None, True),
    "embed_scale": ("embedding_multiplier", None, True),
    "residual_scale": ("residual_multiplier", None, True),
    "attn_scale": ("attention_multiplier", 0.0, True),
    "final_softcap": ("final_logit_softcapping", 0.0, True),
    "attn_softcap": ("attn_logit_softcapping", 0.0, True),
}


def _check_floats(args: LlamaArgs, logits_div: float) -> None:
    if not math.isfinite(logits_div):
        raise FormatError(f"model config logits_scaling must be a finite number, got {logits_div}")
    for field_name, (key, lo, closed) in _FLOAT_RANGES.items():
        v = getattr(args, field_name)
        if not math.isfinite(v):
            raise FormatError(f"model config {key} must be a finite number, got {v}")
        if lo is not None and (v < lo if closed else v <= lo):
            raise FormatError(f"model config {key} must be {'>=' if closed else '>'} {lo:g}, got {v:g}")


@dataclass(frozen=True, slots=True)
class LlamaArgs:
    vocab_size: int
    hidden_size: int  # C
    intermediate_size: int  # F
    num_layers: int
    num_heads: int  # H
    num_kv_heads: int  # K
    head_dim: int  # D
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    rope_neox: bool
    sliding_window: int
    layer_windows: tuple[int, ...]  # per layer: sliding_window, or 0 where the layer attends to everything
    rotary_dim: int  # R <= D: only the first R dims of each head rotate (Phi-4-mini style partial rotary)
    rope_layers: tuple[bool, ...] = ()  # per layer: False where the layer applies no RoPE (SmolLM3)
    local_rope_theta: float = 0.0  # RoPE base of the sliding-window layers when it differs (Gemma 3)
    rope_attn_factor: float = 1.0  # multiplies the rotated dims of q and k (long-RoPE)
    rope_long_after: int = 0  # long-RoPE: a sequence longer than this rotates with the long factors (0: never)
    norm_layout: str = "pre"  # pre: x + f(norm(x)); post: x + norm(f(x)) (OLMo 2); sandwich: both (Gemma 2/3)
    norm_offset: float = 0.0  # Gemma's RMSNorm scales by (1 + w)
    activation: str = "silu"
    embed_scale: float = 1.0  # Granite embedding_multiplier, Gemma sqrt(hidden)
    residual_scale: float = 1.0  # Granite residual_multiplier
    attn_scale: float = 0.0  # score scale; 0 = 1/sqrt(head_dim)
    logit_scale: float = 1.0  # logits multiplied by this (Granite: 1 / logits_scaling)
    final_softcap: float = 0.0  # Gemma 2: logits = cap * tanh(logits / cap)
    attn_softcap: float = 0.0  # Gemma 2: scores = cap * tanh(scores / cap)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], naming: str, architecture: str) -> LlamaArgs:
        try:
            C = int(cfg["hidden_size"])
            H = int(cfg["num_attention_heads"])
            D = int(cfg.get("head_dim") or C // H)
            # GGUF: rope.dimension_count; HF: int(head_dim * partial_rotary_factor), as transformers does
            R = int(cfg.get("rotary_dim") or D * float(cfg.get("partial_rotary_factor") or 1.0))
            L, win = int(cfg["num_hidden_layers"]), int(cfg.get("sliding_window") or 0)
            slides = _per_layer(cfg, "sliding_window_layers", L, True)  # Qwen2/Gemma: only some layers slide
            scaling = cfg.get("rope_scaling") or None
            check_rope_scaling(scaling)
            logits_div = float(cfg.get("logits_scaling") or 1.0)
            args = cls(
                vocab_size=int(cfg["vocab_size"]),
                hidden_size=C,
                intermediate_size=int(cfg["intermediate_size"]),
                num_layers=L,
                num_heads=H,
                num_kv_heads=int(cfg.get("num_key_value_heads") or H),
                head_dim=D,
                rms_norm_eps=float(cfg.get("rms_norm_eps") or 1e-6),
                rope_theta=float(cfg.get("rope_theta") or 10000.0),
                rope_scaling=scaling,
                rope_neox=bool(cfg.get("rope_neox", naming == "hf" or architecture in ("qwen2", "phi3"))),
                sliding_window=win,
                layer_windows=tuple(win if s else 0 for s in slides),
                rotary_dim=R,
                rope_layers=tuple(bool(x) for x in _per_layer(cfg, "rope_layers", L, True)),
                local_rope_theta=float(cfg.get("local_rope_theta") or 0.0),
                rope_attn_factor=float(
                    cfg.get("rope_attn_factor")
                    or longrope_attention_factor(scaling, cfg.get("max_position_embeddings"))
                ),
                rope_long_after=long_rope_after(cfg),
                norm_layout=str(cfg.get("norm_layout") or "pre"),
                norm_offset=float(cfg.get("norm_offset") or 0.0),
                activation=ACTIVATIONS.get(str(cfg.get("hidden_act") or "silu"), ""),
                embed_scale=float(cfg.get("embedding_multiplier") or 1.0),
                residual_scale=float(cfg.get("residual_multiplier") or 1.0),
                attn_scale=float(cfg.get("attention_multiplier") or 0.0),
                logit_scale=1.0 / logits_div,
                final_softcap=float(cfg.get("final_logit_softcapping") or 0.0),
                attn_softcap=float(cfg.get("attn_logit_softcapping") or 0.0),
            )
        except KeyError as e:
            raise FormatError(f"model config lacks {e.args[0]}") from None
        except (TypeError, ValueError, ZeroDivisionError, OverflowError) as e:
            raise FormatError(f"bad model config value: {e}") from None
        if args.sliding_window < 0:
            raise FormatError(
                f"sliding_window must be 0 (none) or a positive number of tokens, got {args.sliding_window}"
            )
        if args.num_heads % args.num_kv_heads:
            raise FormatError(f"num_attention_heads {H} is not a multiple of num_key_value_heads {args.num_kv_heads}")
        if not (0 < R <= D and R % 2 == 0):
            raise FormatError(f"rotary dimension {R} must be even and in 1..head_dim {D}")
        if not args.activation:  # another activation would be silently wrong
            act = cfg.get("hidden_act")
            raise UnsupportedError(f"hidden_act {act!r} is not supported for {architecture} (only silu)")
        if args.norm_layout not in NORM_LAYOUTS:
            raise FormatError(f"norm_layout {args.norm_layout!r} is not one of {NORM_LAYOUTS}")
        if logits_div <= 0 or args.attn_scale < 0:
            raise FormatError("logits_scaling and attention_multiplier must be positive")
        _check_floats(args, logits_div)
        return args

    @property
    def scale(self) -> float:
        return self.attn_scale or 1.0 / math.sqrt(self.head_dim)

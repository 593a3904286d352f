"""HF-named llama/qwen2/phi3/gpt2 models -> GGUF tensors and keys, as llama.cpp's convert_hf_to_gguf.py does.

Tensor names map through gguf-py's TensorNameMap. Per architecture:
- llama (LLaMA 2/3, Mistral): q_proj/k_proj rows (and biases) permuted from the HF (neox) RoPE
  layout to GGUF's interleaved one (a row permutation, so block-quantized rows move whole); llama3
  RoPE scaling becomes the `rope_freqs.weight` F32 tensor of per-dimension divisors;
- qwen2, phi3: names only (both rotate halves in llama.cpp; phi3 keeps qkv_proj as attn_qkv and
  gate_up_proj as ffn_up, gate rows first);
- gpt2: Conv1D weights (in, out) transposed to (out, in) (block-quantized ones dequantized to F32 first),
  the attention-mask buffers dropped.
The {arch}.* keys come from export_gguf_hparams, tokenizer.ggml.* from export_gguf_vocab.
Other architectures, and models with a tensor gguf-py cannot name, are not converted
(export_gguf keeps their HF names).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from modelc.errors import UnsupportedError
from modelc.formats.export_gguf_hparams import GGUF_ARCH, hparams
from modelc.formats.export_gguf_vocab import vocab_metadata
from modelc.formats.export_safetensors import dequantized
from modelc.ir import DataType

_SKIP_SUFFIXES = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")
_PERMUTED = ("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")
_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def convertible(source: Any) -> bool:
    return source.naming == "hf" and source.architecture in GGUF_ARCH


def convert(source: Any, tensors: dict[str, tuple[np.ndarray, Any]]) -> tuple[dict, dict] | None:
    """({gguf name: (array, raw type)}, {metadata key: value}) for an HF-named model; None when not convertible."""
    renamed = rename_and_permute(source, tensors)
    if renamed is None:
        return None
    meta = {**hparams(source), **vocab_metadata(source)}
    if _trips_phi3_name_rule(meta):
        del meta["general.name"]
    return renamed, meta


# llama.cpp's vocab loader sets token attributes by model name: a general.name containing "phi-3"
# or "phi3" makes it look these pieces up, and loading fails ("unordered_map::at") when one is missing.
_PHI3_NAMES = ("phi-3", "phi3")
_PHI3_PIECES = ("</s>", "<unk>", "<s>", "<|endoftext|>")


def _trips_phi3_name_rule(meta: dict[str, Any]) -> bool:
    name = str(meta.get("general.name") or "").lower()
    tokens = set(meta.get("tokenizer.ggml.tokens") or ())
    return any(n in name for n in _PHI3_NAMES) and bool(tokens) and not all(p in tokens for p in _PHI3_PIECES)


def rename_and_permute(
    source: Any, tensors: dict[str, tuple[np.ndarray, Any]]
) -> dict[str, tuple[np.ndarray, Any]] | None:
    """export_gguf's {hf name: (array, raw type)} -> {gguf name: (array, raw type)}, plus rope_freqs for llama3.

    None when some tensor has no GGUF name (then nothing is renamed: a half-converted file helps nobody).
    """
    import gguf

    cfg, arch = source.config, source.architecture
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[GGUF_ARCH[arch].upper()], int(cfg.get("num_hidden_layers") or 0))
    n_head = int(cfg.get("num_attention_heads") or 0)
    n_kv = int(cfg.get("num_key_value_heads") or n_head)
    out = {}
    for hf_name, (arr, raw) in tensors.items():
        if hf_name.endswith(_SKIP_SUFFIXES):
            continue
        lookup = (
            "transformer." + hf_name
            if arch == "gpt2" and not hf_name.startswith(("transformer.", "lm_head"))
            else hf_name
        )
        name = names.get_name(lookup, try_suffixes=(".weight", ".bias"))
        if name is None:
            return None
        # llama.cpp's converter permutes q/k rows for the interleaved RoPE: weights and biases alike.
        if arch == "llama" and hf_name.endswith(_PERMUTED):
            arr = permute_rows(arr, n_head if "q_proj" in hf_name else n_kv)
        if arch == "gpt2" and hf_name.endswith(_CONV1D):
            arr, raw = _transposed(source.tensors[hf_name], arr, raw)
        out[name] = (arr, raw)
    if arch == "llama" and _rope_kind(cfg) == "llama3":
        out["rope_freqs.weight"] = (llama3_rope_factors(cfg), None)
    return out


def permute_rows(arr: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute on the rows: (H, 2, D/2) -> (H, D/2, 2) per head."""
    rows = arr.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        raise UnsupportedError(f"cannot permute {rows} rows for {n_head} heads")
    flat = arr.reshape(rows, -1)  # (N, row elements or row bytes)
    order = np.arange(rows).reshape(n_head, 2, rows // n_head // 2).swapaxes(1, 2).reshape(-1)
    return np.ascontiguousarray(flat[order]).reshape(arr.shape)


def _transposed(t: Any, arr: np.ndarray, raw: Any) -> tuple[np.ndarray, Any]:
    """A Conv1D (in, out) weight as (out, in); BF16 stays BF16, block types are dequantized to F32 first."""
    if len(t.shape) != 2:
        raise UnsupportedError(f"GPT-2 Conv1D weight of shape {t.shape} is not 2-D")
    if t.dtype is DataType.BF16:
        halves = np.ascontiguousarray(arr.view(np.uint16).reshape(t.shape).T)  # (out, in) bf16 bits
        return halves.view(np.uint8).reshape(t.shape[1], 2 * t.shape[0]), raw
    if raw is not None:
        arr = dequantized(t, None)  # (in, out) f32
    return np.ascontiguousarray(arr.T), None  # (out, in)


def _rope_kind(cfg: dict[str, Any]) -> str | None:
    scaling = cfg.get("rope_scaling") or {}
    return scaling.get("rope_type") or scaling.get("type")


def llama3_rope_factors(cfg: dict[str, Any]) -> np.ndarray:
    """(D/2,) f32 divisors of each RoPE frequency, as convert_hf_to_gguf's LlamaModel computes them.

    1 for wavelengths under original_context / high_freq_factor, `factor` above
    original_context / low_freq_factor, and 1 / ((1 - s) / factor + s) between (s the smoothing).
    """
    s = cfg["rope_scaling"]
    dim = int(cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"])
    base = float(cfg.get("rope_theta") or 10000.0)
    factor = float(s.get("factor", 8.0))
    low, high = float(s.get("low_freq_factor", 1.0)), float(s.get("high_freq_factor", 4.0))
    old_ctx = float(s.get("original_max_position_embeddings", 8192))
    freqs = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)  # (D/2,)
    out = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < old_ctx / high:
            out.append(1.0)
        elif wavelen > old_ctx / low:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(1.0 / ((1.0 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)  # (D/2,)

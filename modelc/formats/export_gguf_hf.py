"""HF-named llama/qwen2 models -> GGUF names, row order and metadata, as llama.cpp's convert_hf_to_gguf.py does.

Tensor names map through gguf-py's TensorNameMap; llama's q_proj/k_proj rows are permuted from
the HF (neox) RoPE layout to GGUF's interleaved one (a row permutation, so block-quantized rows
move whole); the `{arch}.*` hyper-parameters come from the normalized config, and a
SentencePiece-style BPE tokenizer (byte_fallback) becomes tokenizer.ggml.model "llama".
Other architectures, and models with a tensor gguf-py cannot name, are not converted
(export_gguf keeps their names).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from modelc.errors import UnsupportedError

CONVERTIBLE = ("llama", "qwen2")
_SKIP_SUFFIXES = ("rotary_emb.inv_freq",)


def convertible(source: Any) -> bool:
    return source.naming == "hf" and source.architecture in CONVERTIBLE


def rename_and_permute(
    source: Any, tensors: dict[str, tuple[np.ndarray, Any]]
) -> dict[str, tuple[np.ndarray, Any]] | None:
    """export_gguf's {hf name: (array, raw type)} -> {gguf name: (array with llama rows permuted, raw type)}.

    None when some tensor has no GGUF name (then nothing is renamed: a half-converted file helps nobody).
    """
    import gguf

    cfg = source.config
    arch = gguf.MODEL_ARCH.LLAMA if source.architecture == "llama" else gguf.MODEL_ARCH.QWEN2
    n_layers = int(cfg.get("num_hidden_layers") or 0)
    names = gguf.get_tensor_name_map(arch, n_layers)
    n_head = int(cfg.get("num_attention_heads") or 0)
    n_kv = int(cfg.get("num_key_value_heads") or n_head)
    out = {}
    for hf_name, (arr, raw) in tensors.items():
        if hf_name.endswith(_SKIP_SUFFIXES):
            continue
        name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if name is None:
            return None
        # llama.cpp's converter permutes q/k rows for the interleaved RoPE: weights and biases alike.
        if source.architecture == "llama" and hf_name.endswith(_PERMUTED):
            arr = permute_rows(arr, n_head if "q_proj" in hf_name else n_kv)
        out[name] = (arr, raw)
    return out


_PERMUTED = ("q_proj.weight", "k_proj.weight", "q_proj.bias", "k_proj.bias")


def permute_rows(arr: np.ndarray, n_head: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute on the rows: (H, 2, D/2) -> (H, D/2, 2) per head."""
    rows = arr.shape[0]
    if n_head <= 0 or rows % (2 * n_head):
        raise UnsupportedError(f"cannot permute {rows} rows for {n_head} heads")
    flat = arr.reshape(rows, -1)  # (N, row elements or row bytes)
    order = np.arange(rows).reshape(n_head, 2, rows // n_head // 2).swapaxes(1, 2).reshape(-1)
    return np.ascontiguousarray(flat[order]).reshape(arr.shape)


def metadata(source: Any) -> dict[str, Any]:
    """general.* and {arch}.* keys from the normalized config (llama.cpp's names)."""
    cfg, arch = source.config, source.architecture
    head_dim = cfg.get("head_dim") or (cfg["hidden_size"] // cfg["num_attention_heads"])
    kv = {
        "general.name": source.name,
        f"{arch}.context_length": cfg.get("max_position_embeddings"),
        f"{arch}.embedding_length": cfg.get("hidden_size"),
        f"{arch}.block_count": cfg.get("num_hidden_layers"),
        f"{arch}.feed_forward_length": cfg.get("intermediate_size"),
        f"{arch}.attention.head_count": cfg.get("num_attention_heads"),
        f"{arch}.attention.head_count_kv": cfg.get("num_key_value_heads") or cfg.get("num_attention_heads"),
        f"{arch}.attention.layer_norm_rms_epsilon": _f(cfg.get("rms_norm_eps")),
        f"{arch}.rope.freq_base": _f(cfg.get("rope_theta")),
        f"{arch}.rope.dimension_count": head_dim,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.value_length": head_dim,
        f"{arch}.vocab_size": cfg.get("vocab_size"),
    }
    scaling = cfg.get("rope_scaling") or {}
    kind = scaling.get("rope_type") or scaling.get("type")
    if kind == "linear":
        kv[f"{arch}.rope.scaling.type"] = "linear"
        kv[f"{arch}.rope.scaling.factor"] = _f(scaling.get("factor"))
    elif kind not in (None, "default"):
        raise UnsupportedError(f"GGUF export of rope_scaling {kind!r} is not supported")
    window = cfg.get("sliding_window")
    if window:
        if cfg.get("sliding_window_layers") is not None and not all(cfg["sliding_window_layers"]):
            raise UnsupportedError("GGUF export of a sliding window on only some layers is not supported")
        kv[f"{arch}.attention.sliding_window"] = int(window)
    return {k: v for k, v in kv.items() if v is not None}


def tokenizer_metadata(source: Any) -> dict[str, Any]:
    """tokenizer.ggml.* for a SentencePiece-style HF tokenizer (BPE + byte_fallback); {} otherwise."""
    from modelc.formats.export_gguf_tokenizer import tokenizer_arrays

    if not source.tokenizer_json:
        return {}
    model = json.loads(source.tokenizer_json).get("model") or {}
    if model.get("type") != "BPE" or not model.get("byte_fallback"):
        return {}
    sp = source.special_tokens or {}
    unk = model["vocab"].get(model.get("unk_token") or "<unk>")  # HF llama files often leave unk_token unset
    kv: dict[str, Any] = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default"}
    if unk is not None:
        kv["tokenizer.ggml.unknown_token_id"] = unk
    kv.update(tokenizer_arrays(source.tokenizer_json, {**kv}))
    eos = (sp.get("eos_token_ids") or [None])[0]
    for key, val in (("bos_token_id", sp.get("bos_token_id")), ("eos_token_id", eos),
                     ("padding_token_id", sp.get("pad_token_id"))):  # fmt: skip
        if val is not None:
            kv[f"tokenizer.ggml.{key}"] = int(val)
    if sp.get("add_bos_token") is not None:
        kv["tokenizer.ggml.add_bos_token"] = bool(sp["add_bos_token"])
    return kv


def _f(v: Any) -> float | None:
    return None if v is None else float(v)

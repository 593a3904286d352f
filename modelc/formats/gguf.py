"""GGUF reader: a parsed GGUF header -> IR Model with tensors as zero-copy memmap views.

Tensors stay in their stored block layout (no dequantization); GGUF dims (fastest first)
are reversed into row-major shapes. Hyper-parameters under `{arch}.*` are mapped to the
normalized config keys of docs/architecture.md; the tokenizer is converted once here.
"""

from __future__ import annotations

import os
import pathlib
import re
from typing import Any

import numpy as np

from modelc.errors import FormatError
from modelc.formats.gguf_arch import layer_rules
from modelc.formats.gguf_file import GGUFFile, parse_gguf
from modelc.formats.gguf_tokenizer import (
    EOG_TEXTS,
    EOT_TEXTS,
    TOKEN_CONTROL,
    build_tokenizer_json,
    default_add_bos,
    token_types,
)
from modelc.formats.hf import keep_special_text
from modelc.formats.hf_config import check_config_types
from modelc.ir import DataType, Model, TensorData

# Big arrays that live in the tokenizer, not in metadata.
_TOKENIZER_ARRAYS = {
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
}
MAX_METADATA_ARRAY = 4096

# llama.cpp's llama_model_rope_type(): NEOX-style (rotate halves) architectures. Everything
# else with RoPE uses the "normal" interleaved style (llama, whose Q/K the converter permuted).
NEOX_ROPE_ARCHS = {
    "falcon",
    "grok",
    "dbrx",
    "bert",
    "jina-bert-v2",
    "nomic-bert",
    "nomic-bert-moe",
    "stablelm",
    "bitnet",
    "qwen",
    "qwen2",
    "qwen2moe",
    "qwen2vl",
    "qwen3",
    "qwen3moe",
    "olmo2",
    "olmoe",
    "phi2",
    "phi3",
    "phimoe",
    "gpt-oss",
    "plamo",
    "gemma",
    "gemma2",
    "gemma3",
    "starcoder2",
    "openelm",
    "gptneox",
    "codeshell",
    "exaone",
    "minicpm3",
    "nemotron",
    "deepseek2",
}

# general.architecture -> modelc architecture name (others are kept as they are).
_ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "phi3": "phi3", "gpt2": "gpt2", "bert": "bert"}
_ACT = {
    "llama": "silu",
    "mixtral": "silu",
    "qwen2": "silu",
    "phi3": "silu",
    "qwen3": "silu",
    "qwen3moe": "silu",
    "olmo2": "silu",
    "granite": "silu",
    "smollm3": "silu",
    "gemma2": "gelu_pytorch_tanh",
    "gemma3": "gelu_pytorch_tanh",
    "gpt-oss": "silu",
    "gpt2": "gelu",
    "bert": "gelu",
}

# `{arch}.<key>` -> normalized config key.
_HPARAMS = {
    "context_length": "max_position_embeddings",
    "embedding_length": "hidden_size",
    "feed_forward_length": "intermediate_size",
    "block_count": "num_hidden_layers",
    "attention.head_count": "num_attention_heads",
    "attention.head_count_kv": "num_key_value_heads",
    "attention.key_length": "head_dim",
    "attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "attention.layer_norm_epsilon": "layer_norm_eps",
    "rope.freq_base": "rope_theta",
    "rope.dimension_count": "rotary_dim",
    "vocab_size": "vocab_size",
    "attention.causal": "causal",
    "attention.sliding_window": "sliding_window",
    # Granite's multipliers, Gemma 2's soft-capping, long-RoPE's attention factor
    "embedding_scale": "embedding_multiplier",
    "residual_scale": "residual_multiplier",
    "attention.scale": "attention_multiplier",
    "logit_scale": "logits_scaling",
    "attn_logit_softcapping": "attn_logit_softcapping",
    "final_logit_softcapping": "final_logit_softcapping",
    "rope.scaling.attn_factor": "rope_attn_factor",
    # mixture of experts
    "expert_count": "num_experts",
    "expert_used_count": "num_experts_per_tok",
    "expert_feed_forward_length": "moe_intermediate_size",
    "expert_weights_norm": "norm_topk_prob",
}
# gpt-oss's YaRN ramp: a GGUF cannot say whether its ends are rounded to whole dims (config.json's `truncate`;
# OpenAI's released config says false, transformers' default when the key is missing is true). llama.cpp,
# whose format this is, rounds them (floor / ceil, ggml_rope_yarn_corr_dims) for every model, so a GGUF is read
# as llama.cpp reads it; an HF folder keeps its config's flag (docs/models.md). Tests set this to False.
GPT_OSS_YARN_TRUNCATE = True
# `{arch}.rope.scaling.<key>` -> rope_scaling key
_ROPE_SCALING = {"yarn_beta_fast": "beta_fast", "yarn_beta_slow": "beta_slow", "attn_factor": "attention_factor"}


def _jsonable(v: Any) -> Any:
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, float) and v != v:  # NaN is not JSON
        return None
    return v


def _metadata(g: GGUFFile) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in g.fields.items():
        if k in _TOKENIZER_ARRAYS or k == "tokenizer.chat_template" or k.startswith("split."):
            continue
        if isinstance(v, list | np.ndarray) and len(v) > MAX_METADATA_ARRAY:
            continue
        out[k] = _jsonable(v)
    return out


_SPLIT_NAME = re.compile(r"^(?P<prefix>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def _shards(g: GGUFFile) -> list[GGUFFile]:
    """All parts of a split GGUF (gguf-split's NAME-0000i-of-0000n.gguf), given the first; else [g]."""
    count = g.fields.get("split.count")
    if not isinstance(count, int) or count <= 1:
        return [g]
    m = _SPLIT_NAME.match(g.path.name)
    if g.fields.get("split.no", 0) != 0 or m is None:
        raise FormatError(f"{g.path.name}: part of a split GGUF; open the first part (NAME-00001-of-{count:05d}.gguf)")
    parts = [g]
    for i in range(1, count):
        part = g.path.with_name(f"{m['prefix']}-{i + 1:05d}-of-{count:05d}.gguf")
        if not part.is_file():
            raise FormatError(f"{g.path.name}: split part {part.name} is missing")
        parts.append(parse_gguf(part))
        if parts[-1].fields.get("split.no") != i:
            raise FormatError(f"{part.name}: split.no is {parts[-1].fields.get('split.no')}, expected {i}")
    return parts


def _tensors(g: GGUFFile) -> dict[str, TensorData]:
    out: dict[str, TensorData] = {}
    for part in _shards(g):
        for name, t in _part_tensors(part).items():
            if name in out:
                raise FormatError(f"{part.path.name}: duplicate tensor name {name} across split parts")
            out[name] = t
    return out


def _part_tensors(g: GGUFFile) -> dict[str, TensorData]:
    mm = np.memmap(g.path, dtype=np.uint8, mode="r")
    out: dict[str, TensorData] = {}
    for info in g.tensor_infos:
        dtype = DataType.from_ggml(info.ggml_type, tensor=info.name)
        shape = tuple(reversed(info.dims))
        nbytes = dtype.nbytes(shape)  # Python int: a 2^60-byte claim is compared, never allocated
        if info.offset + nbytes > g.file_size:
            raise FormatError(
                f"{g.path.name}: tensor {info.name} ({nbytes} bytes at offset {info.offset}) runs past the end of the file"
            )
        out[info.name] = TensorData(shape, dtype, mm[info.offset : info.offset + nbytes])
    return out


def _scalar(v: Any) -> Any:
    return v.item() if isinstance(v, np.generic) else v


def _config(g: GGUFFile, arch: str, tensors: dict[str, TensorData]) -> dict[str, Any]:
    f = g.fields
    cfg: dict[str, Any] = {}
    for key, norm in _HPARAMS.items():
        v = f.get(f"{arch}.{key}")
        if v is not None and not isinstance(v, list | np.ndarray):
            cfg[norm] = _scalar(v)
    if "num_attention_heads" in cfg and "num_key_value_heads" not in cfg:
        cfg["num_key_value_heads"] = cfg["num_attention_heads"]
    if "head_dim" not in cfg and cfg.get("num_attention_heads") and cfg.get("hidden_size"):
        cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
    if "vocab_size" not in cfg:
        tokens = f.get("tokenizer.ggml.tokens")
        emb = tensors.get("token_embd.weight") or tensors.get("output.weight")
        if tokens is not None:
            cfg["vocab_size"] = len(tokens)
        elif emb is not None:
            cfg["vocab_size"] = emb.shape[0]
    rope_type = f.get(f"{arch}.rope.scaling.type")
    factor = f.get(f"{arch}.rope.scaling.factor")
    if rope_type and rope_type != "none" and factor:
        scaling: dict[str, Any] = {"rope_type": rope_type, "factor": float(factor)}
        orig = f.get(f"{arch}.rope.scaling.original_context_length")
        if orig:
            scaling["original_max_position_embeddings"] = int(orig)
        for key, norm in _ROPE_SCALING.items():
            v = f.get(f"{arch}.rope.scaling.{key}")
            if isinstance(v, int | float | np.number) and not isinstance(v, bool):
                scaling[norm] = float(v)
        if arch == "gpt-oss":
            scaling["truncate"] = GPT_OSS_YARN_TRUNCATE
        cfg["rope_scaling"] = scaling
    if "rope_freqs.weight" in tensors:
        cfg["rope_freqs_tensor"] = "rope_freqs.weight"  # llama3-style per-dim frequency factors
    elif "rope_factors_short.weight" in tensors:  # long-RoPE (Phi-3.5/Phi-4): contexts <= the original
        cfg["rope_freqs_tensor"] = "rope_factors_short.weight"
        orig = f.get(f"{arch}.rope.scaling.original_context_length")
        if "rope_factors_long.weight" in tensors and isinstance(orig, int | np.integer) and orig > 0:
            cfg["rope_freqs_long_tensor"] = "rope_factors_long.weight"  # sequences longer than the original
            cfg["rope_long_after"] = int(orig)
    layer_rules(cfg, arch, tensors)
    cfg["rope_neox"] = arch in NEOX_ROPE_ARCHS
    cfg["tie_word_embeddings"] = "output.weight" not in tensors
    cfg["attention_bias"] = "blk.0.attn_q.bias" in tensors or "blk.0.attn_qkv.bias" in tensors
    if arch in _ACT:
        cfg["hidden_act"] = _ACT[arch]
    check_config_types(cfg, f"{g.path.name} ({arch}.* keys)")
    pooling = f.get(f"{arch}.pooling_type")
    if pooling in (1, 2):
        # llama.cpp normalizes embeddings (L2) by default.
        cfg["pooling"] = {"mode": "mean" if pooling == 1 else "cls", "normalize": True}
    return cfg


def _end_of_generation_ids(fields: dict[str, Any], tokens: list[str]) -> list[int]:
    """Ids of the EOG texts llama.cpp's vocab loader looks for (typed control there whatever the GGUF says)."""
    if not tokens:
        return []
    types = token_types(fields)  # checks the lengths; every EOG text is control-typed there
    wanted = set(EOG_TEXTS)
    found = {t for t, ty in zip(tokens, types, strict=True) if t in wanted and ty == TOKEN_CONTROL}
    # llama.cpp's o200k_harmony rule: with <|return|> and <|call|> present, <|end|> only closes a message
    # (gpt-oss's analysis channel, then the final one), it does not end the generation
    if {"<|return|>", "<|call|>"} <= found:
        wanted.discard("<|end|>")
    return [i for i, t in enumerate(tokens) if t in wanted and types[i] == TOKEN_CONTROL]


def _special_tokens(g: GGUFFile) -> dict[str, Any]:
    f = g.fields
    tokens = f.get("tokenizer.ggml.tokens") or []
    sp: dict[str, Any] = {}

    def tid(key: str) -> int | None:
        v = f.get(f"tokenizer.ggml.{key}")
        limit = len(tokens) if tokens else 1 << 31
        if isinstance(v, int | np.integer) and not isinstance(v, bool) and 0 <= int(v) < limit:
            return int(v)
        return None

    model = f.get("tokenizer.ggml.model")
    bos = tid("bos_token_id")
    if bos is None and model == "bert":
        bos = tid("cls_token_id")
    eos = tid("eos_token_id")
    if eos is None and model == "bert":
        eos = tid("seperator_token_id")
    eot, eom, pad = tid("eot_token_id"), tid("eom_token_id"), tid("padding_token_id")
    eog = _end_of_generation_ids(f, tokens)
    if eot is None:  # the most specific turn-end text wins, in EOT_TEXTS order
        by_text = {tokens[i]: i for i in eog}
        eot = next((by_text[t] for t in EOT_TEXTS if t in by_text and by_text[t] != eos), None)
    sp["bos_token_id"] = bos
    sp["eos_token_ids"] = list(dict.fromkeys(i for i in (eos, eot, eom, *eog) if i is not None))
    sp["eot_token_id"] = eot
    sp["pad_token_id"] = pad
    if bos is not None and bos < len(tokens):
        sp["bos_token"] = tokens[bos]
    if eos is not None and eos < len(tokens):
        sp["eos_token"] = tokens[eos]
    add_bos = f.get("tokenizer.ggml.add_bos_token")
    # llama.cpp's defaults when the key is absent: SPM/WordPiece and the llama3/tekken BPE families add BOS.
    sp["add_bos_token"] = bool(add_bos) if add_bos is not None else default_add_bos(f)
    add_eos = f.get("tokenizer.ggml.add_eos_token")
    if add_eos is not None:
        sp["add_eos_token"] = bool(add_eos)
    return sp


def read_gguf(path: str | os.PathLike[str], name: str | None = None) -> Model:
    """A Model from a GGUF file (tensors are memmap views, tokenizer converted to tokenizer.json)."""
    p = pathlib.Path(path)
    g = parse_gguf(p)
    tensors = _tensors(g)  # first: a later split part is refused with a clear message
    gguf_arch = str(g.fields.get("general.architecture") or "")
    if not gguf_arch:
        raise FormatError(f"{p.name}: GGUF file has no general.architecture")
    tok_json = build_tokenizer_json(g.fields) if "tokenizer.ggml.tokens" in g.fields else None
    template = g.fields.get("tokenizer.chat_template")
    split = _SPLIT_NAME.match(p.name)
    model_name = name or (split["prefix"] if split else p.stem)
    return Model(
        name=model_name,
        architecture=_ARCH.get(gguf_arch, gguf_arch),
        tensors=tensors,
        config=_config(g, gguf_arch, tensors),
        metadata=_metadata(g),
        tokenizer_json=tok_json,
        chat_template=template if isinstance(template, str) else None,
        special_tokens={**_special_tokens(g), **keep_special_text(template if isinstance(template, str) else None)},
        source_format="gguf",
        naming="gguf",
    )

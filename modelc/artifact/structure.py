"""check_structure: refuse at pack time a model its architecture cannot load (nothing unrunnable is stored).

For each architecture modelc runs, every tensor the loader (modelc/models/*.py) requires must be
present with the shape the config implies; the error names the tensor and both shapes. The rules
mirror the loaders' own reads (fused QKV / gate_up, optional biases, a tied output head) without
importing them: pack must not pay for numba. Architectures without rules here (MLP, ONNX, BERT
and any architecture added later) are left to their readers. For every architecture, the tokenizer's
ids must fit the token-embedding rows (check_vocabulary).
"""

from __future__ import annotations

import json
from typing import Any

from modelc.errors import FormatError, ModelcError

LLAMA_FAMILY = ("llama", "mistral", "qwen2", "phi3")

# models/llama_layer.py loads by these names (adding the norms and projections of the variants).
LLAMA_NAMES = {
    "hf": {
        "embed": "model.embed_tokens.weight",
        "norm": "model.norm.weight",
        "lm_head": "lm_head.weight",
        "attn_norm": "model.layers.{i}.input_layernorm.weight",
        "ffn_norm": "model.layers.{i}.post_attention_layernorm.weight",
        "q": "model.layers.{i}.self_attn.q_proj",
        "k": "model.layers.{i}.self_attn.k_proj",
        "v": "model.layers.{i}.self_attn.v_proj",
        "o": "model.layers.{i}.self_attn.o_proj",
        "qkv": "model.layers.{i}.self_attn.qkv_proj",
        "gate": "model.layers.{i}.mlp.gate_proj",
        "up": "model.layers.{i}.mlp.up_proj",
        "down": "model.layers.{i}.mlp.down_proj",
        "gate_up": "model.layers.{i}.mlp.gate_up_proj",
    },
    "gguf": {
        "embed": "token_embd.weight",
        "norm": "output_norm.weight",
        "lm_head": "output.weight",
        "attn_norm": "blk.{i}.attn_norm.weight",
        "ffn_norm": "blk.{i}.ffn_norm.weight",
        "q": "blk.{i}.attn_q",
        "k": "blk.{i}.attn_k",
        "v": "blk.{i}.attn_v",
        "o": "blk.{i}.attn_output",
        "qkv": "blk.{i}.attn_qkv",
        "gate": "blk.{i}.ffn_gate",
        "up": "blk.{i}.ffn_up",
        "down": "blk.{i}.ffn_down",
        "gate_up": "blk.{i}.ffn_up",
    },
}
# models/gpt2.py loads by these names too.
GPT2_NAMES = {
    "hf": {
        "wte": "transformer.wte.weight",
        "wpe": "transformer.wpe.weight",
        "ln_f": "transformer.ln_f",
        "ln1": "transformer.h.{i}.ln_1",
        "qkv": "transformer.h.{i}.attn.c_attn",
        "o": "transformer.h.{i}.attn.c_proj",
        "ln2": "transformer.h.{i}.ln_2",
        "up": "transformer.h.{i}.mlp.c_fc",
        "down": "transformer.h.{i}.mlp.c_proj",
        "lm_head": "lm_head.weight",
    },
    "gguf": {
        "wte": "token_embd.weight",
        "wpe": "position_embd.weight",
        "ln_f": "output_norm",
        "ln1": "blk.{i}.attn_norm",
        "qkv": "blk.{i}.attn_qkv",
        "o": "blk.{i}.attn_output",
        "ln2": "blk.{i}.ffn_norm",
        "up": "blk.{i}.ffn_up",
        "down": "blk.{i}.ffn_down",
        "lm_head": "output.weight",
    },
}


def output_head(tensors: Any, naming: str) -> str | None:
    """The llama family's output projection: its own tensor where the file has one, else the tied embedding;
    None when it has neither (or the naming is unknown)."""
    names = LLAMA_NAMES.get(naming)
    if names is None:
        return None
    for name in (names["lm_head"], names["embed"]):
        if name in tensors:
            return name
    return None


class StructureError(FormatError):
    """The model's tensors do not match what its architecture and config need."""


def check_structure(model: Any) -> None:
    """Raise StructureError (one line) when `model` (an IR Model or Artifact) cannot be loaded as its architecture."""
    arch = str(getattr(model, "architecture", "") or "")
    naming = getattr(model, "naming", "hf") or "hf"
    check_vocabulary(model)
    if arch in LLAMA_FAMILY and naming in LLAMA_NAMES:
        _check_llama(_Tensors(model), dict(model.config or {}), LLAMA_NAMES[naming])
    elif arch == "gpt2" and naming in GPT2_NAMES:
        _check_gpt2(_Tensors(model), dict(model.config or {}), naming)
    check_tokenizer(model)
    check_chat_template(model)


def check_tokenizer(model: Any) -> None:
    """The stored tokenizer.json must be one the tokenizers library builds, as every load does: a GGUF whose
    merges name a token its vocabulary lacks (or that lists one token twice) converts to a tokenizer.json
    that packed, then failed every load with 'invalid tokenizer.json'."""
    text = getattr(model, "tokenizer_json", None)
    if not isinstance(text, str) or not text:
        return
    from modelc.tokenizer.build import check_builds  # lazy: only where a model has a tokenizer

    check_builds(text)  # once: an HF folder's reader built this same text already (formats/hf.py)


def check_chat_template(model: Any) -> None:
    """The model's chat template must compile: the runtime compiles it when the model loads, and a template that
    does not would stop the model from loading at all (completions and embeddings too)."""
    source = getattr(model, "chat_template", None)
    if not isinstance(source, str) or not source:
        return
    from modelc.tokenizer.chat_template import ChatTemplate  # lazy: minijinja only where a model has a template

    try:
        ChatTemplate(source)
    except FormatError:
        raise
    except ModelcError as e:
        why = str(e).removeprefix("invalid chat template: ")
        raise FormatError(
            f"the model's chat template does not compile ({why}); replace it with --chat-template FILE"
        ) from None


# The token-embedding tensor of every family modelc reads, under HF and GGUF names.
EMBEDDING_NAMES = (
    "model.embed_tokens.weight",
    "token_embd.weight",
    "transformer.wte.weight",
    "wte.weight",
    "model.embed_tokens",
    "tok_embeddings.weight",
    "transformer.word_embeddings.weight",
    "bert.embeddings.word_embeddings.weight",
    "roberta.embeddings.word_embeddings.weight",
    "embeddings.word_embeddings.weight",
    "model.language_model.embed_tokens.weight",
)


def check_vocabulary(model: Any) -> None:
    """Every id the tokenizer can produce must have an embedding row. More rows than tokens is fine (Qwen
    and others pad the embedding to a round size; llama.cpp's converter and transformers accept it); a
    tokenizer id beyond the rows is refused, as llama.cpp's converter refuses it."""
    text = getattr(model, "tokenizer_json", None)
    rows = embedding_rows(model)
    if not text or rows is None:
        return
    top = tokenizer_max_id(text)
    if top is not None and top >= rows:
        what = f"{getattr(model, 'architecture', '') or 'the'} model {getattr(model, 'name', '') or ''}".strip()
        raise StructureError(
            f"{what}: its tokenizer has {top + 1} tokens (ids up to {top}) but the model has {rows} token "
            f"embedding rows, so ids {rows}..{top} have none; pack it with the tokenizer it was trained with"
        )


def embedding_rows(model: Any) -> int | None:
    """Rows of the model's token-embedding tensor, None when it has none modelc knows (MLP, ONNX...)."""
    tensors = getattr(model, "tensors", None) or {}
    for name in EMBEDDING_NAMES:
        t = tensors.get(name)
        if t is not None and len(t.shape) == 2:
            return int(t.shape[0])
    return None


def tokenizer_max_id(tokenizer_json: str) -> int | None:
    """The highest token id of a tokenizer.json (model vocabulary and added tokens); None if unreadable."""
    try:
        data = json.loads(tokenizer_json)
    except ValueError:
        return None  # not this check's to report: reading the tokenizer says what is wrong
    if not isinstance(data, dict):
        return None
    ids = [t.get("id") for t in data.get("added_tokens") or [] if isinstance(t, dict)]
    vocab = (data.get("model") or {}).get("vocab") if isinstance(data.get("model"), dict) else None
    if isinstance(vocab, dict):
        ids += list(vocab.values())
    elif isinstance(vocab, list):  # Unigram: [piece, score] pairs, ids by position
        ids.append(len(vocab) - 1)
    ints = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
    return max(ints) if ints else None


class _Tensors:
    def __init__(self, model: Any) -> None:
        self.tensors = model.tensors
        self.what = f"{getattr(model, 'architecture', '')} model {getattr(model, 'name', '') or ''}".strip()

    def has(self, name: str) -> bool:
        return name in self.tensors

    def shape(self, name: str) -> tuple[int, ...]:
        t = self.tensors.get(name)
        if t is None:
            raise StructureError(f"{self.what} lacks tensor {name}")
        return tuple(int(d) for d in t.shape)

    def matrix(self, name: str, rows: int, cols: int) -> None:
        got = self.shape(name)
        if got != (rows, cols):
            raise StructureError(f"tensor {name} has shape {_fmt(got)}, the config implies {_fmt((rows, cols))}")

    def vector(self, name: str, size: int) -> None:
        got = self.shape(name)
        if _numel(got) != size:
            raise StructureError(f"tensor {name} has shape {_fmt(got)}, the config implies ({size},)")

    def maybe_vector(self, name: str, size: int) -> None:
        if self.has(name):
            self.vector(name, size)


def _config_ints(cfg: dict[str, Any], what: str, *keys: str) -> list[int]:
    out = []
    for key in keys:
        value = cfg.get(key)
        if value is None:
            raise StructureError(f"{what}: the model config lacks {key}")
        try:
            n = int(value)
        except (TypeError, ValueError):
            raise StructureError(f"{what}: config {key} is {value!r}, not an integer") from None
        if n <= 0:
            raise StructureError(f"{what}: config {key} is {n}; it must be positive")
        out.append(n)
    return out


def _check_llama(w: _Tensors, cfg: dict[str, Any], names: dict[str, str]) -> None:
    C, H, L, V = _config_ints(cfg, w.what, "hidden_size", "num_attention_heads", "num_hidden_layers", "vocab_size")
    moe = bool(cfg.get("num_experts"))  # expert FFN tensors are the MoE loader's to check (models/moe.py)
    (F,) = (0,) if moe else _config_ints(cfg, w.what, "intermediate_size")
    pre_norms = str(cfg.get("norm_layout") or "pre") == "pre"  # post / sandwich layouts: other norm tensors
    K = int(cfg.get("num_key_value_heads") or H)
    D = int(cfg.get("head_dim") or C // H)
    qd, kd = H * D, K * D
    _embedding(w, names["embed"], V, C)
    for i in range(L):
        n = {k: v.format(i=i) for k, v in names.items()}
        if pre_norms:
            w.vector(n["attn_norm"], C)
            w.vector(n["ffn_norm"], C)
        if w.has(n["q"] + ".weight"):
            for p, rows in (("q", qd), ("k", kd), ("v", kd)):
                w.matrix(n[p] + ".weight", rows, C)
                w.maybe_vector(n[p] + ".bias", rows)
        elif w.has(n["qkv"] + ".weight"):
            w.matrix(n["qkv"] + ".weight", qd + 2 * kd, C)
            w.maybe_vector(n["qkv"] + ".bias", qd + 2 * kd)
        else:
            raise StructureError(f"{w.what} lacks tensor {n['q']}.weight (layer {i} has no attention weights)")
        w.matrix(n["o"] + ".weight", C, qd)
        w.maybe_vector(n["o"] + ".bias", C)
        if moe:
            continue
        if w.has(n["gate"] + ".weight"):
            for p in ("gate", "up"):
                w.matrix(n[p] + ".weight", F, C)
                w.maybe_vector(n[p] + ".bias", F)
        else:
            w.matrix(n["gate_up"] + ".weight", 2 * F, C)
            w.maybe_vector(n["gate_up"] + ".bias", 2 * F)
        w.matrix(n["down"] + ".weight", C, F)
        w.maybe_vector(n["down"] + ".bias", C)
    w.vector(names["norm"], C)
    w.matrix(names["lm_head"] if w.has(names["lm_head"]) else names["embed"], V, C)
    for key in ("rope_freqs_tensor", "rope_freqs_long_tensor"):
        if cfg.get(key):
            R = int(cfg.get("rotary_dim") or D * float(cfg.get("partial_rotary_factor") or 1.0))
            w.vector(str(cfg[key]), R // 2)


def _check_gpt2(w: _Tensors, cfg: dict[str, Any], naming: str) -> None:
    C, L, V = _config_ints(cfg, w.what, "hidden_size", "num_hidden_layers", "vocab_size")
    F = int(cfg.get("intermediate_size") or 4 * C)
    names = GPT2_NAMES[naming]
    if naming == "hf" and not w.has(names["wte"]):  # HF GPT-2 names with or without "transformer."
        names = {k: v.removeprefix("transformer.") for k, v in names.items()}
    conv1d = naming == "hf"  # HF Conv1D weights are stored (in, out)

    def mat(name: str, rows: int, cols: int) -> None:
        w.matrix(name, *((cols, rows) if conv1d else (rows, cols)))

    _embedding(w, names["wte"], V, C)
    wpe = w.shape(names["wpe"])
    if _numel(wpe) % C:
        raise StructureError(f"tensor {names['wpe']} has shape {_fmt(wpe)}, the config implies (positions, {C})")
    for i in range(L):
        n = {k: v.format(i=i) for k, v in names.items()}
        for p, size in (("ln1", C), ("ln2", C)):
            w.vector(n[p] + ".weight", size)
            w.vector(n[p] + ".bias", size)
        mat(n["qkv"] + ".weight", 3 * C, C)
        w.vector(n["qkv"] + ".bias", 3 * C)
        mat(n["o"] + ".weight", C, C)
        w.vector(n["o"] + ".bias", C)
        mat(n["up"] + ".weight", F, C)
        w.vector(n["up"] + ".bias", F)
        mat(n["down"] + ".weight", C, F)
        w.vector(n["down"] + ".bias", C)
    w.vector(names["ln_f"] + ".weight", C)
    w.vector(names["ln_f"] + ".bias", C)
    w.matrix(names["lm_head"] if w.has(names["lm_head"]) else names["wte"], V, C)


def _embedding(w: _Tensors, name: str, vocab: int, hidden: int) -> None:
    """(V', C) with V' >= vocab_size: every token id the config allows has a row."""
    got = w.shape(name)
    if len(got) != 2 or got[1] != hidden or got[0] < vocab:
        raise StructureError(f"tensor {name} has shape {_fmt(got)}, the config implies {_fmt((vocab, hidden))}")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _fmt(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"

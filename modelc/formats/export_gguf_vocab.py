"""An HF tokenizer.json -> llama.cpp's tokenizer.ggml.* keys, as convert_hf_to_gguf.py writes them.

Two kinds of tokenizer have a GGUF form here:
- SentencePiece-style BPE (BPE + byte_fallback: LLaMA 2, Mistral v0.1, Phi-3) -> model "llama":
  tokens, types and synthetic scores (export_gguf_tokenizer), pre "default".
- byte-level BPE (GPT-2, LLaMA 3, Qwen2, Phi-4) -> model "gpt2": tokens, types, merges and the
  pre-tokenizer name (export_gguf_pre). Ids past the tokenizer's vocabulary up to the model's
  vocab_size become "[PAD{i}]" UNUSED pieces, added tokens CONTROL (special, or `<|...|>` looking)
  or USER_DEFINED, as convert_hf_to_gguf's get_vocab_base does.
Any other tokenizer (WordLevel, Unigram, none) gets no keys: llama.cpp then refuses the file
("key not found: tokenizer.ggml.model") instead of misreading it; modelc keeps its own copy in
modelc.tokenizer_json.
"""

from __future__ import annotations

import json
from typing import Any

from modelc.errors import UnsupportedError
from modelc.formats.export_gguf_pre import byte_level_pre_name
from modelc.formats.export_gguf_tokenizer import TOKEN_CONTROL, TOKEN_NORMAL, TOKEN_USER_DEFINED, tokenizer_arrays

TOKEN_UNUSED = 5


def vocab_metadata(source: Any) -> dict[str, Any]:
    """tokenizer.ggml.* keys for `source`'s HF tokenizer.json; {} when it has no GGUF form."""
    if not source.tokenizer_json:
        return {}
    doc = json.loads(source.tokenizer_json)
    model = doc.get("model") or {}
    if model.get("type") != "BPE":
        return {}
    n_vocab = int(source.config.get("vocab_size") or 0)
    if model.get("byte_fallback"):
        kv = _spm(source, doc, model, n_vocab)
    elif (pre := byte_level_pre_name(doc)) is not None:
        kv = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": pre, **_byte_level(doc, model, n_vocab)}
    else:
        return {}
    kv.update(_special_ids(source, len(kv["tokenizer.ggml.tokens"])))
    return kv


def _spm(source: Any, doc: dict, model: dict, n_vocab: int) -> dict[str, Any]:
    unk = model["vocab"].get(model.get("unk_token") or "<unk>")  # HF llama files often leave unk_token unset
    kv: dict[str, Any] = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.pre": "default"}
    if unk is not None:
        kv["tokenizer.ggml.unknown_token_id"] = unk
    arrays = tokenizer_arrays(source.tokenizer_json, kv)
    tokens, types, scores = (arrays[f"tokenizer.ggml.{k}"] for k in ("tokens", "token_type", "scores"))
    _check_size(len(tokens), n_vocab)
    for i in range(len(tokens), n_vocab):  # convert_hf_to_gguf's padding of a larger embedding
        tokens.append(f"[PAD{i}]")
        types.append(TOKEN_UNUSED)
        scores.append(-1000.0)
    return {**kv, **arrays}


def _byte_level(doc: dict, model: dict, n_vocab: int) -> dict[str, Any]:
    by_id = {int(i): t for t, i in model["vocab"].items()}
    added = {int(a["id"]): a for a in doc.get("added_tokens") or []}
    n = max(n_vocab, 0) or max([*by_id, *added], default=-1) + 1
    _check_size(max([*by_id, *added], default=-1) + 1, n)
    tokens, types = [], []
    for i in range(n):
        if i in added:
            text = added[i]["content"]
            special = added[i].get("special") or _looks_special(text)
            tokens.append(text)
            types.append(TOKEN_CONTROL if special else TOKEN_USER_DEFINED)
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(TOKEN_NORMAL)
        else:
            tokens.append(f"[PAD{i}]")
            types.append(TOKEN_UNUSED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    return {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types, "tokenizer.ggml.merges": merges}


def _looks_special(text: str) -> bool:
    """convert_hf_to_gguf's does_token_look_special: added tokens some models forget to mark special."""
    return (
        text in ("<pad>", "<mask>", "<2mass>", "[@BOS@]")
        or (text.startswith("<|") and text.endswith("|>"))
        or (text.startswith("<｜") and text.endswith("｜>"))
        or (text.startswith("<unused") and text.endswith(">"))
    )


def _check_size(n_tokens: int, n_vocab: int) -> None:
    if n_vocab and n_tokens > n_vocab:
        raise UnsupportedError(f"the tokenizer has {n_tokens} tokens but the model only {n_vocab} embedding rows")


def _special_ids(source: Any, n_tokens: int) -> dict[str, Any]:
    """bos/eos/pad ids and add_bos/add_eos as modelc's tokenizer applies them (llama.cpp's defaults differ by pre)."""
    # lazy: the tokenizer/template stack loads only when this path runs
    from modelc.tokenizer import Tokenizer

    sp = source.special_tokens or {}
    tok = Tokenizer.from_json(source.tokenizer_json, sp)
    eos = (sp.get("eos_token_ids") or [None])[0]
    kv: dict[str, Any] = {}
    for key, val in (("bos_token_id", tok.bos_id), ("eos_token_id", eos), ("padding_token_id", sp.get("pad_token_id"))):
        if val is not None and 0 <= int(val) < n_tokens:
            kv[f"tokenizer.ggml.{key}"] = int(val)
    kv["tokenizer.ggml.add_bos_token"] = tok.adds_bos
    probe = tok.encode("a")  # a post-processor (or add_eos_token) that appends EOS
    if sp.get("add_eos_token") or (len(probe) > 1 and probe[-1] in tok.eos_ids):
        kv["tokenizer.ggml.add_eos_token"] = True
    return kv

"""GGUF tokenizer metadata (tokenizer.ggml.*) -> a `tokenizers` tokenizer.json string, built once.

Four models, as llama.cpp names them:
- "gemma4": BPE on raw UTF-8 after space -> U+2581 (SentencePiece style), byte fallback, BOS always;
- "gpt2": byte-level BPE with the GGUF merges; the pre-tokenizer regexes are llama.cpp's
  (src/llama-vocab.cpp) chosen by tokenizer.ggml.pre.
- "llama": SentencePiece-style BPE with byte fallback; merges derived from the scores;
  "▁" prepended by a normalizer plus space -> "▁" (NOT Metaspace: see shared/LIBRARIES.md).
- "bert": WordPiece.
Control (3) and user-defined (4) tokens become added tokens (control ones special). The
post-processor adds BOS/EOS (or CLS/SEP) the way the GGUF's add_bos/add_eos flags say, so
`encode(text, add_special_tokens=True)` behaves like llama.cpp with add_special.
"""

from __future__ import annotations

import json
from typing import Any

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.gguf_pretokenizer import PRE_TOKENIZERS, default_add_bos

__all__ = ["EOG_TEXTS", "EOT_TEXTS", "PRE_TOKENIZERS", "build_tokenizer_json", "default_add_bos", "token_types"]

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# llama.cpp's vocab loader (src/llama-vocab.cpp) finds the turn-end and end-of-generation tokens by
# their text, and forces each one it finds to control type even when the GGUF says otherwise ("control-
# looking token ... its type will be overridden"): e.g. Gemma's <end_of_turn>, a fine-tune's <|im_end|>.
EOT_TEXTS = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<EOT>",
    "_<EOT>",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
)
EOG_TEXTS = (*EOT_TEXTS, "<|eom_id|>", "<EOS_TOKEN>", "<|return|>", "<|call|>", "<|end_of_text|>")


def token_types(fields: dict[str, Any]) -> list[int]:
    """tokenizer.ggml.token_type as llama.cpp uses it: end-of-generation texts forced to control (3)."""
    tokens = fields.get("tokenizer.ggml.tokens") or []
    raw = fields.get("tokenizer.ggml.token_type")
    types = [int(t) for t in raw] if raw is not None else [TOKEN_NORMAL] * len(tokens)
    if len(types) != len(tokens):
        raise FormatError("GGUF tokenizer.ggml.token_type has a different length than tokenizer.ggml.tokens")
    eog = set(EOG_TEXTS)
    return [TOKEN_CONTROL if tok in eog else ty for tok, ty in zip(tokens, types, strict=True)]


def _added_token(tid: int, content: str, special: bool) -> dict[str, Any]:
    return {
        "id": tid,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": special,
    }


def _added_tokens(tokens: list[str], types: list[int]) -> list[dict[str, Any]]:
    out = []
    for tid, (tok, ty) in enumerate(zip(tokens, types, strict=True)):
        if ty in (TOKEN_CONTROL, TOKEN_UNKNOWN) or (ty == TOKEN_USER_DEFINED and tok):
            out.append(_added_token(tid, tok, ty != TOKEN_USER_DEFINED))
    return out


def _token_id(fields: dict[str, Any], key: str, n: int) -> int | None:
    v = fields.get(f"tokenizer.ggml.{key}")
    if v is None or isinstance(v, bool | str | list):
        return None
    v = int(v)
    return v if 0 <= v < n else None


def _post_processor(tokens: list[str], bos: int | None, eos: int | None, add_bos: bool, add_eos: bool) -> Any:
    if not (add_bos and bos is not None) and not (add_eos and eos is not None):
        return None
    single: list[dict[str, Any]] = []
    pair: list[dict[str, Any]] = []
    specials: dict[str, Any] = {}
    for use, tid in ((add_bos, bos), (add_eos, eos)):
        if use and tid is not None:
            specials[tokens[tid]] = {"id": tokens[tid], "ids": [tid], "tokens": [tokens[tid]]}
    if add_bos and bos is not None:
        single.append({"SpecialToken": {"id": tokens[bos], "type_id": 0}})
        pair.append({"SpecialToken": {"id": tokens[bos], "type_id": 0}})
    single.append({"Sequence": {"id": "A", "type_id": 0}})
    pair.append({"Sequence": {"id": "A", "type_id": 0}})
    if add_eos and eos is not None:
        single.append({"SpecialToken": {"id": tokens[eos], "type_id": 0}})
        pair.append({"SpecialToken": {"id": tokens[eos], "type_id": 0}})
    pair.append({"Sequence": {"id": "B", "type_id": 1}})
    if add_eos and eos is not None:
        pair.append({"SpecialToken": {"id": tokens[eos], "type_id": 1}})
    return {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials}


def _bpe_model(vocab: dict[str, int], merges: list[list[str]], **kw: Any) -> dict[str, Any]:
    model = {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": vocab,
        "merges": merges,
    }
    model.update(kw)
    return model


def _vocab(tokens: list[str]) -> dict[str, int]:
    vocab: dict[str, int] = {}
    for i, t in enumerate(tokens):
        vocab.setdefault(t, i)  # a duplicated piece keeps its first id, as llama.cpp's token_to_id does
    return vocab


def _gpt2(fields: dict[str, Any], tokens: list[str]) -> dict[str, Any]:
    pre = str(fields.get("tokenizer.ggml.pre") or "default")
    if pre not in PRE_TOKENIZERS:
        raise UnsupportedError(f"unsupported GGUF pre-tokenizer {pre!r} (tokenizer.ggml.pre)")
    regexes, ignore_merges, _ = PRE_TOKENIZERS[pre]
    raw_merges = fields.get("tokenizer.ggml.merges")
    if not isinstance(raw_merges, list):
        raise FormatError("GGUF BPE tokenizer has no tokenizer.ggml.merges")
    vocab = _vocab(tokens)
    merges = []
    for m in raw_merges:
        a, sep, b = m.partition(" ")
        if not sep or a not in vocab or b not in vocab:
            continue  # llama.cpp also ignores merges it cannot use
        merges.append([a, b])
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [*splits, byte_level]},
        "model": _bpe_model(vocab, merges, ignore_merges=ignore_merges),
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
    }


def _gemma4(fields: dict[str, Any], tokens: list[str]) -> dict[str, Any]:
    """Gemma 4 ("gemma4"): BPE over raw UTF-8 after SentencePiece's space -> U+2581, with the GGUF merges;
    text split only into runs of newlines and runs of other characters, as llama.cpp's gemma4 pre-type."""
    vocab = _vocab(tokens)
    merges = []
    for m in fields.get("tokenizer.ggml.merges") or []:
        a, sep, b = m.partition(" ")
        if sep and a in vocab and b in vocab:
            merges.append([a, b])
    split = {"type": "Split", "pattern": {"Regex": "[^\\n]+|[\\n]+"}, "behavior": "Isolated", "invert": False}
    return {
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": "▁"},
        "pre_tokenizer": split,
        "model": _bpe_model(vocab, merges, byte_fallback=True),
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
            ],
        },
    }


def _spm_merges(tokens: list[str], scores: list[float], types: list[int], vocab: dict[str, int]) -> list[list[str]]:
    """SentencePiece merges: every split of a normal piece into two pieces, best-scored piece first.

    NOTE: llama.cpp's SPM tokenizer repeatedly merges the adjacent pair whose concatenation
    is the highest-scoring piece (leftmost on ties). A BPE merge list ranked by the merged
    piece's score (then by the ids of the halves) reproduces it.
    """
    cands = []
    for tid, piece in enumerate(tokens):
        if types[tid] not in (TOKEN_NORMAL, TOKEN_USER_DEFINED) or len(piece) < 2:
            continue
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            lid, rid = vocab.get(left), vocab.get(right)
            if lid is not None and rid is not None:
                cands.append((-scores[tid], tid, lid, rid, left, right))
    cands.sort()
    return [[c[4], c[5]] for c in cands]


def _spm(fields: dict[str, Any], tokens: list[str], types: list[int]) -> dict[str, Any]:
    scores = fields.get("tokenizer.ggml.scores")
    if scores is None or len(scores) != len(tokens):
        raise FormatError("GGUF SentencePiece tokenizer needs tokenizer.ggml.scores, one per token")
    scores = [float(s) for s in scores]
    vocab = _vocab(tokens)
    unk = _token_id(fields, "unknown_token_id", len(tokens))
    add_space_prefix = fields.get("tokenizer.ggml.add_space_prefix", True)
    norm = [{"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]
    if add_space_prefix:
        norm.insert(0, {"type": "Prepend", "prepend": "▁"})
    decoders: list[dict[str, Any]] = [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
    ]
    if add_space_prefix:
        decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
    return {
        "normalizer": {"type": "Sequence", "normalizers": norm},
        "pre_tokenizer": None,
        "model": _bpe_model(
            vocab,
            _spm_merges(tokens, scores, types, vocab),
            unk_token=tokens[unk] if unk is not None else None,
            fuse_unk=True,
            byte_fallback=True,
        ),
        "decoder": {"type": "Sequence", "decoders": decoders},
    }


def _wordpiece_pieces(tokens: list[str], types: list[int]) -> list[str]:
    """llama.cpp's converter writes word-initial pieces as "▁x" and continuations bare; WordPiece wants "x"/"##x"."""
    out = []
    for tok, ty in zip(tokens, types, strict=True):
        if ty != TOKEN_NORMAL:
            out.append(tok)
        elif tok.startswith("▁"):
            out.append(tok[1:])
        else:
            out.append("##" + tok)
    return out


def _wordpiece(fields: dict[str, Any], tokens: list[str], types: list[int]) -> dict[str, Any]:
    unk = _token_id(fields, "unknown_token_id", len(tokens))
    unk_token = tokens[unk] if unk is not None else "[UNK]"
    pieces = _wordpiece_pieces(tokens, types)
    return {
        "normalizer": {
            "type": "BertNormalizer",
            "clean_text": True,
            "handle_chinese_chars": True,
            "strip_accents": None,
            "lowercase": bool(fields.get("tokenizer.ggml.lowercase", True)),  # set by hf_tokenizer for vocab.txt
        },
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "model": {
            "type": "WordPiece",
            "unk_token": unk_token,
            "continuing_subword_prefix": "##",
            "max_input_chars_per_word": 100,
            "vocab": _vocab(pieces),
        },
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
    }


def build_tokenizer_json(fields: dict[str, Any]) -> str:
    """tokenizer.json text for the tokenizer described by a GGUF file's key/values."""
    tokens = fields.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, list) or not tokens:
        raise FormatError("GGUF file has no tokenizer.ggml.tokens")
    types = token_types(fields)
    kind = fields.get("tokenizer.ggml.model")
    if kind == "gpt2":
        body = _gpt2(fields, tokens)
        bos_key, eos_key = "bos_token_id", "eos_token_id"
    elif kind == "gemma4":
        body = _gemma4(fields, tokens)
        bos_key, eos_key = "bos_token_id", "eos_token_id"
    elif kind == "llama":
        body = _spm(fields, tokens, types)
        bos_key, eos_key = "bos_token_id", "eos_token_id"
    elif kind == "bert":
        body = _wordpiece(fields, tokens, types)
        bos_key, eos_key = "cls_token_id", "seperator_token_id"
    else:
        raise UnsupportedError(f"unsupported GGUF tokenizer model {kind!r} (tokenizer.ggml.model)")
    n = len(tokens)
    bos = (
        _token_id(fields, bos_key, n)
        if kind != "bert"
        else (_token_id(fields, bos_key, n) or _token_id(fields, "bos_token_id", n))
    )
    eos = (
        _token_id(fields, eos_key, n)
        if kind != "bert"
        else (_token_id(fields, eos_key, n) or _token_id(fields, "eos_token_id", n))
    )
    add_bos = fields.get("tokenizer.ggml.add_bos_token", default_add_bos(fields)) or kind == "gemma4"  # as llama.cpp
    add_eos = fields.get("tokenizer.ggml.add_eos_token", kind == "bert")
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": _added_tokens(tokens, types),
        "normalizer": body["normalizer"],
        "pre_tokenizer": body["pre_tokenizer"],
        "post_processor": _post_processor(tokens, bos, eos, bool(add_bos), bool(add_eos)),
        "decoder": body["decoder"],
        "model": body["model"],
    }
    return json.dumps(doc, ensure_ascii=False)

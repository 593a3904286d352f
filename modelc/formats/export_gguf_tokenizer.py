"""tokenizer.json (as built from GGUF by gguf_tokenizer.py) -> the tokenizer.ggml.* arrays, for GGUF export.

Inverts gguf_tokenizer for its "gpt2" (byte-level BPE), "llama" (SentencePiece-style BPE) and
"bert" (WordPiece) models: tokens by id, token types, and merges (gpt2) or scores (llama). The original SPM scores
are gone, so each piece gets a synthetic score that ranks pieces exactly as the stored merge
list does (-(index of the first merge producing it)); the reader rebuilds the same merge list,
and llama.cpp merges in the same order.
"""

from __future__ import annotations

import json
import re
from typing import Any

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_BYTE = 1, 2, 3, 4, 6
_BYTE_PIECE = re.compile(r"<0x[0-9A-F]{2}>")


def tokenizer_arrays(tokenizer_json: str, metadata: dict[str, Any]) -> dict[str, list[Any]]:
    """{"tokenizer.ggml.tokens": [...], "tokenizer.ggml.token_type": [...], merges or scores}; {} if unknown."""
    kind = metadata.get("tokenizer.ggml.model")
    doc = json.loads(tokenizer_json)
    model = doc.get("model") or {}
    if (kind, model.get("type")) not in (("gpt2", "BPE"), ("llama", "BPE"), ("bert", "WordPiece")):
        return {}
    tokens, types = _tokens_and_types(doc, model, kind, metadata)
    out: dict[str, list[Any]] = {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.token_type": types}
    if kind == "bert":  # llama.cpp spells word-initial pieces "▁x" and continuations bare
        out["tokenizer.ggml.tokens"] = [
            (t[2:] if t.startswith("##") else "▁" + t) if ty == TOKEN_NORMAL else t
            for t, ty in zip(tokens, types, strict=True)
        ]
        return out
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    if kind == "gpt2":
        out["tokenizer.ggml.merges"] = merges
    else:
        out["tokenizer.ggml.scores"] = _synthetic_scores(tokens, merges, model["vocab"])
    return out


def _tokens_and_types(doc: dict, model: dict, kind: str, metadata: dict[str, Any]) -> tuple[list[str], list[int]]:
    by_id: dict[int, str] = {int(i): t for t, i in model["vocab"].items()}
    added = {int(a["id"]): a for a in doc.get("added_tokens") or []}
    for i, a in added.items():
        by_id.setdefault(i, a["content"])
    n = max(by_id, default=-1) + 1
    tokens = [by_id.get(i, f"[PAD{i}]") for i in range(n)]
    unk = metadata.get("tokenizer.ggml.unknown_token_id")
    types = []
    for i, tok in enumerate(tokens):
        if i in added:
            ty = TOKEN_UNKNOWN if i == unk else (TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED)
        elif kind == "llama" and _BYTE_PIECE.fullmatch(tok):
            ty = TOKEN_BYTE
        else:
            ty = TOKEN_NORMAL
        types.append(ty)
    return tokens, types


def _synthetic_scores(tokens: list[str], merges: list[str], vocab: dict[str, int]) -> list[float]:
    """Score = -(rank of the first merge producing the piece); pieces no merge produces rank below all."""
    first: dict[int, int] = {}
    for rank, m in enumerate(merges):
        left, _, right = m.partition(" ")
        tid = vocab.get(left + right)
        if tid is not None:
            first.setdefault(tid, rank)
    floor = -float(len(merges) + 1)
    return [-float(first[i]) if i in first else floor for i in range(len(tokens))]

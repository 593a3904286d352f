"""tokenizer.json for Hugging Face folders that ship none: SentencePiece `tokenizer.model` or BERT `vocab.txt`.

Both are turned into the GGUF-style fields gguf_tokenizer.py already converts (so a SentencePiece
BPE model tokenizes exactly as llama.cpp does). The protobuf is parsed by hand (a few fields of
sentencepiece_model.proto); nothing is executed. Unigram SentencePiece models are refused.
"""

from __future__ import annotations

import pathlib
import struct
from typing import Any

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.gguf_tokenizer import TOKEN_CONTROL, TOKEN_NORMAL, build_tokenizer_json

MAX_TOKENIZER_FILE_BYTES = 64 * 1024 * 1024
_SPM_BPE = 2  # TrainerSpec.ModelType.BPE


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise FormatError("tokenizer.model: truncated or malformed protobuf varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, pos


def _fields(buf: bytes) -> list[tuple[int, int, Any]]:
    """Top-level (field number, wire type, value) of one protobuf message."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = _varint(buf, pos)
        elif wire == 1:
            val, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            n, pos = _varint(buf, pos)
            val, pos = buf[pos : pos + n], pos + n
        elif wire == 5:
            val, pos = buf[pos : pos + 4], pos + 4
        else:
            raise FormatError(f"tokenizer.model: unsupported protobuf wire type {wire}")
        if pos > len(buf):
            raise FormatError("tokenizer.model: truncated protobuf")
        out.append((num, wire, val))
    return out


def parse_sentencepiece(data: bytes) -> dict[str, Any]:
    """pieces, scores, types, model_type, add_dummy_prefix from a sentencepiece ModelProto."""
    pieces: list[str] = []
    scores: list[float] = []
    types: list[int] = []
    model_type, add_dummy_prefix = 1, True
    for num, wire, val in _fields(data):
        if num == 1 and wire == 2:  # repeated SentencePiece {1: piece, 2: score, 3: type}
            piece, score, ty = "", 0.0, TOKEN_NORMAL
            for n2, w2, v2 in _fields(val):
                if n2 == 1 and w2 == 2:
                    piece = v2.decode("utf-8", errors="replace")
                elif n2 == 2 and w2 == 5:
                    (score,) = struct.unpack("<f", v2)
                elif n2 == 3 and w2 == 0:
                    ty = v2
            pieces.append(piece)
            scores.append(score)
            types.append(ty)
        elif num == 2 and wire == 2:  # TrainerSpec {3: model_type}
            model_type = next((v for n2, w2, v in _fields(val) if n2 == 3 and w2 == 0), 1)
        elif num == 3 and wire == 2:  # NormalizerSpec {3: add_dummy_prefix}
            add_dummy_prefix = bool(next((v for n2, w2, v in _fields(val) if n2 == 3 and w2 == 0), 1))
    if not pieces:
        raise FormatError("tokenizer.model holds no pieces")
    return {
        "pieces": pieces,
        "scores": scores,
        "types": types,
        "model_type": model_type,
        "add_dummy_prefix": add_dummy_prefix,
    }


def _read(path: pathlib.Path) -> bytes:
    if path.stat().st_size > MAX_TOKENIZER_FILE_BYTES:
        raise FormatError(f"{path.name} is larger than {MAX_TOKENIZER_FILE_BYTES} bytes")
    return path.read_bytes()


def _token_str(v: Any) -> str | None:
    if isinstance(v, dict):
        v = v.get("content")
    return v if isinstance(v, str) else None


def _ids(tokens: list[str], tok_cfg: dict[str, Any], fields: dict[str, Any], keys: dict[str, str]) -> None:
    index = {t: i for i, t in reversed(list(enumerate(tokens)))}
    for cfg_key, field_key in keys.items():
        tok = _token_str(tok_cfg.get(cfg_key))
        if tok is not None and tok in index:
            fields[f"tokenizer.ggml.{field_key}"] = index[tok]


def from_sentencepiece(path: pathlib.Path, tok_cfg: dict[str, Any]) -> str:
    spm = parse_sentencepiece(_read(path))
    if spm["model_type"] != _SPM_BPE:
        raise UnsupportedError(
            f"{path.name}: only BPE SentencePiece models are supported (model_type {spm['model_type']})"
        )
    fields: dict[str, Any] = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": spm["pieces"],
        "tokenizer.ggml.scores": spm["scores"],
        "tokenizer.ggml.token_type": spm["types"],
        "tokenizer.ggml.add_space_prefix": spm["add_dummy_prefix"],
        "tokenizer.ggml.add_bos_token": bool(tok_cfg.get("add_bos_token", True)),
        "tokenizer.ggml.add_eos_token": bool(tok_cfg.get("add_eos_token", False)),
    }
    fields["tokenizer.ggml.unknown_token_id"] = next((i for i, t in enumerate(spm["types"]) if t == 2), None)
    _ids(spm["pieces"], tok_cfg, fields, {"bos_token": "bos_token_id", "eos_token": "eos_token_id"})
    if "tokenizer.ggml.bos_token_id" not in fields and "<s>" in spm["pieces"]:
        fields["tokenizer.ggml.bos_token_id"] = spm["pieces"].index("<s>")
    if "tokenizer.ggml.eos_token_id" not in fields and "</s>" in spm["pieces"]:
        fields["tokenizer.ggml.eos_token_id"] = spm["pieces"].index("</s>")
    return build_tokenizer_json(fields)


def from_wordpiece_vocab(path: pathlib.Path, tok_cfg: dict[str, Any]) -> str:
    """BERT vocab.txt (one piece per line, "##" continuations) -> tokenizer.json."""
    lines = _read(path).decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    tokens, types = [], []
    for line in lines:
        special = len(line) > 2 and line.startswith("[") and line.endswith("]")
        types.append(TOKEN_CONTROL if special else TOKEN_NORMAL)
        # gguf_tokenizer expects llama.cpp's spelling: word starts "▁x", continuations bare
        tokens.append(line if special else (line[2:] if line.startswith("##") else "▁" + line))
    fields: dict[str, Any] = {
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.lowercase": bool(tok_cfg.get("do_lower_case", True)),
    }
    _ids(
        tokens,
        tok_cfg,
        fields,
        {"unk_token": "unknown_token_id", "cls_token": "cls_token_id", "sep_token": "seperator_token_id"},
    )
    for key, default in (("unknown_token_id", "[UNK]"), ("cls_token_id", "[CLS]"), ("seperator_token_id", "[SEP]")):
        if f"tokenizer.ggml.{key}" not in fields and default in tokens:
            fields[f"tokenizer.ggml.{key}"] = tokens.index(default)
    return build_tokenizer_json(fields)


def tokenizer_json_for_folder(folder: pathlib.Path, tok_cfg: dict[str, Any]) -> str | None:
    """tokenizer.json text built from tokenizer.model or vocab.txt, or None when the folder has neither."""
    if (folder / "tokenizer.model").is_file():
        return from_sentencepiece(folder / "tokenizer.model", tok_cfg)
    if (folder / "vocab.txt").is_file():
        return from_wordpiece_vocab(folder / "vocab.txt", tok_cfg)
    return None

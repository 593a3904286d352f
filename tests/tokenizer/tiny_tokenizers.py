"""Tokenizers built in the test process (no downloads): a byte-level BPE, a SentencePiece-style
BPE with <0xNN> byte fallback, and GPT-2's from a llama.cpp vocab GGUF."""

from __future__ import annotations

import functools
import json
import pathlib

import tokenizers
from tokenizers import decoders, models, normalizers, pre_tokenizers, trainers

CORPUS = [
    "Hello world! The quick brown fox jumps over the lazy dog.",
    "modelc turns model weights into one file and serves it fast on CPUs.",
    "你好，世界。今天天气很好。我们去公园散步吧。",
    "Emoji: 🦙 llama, 🚀 rocket, 👍🏽 thumbs, 🇫🇷 flag, ❤️ heart.",
    "Ünïcödé àccents: café, naïve, Straße, Ελληνικά, русский текст.",
    '{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}',
    "def f(x):\n    return x * 2  # tabs\tand\nnewlines\r\n",
] * 4


FROZEN = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer"


@functools.cache
def byte_level_json() -> str:
    """The frozen copy (BPE training is not deterministic across runs), else train one now."""
    frozen = FROZEN / "tiny-byte-level.json"
    return frozen.read_text() if frozen.is_file() else train_byte_level_json()


@functools.cache
def spm_json() -> str:
    frozen = FROZEN / "tiny-spm.json"
    return frozen.read_text() if frozen.is_file() else train_spm_json()


def train_byte_level_json(vocab_size: int = 600) -> str:
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    return tok.to_str()


BYTE_LEVEL_SPECIAL = {"bos_token_id": None, "eos_token_ids": [0, 2], "add_bos_token": False}


def train_spm_json(vocab_size: int = 500) -> str:
    """llama-style: "▁" prepended by the normalizer, BPE with byte fallback, ids 0/1/2 = <unk>/<s>/</s>."""
    tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<unk>", "<s>", "</s>"],
        limit_alphabet=60,  # rare characters must go through the byte tokens
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer=trainer)
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    for b in range(256):
        vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    spec["model"]["byte_fallback"] = True
    spec["decoder"] = {
        "type": "Sequence",
        "decoders": [
            {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
            {"type": "ByteFallback"},
            {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0},
        ],
    }
    spec["post_processor"] = {
        "type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
        "pair": [
            {"SpecialToken": {"id": "<s>", "type_id": 0}},
            {"Sequence": {"id": "A", "type_id": 0}},
            {"Sequence": {"id": "B", "type_id": 1}},
        ],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}},
    }
    return json.dumps(spec, ensure_ascii=False)


SPM_SPECIAL = {"bos_token_id": 1, "eos_token_ids": [2], "bos_token": "<s>", "eos_token": "</s>"}


def _gguf_fields(path: pathlib.Path) -> dict:
    from modelc.formats.gguf_file import parse_gguf  # ~100x faster than gguf.GGUFReader on big vocabularies

    return parse_gguf(path).fields


@functools.cache
def gpt2_json_from_gguf(path: pathlib.Path) -> str:
    """GPT-2's byte-level BPE from a llama.cpp vocab GGUF (tokens + merges), built here on purpose
    (independent of modelc.formats' own builder)."""
    fields = _gguf_fields(path)
    toks = list(fields["tokenizer.ggml.tokens"])
    merges = list(fields["tokenizer.ggml.merges"])
    types = [int(t) for t in fields["tokenizer.ggml.token_type"]]
    model = models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(toks, types, strict=True) if ty == 3])
    return tok.to_str()


GPT2_SPECIAL = {"bos_token_id": 50256, "eos_token_ids": [50256], "add_bos_token": False}

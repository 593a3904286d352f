"""HF tokenizer.json -> tokenizer.ggml.* for GGUF export: the pre-tokenizer name rule and the vocabulary arrays."""

from __future__ import annotations

import json
import pathlib

import pytest

from modelc.errors import UnsupportedError
from modelc.formats.export_gguf_pre import byte_level_pre_name
from modelc.formats.export_gguf_vocab import vocab_metadata
from modelc.ir import Model
from tests.formats.test_export_gguf_hf import LLAMA3_REGEX, QWEN2_REGEX

TOKENIZER = pathlib.Path(__file__).parents[1] / "fixtures" / "models" / "variants" / "qwen2" / "hf" / "tokenizer.json"


def _split(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


def _byte_level(use_regex: bool = False, add_prefix_space: bool = False) -> dict:
    return {"type": "ByteLevel", "add_prefix_space": add_prefix_space, "trim_offsets": True, "use_regex": use_regex}


def _doc(pre: dict | None, ignore_merges: bool = False, normalizer: dict | None = None) -> dict:
    return {"normalizer": normalizer, "pre_tokenizer": pre, "model": {"type": "BPE", "ignore_merges": ignore_merges}}


def _seq(*parts: dict) -> dict:
    return {"type": "Sequence", "pretokenizers": list(parts)}


@pytest.mark.parametrize(
    "doc,name",
    [
        (_doc(_byte_level(use_regex=True)), "gpt-2"),
        (_doc(_seq(_split(LLAMA3_REGEX), _byte_level()), ignore_merges=True), "llama-bpe"),
        (_doc(_seq(_split(LLAMA3_REGEX), _byte_level())), "dbrx"),  # same split, merges not skipped
        (_doc(_seq(_split(QWEN2_REGEX), _byte_level()), normalizer={"type": "NFC"}), "qwen2"),
        (_doc(_seq(_split("\\p{N}"), _byte_level(use_regex=True))), "starcoder"),
    ],
)
def test_pre_name_follows_the_split_regexes(doc, name):
    assert byte_level_pre_name(doc) == name


@pytest.mark.parametrize(
    "doc,match",
    [
        (_doc(_seq(_split("\\p{L}+"), _byte_level())), "knows no pre-tokenizer"),
        (_doc(_byte_level(use_regex=True, add_prefix_space=True)), "prefix space"),
        (_doc(_byte_level(use_regex=True), normalizer={"type": "NFKC"}), "NFKC"),
        (_doc(_seq(_byte_level(), _split(QWEN2_REGEX))), "step"),
        (_doc(_seq({**_split(QWEN2_REGEX), "behavior": "Removed"}, _byte_level())), "step like"),
    ],
)
def test_unknown_byte_level_pre_tokenizers_are_refused(doc, match):
    with pytest.raises(UnsupportedError, match=match):
        byte_level_pre_name(doc)


def test_non_byte_level_pre_tokenizers_have_no_pre_name():
    assert byte_level_pre_name(_doc({"type": "Metaspace", "replacement": "▁"})) is None
    assert byte_level_pre_name(_doc(None)) is None


def _model(tokenizer_json: str, vocab_size: int, **special) -> Model:
    return Model("t", "llama", {}, {"vocab_size": vocab_size}, tokenizer_json=tokenizer_json, special_tokens=special,
                 naming="hf")  # fmt: skip


def test_byte_level_vocab_pads_to_the_embedding_and_types_added_tokens():
    doc = json.loads(TOKENIZER.read_text())
    flags = {"single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": False}
    doc["added_tokens"] += [{"id": 330, "content": "<|tool|>", **flags}, {"id": 331, "content": "[CODE]", **flags}]
    kv = vocab_metadata(_model(json.dumps(doc), 336, bos_token_id=0, eos_token_ids=[1], add_bos_token=True))
    tokens, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
    assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "gpt-2" and len(tokens) == 336
    assert tokens[:4] == ["<s>", "</s>", "<|im_start|>", "<|im_end|>"] and types[:4] == [3, 3, 3, 3]
    assert (tokens[320], types[320]) == ("[PAD320]", 5)  # a gap: UNUSED
    assert types[330] == 3 and types[331] == 4  # "<|...|>" looks special (CONTROL); others USER_DEFINED
    assert tokens[100] == {v: k for k, v in doc["model"]["vocab"].items()}[100] and types[100] == 1
    assert kv["tokenizer.ggml.merges"][0] == " ".join(doc["model"]["merges"][0])
    assert kv["tokenizer.ggml.bos_token_id"] == 0 and kv["tokenizer.ggml.eos_token_id"] == 1
    assert kv["tokenizer.ggml.add_bos_token"] is True and "tokenizer.ggml.add_eos_token" not in kv


def test_vocab_larger_than_the_embedding_is_refused():
    with pytest.raises(UnsupportedError, match="embedding rows"):
        vocab_metadata(_model(TOKENIZER.read_text(), 300))


def test_add_bos_follows_the_tokenizer_not_the_pre_name():
    kv = vocab_metadata(_model(TOKENIZER.read_text(), 320, bos_token_id=0, eos_token_ids=[1], add_bos_token=False))
    assert kv["tokenizer.ggml.add_bos_token"] is False

"""Tokenizer: BOS/EOS rules, decode, and token_bytes for byte-level, SentencePiece and WordPiece vocabularies."""

from __future__ import annotations

import json

import pytest
import tokenizers

from modelc.errors import FormatError
from modelc.tokenizer.tokenizer import Tokenizer, gpt2_byte_decoder
from tokenizer.tiny_tokenizers import (
    BYTE_LEVEL_SPECIAL,
    CORPUS,
    GPT2_SPECIAL,
    SPM_SPECIAL,
    byte_level_json,
    gpt2_json_from_gguf,
    spm_json,
)

TEXTS = [*CORPUS[:7], "  two leading spaces", "x😀y 中文 z", ""]


def joined_bytes(tok: Tokenizer, ids: list[int]) -> bytes:
    return b"".join(tok.token_bytes(i) for i in ids)


def read_vectors(base):
    inputs = base.with_suffix(".gguf.inp").read_text().split("\n__ggml_vocab_test__\n")
    outputs = base.with_suffix(".gguf.out").read_text().split("\n")
    return [(s, [int(x) for x in o.split()]) for s, o in zip(inputs, outputs, strict=False)]


def test_gpt2_byte_map_is_a_bijection():
    m = gpt2_byte_decoder()
    assert len(m) == 256 and sorted(m.values()) == list(range(256))
    assert m["Ġ"] == 0x20 and m["Ċ"] == 0x0A and m["A"] == 0x41


def test_byte_level_roundtrip_and_specials():
    tok = Tokenizer.from_json(byte_level_json(), BYTE_LEVEL_SPECIAL)
    assert tok.bos_id is None and not tok.adds_bos
    assert tok.eos_ids == frozenset({0, 2})
    assert {0, 1, 2} <= tok.special_ids
    for text in TEXTS:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
        assert joined_bytes(tok, ids) == text.encode()
    assert tok.token_bytes(1) == b"<|im_start|>"
    assert tok.token_bytes(10**9) == b""


def test_spm_bos_once_and_byte_tokens():
    tok = Tokenizer.from_json(spm_json(), SPM_SPECIAL)
    assert tok.bos_id == 1 and tok.adds_bos
    for text in TEXTS[:-1]:
        ids = tok.encode(text)
        assert ids[0] == 1 and ids[1] != 1
        assert tok.decode(ids) == text
        # SentencePiece pieces carry the word marker: bytes are " " + text
        assert joined_bytes(tok, ids[1:]) == b" " + text.encode()
    assert tok.encode("hi", add_special=False)[0] != 1
    # a rendered chat template already carries BOS: no second one
    assert tok.encode("<s>hi")[:2] != [1, 1] and tok.encode("<s>hi")[0] == 1
    assert tok.token_bytes(tok.token_to_id("<0xF0>")) == b"\xf0"
    assert tok.token_bytes(tok.token_to_id("<s>")) == b"<s>"


def test_add_bos_token_flag_overrides_post_processor():
    tok = Tokenizer.from_json(spm_json(), {**SPM_SPECIAL, "add_bos_token": False})
    assert not tok.adds_bos and tok.encode("hi")[0] != 1
    bl = Tokenizer.from_json(byte_level_json(), {"bos_token_id": 0, "add_bos_token": True, "eos_token": "<|im_end|>"})
    assert bl.adds_bos and bl.encode("hi")[0] == 0
    assert bl.eos_ids == frozenset({2})  # from the eos_token string


def test_eos_ids_collect_eot_and_eom():
    st = {"eos_token_ids": [2], "eot_token_id": 1, "eom_token_id": 0, "bos_token_id": None}
    assert Tokenizer.from_json(byte_level_json(), st).eos_ids == frozenset({0, 1, 2})


def test_wordpiece_token_bytes():
    vocab = {"[UNK]": 0, "[CLS]": 1, "[SEP]": 2, "hello": 3, "##lo": 4, "wor": 5, "##ld": 6}
    tk = tokenizers.Tokenizer(tokenizers.models.WordPiece(vocab, unk_token="[UNK]"))
    tk.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tk.decoder = tokenizers.decoders.WordPiece()
    tk.add_special_tokens(["[UNK]", "[CLS]", "[SEP]"])
    tok = Tokenizer.from_json(tk.to_str(), {})
    ids = tok.encode("hello world")
    assert ids == [3, 5, 6]
    assert joined_bytes(tok, ids) == b" hello world"
    assert tok.token_bytes(4) == b"lo"


def test_invalid_json_is_format_error():
    with pytest.raises(FormatError, match="invalid tokenizer.json"):
        Tokenizer.from_json("{not json", {})
    with pytest.raises(FormatError):
        Tokenizer.from_json(json.dumps({"model": {"type": "Nope"}}), {})


def test_gpt2_matches_llamacpp_vectors(shared_fixtures):
    base = shared_fixtures / "tokenizer/ggml-vocab-gpt-2"
    tok = Tokenizer.from_json(gpt2_json_from_gguf(base.with_suffix(".gguf")), GPT2_SPECIAL)
    assert tok.vocab_size == 50257 and tok.eos_ids == frozenset({50256}) and not tok.adds_bos
    for text, expected in read_vectors(base):
        ids = tok.encode(text)
        assert ids == expected, text
        assert joined_bytes(tok, ids) == text.encode()
        assert tok.decode(ids) == text


def test_tiny_llama_hf_tokenizer(shared_fixtures):
    folder = shared_fixtures / "models/tiny-llama"
    tok = Tokenizer.from_json((folder / "hf/tokenizer.json").read_text(), {"bos_token_id": 1, "eos_token_ids": [2]})
    assert tok.vocab_size == 32000 and tok.adds_bos
    prompt = (folder / "ref/prompt.txt").read_text()
    import numpy as np

    assert tok.encode(prompt) == np.load(folder / "ref/prompt_ids.npy").tolist()
    for text in TEXTS[:-1]:
        ids = tok.encode(text)
        assert ids[0] == 1
        assert tok.decode(ids) in (text, text[1:])  # transformers' llama decoder strips one leading space
        assert joined_bytes(tok, ids[1:]).lstrip(b" ") == text.encode().lstrip(b" ")

"""IncrementalDecoder: streamed pieces concatenate exactly to decode(all), never split a character."""

from __future__ import annotations

import random

import pytest

from modelc.tokenizer.incremental import IncrementalDecoder
from modelc.tokenizer.tokenizer import Tokenizer
from tokenizer.tiny_tokenizers import (
    BYTE_LEVEL_SPECIAL,
    GPT2_SPECIAL,
    SPM_SPECIAL,
    byte_level_json,
    gpt2_json_from_gguf,
    spm_json,
)

POOL = list("abcdefgh ijk  xyz\n\t.,!?") + list("你好世界中文字") + ["🦙", "🚀", "👍🏽", "🇫🇷", "❤️", "é", "ß", "Ж", "∑"]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(POOL) for _ in range(rng.randint(1, 40)))


def stream(tok: Tokenizer, ids: list[int], prompt: list[int] | None = None) -> list[str]:
    dec = IncrementalDecoder(tok, prompt)
    pieces = [dec.add(i) for i in ids]
    pieces.append(dec.flush())
    return pieces


def check_streams(tok: Tokenizer, rng: random.Random, n: int) -> None:
    for _ in range(n):
        ids = tok.encode(random_text(rng), add_special=rng.random() < 0.5)
        pieces = stream(tok, ids)
        assert "".join(pieces) == tok.decode(ids), ids
        for p in pieces[:-1]:
            assert "\ufffd" not in p, (ids, pieces)  # complete characters only
        # with a prompt: pieces equal the suffix decode(prompt + out) adds to decode(prompt)
        cut = rng.randint(0, len(ids))
        prompt, out = ids[:cut], ids[cut:]
        full, head = tok.decode(prompt + out), tok.decode(prompt)
        if full.startswith(head):
            assert "".join(stream(tok, out, prompt)) == full[len(head) :]


@pytest.mark.parametrize("kind", ["byte_level", "spm"])
def test_stream_equals_decode_tiny(kind):
    js, special = (byte_level_json(), BYTE_LEVEL_SPECIAL) if kind == "byte_level" else (spm_json(), SPM_SPECIAL)
    check_streams(Tokenizer.from_json(js, special), random.Random(1234), 300)


def test_stream_equals_decode_llama(shared_fixtures):
    text = (shared_fixtures / "models/tiny-llama/hf/tokenizer.json").read_text()
    tok = Tokenizer.from_json(text, {"bos_token_id": 1, "eos_token_ids": [2]})
    check_streams(tok, random.Random(7), 300)


def test_stream_equals_decode_gpt2(shared_fixtures):
    tok = Tokenizer.from_json(gpt2_json_from_gguf(shared_fixtures / "tokenizer/ggml-vocab-gpt-2.gguf"), GPT2_SPECIAL)
    check_streams(tok, random.Random(8), 300)


def test_random_token_ids_stream(shared_fixtures):
    """Arbitrary (non-byte) token ids, specials included: streaming still equals decode(all)."""
    text = (shared_fixtures / "models/tiny-llama/hf/tokenizer.json").read_text()
    tok = Tokenizer.from_json(text, {"bos_token_id": 1, "eos_token_ids": [2]})
    rng = random.Random(3)
    normal = [0, 1, 2, *range(259, tok.vocab_size)]  # 3..258 are <0xNN> byte tokens
    for _ in range(200):
        ids = [rng.choice(normal) for _ in range(rng.randint(1, 30))]
        assert "".join(stream(tok, ids)) == tok.decode(ids)


def test_multibyte_held_back_until_complete():
    tok = Tokenizer.from_json(spm_json(), SPM_SPECIAL)
    ids = tok.encode("🐫", add_special=False)  # not in the training corpus
    byte_ids = [i for i in ids if len(tok.token_bytes(i)) == 1 and tok.token_bytes(i)[0] >= 0x80]
    assert len(byte_ids) == 4  # it goes through four <0xNN> tokens
    dec = IncrementalDecoder(tok)
    pieces = [dec.add(i) for i in ids]
    assert pieces[-1].endswith("🐫")
    assert all(p == "" for p in pieces[ids.index(byte_ids[0]) : -1])
    assert dec.flush() == ""


def test_flush_emits_incomplete_tail():
    tok = Tokenizer.from_json(spm_json(), SPM_SPECIAL)
    first = tok.token_to_id("<0xF0>")
    dec = IncrementalDecoder(tok)
    assert dec.add(tok.token_to_id("▁a") or tok.encode("a", add_special=False)[-1]) != ""
    assert dec.add(first) == ""
    assert dec.flush() == "\ufffd"

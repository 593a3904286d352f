from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer

from modelc.errors import FormatError, UnsupportedError
from modelc.formats.hf_tokenizer import from_sentencepiece, from_wordpiece_vocab, parse_sentencepiece

from .test_gguf_tokenizer import _vectors


def test_sentencepiece_model_matches_llama_cpp_vectors(shared_fixtures):
    """tiny-llama's tokenizer.model is LLaMA's SentencePiece vocabulary: it must tokenize like llama.cpp."""
    spm = shared_fixtures / "models" / "tiny-llama" / "hf" / "tokenizer.model"
    tok = Tokenizer.from_str(from_sentencepiece(spm, {"bos_token": "<s>", "eos_token": "</s>"}))
    base = shared_fixtures / "tokenizer" / "ggml-vocab-llama-spm.gguf"
    for text, want in _vectors(base):
        assert tok.encode(text, add_special_tokens=False).ids == want, repr(text)
    assert tok.encode("Hello world").ids == [1, 15043, 3186]


def test_folder_without_tokenizer_json_uses_tokenizer_model(shared_fixtures, tmp_path):
    import shutil

    from modelc.formats.hf import read_hf

    src = shared_fixtures / "models" / "tiny-llama" / "hf"
    d = tmp_path / "llama-no-json"
    d.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.model", "generation_config.json"):
        shutil.copy(src / name, d / name)
    (d / "model.safetensors").symlink_to(src / "model.safetensors")
    m = read_hf(d)
    assert m.tokenizer_json and m.special_tokens["bos_token_id"] == 1 and m.special_tokens["add_bos_token"]
    assert Tokenizer.from_str(m.tokenizer_json).encode(" Hello").ids == [1, 29871, 15043]


def test_wordpiece_vocab_txt(tmp_path):
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "hello", "world", "##s", "play", "##ing", ","]
    p = tmp_path / "vocab.txt"
    p.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    tok = Tokenizer.from_str(from_wordpiece_vocab(p, {"do_lower_case": True}))
    assert tok.encode("Hello, worlds playing").ids == [2, 5, 10, 6, 7, 8, 9, 3]
    assert tok.decode(tok.encode("Hello playing").ids) == "hello playing"
    cased = Tokenizer.from_str(from_wordpiece_vocab(p, {"do_lower_case": False}))
    assert cased.encode("Hello", add_special_tokens=False).ids == [1]
    assert json.loads(from_wordpiece_vocab(p, {}))["model"]["type"] == "WordPiece"


def test_bad_sentencepiece(tmp_path):
    p = tmp_path / "tokenizer.model"
    p.write_bytes(b"\x0a\xff\xff\xff\xff\x0f")
    with pytest.raises(FormatError):
        parse_sentencepiece(p.read_bytes())
    with pytest.raises(FormatError, match="no pieces"):
        parse_sentencepiece(b"")
    # a Unigram model (trainer_spec.model_type = 1) is refused
    piece = b"\x0a\x03\x0a\x01a"
    trainer = b"\x12\x02\x18\x01"
    p.write_bytes(piece + trainer)
    with pytest.raises(UnsupportedError, match="only BPE"):
        from_sentencepiece(p, {})

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from modelc.errors import UnsupportedError
from modelc.formats.gguf import read_gguf
from modelc.formats.gguf_file import parse_gguf
from modelc.formats.gguf_tokenizer import build_tokenizer_json

SEPARATOR = "\n__ggml_vocab_test__\n"


def _vectors(base):
    texts = base.with_name(base.name + ".inp").read_text(encoding="utf-8").split(SEPARATOR)
    outs = base.with_name(base.name + ".out").read_text(encoding="utf-8").split("\n")
    assert len(outs) >= len(texts)
    # llama.cpp's vectors are made WITHOUT add_special (no BOS): compare likewise.
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, outs, strict=False)]


@pytest.mark.parametrize("vocab", ["llama-spm", "gpt-2", "llama-bpe", "qwen2", "bert-bge"])
def test_llama_cpp_vectors(shared_fixtures, vocab):
    path = shared_fixtures / "tokenizer" / f"ggml-vocab-{vocab}.gguf"
    tok = Tokenizer.from_str(build_tokenizer_json(parse_gguf(path).fields))
    vectors = _vectors(path)
    assert len(vectors) > 40
    for text, want in vectors:
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == want, f"{vocab}: {text!r}"
        if vocab != "bert-bge":  # WordPiece lowercases and drops whitespace: decoding is lossy by design
            assert tok.decode(got, skip_special_tokens=False) == text


def test_bos_added_as_llama_cpp_does(shared_fixtures):
    path = shared_fixtures / "tokenizer" / "ggml-vocab-llama-spm.gguf"
    tok = Tokenizer.from_str(build_tokenizer_json(parse_gguf(path).fields))
    assert tok.encode("Hello world").ids == [1, 15043, 3186]
    bert = Tokenizer.from_str(
        build_tokenizer_json(parse_gguf(shared_fixtures / "tokenizer/ggml-vocab-bert-bge.gguf").fields)
    )
    assert bert.encode("Hello world").ids == [101, 7592, 2088, 102]
    gpt2 = Tokenizer.from_str(
        build_tokenizer_json(parse_gguf(shared_fixtures / "tokenizer/ggml-vocab-gpt-2.gguf").fields)
    )
    assert gpt2.encode("Hello world").ids == [15496, 995]
    # llama-bpe's GGUF has no add_bos_token key: llama.cpp's llama3 default adds BOS
    llama3 = read_gguf(shared_fixtures / "tokenizer/ggml-vocab-llama-bpe.gguf")
    assert llama3.special_tokens["add_bos_token"] is True
    assert Tokenizer.from_str(llama3.tokenizer_json).encode("Hello world").ids == [128000, 9906, 1917]


@pytest.mark.parametrize(("model", "gguf_type"), [("tiny-llama", "Q8_0"), ("tiny-gpt2", "F32")])
def test_fixture_gguf_prompt_matches_llama_cpp(shared_fixtures, model, gguf_type):
    import json

    base = shared_fixtures / "models" / model
    m = read_gguf(base / "gguf" / f"{model}-{gguf_type}.gguf")
    tok = Tokenizer.from_str(m.tokenizer_json)
    prompt = (base / "ref" / "prompt.txt").read_text(encoding="utf-8")
    want = json.loads((base / "ref" / f"llamacpp_{gguf_type}.json").read_text())["llamacpp_tokenize"]
    assert tok.encode(prompt).ids == want


def test_special_tokens_are_added_tokens(shared_fixtures):
    fields = parse_gguf(shared_fixtures / "tokenizer" / "ggml-vocab-qwen2.gguf").fields
    tok = Tokenizer.from_str(build_tokenizer_json(fields))
    ids = tok.encode("<|im_start|>user", add_special_tokens=False).ids
    assert ids[0] == fields["tokenizer.ggml.tokens"].index("<|im_start|>")
    assert tok.decode(ids, skip_special_tokens=True) == "user"


def test_unknown_pre_tokenizer_is_refused():
    fields = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "martian",
        "tokenizer.ggml.tokens": ["a", "b"],
        "tokenizer.ggml.merges": ["a b"],
    }
    with pytest.raises(UnsupportedError, match="martian"):
        build_tokenizer_json(fields)

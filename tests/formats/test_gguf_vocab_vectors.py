"""llama.cpp's tokenizer test vectors for the pre-tokenizers whose vocabs live in tests/fixtures (xz)."""

from __future__ import annotations

import json
import lzma
import pathlib

import pytest
from tokenizers import Tokenizer

from modelc.formats.gguf_file import parse_gguf
from modelc.formats.gguf_tokenizer import build_tokenizer_json

HERE = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "tokenizer" / "llama_cpp_vocab"
SEPARATOR = "\n__ggml_vocab_test__\n"

# tokenizers' ByteLevel decoder reads a user-defined single-character token ('ü' in DeepSeek's
# vocabularies) as the byte it stands for in the byte alphabet; llama.cpp prints such pieces verbatim.
DECODE_EXCEPTIONS = {("deepseek-llm", "Führer"), ("deepseek-coder", "Führer")}


@pytest.mark.parametrize(
    ("vocab", "pre"),
    [
        ("deepseek-llm", "deepseek-llm"),
        ("deepseek-coder", "deepseek-coder"),
        ("falcon", "falcon"),
        ("mpt", "mpt"),
        ("phi-3", "default"),
        ("refact", "refact"),
        ("starcoder", "starcoder"),
        ("command-r", "command-r"),
        ("qwen35", "qwen35"),  # Qwen3.5's pre-tokenizer
        ("gemma-4", "default"),  # tokenizer.ggml.model "gemma4", no pre key (llama.cpp implies its gemma4 pre-type)
    ],
)
def test_llama_cpp_vectors(tmp_path: pathlib.Path, vocab: str, pre: str) -> None:
    base = HERE / f"ggml-vocab-{vocab}.gguf"
    gguf_path = tmp_path / base.name
    gguf_path.write_bytes(lzma.decompress((HERE / (base.name + ".xz")).read_bytes()))
    fields = parse_gguf(gguf_path).fields
    assert fields.get("tokenizer.ggml.pre", "default") == pre
    tok = Tokenizer.from_str(build_tokenizer_json(fields))
    texts = (HERE / (base.name + ".inp")).read_text(encoding="utf-8").split(SEPARATOR)
    outs = (HERE / (base.name + ".out")).read_text(encoding="utf-8").split("\n")
    assert len(texts) > 40 and len(outs) >= len(texts)
    for text, out in zip(texts, outs, strict=False):
        got = tok.encode(text, add_special_tokens=False).ids  # llama.cpp's vectors carry no BOS
        assert got == [int(x) for x in out.split()], f"{vocab}: {text!r}"
        if (vocab, text) not in DECODE_EXCEPTIONS:
            assert tok.decode(got, skip_special_tokens=False) == text, f"{vocab}: {text!r}"


def test_o200k_matches_tiktoken(tmp_path: pathlib.Path) -> None:
    """gpt-oss's o200k vocabulary as llama.cpp's converter packs it (tools/make_o200k_fixtures.py) against
    tiktoken's ids: llama.cpp's test texts, a multilingual set, seeded random strings, harmony prompts. On 11
    of them llama.cpp's own regex engine splits combining marks differently from tiktoken; modelc follows
    tiktoken (ggml-vocab-gpt-oss.gguf.json lists those texts)."""
    base = HERE / "ggml-vocab-gpt-oss.gguf"
    gguf_path = tmp_path / base.name
    gguf_path.write_bytes(lzma.decompress((HERE / (base.name + ".xz")).read_bytes()))
    fields = parse_gguf(gguf_path).fields
    assert fields["tokenizer.ggml.pre"] == "gpt-4o" and len(fields["tokenizer.ggml.tokens"]) == 201088
    tok = Tokenizer.from_str(build_tokenizer_json(fields))
    texts = (HERE / (base.name + ".inp")).read_bytes().decode("utf-8").split(SEPARATOR)  # keeps "\r"
    outs = (HERE / (base.name + ".out")).read_text(encoding="utf-8").split("\n")
    info = json.loads((HERE / (base.name + ".json")).read_text(encoding="utf-8"))
    assert len(texts) == info["texts"] > 300 and len(outs) >= len(texts)
    assert set(info["llama_cpp_differs_from_tiktoken"]) <= set(texts)
    for text, out in zip(texts, outs, strict=False):
        got = tok.encode(text, add_special_tokens=False).ids
        assert got == [int(x) for x in out.split()], text
        assert tok.decode(got, skip_special_tokens=False) == text, text

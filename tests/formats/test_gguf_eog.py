"""End-of-generation pieces are control tokens whatever type the GGUF gives them, as in llama.cpp's loader."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
from tokenizers import Tokenizer

from modelc.formats.gguf import read_gguf
from modelc.formats.gguf_tokenizer import TOKEN_CONTROL, TOKEN_NORMAL, build_tokenizer_json, token_types

from .gguf_factory import SPM_TOKENS


def _fields(extra: list[str], extra_types: list[int]) -> dict:
    tokens = [*SPM_TOKENS, *extra]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": [2, 3, 3] + [6] * 256 + [1] * (len(SPM_TOKENS) - 259) + extra_types,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }


def test_normal_typed_end_of_turn_becomes_control() -> None:
    f = _fields(["<end_of_turn>", "<start_of_turn>"], [TOKEN_NORMAL, TOKEN_NORMAL])
    types = token_types(f)
    eot, sot = len(SPM_TOKENS), len(SPM_TOKENS) + 1
    assert types[eot] == TOKEN_CONTROL and types[sot] == TOKEN_NORMAL  # only the EOG text is overridden
    tok = Tokenizer.from_str(build_tokenizer_json(f))
    ids = tok.encode("hi<end_of_turn>", add_special_tokens=False).ids
    assert ids[-1] == eot  # matched whole, as a special token
    assert tok.decode(ids, skip_special_tokens=True) == "hi"


def test_read_gguf_stops_on_normal_typed_im_end(tmp_path: pathlib.Path) -> None:
    p = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    w.add_block_count(1)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_context_length(64)
    w.add_layer_norm_rms_eps(1e-5)
    f = _fields(["<|im_end|>"], [TOKEN_NORMAL])
    w.add_tokenizer_model("llama")
    w.add_token_list(f["tokenizer.ggml.tokens"])
    w.add_token_scores(f["tokenizer.ggml.scores"])
    w.add_token_types(f["tokenizer.ggml.token_type"])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_tensor("token_embd.weight", np.zeros((len(f["tokenizer.ggml.tokens"]), 32), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    m = read_gguf(p)
    im_end = len(SPM_TOKENS)
    assert m.special_tokens["eos_token_ids"] == [2, im_end]
    assert m.special_tokens["eot_token_id"] == im_end

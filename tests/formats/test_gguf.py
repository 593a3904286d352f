from __future__ import annotations

import struct

import numpy as np
import pytest

from modelc.errors import FormatError, ModelcError, UnsupportedError
from modelc.formats.gguf import read_gguf
from modelc.formats.gguf_file import parse_gguf
from modelc.ir import DataType

from .gguf_factory import write_tiny_llama


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def raw_gguf(
    tensors: list[tuple[str, tuple[int, ...], int, int]], *, kv: bytes = b"", n_kv: int = 0, data: bytes = b""
) -> bytes:
    """A hand-made GGUF v3 file: tensors are (name, gguf dims, ggml type, relative offset)."""
    arch = _s("general.architecture") + struct.pack("<I", 8) + _s("llama")
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), n_kv + 1) + arch + kv
    for name, dims, ty, off in tensors:
        head += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        head += struct.pack("<IQ", ty, off)
    pad = (-len(head)) % 32
    return head + b"\0" * pad + data


def test_reads_tensors_zero_copy_in_row_major_shape(tmp_path):
    p = tmp_path / "m.gguf"
    arrays = write_tiny_llama(p)
    m = read_gguf(p)
    assert m.architecture == "llama" and m.naming == "gguf" and m.source_format == "gguf"
    for name, a in arrays.items():
        t = m.tensors[name]
        assert t.shape == a.shape and t.dtype is DataType.F32
        assert isinstance(t.data.base, np.memmap) or isinstance(t.data, np.memmap)
        np.testing.assert_array_equal(t.array(), a)


def test_quantized_tensors_keep_their_blocks(tmp_path):
    import gguf

    p = tmp_path / "q.gguf"
    arrays = write_tiny_llama(p, qtype="Q8_0")
    m = read_gguf(p)
    t = m.tensors["blk.0.attn_q.weight"]
    assert t.dtype is DataType.Q8_0 and t.shape == (32, 32)
    want = gguf.quants.quantize(arrays["blk.0.attn_q.weight"], gguf.GGMLQuantizationType.Q8_0)
    np.testing.assert_array_equal(t.blocks(), want)


def test_config_and_special_tokens(tmp_path):
    p = tmp_path / "m.gguf"
    write_tiny_llama(p, with_output=False)
    m = read_gguf(p)
    c = m.config
    assert (c["hidden_size"], c["num_hidden_layers"], c["num_attention_heads"], c["num_key_value_heads"]) == (
        32,
        1,
        4,
        2,
    )
    assert c["head_dim"] == 8 and c["intermediate_size"] == 64 and c["max_position_embeddings"] == 64
    assert c["rope_neox"] is False and c["tie_word_embeddings"] is True and c["rope_theta"] == 10000.0
    assert c["vocab_size"] == m.tensors["token_embd.weight"].shape[0]
    assert m.special_tokens["bos_token_id"] == 1 and m.special_tokens["eos_token_ids"] == [2]
    assert m.special_tokens["bos_token"] == "<s>" and m.special_tokens["add_bos_token"] is True
    assert m.chat_template == "{{ messages }}"
    assert "tokenizer.ggml.tokens" not in m.metadata and m.metadata["llama.block_count"] == 1


def test_tokenizer_from_tiny_gguf(tmp_path):
    from tokenizers import Tokenizer

    p = tmp_path / "m.gguf"
    write_tiny_llama(p)
    tok = Tokenizer.from_str(read_gguf(p).tokenizer_json)
    enc = tok.encode("hi hi")
    assert enc.tokens == ["<s>", "▁hi", "▁hi"]
    assert tok.decode(enc.ids) == "hi hi"
    # byte fallback for a character with no piece
    assert tok.decode(tok.encode("hé", add_special_tokens=False).ids) == "hé"


def test_real_llama_gguf(shared_fixtures):
    m = read_gguf(shared_fixtures / "models/tiny-llama/gguf/tiny-llama-Q4_0.gguf")
    assert m.architecture == "llama" and m.config["num_hidden_layers"] == 2
    assert m.tensors["blk.0.attn_k.weight"].shape == (32, 64)
    assert m.tensors["token_embd.weight"].dtype is DataType.Q4_0
    assert m.config["vocab_size"] == 32000


def test_qwen2_and_gpt2_rope_style(shared_fixtures):
    qwen = read_gguf(shared_fixtures / "tokenizer/ggml-vocab-qwen2.gguf")
    assert qwen.config["rope_neox"] is True
    # eos is <|endoftext|>; the chat turn end <|im_end|> must stop generation too (as in llama.cpp)
    assert qwen.special_tokens["eos_token_ids"][:1] == [151643] and 151645 in qwen.special_tokens["eos_token_ids"]
    assert qwen.special_tokens["eot_token_id"] == 151645
    m = read_gguf(shared_fixtures / "models/tiny-gpt2/gguf/tiny-gpt2-Q8_0.gguf")
    assert m.architecture == "gpt2" and m.config["hidden_act"] == "gelu"


# ---- bad input: one-line ModelcError, no big allocation ------------------------------------


def test_truncated_everywhere(tmp_path):
    p = tmp_path / "m.gguf"
    write_tiny_llama(p)
    blob = p.read_bytes()
    for cut in (0, 3, 10, 30, 200, 2000, len(blob) // 2, len(blob) - 1):
        bad = tmp_path / f"cut{cut}.gguf"
        bad.write_bytes(blob[:cut])
        with pytest.raises(FormatError) as e:
            read_gguf(bad)
        assert "\n" not in str(e.value)


def test_wrong_magic(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGML" + b"\0" * 100)
    with pytest.raises(FormatError, match="not a GGUF file"):
        read_gguf(p)


def test_offset_past_end(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([("w", (4, 2), 0, 1 << 20)], data=b"\0" * 32))
    with pytest.raises(FormatError, match="tensor w .*past the end"):
        read_gguf(p)


def test_tensor_claiming_2_pow_60_bytes(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([("huge", (1 << 29, 1 << 29), 0, 0)], data=b"\0" * 32))
    with pytest.raises(FormatError, match="huge"):
        read_gguf(p)


def test_duplicate_tensor_names(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([("w", (8,), 0, 0), ("w", (8,), 0, 32)], data=b"\0" * 64))
    with pytest.raises(FormatError, match="duplicate tensor name w"):
        read_gguf(p)


def test_q8_1_type_is_unsupported(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([("blk.0.ffn_up.weight", (32, 1), 9, 0)], data=b"\0" * 64))
    with pytest.raises(UnsupportedError, match="unsupported type Q8_1 in tensor blk.0.ffn_up.weight"):
        read_gguf(p)


def test_unknown_type_id(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([("w", (8,), 99, 0)], data=b"\0" * 64))
    with pytest.raises(UnsupportedError, match="w"):
        read_gguf(p)


def test_absurd_counts_and_lengths(tmp_path):
    p = tmp_path / "x.gguf"
    # a string claiming 2^62 bytes, an array claiming 2^60 items, a tensor count of 2^60
    for kv in (
        _s("k") + struct.pack("<IQ", 8, 1 << 62),
        _s("k") + struct.pack("<IIQ", 9, 4, 1 << 60),
    ):
        p.write_bytes(raw_gguf([], kv=kv, n_kv=1))
        with pytest.raises(ModelcError):
            read_gguf(p)
    p.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 1 << 60, 0) + b"\0" * 64)
    with pytest.raises(FormatError, match="truncated"):
        parse_gguf(p)


def test_big_endian_and_bad_version(tmp_path):
    p = tmp_path / "x.gguf"
    p.write_bytes(b"GGUF" + struct.pack(">I", 3) + b"\0" * 64)
    with pytest.raises(UnsupportedError, match="big-endian"):
        read_gguf(p)
    p.write_bytes(b"GGUF" + struct.pack("<I", 7) + b"\0" * 64)
    with pytest.raises(UnsupportedError, match="version 7"):
        read_gguf(p)


def test_split_gguf(tmp_path):
    import gguf

    rng = np.random.default_rng(0)
    arrays = {f"blk.{i}.w": rng.standard_normal((4, 8)).astype(np.float32) for i in range(5)}
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama", split_max_tensors=2)
    w.add_block_count(5)
    for name, a in arrays.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    parts = sorted(p.name for p in tmp_path.iterdir())
    assert parts == [f"m-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    m = read_gguf(tmp_path / parts[0])
    assert set(m.tensors) == set(arrays) and not any(k.startswith("split.") for k in m.metadata)
    assert m.name == "m"
    for name, a in arrays.items():
        np.testing.assert_array_equal(m.tensors[name].array(), a)
    with pytest.raises(FormatError, match="open the first part"):
        read_gguf(tmp_path / parts[1])
    (tmp_path / parts[2]).unlink()
    with pytest.raises(FormatError, match="is missing"):
        read_gguf(tmp_path / parts[0])


def test_hyperparameter_of_wrong_type(tmp_path):
    kv = _s("llama.block_count") + struct.pack("<I", 8) + _s("two")
    p = tmp_path / "x.gguf"
    p.write_bytes(raw_gguf([], kv=kv, n_kv=1))
    with pytest.raises(FormatError, match="num_hidden_layers must be a positive integer"):
        read_gguf(p)

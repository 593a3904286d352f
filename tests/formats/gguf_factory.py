"""Builds tiny GGUF files for tests with the `gguf` package's writer (no shared fixtures needed)."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np

SPM_TOKENS = ["<unk>", "<s>", "</s>", *[f"<0x{i:02X}>" for i in range(256)], "▁", "h", "i", "▁h", "▁hi", "hi"]


def add_spm_tokenizer(w: gguf.GGUFWriter) -> None:
    """The SPM tokenizer above (scores, types, BOS 1, EOS 2) as GGUF metadata."""
    w.add_tokenizer_model("llama")
    w.add_token_list(SPM_TOKENS)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -1.5, -0.5, -2.5])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 6)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)


def write_tiny_llama(path: pathlib.Path, *, qtype: str = "F32", with_output: bool = True) -> dict[str, np.ndarray]:
    """A 1-layer llama-shaped GGUF with an SPM tokenizer; returns the float tensors written (row-major)."""
    rng = np.random.default_rng(0)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    add_spm_tokenizer(w)
    w.add_add_bos_token(True)
    w.add_chat_template("{{ messages }}")
    vocab = len(SPM_TOKENS)
    arrays = {
        "token_embd.weight": rng.standard_normal((vocab, 32)).astype(np.float32),
        "blk.0.attn_q.weight": rng.standard_normal((32, 32)).astype(np.float32),
        "blk.0.attn_norm.weight": rng.standard_normal(32).astype(np.float32),
    }
    if with_output:
        arrays["output.weight"] = rng.standard_normal((vocab, 32)).astype(np.float32)
    for name, a in arrays.items():
        if qtype != "F32" and a.ndim == 2:
            q = gguf.GGMLQuantizationType[qtype]
            w.add_tensor(name, gguf.quants.quantize(a, q), raw_dtype=q)
        else:
            w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return arrays


def write_large_vocab_llama(path: pathlib.Path, *, vocab: int = 262144, hidden: int = 512, layers: int = 2,
                            ctx: int = 32768) -> None:  # fmt: skip
    """A 2-layer llama GGUF whose Q8_0 token-embedding table (tied to the output head, as Gemma's) has `vocab` rows:
    Gemma 3's 262k by default, so the table is most of the file. Random valid blocks (gemm_random); the SPM
    tokenizer above addresses its first rows (the rest are padding rows, as Qwen's)."""
    from modelc.ir import DataType
    from modelc.kernels.matmul.gemm_random import random_tensor

    rng = np.random.default_rng(0)
    heads, kv_heads, ffn = 8, 2, 2 * hidden
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(layers)
    w.add_context_length(ctx)
    w.add_embedding_length(hidden)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(vocab)
    add_spm_tokenizer(w)
    kv = kv_heads * hidden // heads
    shapes = {"token_embd.weight": (vocab, hidden)}
    for i in range(layers):
        p = f"blk.{i}."
        shapes.update({p + "attn_norm.weight": (hidden,), p + "attn_q.weight": (hidden, hidden),
                       p + "attn_k.weight": (kv, hidden), p + "attn_v.weight": (kv, hidden),
                       p + "attn_output.weight": (hidden, hidden), p + "ffn_norm.weight": (hidden,),
                       p + "ffn_gate.weight": (ffn, hidden), p + "ffn_up.weight": (ffn, hidden),
                       p + "ffn_down.weight": (hidden, ffn)})  # fmt: skip
    shapes["output_norm.weight"] = (hidden,)
    q8 = gguf.GGMLQuantizationType.Q8_0
    for name, shape in shapes.items():
        if len(shape) == 1:
            w.add_tensor(name, np.ones(shape, np.float32))
        else:
            blocks = random_tensor(DataType.Q8_0, shape[0], shape[1], rng).data.reshape(shape[0], -1)
            w.add_tensor(name, blocks, raw_dtype=q8)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

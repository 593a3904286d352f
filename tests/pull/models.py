"""Tiny model files for the pull tests: a packable llama GGUF (whole or split) and an HF safetensors folder."""

from __future__ import annotations

import json
import pathlib

from modelc.formats.export_safetensors import export_safetensors
from modelc.models.tiny import make_tiny_llama, with_tokenizer

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|assistant|>"


def tiny_model(seed: int = 0):
    m = with_tokenizer(make_tiny_llama(seed, vocab_size=64, hidden_size=32, num_layers=1, intermediate_size=64))
    m.chat_template = TEMPLATE
    return m


SPM_TOKENS = [
    "<unk>",
    "<s>",
    "</s>",
    *[f"<0x{i:02X}>" for i in range(256)],
    "▁",
    "h",
    "i",
    "▁h",
    "▁hi",
    "hi",
    "<|end|>",
]


def tiny_gguf(path: pathlib.Path, seed: int = 0, *, template: bool = True) -> bytes:
    """A ~50 KB llama GGUF (SentencePiece-style vocabulary, as llama.cpp writes it) that packs and runs."""
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    C, F, H, K, V = 32, 64, 4, 2, len(SPM_TOKENS)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_context_length(256)
    w.add_embedding_length(C)
    w.add_feed_forward_length(F)
    w.add_head_count(H)
    w.add_head_count_kv(K)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list(SPM_TOKENS)
    w.add_token_scores([0.0] * 259 + [-1.0, -2.0, -3.0, -1.5, -0.5, -2.5, 0.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * 6 + [3])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    if template:
        w.add_chat_template(TEMPLATE)
    D = C // H
    shapes = {
        "token_embd.weight": (V, C), "output_norm.weight": (C,), "output.weight": (V, C),
        "blk.0.attn_norm.weight": (C,), "blk.0.ffn_norm.weight": (C,), "blk.0.attn_q.weight": (H * D, C),
        "blk.0.attn_k.weight": (K * D, C), "blk.0.attn_v.weight": (K * D, C), "blk.0.attn_output.weight": (C, H * D),
        "blk.0.ffn_gate.weight": (F, C), "blk.0.ffn_up.weight": (F, C), "blk.0.ffn_down.weight": (C, F),
    }  # fmt: skip
    for name, shape in shapes.items():
        a = (1 + 0.1 * rng.standard_normal(shape)) if len(shape) == 1 else 0.1 * rng.standard_normal(shape)
        w.add_tensor(name, a.astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path.read_bytes()


def split_gguf(folder: pathlib.Path, prefix: str, *, max_tensors: int = 5) -> list[pathlib.Path]:
    """The tiny GGUF rewritten by gguf's writer as PREFIX-0000i-of-0000n.gguf parts."""
    import gguf

    whole = folder / "whole.gguf"
    tiny_gguf(whole)
    r = gguf.GGUFReader(str(whole))
    w = gguf.GGUFWriter(str(folder / f"{prefix}.gguf"), str(r.fields["general.architecture"].contents()),
                        split_max_tensors=max_tensors)  # fmt: skip
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        sub = f.types[1] if len(f.types) > 1 else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=list(reversed([int(d) for d in t.shape])), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    whole.unlink()
    return sorted(folder.glob(f"{prefix}-*-of-*.gguf"))


def tiny_hf_folder(folder: pathlib.Path) -> dict[str, bytes]:
    """config.json, tokenizer.json, tokenizer_config.json and model.safetensors of the tiny llama."""
    m = tiny_model()
    folder.mkdir(parents=True, exist_ok=True)
    c = m.config
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": c["vocab_size"],
        "hidden_size": c["hidden_size"], "intermediate_size": c["intermediate_size"],
        "num_hidden_layers": c["num_hidden_layers"], "num_attention_heads": c["num_attention_heads"],
        "num_key_value_heads": c["num_key_value_heads"], "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer.json").write_text(m.tokenizer_json)
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": TEMPLATE, "bos_token": "<s>",
                                                               "eos_token": "</s>"}))  # fmt: skip
    export_safetensors(m, folder / "model.safetensors")
    return {p.name: p.read_bytes() for p in folder.iterdir()}

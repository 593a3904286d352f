"""Small models and header surgery shared by the artifact, store and CLI tests."""

from __future__ import annotations

import json
import struct

import numpy as np

from modelc.ir import DataType, Model, TensorData


def make_model(seed: int = 0, name: str = "tiny", hidden: int = 64) -> Model:
    """A 1-layer llama-shaped model with plain, block-quantized, empty and int8+scale tensors."""
    rng = np.random.default_rng(seed)
    q8 = rng.integers(0, 256, size=DataType.Q8_0.nbytes((hidden, hidden)), dtype=np.uint8)
    tensors = {
        "model.embed_tokens.weight": TensorData.from_array(rng.standard_normal((32, hidden)).astype(np.float32)),
        "model.layers.0.self_attn.q_proj.weight": TensorData((hidden, hidden), DataType.Q8_0, q8),
        "model.layers.0.mlp.up_proj.weight": TensorData.from_array(
            rng.standard_normal((hidden, hidden)).astype(np.float16)
        ),
        "model.layers.0.mlp.down_proj.weight": TensorData.from_array(
            rng.integers(-8, 8, (hidden, hidden), dtype=np.int8)
        ),
        "model.layers.0.mlp.down_proj.weight@scale": TensorData.from_array(np.ones(hidden, np.float32)),
        "model.norm.weight": TensorData.from_array(np.ones(hidden, np.float32)),
        "empty": TensorData.from_array(np.zeros((0,), np.float32)),
    }
    return Model(
        name,
        "llama",
        tensors,
        config={"hidden_size": hidden, "num_hidden_layers": 1, "vocab_size": 32},
        metadata={"general.name": name},
        tokenizer_json='{"version": "1.0"}',
        chat_template="{{ messages[0]['content'] }}",
        special_tokens={"bos_token_id": 1, "eos_token_ids": [2]},
        source_format="safetensors",
    )


def read_raw(path) -> tuple[int, dict, bytes]:
    raw = open(path, "rb").read()
    _, version, hlen = struct.unpack("<8sIQ", raw[:20])
    return version, json.loads(raw[20 : 20 + hlen]), raw


def rewrite_header(path, header: dict, version: int = 1) -> None:
    """Write `header` in place of the old one (it must fit before the first tensor)."""
    _, old, raw = read_raw(path)
    new = json.dumps(header, separators=(",", ":")).encode()
    first = min((t["offset"] for t in old["tensors"]), default=len(raw))
    assert 20 + len(new) <= first
    out = bytearray(raw)
    out[:20] = struct.pack("<8sIQ", b"MODELC\0\0", version, len(new))
    out[20 : 20 + len(new)] = new
    open(path, "wb").write(bytes(out))

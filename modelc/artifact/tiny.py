"""A tiny mixed-dtype model built in memory: for tests, docs examples and benchmarks of the artifact code.

No files, no randomness beyond the seed; the tensors are not meant to run.
"""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType, Model, TensorData


def make_model(seed: int = 0, name: str = "tiny", hidden: int = 64) -> Model:
    """A 1-layer llama-shaped model with plain, block-quantized, empty and int8+scale tensors."""
    rng = np.random.default_rng(seed)
    q8 = rng.integers(0, 256, size=(hidden * hidden // 32, 34), dtype=np.uint8)
    q8[:, 0:2] = np.frombuffer(np.float16(0.01).tobytes(), np.uint8)  # finite block scales
    q8 = q8.reshape(-1)
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

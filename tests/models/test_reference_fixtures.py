"""Logits and greedy continuations against transformers and llama.cpp (../shared/fixtures)."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.cache.kv_pages import KVPages
from modelc.formats.gguf import read_gguf
from modelc.models.batch import make_batch
from modelc.models.registry import build_model

pytestmark = pytest.mark.shared


def _run(model, ids, num_new=0):
    """Prefill ids, then greedy-decode num_new tokens one step at a time: (prompt logits, new ids)."""
    L, K, D = model.kv_shape()
    kv = KVPages(L, 8, K, D)
    bt = np.arange(8, dtype=np.int32)
    logits = model.forward(make_batch([(ids, 0, bt)]), kv)
    out, nxt, pos = [], int(np.argmax(logits[-1])), len(ids)
    for _ in range(num_new):
        out.append(nxt)
        step = model.forward(make_batch([(np.array([nxt], np.int32), pos, bt)]), kv)
        nxt, pos = int(np.argmax(step[-1])), pos + 1
    return logits, out


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gpt2"])
def test_f32_gguf_matches_transformers(shared_fixtures, name):
    d = shared_fixtures / "models" / name
    model = build_model(read_gguf(d / "gguf" / f"{name}-F32.gguf"))
    ids = np.load(d / "ref" / "prompt_ids.npy").astype(np.int32)
    want = np.load(d / "ref" / "logits_hf_fp32.npy")
    greedy = np.load(d / "ref" / "greedy_ids.npy").tolist()
    logits, new = _run(model, ids, len(greedy))
    assert np.abs(logits - want).max() / np.abs(want).max() <= 1e-4
    assert new == greedy


def test_hf_folder_matches_transformers(shared_fixtures):
    from modelc.formats.detect import read_model

    d = shared_fixtures / "models" / "tiny-llama"
    model = build_model(read_model(d / "hf"))
    ids = np.load(d / "ref" / "prompt_ids.npy").astype(np.int32)
    want = np.load(d / "ref" / "logits_hf_fp32.npy")
    greedy = np.load(d / "ref" / "greedy_ids.npy").tolist()
    logits, new = _run(model, ids, len(greedy))
    assert np.abs(logits - want).max() / np.abs(want).max() <= 1e-4
    assert new == greedy


@pytest.mark.parametrize(
    "name,qtype",
    [("tiny-llama", "Q8_0"), ("tiny-llama", "Q4_0"), ("tiny-llama256", "Q4_K_M"), ("tiny-llama256", "Q6_K"),
     ("tiny-gpt2", "Q8_0")],
)  # fmt: skip
def test_quantized_gguf_matches_llamacpp(shared_fixtures, name, qtype):
    d = shared_fixtures / "models" / name
    model = build_model(read_gguf(d / "gguf" / f"{name}-{qtype}.gguf"))
    ids = np.load(d / "ref" / "prompt_ids.npy").astype(np.int32)
    want = np.load(d / "ref" / f"llamacpp_{qtype}_logits.npy")
    logits, _ = _run(model, ids)
    cos = (logits * want).sum(-1) / np.linalg.norm(logits, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() >= 0.995, cos

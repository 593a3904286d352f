from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import save_file

from modelc.engine.runner import Runner
from modelc.errors import FormatError, NotFoundError
from modelc.ir import TensorData
from modelc.models.tiny import make_tiny_llama, reference_logits
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk

R = 4


def _adapter(seed, projs=("q", "v", "down", "gate"), layers=(0, 1)):
    """PEFT-named random lora_A/lora_B for a tiny llama (C=64, F=128, K*D=32)."""
    rng = np.random.default_rng(seed)
    dims = {"q": (64, 64), "k": (32, 64), "v": (32, 64), "o": (64, 64), "gate": (128, 64), "up": (128, 64),
            "down": (64, 128)}  # fmt: skip
    t = {}
    for i in layers:
        for p in projs:
            out_dim, in_dim = dims[p]
            mod = "mlp" if p in ("gate", "up", "down") else "self_attn"
            base = f"base_model.model.model.layers.{i}.{mod}.{p}_proj"
            t[base + ".lora_A.weight"] = (rng.standard_normal((R, in_dim)) * 0.2).astype(np.float32)
            t[base + ".lora_B.weight"] = (rng.standard_normal((out_dim, R)) * 0.2).astype(np.float32)
    return t


def _merged(src, tensors, scale):
    """Base weights with B @ A * scale added: what the adapter must be equivalent to."""
    out = {}
    for k, a in tensors.items():
        if ".lora_A." not in k:
            continue
        b = tensors[k.replace("lora_A", "lora_B")]
        name = k.replace("base_model.model.", "").replace(".lora_A.weight", ".weight")
        out[name] = src.tensors[name].array().astype(np.float64) + scale * (b.astype(np.float64) @ a)
    return out


def test_adapter_equals_merged_weights_and_unload_restores_base():
    src = make_tiny_llama(0)
    runner = Runner(src, num_kv_blocks=4)
    ids = list(range(5, 30))
    base = runner.logits(ids)
    tensors = _adapter(1)
    runner.load_adapter("a1", tensors, alpha=2.0)
    got = runner.logits(ids, adapter="a1")
    want = reference_logits(src, ids, merged=_merged(src, tensors, 2.0 / R))
    assert np.abs(want - reference_logits(src, ids)).max() > 0.05  # the adapter really changes the output
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    runner.unload_adapter("a1")
    np.testing.assert_array_equal(runner.logits(ids), base)
    with pytest.raises(NotFoundError):
        runner.unload_adapter("a1")


def test_peft_folder_uses_lora_alpha(tmp_path):
    src = make_tiny_llama(0)
    tensors = _adapter(2, projs=("k", "o", "up"))
    save_file(tensors, str(tmp_path / "adapter_model.safetensors"))
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": R, "lora_alpha": 8, "peft_type": "LORA"}))
    runner = Runner(src, num_kv_blocks=4)
    runner.load_adapter("peft", tmp_path)
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    want = reference_logits(src, ids, merged=_merged(src, tensors, 8 / R))
    np.testing.assert_allclose(runner.logits(ids, adapter="peft"), want, rtol=1e-4, atol=1e-4)
    # a bare .safetensors file: scale = alpha / r
    runner.load_adapter("file", tmp_path / "adapter_model.safetensors", alpha=3.0)
    want = reference_logits(src, ids, merged=_merged(src, tensors, 3.0 / R))
    np.testing.assert_allclose(runner.logits(ids, adapter="file"), want, rtol=1e-4, atol=1e-4)


def test_per_sequence_and_global_adapters_in_one_batch():
    src = make_tiny_llama(3)
    t1, t2 = _adapter(4), _adapter(5, projs=("up", "o"))
    runner = Runner(src, num_kv_blocks=8)
    runner.load_adapter("one", t1)
    runner.load_adapter("two", t2, global_=True)
    p = {1: [4, 5, 6, 7], 2: list(range(10, 30)), 3: [9, 9, 9]}
    adapters = {1: "one", 2: None, 3: "one"}  # None -> the global adapter "two"
    chunks = tuple(
        SeqChunk(s, np.array(ids, np.int32), 0, np.array([s * 2, s * 2 + 1], np.int32), True,
                 SamplingParams(temperature=0.0, logprobs=True, adapter=adapters[s]), len(ids), 0, True)
        for s, ids in p.items()
    )  # fmt: skip
    res = runner.execute(BatchPlan(0, chunks))
    assert res.error is None
    merged = {"one": _merged(src, t1, 1 / R), None: _merged(src, t2, 1 / R)}
    for tok in res.tokens:
        want = reference_logits(src, p[tok.seq_id], merged=merged[adapters[tok.seq_id]])[-1]
        assert tok.token_id == int(np.argmax(want))
        lp = want - want.max() - np.log(np.exp(want - want.max()).sum())
        assert tok.logprob == pytest.approx(lp[tok.token_id], abs=1e-4)
    runner.unload_adapter("two")
    assert runner.global_scales == {} and runner.lora.for_params(SamplingParams()) == ()


def test_global_scales_add_up_and_rescale():
    """llama.cpp's global scales (POST /lora-adapters): every adapter with a scale != 0 applies to the sequences
    naming none, each at its own alpha multiplier; the loaded A/B stay shared."""
    src = make_tiny_llama(3)
    t1, t2 = _adapter(4), _adapter(5, projs=("up", "o"))
    runner = Runner(src, num_kv_blocks=8)
    runner.load_adapter("one", t1)
    runner.load_adapter("two", t2)
    ids = [4, 5, 6, 7]
    base = runner.logits(ids)
    runner.scale_adapters({"one": 0.5, "two": 2.0})
    merged = {**_merged(src, t1, 0.5 / R), **_merged(src, t2, 2.0 / R)}  # t1 and t2 adapt other projections
    np.testing.assert_allclose(runner.logits(ids), reference_logits(src, ids, merged=merged), rtol=1e-4, atol=1e-4)
    assert runner.adapters["one"].alpha == 1.0  # the loaded adapter is unchanged: a request naming it gets alpha 1
    runner.scale_adapters({"one": 0.0})
    assert runner.global_scales == {}
    np.testing.assert_array_equal(runner.logits(ids), base)
    with pytest.raises(NotFoundError):
        runner.scale_adapters({"three": 1.0})


def test_bad_adapters():
    runner = Runner(make_tiny_llama(0), num_kv_blocks=2)
    with pytest.raises(FormatError, match="no lora"):
        runner.load_adapter("x", {"foo.weight": np.zeros((2, 2), np.float32)})
    t = _adapter(0)
    t["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"] = np.zeros((10, R), np.float32)
    with pytest.raises(FormatError, match="q_proj"):
        runner.load_adapter("x", t)
    t = _adapter(0, layers=(7,))
    with pytest.raises(FormatError, match="layer 7"):
        runner.load_adapter("x", t)
    with pytest.raises(FormatError):
        runner.load_adapter("x", "/nonexistent/adapter")


def test_gpt2_peft_adapter_with_fused_c_attn():
    """GPT-2 adapters target Conv1D modules; lora_B of c_attn covers q, k and v rows."""
    from modelc.models.tiny import make_tiny_gpt2, reference_logits

    src = make_tiny_gpt2(0)
    rng = np.random.default_rng(3)
    C, F = 64, 256
    t, merged = {}, {}
    for i in range(2):
        for mod, in_dim, out_dim in (("attn.c_attn", C, 3 * C), ("attn.c_proj", C, C), ("mlp.c_fc", C, F)):
            base = f"base_model.model.transformer.h.{i}.{mod}"
            a = (rng.standard_normal((R, in_dim)) * 0.2).astype(np.float32)
            b = (rng.standard_normal((out_dim, R)) * 0.2).astype(np.float32)
            t[base + ".lora_A.weight"], t[base + ".lora_B.weight"] = a, b
            name = f"transformer.h.{i}.{mod}.weight"  # Conv1D stores (in, out): merge the transpose
            merged[name] = src.tensors[name].array().astype(np.float64) + 0.5 * (b.astype(np.float64) @ a).T
    runner = Runner(src, num_kv_blocks=4)
    runner.load_adapter("g", t, alpha=0.5 * R)
    ids = [5, 6, 7, 8, 9, 10]
    merged_src = make_tiny_gpt2(0)
    for name, w in merged.items():
        merged_src.tensors[name] = TensorData.from_array(w.astype(np.float32))
    want = reference_logits(merged_src, ids)
    assert np.abs(want - reference_logits(src, ids)).max() > 0.05
    np.testing.assert_allclose(runner.logits(ids, adapter="g"), want, rtol=1e-4, atol=1e-4)


def test_load_reports_applied_and_skipped_counts():
    runner = Runner(make_tiny_llama(0), num_kv_blocks=4)
    tensors = {**_adapter(3), "base_model.model.lm_head.modules_to_save.weight": np.zeros((2, 2), np.float32)}
    info = runner.load_adapter("counted", tensors)
    assert info == {"applied": 8, "skipped": 1, "rank": R}  # 2 layers x 4 projections; the extra tensor skipped


def test_request_mixes_in_one_batch():
    """llama-server's per-request `lora` (SamplingParams.lora): each sequence runs exactly its mix, whatever the
    global scales and the other sequences in the batch; the adapter it names joins at its alpha unless listed."""
    src = make_tiny_llama(3)
    t1, t2 = _adapter(4), _adapter(5, projs=("up", "o"))
    runner = Runner(src, num_kv_blocks=16)
    runner.load_adapter("one", t1)
    runner.load_adapter("two", t2, global_=True)
    p = {1: [4, 5, 6, 7], 2: list(range(10, 30)), 3: [9, 9, 9], 4: [7, 8], 5: [3, 1, 4], 6: [2, 7, 1, 8]}
    params = {
        1: SamplingParams(temperature=0.0, logprobs=True, lora=()),  # the base model, over the global "two"
        2: SamplingParams(temperature=0.0, logprobs=True, lora=(("one", 0.5), ("two", 2.0))),
        3: SamplingParams(temperature=0.0, logprobs=True),  # the global scales: "two" at 1
        4: SamplingParams(temperature=0.0, logprobs=True, adapter="one", lora=(("two", -1.0),)),
        5: SamplingParams(temperature=0.0, logprobs=True, adapter="one", lora=(("one", 0.0),)),  # listed: 0
        6: SamplingParams(temperature=0.0, logprobs=True, lora=(("one", 3.0),)),
    }
    merged = {
        1: {},
        2: {**_merged(src, t1, 0.5 / R), **_merged(src, t2, 2.0 / R)},  # t1 and t2 adapt other projections
        3: _merged(src, t2, 1 / R),
        4: {**_merged(src, t1, 1 / R), **_merged(src, t2, -1.0 / R)},
        5: {},
        6: _merged(src, t1, 3.0 / R),
    }
    chunks = tuple(
        SeqChunk(s, np.array(ids, np.int32), 0, np.array([s * 2, s * 2 + 1], np.int32), True, params[s],
                 len(ids), 0, True)
        for s, ids in p.items()
    )  # fmt: skip
    res = runner.execute(BatchPlan(0, chunks))
    assert res.error is None and len(res.tokens) == len(p)
    for tok in res.tokens:
        want = reference_logits(src, p[tok.seq_id], merged=merged[tok.seq_id] or None)[-1]
        assert tok.token_id == int(np.argmax(want))
        lp = want - want.max() - np.log(np.exp(want - want.max()).sum())
        assert tok.logprob == pytest.approx(lp[tok.token_id], abs=1e-4)
    assert sorted(runner.lora.rescaled) == [("one", 0.5), ("one", 3.0), ("two", -1.0), ("two", 2.0)]  # A/B shared
    runner.unload_adapter("two")
    assert runner.lora.rescaled == {}

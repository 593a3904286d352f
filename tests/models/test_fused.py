"""Fused projections (models/fused.py): q/k/v and gate/up as one matmul give the same logits, bit for bit."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from modelc.cache.kv_pages import KVPages
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.select import kernel_set
from modelc.models.batch import LoraRows, make_batch
from modelc.models.fused import MAX_T
from modelc.models.registry import build_model
from modelc.models.tiny import make_tiny_llama

C, F, H, KH = 256, 512, 4, 2  # head_dim 64: q 256 rows, k and v 128 rows each
R16 = [dt for dt in (DataType.Q4_0, DataType.Q4_K, DataType.Q8_0) if quant.KIND[dt] in gemm_r16.R16_KINDS]


def _model(dtype: DataType, v_dtype: DataType, bias: bool):
    src = make_tiny_llama(4, hidden_size=C, intermediate_size=F, num_heads=H, num_kv_heads=KH, qkv_bias=bias,
                          architecture="qwen2" if bias else "llama")  # fmt: skip
    rng = np.random.default_rng(7)
    for name, t in list(src.tensors.items()):
        if ".layers." in name and name.endswith("proj.weight"):
            dt = v_dtype if "v_proj" in name else dtype
            src.tensors[name] = random_tensor(dt, t.shape[0], t.shape[1], rng, scale=0.05)
    return build_model(src, kernel_set("numba"))


def _run(model, lora=()):
    """Logits of a 9-token prefill, then of 3 decode steps (T = 1), then of a 40-token prefill (> MAX_T)."""
    L, K, D = model.kv_shape()
    kv = KVPages(L, 16, K, D, "float32")
    ids = np.random.default_rng(3).integers(3, 96, 9).astype(np.int32)
    table = np.arange(4, dtype=np.int32)
    outs = [model.forward(make_batch([(ids, 0, table)], lora=lora(9) if lora else ()), kv)]
    for step in range(3):
        tok = np.array([int(outs[-1][-1].argmax())], np.int32)
        outs.append(model.forward(make_batch([(tok, 9 + step, table)], lora=lora(1) if lora else ()), kv))
    long = np.random.default_rng(4).integers(3, 96, MAX_T + 8).astype(np.int32)
    outs.append(model.forward(make_batch([(long, 0, np.arange(4, 7, dtype=np.int32))]), kv))
    return outs


def _unfused(model):
    for layer in model.layers:
        layer.qkv, layer.gate_up = (), ()


@pytest.mark.parametrize("dtype", R16, ids=lambda d: d.name)
def test_fused_logits_are_the_unfused_ones(dtype):
    model = _model(dtype, dtype, bias=False)
    layer = model.layers[0]
    assert [f.bounds for f in layer.qkv] == [(0, 256, 384, 512)]
    assert [f.bounds for f in layer.gate_up] == [(0, F, 2 * F)]
    assert np.shares_memory(layer.q.r16, layer.qkv[0].weight.r16)  # the parts view the fused array: no second copy
    fused = _run(model)
    _unfused(model)
    for got, want in zip(fused, _run(model), strict=True):
        np.testing.assert_array_equal(got, want)


def test_mixed_dtypes_fuse_the_run_that_matches_with_bias_and_lora():
    """Q4_K_M's layout: q and k fuse, v (Q6_K) runs alone; qwen2 biases and a LoRA adapter on q and v still apply."""
    model = _model(DataType.Q4_0, DataType.Q6_K, bias=True)
    assert [f.bounds for f in model.layers[1].qkv] == [(0, 256, 384)]
    rng = np.random.default_rng(9)
    pairs = {(i, p): (rng.standard_normal((4, C)).astype(np.float32) * 0.1,
                      rng.standard_normal((rows, 4)).astype(np.float32) * 0.1, 0.5)
             for i in range(2) for p, rows in (("q", 256), ("v", 128), ("up", F))}  # fmt: skip
    adapter = SimpleNamespace(pairs=pairs)

    def lora(t):
        return (LoraRows(adapter, np.arange(t, dtype=np.int64)),)

    fused = _run(model, lora)
    _unfused(model)
    for got, want in zip(fused, _run(model, lora), strict=True):
        np.testing.assert_array_equal(got, want)


def test_one_stored_qkv_and_gate_up_tensor_fuses_too():
    """Phi-3's layout: q/k/v stored as one qkv_proj tensor, gate/up as one gate_up_proj, split by rows at load."""
    from modelc.ir import TensorData

    src = make_tiny_llama(5, hidden_size=C, intermediate_size=F, num_heads=H, num_kv_heads=KH)
    rng = np.random.default_rng(8)
    for i in range(2):
        p = f"model.layers.{i}."
        for fused, parts in (("self_attn.qkv_proj", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
                             ("mlp.gate_up_proj", ("mlp.gate_proj", "mlp.up_proj"))):  # fmt: skip
            ts = [src.tensors.pop(p + n + ".weight") for n in parts]
            rows = sum(t.shape[0] for t in ts)
            q = random_tensor(DataType.Q4_0, rows, C, rng, scale=0.05)
            src.tensors[p + fused + ".weight"] = TensorData((rows, C), q.dtype, q.data)
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            t = src.tensors[p + name + ".weight"]
            src.tensors[p + name + ".weight"] = random_tensor(DataType.Q4_0, t.shape[0], t.shape[1], rng, scale=0.05)
    model = build_model(src, kernel_set("numba"))
    assert [f.bounds for f in model.layers[0].qkv] == [(0, 256, 384, 512)]
    assert [f.bounds for f in model.layers[0].gate_up] == [(0, F, 2 * F)]
    fused = _run(model)
    _unfused(model)
    for got, want in zip(fused, _run(model), strict=True):
        np.testing.assert_array_equal(got, want)

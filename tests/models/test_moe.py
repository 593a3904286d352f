"""Mixture of experts: routing per family, one read of each chosen expert per forward, experts kept as stored."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.ir import DataType
from modelc.kernels.select import kernel_set


@pytest.fixture
def mixtral_dir(fixtures_dir):
    return fixtures_dir / "models" / "variants" / "mixtral"


def test_routing_matches_numpy(mixtral_dir):
    eng = Engine.load(mixtral_dir / "hf")
    model = eng.runner.model
    moe = model.layers[0].moe
    router = eng.source.tensors["model.layers.0.block_sparse_moe.gate.weight"].array().astype(np.float64)
    h = np.random.default_rng(0).standard_normal((9, model.args.hidden_size)).astype(np.float32)
    logits = h.astype(np.float64) @ router.T  # (9, E)
    experts, weights = moe.route(h, kernel_set("ref"))
    assert experts.shape == weights.shape == (9, 2)
    top = np.argsort(-logits, axis=1)[:, :2]
    assert all(set(a) == set(b) for a, b in zip(experts.tolist(), top.tolist(), strict=True))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    chosen = np.take_along_axis(p, experts, axis=1)
    np.testing.assert_allclose(weights, chosen / chosen.sum(axis=1, keepdims=True), rtol=1e-5)  # Mixtral
    moe.normalize = False  # Qwen3-MoE with norm_topk_prob false: the full softmax's share
    _, raw = moe.route(h, kernel_set("ref"))
    np.testing.assert_allclose(raw, chosen, rtol=1e-5)


def test_each_chosen_expert_is_read_once_per_forward(mixtral_dir, monkeypatch):
    """A batch of 12 tokens: every expert that any token chose runs one matmul per projection, not one per token."""
    eng = Engine.load(mixtral_dir / "hf")
    model = eng.runner.model
    moe = model.layers[0].moe
    seen: list[int] = []
    real = model.kernels.matmul
    expert_ids = {id(w): e for e, w in enumerate(moe.gate)}

    def counting(out, x, w):
        if id(w) in expert_ids:
            seen.append(expert_ids[id(w)])
        return real(out, x, w)

    ks = model.kernels
    monkeypatch.setattr(
        model, "kernels", type(ks)(**{**{f: getattr(ks, f) for f in ks.__dataclass_fields__}, "matmul": counting})
    )
    ids = list(range(3, 15))
    eng.logits(ids)
    assert seen and len(seen) == len(set(seen))  # one gate matmul per chosen expert (layer 0)


def test_q8_0_gguf_experts_stay_quantized_and_mapped(mixtral_dir):
    """llama.cpp's Q8_0 conversion: the 3-D expert tensors are sliced per expert without copies; logits stay close."""
    eng = Engine.load(mixtral_dir / "gguf" / "model-q8_0.gguf")
    src = eng.runner.model
    moe = src.layers[0].moe
    stored = eng.source.tensors["blk.0.ffn_gate_exps.weight"]
    assert stored.dtype == DataType.Q8_0 and moe.gate[0].dtype == DataType.Q8_0
    assert all(np.shares_memory(w.blocks, stored.data) for w in moe.gate)
    ids = np.load(mixtral_dir / "ref" / "prompt_ids.npy").tolist()
    want = np.load(mixtral_dir / "ref" / "logits_hf_fp32.npy")
    got = eng.logits(ids)
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert np.median(cos) >= 0.999 and (cos < 0.99).sum() <= 1  # a near-tie may flip one routing choice


def test_gpt_oss_sinks_and_clamped_swiglu_matter(fixtures_dir):
    """Dropping the attention sinks or using the plain SwiGLU moves gpt-oss's logits far past the 1e-4 check."""
    d = fixtures_dir / "models" / "variants" / "gpt-oss"
    ids = np.load(d / "ref" / "prompt_ids.npy").tolist()
    want = np.load(d / "ref" / "logits_hf_fp32.npy")

    def err(change):
        eng = Engine.load(d / "hf")
        for layer in eng.runner.model.layers:
            change(layer)
        return float(np.abs(eng.logits(ids) - want).max() / np.abs(want).max())

    assert err(lambda L: None) <= 1e-4
    assert err(lambda L: setattr(L, "sinks", None)) > 1e-2
    assert err(lambda L: setattr(L.moe, "activation", "silu")) > 1e-2


@pytest.mark.parametrize("name,src", [("qwen3moe", "hf"), ("mixtral", "gguf/model-f32.gguf")])
def test_q8_0_pack_keeps_routers_float(tmp_path, fixtures_dir, name, src):
    """pack --quantize q8_0: experts quantized (GGUF's 3-D tensors as 3-D Q8_0), the routers kept F32 as
    llama.cpp's quantizer does (a quantized router flips expert choices)."""
    from modelc.artifact.reader import open_artifact
    from modelc.pack import pack_model

    d = fixtures_dir / "models" / "variants" / name
    art = open_artifact(pack_model(d / src, out=tmp_path / "q.modelc", quantize="q8_0").path)
    routers = [k for k in art.tensors if k.endswith(("mlp.gate.weight", "ffn_gate_inp.weight"))]
    experts = [k for k in art.tensors if ("experts" in k or "_exps" in k) and k.endswith(".weight")]
    assert routers and all(art.tensors[k].dtype == DataType.F32 for k in routers)
    assert experts and all(art.tensors[k].dtype == DataType.Q8_0 for k in experts)
    ids = np.load(d / "ref" / "prompt_ids.npy").tolist()
    want = np.load(d / "ref" / "logits_hf_fp32.npy")
    got = Engine(art).logits(ids)
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert np.median(cos) >= 0.999 and (cos < 0.99).sum() <= 1


def test_gpt_oss_mxfp4_experts(fixtures_dir):
    """gpt-oss with MXFP4 experts (tools/make_variant_fixtures.py quantizes the F32 file's *_exps with gguf-py):
    the 3-D MXFP4 tensors are sliced per expert and stay MXFP4; the logits match the same model on the
    dequantized experts (cosine >= 0.999: the MXFP4 path quantizes activations to int8 blocks, as llama.cpp)."""
    from modelc.formats.detect import read_model
    from modelc.ir import TensorData
    from modelc.kernels.reference.ref_linear import dequantize

    d = fixtures_dir / "models" / "variants" / "gpt-oss"
    path = d / "gguf" / "model-mxfp4-experts.gguf"
    ids = np.load(d / "ref" / "prompt_ids.npy").tolist()
    eng = Engine.load(path)
    stored = eng.source.tensors["blk.0.ffn_gate_exps.weight"]
    moe = eng.runner.model.layers[0].moe
    assert stored.dtype == DataType.MXFP4 and all(w.dtype == DataType.MXFP4 for w in moe.gate + moe.up + moe.down)
    assert all(np.shares_memory(w.blocks, stored.data) for w in moe.gate)
    plain = read_model(path)
    for name, t in list(plain.tensors.items()):
        if name.endswith("_exps.weight"):
            plain.tensors[name] = TensorData.from_array(dequantize(t).reshape(t.shape).astype(np.float32))
    got, want = eng.logits(ids), Engine(plain).logits(ids)
    cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
    assert cos.min() >= 0.999


def test_prefill_runs_repacked_experts_in_one_call_where_the_table_keeps_them_on_gemm_r16(monkeypatch):
    """MoeFFN.one_call: above moe_ffn.FUSED_MAX_T tokens a layer whose expert matmuls would all be gemm_r16's
    (the repacked copy moe_ffn reads) runs moe_ffn's one call up to R16_MAX_T; the per-expert matmuls give the
    same numbers up to float summation order."""
    import pathlib

    from modelc.kernels.layer import moe_ffn
    from modelc.kernels.matmul.plan import Path, paths_up_to

    eng = Engine.load(pathlib.Path(__file__).parents[1] / "fixtures/models/quant/qwen3moe/model-Q4_K_M.gguf")
    L = eng.runner.model.layers[0].moe
    assert L.stacked is not None
    on_r16 = all(paths_up_to(w, moe_ffn.R16_MAX_T) == {Path.R16} for w in (L.gate[0], L.up[0], L.down[0]))
    T = moe_ffn.FUSED_MAX_T + 9
    assert L.one_call(moe_ffn.FUSED_MAX_T) and L.one_call(T) == on_r16 and not L.one_call(moe_ffn.R16_MAX_T + 1)
    calls = []
    real = eng.runner.model.kernels.moe_ffn
    h = np.random.default_rng(0).standard_normal((T, L.gate[0].cols)).astype(np.float32)
    outs = []
    top = moe_ffn.R16_MAX_T
    for limit in (top, 0):
        monkeypatch.setattr(moe_ffn, "R16_MAX_T", limit)
        kernels = dataclasses.replace(
            eng.runner.model.kernels, moe_ffn=lambda *a, lim=limit, **k: calls.append(lim) or real(*a, **k)
        )
        out = np.empty_like(h)
        L.forward(out, h, kernels)
        outs.append(out)
    assert calls == ([top] if on_r16 else [])
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-4 * float(np.abs(outs[1]).max()))

"""End to end: a GGUF whose weights are IQ4_XS (or another i-quant) packs, generates, and its logits
match the same model with every weight dequantized to F32."""

from __future__ import annotations

import pathlib

import gguf
import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.ir import DataType, TensorData
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.reference import ref_linear
from modelc.pack import pack

from .gguf_factory import SPM_TOKENS, add_spm_tokenizer

HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 256, 512, 4, 2, 2


def _tensors(qtype: DataType) -> dict[str, TensorData]:
    rng = np.random.default_rng(7)
    vocab, kv = len(SPM_TOKENS), KV_HEADS * HIDDEN // HEADS
    shapes = {"token_embd.weight": (vocab, HIDDEN), "output.weight": (vocab, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        shapes |= {p + "attn_q.weight": (HIDDEN, HIDDEN), p + "attn_k.weight": (kv, HIDDEN),
                   p + "attn_v.weight": (kv, HIDDEN), p + "attn_output.weight": (HIDDEN, HIDDEN),
                   p + "ffn_gate.weight": (FFN, HIDDEN), p + "ffn_up.weight": (FFN, HIDDEN),
                   p + "ffn_down.weight": (HIDDEN, FFN)}  # fmt: skip
    out = {name: random_tensor(qtype, *shape, rng, scale=0.08) for name, shape in shapes.items()}
    for name in [f"blk.{i}.{n}_norm.weight" for i in range(LAYERS) for n in ("attn", "ffn")] + ["output_norm.weight"]:
        out[name] = TensorData.from_array((1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32))
    return out


def _write(path: pathlib.Path, tensors: dict[str, TensorData]) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(LAYERS)
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    add_spm_tokenizer(w)
    for name, t in tensors.items():
        if t.dtype is DataType.F32:
            w.add_tensor(name, t.array())
        else:
            w.add_tensor(name, t.blocks(), raw_dtype=gguf.GGMLQuantizationType[t.dtype.value])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _dequantized(tensors: dict[str, TensorData]) -> dict[str, TensorData]:
    return {
        n: t if t.dtype is DataType.F32 else TensorData.from_array(ref_linear.dequantize(t)) for n, t in tensors.items()
    }


def _engines(tmp_path: pathlib.Path, qtype: DataType, monkeypatch=None) -> tuple[Engine, Engine]:
    q = _tensors(qtype)
    _write(tmp_path / "q.gguf", q)
    _write(tmp_path / "f.gguf", _dequantized(q))
    if monkeypatch is not None:  # the file layout: prefill dequantizes (BLAS) instead of gemm_r16's int8 dots
        monkeypatch.setenv("MODELC_REPACK", "0")
    # the kernels are compared, not the KV type: f32 for both (auto would give the quantized one f16)
    eq = Engine.load(pack(tmp_path / "q.gguf", out=tmp_path / "q.modelc"), kv_cache_tokens=256, kv_dtype="f32")
    ef = Engine.load(pack(tmp_path / "f.gguf", out=tmp_path / "f.modelc"), kv_cache_tokens=256, kv_dtype="f32")
    return eq, ef


@pytest.mark.parametrize("name", ["IQ4_XS", pytest.param("IQ2_XXS", marks=pytest.mark.slow)])
def test_iquant_gguf_packs_generates_and_matches_dequantized_f32(
    tmp_path: pathlib.Path, name: str, monkeypatch
) -> None:
    eq, ef = _engines(tmp_path, DataType[name], monkeypatch)
    assert eq.runner.model is not None
    ids = [1, *np.random.default_rng(3).integers(3, len(SPM_TOKENS), 39).tolist()]
    # 40 tokens: prefill dequantizes each matrix exactly (BLAS path), so the logits agree to fp32 rounding
    got, want = eq.logits(ids), ef.logits(ids)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    # a few tokens: the int8-activation kernels (~5e-3 relative, as llama.cpp), argmax mostly equal
    got, want = eq.logits(ids[:5]), ef.logits(ids[:5])
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
    text = eq.generate("hi", temperature=0.0, max_tokens=6, ignore_eos=True)
    assert isinstance(text, str) and text


@pytest.mark.parametrize("name", ["IQ4_XS", "IQ4_NL"])
def test_iq4_runs_the_repacked_16_row_kernels_at_every_t(tmp_path: pathlib.Path, name: str, monkeypatch) -> None:
    """Loaded with the numba kernels, IQ4 matrices are repacked (gemm_r16) and every matmul of them, prefill
    and decode, runs gemm_r16_iq4: int8 activations, so within the int8 kernels' error of the f32 model."""
    from modelc.kernels.matmul import gemm_r16
    from modelc.kernels.quant import quant

    kind = quant.KIND[DataType[name]]
    if kind not in gemm_r16.R16_KINDS:
        pytest.skip("no exact wide dot (AVX2 without VNNI): IQ4 keeps the file layout")
    seen: list[int] = []
    real = gemm_r16.F32_OF_KIND[kind]  # linear.matmul's entry to this kind's repacked kernel (gemm_r16_iq4's)

    def spy(out, x, rw):
        seen.append(x.shape[0])
        real(out, x, rw)

    monkeypatch.setitem(gemm_r16.F32_OF_KIND, kind, spy)
    eq, ef = _engines(tmp_path, DataType[name])
    ids = [1, *np.random.default_rng(3).integers(3, len(SPM_TOKENS), 39).tolist()]
    for n in (40, 5):
        seen.clear()
        got, want = eq.logits(ids[:n]), ef.logits(ids[:n])
        assert n in seen  # the layers' matrices went through the repacked kernels
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
        cos = (got * want).sum(-1) / np.linalg.norm(got, axis=-1) / np.linalg.norm(want, axis=-1)
        assert cos.min() > 0.999
    seen.clear()
    assert eq.generate("hi", temperature=0.0, max_tokens=4, ignore_eos=True)
    decode = eq.runner.model.decode  # one-token steps through kernels/layer/decode_step.py call matmul_f32 in numba
    plans = None if decode is None else decode.plans
    if plans is None:
        assert 1 in seen  # decode: T = 1
    else:
        assert all(p is not None and p.qkv[1] == kind and p.out[1] == kind for p in plans)  # (w, kind, how, ...)

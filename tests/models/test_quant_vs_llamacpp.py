"""modelc on llama.cpp-quantized GGUFs, against llama.cpp's own logits on the same files (issues 15, 41).

tests/fixtures/models/quant/FAMILY/ (tools/make_quant_fixtures.py: llama.cpp's converter and quantizer;
llama-cpp-python 0.3.36 built for this CPU) holds a small random model per family (hidden 256: llama,
qwen3moe and gpt-oss one layer, llama3 and gemma2 two, gemma3 six), quantized by llama.cpp, with
transformers' fp32 logits and llama.cpp's logits of every file at 32 prompt positions (F32 KV). The llama
family has every type llama.cpp makes without an importance matrix and the six it makes only with one
(IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M, IQ3_XXS: llama-imatrix on other text, then llama-quantize
--imatrix). Per file, as the issues ask: modelc's mean |logit - fp32 logit| at most 1.25x llama.cpp's,
argmax agreement with fp32 at least llama.cpp's minus two positions, and centered cosine vs llama.cpp's
logits >= 0.99 at every position. Run four ways: 32 tokens (modelc's prefill), the first 24 tokens (int8
activations, as llama.cpp), the same 24 with a MoE layer's experts in one kernel call
(kernels/layer/moe_ffn.py, what decode batches of up to moe_ffn.FUSED_MAX_T tokens run, where it reads the
expert type), and position 0 alone (the T=1 decode kernels).

Two families differ from llama.cpp for reasons on llama.cpp's side (docs/models.md); test_gpt_oss_yarn and
test_gemma_roundings show each, and the cosine rule takes it out:
- gpt-oss: llama.cpp rounds the ends of the YaRN ramp to whole dims (ggml_rope_yarn_corr_dims); this model
  does not (its config.json: truncate false, as OpenAI's released one). A GGUF cannot carry the flag, so
  modelc reads gpt-oss GGUFs as llama.cpp does (formats/gguf.GPT_OSS_YARN_TRUNCATE); the fp32 reference keeps
  the model's own ramp, which both engines miss alike (test_gpt_oss_yarn).
- Gemma 2/3: llama.cpp rounds the activations of every quantized matmul to 8 bits per 256 values (Q8_K; per
  32 with an fp16 scale for the legacy types) and reads GELU from an fp16 table. The cosine rule there is
  checked on modelc's numpy reference given those roundings (tests/models/llamacpp_numerics.py); the error
  and argmax rules on modelc as it runs.

One exception, for the MoE family only: a position where modelc's router has its k-th and (k+1)-th
expert logits within ROUTER_TIE of each other is a coin toss (llama.cpp's activations are rounded to
8 bits, modelc's prefill ones are not: the two engines may pick different experts there). Such
positions may fall below the cosine bound, at most two per file; both engines' errors still count.

MODELC_QUANT_FIXTURES=DIR points the test at another set (e.g. every type for the MoE family too,
which tests/fixtures leaves out for size); `-s` prints the figures of docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import pathlib

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.formats import gguf
from modelc.kernels import select
from modelc.kernels.layer import moe_ffn
from modelc.models import moe
from tests.models.llamacpp_numerics import llamacpp_kernel_set

ROOT = pathlib.Path(
    os.environ.get("MODELC_QUANT_FIXTURES", pathlib.Path(__file__).parents[1] / "fixtures/models/quant")
)
FILES = sorted((d.name, p.stem.removeprefix("model-")) for d in ROOT.glob("*") for p in d.glob("model-*.gguf"))
ROUTER_TIE = 0.02
MAX_TIES = 2
GEMMA = ("gemma2", "gemma3")


def _centered_cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    return (a * b).sum(axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def _router_gaps(monkeypatch) -> list[np.ndarray]:
    """Record, per MoE call, each token's gap between its k-th and (k+1)-th router logits."""
    gaps: list[np.ndarray] = []
    forward = moe.MoeFFN.forward  # the one-call path may compute its router logits inside the kernel

    def recording(self, out, h, kernels):
        logits = self._logits(h, kernels)
        s = -np.sort(-logits, axis=1)
        gaps.append(s[:, self.top_k - 1] - s[:, self.top_k])
        return forward(self, out, h, kernels)

    monkeypatch.setattr(moe.MoeFFN, "forward", recording)
    return gaps


@pytest.mark.parametrize(("family", "qtype"), FILES, ids=[f"{f}-{q}" for f, q in FILES])
def test_no_worse_than_llamacpp(family, qtype, monkeypatch):
    ref = ROOT / family / "ref"
    ids = np.load(ref / "prompt_ids.npy").tolist()
    fp32 = np.load(ref / "logits_fp32.npy").astype(np.float64)
    theirs_all = np.load(ref / "logits_llamacpp.npz")[qtype].astype(np.float64)
    gemma_like_llamacpp = _with_llamacpp_roundings(family, qtype, ids, monkeypatch) if family in GEMMA else None
    gaps = _router_gaps(monkeypatch)
    eng = Engine.load(ROOT / family / f"model-{qtype}.gguf")
    per_expert = min(moe_ffn.FUSED_MAX_T, 23)  # 24 tokens and more: per-expert matmuls
    for n, one_call in ((len(ids), False), (24, False), (24, True), (1, True)):
        monkeypatch.setattr(moe_ffn, "FUSED_MAX_T", n if one_call else per_expert)
        monkeypatch.setattr(moe_ffn, "R16_MAX_T", n if one_call else 0)  # (MoeFFN.one_call's repacked rule)
        gaps.clear()
        ours = eng.logits(ids[:n]).astype(np.float64)
        want, theirs = fp32[:n], theirs_all[:n]
        err, err_lc = np.abs(ours - want).mean(), np.abs(theirs - want).mean()
        agree = int((ours.argmax(1) == want.argmax(1)).sum())
        agree_lc = int((theirs.argmax(1) == want.argmax(1)).sum())
        cos = _centered_cos(ours if gemma_like_llamacpp is None else gemma_like_llamacpp[:n], theirs)
        ties = np.min(gaps, axis=0) < ROUTER_TIE if gaps else np.zeros(n, bool)
        low = cos < 0.99
        print(
            f"{family} {qtype} T={n}{' one-call experts' if one_call else ''}: mean|err| {err:.4f} vs llama.cpp {err_lc:.4f} ({err / err_lc:.3f}x), "
            f"argmax {agree}/{n} vs {agree_lc}/{n}, min cos {cos.min():.5f}"
            + (" (modelc ref with llama.cpp's roundings)" if gemma_like_llamacpp is not None else "")
            + (f" at {int(low.sum())} router tie(s), {cos[~low].min():.5f} elsewhere" if low.any() else "")
        )
        assert err <= 1.25 * err_lc
        assert agree >= agree_lc - 2
        assert low.sum() <= MAX_TIES and ties[low].all()


def test_fixtures_cover_the_types_llamacpp_makes():
    """The llama family has every type llama.cpp quantized to (none refused by llama.cpp's quantizer, the six
    importance-matrix types included; the K "_S" mixes that tools/make_quant_fixtures.py adds for gpt-oss aside)."""
    info = json.loads((ROOT / "llama" / "ref" / "ref.json").read_text())
    made = {name for name, t in info["types"].items() if "error" not in t}
    assert {q for f, q in FILES if f == "llama"} == set(info["kept"]) == made - {"Q3_K_S", "Q4_K_S", "Q5_K_S"}
    assert {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_S", "IQ1_M", "IQ3_XXS"} <= made
    assert len(made) >= 15
    assert any(f == "qwen3moe" for f, _ in FILES)


def _with_llamacpp_roundings(family, qtype, ids, monkeypatch) -> np.ndarray:
    """modelc's numpy reference with llama.cpp's roundings (activations, GELU) on the file, F32 KV as llama.cpp's."""
    with monkeypatch.context() as m:
        ks = llamacpp_kernel_set()
        m.setenv("MODELC_KERNELS", "ref")
        m.setattr(select, "kernel_set", lambda name=None: ks)
        eng = Engine.load(ROOT / family / f"model-{qtype}.gguf", kv_dtype="f32")
        return eng.logits(ids).astype(np.float64)


def _cos_vs_llamacpp(family: str, qtype: str, **load) -> tuple[np.ndarray, float, float]:
    """(centered cosine per position, modelc's and llama.cpp's mean |logit - fp32|) on one fixture file."""
    ref = ROOT / family / "ref"
    ids = np.load(ref / "prompt_ids.npy").tolist()
    fp32 = np.load(ref / "logits_fp32.npy").astype(np.float64)
    theirs = np.load(ref / "logits_llamacpp.npz")[qtype].astype(np.float64)
    ours = Engine.load(ROOT / family / f"model-{qtype}.gguf", **load).logits(ids).astype(np.float64)
    return _centered_cos(ours, theirs), np.abs(ours - fp32).mean(), np.abs(theirs - fp32).mean()


@pytest.mark.skipif(not (ROOT / "gpt-oss" / "model-Q8_0.gguf").exists(), reason="no gpt-oss fixture")
def test_gpt_oss_yarn(monkeypatch):
    """gpt-oss Q8_0, the rules against transformers' fp32 of the same model with the rounded YaRN ramp
    (`truncate: true`, transformers' default when config.json has no such key): modelc, reading the GGUF as
    llama.cpp does, has llama.cpp's error and logits (measured 1.00x, cosine 0.9999). Before, modelc read
    every gpt-oss GGUF with the unrounded ramp: 1.74x llama.cpp's error there, cosine 0.9976. That choice is
    right only for a model whose config.json says `truncate: false` (OpenAI's released ones, and this
    fixture's own fp32 reference): there it is 0.57x llama.cpp's error."""
    ref = ROOT / "gpt-oss" / "ref"
    ids = np.load(ref / "prompt_ids.npy").tolist()
    rounded = np.load(ref / "logits_fp32_rounded_yarn.npy").astype(np.float64)
    theirs = np.load(ref / "logits_llamacpp.npz")["Q8_0"].astype(np.float64)
    ours = Engine.load(ROOT / "gpt-oss" / "model-Q8_0.gguf").logits(ids).astype(np.float64)
    err, err_lc = np.abs(ours - rounded).mean(), np.abs(theirs - rounded).mean()
    agree = int((ours.argmax(1) == rounded.argmax(1)).sum())
    agree_lc = int((theirs.argmax(1) == rounded.argmax(1)).sum())
    print(f"gpt-oss Q8_0 vs rounded-YaRN fp32: {err:.4f} vs llama.cpp {err_lc:.4f}, argmax {agree} vs {agree_lc}")
    assert err <= 1.1 * err_lc and agree >= agree_lc - 2
    assert _centered_cos(ours, theirs).min() >= 0.9995
    monkeypatch.setattr(gguf, "GPT_OSS_YARN_TRUNCATE", False)  # the model's own ramp
    cos, err, err_lc = _cos_vs_llamacpp("gpt-oss", "Q8_0")
    assert err < 0.7 * err_lc and cos.min() < 0.999


@pytest.mark.parametrize("family", GEMMA)
def test_gemma_roundings(family, monkeypatch):
    """Gemma Q4_K_M: modelc's numpy reference leaves llama.cpp's logits (gemma3: below 0.99 at some
    positions); given llama.cpp's activation and GELU roundings it matches llama.cpp to 0.999 everywhere."""
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    cos, _, _ = _cos_vs_llamacpp(family, "Q4_K_M", kv_dtype="f32")
    assert cos.min() < (0.99 if family == "gemma3" else 0.9995)
    ids = np.load(ROOT / family / "ref" / "prompt_ids.npy").tolist()
    theirs = np.load(ROOT / family / "ref" / "logits_llamacpp.npz")["Q4_K_M"].astype(np.float64)
    assert _centered_cos(_with_llamacpp_roundings(family, "Q4_K_M", ids, monkeypatch), theirs).min() >= 0.999

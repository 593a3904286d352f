"""modelc on llama.cpp-quantized GGUFs, against llama.cpp's own logits on the same files (issue 15).

tests/fixtures/models/quant/FAMILY/ (tools/make_quant_fixtures.py: llama.cpp's converter and quantizer,
no importance matrix; llama-cpp-python 0.3.36 built for this CPU) holds one random transformer layer
of hidden 256 per family, quantized to each type llama.cpp makes without an importance matrix, with
transformers' fp32 logits and llama.cpp's logits of every file at 32 prompt positions. Per file, as
the issue asks: modelc's mean |logit - fp32 logit| at most 1.25x llama.cpp's, argmax agreement with
fp32 at least llama.cpp's minus two positions, and centered cosine vs llama.cpp's logits >= 0.99 at
every position. Run four ways: 32 tokens (modelc's prefill: dequantize + BLAS), the first 24 tokens
(int8 activations, as llama.cpp), the same 24 with a MoE layer's experts in one kernel call
(kernels/layer/moe_ffn.py, what decode batches of up to moe_ffn.FUSED_MAX_T tokens run, where it reads the
expert type), and position 0 alone (the T=1 decode kernels).

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
from modelc.kernels.layer import moe_ffn
from modelc.models import moe

ROOT = pathlib.Path(
    os.environ.get("MODELC_QUANT_FIXTURES", pathlib.Path(__file__).parents[1] / "fixtures/models/quant")
)
FILES = sorted((d.name, p.stem.removeprefix("model-")) for d in ROOT.glob("*") for p in d.glob("model-*.gguf"))
ROUTER_TIE = 0.02
MAX_TIES = 2


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
        cos = _centered_cos(ours, theirs)
        ties = np.min(gaps, axis=0) < ROUTER_TIE if gaps else np.zeros(n, bool)
        low = cos < 0.99
        print(
            f"{family} {qtype} T={n}{' one-call experts' if one_call else ''}: mean|err| {err:.4f} vs llama.cpp {err_lc:.4f} ({err / err_lc:.3f}x), "
            f"argmax {agree}/{n} vs {agree_lc}/{n}, min cos {cos.min():.5f}"
            + (f" at {int(low.sum())} router tie(s), {cos[~low].min():.5f} elsewhere" if low.any() else "")
        )
        assert err <= 1.25 * err_lc
        assert agree >= agree_lc - 2
        assert low.sum() <= MAX_TIES and ties[low].all()


def test_fixtures_cover_the_types_llamacpp_makes():
    """Every type llama.cpp quantized is here for the llama family (none refused by llama.cpp's quantizer)."""
    info = json.loads((ROOT / "llama" / "ref" / "ref.json").read_text())
    made = {name for name, t in info["types"].items() if "error" not in t}
    assert {q for f, q in FILES if f == "llama"} == made
    assert len(made) >= 15
    assert any(f == "qwen3moe" for f, _ in FILES)

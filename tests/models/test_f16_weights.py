"""F16 weights (pack --quantize fp16) on the numba kernels: against the numpy twins on the same weights, and
against transformers' stored fp32 logits.

Below PREFILL_MIN_T_FLOAT tokens an F16 matmul runs gemm_float.hmatmul (fp16 converted in registers), from
there dequantize + BLAS: both are checked, on a dense llama and on a MoE model (the experts are F16 too).
The numpy twins (MODELC_KERNELS=ref) convert the same fp16 values exactly, so the two sides differ only
by summation order: 1e-4 relative, the tolerance of every fp32 check here. Against transformers (fp32
weights) the fp16 rounding of the weights shows: per position within F16_VS_FP32 of the largest logit
(measured: at most 1.8e-3), except that a MoE position whose router picks another expert once its weights
are rounded is a coin toss (qwen3moe's last prompt position here), as in test_quant_vs_llamacpp: at most
MAX_TIES such positions.
"""

from __future__ import annotations

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.artifact.reader import open_artifact
from modelc.engine.runner import _one_weight_per_type
from modelc.ir import DataType
from modelc.kernels.matmul import plan
from modelc.kernels.matmul.plan import Path
from modelc.pack import pack

MAX_REL_ERR = 1e-4
F16_VS_FP32 = 1e-2
MAX_TIES = {"llama3": 0, "qwen3moe": 2}


def _ref(d):
    r = d / "ref"
    return np.load(r / "prompt_ids.npy").tolist(), np.load(r / "logits_hf_fp32.npy")


def _rel_err(got, want):
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", ["llama3", "qwen3moe"])
@pytest.mark.parametrize("path", ["half", "blas"])
def test_f16_weights_match_numpy_twins_and_transformers(fixtures_dir, tmp_path, monkeypatch, name, path):
    d = fixtures_dir / "models" / "variants" / name
    ids, want = _ref(d)
    assert len(ids) < plan.PREFILL_MIN_T_FLOAT  # so "half" really runs hmatmul for the whole prompt
    if path == "blas":
        monkeypatch.setattr(plan, "PREFILL_MIN_T_FLOAT", 1)  # read when the weights are built (plan.fixed_paths)
    art = open_artifact(pack(d / "hf", out=tmp_path / "f16.modelc", quantize="fp16"))
    projections = [n for n in art.tensors if ".layers." in n and n.endswith("proj.weight")]
    assert projections and all(art.tensors[n].dtype == DataType.F16 for n in projections)
    eng = Engine(art, kv_dtype="f32")
    f16 = [w for w in _one_weight_per_type(eng.runner.model) if w.dtype is DataType.F16]
    paths = {plan.path(w, t) for w in f16 for t in (1, len(ids))}
    assert paths == ({Path.HALF} if path == "half" else {Path.BLAS}), paths
    got = eng.logits(ids)
    monkeypatch.setenv("MODELC_KERNELS", "ref")
    twins = Engine(art, kv_dtype="f32").logits(ids)
    assert _rel_err(got, twins) <= MAX_REL_ERR
    per_position = np.abs(got - want).max(axis=1) / np.abs(want).max()
    assert per_position.max() > MAX_REL_ERR  # the weights really are fp16
    assert (per_position > F16_VS_FP32).sum() <= MAX_TIES[name], per_position

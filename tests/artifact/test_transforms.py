from __future__ import annotations

import numpy as np
import pytest

import modelc.artifact.transforms as tr
from modelc.artifact.prune import prune_tensor
from modelc.artifact.quantize import quantize_tensor
from modelc.errors import ModelcError
from modelc.ir import DataType, TensorData


def tensors() -> dict[str, TensorData]:
    rng = np.random.default_rng(0)
    return {
        "a.weight": TensorData.from_array(rng.standard_normal((8, 64)).astype(np.float32)),
        "b.weight": TensorData.from_array(rng.standard_normal((4, 2, 32)).astype(np.float32)),
        "norm.weight": TensorData.from_array(np.ones(64, np.float32)),
    }


def test_plan_is_lazy_and_shares_one_computation(monkeypatch):
    calls = []
    real = tr.quantize_tensor

    def counting(name, t, kind):
        calls.append((name, t.shape))
        return real(name, t, kind)

    monkeypatch.setattr(tr, "quantize_tensor", counting)
    src = tensors()
    out, stats = tr.plan(src, quantize="int8", prune=0.5)
    assert stats.quantized == ["a.weight", "b.weight"] and stats.num_pruned == 0
    assert [c[1] for c in calls] == [(1, 64), (1, 32)]  # only the one-row probes so far
    assert out["norm.weight"] is src["norm.weight"]
    assert isinstance(out["a.weight"], tr.Deferred) and out["a.weight"].dtype is DataType.I8
    assert out["a.weight@scale"].shape == (8,) and out["b.weight@scale"].shape == (8,)
    assert out["b.weight"].shape == (4, 2, 32) and out["b.weight"].nbytes == 256
    got = bytes(out["a.weight"].data)
    scale = bytes(out["a.weight@scale"].data)
    assert len(calls) == 3  # a.weight and its scale came from one computation
    pruned, n = prune_tensor(src["a.weight"], 0.5)
    want = quantize_tensor("a.weight", pruned, "int8")
    assert got == bytes(want["a.weight"].data) and scale == bytes(want["a.weight@scale"].data)
    assert stats.num_pruned == n > 0


@pytest.mark.parametrize("kind", ["q8_0", "f16", "int4"])
def test_planned_sizes_match_real_output(kind):
    out, _ = tr.plan(tensors(), quantize=kind)
    for name, t in out.items():
        assert len(t.data) == t.nbytes, name


def test_bad_threshold_rejected_before_writing():
    with pytest.raises(ModelcError, match="threshold"):
        tr.plan(tensors(), prune=-1.0)

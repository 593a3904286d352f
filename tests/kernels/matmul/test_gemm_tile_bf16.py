"""gemm_tile_bf16 (AMX bf16 tiles from gemm_r16's copy) against ref_linear.matmul_bf16, and its opt-in plan path."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, gemm_tile_bf16, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime import cpu

EXACT_BF16 = 2e-5  # relative to max |ref|: the same bf16 products, float summation order differs
needs_bf16 = pytest.mark.skipif(not cpu.HAS_AMX_BF16, reason="no AMX bf16 tiles on this CPU / kernel")


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


def test_bf16_round_is_nearest_even() -> None:
    one = np.float32(1.0)
    ulp = np.float32(2.0**-7)  # bf16 keeps 7 fraction bits
    x = np.array([one + ulp / 2, one + 3 * ulp / 2, one + ulp / 4, -(one + 3 * ulp / 4), 3e-39], np.float32)
    want = np.array([one, one + 2 * ulp, one, -(one + ulp), 3e-39], np.float32)
    got = ref_linear.bf16_round(x)
    np.testing.assert_array_equal(got[:4], want[:4])
    assert got[4] > 0 and (got[4:].view(np.uint32) & 0xFFFF) == 0  # subnormal: kept, low half zero


@needs_bf16
def test_act_bf16_tiles_and_pads() -> None:
    rng = np.random.default_rng(3)
    t, c = 37, 96
    x = rng.standard_normal((t, c)).astype(np.float32)
    xb = np.full((4, c // 32, 16, 32), 0xFFFF, np.uint16)  # canary: every element is written
    gemm_tile_bf16.act_bf16(xb, x)
    want = np.zeros((64, c), np.uint16)
    want[:t] = (ref_linear.bf16_round(x).view(np.uint32) >> 16).astype(np.uint16)
    np.testing.assert_array_equal(xb.transpose(0, 2, 1, 3).reshape(64, c), want)


@needs_bf16
@pytest.mark.parametrize("name", ["Q4_0", "Q8_0", "Q4_K", "Q6_K"])
def test_bf16_tiles_match_the_twin(name: str) -> None:
    """Whole and partial pairs of token tiles (T = 1, 16, 33, 64, 71), one group alone (N = 16) and a pair plus one
    (N = 48), K of 2 and 3 super-blocks; NaN canary."""
    c = 512 if name in ("Q4_0", "Q8_0") else 768
    kind = quant.KIND[DataType[name]]
    for k, n in enumerate((16, 48)):
        rng = np.random.default_rng(11 + k)
        w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
        rw = gemm_r16.repack(w.blocks, w.dtype)
        for t in (1, 16, 33, 64, 71):
            x = rng.standard_normal((t, c)).astype(np.float32)
            want = np.empty((t, n), np.float32)
            ref_linear.matmul_bf16(want, x, w)
            out = np.full((t, n), np.nan, np.float32)
            gemm_tile_bf16.qmatmul_bf16_r16(out, x, rw, kind)
            assert not np.isnan(out).any(), (n, t)
            assert _relerr(out, want) < EXACT_BF16, (n, t)


@pytest.mark.skipif(not cpu.HAS_AMX, reason="no AMX tiles on this CPU / kernel")
def test_amx_bf16_is_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off by default (AMX_R16 from R16_AMX_MIN_T on); with plan.AMX_BF16 a repacked weight takes the bf16 tiles
    there, through linear.matmul."""
    rng = np.random.default_rng(5)
    n, c, t = 32, 256, plan.R16_AMX_MIN_T[quant.KIND[DataType.Q4_K]]
    w = linear.prepare_weight(random_tensor(DataType.Q4_K, n, c, rng))
    w_r16 = dataclasses.replace(w, r16=gemm_r16.repack(w.blocks, w.dtype))  # (as the loader makes it)
    if "MODELC_AMX_BF16" not in os.environ:
        assert plan.plan_matmul(w_r16, t) is plan.Path.AMX_R16
    if not cpu.HAS_AMX_BF16:
        return
    monkeypatch.setattr(plan, "AMX_BF16", True)
    assert plan.plan_matmul(w_r16, t) is plan.Path.AMX_BF16
    assert plan.plan_matmul(w_r16, t - 1) is plan.Path.R16
    w_bf16 = dataclasses.replace(w_r16)  # a weight made now has the bf16 path in its fixed plan
    assert plan.path(w_bf16, t) is plan.Path.AMX_BF16
    x = rng.standard_normal((t, c)).astype(np.float32)
    out = np.full((t, n), np.nan, np.float32)
    linear.matmul(out, x, w_bf16)
    want = np.empty_like(out)
    ref_linear.matmul_bf16(want, x, w)
    assert _relerr(out, want) < EXACT_BF16

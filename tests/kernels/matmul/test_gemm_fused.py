"""gemm_fused.qmatvec (T=1 Q4_0 / Q8_0 matvec) and its 16-lane qdot intrinsics against numpy twins."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import njit

from modelc.ir import DataType, TensorData
from modelc.kernels.matmul import gemm_fused, linear
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot

EXACT_QACT = 2e-5  # float summation order only: the int8 dots are exact
TYPES = ["Q4_0", "Q8_0"]


def _qmatvec(w: linear.Weight, x: np.ndarray) -> np.ndarray:
    c = x.shape[1]
    xq = np.empty((1, c), np.int8)  # (1, C)
    xd = np.empty((1, c // 32), np.float32)  # (1, C/32)
    xs = np.empty((1, c // 16), np.float32)  # (1, C/16)
    quant.quantize_act(xq, xd, xs, x)
    out = np.full((1, w.rows), np.nan, np.float32)  # (1, N) canary: every element must be written
    gemm_fused.qmatvec(out, xq, xd, xs, w.blocks, quant.KIND[w.dtype])
    return out


def _want(w: linear.Weight, x: np.ndarray) -> np.ndarray:
    want = np.empty((1, w.rows), np.float32)  # (1, N)
    ref_linear.matmul_qact(want, x, w)
    return want


def _relerr(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


@pytest.mark.parametrize("name", TYPES)
@pytest.mark.parametrize("c", [32, 64, 96, 128, 160, 224, 384, 2048 + 96])
def test_qmatvec_matches_twin(name: str, c: int) -> None:
    """Every C % 128 (Q4_0 groups of 4 blocks, Q8_0 groups of 2, and the 1-block tails)."""
    rng = np.random.default_rng(c)
    w = linear.prepare_weight(random_tensor(DataType[name], 37, c, rng))
    x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
    assert _relerr(_qmatvec(w, x), _want(w, x)) < EXACT_QACT


@pytest.mark.parametrize("name", TYPES)
def test_qmatvec_extreme_codes(name: str) -> None:
    """Weight codes at their ends (Q4_0 nibbles 0 and 15, Q8_0 -128 and 127) times activations at +-127."""
    n, c = 19, 384
    rng = np.random.default_rng(1)
    w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
    bsize = 18 if name == "Q4_0" else 34
    blocks = w.blocks.reshape(n, c // 32, bsize)  # (N, C/32, block bytes) view of the stored bytes
    ends = (0x00, 0xFF) if name == "Q4_0" else (0x80, 0x7F)
    blocks[:, :, 2:] = np.where(rng.random((n, c // 32, bsize - 2)) < 0.5, *ends).astype(np.uint8)
    blocks[: n // 2, :, 2:] = ends[1]  # whole rows of the most positive code
    x = np.where(rng.random((1, c)) < 0.5, -1.0, 1.0).astype(np.float32)  # (1, C): every code +-127
    x[0, : c // 2] = 1.0
    assert _relerr(_qmatvec(w, x), _want(w, x)) < EXACT_QACT


def test_qmatvec_tinyllama_shapes() -> None:
    for name in TYPES:
        for n, c in ((256, 2048), (64, 5632)):
            rng = np.random.default_rng(n)
            w = linear.prepare_weight(random_tensor(DataType[name], n, c, rng))
            x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
            assert _relerr(_qmatvec(w, x), _want(w, x)) < EXACT_QACT


def _nibbles_twin(wb: np.ndarray, o: int) -> np.ndarray:
    """(4, 32) int: the (nibble - 8) codes of the 4 Q4_0 blocks at bytes wb[o:o+72]."""
    qs = np.stack([wb[o + 18 * j + 2 : o + 18 * j + 18] for j in range(4)]).astype(np.int64)  # (4, 16)
    return np.concatenate([qs & 15, qs >> 4], axis=1) - 8


@njit(cache=False)
def _q4_lanes(wb, o, xa, ao):
    acc = qdot.q4_0x4_fma(qdot.zeros_f32x16(), wb, o, xa, ao)
    buf = np.empty(16, np.float32)
    for k in range(16):  # lane k alone: acc . e_k
        e = np.zeros(16, np.float32)
        e[k] = 1.0
        buf[k] = qdot.hsum_f32x16(qdot.fma_f32x16(qdot.zeros_f32x16(), acc, qdot.load_f32x16(e, 0)))
    return buf


@njit(cache=False)
def _q8_lanes(wb, o, xa, ao):
    acc = qdot.q8_0x2_fma(qdot.zeros_f32x16(), wb, o, xa, ao)
    buf = np.empty(16, np.float32)
    for k in range(16):
        e = np.zeros(16, np.float32)
        e[k] = 1.0
        buf[k] = qdot.hsum_f32x16(qdot.fma_f32x16(qdot.zeros_f32x16(), acc, qdot.load_f32x16(e, 0)))
    return buf


def _case(name: str, nblocks: int, seed: int):
    rng = np.random.default_rng(seed)
    c = 32 * nblocks
    w = random_tensor(DataType[name], 1, c, rng)
    x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
    xq = np.empty((1, c), np.int8)  # (1, C)
    xd = np.empty((1, nblocks), np.float32)  # (1, C/32)
    xs = np.empty((1, 2 * nblocks), np.float32)  # (1, C/16)
    quant.quantize_act(xq, xd, xs, x)
    d = np.frombuffer(w.data.tobytes(), np.uint8)
    return d, xq[0], xd[0]


def test_q4_0x4_lanes() -> None:
    """Lane 4j+k: block j's elements 4k..4k+3 and 16+4k..16+4k+3, times d_j * xd_j (second group of a row)."""
    wb, xq, xd = _case("Q4_0", 8, seed=2)
    xa = gemm_fused._act_q4_0(xq, xd, 2)
    got = _q4_lanes(wb, 72, xa, 256)
    codes = _nibbles_twin(wb, 72)  # (4, 32)
    x = xq[128:256].astype(np.int64).reshape(4, 32)  # (4, 32)
    prod = (codes * x).reshape(4, 2, 4, 4).sum(axis=(1, 3))  # (4 blocks, 4 lanes)
    d = np.array([np.frombuffer(wb[72 + 18 * j : 74 + 18 * j].tobytes(), np.float16)[0] for j in range(4)])
    want = prod * (d.astype(np.float32) * xd[4:8])[:, None]
    np.testing.assert_allclose(got, want.reshape(16).astype(np.float32), rtol=1e-6, atol=1e-6)


def test_q8_0x2_lanes() -> None:
    """Lane l: elements 4l..4l+3 of the pair (lanes 0-7 block 0, 8-15 block 1), times d * xd."""
    wb, xq, xd = _case("Q8_0", 6, seed=3)
    wb = wb.copy()
    wb[68 + 2] = 0x80  # a -128 weight code
    xa = gemm_fused._act_q8_0(xq, xd, 3)
    got = _q8_lanes(wb, 68, xa, 192)
    codes = np.concatenate([wb[68 + 2 : 68 + 34], wb[102 + 2 : 102 + 34]]).view(np.int8).astype(np.int64)  # (64,)
    prod = (codes * xq[64:128].astype(np.int64)).reshape(16, 4).sum(axis=1)  # (16,)
    d = np.frombuffer(wb[68:70].tobytes() + wb[102:104].tobytes(), np.float16).astype(np.float32)  # (2,)
    want = prod * np.repeat(d * xd[2:4], 8)
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-6, atol=1e-6)


def test_prefetch_past_the_end_is_harmless() -> None:
    @njit(cache=False)
    def touch(a):
        for k in range(0, 1 << 20, 4096):
            qdot.prefetch(a, a.size + k)
        return a[0]

    assert touch(np.ones(3, np.uint8)) == 1


_OTHER_PATH_CHECK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_fused, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.simd import qdot
from modelc.kernels.matmul.gemm_random import random_tensor
assert not qdot.HAS_AVX512
rng = np.random.default_rng(0)
worst = 0.0
for name in ["Q4_0", "Q8_0"]:
    for c in (96, 384):
        w = linear.prepare_weight(random_tensor(DataType[name], 21, c, rng))
        x = rng.standard_normal((1, c)).astype(np.float32)
        xq = np.empty((1, c), np.int8); xd = np.empty((1, c // 32), np.float32); xs = np.empty((1, c // 16), np.float32)
        quant.quantize_act(xq, xd, xs, x)
        out = np.full((1, 21), np.nan, np.float32)
        gemm_fused.qmatvec(out, xq, xd, xs, w.blocks, quant.KIND[w.dtype])
        want = np.empty_like(out)
        ref_linear.matmul_qact(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
# the 16-lane intrinsics in their portable form (no vpdpbusd.512): one group each, summed
from numba import njit
@njit
def groups(w4, xa4, w8, xa8):
    a = qdot.q4_0x4_fma(qdot.zeros_f32x16(), w4, 0, xa4, 0)
    b = qdot.q8_0x2_fma(qdot.zeros_f32x16(), w8, 0, xa8, 0)
    return qdot.hsum_f32x16(a), qdot.hsum_f32x16(b)
x = rng.standard_normal((1, 128)).astype(np.float32)
xq = np.empty((1, 128), np.int8); xd = np.empty((1, 4), np.float32); xs = np.empty((1, 8), np.float32)
quant.quantize_act(xq, xd, xs, x)
w4 = linear.prepare_weight(random_tensor(DataType.Q4_0, 1, 128, rng))
w8 = linear.prepare_weight(random_tensor(DataType.Q8_0, 1, 64, rng))
g4, g8 = groups(w4.blocks.reshape(-1), gemm_fused._act_q4_0(xq[0], xd[0], 1),
                w8.blocks.reshape(-1), gemm_fused._act_q8_0(xq[0], xd[0], 1))
for w, g, cc in ((w4, g4, 128), (w8, g8, 64)):
    want = np.empty((1, 1), np.float32)
    ref_linear.matmul_qact(want, x[:, :cc].copy(), w)
    worst = max(worst, abs(g - want[0, 0]) / abs(want[0, 0]))
print(worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize("switch", ["MODELC_NO_AVX512", "MODELC_NO_VNNI", "MODELC_NO_AVX2"])
def test_other_instruction_sets(switch: str) -> None:
    """The 8-lane rows (AVX2+VNNI, AVX2, portable IR) and the portable 16-lane intrinsics give the same numbers."""
    env = dict(os.environ, **{switch: "1"})  # the kernel cache keys on the switches (jit_cache)
    p = subprocess.run([sys.executable, "-c", _OTHER_PATH_CHECK], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert float(p.stdout.strip().splitlines()[-1]) < EXACT_QACT


def test_weights_are_read_in_place() -> None:
    """Odd row strides and an offset view: the kernels take any byte alignment."""
    n, c = 7, 256
    rng = np.random.default_rng(5)
    for name in TYPES:
        t = random_tensor(DataType[name], n, c, rng)
        raw = np.zeros(t.data.size + 1, np.uint8)
        raw[1:] = t.data.reshape(-1)
        w = linear.prepare_weight(TensorData(t.shape, t.dtype, raw[1:]))
        x = rng.standard_normal((1, c)).astype(np.float32)  # (1, C)
        assert _relerr(_qmatvec(w, x), _want(w, x)) < EXACT_QACT

"""gemm_r16_iq4: IQ4_NL / IQ4_XS weights repacked into 16 interleaved rows, against the numpy twin and gguf."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.reference import ref_r16
from tests.kernels.r16_cases import act, assert_close, assert_linear_matches_twin, r16_matmul, twin, with_r16

TYPES = [DataType.IQ4_NL, DataType.IQ4_XS]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize(("n", "c", "t"), [(16, 256, 1), (48, 768, 1), (32, 512, 2), (64, 2048, 8), (16, 256, 33)])
def test_kernel_matches_the_quantized_activation_twin(dtype, n, c, t):
    if dtype is DataType.IQ4_NL and c > 256:
        c -= 32  # not whole 256-element super-blocks: IQ4_NL's blocks are 32
    rng = np.random.default_rng(n * 7 + c + t)
    w = linear.prepare_weight(random_tensor(dtype, n, c, rng))
    x = rng.standard_normal((t, c)).astype(np.float32)
    assert_close(r16_matmul(w, x), twin(w, x))


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("t", [1, 2, 8, 33])
def test_kernel_matches_gguf_dequantizer(dtype, t):
    n, c = 32, 512
    rng = np.random.default_rng(t)
    td = random_tensor(dtype, n, c, rng)
    w = linear.prepare_weight(td)
    x = rng.standard_normal((t, c)).astype(np.float32)
    xq, xd, _ = act(x)
    xf = (xq.reshape(t, -1, 32).astype(np.float32) * xd[:, :, None]).reshape(t, c)  # what the kernel sees
    deq = gguf.quants.dequantize(np.asarray(w.blocks).reshape(n, -1), gguf.GGMLQuantizationType[dtype.name])
    want = xf @ deq.reshape(n, c).T
    assert_close(r16_matmul(w, x), want)


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
def test_repack_is_a_permutation_of_the_file_bytes(dtype):
    w = linear.prepare_weight(random_tensor(dtype, 32, 512, np.random.default_rng(1)))
    r = gemm_r16.repack(w.blocks, dtype)
    np.testing.assert_array_equal(r, ref_r16.repack(w.blocks, dtype))  # the numba loop and its numpy twin
    assert r.nbytes == w.blocks.nbytes and r.shape[0] == 2
    assert sorted(r.reshape(-1).tolist()) == sorted(np.asarray(w.blocks).reshape(-1).tolist())
    assert bytes(r[0, :32]) == b"".join(bytes(w.blocks[i, :2]) for i in range(16))  # the 16 rows' d
    if dtype is DataType.IQ4_XS:  # then the 16 rows' scales_h, then their scales_l words
        assert bytes(r[0, 32:64]) == b"".join(bytes(w.blocks[i, 2:4]) for i in range(16))
        assert bytes(r[0, 64:128]) == b"".join(bytes(w.blocks[i, 4:8]) for i in range(16))


def test_only_whole_row_groups_and_super_blocks_repack():
    assert gemm_r16.can_repack(DataType.IQ4_NL, 32, 96)
    assert gemm_r16.can_repack(DataType.IQ4_XS, 32, 512)
    assert not gemm_r16.can_repack(DataType.IQ4_XS, 32, 288)  # not whole super-blocks
    assert not gemm_r16.can_repack(DataType.IQ4_NL, 24, 96)  # rows not a multiple of 16


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("t", [1, 5, 40])
def test_linear_runs_r16_at_every_t_when_the_weight_carries_it(dtype, t):
    rng = np.random.default_rng(t)
    w0 = linear.prepare_weight(random_tensor(dtype, 32, 256, rng))
    w = with_r16(w0)
    assert plan.plan_matmul(w, t) is plan.Path.R16
    assert plan.plan_matmul(w0, t) is not plan.Path.R16  # without the repacked copy: the file-layout kernels
    assert_linear_matches_twin(w, w0, t, rng)


_FALLBACK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime import cpu
from modelc.kernels.matmul.gemm_random import random_tensor
worst = 0.0
for dt in (DataType.IQ4_NL, DataType.IQ4_XS):
    for t in (1, 3):
        rng = np.random.default_rng(t)
        w = linear.prepare_weight(random_tensor(dt, 32, 512, rng))
        x = rng.standard_normal((t, 512)).astype(np.float32)
        xq, xd, xs = np.empty((t, 512), np.int8), np.empty((t, 16), np.float32), np.empty((t, 32), np.float32)
        quant.quantize_act(xq, xd, xs, x)
        out, want = np.empty((t, 32), np.float32), np.empty((t, 32), np.float32)
        gemm_r16.qmatmul_r16(out, xq, xd, xs, gemm_r16.repack(w.blocks, dt), quant.KIND[dt])
        ref_linear.matmul_qact(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(cpu.HAS_AVX2, cpu.HAS_VNNI, worst)
"""


@pytest.mark.slow
@pytest.mark.parametrize("env", [{"MODELC_NO_AVX512": "1"}, {"MODELC_NO_VNNI": "1"}, {"MODELC_NO_AVX2": "1"}])
def test_fallback_paths(env):
    """The 256-bit (two vpshufb) and portable (select chain) lookups give the twin's numbers, and so does AVX2
    without VNNI (the signed values into the signed dot: vpmaddubsw would saturate on values + 128)."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK, env, timeout=900) < 1e-5

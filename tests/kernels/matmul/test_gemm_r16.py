"""gemm_r16: Q4_0 / Q8_0 weights repacked into 16 interleaved rows, against the numpy twin."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

from modelc.ir import DataType
from modelc.kernels.layer import decode_layer
from modelc.kernels.matmul import gemm_r16, linear, plan
from modelc.kernels.matmul.gemm_random import random_tensor
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_r16
from modelc.kernels.runtime import packs
from modelc.kernels.simd.qdot import store_f32x16
from modelc.kernels.simd.qdot_r16 import float_i32x16, splat_i32x16, sub_i32x16
from tests.kernels.r16_cases import (
    LARGEST_CODE_TYPES,
    assert_close,
    assert_linear_matches_twin,
    largest_codes,
    r16_matmul,
    twin,
    with_r16,
)

TYPES = [
    dt for dt in (DataType.Q4_0, DataType.Q4_1, DataType.Q8_0, DataType.Q4_K) if quant.KIND[dt] in gemm_r16.R16_KINDS
]


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize(
    ("n", "c", "t"), [(16, 32, 1), (32, 96, 1), (48, 256, 1), (48, 256, 3), (64, 2048, 8), (16, 64, 17)]
)
def test_kernel_matches_the_quantized_activation_twin(dtype, n, c, t):
    if dtype is DataType.Q4_K:
        c = max(256, c // 256 * 256)
    rng = np.random.default_rng(n * 7 + c + t)
    w = linear.prepare_weight(random_tensor(dtype, n, c, rng))
    x = rng.standard_normal((t, c)).astype(np.float32)  # (T, C)
    assert_close(r16_matmul(w, x), twin(w, x))


@pytest.mark.parametrize("dtype", TYPES, ids=lambda d: d.name)
def test_repack_is_a_permutation_of_the_file_bytes(dtype):
    c = 512 if dtype is DataType.Q4_K else 64
    w = linear.prepare_weight(random_tensor(dtype, 32, c, np.random.default_rng(1)))
    r = gemm_r16.repack(w.blocks, dtype)
    np.testing.assert_array_equal(r, ref_r16.repack(w.blocks, dtype))  # the numba loop and its numpy twin
    assert r.shape == (2, 2 * gemm_r16.BYTES[quant.KIND[dtype]])
    assert sorted(r.reshape(-1).tolist()) == sorted(np.asarray(w.blocks).reshape(-1).tolist())
    # the first 32 bytes of a group's block are the 16 rows' fp16 scales, row order
    assert bytes(r[0, :32]) == b"".join(bytes(w.blocks[i, :2]) for i in range(16))


def test_only_whole_row_groups_and_blocks_repack():
    assert gemm_r16.can_repack(DataType.Q4_0, 32, 64)
    assert not gemm_r16.can_repack(DataType.Q4_0, 40, 64)  # rows not a multiple of 16
    assert not gemm_r16.can_repack(DataType.Q4_K, 32, 128)  # not whole super-blocks
    assert not gemm_r16.can_repack(DataType.Q3_K, 32, 256)
    assert not gemm_r16.can_repack(DataType.Q4_0, 0, 64)


@pytest.mark.parametrize("t", [1, 4, 40, 100, 200])
def test_linear_runs_r16_at_every_t_when_the_weight_carries_it(t):
    rng = np.random.default_rng(t)
    w0 = linear.prepare_weight(random_tensor(DataType.Q4_0, 32, 128, rng))
    w = with_r16(w0)
    amx = plan.cpu.HAS_AMX and t >= plan.R16_AMX_MIN_T[quant.KIND[DataType.Q4_0]]
    assert plan.plan_matmul(w, t) is (plan.Path.AMX_R16 if amx else plan.Path.R16)
    assert_linear_matches_twin(w, w0, t, rng)


ALL_KINDS = [dt for dt in (DataType.Q4_0, DataType.Q4_1, DataType.Q8_0, DataType.Q4_K, DataType.Q6_K, DataType.IQ4_NL,
                          DataType.IQ4_XS)
             if quant.KIND[dt] in gemm_r16.R16_KINDS]  # fmt: skip


@pytest.mark.parametrize("dtype", ALL_KINDS, ids=lambda d: d.name)
@pytest.mark.parametrize("t", [1, 5])
def test_matmul_f32_is_quantize_then_the_kernel(dtype, t):
    rng = np.random.default_rng(t)
    w = linear.prepare_weight(random_tensor(dtype, 64, 512, rng))
    x = rng.standard_normal((t, 512)).astype(np.float32)
    out = np.full((t, 64), np.nan, np.float32)
    gemm_r16.matmul_f32(out, x, gemm_r16.repack(w.blocks, dtype), quant.KIND[dtype])
    np.testing.assert_array_equal(out, r16_matmul(w, x))  # the same kernel on the same codes: bit for bit
    one = np.full((t, 64), np.nan, np.float32)
    gemm_r16.F32_OF_KIND[quant.KIND[dtype]](one, x, gemm_r16.repack(w.blocks, dtype))  # linear's entry, one kind
    np.testing.assert_array_equal(one, out)


@pytest.mark.parametrize("dtype", ALL_KINDS, ids=lambda d: d.name)
def test_many_tokens_run_in_chunks_with_each_chunks_own_bits(dtype):
    """Past TOKEN_CHUNK tokens a group's tokens go in chunks: every row of the result is the bits the same kernel
    gives for its chunk alone (each token's sums run in the same order), and the twin's numbers."""
    rng = np.random.default_rng(7)
    ch = gemm_r16.TOKEN_CHUNK
    t = 2 * ch + 5
    w = linear.prepare_weight(random_tensor(dtype, 32, 512, rng))
    x = rng.standard_normal((t, 512)).astype(np.float32)
    got = r16_matmul(w, x)
    for t0 in range(0, t, ch):
        np.testing.assert_array_equal(got[t0 : t0 + ch], r16_matmul(w, x[t0 : t0 + ch]))
    assert_close(got, twin(w, x))


@pytest.mark.parametrize("dtype", ALL_KINDS, ids=lambda d: d.name)
def test_one_token_reads_groups_in_pairs_with_each_groups_own_bits(dtype):
    """At one token the kernels of gemm_r16.PAIRED_T1 (Q4_0, Q4_1, Q8_0, Q6_K) read two neighbouring groups at once
    (the last of an odd count alone), the others one: every group's rows are the bits the same kernel gives for that
    group alone, and the twin's numbers."""
    rng = np.random.default_rng(11)
    w = linear.prepare_weight(random_tensor(dtype, 80, 512, rng))  # 5 groups: two pairs and one alone
    x = rng.standard_normal((1, 512)).astype(np.float32)
    got = r16_matmul(w, x)
    for g in range(5):
        one = type(w)(dtype, 16, 512, np.ascontiguousarray(np.asarray(w.blocks)[16 * g : 16 * g + 16]), None, None)
        np.testing.assert_array_equal(got[:, 16 * g : 16 * g + 16], r16_matmul(one, x))
    assert_close(got, twin(w, x))


@njit(cache=False)  # test helpers are not cached: pytest may import this module under another name
def _two_runs(rf, xq, start, out):
    """gemm_r16._run_dots over the two 512-byte runs of rf from chains at `start`: out[r] = (the chains' differences
    after run r: low nibbles, high nibbles), as floats (exact: < 2^24)."""
    lo = hi = splat_i32x16(start)
    pf = 0
    for r in range(2):
        lo2, hi2, pf = gemm_r16._run_dots(lo, hi, rf, 512 * r, pf, xq, 64 * r)
        store_f32x16(out, 32 * r, float_i32x16(sub_i32x16(lo2, lo)))
        store_f32x16(out, 32 * r + 16, float_i32x16(sub_i32x16(hi2, hi)))
        lo, hi = lo2, hi2


@pytest.mark.skipif(not gemm_r16.WIDE_DOT_EXACT, reason="the in-place high nibbles need a dot exact to 255")
@pytest.mark.parametrize("start", [0, 2**31 - 1000])
def test_q4_k_one_token_runs_are_the_running_chains_differences(start):
    """Q4_K's one-token loop (where LINE_T1) dots a line at a time onto two chains that run through the group and
    takes each 512-byte run's dots as their differences, the high nibbles in place (16 x the code): every code
    byte, activations of +-127, and chains that wrap past 2^31 give each run's low-nibble dot and 16 x its
    high-nibble dot (the lane-interleaved layout: line i, lane l = row l's bytes 4i..4i+3)."""
    rng = np.random.default_rng(3)
    rf = rng.permutation(np.arange(1024) % 256).astype(np.uint8)  # each byte value 4 times
    xq = rng.integers(-127, 128, 128).astype(np.int8)
    xq[:8], xq[-8:] = 127, -127
    out = np.empty(64, np.float32)
    _two_runs(rf, xq, start, out)
    codes = rf.reshape(2, 8, 16, 4).astype(np.int64)  # run, line, lane (row), byte
    for r in range(2):
        x = xq[64 * r : 64 * r + 64].astype(np.int64)
        lo = np.einsum("ilb,ib->l", codes[r] & 15, x[:32].reshape(8, 4))
        hi = np.einsum("ilb,ib->l", codes[r] >> 4, x[32:].reshape(8, 4))
        np.testing.assert_array_equal(out[32 * r : 32 * r + 16], lo)
        np.testing.assert_array_equal(out[32 * r + 16 : 32 * r + 32], 16 * hi)


@pytest.mark.parametrize("dtype", LARGEST_CODE_TYPES, ids=lambda d: d.name)
@pytest.mark.parametrize("t", [1, 3])
def test_largest_codes_against_full_scale_activations(dtype, t):
    """Every code at its largest against activation codes of +-127 in runs: the largest int16 partial sums
    the AVX2 path adds up before widening (qdot_tile.dot8_u4_u8x64, dot4_u6_u8x64, sdot_i8x64) must not
    saturate."""
    n, c = 32, 512
    rng = np.random.default_rng(t)
    w = largest_codes(linear.prepare_weight(random_tensor(dtype, n, c, rng)))
    sign = np.where(rng.random((t, c // 16)) < 0.8, 1.0, -1.0).repeat(16, axis=1)  # mostly one sign per 32-block
    x = (sign * (1.0 + 0.001 * rng.random((t, c)))).astype(np.float32)
    got, want = r16_matmul(w, x), twin(w, x)
    assert np.abs(want).max() > 0
    assert_close(got, want)


# decode_layer's matmul switch over the kinds of a run only (kinds_token): the right kernel for each (path, kind)
# the token names, the same bits as the kind's own entry, and a clear error for one it does not name. Here, beside
# the tests that compile gemm_r16's entries, so that only the switch compiles for them.
_Q4_0, _Q8_0, _R16 = quant.KIND[DataType.Q4_0], quant.KIND[DataType.Q8_0], decode_layer.R16


def _token(pairs):
    """kinds_token as it is without a kernel pack (where one applies, it names every kind: runtime/packs.py)."""
    saved, packs.ACTIVE = packs.ACTIVE, None
    try:
        return decode_layer.kinds_token(pairs)
    finally:
        packs.ACTIVE = saved


ONE_KIND = _token([(_R16, _Q8_0)])  # one token for the file: _mm compiles once (one kernel)


def test_the_token_names_each_path_and_kind_once_in_order():
    pairs = [(_R16, _Q8_0), (_R16, _Q4_0), (_R16, _Q8_0), (decode_layer.NONE, _Q4_0), (decode_layer.MATVEC_K, 7)]
    token = _token(pairs)
    assert token.shape == (0,)
    assert token.dtype.names == ("k", f"r16_{_Q4_0}", f"r16_{_Q8_0}")
    assert _token([(decode_layer.NONE, _Q4_0)]).dtype.names == ("none",)


@pytest.mark.parametrize("t", [1, 3])
def test_mm_runs_the_kinds_entry_on_its_columns(t):
    """_mm (numba) and _matmul's Python form against gemm_r16's entry of the kind, bit for bit; columns lo:hi of
    a wider output (the fused q | k | v case) through the buffer at T > 1, in place at T = 1."""
    rng = np.random.default_rng(t)
    w = linear.prepare_weight(random_tensor(DataType.Q8_0, 32, 256, rng))
    rw = gemm_r16.repack(w.blocks, DataType.Q8_0)
    x = rng.standard_normal((t, 256)).astype(np.float32)
    want = np.full((t, 32), np.nan, np.float32)
    gemm_r16.f32_q8_0(want, x, rw)
    out = np.full((t, 80), -1.0, np.float32)
    decode_layer._mm(out, 16, 48, x, rw, _Q8_0, _R16, ONE_KIND)
    np.testing.assert_array_equal(out[:, 16:48], want)
    assert (out[:, :16] == -1).all() and (out[:, 48:] == -1).all()
    py = np.full((t, 32), np.nan, np.float32)
    decode_layer._matmul(py, x, rw, _Q8_0, _R16, ONE_KIND)
    np.testing.assert_array_equal(py, want)


def test_a_kind_the_token_does_not_name_is_an_error():
    """The switch falls through the kinds it has to an error (_Q4_0's kernel is not compiled for it)."""
    rng = np.random.default_rng(0)
    w = linear.prepare_weight(random_tensor(DataType.Q4_0, 32, 256, rng))
    rw = gemm_r16.repack(w.blocks, DataType.Q4_0)
    out = np.zeros((1, 32), np.float32)
    x = rng.standard_normal((1, 256)).astype(np.float32)
    with pytest.raises(ValueError, match="kinds_token does not name"):
        decode_layer._mm(out, 0, 32, x, rw, _Q4_0, _R16, ONE_KIND)


_FALLBACK = """
import numpy as np
from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear
from modelc.kernels.runtime import cpu
from modelc.kernels.matmul.gemm_random import random_tensor
from tests.kernels.r16_cases import largest_codes
worst = 0.0
for dt in (DataType.Q4_0, DataType.Q4_1, DataType.Q8_0, DataType.Q4_K):
    for t, extreme in ((1, False), (3, False), (9, True), (1, True)):
        rng = np.random.default_rng(t)
        w = linear.prepare_weight(random_tensor(dt, 48, 512, rng))  # 3 groups: at t = 1 a pair and one alone
        x = rng.standard_normal((t, 512)).astype(np.float32)
        if extreme:  # every code at its largest magnitude, activation codes +-127
            w = largest_codes(w)
            x = np.ones((t, 512), np.float32)
            x[1::2] = -1.0  # whole rows of one sign: the largest int16 partial sums
        xq, xd, xs = quant.quantized(x)
        out, want = np.full((t, 48), np.nan, np.float32), np.empty((t, 48), np.float32)
        gemm_r16.qmatmul_r16(out, xq, xd, xs, gemm_r16.repack(w.blocks, dt), quant.KIND[dt])
        ref_linear.matmul_qact(want, x, w)
        worst = max(worst, float(np.abs(out - want).max() / np.abs(want).max()))
print(cpu.HAS_AVX2, cpu.HAS_VNNI, worst)
"""


@pytest.mark.slow
def test_avx2_path_without_vnni():
    """The AVX2 path (int16 sums of 8 vpmaddubsw for Q4_0 / Q4_K, |w| x sign(x, w) for Q8_0) against the twin,
    largest-magnitude codes included, on a CPU whose default path is VNNI (a no-op switch on AVX2-only CPUs)."""
    from tests.kernels.fallback import fallback_worst

    assert fallback_worst(_FALLBACK, {"MODELC_NO_VNNI": "1", "MODELC_NO_AMX": "1"}, timeout=900) < 2e-6

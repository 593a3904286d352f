"""Shared set-ups of the gemm_r16 kernel tests (test_gemm_r16.py, test_gemm_r16_iq4.py, test_gemm_r16_q6k.py)."""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul import gemm_r16, linear
from modelc.kernels.quant import quant
from modelc.kernels.reference import ref_linear


def act(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """quant.quantize_act of x (T, C) f32 into new arrays: codes (T, C) int8, scales (T, C/32), half-block sums (T, C/16)."""
    return quant.quantized(x)


def r16_matmul(w, x: np.ndarray) -> np.ndarray:
    """(T, N) f32 = gemm_r16.qmatmul_r16 of the weight w (file layout, repacked here) and x (T, C) f32."""
    out = np.full((x.shape[0], w.rows), np.nan, np.float32)
    gemm_r16.qmatmul_r16(out, *act(x), gemm_r16.repack(w.blocks, w.dtype), quant.KIND[w.dtype])
    return out


def twin(w, x: np.ndarray) -> np.ndarray:
    """(T, N) f32 = ref_linear.matmul_qact of x (T, C) and the weight w: the numpy twin on the same int8 activations."""
    ref = np.empty((x.shape[0], w.rows), np.float32)
    ref_linear.matmul_qact(ref, x, w)
    return ref


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    """Same numbers up to float summation order: within 2e-6 of the largest."""
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6 * np.abs(want).max())


def with_r16(w0):
    """w0 with its gemm_r16 copy attached, as the loader attaches it."""
    return type(w0)(w0.dtype, w0.rows, w0.cols, w0.blocks, None, gemm_r16.repack(w0.blocks, w0.dtype))


def assert_linear_matches_twin(w, w0, t: int, rng: np.random.Generator) -> None:
    """linear.matmul through w against the twin on w0 (the same weight in file layout), t random activation rows."""
    x = rng.standard_normal((t, w0.cols)).astype(np.float32)
    out = np.empty((t, w0.rows), np.float32)
    linear.matmul(out, x, w)
    assert_close(out, twin(w0, x))


_CODES = {
    DataType.Q4_0: (18, slice(2, 18), 0xFF),
    DataType.Q4_1: (20, slice(4, 20), 0xFF),
    DataType.Q8_0: (34, slice(2, 34), 0x80),
    DataType.Q4_K: (144, slice(16, 144), 0xFF),
    DataType.Q6_K: (210, slice(0, 192), 0xFF),
    DataType.IQ4_NL: (18, slice(2, 18), 0x00),
    DataType.IQ4_XS: (136, slice(8, 136), 0x00),
}
"""Per stored type: one row's block bytes, where its code bytes lie in the block, and the byte that makes every
code its largest in magnitude (Q4: 15, Q6_K: 63, Q8_0: -128, IQ4: the book's -127)."""
LARGEST_CODE_TYPES = tuple(_CODES)


def largest_codes(w):
    """The weight w (file layout) with every code at its largest magnitude, scales kept."""
    size, codes, fill = _CODES[w.dtype]
    b = np.array(w.blocks).reshape(w.rows, -1, size)
    b[:, :, codes] = fill
    return type(w)(w.dtype, w.rows, w.cols, b.reshape(w.rows, -1), None, None)

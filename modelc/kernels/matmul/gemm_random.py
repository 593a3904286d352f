"""Seeded random weights in any stored type, for kernel tests and benchmarks (no numba).

Block types get random quant bytes with sane fp16 scale fields (random bytes
there would give inf/NaN), so every value a kernel reads is meaningful.
"""

from __future__ import annotations

import numpy as np

from modelc.ir import DataType, TensorData

# Byte offsets of the fp16 scale fields inside one block.
_F16_FIELDS: dict[DataType, tuple[int, ...]] = {
    DataType.Q4_0: (0,),
    DataType.Q4_1: (0, 2),
    DataType.Q5_0: (0,),
    DataType.Q5_1: (0, 2),
    DataType.Q8_0: (0,),
    DataType.Q2_K: (80, 82),
    DataType.Q3_K: (108,),
    DataType.Q4_K: (0, 2),
    DataType.Q5_K: (0, 2),
    DataType.Q6_K: (208,),
    DataType.IQ4_NL: (0,),
    DataType.IQ4_XS: (0,),
    DataType.TQ1_0: (52,),
    DataType.TQ2_0: (64,),
    DataType.Q1_0: (0,),
    DataType.Q2_0: (0,),
    DataType.IQ2_XXS: (0,),
    DataType.IQ2_XS: (0,),
    DataType.IQ2_S: (0,),
    DataType.IQ3_XXS: (0,),
    DataType.IQ3_S: (0,),
    DataType.IQ1_S: (0,),
}

# Divisors that keep d * (largest code) O(scale) where codes are large (default: 8 / 256 by block size).
_DIV = {
    DataType.IQ4_NL: 128.0,
    DataType.IQ4_XS: 4096.0,
    DataType.TQ1_0: 1.0,
    DataType.TQ2_0: 1.0,
    DataType.Q1_0: 1.0,
    DataType.Q2_0: 1.0,
}


def random_tensor(
    dtype: DataType, rows: int, cols: int, rng: np.random.Generator, *, scale: float = 0.02
) -> TensorData:
    """A (rows, cols) tensor of `dtype` whose dequantized values are O(scale)."""
    if dtype in (DataType.F32, DataType.F16):
        arr = (rng.standard_normal((rows, cols)) * scale).astype(dtype.numpy_dtype)
        return TensorData.from_array(arr)
    if dtype is DataType.BF16:
        f = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        u = (f.view(np.uint32) >> 16).astype(np.uint16)
        return TensorData((rows, cols), dtype, u.reshape(-1).view(np.uint8))
    if dtype in (DataType.I8, DataType.I4):
        nbytes = dtype.nbytes((rows, cols))
        return TensorData((rows, cols), dtype, rng.integers(0, 256, nbytes, dtype=np.uint8))
    raw = rng.integers(0, 256, size=(rows * cols // dtype.block_size, dtype.type_size), dtype=np.uint8)
    if dtype is DataType.Q8_K:
        d = (rng.random(raw.shape[0]) * scale / 64).astype("<f4")
        raw[:, 0:4] = d.view(np.uint8).reshape(-1, 4)
    elif dtype is DataType.MXFP4:  # e8m0 exponent: 2^(e - 128) times codes up to 12
        raw[:, 0] = rng.integers(110, 118, raw.shape[0], dtype=np.uint8)
    elif dtype is DataType.IQ1_M:  # fp16 d lives in the top nibbles of the four scale words
        d = (rng.random(raw.shape[0]) * scale / 16 + scale / 128).astype("<f2").view("<u2")
        for k in range(4):
            off = 48 + 2 * k
            word = raw[:, off : off + 2].copy().view("<u2")[:, 0]
            word = (word & 0x0FFF) | (((d >> (4 * k)) & 15) << 12).astype(np.uint16)
            raw[:, off : off + 2] = word.astype("<u2").view(np.uint8).reshape(-1, 2)
    else:
        # K-quant super-block scales multiply 4..6-bit sub-scales: keep the product O(scale).
        div = _DIV.get(dtype, 8.0 if dtype.block_size == 32 else 256.0)
        for off in _F16_FIELDS[dtype]:
            d = (rng.random(raw.shape[0]) * scale / div + scale / (8 * div)).astype("<f2")
            raw[:, off : off + 2] = d.view(np.uint8).reshape(-1, 2)
    return TensorData((rows, cols), dtype, raw.reshape(-1))


def random_scale(rows: int, rng: np.random.Generator, *, scale: float = 0.02) -> TensorData:
    """A per-row F32 scale tensor (NAME@scale) for I8/I4 weights."""
    return TensorData.from_array((rng.random(rows) * scale / 64 + scale / 256).astype(np.float32))

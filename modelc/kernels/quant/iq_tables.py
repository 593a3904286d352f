"""Lookup tables of the GGML i-quants, MXFP4 and the ternary types, as int8 numpy constants.

The IQ grids (ggml-common.h's iq2xxs_grid, iq2xs_grid, iq2s_grid, iq3xxs_grid,
iq3s_grid, iq1s_grid) are derived at import from the `gguf` package's own
tables (a runtime dependency already), so both sides of the tests read the same
llama.cpp constants; everything else is small enough to state here. No numba:
the kernels (quant_iq.py) and the numpy twins (ref_iquant.py) both read these.
Each grid is (entries, 8 or 4) int8; the kernels index a flat copy.
"""

from __future__ import annotations

import numpy as np
from gguf import quants as _gq

KVALUES_IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], np.int8)
"""IQ4_NL / IQ4_XS: the non-linear 4-bit code book (value = d * KVALUES[nibble])."""

KVALUES_MXFP4 = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], np.int8)
"""MXFP4: the e2m1 values doubled (the scale is 2^(e-128), half the OCP e8m0 scale)."""


def _ksigns() -> np.ndarray:
    """(128,) uint8: 7 sign bits plus an eighth that makes the count of set bits even."""
    i = np.arange(128, dtype=np.int64)
    parity = np.array([bin(int(v)).count("1") & 1 for v in i], np.int64)
    return (i | (parity << 7)).astype(np.uint8)


KSIGNS = _ksigns()
"""IQ2_XXS / IQ2_XS / IQ3_XXS: a 7-bit sign index -> 8 sign bits (bit j set = element j negative)."""


def _grid(cls: type) -> np.ndarray:
    cls.init_grid()
    g = np.asarray(cls.grid, np.float32).reshape(cls.grid_shape)
    out = np.rint(g).astype(np.int8)
    if not np.array_equal(out.astype(np.float32), g):  # the gguf tables hold small integers only
        raise RuntimeError(f"gguf's {cls.__name__} grid is not integral")
    return out


IQ2XXS_GRID = _grid(_gq.IQ2_XXS)  # (256, 8): 8, 25, 43
IQ2XS_GRID = _grid(_gq.IQ2_XS)  # (512, 8)
IQ2S_GRID = _grid(_gq.IQ2_S)  # (1024, 8)
IQ3XXS_GRID = _grid(_gq.IQ3_XXS)  # (256, 4): 4 .. 62
IQ3S_GRID = _grid(_gq.IQ3_S)  # (512, 4): 1 .. 15, odd
IQ1S_GRID = _grid(_gq.IQ1_S)  # (2048, 8): -1, 0, 1 (IQ1_M shares it)
IQ1_DELTA = 0.125
"""IQ1_S / IQ1_M: each group of 8 is shifted by +-IQ1_DELTA (its sign bit set = minus)."""

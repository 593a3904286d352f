"""llama.cpp's CPU roundings, put on modelc's numpy reference kernels: what makes the two engines' logits differ.

Used by tests/models/test_quant_vs_llamacpp.py to show that where modelc and llama.cpp disagree on a
file (Gemma), the whole difference is llama.cpp's rounding of intermediate values, modelc being the
closer one to exact arithmetic:

- the activations of every matmul with quantized weights are rounded to the weight type's `vec_dot_type`
  first (ggml-cpu): Q8_K (per 256 values: iscale = -127 / the signed value of largest magnitude, q =
  round-half-even, clamped to 127; d = 1 / iscale) for the K-quants, i-quants but IQ4_NL, and the ternary
  types; Q8_0 / Q8_1 (per 32: d = amax / 127 stored as fp16, q = round(x * 127 / amax)) for the others;
  fp16 for F16 weights. modelc's integer kernels round per 32 with a float32 scale (kernels/quant/quant.py),
  its prefill keeps fp32;
- GELU (Gemma's GeGLU) reads a table of fp16 values at the fp16-rounded input (ggml-cpu vec.h,
  GGML_GELU_FP16): 0 below -10, x above 10.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from modelc.ir import DataType
from modelc.kernels.reference import ref
from modelc.kernels.reference.ref_linear import dequantize
from modelc.kernels.select import KernelSet, kernel_set

_Q8_K = {
    DataType.Q2_K, DataType.Q3_K, DataType.Q4_K, DataType.Q5_K, DataType.Q6_K, DataType.IQ4_XS, DataType.IQ3_S,
    DataType.IQ3_XXS, DataType.IQ2_XXS, DataType.IQ2_XS, DataType.IQ2_S, DataType.IQ1_S, DataType.IQ1_M,
    DataType.TQ1_0, DataType.TQ2_0,
}  # fmt: skip
_FLOAT = {DataType.F32, DataType.BF16}


def q8_k(x: np.ndarray) -> np.ndarray:
    """x (T, C) f32 rounded as ggml's quantize_row_q8_K_ref (per 256), dequantized."""
    t, c = x.shape
    b = x.reshape(t, c // 256, 256)
    i = np.abs(b).argmax(axis=2)[..., None]
    mx = np.take_along_axis(b, i, axis=2)  # the signed value of largest magnitude
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, np.float32(-127.0) / mx, np.float32(0.0)).astype(np.float32)
        d = np.where(iscale != 0, np.float32(1.0) / iscale, np.float32(0.0)).astype(np.float32)
    q = np.minimum(np.rint(iscale * b), 127.0).astype(np.float32)
    return (q * d).reshape(t, c)


def q8_0(x: np.ndarray) -> np.ndarray:
    """x (T, C) f32 rounded as ggml-cpu's quantize_row_q8_0 (per 32, fp16 scale), dequantized."""
    t, c = x.shape
    b = x.reshape(t, c // 32, 32)
    amax = np.abs(b).max(axis=2, keepdims=True)
    d = (amax / np.float32(127.0)).astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax != 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.rint(b * inv).astype(np.float32)
    return (q * d.astype(np.float16).astype(np.float32)).reshape(t, c)


def matmul(out, x, w) -> None:
    """ref.matmul with llama.cpp's activation rounding for w's type."""
    dt = w.dtype
    if dt in _Q8_K:
        x = q8_k(x)
    elif dt == DataType.F16:
        x = x.astype(np.float16).astype(np.float32)
    elif dt not in _FLOAT:
        x = q8_0(x)
    out[...] = x @ dequantize(w).T


def _gelu32(v: np.ndarray) -> np.ndarray:
    c = np.float32(math.sqrt(2.0 / math.pi))
    return np.float32(0.5) * v * (np.float32(1.0) + np.tanh(c * v * (np.float32(1.0) + np.float32(0.044715) * v * v)))


def gelu(out, x) -> None:
    """ggml's GELU through its fp16 table."""
    x16 = x.astype(np.float16).astype(np.float32)
    y = _gelu32(x16).astype(np.float16).astype(np.float32)
    out[...] = np.where(x <= -10.0, np.float32(0.0), np.where(x >= 10.0, x, y))


def llamacpp_kernel_set() -> KernelSet:
    """The numpy reference kernels with llama.cpp's roundings (matmul activations, GELU)."""
    return dataclasses.replace(kernel_set("ref"), name="ref", matmul=matmul, gelu=gelu)


__all__ = ["gelu", "llamacpp_kernel_set", "matmul", "q8_0", "q8_k", "ref"]

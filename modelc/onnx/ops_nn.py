"""ONNX neural-net ops: MatMul, Gemm, Einsum, softmaxes, LayerNormalization, reductions, ArgMax/TopK, Trilu.

Convolution, pooling and the channel norms are in ops_conv.py.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError
from modelc.kernels.elementwise import norm
from modelc.onnx.ops_elementwise import Op
from modelc.onnx.ops_shape import _axes

SMALL_ROWS = 48  # MatMul rows up to which the transposed product is faster (OpenBLAS 0.3.31, 1 thread)


def _half_in_f32(op: Op) -> Op:
    """float16 products run in float32 BLAS (numpy has no half-precision GEMM) and are rounded back."""

    def wrapped(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        if inputs[0].dtype != np.float16:
            return op(inputs, attrs, opset)
        wide = [x.astype(np.float32) if x is not None and x.dtype == np.float16 else x for x in inputs]
        return tuple(y.astype(np.float16) for y in op(wide, attrs, opset))

    return wrapped


def matmul(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    a, b = inputs[0], inputs[1]
    try:
        if a.ndim >= 2 and b.ndim == 2 and a.flags.c_contiguous:
            # (..., T, C) @ (C, N): one GEMM over all rows instead of numpy's loop over the batch.
            a2 = a.reshape(-1, a.shape[-1])
            if a2.shape[0] <= SMALL_ROWS:
                # Few rows: OpenBLAS runs B.T @ a.T (both views) 15-30% faster than a @ B.
                y = np.ascontiguousarray(np.matmul(b.T, a2.T).T)
            else:
                y = a2 @ b
            return (y.reshape(*a.shape[:-1], b.shape[-1]),)
        return (np.matmul(a, b),)
    except ValueError:
        raise InvalidRequestError(f"MatMul shapes {a.shape} and {b.shape} do not match") from None


def gemm(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    if attrs.get("transA", 0):
        a = a.T
    if attrs.get("transB", 0):
        b = b.T
    try:
        y = a @ b
    except ValueError:
        raise InvalidRequestError(f"Gemm shapes {a.shape} and {b.shape} do not match") from None
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y *= np.asarray(alpha, y.dtype)
    if c is not None and beta != 0.0:
        y += c * np.asarray(beta, y.dtype) if beta != 1.0 else c
    return (y,)


def softmax(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    e /= np.sum(e, axis=axis, keepdims=True)
    return (e,)


def log_softmax(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(attrs.get("axis", -1))
    z = x - np.max(x, axis=axis, keepdims=True)
    return ((z - np.log(np.sum(np.exp(z), axis=axis, keepdims=True))).astype(x.dtype, copy=False),)


def einsum(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    try:
        return (np.einsum(attrs["equation"].replace(" ", ""), *inputs, optimize=len(inputs) > 2),)
    except ValueError as e:
        raise InvalidRequestError(f"Einsum {attrs['equation']!r}: {e}") from None


def trilu(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    k = int(np.asarray(inputs[1]).reshape(())) if len(inputs) > 1 and inputs[1] is not None else 0
    return (np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k),)


def top_k(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, k = inputs[0], int(np.asarray(inputs[1]).reshape(-1)[0])
    axis = int(attrs.get("axis", -1)) % x.ndim
    if not 0 <= k <= x.shape[axis]:
        raise InvalidRequestError(f"TopK k={k} is outside [0, {x.shape[axis]}]")
    largest = bool(attrs.get("largest", 1))
    # Stable sort on the negated keys keeps ties in index order, as ONNX Runtime returns them.
    idx = np.argsort(-x if largest else x, axis=axis, kind="stable")
    idx = np.take(idx, np.arange(k), axis=axis)
    return (np.take_along_axis(x, idx, axis=axis), idx.astype(np.int64))


def layer_norm(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, scale = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = int(attrs.get("axis", -1)) % x.ndim
    eps = float(attrs.get("epsilon", 1e-5))
    C = x.shape[-1] if x.ndim else 0
    if (
        axis == x.ndim - 1
        and x.dtype == np.float32
        and attrs.get("_num_outputs", 1) == 1
        and C
        and scale.shape == (C,)
        and (bias is None or bias.shape == (C,))
    ):
        # The common case (normalize the last axis, only Y wanted): the fused norm kernel.
        out = np.empty(x.shape, np.float32)
        b = np.zeros(C, np.float32) if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        norm.layer_norm(
            out.reshape(-1, C),
            np.ascontiguousarray(x).reshape(-1, C),
            np.ascontiguousarray(scale, dtype=np.float32),
            b,
            eps,
        )
        return (out,)
    axes = tuple(range(axis, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = np.square(x64 - mean).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    y = ((x64 - mean) * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return (y.astype(x.dtype, copy=False), mean.astype(np.float32), inv.astype(np.float32))


def _reduce(f: Any, axes_input_from: int) -> Op:
    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        x = inputs[0]
        axes = _axes(inputs, attrs, 1) if opset >= axes_input_from else attrs.get("axes")
        keep = bool(attrs.get("keepdims", 1))
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return (x,)
            axes = list(range(x.ndim))
        return (np.asarray(f(x, axis=tuple(a % x.ndim for a in axes), keepdims=keep)).astype(x.dtype, copy=False),)

    return op


def arg_max(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(attrs.get("axis", 0))
    if attrs.get("select_last_index", 0):
        flipped = np.flip(x, axis=axis)
        idx = x.shape[axis] - 1 - np.argmax(flipped, axis=axis)
    else:
        idx = np.argmax(x, axis=axis)
    if attrs.get("keepdims", 1):
        idx = np.expand_dims(idx, axis)
    return (idx.astype(np.int64),)


OPS: dict[str, Op] = {
    "MatMul": _half_in_f32(matmul),
    "Gemm": _half_in_f32(gemm),
    "Softmax": softmax,
    "LayerNormalization": layer_norm,
    "ReduceMean": _reduce(np.mean, 18),
    "ReduceSum": _reduce(np.sum, 13),
    "ReduceMax": _reduce(np.max, 18),
    "ReduceMin": _reduce(np.min, 18),
    "ReduceProd": _reduce(np.prod, 18),
    "ReduceL1": _reduce(lambda x, axis, keepdims: np.sum(np.abs(x), axis=axis, keepdims=keepdims), 18),
    "ReduceL2": _reduce(lambda x, axis, keepdims: np.sqrt(np.sum(np.square(x), axis=axis, keepdims=keepdims)), 18),
    "ReduceSumSquare": _reduce(lambda x, axis, keepdims: np.sum(np.square(x), axis=axis, keepdims=keepdims), 18),
    "LogSoftmax": log_softmax,
    "Einsum": einsum,
    "Trilu": trilu,
    "TopK": top_k,
    "ArgMax": arg_max,
}

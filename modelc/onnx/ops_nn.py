"""ONNX neural-net ops: MatMul, Gemm, Softmax, LayerNormalization, reductions, Conv (2-D), pooling,
BatchNormalization (inference).

Conv and pooling go through one strided window view (im2col without copies until the GEMM);
group=1 convolutions are a single BLAS GEMM, grouped ones an einsum.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.kernels import norm
from modelc.onnx.ops_elementwise import Op
from modelc.onnx.ops_shape import _axes


def matmul(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    a, b = inputs[0], inputs[1]
    try:
        if a.ndim > 2 and b.ndim == 2 and a.flags.c_contiguous:
            # (..., T, C) @ (C, N): one GEMM over all rows instead of numpy's loop over the batch.
            return ((a.reshape(-1, a.shape[-1]) @ b).reshape(*a.shape[:-1], b.shape[-1]),)
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


def instance_norm(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, scale, bias = inputs[0], inputs[1], inputs[2]
    eps = float(attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes, keepdims=True)
    var = np.square(x64 - mean).mean(axis=axes, keepdims=True)
    shape = (1, -1) + (1,) * (x.ndim - 2)
    y = (x64 - mean) / np.sqrt(var + eps) * scale.reshape(shape) + bias.reshape(shape)
    return (y.astype(x.dtype),)


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
    if (axis == x.ndim - 1 and x.dtype == np.float32 and attrs.get("_num_outputs", 1) == 1 and C
            and scale.shape == (C,) and (bias is None or bias.shape == (C,))):  # fmt: skip
        # The common case (normalize the last axis, only Y wanted): the fused norm kernel.
        out = np.empty(x.shape, np.float32)
        b = np.zeros(C, np.float32) if bias is None else np.ascontiguousarray(bias, dtype=np.float32)
        norm.layer_norm(out.reshape(-1, C), np.ascontiguousarray(x).reshape(-1, C),
                        np.ascontiguousarray(scale, dtype=np.float32), b, eps)  # fmt: skip
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


def _pads_2d(attrs: dict[str, Any], hw: tuple[int, int], kernel: tuple[int, int], strides: tuple[int, int],
             dilations: tuple[int, int]) -> tuple[int, int, int, int]:  # fmt: skip
    """(top, left, bottom, right) from `pads` or `auto_pad`."""
    auto = attrs.get("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        p = [int(v) for v in attrs.get("pads", [0, 0, 0, 0])]
        return p[0], p[1], p[2], p[3]
    if auto == "VALID":
        return 0, 0, 0, 0
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise UnsupportedError(f"auto_pad={auto} is not supported")
    out: list[int] = []
    for n, k, s, d in zip(hw, kernel, strides, dilations, strict=True):
        total = max(0, (-(-n // s) - 1) * s + d * (k - 1) + 1 - n)
        small = total // 2
        out.append(small if auto == "SAME_UPPER" else total - small)
        out.append(total - out[-1])
    return out[0], out[2], out[1], out[3]


def _windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int], dilations: tuple[int, int],
             pads: tuple[int, int, int, int], fill: float) -> np.ndarray:  # fmt: skip
    """(N, C, OH, OW, kH, kW) strided view of the padded input."""
    if x.ndim != 4:
        raise UnsupportedError(f"only 2-D convolution/pooling is supported, got input of rank {x.ndim}")
    top, left, bottom, right = pads
    if any(pads):
        x = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
    if x.shape[2] < eh or x.shape[3] < ew:
        raise InvalidRequestError(f"input spatial size {x.shape[2:]} is smaller than the kernel {kernel}")
    v = np.lib.stride_tricks.sliding_window_view(x, (eh, ew), axis=(2, 3))
    return v[:, :, ::sh, ::sw, ::dh, ::dw]


def conv(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if w.ndim != 4:
        raise UnsupportedError(f"only 2-D Conv is supported, got a weight of rank {w.ndim}")
    M, Cg, kh, kw = w.shape
    group = int(attrs.get("group", 1))
    if x.ndim != 4 or x.shape[1] != Cg * group:
        raise InvalidRequestError(f"Conv input of shape {x.shape} does not match weight {w.shape} (group {group})")
    strides = tuple(attrs.get("strides", [1, 1]))
    dilations = tuple(attrs.get("dilations", [1, 1]))
    pads = _pads_2d(attrs, x.shape[2:], (kh, kw), strides, dilations)
    win = _windows(x, (kh, kw), strides, dilations, pads, 0.0)  # (N, C, OH, OW, kH, kW)
    N, _, OH, OW = win.shape[:4]
    if group == 1:
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(N * OH * OW, Cg * kh * kw)
        y = (cols @ w.reshape(M, -1).T).reshape(N, OH, OW, M).transpose(0, 3, 1, 2)  # (N, M, OH, OW)
    else:
        g = win.reshape(N, group, Cg, OH, OW, kh, kw)
        wg = w.reshape(group, M // group, Cg, kh, kw)
        y = np.einsum("ngchwij,gmcij->ngmhw", g, wg, optimize=True).reshape(N, M, OH, OW)
    y = np.ascontiguousarray(y, dtype=x.dtype)
    if b is not None:
        y += b.reshape(1, M, 1, 1)
    return (y,)


def _pool_geometry(x: np.ndarray, attrs: dict[str, Any]) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:  # fmt: skip
    kernel = tuple(int(k) for k in attrs["kernel_shape"])
    if len(kernel) != 2:
        raise UnsupportedError(f"only 2-D pooling is supported, got kernel_shape {list(kernel)}")
    strides = tuple(attrs.get("strides", [1, 1]))
    dilations = tuple(attrs.get("dilations", [1, 1]))
    pads = _pads_2d(attrs, x.shape[2:], kernel, strides, dilations)
    if attrs.get("ceil_mode", 0):
        # Extend the bottom/right padding so a last partial window exists when it starts inside the input.
        extra = []
        for n, k, s, d, p0, p1 in zip(x.shape[2:], kernel, strides, dilations, pads[:2], pads[2:], strict=True):
            span = n + p0 + p1 - (d * (k - 1) + 1)
            out = -(-span // s) + 1
            if (out - 1) * s >= n + p0:
                out -= 1
            extra.append(max(0, (out - 1) * s + d * (k - 1) + 1 - (n + p0 + p1)))
        pads = (pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1])
    return kernel, strides, dilations, pads


def max_pool(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    if attrs.get("storage_order", 0):
        raise UnsupportedError("MaxPool storage_order=1 is not supported")
    kernel, strides, dilations, pads = _pool_geometry(x, attrs)
    win = _windows(x, kernel, strides, dilations, pads, -np.inf)
    return (np.ascontiguousarray(win.max(axis=(4, 5))),)


def average_pool(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    kernel, strides, dilations, pads = _pool_geometry(x, attrs)
    total = _windows(x, kernel, strides, dilations, pads, 0.0).sum(axis=(4, 5))
    if attrs.get("count_include_pad", 0):
        base = _pads_2d(attrs, x.shape[2:], kernel, strides, dilations)
        ones = np.ones(
            (1, 1) + tuple(n + p0 + p1 for n, p0, p1 in zip(x.shape[2:], base[:2], base[2:], strict=True)), x.dtype
        )
        extra = (0, 0, pads[2] - base[2], pads[3] - base[3])
        count = _windows(ones, kernel, strides, dilations, extra, 0.0).sum(axis=(4, 5))
    else:
        ones = np.ones((1, 1) + x.shape[2:], x.dtype)
        count = _windows(ones, kernel, strides, dilations, pads, 0.0).sum(axis=(4, 5))
    return ((total / count).astype(x.dtype),)


def global_average_pool(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    return (x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float64).astype(x.dtype),)


def global_max_pool(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    return (x.max(axis=tuple(range(2, x.ndim)), keepdims=True),)


def batch_norm(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    if attrs.get("training_mode", 0):
        raise UnsupportedError("BatchNormalization with training_mode=1 is not supported")
    x, scale, bias, mean, var = inputs[:5]
    eps = float(attrs.get("epsilon", 1e-5))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    k = (scale / np.sqrt(var.astype(np.float64) + eps)).astype(x.dtype)
    y = x * k.reshape(shape) + (bias - mean * k).reshape(shape)
    return (y.astype(x.dtype, copy=False),)


OPS: dict[str, Op] = {
    "MatMul": matmul,
    "Gemm": gemm,
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
    "InstanceNormalization": instance_norm,
    "Einsum": einsum,
    "Trilu": trilu,
    "TopK": top_k,
    "ArgMax": arg_max,
    "Conv": conv,
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool,
    "BatchNormalization": batch_norm,
}

"""ONNX convolution-network ops: Conv (2-D), MaxPool/AveragePool (2-D), global pools, BatchNormalization
and InstanceNormalization (inference).

Conv and pooling go through one strided window view (im2col without copies until the GEMM);
group=1 convolutions are a single BLAS GEMM, grouped ones an einsum.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.onnx.ops_elementwise import Op
from modelc.onnx.ops_nn import _half_in_f32


def _pads_2d(
    attrs: dict[str, Any],
    hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
) -> tuple[int, int, int, int]:
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


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    dilations: tuple[int, int],
    pads: tuple[int, int, int, int],
    fill: float,
) -> np.ndarray:
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


def conv_transpose(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    """2-D ConvTranspose: one GEMM per group, then each kernel tap is scattered (col2im) into the output."""
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    if x.ndim != 4 or w.ndim != 4:
        raise UnsupportedError(f"only 2-D ConvTranspose is supported, got input rank {x.ndim}")
    if attrs.get("output_shape") is not None or attrs.get("auto_pad", "NOTSET") not in ("NOTSET", ""):
        raise UnsupportedError("ConvTranspose with output_shape or auto_pad is not supported; give pads")
    group = int(attrs.get("group", 1))
    N, C, H, W = x.shape
    Cw, Mg, kh, kw = w.shape
    if Cw != C or C % group:
        raise InvalidRequestError(f"ConvTranspose input {x.shape} does not match weight {w.shape} (group {group})")
    sh, sw = (int(v) for v in attrs.get("strides", [1, 1]))
    dh, dw = (int(v) for v in attrs.get("dilations", [1, 1]))
    top, left, bottom, right = (int(v) for v in attrs.get("pads", [0, 0, 0, 0]))
    oph, opw = (int(v) for v in attrs.get("output_padding", [0, 0]))
    full_h, full_w = sh * (H - 1) + oph + dh * (kh - 1) + 1, sw * (W - 1) + opw + dw * (kw - 1) + 1
    Cg = C // group
    xg = x.reshape(N, group, Cg, H * W)
    wg = w.reshape(group, Cg, Mg * kh * kw)
    cols = np.einsum("ngcp,gck->ngkp", xg, wg, optimize=True).reshape(N, group, Mg, kh, kw, H, W)
    y = np.zeros((N, group, Mg, full_h, full_w), np.float32)
    for i in range(kh):
        for j in range(kw):
            y[:, :, :, i * dh : i * dh + sh * (H - 1) + 1 : sh, j * dw : j * dw + sw * (W - 1) + 1 : sw] += cols[
                :, :, :, i, j
            ]
    y = y.reshape(N, group * Mg, full_h, full_w)[:, :, top : full_h - bottom, left : full_w - right]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return (np.ascontiguousarray(y, dtype=x.dtype),)


def _pool_geometry(
    x: np.ndarray, attrs: dict[str, Any]
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
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


_NEAREST = {
    "round_prefer_floor": lambda x: np.ceil(x - 0.5),
    "round_prefer_ceil": lambda x: np.floor(x + 0.5),
    "floor": np.floor,
    "ceil": np.ceil,
}


def _source_coords(n_in: int, n_out: int, scale: float, mode: str) -> np.ndarray:
    """Where each output index samples the input along one axis (ONNX coordinate_transformation_mode)."""
    x = np.arange(n_out, dtype=np.float64)
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
    if mode == "align_corners":
        out_len = scale * n_in  # the reference uses the scaled length, not the rounded size
        return x * (n_in - 1) / (out_len - 1) if out_len != 1 else np.zeros(n_out)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    raise UnsupportedError(f"Resize coordinate_transformation_mode {mode!r} is not supported")


def resize(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    """Resize (opset 13+), nearest or (bi)linear, one axis at a time (both modes are separable)."""
    x = inputs[0]
    scales = inputs[2] if len(inputs) > 2 and inputs[2] is not None and inputs[2].size else None
    sizes = inputs[3] if len(inputs) > 3 and inputs[3] is not None and inputs[3].size else None
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear") or attrs.get("antialias", 0) or attrs.get("axes") is not None:
        raise UnsupportedError(f"Resize mode {mode!r} (antialias/axes) is not supported; use nearest or linear")
    coord = attrs.get("coordinate_transformation_mode", "half_pixel")
    if (scales is None) == (sizes is None):
        raise InvalidRequestError("Resize needs exactly one of scales and sizes")
    if sizes is not None:
        out_shape = [int(v) for v in sizes]
        factors = [o / i for o, i in zip(out_shape, x.shape, strict=True)]
    else:
        factors = [float(v) for v in scales]
        out_shape = [int(np.floor(n * f)) for n, f in zip(x.shape, factors, strict=True)]
    y = x
    for axis, (n_in, n_out, f) in enumerate(zip(x.shape, out_shape, factors, strict=True)):
        if n_in == n_out and f == 1.0:
            continue
        src = _source_coords(n_in, n_out, f, coord)
        if mode == "nearest":
            rnd = _NEAREST.get(attrs.get("nearest_mode", "round_prefer_floor"))
            if rnd is None:
                raise UnsupportedError(f"Resize nearest_mode {attrs.get('nearest_mode')!r} is not supported")
            idx = np.clip(rnd(src), 0, n_in - 1).astype(np.int64)
            y = np.take(y, idx, axis=axis)
        else:
            lo = np.floor(src)
            w = (src - lo).astype(np.float32)
            i0 = np.clip(lo, 0, n_in - 1).astype(np.int64)
            i1 = np.clip(lo + 1, 0, n_in - 1).astype(np.int64)
            shape = [1] * x.ndim
            shape[axis] = n_out
            w = w.reshape(shape)
            y = np.take(y, i0, axis=axis) * (1 - w) + np.take(y, i1, axis=axis) * w
    return (np.ascontiguousarray(y, dtype=x.dtype),)


OPS: dict[str, Op] = {
    "Conv": _half_in_f32(conv),
    "ConvTranspose": _half_in_f32(conv_transpose),
    "MaxPool": max_pool,
    "AveragePool": average_pool,
    "GlobalAveragePool": global_average_pool,
    "GlobalMaxPool": global_max_pool,
    "BatchNormalization": batch_norm,
    "InstanceNormalization": instance_norm,
    "Resize": resize,
}

"""ONNX shape and data-movement ops: Reshape, Transpose, Concat, Split, Slice, Gather, (Un)Squeeze,
Shape, Constant, ConstantOfShape, Expand, Flatten, Range.

Opset 13+ forms: axes/split/shape arrive as inputs; the older attribute forms are accepted too.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import InvalidRequestError, UnsupportedError
from modelc.onnx.ops_elementwise import Op


def _ints(x: Any) -> list[int]:
    return [int(v) for v in np.asarray(x).reshape(-1)]


def _axes(inputs: list[Any], attrs: dict[str, Any], index: int) -> list[int] | None:
    """axes from input `index` (opset 13+/18+) or the `axes` attribute; None when neither is given."""
    if len(inputs) > index and inputs[index] is not None:
        return _ints(inputs[index])
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return None


def reshape(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, shape = inputs[0], _ints(inputs[1])
    if not attrs.get("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    try:
        return (x.reshape(shape),)
    except ValueError:
        raise InvalidRequestError(f"cannot reshape a tensor of shape {x.shape} to {shape}") from None


def transpose(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    perm = attrs.get("perm")
    return (np.transpose(inputs[0], perm),)


def concat(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    parts = [x for x in inputs if x is not None]
    return (np.concatenate(parts, axis=int(attrs["axis"])),)


def split(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(attrs.get("axis", 0)) % max(x.ndim, 1)
    dim = x.shape[axis]
    sizes = _ints(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else attrs.get("split")
    if sizes is None:
        n = int(attrs.get("num_outputs", attrs["_num_outputs"]))  # _num_outputs: set by the interpreter
        chunk = -(-dim // n)
        sizes = [min(chunk, dim - i * chunk) for i in range(n)]
    if sum(sizes) != dim:
        raise InvalidRequestError(f"Split sizes {list(sizes)} do not add up to dimension {dim}")
    cuts = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, cuts, axis=axis))


def slice_(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    starts, ends = _ints(inputs[1]), _ints(inputs[2])
    axes = _ints(inputs[3]) if len(inputs) > 3 and inputs[3] is not None else list(range(len(starts)))
    steps = _ints(inputs[4]) if len(inputs) > 4 and inputs[4] is not None else [1] * len(starts)
    index: list[slice] = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps, strict=True):
        if st == 0:
            raise InvalidRequestError("Slice step must not be 0")
        index[a % x.ndim] = slice(s, e, st)  # Python slices clamp exactly like ONNX Slice
    return (x[tuple(index)],)


def gather(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, idx = inputs[0], inputs[1]
    axis = int(attrs.get("axis", 0))
    try:
        return (np.take(x, idx.astype(np.int64, copy=False), axis=axis),)
    except IndexError:
        n = x.shape[axis]
        raise InvalidRequestError(f"Gather index out of range [{-n}, {n - 1}]") from None


def gather_elements(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, idx = inputs[0], inputs[1].astype(np.int64)
    axis = int(attrs.get("axis", 0)) % x.ndim
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise InvalidRequestError(f"GatherElements index out of range [{-n}, {n - 1}]")
    return (np.take_along_axis(x, np.where(idx < 0, idx + n, idx), axis=axis),)


def tile(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (np.tile(inputs[0], _ints(inputs[1])),)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "edge": "edge", "wrap": "wrap"}


def pad(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, pads = inputs[0], _ints(inputs[1])
    value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else None
    axes = _axes(inputs, attrs, 3)
    axes = list(range(x.ndim)) if axes is None else [a % x.ndim for a in axes]
    k = len(axes)
    if len(pads) != 2 * k:
        raise InvalidRequestError(f"Pad needs {2 * k} pads, got {len(pads)}")
    if min(pads, default=0) < 0:
        raise UnsupportedError("Pad with negative pads (cropping) is not supported")
    width = [(0, 0)] * x.ndim
    for i, a in enumerate(axes):
        width[a] = (pads[i], pads[i + k])
    mode = _PAD_MODES.get(attrs.get("mode", "constant"))
    if mode is None:
        raise UnsupportedError(f"Pad mode {attrs.get('mode')!r} is not supported")
    if mode == "constant":
        fill = 0 if value is None else np.asarray(value).reshape(-1)[0]
        return (np.pad(x, width, mode="constant", constant_values=fill),)
    return (np.pad(x, width, mode=mode),)


def cum_sum(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(np.asarray(inputs[1]).reshape(())) % max(x.ndim, 1)
    y = np.flip(x, axis) if attrs.get("reverse", 0) else x
    y = np.cumsum(y, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", 0):
        y = np.concatenate([np.zeros_like(np.take(y, [0], axis=axis)), np.delete(y, -1, axis=axis)], axis=axis)
    return (np.flip(y, axis) if attrs.get("reverse", 0) else y,)


def non_zero(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (np.array(np.nonzero(inputs[0]), dtype=np.int64).reshape(inputs[0].ndim, -1),)


def scatter_nd(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, idx, upd = inputs[0], inputs[1].astype(np.int64), inputs[2]
    reduction = attrs.get("reduction", "none")
    if reduction not in ("none", "add", "mul"):
        raise UnsupportedError(f"ScatterND reduction {reduction!r} is not supported")
    y = np.array(x, copy=True)
    k = idx.shape[-1]
    flat_idx = idx.reshape(-1, k)
    flat_upd = upd.reshape(flat_idx.shape[0], *x.shape[k:])
    for i, u in zip(flat_idx, flat_upd, strict=True):
        where = tuple(int(v) for v in i)
        if reduction == "add":
            y[where] += u
        elif reduction == "mul":
            y[where] *= u
        else:
            y[where] = u
    return (y,)


def one_hot(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    idx, depth, values = inputs[0].astype(np.int64), int(np.asarray(inputs[1]).reshape(-1)[0]), inputs[2]
    axis = int(attrs.get("axis", -1))
    idx = np.where(idx < 0, idx + depth, idx)
    hot = idx[..., None] == np.arange(depth)  # (..., depth)
    y = np.where(hot, values[1], values[0]).astype(values.dtype)
    return (np.moveaxis(y, -1, axis % y.ndim),)


def unsqueeze(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axes = _axes(inputs, attrs, 1) or []
    rank = x.ndim + len(axes)
    shape = list(x.shape)
    for a in sorted(a % rank for a in axes):
        shape.insert(a, 1)
    return (x.reshape(shape),)


def squeeze(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axes = _axes(inputs, attrs, 1)
    if axes is None:
        return (np.squeeze(x),)
    try:
        return (np.squeeze(x, axis=tuple(a % x.ndim for a in axes)),)
    except ValueError:
        raise InvalidRequestError(f"cannot squeeze axes {axes} of shape {x.shape}") from None


def shape(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    dims = inputs[0].shape
    start = int(attrs.get("start", 0))
    end = attrs.get("end")
    return (np.array(dims[start : None if end is None else int(end)], dtype=np.int64),)


def size(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (np.array(inputs[0].size, dtype=np.int64),)


def constant(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    if "value" in attrs:
        return (attrs["value"],)
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32)):
        if key in attrs:
            return (np.array(attrs[key], dtype=dtype),)
    for key in ("value_int", "value_ints"):
        if key in attrs:
            return (np.array(attrs[key], dtype=np.int64),)
    raise UnsupportedError(f"Constant with attributes {sorted(attrs)} is not supported")


def constant_of_shape(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    value = attrs.get("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return (np.full(_ints(inputs[0]), fill[0], dtype=fill.dtype),)


def expand(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    try:
        target = np.broadcast_shapes(x.shape, tuple(_ints(inputs[1])))
    except ValueError:
        raise InvalidRequestError(f"cannot expand shape {x.shape} to {_ints(inputs[1])}") from None
    return (np.broadcast_to(x, target),)


def flatten(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    axis = int(attrs.get("axis", 1))
    if axis < 0:
        axis += x.ndim
    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    return (x.reshape(outer, -1) if x.size else x.reshape(outer, int(np.prod(x.shape[axis:]))),)


def range_(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    start, limit, delta = (np.asarray(v).reshape(()) for v in inputs[:3])
    return (np.arange(start, limit, delta, dtype=start.dtype),)


OPS: dict[str, Op] = {
    "Reshape": reshape,
    "Transpose": transpose,
    "Concat": concat,
    "Slice": slice_,
    "Gather": gather,
    "GatherElements": gather_elements,
    "Tile": tile,
    "CumSum": cum_sum,
    "NonZero": non_zero,
    "ScatterND": scatter_nd,
    "OneHot": one_hot,
    "Pad": pad,
    "Unsqueeze": unsqueeze,
    "Squeeze": squeeze,
    "Shape": shape,
    "Size": size,
    "Constant": constant,
    "ConstantOfShape": constant_of_shape,
    "Expand": expand,
    "Flatten": flatten,
    "Range": range_,
    "Split": split,
}

"""ONNX elementwise ops: arithmetic, comparisons, activations, Cast/Where/Identity.

Each op is `fn(inputs, attrs, opset) -> tuple of arrays`; inputs are numpy arrays (None for an
omitted optional input). Pure: never writes into an input. Broadcasting is numpy's, which is
ONNX's multidirectional broadcasting.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc.errors import UnsupportedError
from modelc.kernels.elementwise import encoder

Op = Callable[[list[Any], dict[str, Any], int], tuple[np.ndarray, ...]]

# TensorProto.DataType ids -> numpy dtypes, for Cast and friends.
NUMPY_OF_ONNX: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
}


def numpy_dtype(type_id: int) -> np.dtype:
    try:
        return NUMPY_OF_ONNX[int(type_id)]
    except KeyError:
        raise UnsupportedError(f"ONNX element type id {type_id} is not supported") from None


def _binary(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Op:
    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        a, b = inputs[0], inputs[1]
        return (np.asarray(f(a, b)).astype(a.dtype, copy=False),)

    return op


def _unary(f: Callable[[np.ndarray], np.ndarray]) -> Op:
    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        x = inputs[0]
        return (np.asarray(f(x)).astype(x.dtype, copy=False),)

    return op


def _compare(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Op:
    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        return (np.asarray(f(inputs[0], inputs[1]), dtype=np.bool_),)

    return op


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):
        # ONNX integer Div truncates toward zero (C semantics), unlike numpy's floor division.
        q = np.floor_divide(a, b)
        fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
        return q + fix
    return a / b


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.floating):
        return np.power(a, b.astype(a.dtype, copy=False))
    return np.power(a, b)


def _erf(x: np.ndarray) -> np.ndarray:
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty_like(flat)
    encoder.erf(out, flat)
    return out.reshape(x.shape)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so exp never overflows.
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    e = np.exp(x[~pos])
    out[~pos] = e / (1.0 + e)
    return out


def gelu(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    if attrs.get("approximate", "none") == "tanh":
        y = 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))
        return (y.astype(x.dtype, copy=False),)
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(-1)
    out = np.empty_like(flat)
    encoder.gelu_erf(out, flat)
    return (out.reshape(x.shape).astype(x.dtype, copy=False),)


def _alpha_op(f: Callable[[np.ndarray, dict[str, Any]], np.ndarray]) -> Op:
    """An activation with float attributes (alpha, beta, gamma), computed in the input's dtype."""

    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        x = inputs[0]
        return (np.asarray(f(x, attrs)).astype(x.dtype, copy=False),)

    return op


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, np.zeros((), x.dtype))


ACTIVATIONS: dict[str, Op] = {
    "Elu": _alpha_op(lambda x, a: np.where(x >= 0, x, a.get("alpha", 1.0) * np.expm1(np.minimum(x, 0)))),
    "Selu": _alpha_op(
        lambda x, a: (
            a.get("gamma", 1.0507009873554805)
            * np.where(x > 0, x, a.get("alpha", 1.6732632423543772) * np.expm1(np.minimum(x, 0)))
        )
    ),
    "HardSigmoid": _alpha_op(lambda x, a: np.clip(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1)),
    "HardSwish": _alpha_op(lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1)),
    "Softplus": _alpha_op(lambda x, a: _softplus(x)),
    "Softsign": _alpha_op(lambda x, a: x / (1 + np.abs(x))),
    "Mish": _alpha_op(lambda x, a: x * np.tanh(_softplus(x))),
    "Sign": _alpha_op(lambda x, a: np.sign(x)),
    "Round": _alpha_op(lambda x, a: np.round(x)),  # half to even, as ONNX specifies
}


def prelu(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x, slope = inputs[0], inputs[1]
    return (np.where(x >= 0, x, x * slope).astype(x.dtype, copy=False),)


def leaky_relu(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    alpha = attrs.get("alpha", 0.01)
    return (np.where(x >= 0, x, x * np.asarray(alpha, x.dtype)).astype(x.dtype, copy=False),)


def clip(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    x = inputs[0]
    lo = inputs[1] if len(inputs) > 1 else None
    hi = inputs[2] if len(inputs) > 2 else None
    y = x
    if lo is not None:
        y = np.maximum(y, lo.astype(x.dtype))
    if hi is not None:
        y = np.minimum(y, hi.astype(x.dtype))
    return (np.array(y, dtype=x.dtype, copy=y is x),)


def variadic(f: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Op:
    def op(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
        y = inputs[0]
        for x in inputs[1:]:
            y = f(y, x)
        return (np.array(y, dtype=inputs[0].dtype, copy=len(inputs) == 1),)

    return op


def cast(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (inputs[0].astype(numpy_dtype(attrs["to"])),)


def cast_like(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (inputs[0].astype(inputs[1].dtype),)


def where(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    c, a, b = inputs
    return (np.where(c.astype(np.bool_), a, b).astype(a.dtype, copy=False),)


def identity(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    return (inputs[0],)


def dropout(inputs: list[Any], attrs: dict[str, Any], opset: int) -> tuple[np.ndarray, ...]:
    """Inference mode only: Y = X, mask all true."""
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None and bool(np.asarray(training)):
        raise UnsupportedError("Dropout with training_mode=True is not supported")
    x = inputs[0]
    return (x, np.ones(x.shape, np.bool_))


OPS: dict[str, Op] = {
    "Add": _binary(np.add),
    "Sub": _binary(np.subtract),
    "Mul": _binary(np.multiply),
    "Div": _binary(_div),
    "Pow": _binary(_pow),
    "Mod": _binary(np.fmod),
    "Sqrt": _unary(np.sqrt),
    "Neg": _unary(np.negative),
    "Abs": _unary(np.abs),
    "Exp": _unary(np.exp),
    "Log": _unary(np.log),
    "Reciprocal": _unary(np.reciprocal),
    "Floor": _unary(np.floor),
    "Ceil": _unary(np.ceil),
    "Sin": _unary(np.sin),
    "Cos": _unary(np.cos),
    "Relu": _unary(lambda x: np.maximum(x, np.zeros((), x.dtype))),
    "Erf": _unary(_erf),
    "Sigmoid": _unary(_sigmoid),
    "Tanh": _unary(np.tanh),
    "Gelu": gelu,
    "LeakyRelu": leaky_relu,
    "PRelu": prelu,
    **ACTIVATIONS,
    "IsNaN": lambda inputs, attrs, opset: (np.isnan(inputs[0]),),
    "IsInf": lambda inputs, attrs, opset: (np.isinf(inputs[0]),),
    "Mean": lambda inputs, attrs, opset: (
        (sum(np.asarray(x, np.float64) for x in inputs) / len(inputs)).astype(inputs[0].dtype),
    ),
    "Clip": clip,
    "Min": variadic(np.minimum),
    "Max": variadic(np.maximum),
    "Sum": variadic(np.add),
    "Equal": _compare(np.equal),
    "Less": _compare(np.less),
    "LessOrEqual": _compare(np.less_equal),
    "Greater": _compare(np.greater),
    "GreaterOrEqual": _compare(np.greater_equal),
    "And": _compare(np.logical_and),
    "Or": _compare(np.logical_or),
    "Xor": _compare(np.logical_xor),
    "Not": lambda inputs, attrs, opset: (np.logical_not(inputs[0]),),
    "Cast": cast,
    "CastLike": cast_like,
    "Where": where,
    "Identity": identity,
    "Dropout": dropout,
}

"""Architecture "mlp": stacked dense layers with ReLU between hidden layers, one GEMM per layer per batch.

Weight names (the seed spec and common PyTorch layouts): `layer0.weight`/`layer0.bias`,
`layers.0.weight`, `net.0.weight`, `fc1.weight` ... (any prefix + a layer number, sorted by that
number) or a single `weight`/`bias`. Weights are (out_features, in_features) as in torch.nn.Linear;
biases are optional. Also owns `Linear`, the dense layer BERT uses too.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from modelc.errors import FormatError, InvalidRequestError
from modelc.ir import SCALE_SUFFIX, DataType, TensorData
from modelc.kernels.matmul.linear import prepare_weight
from modelc.kernels.select import KernelSet, kernel_set

_LAYER = re.compile(r"^(.*?)(\d+)\.weight$")
SMALL_T = 128  # rows up to which W @ x.T beats x @ W.T (measured with OpenBLAS 0.3.31, 1 thread)


class Linear:
    """y = x @ W.T + b for stored (N, C) weights (several are fused by rows).

    Plain float weights are used as (N, C) f32: the stored F32 tensor itself (zero-copy) or one
    converted copy (F16/BF16, fused rows). A single quantized weight stays in its blocks and runs
    through the kernel set's matmul.
    """

    def __init__(self, ks: KernelSet, ts: list[TensorData], scales: list[TensorData | None], bias: np.ndarray | None):
        self.ks = ks
        self.bias = bias
        plain = all(t.dtype in (DataType.F32, DataType.F16, DataType.BF16) for t in ts)
        self.in_features = int(ts[0].shape[-1])
        self.out_features = sum(int(t.shape[0]) for t in ts)
        self.w: np.ndarray | None = None  # (N, C) f32
        self.weight = None
        if len(ts) == 1 and ts[0].dtype is DataType.F32:
            self.w = ts[0].array().reshape(self.out_features, self.in_features)
        elif plain:
            self.w = np.ascontiguousarray(np.concatenate([ks.dequantize(t) for t in ts], axis=0), dtype=np.float32)
        elif len({t.dtype for t in ts}) == 1 and all((s is None) == (scales[0] is None) for s in scales):
            # Quantized parts of one type (fused QKV): stack their stored rows, keep the blocks.
            t, scale = _stack_rows(ts), _stack_rows(scales) if scales[0] is not None else None
            self.weight = prepare_weight(t, scale)
        else:
            self.w = np.ascontiguousarray(
                np.concatenate([ks.dequantize(t, s) for t, s in zip(ts, scales, strict=True)], axis=0), dtype=np.float32
            )

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """x (T, C) f32 -> (T, N) f32 C-contiguous."""
        if self.w is not None:
            if x.shape[0] <= SMALL_T:
                # Few rows: W (N, C) @ x.T runs 10-30% faster in OpenBLAS than x @ W.T; the (N, T)
                # result is transposed back (T*N floats, cheap). Many rows: it is 2-3x slower.
                y = np.ascontiguousarray(np.matmul(self.w, x.T).T)  # (T, N)
            else:
                y = x @ self.w.T  # (T, N); W.T is a view (BLAS transpose flag), never a copy
        else:
            y = np.empty((x.shape[0], self.out_features), np.float32)
            self.ks.matmul(y, np.ascontiguousarray(x, dtype=np.float32), self.weight)
        if self.bias is not None:
            y += self.bias
        return y


def _stack_rows(ts: list[Any]) -> TensorData:
    """Row-wise concatenation of same-dtype tensors in their stored form (rows are whole blocks)."""
    if len(ts) == 1:
        return ts[0]
    rows = sum(int(t.shape[0]) for t in ts)
    return TensorData((rows, *ts[0].shape[1:]), ts[0].dtype, np.concatenate([t.data for t in ts]))


def layer_names(tensors: dict[str, TensorData]) -> list[tuple[str, str | None]]:
    """[(weight name, bias name or None)] in forward order."""
    if "weight" in tensors:
        return [("weight", "bias" if "bias" in tensors else None)]
    numbered: dict[str, list[tuple[int, str]]] = {}
    for name in tensors:
        m = _LAYER.match(name)
        if m:
            numbered.setdefault(m.group(1), []).append((int(m.group(2)), name))
    if len(numbered) != 1:
        found = "no numbered weights" if not numbered else f"several layer prefixes {sorted(numbered)}"
        raise FormatError(f"an mlp model needs layerN.weight tensors or a single weight ({found})")
    layers = sorted(next(iter(numbered.values())))
    out = []
    for _, w in layers:
        b = w[: -len("weight")] + "bias"
        out.append((w, b if b in tensors else None))
    return out


def looks_like_mlp(tensors: dict[str, Any]) -> bool:
    """Whether tensors with no architecture are a stack of dense layers (2-D weights whose shapes chain,
    1-D biases): what pack calls "mlp" when the source names no architecture."""
    try:
        layers = layer_names(tensors)
    except FormatError:
        return False
    if len(layers) + sum(b is not None for _, b in layers) != len(tensors):
        return False  # other tensors too: something else
    shapes = [tuple(tensors[w].shape) for w, _ in layers]
    if any(len(s) != 2 for s in shapes):
        return False
    chained = all(shapes[i][1] == shapes[i - 1][0] for i in range(1, len(shapes)))
    biased = all(b is None or tuple(tensors[b].shape) == (shapes[i][0],) for i, (_, b) in enumerate(layers))
    return chained and biased


class MlpModel:
    """`forward(x (B, in) f32) -> (B, out) f32`: GEMM + bias per layer, ReLU between layers."""

    def __init__(self, source: Any, kernels: KernelSet | None = None) -> None:
        self.ks = kernels or kernel_set()
        self.name = getattr(source, "name", "mlp")
        tensors = source.tensors
        self.layers: list[Linear] = []
        prev: int | None = None
        for w_name, b_name in layer_names(tensors):
            t = tensors[w_name]
            if len(t.shape) == 1:  # a single weight vector: one output
                t = TensorData((1, t.shape[0]), t.dtype, t.data)
            if len(t.shape) != 2:
                raise FormatError(f"mlp weight {w_name} must be 2-D (out, in), has shape {t.shape}")
            if prev is not None and t.shape[1] != prev:
                raise FormatError(f"mlp weight {w_name} has shape {t.shape}; the previous layer gives {prev} features")
            bias = None
            if b_name is not None:
                bias = self.ks.dequantize(tensors[b_name]).reshape(-1).astype(np.float32)
                if bias.shape[0] != t.shape[0]:
                    raise FormatError(f"mlp bias {b_name} has {bias.shape[0]} elements, expected {t.shape[0]}")
            self.layers.append(Linear(self.ks, [t], [tensors.get(w_name + SCALE_SUFFIX)], bias))
            prev = int(t.shape[0])
        self.in_features = self.layers[0].in_features
        self.out_features = self.layers[-1].out_features

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (B, in) -> (B, out); the whole batch goes through each layer as one GEMM."""
        if x.ndim != 2 or x.shape[1] != self.in_features:
            raise InvalidRequestError(f"mlp input must have {self.in_features} features, got shape {list(x.shape)}")
        h = np.ascontiguousarray(x, dtype=np.float32)
        for i, layer in enumerate(self.layers):
            h = layer(h)  # (B, N_i)
            if i < len(self.layers) - 1:
                np.maximum(h, 0.0, out=h)
        return h

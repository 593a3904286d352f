"""Every layer of a decode step in one numba entry: decode_layer's attention and MLP halves called from a
loop in numba, where the forward called them from Python, two calls a layer.

Why: a decode step's Python between the layers runs with caches the weights have just streamed through,
so a few lines a layer (the call, its ~45 arguments, the plan's tuples) cost ~20-30 us of idle memory bus
each; over TinyLlama's 22 layers ~0.5-0.6 ms of a ~20 ms token (benchmarks/decode_profile.py's "python
glue in forward").

The layers' arguments that do not change between steps (weights, norms, biases, RoPE frequencies, the
kinds and paths of the matmuls: models/llama_decode.py's LayerPlan) travel as one int64 table, a row a
layer: an array is its address and shape (C-contiguous, of the dtype its place expects; `encode` checks
both), a number is itself. The kernel rebuilds the arrays with numba.carray (writable, no owner: the
caller keeps the arrays alive while the table is used, and nothing here writes them). The per-step
arrays (hidden states, scratch, KV pages, positions) are passed as usual. Same kernels, same order, same
arrays as the per-layer calls: every number is the same (tests/models/test_decode_layer.py).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic

from modelc.kernels import decode_layer

F32, F64, U8, INT = "f32", "f64", "u8", "int"
LAYOUT = (
    (F32,),  # attn_norm
    (U8, INT, INT, INT, U8, INT, INT, INT, U8, INT, INT, F32),  # q | k | v runs, their biases
    (F32, F32, F64, INT),  # q_norm, k_norm, inv_freq, neox
    (INT,),  # window
    (U8, INT, INT, F32, F32),  # o, its kind and path, o bias, ffn_norm
    (U8, INT, INT, INT, U8, INT, INT, F32),  # gate | up runs, their biases
    (U8, INT, INT, F32),  # down, its kind and path, its bias
)
"""The table's fields, in the order the kernel reads them: an array takes 2 columns (address, length) or 3
(address, rows, columns: U8, the weights), a number 1."""
_DTYPES = {F32: np.dtype(np.float32), F64: np.dtype(np.float64), U8: np.dtype(np.uint8)}
WIDTH = sum(3 if f == U8 else 2 if f in _DTYPES else 1 for part in LAYOUT for f in part)


def encode(parts: tuple) -> list[int]:
    """One layer's row of the table: `parts` as LAYOUT lays them out (tuples of arrays and numbers)."""
    row: list[int] = []
    for fields, values in zip(LAYOUT, parts, strict=True):
        for f, v in zip(fields, values, strict=True):
            if f == INT:
                row.append(int(v))
                continue
            a = np.asarray(v)
            if a.dtype != _DTYPES[f] or not a.flags.c_contiguous or a.ndim != (2 if f == U8 else 1):
                raise ValueError(f"decode_step: a {f} field got {a.dtype} {a.shape}")
            row += [a.ctypes.data, *a.shape]
    assert len(row) == WIDTH
    return row


@intrinsic
def _address(typingctx, addr, dtype):
    """An int64 address as a pointer to `dtype` (a numba number class: np.float32, ...)."""
    if not isinstance(addr, types.Integer) or not isinstance(dtype, types.NumberClass):
        return None
    ptr = types.CPointer(dtype.instance_type)

    def codegen(context, builder, sig, args):
        return builder.inttoptr(args[0], context.get_value_type(ptr))

    return ptr(addr, dtype), codegen


@njit(cache=True, nogil=True, inline="always")
def _f32(row, c):
    return carray(_address(row[c], np.float32), (row[c + 1],)), c + 2


@njit(cache=True, nogil=True, inline="always")
def _f64(row, c):
    return carray(_address(row[c], np.float64), (row[c + 1],)), c + 2


@njit(cache=True, nogil=True, inline="always")
def _u8(row, c):
    return carray(_address(row[c], np.uint8), (row[c + 1], row[c + 2])), c + 3


@njit(cache=True, nogil=True, error_model="numpy")
def decode_layers(
    table, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all, v_all, slots, block_tables,
    q_start, pos_start, scale, parallel, attn, gu, act,
):  # fmt: skip
    """Every layer (a row of `table` each) of T one-token rows: decode_layer.attention_half then mlp_half, as
    the forward calls them; k_all / v_all: the (L, P, Z, K, D) KV pages. o ends as the last layer's output
    (the forward adds it to x)."""
    for i in range(table.shape[0]):
        r = table[i]
        attn_norm, c = _f32(r, 0)
        w0, c = _u8(r, c)
        kind0, how0, end0 = r[c], r[c + 1], r[c + 2]
        w1, c = _u8(r, c + 3)
        kind1, how1, end1 = r[c], r[c + 1], r[c + 2]
        w2, c = _u8(r, c + 3)
        kind2, how2 = r[c], r[c + 1]
        qkv_bias, c = _f32(r, c + 2)
        q_norm, c = _f32(r, c)
        k_norm, c = _f32(r, c)
        inv_freq, c = _f64(r, c)
        neox, window = r[c] != 0, r[c + 1]
        o_w, c = _u8(r, c + 2)
        o_kind, o_how = r[c], r[c + 1]
        o_bias, c = _f32(r, c + 2)
        ffn_norm, c = _f32(r, c)
        g0, c = _u8(r, c)
        gkind0, ghow0, gend0 = r[c], r[c + 1], r[c + 2]
        g1, c = _u8(r, c + 3)
        gkind1, ghow1 = r[c], r[c + 1]
        gu_bias, c = _f32(r, c + 2)
        down_w, c = _u8(r, c)
        down_kind, down_how = r[c], r[c + 1]
        down_bias, c = _f32(r, c + 2)
        decode_layer.attention_half(
            x, o, h, i == 0, attn_norm, eps,
            qkv, w0, kind0, how0, end0, w1, kind1, how1, end1, w2, kind2, how2, qkv_bias, q, k, v,
            heads, kv_heads, head_dim, q_norm, k_norm, inv_freq, neox, positions,
            k_all[i], v_all[i], slots, block_tables, q_start, pos_start, scale, window, parallel,
            attn, o_w, o_kind, o_how, o_bias, ffn_norm,
        )  # fmt: skip
        decode_layer.mlp_half(o, h, gu, g0, gkind0, ghow0, gend0, g1, gkind1, ghow1, gu_bias, act, down_w, down_kind,
                              down_how, down_bias)  # fmt: skip

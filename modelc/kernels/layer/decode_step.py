"""A run of a decode step's layers in one numba entry: decode_layer's attention and MLP halves (decode_layers), the
attention half and moe_ffn's experts (decode_layers_moe), or the attention half alone (attention_layers: the
forward then runs the layer's experts itself), in a loop in numba, where the forward called them from Python.
models/llama_decode.DecodeRuns makes the runs: a dense model's whole stack is one run.

Why: a decode step's Python between the layers runs with caches the weights have just streamed through,
so a few lines a layer (the call, its ~45 arguments, the plan's tuples) cost ~20-30 us of idle memory bus
each; over TinyLlama's 22 layers ~0.5-0.6 ms of a ~20 ms token (benchmarks/decode_profile.py's "python
glue in forward").

The layers' arguments that do not change between steps (weights, norms, biases, RoPE frequencies, the
kinds and paths of the matmuls: models/llama_decode.py's LayerPlan) travel as one int64 table, a row a
layer: an array is its address and 3 dimensions (C-contiguous, of the dtype and rank its place expects;
`encode` checks them), a number is itself. The kernel rebuilds the arrays with numba.carray (writable, no owner: the
caller keeps the arrays alive while the table is used, and nothing here writes them). The per-step
arrays (hidden states, scratch, KV pages, positions) are passed as usual; `layer0` is the run's first layer
(its KV pages, and whether it is the model's first). Same kernels, same order, same arrays as the general
path: every number is the same (tests/models/test_decode_layer.py). docs/kernels.md has what a call costs
with its arguments in this form and others (benchmarks/dispatch_cost.py).
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types
from numba.extending import intrinsic

from modelc.kernels.layer import decode_layer, moe_ffn

F32, F32_2, F64, U8, U8_3, INT = "f32", "f32_2", "f64", "u8", "u8_3", "int"
ATTENTION = (
    (F32,),  # attn_norm
    (U8, INT, INT, INT, U8, INT, INT, INT, U8, INT, INT, F32),  # q | k | v runs, their biases
    (F32, F32, F64, INT),  # q_norm, k_norm, inv_freq, neox
    (INT,),  # window
    (U8, INT, INT, F32, F32),  # o, its kind and path, o bias, ffn_norm
)
MLP = (
    (U8, INT, INT, INT, U8, INT, INT, F32),  # gate | up runs, their biases
    (U8, INT, INT, F32),  # down, its kind and path, its bias
)
MOE = (
    # moe_ffn._moe_ffn's arguments between (out, x) and the thread count (llama_decode's LayerPlan.moe)
    (F32_2, F32_2, F32, INT, INT, U8_3, U8_3, U8_3, INT, INT, INT, F32_2, F32_2, F32_2, INT, U8_3, U8_3, U8_3),
)
"""A table row's fields, in the order the kernels read them: the attention half's, then the MLP half's
(decode_layers) or the experts' (decode_layers_moe). An array takes 4 columns (its address and 3 dimensions,
leading ones where it has fewer), a number 1."""
_ARRAYS = {F32: (np.float32, 1), F32_2: (np.float32, 2), F64: (np.float64, 1), U8: (np.uint8, 2),
           U8_3: (np.uint8, 3)}  # fmt: skip


def width(layout: tuple) -> int:
    return sum(4 if f in _ARRAYS else 1 for part in layout for f in part)


def encode(layout: tuple, parts: tuple) -> list[int]:
    """One layer's row of a table: `parts` (tuples of arrays and numbers) as `layout` lays them out."""
    row: list[int] = []
    for fields, values in zip(layout, parts, strict=True):
        for f, v in zip(fields, values, strict=True):
            if f == INT:
                row.append(int(v))
                continue
            a = np.asarray(v)
            dtype, ndim = _ARRAYS[f]
            if a.dtype != dtype or not a.flags.c_contiguous or a.ndim != ndim:
                raise ValueError(f"decode_step: a {f} field got {a.dtype} {a.shape}")
            row += [a.ctypes.data, *(1,) * (3 - ndim), *a.shape]
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
def _array(row, c, dtype):
    """The (D0, D1, D2) array of `dtype` whose address and dimensions are columns c .. c + 3; the next column."""
    return carray(_address(row[c], dtype), (row[c + 1], row[c + 2], row[c + 3])), c + 4


@njit(cache=True, nogil=True, inline="always")
def _vec(row, c, dtype):
    a, c = _array(row, c, dtype)
    return a[0, 0], c


@njit(cache=True, nogil=True, inline="always")
def _mat(row, c, dtype):
    a, c = _array(row, c, dtype)
    return a[0], c


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _attention_half(
    r, i, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all, v_all, ks_all, vs_all, slots,
    block_tables, q_start, pos_start, scale, parallel, attn, kinds,
):  # fmt: skip
    """decode_layer.attention_half for layer i of the model (row r: ATTENTION's fields; the first layer norms x,
    the others add the previous layer's o first); returns the next column of r."""
    attn_norm, c = _vec(r, 0, np.float32)
    w0, c = _mat(r, c, np.uint8)
    kind0, how0, end0 = r[c], r[c + 1], r[c + 2]
    w1, c = _mat(r, c + 3, np.uint8)
    kind1, how1, end1 = r[c], r[c + 1], r[c + 2]
    w2, c = _mat(r, c + 3, np.uint8)
    kind2, how2 = r[c], r[c + 1]
    qkv_bias, c = _vec(r, c + 2, np.float32)
    q_norm, c = _vec(r, c, np.float32)
    k_norm, c = _vec(r, c, np.float32)
    inv_freq, c = _vec(r, c, np.float64)
    neox, window = r[c] != 0, r[c + 1]
    o_w, c = _mat(r, c + 2, np.uint8)
    o_kind, o_how = r[c], r[c + 1]
    o_bias, c = _vec(r, c + 2, np.float32)
    ffn_norm, c = _vec(r, c, np.float32)
    decode_layer.attention_half(
        x, o, h, i == 0, attn_norm, eps,
        qkv, w0, kind0, how0, end0, w1, kind1, how1, end1, w2, kind2, how2, qkv_bias, q, k, v,
        heads, kv_heads, head_dim, q_norm, k_norm, inv_freq, neox, positions,
        k_all[i], v_all[i], ks_all[i], vs_all[i], slots, block_tables, q_start, pos_start, scale, window, parallel,
        attn, o_w, o_kind, o_how, o_bias, ffn_norm, kinds,
    )  # fmt: skip
    return c


@njit(cache=True, nogil=True, error_model="numpy")
def decode_layers(
    table, layer0, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all, v_all, ks_all, vs_all,
    slots, block_tables, q_start, pos_start, scale, parallel, attn, gu, act, kinds,
):  # fmt: skip
    """Layers layer0 .. layer0 + len(table) - 1 (a row of `table` each: ATTENTION + MLP) of T one-token rows:
    decode_layer.attention_half then mlp_half, as the forward's general path computes them; k_all / v_all: the
    (L, P, Z, K, D) KV pages, ks_all / vs_all their fp16 scales (L, P, Z, K, NB) where they are q8_0 (int8), else
    decode_layer.NO_SCALES (unread). o ends as the last layer's output (the next layer, or the forward, adds it to
    x)."""
    for i in range(table.shape[0]):
        r = table[i]
        c = _attention_half(r, layer0 + i, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all,
                            v_all, ks_all, vs_all, slots, block_tables, q_start, pos_start, scale, parallel, attn,
                            kinds)  # fmt: skip
        g0, c = _mat(r, c, np.uint8)
        gkind0, ghow0, gend0 = r[c], r[c + 1], r[c + 2]
        g1, c = _mat(r, c + 3, np.uint8)
        gkind1, ghow1 = r[c], r[c + 1]
        gu_bias, c = _vec(r, c + 2, np.float32)
        down_w, c = _mat(r, c, np.uint8)
        down_kind, down_how = r[c], r[c + 1]
        down_bias, c = _vec(r, c + 2, np.float32)
        decode_layer.mlp_half(o, h, gu, g0, gkind0, ghow0, gend0, g1, gkind1, ghow1, gu_bias, act, down_w, down_kind,
                              down_how, down_bias, kinds)  # fmt: skip


@njit(cache=True, nogil=True, error_model="numpy")
def attention_layers(
    table, layer0, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all, v_all, ks_all, vs_all,
    slots, block_tables, q_start, pos_start, scale, parallel, attn, kinds,
):  # fmt: skip
    """decode_layers' attention halves only (rows: ATTENTION): for a layer whose FFN the forward runs itself
    (experts through MoeFFN.forward), h ends as the FFN's input."""
    for i in range(table.shape[0]):
        _attention_half(table[i], layer0 + i, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions,
                        k_all, v_all, ks_all, vs_all, slots, block_tables, q_start, pos_start, scale, parallel, attn,
                        kinds)  # fmt: skip


@njit(cache=True, nogil=True, error_model="numpy")
def decode_layers_moe(
    table, layer0, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all, v_all, ks_all, vs_all,
    slots, block_tables, q_start, pos_start, scale, parallel, attn, nthreads, kinds,
):  # fmt: skip
    """decode_layers for a mixture of experts in every layer (rows: ATTENTION + MOE): the attention half, then
    moe_ffn._moe_ffn (its router computed in the kernel) on nthreads threads."""
    for i in range(table.shape[0]):
        r = table[i]
        c = _attention_half(r, layer0 + i, x, o, h, eps, qkv, q, k, v, heads, kv_heads, head_dim, positions, k_all,
                            v_all, ks_all, vs_all, slots, block_tables, q_start, pos_start, scale, parallel, attn,
                            kinds)  # fmt: skip
        logits, c = _mat(r, c, np.float32)
        router, c = _mat(r, c, np.float32)
        rbias, c = _vec(r, c, np.float32)
        top_k, normalize = r[c], r[c + 1] != 0
        gate, c = _array(r, c + 2, np.uint8)
        up, c = _array(r, c, np.uint8)
        down, c = _array(r, c, np.uint8)
        kg, ku, kd = r[c], r[c + 1], r[c + 2]
        gbias, c = _mat(r, c + 3, np.float32)
        ubias, c = _mat(r, c, np.float32)
        dbias, c = _mat(r, c, np.float32)
        oss = r[c] != 0
        gr, c = _array(r, c + 1, np.uint8)
        ur, c = _array(r, c, np.uint8)
        dr, c = _array(r, c, np.uint8)
        moe_ffn._moe_ffn(o, h, logits, router, rbias, top_k, normalize, gate, up, down, kg, ku, kd, gbias, ubias,
                         dbias, oss, gr, ur, dr, nthreads)  # fmt: skip

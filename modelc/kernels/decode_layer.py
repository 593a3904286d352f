"""A decoder layer at one token (a single sequence's decode step) in two numba entries: the attention half
and the gated-MLP half, where the forward made ~12 kernel calls from Python a layer, each with its Python
glue. The kernels are the ones the forward calls (norm, gemm_r16.matmul_f32 or gemm_fused_k.qmatvec_k, rope,
kv_write, attention_rows, activation), in the same order on the same arrays, so every number is the same (tests/models/
test_decode_layer.py compares logits bit for bit). models/llama_decode.py decides which layers qualify.

Why: a 1-token step runs its Python between kernels that stream megabytes, so that Python runs with cold
caches, several times its hot cost (TinyLlama Q4_K_M: ~50 us of glue a layer on top of ~12 calls of 3-9 us).

The matmuls run under whatever numba parallel chunk the caller set (models/llama_decode.py: the static split).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from modelc.kernels import activation, attention_rows, gemm_fused_k, gemm_r16, kv_write, norm, quant, rope

NO_W = np.zeros((0, 0), np.uint8)  # an absent matmul's weight (its how is NONE)
NO_F32 = np.zeros(0, np.float32)  # an absent norm weight
NO_F64 = np.zeros(0, np.float64)  # no RoPE in this layer


NONE, R16, MATVEC_K = 0, 1, 2
"""How a matmul runs (its `how`): not at all, gemm_r16's repacked kernel (w: the repacked array), or
gemm_fused_k's one-token kernel on the file's blocks (w: (N, row_bytes); Q5_K and the other K-quants or
IQ4_XS where not repacked): plan.Path.R16 and Path.MATVEC_K, the two decode paths linear.matmul takes for
these weights at T = 1."""


@njit(cache=True, nogil=True)
def _mm(buf, lo, hi, x, w, kind, how):
    """buf[lo:hi] (one row) = x @ W.T, as linear.matmul computes it at T = 1 on the path `how`."""
    out = buf[lo:hi].reshape((1, hi - lo))
    if how == R16:
        gemm_r16.matmul_f32(out, x, w, kind)
    elif how == MATVEC_K:
        xq, xd, xs = quant.quantized(x)
        gemm_fused_k.qmatvec_k(out, xq, xd, xs, w, kind)


@njit(cache=True, nogil=True)
def _add(v, bias):
    """v += bias (float32, as numpy's +=) where bias is not empty."""
    for i in range(bias.shape[0]):
        v[i] += bias[i]


@njit(cache=True, nogil=True, error_model="numpy")
def attention_half(
    x, o, h, first, attn_norm, eps,
    qkv, w0, kind0, how0, end0, w1, kind1, how1, end1, w2, kind2, how2, qkv_bias,
    heads, kv_heads, head_dim, q_norm, k_norm, inv_freq, neox, positions,
    k_pages, v_pages, slots, block_tables, q_start, pos_start, scale, window, parallel,
    attn, o_w, o_kind, o_how, o_bias, ffn_norm,
):  # fmt: skip
    """One token (T = 1) through a layer's attention half, as LlamaModel.forward does it:

    x (1, C) += o (the previous layer's output; not for the first layer), h = rms_norm(x, attn_norm);
    q | k | v = h @ W.T into qkv (nq + 2 nk,): up to three matmuls, each a run of consecutive projections
    (w_i, kind_i, how_i; how NONE: no matmul) writing qkv[0:end0], qkv[end0:end1], qkv[end1:], plus qkv_bias
    (q | k | v biases) where not empty;
    per-head q/k RMSNorm where q_norm / k_norm are not empty (per head (D,) or full width (H*D,));
    RoPE where inv_freq is not empty; K/V written at slots; attention into attn (1, H*D) (attention_rows'
    kernels; `parallel`: the threaded one); o (1, C) = attn @ O.T (+ o_bias where not empty); x += o,
    h = rms_norm(x, ffn_norm).
    """
    if first:
        norm.rms_norm(h, x, attn_norm, eps)
    else:
        norm.add_rms_norm(h, x, o, attn_norm, eps)
    _mm(qkv, 0, end0, h, w0, kind0, how0)
    _mm(qkv, end0, end1, h, w1, kind1, how1)
    _mm(qkv, end1, qkv.shape[0], h, w2, kind2, how2)
    _add(qkv, qkv_bias)
    nq = heads * head_dim
    nk = kv_heads * head_dim
    q3 = qkv[:nq].reshape((1, heads, head_dim))
    k3 = qkv[nq : nq + nk].reshape((1, kv_heads, head_dim))
    v3 = qkv[nq + nk :].reshape((1, kv_heads, head_dim))
    if q_norm.shape[0]:
        qn = qkv[:nq].reshape((-1, q_norm.shape[0]))
        norm.rms_norm(qn, qn, q_norm, eps)
        kn = qkv[nq : nq + nk].reshape((-1, k_norm.shape[0]))
        norm.rms_norm(kn, kn, k_norm, eps)
    if inv_freq.shape[0]:
        rope.rope(q3, positions, inv_freq, neox)
        rope.rope(k3, positions, inv_freq, neox)
    kv_write.kv_write(k_pages, v_pages, k3, v3, slots)
    a3 = attn.reshape((1, heads, head_dim))
    if parallel:
        attention_rows.paged_attention_rows_parallel(a3, q3, k_pages, v_pages, block_tables, q_start, pos_start,
                                                     scale, window)  # fmt: skip
    else:
        attention_rows.paged_attention_rows(a3, q3, k_pages, v_pages, block_tables, q_start, pos_start, scale,
                                            window)  # fmt: skip
    _mm(o.reshape(-1), 0, o.shape[1], attn, o_w, o_kind, o_how)
    _add(o.reshape(-1), o_bias)
    norm.add_rms_norm(h, x, o, ffn_norm, eps)


@njit(cache=True, nogil=True, error_model="numpy")
def mlp_half(o, h, gu, w0, kind0, how0, end0, w1, kind1, how1, gu_bias, act, down_w, down_kind, down_how, down_bias):
    """One token through a gated SiLU MLP: gate | up = h @ W.T into gu (2F,), one fused matmul (end0 = 2F,
    how1 NONE) or two (gu[0:end0], gu[end0:]), plus gu_bias (gate | up biases) where not empty; act (1, F) =
    silu(gate) * up; o (1, C) = act @ Down.T (+ down_bias where not empty)."""
    _mm(gu, 0, end0, h, w0, kind0, how0)
    _mm(gu, end0, gu.shape[0], h, w1, kind1, how1)
    _add(gu, gu_bias)
    f = gu.shape[0] // 2
    activation.silu_mul(act, gu[:f].reshape((1, f)), gu[f:].reshape((1, f)))
    _mm(o.reshape(-1), 0, o.shape[1], act, down_w, down_kind, down_how)
    _add(o.reshape(-1), down_bias)

"""Numpy twins of every kernel: same names and signatures, written to be obviously right.

`MODELC_KERNELS=ref` runs models on these. The linear-algebra references (matmul,
dequantize, ...) are H3's, in ref_linear.py, and are re-exported here.
"""

from __future__ import annotations

import math

import numpy as np

from modelc.kernels.elementwise.rope import rope_inv_freq
from modelc.kernels.reference.ref_linear import dequantize, dequantize_rows, matmul, matmul_qact, quantize_act

__all__ = [
    "dequantize",
    "dequantize_rows",
    "matmul",
    "matmul_qact",
    "quantize_act",
    "rms_norm",
    "add_rms_norm",
    "layer_norm",
    "rope",
    "rope_inv_freq",
    "silu_mul",
    "gelu",
    "gelu_erf",
    "softmax",
    "kv_write",
    "paged_attention",
    "causal_softmax_rows",
]


def _pages_f32(pages: np.ndarray) -> np.ndarray:
    if pages.dtype == np.uint16:
        return pages.view(np.float16).astype(np.float32)
    return pages


def rms_norm(out, x, w, eps):
    x64 = x.astype(np.float64)
    inv = (1.0 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps)).astype(np.float32)
    out[...] = x * inv * w


def add_rms_norm(out, residual, x, w, eps):
    residual += x
    rms_norm(out, residual, w, eps)


def layer_norm(out, x, w, b, eps):
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True)
    var = ((x64 - mean) ** 2).mean(axis=-1, keepdims=True)
    out[...] = ((x64 - mean) / np.sqrt(var + eps)).astype(np.float32) * w + b


def rope(x, positions, inv_freq, neox):
    half = inv_freq.shape[0]
    ang = positions.astype(np.float64)[:, None] * inv_freq[None, :]  # (T, R/2)
    cos = np.cos(ang).astype(np.float32)[:, None, :]  # (T, 1, R/2)
    sin = np.sin(ang).astype(np.float32)[:, None, :]
    if neox:
        a0 = x[:, :, :half].copy()
        a1 = x[:, :, half : 2 * half].copy()
        x[:, :, :half] = a0 * cos - a1 * sin
        x[:, :, half : 2 * half] = a0 * sin + a1 * cos
    else:
        a0 = x[:, :, 0 : 2 * half : 2].copy()
        a1 = x[:, :, 1 : 2 * half : 2].copy()
        x[:, :, 0 : 2 * half : 2] = a0 * cos - a1 * sin
        x[:, :, 1 : 2 * half : 2] = a0 * sin + a1 * cos


def silu_mul(out, gate, up):
    g = gate.astype(np.float32)
    out[...] = g / (np.float32(1.0) + np.exp(-g)) * up


def gelu(out, x):
    v = x.astype(np.float64)
    out[...] = (0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3)))).astype(np.float32)


def gelu_erf(out, x):
    v = x.astype(np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    out[...] = (0.5 * v * (1.0 + erf(v / math.sqrt(2.0)))).astype(np.float32)


def softmax(out, x):
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=-1, keepdims=True))
    out[...] = (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def kv_write(k_pages, v_pages, k, v, slots):
    if isinstance(k_pages, tuple):  # kv_q8.QPages
        from modelc.kernels.reference.ref_kv_q8 import kv_write_q8

        kp, vp = k_pages, v_pages
        return kv_write_q8(kp.data, kp.scales, vp.data, vp.scales, kp.hot_of, kp.hot, vp.hot, k, v, slots)
    Z = k_pages.shape[1]
    keep = slots >= 0
    s = slots[keep]
    if k_pages.dtype == np.uint16:
        kk = k[keep].astype(np.float16).view(np.uint16)
        vv = v[keep].astype(np.float16).view(np.uint16)
    else:
        kk, vv = k[keep], v[keep]
    k_pages[s // Z, s % Z] = kk
    v_pages[s // Z, s % Z] = vv


def paged_attention(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window):
    if isinstance(k_pages, tuple):  # kv_q8.QPages
        from modelc.kernels.reference.ref_kv_q8 import paged_attention_q8

        kp, vp = k_pages, v_pages
        return paged_attention_q8(
            out,
            q,
            kp.data,
            kp.scales,
            vp.data,
            vp.scales,
            kp.hot_of,
            kp.hot,
            vp.hot,
            kp.window,
            block_tables,
            q_start,
            pos_start,
            scale,
            window,
        )
    T, H, D = q.shape
    G = H // k_pages.shape[2]
    for t, keys, vals in attended_rows(k_pages, v_pages, block_tables, q_start, pos_start, window):
        for h in range(H):
            sc = (keys[:, h // G, :].astype(np.float64) @ q[t, h].astype(np.float64)) * scale  # (n,)
            w = np.exp(sc - sc.max())
            out[t, h] = ((w / w.sum()) @ vals[:, h // G, :].astype(np.float64)).astype(np.float32)


def attended_rows(k_pages, v_pages, block_tables, q_start, pos_start, window):
    """Yield (t, keys, vals) per query row t: the (n, K, D) float32 keys and values it attends to (causal, windowed).
    Only those rows are converted from fp16: converting the whole cache per call made a cold start's decode on the
    references read every page of an 8192-token SmolLM2 cache per layer and token (~280 ms of CPU a token)."""
    Z = k_pages.shape[1]
    for s in range(block_tables.shape[0]):
        for t in range(int(q_start[s]), int(q_start[s + 1])):
            pos = int(pos_start[s]) + t - int(q_start[s])
            lo = max(0, pos - window + 1) if window > 0 else 0
            p = np.arange(lo, pos + 1)
            pages = block_tables[s, p // Z]
            yield t, _pages_f32(k_pages[pages, p % Z]), _pages_f32(v_pages[pages, p % Z])


def causal_softmax_rows(s, n, pos0, window):
    R, L = s.shape
    for r in range(R):
        pos = pos0 + r % n
        lo = max(0, pos - window + 1) if window > 0 else 0
        row = s[r, lo : pos + 1].astype(np.float64)
        e = np.exp(row - row.max())
        s[r] = 0.0
        s[r, lo : pos + 1] = (e / e.sum()).astype(np.float32)

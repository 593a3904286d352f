"""numpy twins of the mixture-of-experts kernels (moe_ffn.py): router top-k, and the chosen experts' FFN.

Written to be obviously right, not fast; no numba here. The "ref" KernelSet runs `moe_ffn` (fp32
matmuls); tests compare the numba kernel with `moe_ffn(..., qact=True)` (activations quantized to
int8 blocks as the numba kernels do).
"""

from __future__ import annotations

import numpy as np

from modelc.kernels.layer.moe_weights import MoeExperts
from modelc.kernels.reference import ref_linear

OSS_ALPHA, OSS_LIMIT = 1.702, 7.0
"""gpt-oss's clamped SwiGLU: gate clamped above at LIMIT, up to [-LIMIT, LIMIT], gate * sigmoid(ALPHA gate) * (up + 1)."""


def route(logits: np.ndarray, k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """(experts (T, k) int64, weights (T, k) f32) from router logits (T, E): softmax over all experts, the
    top k, renormalized to sum 1 when `normalize` (then it equals a softmax over the top-k logits)."""
    T, E = logits.shape
    top = np.argpartition(-logits, k - 1, axis=1)[:, :k] if k < E else np.tile(np.arange(E), (T, 1))
    chosen = np.take_along_axis(logits, top, axis=1).astype(np.float64)
    m = logits.max(axis=1, keepdims=True).astype(np.float64)
    e = np.exp(chosen - m)
    if normalize:
        w = e / e.sum(axis=1, keepdims=True)
    else:
        w = e / np.exp(logits.astype(np.float64) - m).sum(axis=1, keepdims=True)
    return top.astype(np.int64), w.astype(np.float32)


def activate(gate: np.ndarray, up: np.ndarray, oss: bool) -> np.ndarray:
    """SiLU(gate) * up, or gpt-oss's clamped SwiGLU; f32."""
    if oss:
        g = np.minimum(gate, np.float32(OSS_LIMIT))
        u = np.clip(up, np.float32(-OSS_LIMIT), np.float32(OSS_LIMIT))
        return g / (np.float32(1.0) + np.exp(-np.float32(OSS_ALPHA) * g)) * (u + np.float32(1.0))
    return gate / (np.float32(1.0) + np.exp(-gate)) * up


def moe_ffn(
    out: np.ndarray,
    x: np.ndarray,
    logits: np.ndarray | None,
    ex: MoeExperts,
    k: int,
    normalize: bool,
    qact: bool = False,
) -> None:
    """out (T, C) = sum over each token's top-k experts (route) of weight * down(act(gate(x), up(x))).

    x (T, C) f32, logits (T, E) f32 router logits (bias included), or None: x @ ex.router.T (+ ex.router_bias)
    in fp32. qact: matmuls with int8-quantized activations (ref_linear.matmul_qact), the numba kernel's numbers.
    """
    mm = ref_linear.matmul_qact if qact else ref_linear.matmul
    if logits is None:
        logits = x.astype(np.float64) @ ex.router.T.astype(np.float64)  # type: ignore[union-attr]
        if ex.router_bias is not None:
            logits += ex.router_bias
        logits = logits.astype(np.float32)
    experts, weights = route(logits, k, normalize)
    out[...] = 0.0
    for t in range(x.shape[0]):
        xt = np.ascontiguousarray(x[t : t + 1])
        for j in range(k):
            e = int(experts[t, j])
            g, u = np.empty((1, ex.ffn), np.float32), np.empty((1, ex.ffn), np.float32)
            mm(g, xt, ex.weight("gate", e))
            mm(u, xt, ex.weight("up", e))
            if ex.gate_bias is not None:
                g += ex.gate_bias[e]
            if ex.up_bias is not None:
                u += ex.up_bias[e]
            a = np.ascontiguousarray(activate(g, u, ex.oss), dtype=np.float32)
            y = np.empty((1, ex.hidden), np.float32)
            mm(y, a, ex.weight("down", e))
            if ex.down_bias is not None:
                y += ex.down_bias[e]
            out[t] += weights[t, j] * y[0]

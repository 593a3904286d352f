"""A mixture-of-experts layer's experts in one numba call: routing, gate+up, activation, down, weighting.

Decode is dispatch-bound when each chosen expert is three Python-level matmuls (a Qwen3-MoE token: 16
layers x 4 experts x 3 plus the attention); `moe_ffn` does a layer's whole expert part in one call: the
router's logits (an F32 router; others come as logits) and top-k softmax per token, the tokens of the batch grouped by expert (each chosen expert's rows
are streamed once per step for all its tokens), the gate and up rows of every chosen expert in one
parallel loop, SiLU(gate) * up (or gpt-oss's clamped SwiGLU) with the expert biases, and the down rows
of every chosen expert in a second parallel loop, each (token, expert) output weighted into `out`. The
row dots are the matmul kernels' own on int8-quantized activations: an expert chosen by one token of
the step runs the T=1 matvec rows (gemm_fused_k._rows for Q4_K / Q5_K / Q6_K / IQ4_XS,
gemm_fused_iq._rows_32 for IQ4_NL / MXFP4); one chosen by several runs gemm_tile's register tiles where
the type has them (Q4_K, Q6_K: each weight group unpacked once per 4 tokens), else the matvec rows per
token (the rows then come from L1/L2 after the first). A projection repacked at load into gemm_r16's
16-row groups (MoeExperts.*_r16, kinds R16_KINDS) runs gemm_r16's group loops instead, for all the
tokens of an expert at once (the float work once per 16 rows, token and block). Where every chosen
expert has one pair (a decode token) and there are at least as many experts as threads, the threads
split the experts instead of their rows: each runs whole experts (gate, up, activation, down) in one
parallel region, streaming each matrix end to end (one Qwen3-MoE layer, T = 1, the 16 layers in turn,
alternating processes: p10 170-204 us against 241-290, median 209-269 against 305-808). The numpy
twin is ref_moe.moe_ffn.

Other expert types, and batches above FUSED_MAX_T tokens where the table puts bigger expert batches on
AMX tiles or BLAS (prefill), go through models/moe.py's per-expert matmuls (MoeFFN.one_call).
"""

from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from modelc.ir import DataType
from modelc.kernels.elementwise.activation import silu_mul
from modelc.kernels.layer.moe_weights import MoeExperts
from modelc.kernels.matmul import gemm_fused_iq, gemm_fused_k, gemm_tile
from modelc.kernels.matmul.gemm_fused_iq import _rows_32
from modelc.kernels.matmul.gemm_fused_k import _rows
from modelc.kernels.matmul.gemm_r16 import _group_q4_k, _group_q4_k_t1, _sums32
from modelc.kernels.matmul.gemm_r16_q6k import _group as _group_q6_k
from modelc.kernels.matmul.gemm_r16_q6k import _group_t1 as _group_q6_k_t1
from modelc.kernels.matmul.gemm_r16_q6k import _offsets16
from modelc.kernels.quant import quant
from modelc.kernels.quant.quant import quantize_act
from modelc.kernels.quant.quant_iq import IQ4_XS
from modelc.kernels.simd.fastexp import exp_f32
from modelc.kernels.simd.qdot import fma_f32x16, hsum_f32x16, load_f32x16, zeros_f32x16

KINDS = gemm_fused_k.KINDS | gemm_fused_iq.KINDS
"""Expert weight kinds the one-call kernel reads (every projection must be one of these)."""

R16_KINDS = frozenset({quant.KIND[DataType.Q4_K], quant.KIND[DataType.Q6_K]})  # gemm_r16 and gemm_r16_q6k
"""Kinds whose gemm_r16 copy (MoeExperts.*_r16) the kernel reads; the loader repacks no other expert kind
for it, so an expert's file pages stay untouched where the copy exists."""

FUSED_MAX_T = 16
"""Up to this many tokens in a forward the experts run here; above, per expert through linear.matmul
(prefill: an expert then has enough tokens for the int8 tiles or BLAS), except where every expert matmul
would run gemm_r16 anyway (models/moe.MoeFFN.one_call), up to R16_MAX_T."""
R16_MAX_T = 128
"""The most tokens moe_ffn takes where the experts' matmuls would all be gemm_r16's (MoeFFN.one_call): its one
call against three matmuls an expert, the 16 layers of a Qwen3-MoE-shaped Q4_K_M model (32 experts, 4 active;
Zen 4, 2 threads, no AMX): 45 vs 97 ms at 32 tokens, 110-146 vs 203-209 at 128, and no better from 256
(178-291 vs 246-270; 526 vs 535 at 512): there each expert has tokens enough to keep the per-expert kernel busy."""

_ROW_STEP = 32  # task rows are a multiple of this (of gemm_tile.ROWS and of gemm_r16's 16-row groups)
TASKS_PER_THREAD = 4
"""The row split's tasks are as long as this leaves them: each streams its rows of one expert end to end,
and short runs restart the hardware prefetcher. 32-row tasks made a T = 8 call of a Qwen3-MoE layer
(~20 experts chosen, 32 x 512 x 1024, Q4_K/Q6_K, 2 threads) p10 1246-1288 us, median 1482-1702; whole
experts (this rule there) 817-884, 1047-1063 (alternating processes)."""
_NONE = np.zeros((0, 0), np.float32)
_NONE1 = np.zeros(0, np.float32)
_NONE3 = np.zeros((0, 0, 0), np.uint8)


def supported(ex: MoeExperts) -> bool:
    """Whether `moe_ffn` reads these experts (kinds, and whole super-blocks for the 256-element kinds)."""
    kinds = [quant.KIND.get(dt) for dt in (ex.gate_dtype, ex.up_dtype, ex.down_dtype)]
    if any(k not in KINDS for k in kinds):
        return False
    return all(cols % (256 if k in gemm_fused_k.KINDS else 32) == 0
               for k, cols in zip(kinds, (ex.hidden, ex.hidden, ex.ffn), strict=True))  # fmt: skip


def moe_ffn(
    out: np.ndarray,
    x: np.ndarray,
    logits: np.ndarray | None,
    ex: MoeExperts,
    k: int,
    normalize: bool,
    qact: bool = True,
) -> None:
    """out (T, C) f32 = the experts' part of a MoE layer (ref_moe.moe_ffn's contract; `supported(ex)` must hold).

    x (T, C) f32 C-contiguous; logits (T, E) f32 router logits, or None: computed here from ex.router (fp32).
    Activations are always quantized (`qact` is the twin's switch). Threads: the caller's numba thread
    count, split statically (see the note below).
    """
    if logits is None:
        head = (_NONE, *router_args(ex))
    else:
        head = (np.ascontiguousarray(logits, dtype=np.float32), _NONE, _NONE1)
    # NOTE: numba's static split, not linear.chunked's dynamic chunks: a decode step's expert matmuls are
    # a few hundred microseconds, and the chunked schedule made this call 2x slower (192 vs 96 us, one
    # layer of a 32-expert Qwen3-MoE, 2 threads, hot; decode 14.5-15.9 -> 12.4-12.7 ms per token)
    _moe_ffn(out, np.ascontiguousarray(x, dtype=np.float32), *head, *expert_args(ex, k, normalize), get_num_threads())


def router_args(ex: MoeExperts) -> tuple[np.ndarray, np.ndarray]:
    """_moe_ffn's (router, router bias) for computing the router logits in the kernel (ex.router: F32)."""
    return ex.router, _NONE1 if ex.router_bias is None else ex.router_bias


def expert_args(ex: MoeExperts, k: int, normalize: bool) -> tuple:
    """_moe_ffn's arguments from k to the repacked experts (between the router's and the thread count): what
    moe_ffn passes, also made once per layer by models/llama_decode.py for its one-token steps."""
    kg, ku, kd = (quant.KIND[dt] for dt in (ex.gate_dtype, ex.up_dtype, ex.down_dtype))
    return (k, normalize, ex.gate, ex.up, ex.down, kg, ku, kd,
            _NONE if ex.gate_bias is None else ex.gate_bias, _NONE if ex.up_bias is None else ex.up_bias,
            _NONE if ex.down_bias is None else ex.down_bias, ex.oss,
            *(_NONE3 if r is None else r for r in (ex.gate_r16, ex.up_r16, ex.down_r16)))  # fmt: skip


@njit(cache=True, nogil=True)
def _route(logits, k, normalize, sel, wts):
    """sel (T, k) int64 / wts (T, k) f32: ref_moe.route (top k of a softmax over all experts, in float64)."""
    T, E = logits.shape
    taken = np.zeros(E, np.bool_)
    for t in range(T):
        taken[:] = False
        m = np.float64(logits[t, 0])
        for e in range(1, E):
            m = max(m, np.float64(logits[t, e]))
        for j in range(k):
            best = -1
            for e in range(E):
                if not taken[e] and (best < 0 or logits[t, e] > logits[t, best]):
                    best = e
            taken[best] = True
            sel[t, j] = best
        den = 0.0
        if normalize:
            for j in range(k):
                den += np.exp(np.float64(logits[t, sel[t, j]]) - m)
        else:
            for e in range(E):
                den += np.exp(np.float64(logits[t, e]) - m)
        for j in range(k):
            wts[t, j] = np.float32(np.exp(np.float64(logits[t, sel[t, j]]) - m) / den)


@njit(cache=True, nogil=True)
def _dot_rows(kind, out, w, xq, xd, xm, xs, r0, r1):
    """out[0, r] = row r of w (N, row_bytes) . one quantized activation row, for r0 <= r < r1 (a T=1 matvec's rows)."""
    c = xq.shape[0]
    nbytes = w.shape[1]
    wf = w.reshape(-1)
    if kind == 7 or kind == 8 or kind == 9 or kind == IQ4_XS:  # Q4_K, Q5_K, Q6_K (quant.KIND), IQ4_XS
        _rows(kind, out, wf, nbytes, xq, xd, xm, xs, c // 256, r0, r1)
    else:
        _rows_32(kind, out, wf, nbytes, xq, xd, xm, c // 32, r0, r1)


@njit(cache=True, nogil=True)
def _tile_rows(kind, out, w, xq, xs, dxl, r0, r1):
    """out[:, r] for r0 <= r < r1 (r0 a multiple of 4, r1 too or = N): rows of w (N, row_bytes) Q4_K (7) or
    Q6_K (9) x every activation row of xq (t, C) int8 / xs (t, C/16) / dxl (t, C/4) (gemm_tile.prep_act)."""
    n, nbytes = w.shape
    t, cp = xq.shape
    ini = np.empty(16, np.int32)  # unused by the K-quant tiles
    wf, xqf, xsf, dxf = w.reshape(-1), xq.reshape(-1), xs.reshape(-1), dxl.reshape(-1)
    if kind == 7:
        gemm_tile._chunk_q4_k(out, wf, r0, r1, n, nbytes, cp // 32, xqf, xsf, ini, dxf, t, cp)
    else:
        gemm_tile._chunk_q6_k(out, wf, r0, r1, n, nbytes, cp // 32, xqf, xsf, ini, dxf, t, cp)


@njit(cache=True, nogil=True)
def _group_rows(kind, out, w, xq, xd, xm, xs, dxl, q0, q1, r0, r1):
    """out[q, r0:r1] = rows r0..r1 of w . activation row q, for the pairs q0 <= q < q1 of one expert."""
    if q1 - q0 >= 2 and (kind == 7 or kind == 9):
        _tile_rows(kind, out[q0:q1], w, xq[q0:q1], xs[q0:q1], dxl[q0:q1], r0, r1)
        return
    for q in range(q0, q1):
        _dot_rows(kind, out[q : q + 1], w, xq[q], xd[q], xm[q], xs[q], r0, r1)


@njit(cache=True, nogil=True)
def _r16_rows(kind, out, rw, xq, xd, xm, so, q0, q1, r0, r1):
    """out[q, r0:r1] = rows r0..r1 (multiples of 16) of one expert's weight . activation row q, for the pairs
    q0 <= q < q1: the weight repacked by gemm_r16 (rw (N/16, ...) uint8, a kind in R16_KINDS), its groups'
    loops over all the pairs at once (as gemm_r16's whole-matrix kernels run them). so: gemm_r16_q6k's
    (P, C/16) code-sum offsets, for Q6_K."""
    t, c = q1 - q0, xq.shape[1]
    o, xqf, d, m, rf = out[q0:q1], xq[q0:q1].reshape(-1), xd[q0:q1], xm[q0:q1], rw.reshape(-1)
    if kind == 9:  # Q6_K
        if t == 1:  # one group at a time: in pairs (gemm_r16_parts.pairs_t1) whole experts streamed 6-9% slower
            for gi in range(r0 // 16, r1 // 16):
                _group_q6_k_t1(o, xqf, d, so[q0:q1], rf, gi, c // 256)
            return
        acc6 = np.empty(t * 16, np.float32)
        for gi in range(r0 // 16, r1 // 16):
            _group_q6_k(o, xqf, d, so[q0:q1], rf, gi, c // 256, t, c, acc6)
        return
    if t == 1:
        for gi in range(r0 // 16, r1 // 16):
            _group_q4_k_t1(o, xqf, d, m, rf, gi, c // 256)
        return
    acc = np.empty(t * 16, np.float32)
    fs = np.empty(256, np.float32)
    for gi in range(r0 // 16, r1 // 16):
        _group_q4_k(o, xqf, d, m, rf, gi, c // 256, t, c, acc, fs)


@njit(cache=True, nogil=True)
def _rows_of(kind, out, rw, w, e, xq, xd, xm, xs, xdl, so, q0, q1, r0, r1):
    """out[q, r0:r1] = rows r0..r1 of expert e's projection . activation row q, for q0 <= q < q1: from its
    gemm_r16 copy rw[e] where the loader made one (rw has experts), else from the stored rows w[e]."""
    if rw.shape[0]:
        _r16_rows(kind, out, rw[e], xq, xd, xm, so, q0, q1, r0, r1)
    else:
        _group_rows(kind, out, w[e], xq, xd, xm, xs, xdl, q0, q1, r0, r1)


@njit(cache=True, nogil=True)
def _quantized(a, tiles):
    """quant.quantize_act of a (P, C), its per-32 sums, and gemm_tile.prep_act's lane scales when `tiles`."""
    p, c = a.shape
    aq = np.empty((p, c), np.int8)
    ad = np.empty((p, c // 32), np.float32)
    a_s = np.empty((p, c // 16), np.float32)
    quantize_act(aq, ad, a_s, a)
    dxl = np.empty((p if tiles else 0, c // 4), np.float32)
    if tiles:
        gemm_tile.prep_act(np.empty((1, 16), np.int32), dxl, aq, ad, 0)
    return aq, ad, _sums32(a_s), a_s, dxl


@njit(cache=True, nogil=True)
def _router_logits(x, router, rbias):
    """(T, E) f32 = x (T, C) @ router (E, C).T (+ rbias (E,) when it has elements): 16-lane f32 dots."""
    T, C = x.shape
    E = router.shape[0]
    logits = np.empty((T, E), np.float32)
    xf, rf = x.reshape(-1), router.reshape(-1)
    c16 = C - C % 16
    for t in range(T):
        for e in range(E):
            acc = zeros_f32x16()
            for c in range(0, c16, 16):
                acc = fma_f32x16(acc, load_f32x16(xf, t * C + c), load_f32x16(rf, e * C + c))
            v = hsum_f32x16(acc)
            for c in range(c16, C):
                v += xf[t * C + c] * rf[e * C + c]
            logits[t, e] = v + rbias[e] if rbias.shape[0] else v
    return logits


@njit(cache=True, nogil=True, error_model="numpy")
def _activate(a, g, u, pe, gbias, ubias, oss):
    """a (P, F) = SiLU(g) * u, or gpt-oss's clamped SwiGLU, with pair q's expert pe[q]'s biases. Its own
    function for error_model="numpy": the default's zero-division check keeps the SiLU loop scalar (the
    loop inside _moe_ffn took ~170 us of a T = 8 call, 32 pairs x 512)."""
    P, F = g.shape
    if not oss and gbias.shape[0] == 0 and ubias.shape[0] == 0:
        silu_mul(a, g, u)
        return
    for q in range(P):
        e = pe[q]
        for f in range(F):
            gv, uv = g[q, f], u[q, f]
            if gbias.shape[0]:
                gv += gbias[e, f]
            if ubias.shape[0]:
                uv += ubias[e, f]
            if oss:
                gv = min(gv, np.float32(7.0))
                uv = min(max(uv, np.float32(-7.0)), np.float32(7.0))
                a[q, f] = gv / (np.float32(1.0) + np.exp(-np.float32(1.702) * gv)) * (uv + np.float32(1.0))
            else:
                a[q, f] = gv / (np.float32(1.0) + exp_f32(-gv)) * uv


@njit(cache=True, nogil=True, parallel=True)
def _moe_ffn(
    out,
    x,
    logits,
    router,
    rbias,
    k,
    normalize,
    gate,
    up,
    down,
    kg,
    ku,
    kd,
    gbias,
    ubias,
    dbias,
    oss,
    gr,
    ur,
    dr,
    nthreads,
):
    T, C = x.shape
    E, F = gate.shape[0], gate.shape[1]
    P = T * k
    if logits.shape[0] == 0:  # the router (E, C) F32 here
        logits = _router_logits(x, router, rbias)
    sel = np.empty((T, k), np.int64)
    wts = np.empty((T, k), np.float32)
    _route(logits, k, normalize, sel, wts)
    # pairs (token, expert) grouped by expert: order[q] = t * k + j; group g is q = gs[g] .. gs[g + 1] - 1
    counts = np.zeros(E + 1, np.int64)
    for p in range(P):
        counts[sel[p // k, p % k] + 1] += 1
    for e in range(E):
        counts[e + 1] += counts[e]
    order = np.empty(P, np.int64)
    fill = counts[:E].copy()
    for p in range(P):
        e = sel[p // k, p % k]
        order[fill[e]] = p
        fill[e] += 1
    ue = np.empty(E, np.int64)
    gs = np.empty(E + 1, np.int64)
    ne = 0
    shared = False  # some expert has 2+ tokens
    for e in range(E):
        if counts[e + 1] > counts[e]:
            ue[ne] = e
            gs[ne] = counts[e]
            shared = shared or counts[e + 1] - counts[e] >= 2
            ne += 1
    gs[ne] = P
    xp = np.empty((P, C), np.float32)  # row q: the token of pair order[q]
    for q in range(P):
        xp[q] = x[order[q] // k]
    tg, tu = shared and gr.shape[0] == 0 and (kg == 7 or kg == 9), shared and ur.shape[0] == 0 and (ku == 7 or ku == 9)
    xq, xd, xm, xs, xdl = _quantized(xp, tg or tu)
    xso = _offsets16(xq) if (gr.shape[0] and kg == 9) or (ur.shape[0] and ku == 9) else np.zeros((0, 0), np.int32)
    pe = np.empty(P, np.int64)  # the expert of pair q
    for q in range(P):
        pe[q] = sel[order[q] // k, order[q] % k]
    y = np.empty((P, C), np.float32)
    if not shared and ne >= nthreads:  # (numba's get_num_threads() in here would make it uncachable)
        # one pair per expert (a decode token): each thread runs whole experts, in one parallel region
        for gi in prange(ne):
            q = gs[gi]
            _one_expert(y[q : q + 1], ue[gi], xq[q : q + 1], xd[q : q + 1], xm[q : q + 1], xs[q : q + 1],
                        xdl[q : q + 1], xso[q : q + 1], gate, up, down, gr, ur, dr, kg, ku, kd, gbias, ubias, oss,
                        pe[q : q + 1])  # fmt: skip
        _weigh(out, y, order, sel, wts, k, dbias)
        return
    g = np.empty((P, F), np.float32)
    u = np.empty((P, F), np.float32)
    rows_f = _task_rows(F, ne, nthreads)
    nf = (F + rows_f - 1) // rows_f
    for task in prange(ne * nf):
        gi, j = task // nf, task % nf
        e = ue[gi]
        r0 = j * rows_f
        r1 = min(F, r0 + rows_f)
        _rows_of(kg, g, gr, gate, e, xq, xd, xm, xs, xdl, xso, gs[gi], gs[gi + 1], r0, r1)
        _rows_of(ku, u, ur, up, e, xq, xd, xm, xs, xdl, xso, gs[gi], gs[gi + 1], r0, r1)
    a = np.empty((P, F), np.float32)
    _activate(a, g, u, pe, gbias, ubias, oss)
    aq, ad, am, a_s, adl = _quantized(a, shared and dr.shape[0] == 0 and (kd == 7 or kd == 9))
    aso = _offsets16(aq) if dr.shape[0] and kd == 9 else np.zeros((0, 0), np.int32)
    rows_c = _task_rows(C, ne, nthreads)
    nc = (C + rows_c - 1) // rows_c
    for task in prange(ne * nc):
        gi, j = task // nc, task % nc
        r0 = j * rows_c
        r1 = min(C, r0 + rows_c)
        _rows_of(kd, y, dr, down, ue[gi], aq, ad, am, a_s, adl, aso, gs[gi], gs[gi + 1], r0, r1)
    _weigh(out, y, order, sel, wts, k, dbias)


@njit(cache=True, nogil=True)
def _task_rows(n, ne, nthreads):
    """Rows per task of a projection of n rows in each of ne experts: at least TASKS_PER_THREAD tasks per
    thread where the rows allow, else as long as possible (a whole expert's n at most)."""
    r = ne * n // (nthreads * TASKS_PER_THREAD) // _ROW_STEP * _ROW_STEP
    return max(_ROW_STEP, min(r, (n + _ROW_STEP - 1) // _ROW_STEP * _ROW_STEP))


@njit(cache=True, nogil=True)
def _one_expert(y, e, xq, xd, xm, xs, xdl, xso, gate, up, down, gr, ur, dr, kg, ku, kd, gbias, ubias, oss, pe):
    """y (1, C) = expert e's output for one pair (its activation row xq (1, C)...; pe (1,): e): gate and up
    rows, the activation, its quantization and the down rows, on the calling thread (the matvec row
    loops, as _moe_ffn's row tasks run them for a single pair: the same values)."""
    F, C = gate.shape[1], y.shape[1]
    g = np.empty((1, F), np.float32)
    u = np.empty((1, F), np.float32)
    _rows_of(kg, g, gr, gate, e, xq, xd, xm, xs, xdl, xso, 0, 1, 0, F)
    _rows_of(ku, u, ur, up, e, xq, xd, xm, xs, xdl, xso, 0, 1, 0, F)
    a = np.empty((1, F), np.float32)
    _activate(a, g, u, pe, gbias, ubias, oss)
    aq, ad, am, a_s, adl = _quantized(a, False)
    aso = _offsets16(aq) if dr.shape[0] and kd == 9 else np.zeros((0, 0), np.int32)
    _rows_of(kd, y, dr, down, e, aq, ad, am, a_s, adl, aso, 0, 1, 0, C)


@njit(cache=True, nogil=True)
def _weigh(out, y, order, sel, wts, k, dbias):
    """out (T, C) = sum over each token's pairs q of its weight * (y[q] + the expert's down bias)."""
    C = out.shape[1]
    out[:, :] = 0.0
    for q in range(y.shape[0]):
        p = order[q]
        t, e, wt = p // k, sel[p // k, p % k], wts[p // k, p % k]
        for c in range(C):
            v = y[q, c]
            if dbias.shape[0]:
                v += dbias[e, c]
            out[t, c] += wt * v

"""A decoder layer at decode (every sequence of the batch one token: a single stream, or T streams in lockstep)
in two numba functions, the attention half and the gated-MLP half, called by decode_step.py's entries for a run
of layers, where the forward made ~12 kernel calls from Python a layer, each with its Python glue. The kernels are the ones the forward calls (norm,
gemm_r16's entry of the weight's kind (F32_OF_KIND) or gemm_fused_k.qmatvec_k, rope, kv_write, attention_rows, activation), in the same order on
the same arrays, so every number is the same (tests/models/test_decode_layer.py compares logits bit for bit).
models/llama_decode.py decides which layers qualify, and up to how many tokens.

Why: a decode step runs its Python between kernels that stream megabytes, so that Python runs with cold
caches, several times its hot cost (TinyLlama Q4_K_M: ~50 us of glue a layer on top of ~12 calls of 3-9 us;
at 16 streams ~2.3 ms of a ~70 ms step).

The matmuls run under whatever numba parallel chunk the caller set (models/llama_decode.py: the static split).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import njit, types
from numba.extending import overload

from modelc.kernels.attention import attention_rows, attention_rows_q8, kv_q8, kv_write
from modelc.kernels.elementwise import activation, norm, rope
from modelc.kernels.matmul import gemm_fused_k, gemm_r16
from modelc.kernels.quant import quant
from modelc.kernels.runtime import packs

NO_W = np.zeros((0, 0), np.uint8)  # an absent matmul's weight (its how is NONE)
NO_F32 = np.zeros(0, np.float32)  # an absent norm weight
NO_F64 = np.zeros(0, np.float64)  # no RoPE in this layer
NO_SCALES = np.zeros((1, 1, 1, 1, 1), np.uint16)  # the KV scales where the pages are float32 / fp16, not q8_0


NONE, R16, MATVEC_K = 0, 1, 2
"""How a matmul runs (its `how`): not at all, gemm_r16's repacked kernel (w: the repacked array), or
gemm_fused_k's one-token kernel on the file's blocks (w: (N, row_bytes); Q5_K and the other K-quants or
IQ4_XS where not repacked): plan.Path.R16 and Path.MATVEC_K, the two decode paths linear.matmul takes for
these weights at T = 1."""


ALL_KINDS = sorted(["k", *(f"r16_{int(kind)}" for kind in gemm_r16.KERNEL_OF_KIND)])
"""kinds_token's fields where a kernel pack applies: every path and kind, so one compile of the decode entries
serves every GGUF type mix (the pack's build compiles it once per level)."""


def kinds_token(pairs) -> np.ndarray:
    """The matmuls of a run of decode layers, as the argument its kernels specialize on: a zero-size array whose
    record dtype has a field per path and weight kind among `pairs` ((how, kind)): "r16_<kind>" for gemm_r16's
    kernel of that kind, "k" for gemm_fused_k's one-token kernel (one entry for its kinds); how NONE adds none.

    Why: the kinds come from the table at run time, and a switch over every kind compiles every kind's kernel
    (SmolLM2-135M, Q4_1 and Q8_0: 42 of the decode path's 89 s of compiling went to the r16 kernels of kinds it
    does not have). numba compiles decode_step's entries once per token type (its field names), each with the
    branches of its own kinds only (_matmul's overload); numba's cache keeps one file per type."""
    names = sorted({"k" if how == MATVEC_K else f"r16_{int(kind)}" for how, kind in pairs if how != NONE})
    if packs.ACTIVE is not None and names:  # a shipped pack holds one token: every kind (runtime/packs.py)
        names = ALL_KINDS
    return np.zeros(0, np.dtype([(n, np.uint8) for n in names or ["none"]]))


def _matmul(part, x, w, kind, how, kinds):
    """part = x @ W.T on path `how` (R16 or MATVEC_K), W of `kind`, which `kinds` (kinds_token) must name; this
    is the Python form of the overload below, which numba compiles in its place."""
    if how == R16:
        gemm_r16.F32_OF_KIND[kind](part, x, w)
    elif how == MATVEC_K:
        xq, xd, xs = quant.quantized(x)
        gemm_fused_k.qmatvec_k(part, xq, xd, xs, w, kind)


@njit(nogil=True)
def _not_in_kinds(part, x, w, kind, how):
    raise ValueError("decode_layer: a matmul whose path and kind its run's kinds_token does not name")


@functools.cache
def _chain(names: tuple[str, ...]):
    """A jitted (part, x, w, kind, how) that runs the matmul of the first of `names` (kinds_token's fields) that
    matches (how, kind): only the kernels of those names are compiled."""
    if not names:
        return _not_in_kinds
    rest = _chain(names[1:])
    if names[0] == "k":

        def pick(part, x, w, kind, how):
            if how == MATVEC_K:
                xq, xd, xs = quant.quantized(x)
                gemm_fused_k.qmatvec_k(part, xq, xd, xs, w, kind)
            else:
                rest(part, x, w, kind, how)

    else:
        k = int(names[0].removeprefix("r16_"))
        f = gemm_r16.KERNEL_OF_KIND[k]

        def pick(part, x, w, kind, how):
            if how == R16 and kind == k:
                f(part, x, w)
            else:
                rest(part, x, w, kind, how)

    # Named for its whole chain: numba names a function's machine code after its __qualname__, a per-process
    # counter and its argument types, and every chain's pick takes the same types. Compiled into the cached
    # entries of two processes (the cold start's helpers, test workers), two chains' picks could get one symbol
    # (same counter value); linked code is weak (linkonce_odr), so a process that loaded both entries ran one
    # chain's pick for the other (a wrong kernel, or _not_in_kinds). A name per chain cannot collide that way.
    # The qualname keeps "<locals>": warm_list.snapshot() knows a function local to another by it (compiled only
    # into its callers, needing no warm-list entry); without it no decode model would keep a warm list.
    pick.__name__ = "pick_" + "_".join(names)
    pick.__qualname__ = "_chain.<locals>." + pick.__name__
    return njit(nogil=True)(pick)  # compiled into decode_step's cached entries, not cached on its own


@overload(_matmul)
def _matmul_of_kinds(part, x, w, kind, how, kinds):
    pick = _chain(tuple(kinds.dtype.fields))

    def impl(part, x, w, kind, how, kinds):
        pick(part, x, w, kind, how)

    return impl


@njit(cache=True, nogil=True)
def _mm(out, lo, hi, x, w, kind, how, kinds):
    """out[:, lo:hi] = x @ W.T (x (T, C), out (T, N) C-contiguous), as linear.matmul computes it on the path
    `how` (MATVEC_K: T = 1 only), W of `kind`; kinds: the run's kinds_token. Columns lo:hi of several rows go
    through a buffer, as the forward copies a fused run's parts out of its output. The callers pass lo = 0 as
    np.int64(0): numba compiles a call again for a literal int argument."""
    if how == NONE:
        return
    T = x.shape[0]
    whole = lo == 0 and hi == out.shape[1]
    if whole:
        part = out
    elif T == 1:
        part = out.reshape(-1)[lo:hi].reshape((1, hi - lo))
    else:
        part = np.empty((T, hi - lo), np.float32)
    _matmul(part, x, w, kind, how, kinds)
    if T > 1 and not whole:
        _columns(out[:, lo:hi], part, 0)


@njit(cache=True, nogil=True)
def _add(v, bias):
    """v (T, N) += bias (N,) (float32, as numpy's +=) where bias is not empty."""
    if bias.shape[0] == 0:
        return
    for t in range(v.shape[0]):
        for i in range(bias.shape[0]):
            v[t, i] += bias[i]


@njit(cache=True, nogil=True, inline="always")
def _columns(dst, src, lo):
    """dst (T, n) = src[:, lo:lo + n], in a loop: an array slice assignment makes numba compile its shape-mismatch
    message (~3 CPU-s of the decode path)."""
    for t in range(dst.shape[0]):
        for i in range(dst.shape[1]):
            dst[t, i] = src[t, lo + i]


@njit(cache=True, nogil=True, error_model="numpy")
def attention_half(
    x, o, h, first, attn_norm, eps,
    qkv, w0, kind0, how0, end0, w1, kind1, how1, end1, w2, kind2, how2, qkv_bias, q, k, v,
    heads, kv_heads, head_dim, q_norm, k_norm, inv_freq, neox, positions,
    k_pages, v_pages, k_scales, v_scales, slots, block_tables, q_start, pos_start, scale, window, parallel,
    attn, o_w, o_kind, o_how, o_bias, ffn_norm, kinds,
):  # fmt: skip
    """T rows, each the one token of its sequence, through a layer's attention half, as LlamaModel.forward does it:

    x (T, C) += o (the previous layer's output; not for the first layer), h = rms_norm(x, attn_norm);
    q | k | v = h @ W.T into qkv (T, nq + 2 nk): up to three matmuls, each a run of consecutive projections
    (w_i, kind_i, how_i; how NONE: no matmul) writing columns [0:end0], [end0:end1], [end1:], plus qkv_bias
    (q | k | v biases) where not empty; at T = 1 q, k, v are qkv's column ranges, else copied into q (T, nq),
    k, v (T, nk);
    per-head q/k RMSNorm where q_norm / k_norm are not empty (per head (D,) or full width (H*D,));
    RoPE where inv_freq is not empty; K/V written at slots and attention into attn (T, H*D) (write_attend: float32 /
    fp16 pages, or q8_0 ones with their scales k_scales / v_scales; `parallel`: the threaded kernel); o (T, C) =
    attn @ O.T (+ o_bias where not empty); x += o, h = rms_norm(x, ffn_norm). kinds: kinds_token of the layer's
    matmuls (the kernels it is compiled with).
    """
    if first:
        norm.rms_norm(h, x, attn_norm, eps)
    else:
        norm.add_rms_norm(h, x, o, attn_norm, eps)
    T = x.shape[0]
    _mm(qkv, np.int64(0), end0, h, w0, kind0, how0, kinds)
    _mm(qkv, end0, end1, h, w1, kind1, how1, kinds)
    _mm(qkv, end1, qkv.shape[1], h, w2, kind2, how2, kinds)
    _add(qkv, qkv_bias)
    nq = heads * head_dim
    nk = kv_heads * head_dim
    if T == 1:  # one row: its column ranges are contiguous
        flat = qkv.reshape(-1)
        q = flat[:nq].reshape((1, nq))
        k = flat[nq : nq + nk].reshape((1, nk))
        v = flat[nq + nk :].reshape((1, nk))
    else:
        _columns(q, qkv, 0)
        _columns(k, qkv, nq)
        _columns(v, qkv, nq + nk)
    q3 = q.reshape((T, heads, head_dim))
    k3 = k.reshape((T, kv_heads, head_dim))
    v3 = v.reshape((T, kv_heads, head_dim))
    if q_norm.shape[0]:
        qn = q.reshape((-1, q_norm.shape[0]))
        norm.rms_norm(qn, qn, q_norm, eps)
        kn = k.reshape((-1, k_norm.shape[0]))
        norm.rms_norm(kn, kn, k_norm, eps)
    if inv_freq.shape[0]:
        rope.rope(q3, positions, inv_freq, neox)
        rope.rope(k3, positions, inv_freq, neox)
    a3 = attn.reshape((T, heads, head_dim))
    write_attend(k_pages, v_pages, k_scales, v_scales, k3, v3, slots, a3, q3, block_tables, q_start, pos_start,
                 scale, window, parallel)  # fmt: skip
    _mm(o, np.int64(0), o.shape[1], attn, o_w, o_kind, o_how, kinds)
    _add(o, o_bias)
    norm.add_rms_norm(h, x, o, ffn_norm, eps)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _write_attend_q8(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start, scale,
                     window, parallel):  # fmt: skip
    kv_q8.kv_write_q8_plain(k_pages, k_scales, v_pages, v_scales, k, v, slots)
    if parallel:
        attention_rows_q8.paged_attention_rows_q8_parallel(out, q, k_pages, k_scales, v_pages, v_scales, block_tables,
                                                           q_start, pos_start, scale, window)  # fmt: skip
    else:
        attention_rows_q8.paged_attention_rows_q8(out, q, k_pages, k_scales, v_pages, v_scales, block_tables, q_start,
                                                  pos_start, scale, window)  # fmt: skip


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _write_attend_dense(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start,
                        scale, window, parallel):  # fmt: skip
    kv_write.kv_write(k_pages, v_pages, k, v, slots)
    if parallel:
        attention_rows.paged_attention_rows_parallel(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale,
                                                     window)  # fmt: skip
    else:
        attention_rows.paged_attention_rows(out, q, k_pages, v_pages, block_tables, q_start, pos_start, scale, window)


def write_attend(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start, scale,
                 window, parallel):  # fmt: skip
    """k (T, K, D), v written at slots, then out (T, H, D) = paged attention of q (T, H, D), as the forward's general
    path does both (kv_write.write_pages, attention._numba_attention) for the pages' type: float32 / fp16 (uint16)
    pages (P, Z, K, D) through kv_write and attention_rows (k_scales, v_scales unread), or a plain q8_0 cache's int8
    pages with their fp16 block scales (P, Z, K, NB) through kv_q8 and attention_rows_q8. `parallel`: the threaded
    attention kernel. Inside numba the pages' element type picks the kernels when the caller compiles (the
    overload below), so an fp16 cache's decode layers never compile the q8_0 ones."""
    fn = _write_attend_q8 if k_pages.dtype == np.int8 else _write_attend_dense
    fn(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start, scale, window,
       parallel)  # fmt: skip


@overload(write_attend, inline="always")
def _write_attend_impl(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start,
                       scale, window, parallel):  # fmt: skip
    # impls that call the module's dispatchers: returning their py_func would make numba build a second dispatcher
    # of the same name, which warm_list.snapshot() cannot find again by module and name (no warm list is kept)
    if k_pages.dtype == types.int8:

        def impl_q8(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start,
                    scale, window, parallel):  # fmt: skip
            _write_attend_q8(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start,
                             pos_start, scale, window, parallel)  # fmt: skip

        return impl_q8
    if k_pages.dtype in (types.float32, types.uint16):

        def impl_dense(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start, pos_start,
                       scale, window, parallel):  # fmt: skip
            _write_attend_dense(k_pages, v_pages, k_scales, v_scales, k, v, slots, out, q, block_tables, q_start,
                                pos_start, scale, window, parallel)  # fmt: skip

        return impl_dense
    return None


@njit(cache=True, nogil=True, error_model="numpy")
def mlp_half(
    o, h, gu, w0, kind0, how0, end0, w1, kind1, how1, gu_bias, act, down_w, down_kind, down_how, down_bias, kinds
):  # fmt: skip
    """T one-token rows through a gated SiLU MLP: gate | up = h @ W.T into gu (T, 2F), one fused matmul
    (end0 = 2F, how1 NONE) or two (columns [0:end0], [end0:]), plus gu_bias (gate | up biases) where not
    empty; act (T, F) = silu(gate) * up, row by row (a row's gate and up are contiguous); o (T, C) =
    act @ Down.T (+ down_bias where not empty); kinds: kinds_token of these matmuls."""
    _mm(gu, np.int64(0), end0, h, w0, kind0, how0, kinds)
    _mm(gu, end0, gu.shape[1], h, w1, kind1, how1, kinds)
    _add(gu, gu_bias)
    f = gu.shape[1] // 2
    flat, act_flat = gu.reshape(-1), act.reshape(-1)
    for t in range(gu.shape[0]):
        row = flat[2 * f * t : 2 * f * (t + 1)]
        activation.silu_mul(act_flat[f * t : f * (t + 1)].reshape((1, f)), row[:f].reshape((1, f)),
                            row[f:].reshape((1, f)))  # fmt: skip
    _mm(o, np.int64(0), o.shape[1], act, down_w, down_kind, down_how, kinds)
    _add(o, down_bias)

"""Pack-time quantization of IR tensors: f16, bf16, GGML blocks (q8_0..q6_k) and per-row int8/int4.

Everything is vectorized numpy over all blocks of a chunk of rows (Python loops only run over
positions inside a block, so float32 sums accumulate in llama.cpp's order). The GGML types are
BIT-IDENTICAL to `gguf.quants.quantize` (q4_0, q4_1, q5_0, q5_1, q8_0) and follow llama.cpp's
reference quantizers quantize_row_q4_K_ref / quantize_row_q6_K_ref (which gguf.quants lacks); iq4_nl
is llama.cpp's quantize_iq4_nl without an importance matrix (kernels/quant/quant_iq4nl.py).
Over 300 lines because the two K-quant searches are long and belong together; numba only via
kernels/quant/quant_iq4nl.py (IQ4_NL).

int8 / int4 (symmetric, per output channel = per row):
  scale[r] = max|W[r]| / 127 (int8) or / 7 (int4), stored F32 as NAME@scale, shape (rows,);
  q = round-half-even(W / scale) clipped to [-127, 127] or [-7, 7] (int4 never uses -8);
  int4 packs two signed nibbles per byte, low nibble first.
Rows whose length is not a multiple of the block size fall back (see `effective_kind`):
  q4_k/q6_k -> q8_0 when the row is a multiple of 32, else f16; q4_0..q8_0, iq4_nl -> f16; int4 -> int8 for odd rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from modelc.errors import FormatError, UnsupportedError
from modelc.ir import SCALE_SUFFIX, DataType, TensorData

KINDS = ("f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q6_k", "iq4_nl", "int8", "int4")
_ALIASES = {"fp16": "f16", "float16": "f16", "bfloat16": "bf16", "i8": "int8", "i4": "int4"}
_GGML = {
    "q8_0": DataType.Q8_0,
    "q4_0": DataType.Q4_0,
    "q4_1": DataType.Q4_1,
    "q5_0": DataType.Q5_0,
    "q5_1": DataType.Q5_1,
    "q4_k": DataType.Q4_K,
    "q6_k": DataType.Q6_K,
    "iq4_nl": DataType.IQ4_NL,
}
_FLOAT_INPUTS = (DataType.F32, DataType.F16, DataType.BF16, DataType.F64)
CHUNK_ELEMENTS = 1 << 17  # rows per chunk ~ this many elements: scratch stays in cache (1.7x faster than 1M)
GROUP_MAX_EPS = np.float32(1e-15)


def normalize_kind(kind: str) -> str:
    k = _ALIASES.get(kind.lower(), kind.lower())
    if k not in KINDS:
        raise UnsupportedError(f"unknown quantization {kind!r}; use one of {', '.join(KINDS)}")
    return k


def effective_kind(kind: str, cols: int) -> str:
    """The kind actually used for rows of `cols` elements (block types need whole blocks)."""
    k = normalize_kind(kind)
    if k == "int4" and cols % 2:
        return "int8"  # the IR's I4 holds whole bytes per row
    dt = _GGML.get(k)
    if dt is None or cols % dt.block_size == 0:
        return k
    if dt.block_size == 256 and cols % 32 == 0:
        return "q8_0"
    return "f16"


def should_quantize(
    name: str,
    t: TensorData,
    kind: str | None = None,
    *,
    quantize_embeddings: bool = False,
    quantize_output: bool = False,
) -> bool:
    """Whether `name` is a weight matrix worth quantizing: 2-D+ float, not a norm/bias/scale.

    Embedding tables and the output head are opt-in (they are gathered / most sensitive).
    Already-quantized tensors are left alone; so are tensors too small to hold one block.
    """
    if t.dtype not in _FLOAT_INPUTS or len(t.shape) < 2 or t.num_elements == 0 or name.endswith(SCALE_SUFFIX):
        return False
    low = name.lower()
    if low.endswith(".bias") or "norm" in low or "ln_" in low or low.endswith("rope_freqs.weight"):
        return False
    if low.endswith(_ROUTERS):  # MoE routers stay float, as llama.cpp's quantizer keeps ffn_gate_inp
        return False
    if _is_embedding(low) and not quantize_embeddings:
        return False
    if _is_output(low) and not quantize_output:
        return False
    if kind is not None and normalize_kind(kind) in ("f16", "bf16"):
        return t.dtype in (DataType.F32, DataType.F64)
    return True


_ROUTERS = ("ffn_gate_inp.weight", ".mlp.gate.weight", "block_sparse_moe.gate.weight", ".mlp.router.weight")


def _is_embedding(low: str) -> bool:
    keys = ("embed_tokens", "tok_embeddings", "token_embd", "position_embd", "token_types", "wte", "wpe", "embeddings.")
    return any(k in low for k in keys)


def _is_output(low: str) -> bool:
    return low in ("output.weight", "lm_head.weight") or low.endswith(".lm_head.weight")


def to_f32(t: TensorData) -> np.ndarray:
    """A plain float tensor as float32 (a view for F32, a converted copy otherwise)."""
    if t.dtype is DataType.F32:
        return t.array()
    if t.dtype is DataType.BF16:
        return (t.array().astype(np.uint32) << 16).view(np.float32)
    if t.dtype in (DataType.F16, DataType.F64):
        return t.array().astype(np.float32)
    raise UnsupportedError(f"cannot quantize a {t.dtype.value} tensor")


def quantize_tensor(name: str, t: TensorData, kind: str) -> dict[str, TensorData]:
    """{name: quantized} (plus {name@scale: F32 scales} for int8/int4). GGML-quantized input is kept."""
    if t.dtype.is_quantized or t.dtype is DataType.I4:
        return {name: t}
    k = effective_kind(kind, t.shape[-1] if t.shape else 1)
    if t.dtype not in _FLOAT_INPUTS:
        raise UnsupportedError(f"cannot quantize tensor {name} of type {t.dtype.value}")
    shape = t.shape if t.shape else (1,)
    rows2d = to_f32(t).reshape(-1, shape[-1])  # (R, C)
    if k not in ("f16", "bf16") and not np.isfinite(rows2d).all():
        raise FormatError(f"tensor {name} holds NaN or infinite values; cannot quantize it to {k}")
    if k == "f16":
        return {name: TensorData(t.shape, DataType.F16, rows2d.astype("<f2").reshape(-1).view(np.uint8))}
    if k == "bf16":
        return {name: TensorData(t.shape, DataType.BF16, f32_to_bf16(rows2d).reshape(-1).view(np.uint8))}
    if k in ("int8", "int4"):
        q, scale = quantize_int(rows2d, bits=8 if k == "int8" else 4)
        dt = DataType.I8 if k == "int8" else DataType.I4
        return {name: TensorData(t.shape, dt, q.reshape(-1)), name + SCALE_SUFFIX: TensorData.from_array(scale)}
    dt = _GGML[k]
    out = _by_row_chunks(rows2d, dt.nbytes((shape[-1],)), _BLOCK_FN[dt], dt.block_size)
    return {name: TensorData(t.shape, dt, out.reshape(-1))}


def _iq4_nl(blocks: np.ndarray) -> np.ndarray:
    from modelc.kernels.quant.quant_iq4nl import iq4_nl_quantize

    out = np.empty((blocks.shape[0], 18), np.uint8)
    iq4_nl_quantize(np.ascontiguousarray(blocks, np.float32), out)
    return out


def _by_row_chunks(rows2d: np.ndarray, row_bytes: int, fn: Any, block: int) -> np.ndarray:
    r, c = rows2d.shape
    out = np.empty((r, row_bytes), np.uint8)
    step = max(1, CHUNK_ELEMENTS // max(c, 1))
    for r0 in range(0, r, step):
        x = np.ascontiguousarray(rows2d[r0 : r0 + step], dtype=np.float32).reshape(-1, block)  # (B, block)
        out[r0 : r0 + step] = fn(x).reshape(-1, row_bytes)
    return out


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even bf16 (NaN kept quiet), as ggml_compute_fp32_to_bf16 / gguf.quants.BF16."""
    n = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    n = np.where((n & 0x7FFFFFFF) > 0x7F800000, (n & np.uint32(0xFFFF0000)) | np.uint32(64 << 16), n)
    return ((n.astype(np.uint64) + (0x7FFF + ((n >> 16) & 1))) >> 16).astype("<u2")


def quantize_int(rows2d: np.ndarray, *, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8/int4: (packed uint8 (R, bytes per row), scales (R,) f32)."""
    qmax = 127 if bits == 8 else 7
    amax = np.abs(rows2d).max(axis=1) if rows2d.shape[1] else np.zeros(rows2d.shape[0], np.float32)  # (R,)
    scale = (amax / np.float32(qmax)).astype(np.float32)
    inv = np.divide(np.float32(1), scale, out=np.zeros_like(scale), where=scale > 0)
    q = np.clip(np.rint(rows2d * inv[:, None]), -qmax, qmax).astype(np.int8)  # (R, C)
    if bits == 8:
        return q.view(np.uint8), scale
    u = q.view(np.uint8) & 0x0F  # callers pass an even row length (effective_kind)
    return (u[:, 0::2] | (u[:, 1::2] << 4)).astype(np.uint8), scale


# ---- GGML 32-element blocks: the same numpy operations as gguf.quants (bit-identical) ----------


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float16).view(np.uint8)


def _inv(d: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.where(d == 0, 0, 1 / d)


def _roundf(n: np.ndarray) -> np.ndarray:
    """C roundf: halves away from zero."""
    a = np.abs(n)
    f = np.floor(a)
    return np.sign(n) * (f + np.floor(2 * (a - f)))


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127
    qs = _roundf(blocks * _inv(d)).astype(np.int8).view(np.uint8)
    return np.concatenate([_f16_bytes(d), qs], axis=1)


def _absmax_signed(blocks: np.ndarray) -> np.ndarray:
    imax = np.abs(blocks).argmax(axis=-1, keepdims=True)
    return np.take_along_axis(blocks, imax, axis=-1)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    q = q.reshape((q.shape[0], 2, 16))
    return (q[:, 0, :] & np.uint8(0x0F)) | (q[:, 1, :] << np.uint8(4))


def _high_bits(q: np.ndarray) -> np.ndarray:
    return np.packbits((q >> np.uint8(4)).reshape(q.shape[0], 1, 32), axis=-1, bitorder="little").reshape(-1, 4)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    d = _absmax_signed(blocks) / -8
    q = np.trunc(blocks * _inv(d) + np.float32(8.5), dtype=np.float32).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=-1)


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    mx, mn = blocks.max(axis=-1, keepdims=True), blocks.min(axis=-1, keepdims=True)
    d = (mx - mn) / 15
    q = np.trunc((blocks - mn) * _inv(d) + np.float32(0.5), dtype=np.float32).astype(np.uint8).clip(0, 15)
    return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _pack_nibbles(q)], axis=-1)


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    d = _absmax_signed(blocks) / -16
    q = np.trunc(blocks * _inv(d) + np.float32(16.5), dtype=np.float32).astype(np.uint8).clip(0, 31)
    return np.concatenate([_f16_bytes(d), _high_bits(q), _pack_nibbles(q)], axis=-1)


def _q5_1(blocks: np.ndarray) -> np.ndarray:
    mx, mn = blocks.max(axis=-1, keepdims=True), blocks.min(axis=-1, keepdims=True)
    d = (mx - mn) / 31
    q = np.trunc((blocks - mn) * _inv(d) + np.float32(0.5), dtype=np.float32).astype(np.uint8).clip(0, 31)
    return np.concatenate([_f16_bytes(d), _f16_bytes(mn), _high_bits(q), _pack_nibbles(q)], axis=-1)


# ---- K-quants: llama.cpp's reference search, vectorized over groups ------------------------------
# Arrays are laid out (n, G): position in the group first, so x[i] is one contiguous (G,) slice and
# every float32 sum accumulates position by position, exactly like the C loops.

F32 = np.float32


def _nearest_int(v: np.ndarray) -> np.ndarray:
    """llama.cpp nearest_int (the 1.5*2^23 trick): round half to even."""
    return np.rint(v).astype(np.int32)


def _seq_sum(terms: np.ndarray) -> np.ndarray:
    """(n, G) -> (G,): float32 sum over axis 0, row after row like the C loops.

    NOTE: numpy reduces a C-contiguous array over its OUTER axis by accumulating whole rows in
    order (pairwise summation only applies along the contiguous axis), so this is the sequential
    sum; tests/artifact/test_quantize.py checks it against a literal scalar port of llama.cpp.
    """
    return np.add.reduce(np.ascontiguousarray(terms), axis=0, dtype=F32)


def make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int):
    """x, w: (n, G) f32 -> (L (n, G) uint8, scale (G,), the_min (G,)); llama.cpp make_qkx2_quants, use_mad=False.

    Levels are kept as float32 (rint of a float32 is the same integer nearest_int gives).
    """
    mn, mx = np.minimum(x.min(axis=0), F32(0)), x.max(axis=0)  # (G,)
    sum_w = _seq_sum(w)
    sum_x = _seq_sum(w * x)
    flat = mx == mn
    span = np.where(flat, F32(1), mx - mn)
    iscale = F32(nmax) / span
    scale = F32(1) / iscale
    lf = np.clip(np.rint(iscale * (x - mn)), F32(0), F32(nmax))  # (n, G)
    best = _seq_sum(w * np.square((scale * lf + mn) - x))
    for step in range(nstep + 1):
        iscale = (F32(rmin) + F32(rdelta) * F32(step) + F32(nmax)) / np.where(flat, F32(1), mx - mn)
        la = np.clip(np.rint(iscale * (x - mn)), F32(0), F32(nmax))
        wl = w * la
        sum_l, sum_l2, sum_xl = _seq_sum(wl), _seq_sum(wl * la), _seq_sum(wl * x)
        det = sum_w * sum_l2 - sum_l * sum_l
        ok = det > 0
        safe = np.where(ok, det, F32(1))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / safe
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / safe
        pos = this_min > 0
        this_min = np.where(pos, F32(0), this_min)
        with np.errstate(divide="ignore", invalid="ignore"):
            this_scale = np.where(pos, sum_xl / sum_l2, this_scale)
        err = _seq_sum(w * np.square((this_scale * la + this_min) - x))
        better = ok & (err < best) & ~flat
        if better.any():
            lf = np.where(better, la, lf)
            best = np.where(better, err, best)
            scale = np.where(better, this_scale, scale)
            mn = np.where(better, this_min, mn)
    lf = np.where(flat, F32(0), lf)
    scale = np.where(flat, F32(0), scale)
    return lf.astype(np.uint8), scale.astype(F32), (-mn).astype(F32)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    """(B, 256) f32 -> (B, 144) uint8: d f16, dmin f16, 12 packed 6-bit scales/mins, 128 nibble bytes."""
    b = blocks.shape[0]
    x = np.ascontiguousarray(blocks.reshape(b * 8, 32).T)  # (32, G), G = B*8 sub-blocks
    sum_x2 = _seq_sum(x * x)
    av_x = np.sqrt(sum_x2 / F32(32))
    w = av_x[None, :] + np.abs(x)
    L, scales, mins = make_qkx2_quants(x, w, 15, -1.0, 0.1, 20)
    scales, mins = scales.reshape(b, 8), mins.reshape(b, 8)
    max_scale = np.maximum(scales.max(axis=1), F32(0))
    max_min = np.maximum(mins.max(axis=1), F32(0))
    inv_scale = np.where(max_scale > 0, F32(63) / np.where(max_scale > 0, max_scale, F32(1)), F32(0))
    inv_min = np.where(max_min > 0, F32(63) / np.where(max_min > 0, max_min, F32(1)), F32(0))
    ls = np.minimum(_nearest_int(inv_scale[:, None] * scales) & 0xFF, 63).astype(np.uint8)  # (B, 8)
    lm = np.minimum(_nearest_int(inv_min[:, None] * mins) & 0xFF, 63).astype(np.uint8)
    packed = np.zeros((b, 12), np.uint8)
    packed[:, 0:4] = ls[:, :4] | ((ls[:, 4:] >> 4) << 6)
    packed[:, 4:8] = lm[:, :4] | ((lm[:, 4:] >> 4) << 6)
    packed[:, 8:12] = (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)
    d16 = (max_scale / F32(63)).astype(np.float16)
    dmin16 = (max_min / F32(63)).astype(np.float16)
    d = d16.astype(F32)[:, None] * ls.astype(F32)  # (B, 8)
    dm = dmin16.astype(F32)[:, None] * lm.astype(F32)
    xb = blocks.reshape(b, 8, 32)
    safe = np.where(d == 0, F32(1), d)
    requant = np.clip(_nearest_int((xb + dm[..., None]) / safe[..., None]), 0, 15).astype(np.uint8)
    L = np.where((d == 0)[..., None], L.T.reshape(b, 8, 32), requant).reshape(b, 4, 2, 32)
    qs = (L[:, :, 0, :] | (L[:, :, 1, :] << 4)).reshape(b, 128)
    head = np.concatenate([d16.view(np.uint8).reshape(b, 2), dmin16.view(np.uint8).reshape(b, 2)], axis=1)
    return np.concatenate([head, packed, qs], axis=1)


def make_qx_quants_rmse1(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """x: (n, G) f32 -> (L (n, G) in [0, 2*nmax), scale (G,)); llama.cpp make_qx_quants, rmse_type=1, no weights."""
    n, g = x.shape
    imax = np.abs(x).argmax(axis=0)
    mx = x[imax, np.arange(g)]
    zero = np.abs(mx) < GROUP_MAX_EPS
    mx_safe = np.where(zero, F32(1), mx)
    w = x * x

    def sums(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lf = np.clip(_nearest_int(iscale * x), -nmax, nmax - 1).astype(F32)
        slx = _seq_sum(w * x * lf)
        sl2 = _seq_sum(w * lf * lf)
        return lf, slx, sl2

    lf, sumlx, suml2 = sums(F32(-nmax) / mx_safe)
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(suml2 != 0, sumlx / suml2, F32(0)).astype(F32)
    best = scale * sumlx
    L = lf
    for step in range(-9, 10):
        if step == 0:
            continue
        iscale = -(F32(nmax) + F32(0.1) * F32(step)) / mx_safe
        lf2, slx, sl2 = sums(iscale)
        better = (sl2 > 0) & (slx * slx > best * sl2)
        with np.errstate(divide="ignore", invalid="ignore"):
            new_scale = slx / sl2
        L = np.where(better, lf2, L)
        scale = np.where(better, new_scale, scale)
        best = np.where(better, scale * slx, best)
    L = np.where(zero, F32(-nmax), L)
    scale = np.where(zero, F32(0), scale)
    return (L + nmax).astype(np.uint8), scale.astype(F32)


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    """(B, 256) f32 -> (B, 210) uint8: ql[128], qh[64], int8 scales[16], d f16."""
    b = blocks.shape[0]
    x = np.ascontiguousarray(blocks.reshape(b * 16, 16).T)  # (16, G)
    L0, scales = make_qx_quants_rmse1(x, 32)
    L0 = L0.T.reshape(b, 16, 16)
    scales = scales.reshape(b, 16)
    ia = np.abs(scales).argmax(axis=1)
    max_scale = scales[np.arange(b), ia]
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    iscale = F32(-128) / np.where(zero, F32(1), max_scale)
    d16 = np.where(zero, F32(0), F32(1) / iscale).astype(np.float16)
    sc = np.minimum(_nearest_int(iscale[:, None] * scales), 127).astype(np.int8)  # (B, 16)
    sc = np.where(zero[:, None], np.int8(0), sc)
    d = d16.astype(F32)[:, None] * sc.astype(F32)  # (B, 16)
    xb = blocks.reshape(b, 16, 16)
    safe = np.where(d == 0, F32(1), d)
    requant = (np.clip(_nearest_int(xb / safe[..., None]), -32, 31) + 32).astype(np.uint8)
    L = np.where((d == 0)[..., None], L0, requant)
    L = np.where(zero[:, None, None], np.uint8(0), L).reshape(b, 2, 4, 32)  # halves of 128, quarters of 32
    ql = np.concatenate(
        [(L[:, :, 0] & 0xF) | ((L[:, :, 2] & 0xF) << 4), (L[:, :, 1] & 0xF) | ((L[:, :, 3] & 0xF) << 4)], axis=2
    )
    qh = (L[:, :, 0] >> 4) | ((L[:, :, 1] >> 4) << 2) | ((L[:, :, 2] >> 4) << 4) | ((L[:, :, 3] >> 4) << 6)
    return np.concatenate(
        [ql.reshape(b, 128), qh.reshape(b, 64), sc.view(np.uint8), d16.view(np.uint8).reshape(b, 2)], axis=1
    ).astype(np.uint8)


_BLOCK_FN = {
    DataType.Q8_0: _q8_0,
    DataType.Q4_0: _q4_0,
    DataType.Q4_1: _q4_1,
    DataType.Q5_0: _q5_0,
    DataType.Q5_1: _q5_1,
    DataType.Q4_K: _q4_k,
    DataType.Q6_K: _q6_k,
    DataType.IQ4_NL: _iq4_nl,
}

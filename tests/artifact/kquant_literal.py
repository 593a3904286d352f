"""Literal, scalar Python transcriptions of llama.cpp's quantize_row_q4_K_ref / quantize_row_q6_K_ref.

Every operation is a numpy float32 scalar op in the C code's order, so these are a slow but
line-by-line checkable reference for the vectorized quantizers in modelc.artifact.quantize.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32


def nearest_int(v) -> int:
    return int(np.rint(f32(v)))


def make_qkx2_quants(n, nmax, x, weights, rmin, rdelta, nstep):
    mn = x[0]
    mx = x[0]
    sum_w = weights[0]
    sum_x = sum_w * x[0]
    for i in range(1, n):
        if x[i] < mn:
            mn = x[i]
        if x[i] > mx:
            mx = x[i]
        w = weights[i]
        sum_w = sum_w + w
        sum_x = sum_x + w * x[i]
    if mn > 0:
        mn = f32(0)
    L = [0] * n
    if mx == mn:
        return f32(0), -mn, L
    iscale = f32(nmax) / (mx - mn)
    scale = f32(1) / iscale
    best = f32(0)
    for i in range(n):
        L[i] = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
        diff = scale * f32(L[i]) + mn - x[i]
        best = best + weights[i] * (diff * diff)
    for is_ in range(nstep + 1):
        iscale = (f32(rmin) + f32(rdelta) * f32(is_) + f32(nmax)) / (mx - mn)
        laux = [0] * n
        sum_l = sum_l2 = sum_xl = f32(0)
        for i in range(n):
            l = max(0, min(nmax, nearest_int(iscale * (x[i] - mn))))
            laux[i] = l
            w = weights[i]
            sum_l = sum_l + w * f32(l)
            sum_l2 = sum_l2 + w * f32(l) * f32(l)
            sum_xl = sum_xl + w * f32(l) * x[i]
        D = sum_w * sum_l2 - sum_l * sum_l
        if D > 0:
            this_scale = (sum_w * sum_xl - sum_x * sum_l) / D
            this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D
            if this_min > 0:
                this_min = f32(0)
                this_scale = sum_xl / sum_l2
            err = f32(0)
            for i in range(n):
                diff = this_scale * f32(laux[i]) + this_min - x[i]
                err = err + weights[i] * (diff * diff)
            if err < best:
                L = laux
                best = err
                scale = this_scale
                mn = this_min
    return scale, -mn, L


def q4_k_block(x) -> bytes:
    x = [f32(v) for v in x]
    L = [0] * 256
    scales, mins = [f32(0)] * 8, [f32(0)] * 8
    max_scale = max_min = f32(0)
    for j in range(8):
        sub = x[32 * j : 32 * j + 32]
        sum_x2 = f32(0)
        for v in sub:
            sum_x2 = sum_x2 + v * v
        av_x = np.sqrt(sum_x2 / f32(32))
        w = [av_x + abs(v) for v in sub]
        scales[j], mins[j], L[32 * j : 32 * j + 32] = make_qkx2_quants(32, 15, sub, w, -1.0, 0.1, 20)
        max_scale = max(max_scale, scales[j]) if scales[j] > max_scale else max_scale
        max_min = mins[j] if mins[j] > max_min else max_min
    inv_scale = f32(63) / max_scale if max_scale > 0 else f32(0)
    inv_min = f32(63) / max_min if max_min > 0 else f32(0)
    sc = [0] * 12
    ls_all, lm_all = [], []
    for j in range(8):
        ls = min(63, nearest_int(inv_scale * scales[j]) & 0xFF)
        lm = min(63, nearest_int(inv_min * mins[j]) & 0xFF)
        ls_all.append(ls)
        lm_all.append(lm)
        if j < 4:
            sc[j] = ls
            sc[j + 4] = lm
        else:
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4)
            sc[j - 4] |= (ls >> 4) << 6
            sc[j] |= (lm >> 4) << 6
    d = np.float16(max_scale / f32(63))
    dmin = np.float16(max_min / f32(63))
    for j in range(8):
        dd = f32(d) * f32(ls_all[j])
        if not dd:
            continue
        dm = f32(dmin) * f32(lm_all[j])
        for ii in range(32):
            L[32 * j + ii] = max(0, min(15, nearest_int((x[32 * j + ii] + dm) / dd)))
    qs = []
    for j in range(0, 256, 64):
        qs += [L[j + l] | (L[j + l + 32] << 4) for l in range(32)]
    return d.tobytes() + dmin.tobytes() + bytes(sc) + bytes(qs)


def make_qx_quants_rmse1(n, nmax, x):
    mx = f32(0)
    amax = f32(0)
    for v in x:
        if abs(v) > amax:
            amax = abs(v)
            mx = v
    if amax < f32(1e-15):
        return f32(0), [0] * n
    iscale = f32(-nmax) / mx
    L = [0] * n
    sumlx = suml2 = f32(0)
    for i in range(n):
        l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
        L[i] = l + nmax
        w = x[i] * x[i]
        sumlx = sumlx + w * x[i] * f32(l)
        suml2 = suml2 + w * f32(l) * f32(l)
    scale = sumlx / suml2 if suml2 else f32(0)
    best = scale * sumlx
    for is_ in range(-9, 10):
        if is_ == 0:
            continue
        iscale = -(f32(nmax) + f32(0.1) * f32(is_)) / mx
        sumlx = suml2 = f32(0)
        for i in range(n):
            l = max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
            w = x[i] * x[i]
            sumlx = sumlx + w * x[i] * f32(l)
            suml2 = suml2 + w * f32(l) * f32(l)
        if suml2 > 0 and sumlx * sumlx > best * suml2:
            for i in range(n):
                L[i] = nmax + max(-nmax, min(nmax - 1, nearest_int(iscale * x[i])))
            scale = sumlx / suml2
            best = scale * sumlx
    return scale, L


def q6_k_block(x) -> bytes:
    x = [f32(v) for v in x]
    L = [0] * 256
    scales = [f32(0)] * 16
    max_scale = max_abs = f32(0)
    for ib in range(16):
        scales[ib], L[16 * ib : 16 * ib + 16] = make_qx_quants_rmse1(16, 32, x[16 * ib : 16 * ib + 16])
        if abs(scales[ib]) > max_abs:
            max_abs = abs(scales[ib])
            max_scale = scales[ib]
    if max_abs < f32(1e-15):
        return bytes(210)
    iscale = f32(-128) / max_scale
    d = np.float16(f32(1) / iscale)
    sc = [min(127, nearest_int(iscale * s)) for s in scales]
    for j in range(16):
        dd = f32(d) * f32(sc[j])
        if not dd:
            continue
        for ii in range(16):
            L[16 * j + ii] = max(-32, min(31, nearest_int(x[16 * j + ii] / dd))) + 32
    ql, qh = [0] * 128, [0] * 64
    for h, j in enumerate((0, 128)):
        for l in range(32):
            q1, q2, q3, q4 = L[j + l], L[j + l + 32], L[j + l + 64], L[j + l + 96]
            ql[64 * h + l] = (q1 & 0xF) | ((q3 & 0xF) << 4)
            ql[64 * h + l + 32] = (q2 & 0xF) | ((q4 & 0xF) << 4)
            qh[32 * h + l] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    return bytes(ql) + bytes(qh) + np.array(sc, np.int8).tobytes() + d.tobytes()

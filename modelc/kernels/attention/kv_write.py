"""kv_write: scatter the K/V rows of T new tokens into paged KV storage by slot.

Pages are (P, Z, K, D) float32 or uint16 (fp16 bits); slot = page * Z + offset.
"""

from __future__ import annotations

from numba import njit

from modelc.kernels.attention.kv_dtype import store_like

# error_model="numpy" on every kernel here: numba's default ("python") guards each float and
# integer division with a zero check that raises, and that branch stops LLVM from vectorizing
# the loop (measured 10x on SiLU). Inputs never divide by zero here (eps > 0, Z = 16).


@njit(cache=True, nogil=True, error_model="numpy")
def kv_write(k_pages, v_pages, k, v, slots):
    """Write k[t], v[t] at slots[t].

    k_pages, v_pages: (P, Z, K, D) float32 | uint16, C-contiguous, updated in place.
    k, v: (T, K, D) float32.  slots: (T,) int64; a negative slot is skipped (padding).
    """
    T, K, D = k.shape
    Z = k_pages.shape[1]
    for t in range(T):
        s = slots[t]
        if s < 0:
            continue
        page = s // Z
        off = s % Z
        for h in range(K):
            for d in range(D):
                k_pages[page, off, h, d] = store_like(k[t, h, d], k_pages)
                v_pages[page, off, h, d] = store_like(v[t, h, d], v_pages)


def write_pages(k_pages, v_pages, k, v, slots) -> None:
    """kv_write for any page type: plain (P, Z, K, D) arrays, or kv_q8.QPages (the q8_0 / mixed cache)."""
    if isinstance(k_pages, tuple):
        from modelc.kernels.attention.kv_q8 import kv_write_q8

        kp, vp = k_pages, v_pages
        kv_write_q8(kp.data, kp.scales, vp.data, vp.scales, kp.hot_of, kp.hot, vp.hot, k, v, slots)
        return
    kv_write(k_pages, v_pages, k, v, slots)

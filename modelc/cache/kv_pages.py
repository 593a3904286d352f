"""KVPages: the engine's physical KV cache, per layer K and V pages of (P, Z, K, D) rows.

Owned by one Runner; the scheduler's BlockPool does the accounting (which page is whose).
Types (docs/scheduler.md, "KV cache types"):
- float32, float16: plain arrays (fp16 as IEEE half bit patterns in uint16; numba has no CPU float16).
- q8_0: int8 rows with one fp16 scale per block of QB head-dim elements (kernels/attention/kv_q8.py).
- mixed: q8_0 for every page, plus f32 copies ("hot" slots) of the pages that may still be in
  some query's most recent `window` positions; a query at position pos reads row p in f32 iff
  pos - p < window and the page still has its hot slot, else int8.

The arrays become resident at construction (`commit`), as llama.cpp clears its KV buffer at load: np.zeros only
reserves them, and numpy advises its large allocations onto 2 MiB pages, so the first write of a decode step into
a fresh page would fault in a huge page then. A served SmolLM2-135M restart's first request did that at two decode
steps (15 huge pages each, 8-100+ ms on a VM whose host backs guest memory lazily; docs/benchmarks.md, issue 38).
A thread maps the pages (madvise MADV_POPULATE_WRITE: no byte written, so nothing races a forward) while the load
goes on; `wait_resident` waits for it (engine/warm.ready_runner, before /health says 200). The scheduler's block
pool walks through every page in time anyway, so RSS holds the whole cache either way; this moves the faults before
the first request. Where the call is missing (not Linux, a kernel before 5.14) pages fault in at first write.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
import mmap
import sys
import threading

import numpy as np

from modelc.config import KV_DTYPES
from modelc.errors import InvalidRequestError
from modelc.kernels.reference.ref_kv_q8 import dequant_rows, quant_rows

BLOCK_SIZE = 16  # Z: tokens per page; fixed by docs/architecture.md

_STORE = {"float32": np.dtype(np.float32), "float16": np.dtype(np.uint16)}
MIXED_WINDOW = 64  # tokens read in f32 by the mixed cache (the seed spec's default hot window)
HOT_FRACTION = 0.25  # the mixed cache keeps f32 copies for at most this share of the pages...
HOT_MIN_PAGES = 40  # ...or this many in a small cache (a 512-token prefill chunk plus a few windows)


def hot_pages(num_blocks: int) -> int:
    return min(num_blocks, max(math.ceil(num_blocks * HOT_FRACTION), HOT_MIN_PAGES))


MADV_POPULATE_WRITE = 23  # Linux 5.14+
COMMIT_MIN_BYTES = 2 << 20  # smaller arrays come from malloc's heap, on 4 KiB pages: their faults cost little


def _load_libc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.madvise.restype = ctypes.c_int
    return libc


_LIBC = _load_libc()


def _populate(arrays: list[np.ndarray]) -> None:
    page = mmap.PAGESIZE
    for a in arrays:
        start = a.ctypes.data // page * page
        if _LIBC.madvise(start, a.ctypes.data + a.nbytes - start, MADV_POPULATE_WRITE) != 0:
            return  # EINVAL before Linux 5.14: the pages fault in at their first write, as without this


def commit(*arrays: np.ndarray | None) -> threading.Thread | None:
    """Map every page of the arrays of COMMIT_MIN_BYTES or more, in a thread (returned; None where there is nothing
    to do or no way to). ctypes lets go of the GIL for the call, so the load's Python goes on meanwhile."""
    big = [a for a in arrays if a is not None and a.nbytes >= COMMIT_MIN_BYTES]
    if not big or _LIBC is None:
        return None
    t = threading.Thread(target=_populate, args=(big,), name="modelc-kv-commit", daemon=True)
    t.start()
    return t


class KVPages:
    """k, v: (L, P, Z, K, D); for q8_0/mixed also ks, vs (L, P, Z, K, NB) fp16 scales and the hot slots."""

    __slots__ = (
        "num_layers",
        "num_blocks",
        "num_kv_heads",
        "head_dim",
        "kv_dtype",
        "k",
        "v",
        "ks",
        "vs",
        "hot_of",
        "kh",
        "vh",
        "window",
        "_free_hot",
        "_idle",
        "_commit",
    )

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        num_kv_heads: int,
        head_dim: int,
        kv_dtype: str = "float32",
        *,
        window: int = MIXED_WINDOW,
        num_hot: int | None = None,
    ):
        if kv_dtype not in KV_DTYPES:
            raise InvalidRequestError(f"kv_dtype must be one of {list(KV_DTYPES)}, got {kv_dtype!r}", param="kv_dtype")
        if num_blocks < 1:
            raise InvalidRequestError(f"num_kv_blocks must be >= 1, got {num_blocks}", param="num_kv_blocks")
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.kv_dtype = kv_dtype
        shape = (num_layers, num_blocks, BLOCK_SIZE, num_kv_heads, head_dim)  # (L, P, Z, K, D)
        self.window = 0
        self.ks = self.vs = self.kh = self.vh = None
        self.hot_of = np.full(num_blocks, -1, np.int32)  # (P,)
        self._free_hot: list[int] = []
        self._idle: dict[int, None] = {}  # hot pages no running sequence holds, oldest first (LRU)
        if kv_dtype in _STORE:
            self.k = np.zeros(shape, _STORE[kv_dtype])
            self.v = np.zeros(shape, _STORE[kv_dtype])
        else:
            self._quantized(shape, kv_dtype, window, num_hot)
        self._commit = commit(self.k, self.v, self.ks, self.vs, self.kh, self.vh)  # None arrays are skipped

    def _quantized(self, shape: tuple[int, ...], kv_dtype: str, window: int, num_hot: int | None) -> None:
        """q8_0 / mixed: int8 K and V with fp16 scales, and the hot (f32) slots."""
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.kernels.attention.kv_q8 import quant_block

        nb = self.head_dim // quant_block(self.head_dim)
        self.k = np.zeros(shape, np.int8)
        self.v = np.zeros(shape, np.int8)
        self.ks = np.zeros((*shape[:-1], nb), np.uint16)  # (L, P, Z, K, NB)
        self.vs = np.zeros((*shape[:-1], nb), np.uint16)
        ph = 1  # q8_0: a one-page dummy the kernels never read (window 0)
        if kv_dtype == "mixed":
            self.window = int(window)
            ph = num_hot if num_hot is not None else hot_pages(self.num_blocks)
            self._free_hot = list(range(ph - 1, -1, -1))
        self.kh = np.zeros((self.num_layers, ph, *shape[2:]), np.float32)  # (L, PH, Z, K, D)
        self.vh = np.zeros_like(self.kh)

    def wait_resident(self) -> None:
        """Wait until every page of the arrays is mapped (see the module doc; at once where nothing was to do)."""
        if self._commit is not None:
            self._commit.join()
            self._commit = None

    @property
    def block_size(self) -> int:
        return BLOCK_SIZE

    @property
    def nbytes(self) -> int:
        arrays = [self.k, self.v] + ([self.ks, self.vs] if self.ks is not None else [])
        if self.window:
            arrays += [self.kh, self.vh]
        return int(sum(a.nbytes for a in arrays))

    @staticmethod
    def bytes_per_block(num_layers: int, num_kv_heads: int, head_dim: int, kv_dtype: str = "float32") -> float:
        """Bytes one block costs across all layers, K and V (for sizing the cache from a memory budget).
        mixed counts its hot copies at HOT_FRACTION of the pages (a small cache keeps HOT_MIN_PAGES)."""
        if kv_dtype not in KV_DTYPES:
            raise InvalidRequestError(f"kv_dtype must be one of {list(KV_DTYPES)}, got {kv_dtype!r}", param="kv_dtype")
        rows = 2 * num_layers * BLOCK_SIZE * num_kv_heads
        if kv_dtype in _STORE:
            return rows * head_dim * _STORE[kv_dtype].itemsize
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.kernels.attention.kv_q8 import quant_block

        q8 = rows * (head_dim + 2 * (head_dim // quant_block(head_dim)))
        return q8 + (rows * head_dim * 4 * HOT_FRACTION if kv_dtype == "mixed" else 0)

    def layer(self, i: int):
        """Layer i's (K pages, V pages): (P, Z, K, D) arrays, or kv_q8.QPages for q8_0 / mixed."""
        if self.ks is None:
            return self.k[i], self.v[i]
        # lazy: numba kernels load (and compile) only when this path runs
        from modelc.kernels.attention.kv_q8 import QPages

        return (
            QPages(self.k[i], self.ks[i], self.hot_of, self.kh[i], self.window),
            QPages(self.v[i], self.vs[i], self.hot_of, self.vh[i], self.window),
        )

    # -- the mixed cache's hot slots (no-ops for the other types) ---------------------------------

    def prepare(self, slots: np.ndarray, windows: list[tuple[np.ndarray, int, int]] = ()) -> None:
        """Before a forward writes `slots`: give each page whose row 0 is written a hot slot, from the free
        slots, else taken from the least recently parked page. windows: (block_table, start, end) of each
        sequence in the forward; the pages its rows may read in f32 stop being parked.
        A page without a hot slot is read as int8 everywhere (exact to the rule while slots last)."""
        if not self.window:
            return
        for table, start, end in windows:
            lo = max(0, start - self.window + 1) // BLOCK_SIZE
            for page in np.asarray(table)[lo : (end + BLOCK_SIZE - 1) // BLOCK_SIZE].tolist():
                self._idle.pop(page, None)
        s = np.asarray(slots)
        starts = np.unique(s[(s >= 0) & (s % BLOCK_SIZE == 0)] // BLOCK_SIZE)
        for page in starts.tolist():
            self._idle.pop(page, None)
            if self.hot_of[page] >= 0:
                continue
            if not self._free_hot and self._idle:
                old = next(iter(self._idle))
                del self._idle[old]
                self.release(np.array([old]))
            if self._free_hot:
                self.hot_of[page] = self._free_hot.pop()

    def retire(self, block_table: np.ndarray, length: int) -> None:
        """After a forward: a sequence of `length` tokens never again reads its pages that lie wholly more than
        `window` positions back in f32, so their hot slots are freed."""
        if not self.window:
            return
        n_old = max(0, (length - self.window + 1) // BLOCK_SIZE)  # pages with last position <= length - window
        self.release(np.asarray(block_table)[:n_old])

    def park(self, pages: np.ndarray) -> None:
        """A finished sequence's pages keep their hot copies (a prefix-cache hit reads them as the first run
        did) until another page needs the slot, least recently parked first."""
        if not self.window:
            return
        for page in np.asarray(pages, np.int64).tolist():
            if self.hot_of[page] >= 0:
                self._idle.pop(page, None)
                self._idle[page] = None

    def release(self, pages: np.ndarray) -> None:
        """Drop the hot copies of `pages`."""
        if not self.window:
            return
        for page in np.asarray(pages, np.int64).tolist():
            hs = int(self.hot_of[page])
            if hs >= 0:
                self.hot_of[page] = -1
                self._free_hot.append(hs)
                self._idle.pop(page, None)

    # -- context shift -------------------------------------------------------------------------------

    def copy_pages(self, src: int, dst: int) -> None:
        """Page dst becomes a copy of page src in every layer (copy-on-write before a shift); no hot copy."""
        for arr in (self.k, self.v, self.ks, self.vs):
            if arr is not None:
                arr[:, dst] = arr[:, src]
        self.release(np.array([dst]))

    def rotate_keys(self, layer: int, pages: np.ndarray, rotate) -> None:
        """Apply rotate(x) in place to every key row of `pages` in `layer`, x: (n * Z, K, D) float32 (the mixed
        cache's hot copies too; int8 rows are dequantized, rotated and quantized again)."""
        pages = np.asarray(pages, np.int64)
        if len(pages) == 0:
            return
        k = self.k[layer]
        if self.kv_dtype == "float32":
            x = np.ascontiguousarray(k[pages].reshape(-1, *k.shape[2:]))  # (n*Z, K, D)
            rotate(x)
            k[pages] = x.reshape(len(pages), *k.shape[1:])
            return
        if self.kv_dtype == "float16":
            x = np.ascontiguousarray(k[pages].view(np.float16).astype(np.float32).reshape(-1, *k.shape[2:]))
            rotate(x)
            k[pages] = x.astype(np.float16).view(np.uint16).reshape(len(pages), *k.shape[1:])
            return

        ks = self.ks[layer]
        x = np.ascontiguousarray(dequant_rows(k[pages], ks[pages]).reshape(-1, *k.shape[2:]))
        rotate(x)
        q, sc = quant_rows(x.reshape(len(pages), *k.shape[1:]), ks.shape[-1])
        k[pages], ks[pages] = q, sc
        hot = self.hot_of[pages]
        if self.window and (hot >= 0).any():
            kh = self.kh[layer]
            slots = hot[hot >= 0]
            y = np.ascontiguousarray(kh[slots].reshape(-1, *kh.shape[2:]))
            rotate(y)
            kh[slots] = y.reshape(len(slots), *kh.shape[1:])

    def read(self, layer: int, block_table: np.ndarray, num_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Debug/test helper: a sequence's first num_tokens K and V rows as float32 (n, K, D) copies (int8 rows
        dequantized; the mixed cache's hot copies ignored)."""
        p = np.arange(num_tokens)
        slots = np.asarray(block_table, np.int64)[p // BLOCK_SIZE]
        k = self.k[layer][slots, p % BLOCK_SIZE]
        v = self.v[layer][slots, p % BLOCK_SIZE]
        if self.ks is not None:
            ks = self.ks[layer][slots, p % BLOCK_SIZE]
            vs = self.vs[layer][slots, p % BLOCK_SIZE]
            return dequant_rows(k, ks), dequant_rows(v, vs)
        if self.kv_dtype == "float16":
            return k.view(np.float16).astype(np.float32), v.view(np.float16).astype(np.float32)
        return k.copy(), v.copy()

"""Reading a model source's tensors by name for the architectures: lookups, f32 vectors, row splits.

Weight-layout fixes (fused QKV splits, Conv1D transposes) are done here once, at load, and
with the numba kernels every file-mapped matrix is queued to move onto huge pages in place, in the
background, where the kernel has transparent huge pages (kernels/runtime/hugepages.py: decode 1.02-1.07x faster
than from the 4 KiB pages of the file mapping; MODELC_HUGEPAGES=0 keeps the mapping).
With the numba kernels (not the hybrid set of a cold start, which serves from the file layout
while numba compiles), Q4_0, Q4_1, Q4_K and Q6_K (and Q8_0, IQ4_NL, IQ4_XS where the CPU dots 0..255 codes exactly)
matrices are repacked into 16 interleaved rows (kernels/matmul/gemm_r16.py: 1.3x decode, 3-4x batched decode and
prefill), read from the file with pread so the file's own pages stay out of RSS: the copy takes
their place. MODELC_REPACK=0 keeps the file layout. `matrices` repacks the projections one input feeds
(q/k/v, gate/up) into one array where they repack alike, for one matmul call (fused.py).

Repacked matrices are shared by every WeightReader of one source (`_SHARED`): the
engines of one model (--engines N), a warm-up's second model and the served model that takes its
place (engine/warm.py) read one copy, repacked once.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from modelc.errors import FormatError
from modelc.ir import SCALE_SUFFIX, DataType, TensorData
from modelc.kernels.matmul import gemm_r16
from modelc.kernels.matmul.linear import Weight, prepare_weight
from modelc.kernels.runtime import hugepages
from modelc.kernels.select import KernelSet
from modelc.models import r16_cache, residency
from modelc.models.fused import Fused, fuse_runs

# id(source) -> {(what, *args): Weights built from it with copies (repacked)}, dropped with
# the source; one lock: two readers of one source building at once (engines, a warm-up) wait for one
# repack instead of making two
_SHARED: dict[int, dict[tuple, Any]] = {}
_SHARED_LOCK = threading.RLock()


def _shared_of(source: Any) -> dict[tuple, Any] | None:
    with _SHARED_LOCK:
        got = _SHARED.get(id(source))
        if got is None:
            try:
                weakref.finalize(source, _SHARED.pop, id(source), None)
            except TypeError:  # a source that takes no weak reference: its readers copy for themselves
                return None
            got = _SHARED[id(source)] = {}
        return got


class WeightReader:
    """Named access to a model source's tensors (an IR Model or an Artifact)."""

    def __init__(self, source: Any, kernels: KernelSet):
        self.tensors: dict[str, TensorData] = source.tensors
        self.kernels = kernels
        self.name = getattr(source, "name", "model")
        # not on a cold start's hybrid kernels: they serve from the file layout while numba compiles; not where
        # the weights stream from the file (residency.py): a copy is memory the kernel cannot reclaim
        numba = kernels.name == "numba" and not residency.streamed(source)
        self.repack = numba and os.environ.get("MODELC_REPACK", "1") != "0"
        total = sum(t.nbytes for t in self.tensors.values() if len(t.shape) in (2, 3))  # 3-D: MoE experts
        # whether the matrices move onto huge pages (in the background, after load)
        self.huge = numba and bool(total) and hugepages.enabled(total)
        self.shared = _shared_of(source) if self.repack else None

    def _once(self, key: tuple, make: Callable[[], Any]) -> Any:
        """make(), or what a reader of the same source made for `key` (its copies are read-only)."""
        if self.shared is None:
            return make()
        key = (self.repack, *key)
        with _SHARED_LOCK:
            if key not in self.shared:
                self.shared[key] = make()
            return self.shared[key]

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor(self, name: str) -> TensorData:
        t = self.tensors.get(name)
        if t is None:
            raise FormatError(f"model {self.name} has no tensor {name}")
        return t

    def vector(self, name: str, size: int | None = None) -> np.ndarray:
        """A 1-D tensor (norm weight, bias) as a float32 copy."""
        v = self.kernels.dequantize(self.tensor(name)).reshape(-1).astype(np.float32)
        if size is not None and v.shape[0] != size:
            raise FormatError(f"tensor {name} has {v.shape[0]} elements, expected {size}")
        return v

    def maybe_vector(self, name: str, size: int | None = None) -> np.ndarray | None:
        return self.vector(name, size) if self.has(name) else None

    def matrix(self, name: str, rows: int, cols: int) -> Weight:
        """A (rows, cols) weight in its stored dtype, with its @scale sibling when it has one."""
        t = self.tensor(name)
        return self._once(
            ("matrix", name, rows, cols),
            lambda: self._pinned(weight_of(t, self.tensors.get(name + SCALE_SUFFIX), rows, cols, name)),
        )

    def split_matrix(self, name: str, row_sizes: list[int], cols: int) -> list[Weight]:
        """A fused weight (sum(row_sizes), cols) split by rows into zero-copy Weights."""
        return self._once(
            ("split", name, tuple(row_sizes), cols),
            lambda: [self._pinned(w) for w in self._split(name, row_sizes, cols)],
        )

    def _split(self, name: str, row_sizes: list[int], cols: int) -> list[Weight]:
        t = self.tensor(name)
        scale = self.tensors.get(name + SCALE_SUFFIX)
        parts = split_rows(t, row_sizes, name)
        scales = split_rows(scale, row_sizes, name) if scale is not None else [None] * len(parts)
        return [weight_of(p, s, r, cols, name) for p, s, r in zip(parts, scales, row_sizes, strict=True)]

    def matrices(
        self, names: list[str] | str, row_sizes: list[int], cols: int
    ) -> tuple[list[Weight], tuple[Fused, ...]]:
        """Weights one input feeds (q/k/v, gate/up): tensors `names` (or one tensor split by rows), each as
        `matrix` gives it, plus each run of consecutive ones that repack alike fused into one matmul (fused.py)."""
        if isinstance(names, str):
            ws = self._split(names, row_sizes, cols)
        else:
            ws = [
                weight_of(self.tensor(n), self.tensors.get(n + SCALE_SUFFIX), r, cols, n)
                for n, r in zip(names, row_sizes, strict=True)
            ]
        key = ("matrices", names if isinstance(names, str) else tuple(names), tuple(row_sizes), cols)
        return self._once(key, lambda: fuse_runs(ws, self.repack, self._pinned, self._huge))

    def _pinned(self, w: Weight) -> Weight:
        """w with its bytes repacked for gemm_r16 (where it applies), same shape and dtype; the bytes it
        reads are queued for huge pages (`_huge`)."""
        if w.blocks.size == 0:
            return w
        if self.repack and gemm_r16.can_repack(w.dtype, w.rows, w.cols):
            r16 = r16_cache.repacked([w.blocks], w.dtype)
            self._huge(r16)
            return dataclasses.replace(w, r16=r16)
        self._huge(w.blocks)
        return w

    def _huge(self, a: np.ndarray) -> None:
        """Queue a's pages for the move onto huge pages where this reader moves them (hugepages.promote: a
        file mapping's; fresh arrays are numpy's, advised MADV_HUGEPAGE already)."""
        if self.huge:
            hugepages.promote(a)

    def stacked_r16(self, t: TensorData) -> np.ndarray | None:
        """A stored (E, rows, cols) tensor (MoE experts) repacked for gemm_r16 expert by expert: (E, rows/16,
        row blocks x gemm_r16.BYTES) uint8, read from the file with pread as `_pinned` does (the copy takes
        the place of the file's pages); None where gemm_r16 does not apply to one expert's matrix."""
        if len(t.shape) != 3 or not self.repack or t.nbytes == 0:
            return None
        E, rows, cols = t.shape
        if not gemm_r16.can_repack(t.dtype, rows, cols):
            return None
        # keyed by the tensor object (the source's, alive as long as the source), kept in the value
        return self._once(("stacked", id(t)), lambda: (t, self._stacked_r16(t)))[1]

    def _stacked_r16(self, t: TensorData) -> np.ndarray:
        E, rows, cols = t.shape
        # a group never spans two experts: rows % 16 == 0
        r16 = r16_cache.repacked([t.data.reshape(E * rows, -1)], t.dtype)
        self._huge(r16)
        return r16.reshape(E, rows // gemm_r16.GROUP, -1)

    def split_vector(self, name: str, sizes: list[int]) -> list[np.ndarray]:
        v = self.vector(name, sum(sizes))
        return np.split(v, np.cumsum(sizes)[:-1])

    def transposed_matrix(self, name: str, rows: int, cols: int) -> TensorData:
        """A weight stored (cols, rows) (HF GPT-2 Conv1D) as an f32 (rows, cols) tensor."""
        t = self.tensor(name)
        if t.shape != (cols, rows):
            raise FormatError(f"tensor {name} has shape {t.shape}, expected ({cols}, {rows})")
        scale = self.tensors.get(name + SCALE_SUFFIX)  # I8/I4: per stored row, i.e. per input feature here
        return TensorData.from_array(np.ascontiguousarray(self.kernels.dequantize(t, scale).T))


def split_rows(t: TensorData, row_sizes: list[int], name: str) -> list[TensorData]:
    """Row slices of a 2-D (or 1-D) tensor as zero-copy TensorData views (rows are whole blocks)."""
    rows = t.shape[0]
    if sum(row_sizes) != rows:
        raise FormatError(f"tensor {name} has {rows} rows, expected {sum(row_sizes)}")
    row_bytes = t.nbytes // rows if rows else 0
    out, r0 = [], 0
    for r in row_sizes:
        out.append(TensorData((r, *t.shape[1:]), t.dtype, t.data[r0 * row_bytes : (r0 + r) * row_bytes]))
        r0 += r
    return out


def weight_of(t: TensorData, scale: TensorData | None, rows: int, cols: int, name: str) -> Weight:
    if t.shape != (rows, cols):
        raise FormatError(f"tensor {name} has shape {t.shape}, expected ({rows}, {cols})")
    return prepare_weight(t, scale)


def f32_tensor(a: np.ndarray) -> TensorData:
    return TensorData.from_array(np.ascontiguousarray(a, dtype=np.float32))


def is_plain_float(t: TensorData) -> bool:
    return t.dtype in (DataType.F32, DataType.F16, DataType.BF16)

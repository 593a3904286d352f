"""Pack-time transforms (prune, quantize) planned up front and run lazily, one tensor at a time.

The writer asks each tensor for its shape/dtype/nbytes before writing anything (to lay out the
header) and for its bytes only when it reaches it. A `Deferred` tensor answers the first from
a one-row probe and computes the bytes on demand, so packing with --quantize/--prune holds one
transformed tensor at a time instead of the whole transformed model. The maths is in
quantize.py and prune.py (H1's); this module only schedules it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from modelc.artifact.prune import prune_tensor
from modelc.artifact.quantize import effective_kind, normalize_kind, quantize_tensor, should_quantize
from modelc.artifact.writer import release_pages
from modelc.ir import DataType, TensorData

_FLOATS = (DataType.F32, DataType.F16, DataType.BF16, DataType.F64)


@dataclass(slots=True)
class TransformStats:
    num_pruned: int = 0  # filled in as the writer pulls pruned tensors
    quantized: list[str] = field(default_factory=list)
    stored_as: dict[str, str] = field(default_factory=dict)  # quantized name -> kind used, where not the asked one


def transform(name: str, t: TensorData, prune: float | None, kind: str | None) -> tuple[dict[str, TensorData], int]:
    """({output name: tensor}, number of weights pruned) for one source tensor."""
    n = 0
    if prune is not None:
        t, n = prune_tensor(t, prune)
    return (quantize_tensor(name, t, kind) if kind else {name: t}), n


class _Job:
    """One source tensor's transform; its outputs (X, maybe X@scale) share one computation."""

    def __init__(self, name: str, t: TensorData, prune: float | None, kind: str | None, stats: TransformStats):
        self.name, self.t, self.prune, self.kind, self.stats = name, t, prune, kind, stats
        self.result: dict[str, TensorData] | None = None
        self.pending: set[str] = set()

    def take(self, name: str) -> TensorData:
        if self.result is None:
            self.result, n = transform(self.name, self.t, self.prune, self.kind)
            self.stats.num_pruned += n
            release_pages(self.t.data)  # the source's mapped pages are not needed again
        out = self.result[name]
        self.pending.discard(name)
        if not self.pending:
            self.result = None
        return out


class Deferred:
    """Shape, dtype and size known now; bytes computed when `data` is read (and not kept here)."""

    __slots__ = ("shape", "dtype", "_job", "_name")

    def __init__(self, shape: tuple[int, ...], dtype: DataType, job: _Job, name: str) -> None:
        self.shape, self.dtype, self._job, self._name = shape, dtype, job, name
        job.pending.add(name)

    @property
    def nbytes(self) -> int:
        return self.dtype.nbytes(self.shape)

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def data(self) -> np.ndarray:
        return self._job.take(self._name).data


def plan(
    tensors: dict[str, TensorData],
    *,
    prune: float | None = None,
    quantize: str | None = None,
    quantize_embeddings: bool = False,
    quantize_output: bool = False,
) -> tuple[dict[str, Any], TransformStats]:
    """The tensors to write (untouched ones as they are, transformed ones Deferred) and live stats."""
    kind = normalize_kind(quantize) if quantize else None
    if prune is not None:
        prune_tensor(TensorData.from_array(np.zeros((1, 1), np.float32)), prune)  # rejects a bad threshold now
    stats = TransformStats()
    out: dict[str, Any] = {}
    for name in sorted(tensors):
        t = tensors[name]
        q = kind is not None and should_quantize(
            name, t, kind, quantize_embeddings=quantize_embeddings, quantize_output=quantize_output
        )
        p = prune if prune and _prunable(t) else None
        if not q and p is None:
            out[name] = t
            continue
        job = _Job(name, t, p, kind if q else None, stats)
        probe, _ = transform(name, _first_row(t), p, job.kind)  # decides the output dtypes cheaply
        for out_name, sample in probe.items():
            shape = t.shape if out_name == name else (t.num_elements // t.shape[-1],)
            out[out_name] = Deferred(shape, sample.dtype, job, out_name)
        if q:
            stats.quantized.append(name)
            used = effective_kind(kind, t.shape[-1])
            if used != kind:  # rows that are not whole blocks of `kind` (quantize.effective_kind)
                stats.stored_as[name] = used
    return out, stats


def _first_row(t: TensorData) -> TensorData:
    """The first row of a 2-D+ tensor as a (1, cols) tensor (a view)."""
    return TensorData((1, t.shape[-1]), t.dtype, t.data[: t.dtype.nbytes((t.shape[-1],))])


def _prunable(t: TensorData) -> bool:
    """prune.py's rule: 2-D+ float tensors with elements."""
    return len(t.shape) >= 2 and t.num_elements > 0 and t.dtype in _FLOATS

"""Where a model's weights live while it serves: resident (repacked copies in memory) or streamed from its file.

`decide` picks the mode once, at load, from the memory this process may fill (modelc.memory: the cgroup's limit
and MemAvailable), the weights' bytes and the KV cache's; `assign` records it for the model source, so every model
built from that source (engines, a cold start's swap onto numba, a warm-up's shadow) reads it (`plan_for`).
Resident weights are anonymous memory (gemm_r16 copies, huge pages) that the kernel cannot reclaim: a model
larger than the memory left gets OOM-killed while it loads. Streamed weights stay in their file layout on the
read-only file mapping, page cache the kernel may drop, and streaming.py reads each layer ahead of the forward
and drops the ones behind, within `budget_bytes`. No numba here.
"""

from __future__ import annotations

import os
import re
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from modelc import architectures, memory
from modelc.artifact.structure import output_head
from modelc.cache.budget import default_context, kv_bytes_per_block
from modelc.config import KV_AUTO, WEIGHTS_MODES, resolve_kv_dtype
from modelc.errors import InvalidRequestError, MemoryLimitError
from modelc.models.bounds import check_counts

MODES = WEIGHTS_MODES
AUTO, RESIDENT, STREAMED = MODES
RESERVE_BYTES = 256 << 20
"""Memory a served model takes after the decision besides its weights and KV cache: numba's kernels loaded, the
scratch buffers, the tokenizer (TinyLlama served streamed: +130-180 MB over the ~150 MB a server has when it
decides). An underestimate costs a streamed model speed (the kernel reclaims its read-ahead pages), never a kill."""
HEAD = -1  # the group of the output projection (and the final norm): after the last layer
_LAYER = re.compile(r"(?:^|\.)(?:blk|layers|h|layer)\.(\d+)\.")


@dataclass(frozen=True, slots=True)
class WeightPlan:
    """The mode a model runs in and why; budget_bytes: the page cache a streamed model may keep of its file."""

    mode: str  # RESIDENT or STREAMED
    reason: str  # one line for `modelc inspect`, /props and the log
    weights_bytes: int  # the matrices' bytes (what repacking would copy)
    available_bytes: int | None  # what the process could still fill at the decision (None: unknown)
    budget_bytes: int = 0  # STREAMED: page cache of the weights kept at once (read ahead + kept resident)
    largest_group_bytes: int = 0  # the largest layer's (or the output projection's) matrices

    def describe(self) -> dict[str, Any]:
        return {"mode": self.mode, "reason": self.reason, "weights_bytes": self.weights_bytes,
                "available_bytes": self.available_bytes, "budget_bytes": self.budget_bytes}  # fmt: skip


def parse_mode(value: Any) -> str:
    if value in (None, ""):
        return AUTO
    if not isinstance(value, str) or value.lower() not in MODES:
        raise InvalidRequestError(f"weights mode must be one of {', '.join(MODES)}, got {value!r}", param="weights")
    return value.lower()


def layer_of(name: str) -> int | None:
    """The layer index a tensor name carries (blk.N. / layers.N. / h.N.), else None."""
    m = _LAYER.search(name)
    return int(m.group(1)) if m else None


def groups(source: Any) -> dict[int, list[str]]:
    """{layer index: its matrices' names, HEAD: the output projection's}: what one layer of a forward reads from
    the file, in order. Vectors (norms, biases) are copied at load and the embedding is read row by row: neither
    is in a group."""
    out: dict[int, list[str]] = {}
    for name, t in source.tensors.items():
        if len(t.shape) not in (2, 3) or not t.nbytes:
            continue
        i = layer_of(name)
        if i is not None:
            out.setdefault(i, []).append(name)
    head = head_name(source)
    if head is not None:
        out[HEAD] = [head]
    return dict(sorted(out.items(), key=lambda kv: (kv[0] == HEAD, kv[0])))


def head_name(source: Any) -> str | None:
    """The output projection's tensor (the embedding where tied), as the llama loader chooses it."""
    return output_head(source.tensors, getattr(source, "naming", "hf") or "hf")


def group_bytes(source: Any) -> dict[int, int]:
    return {g: sum(source.tensors[n].nbytes for n in names) for g, names in groups(source).items()}


def weights_bytes(source: Any) -> int:
    return sum(t.nbytes for t in source.tensors.values() if len(t.shape) in (2, 3))


def decide(
    source: Any, mode: str = AUTO, *, kv_bytes: int = 0, engines: int = 1, available_bytes: int | None = -1
) -> WeightPlan:
    """The WeightPlan for serving `source` with `kv_bytes` of KV cache (all engines). available_bytes: what the
    process may still fill (-1: read it now, modelc.memory.available_bytes; None: unknown, taken as enough).

    auto: resident where weights + KV + RESERVE_BYTES fit, else streamed. streamed: the weights' page cache may use
    what is left after KV + RESERVE_BYTES; MemoryLimitError where even the largest layer does not fit that, and
    for more than one engine (each would stream the whole file on its own)."""
    mode = parse_mode(mode)
    check_counts(source)  # a config claiming more than the tensors hold is that error, not a memory one
    avail = memory.available_bytes() if available_bytes == -1 else available_bytes
    total = weights_bytes(source)
    need = total + kv_bytes + RESERVE_BYTES
    gib = 1 << 30
    if mode == RESIDENT or (mode == AUTO and (avail is None or need <= avail)):
        why = "asked for" if mode == RESIDENT else "fits"
        room = "unknown" if avail is None else f"{avail / gib:.2f} GiB"
        return WeightPlan(RESIDENT, f"resident ({why}: {total / gib:.2f} GiB of weights, {room} free)", total, avail)
    sizes = group_bytes(source)
    largest = max(sizes.values(), default=0)
    name = getattr(source, "name", "model")
    if architectures.family(str(getattr(source, "architecture", ""))) != architectures.LLAMA:
        raise MemoryLimitError(
            f"model {name} needs {need / gib:.2f} GiB resident but {_room(avail)}; streaming its weights from the "
            f"file supports the llama family only, not {getattr(source, 'architecture', '?')}"
        )
    if engines > 1:
        raise MemoryLimitError(f"streamed weights serve with one engine (each would read the whole file): "
                               f"got --engines {engines} for model {name}")  # fmt: skip
    budget = total if avail is None else min(total, avail - kv_bytes - RESERVE_BYTES)
    budget = _budget_override(budget)
    if budget < largest:
        raise MemoryLimitError(
            f"model {name} cannot run in the memory left: {_room(avail)}, its KV cache takes {kv_bytes / gib:.2f} GiB "
            f"and {RESERVE_BYTES >> 20} MiB is kept for the runtime, leaving {max(0, budget) / gib:.2f} GiB for its "
            f"weights, less than its largest layer ({largest / gib:.2f} GiB) even streamed; lower "
            "--ctx-size/--kv-cache-mb or raise the memory limit"
        )
    why = "asked for" if mode == STREAMED else f"{need / gib:.2f} GiB resident > {_room(avail)}"
    return WeightPlan(STREAMED, f"streamed from the file ({why}; page budget {budget / gib:.2f} GiB)", total, avail,
                      budget, largest)  # fmt: skip


def would_run(source: Any) -> dict[str, Any]:
    """What `modelc run` with its defaults would pick here and now (`modelc inspect`): decide's plan with the
    default KV cache, or {"mode": "cannot run", "reason": ...}."""
    cfg = getattr(source, "config", None) or {}
    per_block = kv_bytes_per_block(cfg, 16, resolve_kv_dtype(KV_AUTO, source))
    trained = int(cfg.get("max_position_embeddings") or 0) or None
    _, tokens = default_context(trained, None, per_block)
    try:
        return decide(source, AUTO, kv_bytes=-(-tokens // 16) * per_block).describe()
    except MemoryLimitError as e:
        return {"mode": "cannot run", "reason": str(e)}


def _room(avail: int | None) -> str:
    return "free memory unknown" if avail is None else f"{avail / (1 << 30):.2f} GiB free"


def _budget_override(budget: int) -> int:
    """MODELC_STREAM_BUDGET_MB: a smaller page budget than the memory allows (tests, benchmarks)."""
    raw = os.environ.get("MODELC_STREAM_BUDGET_MB")
    if not raw:
        return budget
    try:
        return min(budget, int(float(raw) * (1 << 20)))
    except ValueError:
        return budget


# ---- the plan of each opened source --------------------------------------------------------------------------

# id(source) -> (what gives the source back, its plan): the plan is only given for that very object, so a later
# object that reuses a dropped source's id never inherits its plan
_PLANS: dict[int, tuple[Callable[[], Any], WeightPlan]] = {}
_LOCK = threading.Lock()


def assign(source: Any, plan: WeightPlan) -> None:
    """Record `plan` for `source` (dropped with it): every model built from it runs in that mode."""
    with _LOCK:
        try:
            ref: Callable[[], Any] = weakref.ref(source)
            if id(source) not in _PLANS:
                weakref.finalize(source, _PLANS.pop, id(source), None)
        except TypeError:  # a source without weak references (tests' plain objects): the entry holds it alive
            ref = lambda: source  # noqa: E731
        _PLANS[id(source)] = (ref, plan)


def plan_for(source: Any) -> WeightPlan | None:
    with _LOCK:
        entry = _PLANS.get(id(source))
    return entry[1] if entry is not None and entry[0]() is source else None


def streamed(source: Any) -> bool:
    plan = plan_for(source)
    return plan is not None and plan.mode == STREAMED

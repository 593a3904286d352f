"""Every message between actors: frozen, slotted dataclasses, conversation id first.

Commands are verbs (AddSequence, RunBatch...), events past tense (BatchDone, AbortAcked...).
A message that expects answers carries its reply address. Per-sequence events (TokenEmitted,
SequenceFinished) are the scheduler's own output types, re-exported here. No message carries a
callable or any object with behaviour to run on the receiver's side (tests/actors/test_rules.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from modelc.actors.mailbox import Address
from modelc.errors import ModelcError
from modelc.request import Finished, SamplingParams
from modelc.scheduler.batch import BatchPlan, BatchResult
from modelc.scheduler.output import SequenceFinished, TokenEmitted
from modelc.scheduler.slots import SlotState

__all__ = [
    "AbortAcked",
    "AbortSequence",
    "AddSequence",
    "AdapterLoaded",
    "AdapterUnloaded",
    "AdaptersScaled",
    "BatchDone",
    "DescribeSlots",
    "Embed",
    "Embedded",
    "LoadAdapter",
    "RunBatch",
    "ScaleAdapters",
    "SequenceAccepted",
    "SequenceFinished",
    "SequenceRejected",
    "SlotsDescribed",
    "Shutdown",
    "SwapKernels",
    "TokenEmitted",
    "UnloadAdapter",
]

# -- request side -> scheduler ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AddSequence:
    """Queue a sequence; the scheduler answers SequenceAccepted or SequenceRejected, then streams
    TokenEmitted / SequenceFinished to reply_to (whose mailbox must hold max_tokens + 4)."""

    seq_id: int
    token_ids: tuple[int, ...]
    params: SamplingParams
    reply_to: Address


@dataclass(frozen=True, slots=True)
class AbortSequence:
    """End a sequence at the next step boundary; AbortAcked goes to reply_to (None: no ack)."""

    seq_id: int
    reply_to: Address | None = None


@dataclass(frozen=True, slots=True)
class SequenceAccepted:
    seq_id: int


@dataclass(frozen=True, slots=True)
class SequenceRejected:
    seq_id: int
    error: ModelcError  # OverloadedError (queue full), InvalidRequestError (too long, ...)


@dataclass(frozen=True, slots=True)
class AbortAcked:
    """The sequence is gone and its blocks are free. finish is None when it had already ended."""

    seq_id: int
    finish: Finished | None


# -- admin (AsyncEngine) -> scheduler -> engines --------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoadAdapter:
    """Applied on every engine between steps; the scheduler answers AdapterLoaded to reply_to."""

    request_id: int
    name: str
    path: str
    alpha: float
    global_: bool
    reply_to: Address


@dataclass(frozen=True, slots=True)
class UnloadAdapter:
    request_id: int
    name: str
    reply_to: Address


@dataclass(frozen=True, slots=True)
class ScaleAdapters:
    """Set the global scales (llama.cpp's POST /lora-adapters): each named adapter's alpha multiplier for the
    sequences naming no adapter; the others are not applied to them. Every engine, between steps, as LoadAdapter;
    the scheduler answers AdaptersScaled to reply_to."""

    request_id: int
    scales: tuple[tuple[str, float], ...]
    reply_to: Address


@dataclass(frozen=True, slots=True)
class AdapterLoaded:
    """From an engine (engine_id >= 0) or, merged over all engines, from the scheduler (-1)."""

    request_id: int
    engine_id: int
    info: MappingProxyType | None = None  # what Runner.load_adapter returned (the first engine's), read-only
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class AdapterUnloaded:
    request_id: int
    engine_id: int
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class AdaptersScaled:
    request_id: int
    engine_id: int
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class Embed:
    """Pooled embeddings on one idle engine; the scheduler relays Embedded to reply_to."""

    request_id: int
    token_id_lists: tuple[tuple[int, ...], ...]
    reply_to: Address
    normalize: bool = True  # False: the pooled vectors as they are (llama.cpp's embd_normalize -1)


@dataclass(frozen=True, slots=True)
class Embedded:
    request_id: int
    engine_id: int
    vectors: np.ndarray | None  # (S, C) float32, read-only
    error: BaseException | None = None


@dataclass(frozen=True, slots=True)
class DescribeSlots:
    """What every engine's slots are doing (llama.cpp's GET /slots); the scheduler answers SlotsDescribed from
    its own state at once, between steps."""

    request_id: int
    reply_to: Address


@dataclass(frozen=True, slots=True)
class SlotsDescribed:
    request_id: int
    slots: tuple[SlotState, ...]  # engine by engine, slot by slot


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Scheduler: abort every sequence, wait for the engines to go idle, stop them, stop.
    Engine: stop after the current message."""

    reason: str = "shutdown"


# -- scheduler <-> engine -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunBatch:
    """Run a plan. An engine may hold several: the one running and the ones the scheduler planned ahead
    (scheduler/scheduler.py: plans in flight); it runs them in order. `epoch` is the engine's restart count
    the plan was made for: a rebuilt engine answers an older plan without running it."""

    engine_id: int
    plan: BatchPlan
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class BatchDone:
    """The engine finished a plan (epoch: the RunBatch's). engine_reset: the forward raised, the runner is being
    rebuilt (KV pages and per-sequence state are gone). dropped: a plan of an older epoch, not run."""

    engine_id: int
    plan: BatchPlan
    result: BatchResult
    epoch: int = 0
    engine_reset: bool = False
    dropped: bool = False


@dataclass(frozen=True, slots=True)
class SwapKernels:
    """From the warm-up (engine/warm.py) to an engine: the numba kernels are ready; rebuild the runner's
    model on them between batches (engine/warm.swap_kernels). No answer."""

    reason: str = "warm-up done"

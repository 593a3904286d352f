"""Sequence: one request's tokens and progress, as the scheduler sees it. Lives only in the scheduler.

SequenceStatus is ordered so that "finished" is one comparison; FINISH_REASONS is the one map from
a finished status to the API's finish_reason.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

from modelc.request import SamplingParams
from modelc.scheduler.speculation import SpecState


class SequenceStatus(enum.IntEnum):
    WAITING = 0  # queued without blocks: new, or preempted and waiting to recompute
    RUNNING = 1  # holds blocks; gets tokens every step until it finishes
    FINISHED_STOPPED = 2  # EOS/EOT, a stop token id, a finished constraint, or a stop string
    FINISHED_LENGTH = 3  # max_tokens, max_model_len, or more KV than the whole pool
    FINISHED_ABORTED = 4  # client abort or shutdown
    FINISHED_ERROR = 5  # the forward pass failed

    @property
    def is_finished(self) -> bool:
        return self >= SequenceStatus.FINISHED_STOPPED


FINISH_REASONS = {
    SequenceStatus.FINISHED_STOPPED: "stop",
    SequenceStatus.FINISHED_LENGTH: "length",
    SequenceStatus.FINISHED_ABORTED: "abort",
    SequenceStatus.FINISHED_ERROR: "error",
}


@dataclass(slots=True, eq=False)
class Sequence:
    """token_ids = prompt + output so far. The rule: each step computes some of the
    num_tokens - num_computed_tokens tokens not yet in the KV cache (prefill, chunk or decode)."""

    seq_id: int
    token_ids: list[int]
    params: SamplingParams
    num_prompt_tokens: int = -1
    arrival: int = 0  # set by Scheduler.add; FCFS order within a priority
    status: SequenceStatus = SequenceStatus.WAITING
    num_computed_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache at first admission
    num_preemptions: int = 0
    num_dropped: int = 0  # tokens a context shift removed from token_ids (which then holds the context only)
    engine_has_state: bool = False  # the engine created its per-sequence sampler state
    abort_requested: bool = False  # abort arrived while the sequence was in a plan in flight
    # Async scheduling (scheduler.py, NOTE on plans in flight): tokens of this sequence in plans sent and not
    # yet updated, and how many tokens those plans sample (known only when they come back: placeholders)
    num_inflight_tokens: int = 0
    num_placeholders: int = 0
    added_s: float = 0.0  # time.monotonic() at Scheduler.add
    queue_time_s: float | None = None  # add -> first admission to the running set
    spec: SpecState = field(default_factory=lambda: SpecState())  # speculative decoding, per sequence
    draft_context: bool = False  # a context shift moved the tokens: the engine's draft needs them again
    adapter: object = field(init=False)  # params.adapter_key: the adapter part of its prefix-cache keys
    cache_salt: str | None = None  # set by Scheduler.add: prefix-cache blocks are shared only with the same salt
    # set by Scheduler.add, fixed for the sequence's life (its params and the engine's config do not change):
    limit: int = 0  # the most tokens its context may hold (context_shift.context_limit)
    may_draft: bool = False  # it speculates at all (speculation.speculates)
    table_array: np.ndarray | None = field(default=None, init=False, repr=False)  # scheduler's cache

    def __post_init__(self) -> None:
        self.token_ids = list(self.token_ids)
        if self.num_prompt_tokens < 0:
            self.num_prompt_tokens = len(self.token_ids)
        self.adapter = self.params.adapter_key

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) + self.num_dropped - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        """The output tokens still in the context (all of them unless a context shift dropped some)."""
        return self.token_ids[len(self.token_ids) - min(self.num_output_tokens, len(self.token_ids)) :]

    @property
    def sort_key(self) -> tuple[int, int]:
        """Lower runs first: priority, then arrival (FCFS)."""
        return (self.params.priority, self.arrival)

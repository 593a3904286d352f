"""Slots: what each of an engine's running places (max_num_seqs of them) is doing, as llama-server's GET /slots
shows its slots. Pure: the SchedulerActor builds them from its own Scheduler's running sequences when asked
(DescribeSlots) and the frozen SlotStates travel by message; no awaits, nothing shared.
"""

from __future__ import annotations

from dataclasses import dataclass

from modelc.request import SamplingParams
from modelc.scheduler.context_shift import context_limit
from modelc.scheduler.scheduler import Scheduler


@dataclass(frozen=True, slots=True)
class SlotState:
    slot_id: int  # engine i's slots are i * max_num_seqs ..; a running sequence keeps its slot while it runs
    engine_id: int
    n_ctx: int  # the most tokens its context may hold (the sequence's own limit while one runs)
    seq_id: int | None = None  # None: idle
    params: SamplingParams | None = None
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens the prefix cache served at admission
    num_computed_tokens: int = 0  # tokens in its KV cache now
    num_output_tokens: int = 0
    speculative: bool = False  # it drafts tokens (speculative decoding)

    @property
    def is_processing(self) -> bool:
        return self.seq_id is not None


class SlotMap:
    """Which slot each running sequence of one engine holds: the lowest free one when it is first seen, kept
    while it runs. Updated only when slots are described (a sequence that came and went unseen held none)."""

    def __init__(self, engine_id: int, num_slots: int) -> None:
        self.engine_id = engine_id
        self.num_slots = num_slots
        self.slot_of: dict[int, int] = {}  # seq id -> slot index within the engine

    def describe(self, scheduler: Scheduler) -> tuple[SlotState, ...]:
        running = scheduler.running
        live = {s.seq_id for s in running}
        self.slot_of = {i: slot for i, slot in self.slot_of.items() if i in live}
        free = sorted(set(range(max(self.num_slots, len(running)))) - set(self.slot_of.values()))
        for seq in running:
            if seq.seq_id not in self.slot_of:
                self.slot_of[seq.seq_id] = free.pop(0)
        first = self.engine_id * self.num_slots
        n_ctx = context_limit(
            scheduler.config.max_model_len, None, scheduler.pool.num_blocks * scheduler.pool.block_size
        )
        slots = [SlotState(first + i, self.engine_id, n_ctx) for i in range(max(self.num_slots, len(running)))]
        for seq in running:
            i = self.slot_of[seq.seq_id]
            slots[i] = SlotState(
                first + i,
                self.engine_id,
                seq.limit or n_ctx,
                seq.seq_id,
                seq.params,
                seq.num_prompt_tokens,
                seq.num_cached_tokens,
                seq.num_computed_tokens,
                seq.num_output_tokens,
                seq.may_draft,
            )
        return tuple(slots)

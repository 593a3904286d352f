"""Scheduler: continuous batching for one engine. add/abort sequences, schedule() a BatchPlan,
update() it with the engine's BatchResult. Synchronous: no awaits, no threads, no numpy maths.
Over 500 lines: admission, preemption, context shift, speculation and plans in flight all read and
move the same per-sequence counters, in one order per step; split apart they would pass them around.

NOTE: the one rule (vLLM v1). Every sequence has num_tokens and num_computed_tokens; a step gives
each sequence some of the difference under a token budget. Running sequences go first (oldest
first: a decode is one token, a chunked prefill gets what budget is left), then waiting sequences
are admitted in (priority, arrival) order, their prompt discounted by the prefix-cache hit. When
the pool runs out of blocks the newest running sequence is preempted: its blocks are freed and it
goes back to the waiting queue to recompute prompt + generated tokens (the engine keeps its sampler
state, so is_new stays False). A step that preempted admits nobody.

NOTE: plans in flight (async scheduling, vLLM v1's). schedule() may be called again before the plan it
returned is updated, so the engine finds its next plan waiting when a forward ends; updates come in
plan order. A sequence in a plan in flight counts those tokens (num_inflight_tokens) and the tokens that
plan will sample (num_placeholders: unknown until it comes back). The rule stays one rule over
num_tokens + num_placeholders and num_computed_tokens + num_inflight_tokens: a decoding sequence gets a
one-token chunk whose token is the engine's own last sample (SeqChunk.placeholder). While a plan is in
flight nothing is preempted or context-shifted (its sequences' blocks are in use), a sequence whose
plan in flight ends it for sure (max_tokens, the context limit) or carries drafts (how many it keeps is
unknown) waits for that plan's update, and a sequence that ends at an update (EOS, a stop token, an
abort) has its chunks in later plans dropped: the work is wasted, never wrong, since an engine runs
plans in order and the blocks it freed are reused only by later plans.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from modelc.cache.block_pool import BlockPool
from modelc.config import SchedulerConfig
from modelc.errors import InvalidRequestError, OverloadedError
from modelc.request import Finished
from modelc.scheduler.batch import PLACEHOLDER, BatchPlan, BatchResult, KVShift, SampledToken, SeqChunk
from modelc.scheduler.context_shift import context_limit, plan_shift, resolve_keep, truncate_prompt
from modelc.scheduler.output import SeqEvent, SequenceFinished, TokenEmitted
from modelc.scheduler.sequence import FINISH_REASONS, Sequence, SequenceStatus
from modelc.scheduler.speculation import SpecStats, plan_draft, speculates

S = SequenceStatus


def _frozen_i32(values: list[int]) -> np.ndarray:
    arr = np.array(values, dtype=np.int32)
    arr.flags.writeable = False
    return arr


_PLACEHOLDER_IDS = _frozen_i32([PLACEHOLDER])  # every placeholder chunk's token_ids (read-only, shared)


class _MustDrain(Exception):
    """schedule() with plans in flight met what only a schedule with none in flight may do: a preemption
    or a context shift. It plans nothing, so the engine drains and the next schedule() does it."""


@dataclass(slots=True)
class _Flight:
    """A plan sent to the engine and not yet updated."""

    plan: BatchPlan
    spec: dict[int, tuple[int, list[int] | None]]  # seq id -> (k, prompt-lookup drafts) of its chunk


def _plain_sample(chunk: SeqChunk) -> bool:
    """The chunk samples exactly one token (no drafts to verify): one placeholder while in flight."""
    return chunk.sample and not chunk.num_draft and not chunk.draft_k


class Scheduler:
    def __init__(self, config: SchedulerConfig, block_pool: BlockPool, *, debug: bool = False) -> None:
        self.config = config
        self.pool = block_pool
        self.debug = debug  # also run the O(num_blocks) pool check after every schedule()
        self.eos_ids = frozenset(config.eos_token_ids)
        self.waiting: list[Sequence] = []  # sorted by sort_key
        self.running: list[Sequence] = []  # sorted by sort_key; preemption victims come from the end
        self._seqs: dict[int, Sequence] = {}
        self._arrivals = itertools.count()
        self._step_ids = itertools.count()
        self._flights: deque[_Flight] = deque()  # plans in flight, oldest first (updated in this order)
        self._freed: list[int] = []  # ended sequences the engine still holds state for
        self._events: list[SeqEvent] = []  # ends decided inside the schedule() running now
        self._spec: dict[int, tuple[int, list[int] | None]] = {}  # seq id -> (k, prompt-lookup drafts) this plan
        self.spec_stats = SpecStats()
        self.num_preemptions = 0
        self.num_context_shifts = 0
        self._shifts: list[KVShift] = []  # context shifts decided in this schedule()

    # -- requests ------------------------------------------------------------------------------

    def add(self, seq: Sequence) -> list[SeqEvent]:
        """Queue a sequence. OverloadedError when the waiting queue is full."""
        if seq.seq_id in self._seqs:
            raise InvalidRequestError(f"sequence id {seq.seq_id} is already scheduled")
        if seq.num_tokens == 0:
            raise InvalidRequestError("the prompt is empty", param="prompt")
        capacity = self.pool.num_blocks * self.pool.block_size
        limit = self._limit(seq)
        if seq.num_tokens >= limit and seq.params.truncate:
            keep = resolve_keep(seq.params.n_keep, self.config.anchor_tokens, seq.num_tokens)
            seq.token_ids = truncate_prompt(seq.token_ids, limit, keep)
            seq.num_prompt_tokens = len(seq.token_ids)
        if self.config.rope_long_after and seq.num_prompt_tokens > self.config.rope_long_after:
            seq.cache_salt = "long-rope"
        if seq.num_tokens >= capacity:
            raise InvalidRequestError(f"the prompt has {seq.num_tokens} tokens; the KV cache holds {capacity}")
        if seq.num_tokens >= limit:
            raise InvalidRequestError(
                f"the prompt has {seq.num_tokens} tokens; the context is {limit} (send truncate: true to cut it)",
                param="prompt",
            )
        if len(self.waiting) >= self.config.max_queue:
            raise OverloadedError(f"the waiting queue is full ({self.config.max_queue} requests)")
        seq.arrival = next(self._arrivals)
        seq.added_s = time.monotonic()
        seq.limit, seq.may_draft = limit, speculates(seq, self.config)
        if seq.params.max_tokens == 0:
            seq.status = S.FINISHED_LENGTH
            return [SequenceFinished(seq.seq_id, self._finish_info(seq))]
        seq.status = S.WAITING
        self._seqs[seq.seq_id] = seq
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)
        return []

    def has(self, seq_id: int) -> bool:
        return seq_id in self._seqs

    def abort(self, seq_id: int) -> list[SeqEvent]:
        """End a sequence now, or at the update of the first plan in flight holding it (then [] now)."""
        seq = self._seqs.get(seq_id)
        if seq is None:
            return []
        if seq.num_inflight_tokens:
            seq.abort_requested = True
            return []
        return [SequenceFinished(seq_id, self._finish(seq, S.FINISHED_ABORTED))]

    def fail_adapter(self, adapter: str, error: str) -> list[SeqEvent]:
        """End every sequence using `adapter` with an error (it is being unloaded). Between steps only."""
        assert not self._flights
        doomed = [seq for seq in self._seqs.values() if adapter in seq.params.adapter_names]
        return [SequenceFinished(s.seq_id, self._finish(s, S.FINISHED_ERROR, error)) for s in doomed]

    def abort_all(self) -> list[SeqEvent]:
        """Shutdown: end every sequence not in a plan in flight (those end at its update)."""
        return [ev for seq_id in list(self._seqs) for ev in self.abort(seq_id)]

    def queue_full(self) -> bool:
        """The waiting queue is at max_queue: add() would refuse a sequence."""
        return len(self.waiting) >= self.config.max_queue

    def num_sequences(self) -> int:
        """Sequences waiting or running."""
        return len(self.waiting) + len(self.running)

    def num_cached_blocks(self, seq: Sequence) -> int:
        """Blocks of `seq`'s tokens the prefix cache already holds."""
        return self.pool.get_computed_blocks(seq)[1]

    def reset_prefix_cache(self) -> None:
        """Forget every cached prefix (the weights behind them changed: an adapter swap)."""
        self.pool.reset_prefix_cache()

    # -- steps ---------------------------------------------------------------------------------

    @property
    def has_work(self) -> bool:
        return bool(self.running or self.waiting)

    @property
    def num_in_flight(self) -> int:
        """Plans returned by schedule() and not yet updated."""
        return len(self._flights)

    def schedule(self) -> tuple[BatchPlan | None, list[SeqEvent]]:
        """The next step's plan (None: nothing to compute now) and the sequences this decided to end (one
        that outgrew the pool or its context). With plans in flight, the plan that follows them."""
        scheduled: dict[int, int] = {}
        try:
            budget, preempted = self._schedule_running(scheduled, self.config.max_batch_tokens, bool(self._flights))
        except _MustDrain:  # no plan until the ones in flight are updated; the blocks appended meanwhile stay
            scheduled.clear()
            preempted = True
        if not preempted:
            self._schedule_waiting(scheduled, budget)
        events, self._events = self._events, []
        if not scheduled:
            self._shifts.clear()
            self._spec = {}
            return None, events
        plan = self._build_plan(scheduled)
        self._flights.append(_Flight(plan, self._spec))
        self._spec = {}
        self._check_invariants(plan)
        return plan, events

    def release_plan(self) -> BatchPlan | None:
        """Between steps with nothing to compute: a plan without chunks that tells the engine which ended
        sequences to forget (else the next plan carries them), or None when there are none."""
        assert not self._flights
        if not self._freed:
            return None
        freed, self._freed = tuple(self._freed), []
        return BatchPlan(step_id=next(self._step_ids), chunks=(), freed_seq_ids=freed)

    @staticmethod
    def _remaining(seq: Sequence) -> int:
        """Tokens of `seq` in no plan yet (placeholders included: one rule with plans in flight)."""
        return seq.num_tokens + seq.num_placeholders - seq.num_computed_tokens - seq.num_inflight_tokens

    def _waits_for_update(self, seq: Sequence) -> bool:
        """A sequence in a plan in flight that the next plan cannot take: it has nothing left, or that plan
        may change what comes next in a way only its update tells (see the NOTE on plans in flight)."""
        ahead = len(seq.token_ids) + seq.num_placeholders  # its tokens, those in flight included
        if seq.abort_requested or ahead - seq.num_computed_tokens - seq.num_inflight_tokens <= 0:
            return True
        for flight in self._flights:
            if flight.spec and seq.seq_id in flight.spec:
                return True  # it carries drafts: how many it keeps is unknown
        if not seq.num_placeholders:
            return False  # a chunked prefill: its next chunk is known
        if seq.num_output_tokens + seq.num_placeholders >= seq.params.max_tokens:
            return True  # its last token is in flight
        if seq.may_draft and seq.spec.skip == 0:
            return True  # its next step drafts, after the last known token
        return ahead >= seq.limit  # it ends or shifts at the limit

    def _schedule_running(self, scheduled: dict[int, int], budget: int, ahead: bool) -> tuple[int, bool]:
        """Running sequences first. ahead: plans are in flight, so nothing is preempted or shifted.
        (Once per step over every running sequence, on the event loop's thread: kept lean.)"""
        preempted = False
        running = self.running
        # Drafts only use the budget left after every running sequence's own tokens, in small steps,
        # shared fairly: a few drafts for every decoding sequence beat many for the first ones.
        own = decoders = 0
        for s in running:
            left = len(s.token_ids) + s.num_placeholders - s.num_computed_tokens - s.num_inflight_tokens
            own += left
            decoders += left == 1
        spare = min(budget, self.config.spec_max_step_tokens) - own
        block_size = self.pool.block_size
        capacity = self.pool.num_blocks * block_size
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            if seq.num_inflight_tokens and self._waits_for_update(seq):
                i += 1
                continue
            if not seq.num_inflight_tokens and len(seq.token_ids) >= seq.limit and self._shifting(seq):
                if ahead:
                    raise _MustDrain  # a shift moves its blocks
                if not self._shift(seq):
                    self._events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_LENGTH)))
                    continue
            total = len(seq.token_ids) + seq.num_placeholders
            n = min(total - seq.num_computed_tokens - seq.num_inflight_tokens, budget)
            assert n > 0, f"running sequence {seq.seq_id} has nothing to compute"
            need = seq.num_computed_tokens + seq.num_inflight_tokens + n
            if need > capacity:
                finish = self._finish(seq, S.FINISHED_LENGTH)  # can never fit, even alone
                self._events.append(SequenceFinished(seq.seq_id, finish))
                continue
            k, drafts = 0, None
            if total == need:  # a decode
                if seq.may_draft:
                    if not seq.num_placeholders:  # drafts follow the last known token
                        k, drafts = self._draft(seq, min(spare // max(decoders, 1), budget - n))
                    else:  # behind a placeholder: one of its back-off's plain steps
                        assert seq.spec.skip > 0
                        seq.spec.skip -= 1
                decoders -= 1
            if k > 0 and self.pool.append(seq, need + k):
                self._spec[seq.seq_id] = (k, drafts)
                scheduled[seq.seq_id] = n + k
                budget -= n + k
                spare -= k
                i += 1
                continue
            table = seq.table_array  # the table as of its last plan, or None (a grown table refreshes it there)
            if table is not None and len(table) * block_size >= need:
                pass  # its blocks cover the step already (a decode within its last block)
            elif ahead:
                if not self.pool.append(seq, need):
                    raise _MustDrain  # a preemption: the sequences of the plans in flight use their blocks
            else:
                while not self.pool.append(seq, need):
                    victim = running[-1]
                    self._preempt(victim)
                    preempted = True
                    if victim is seq:
                        break
                else:
                    scheduled[seq.seq_id] = n
                    budget -= n
                    i += 1
                continue
            scheduled[seq.seq_id] = n
            budget -= n
            i += 1
        return budget, preempted

    def _draft(self, seq: Sequence, limit: int) -> tuple[int, list[int] | None]:
        """(k, drafts) for a decoding sequence (speculation.plan_draft); (0, None) = a plain decode."""
        room = min(limit, self._limit(seq) - seq.num_tokens - 1)  # never draft past the context limit
        return plan_draft(seq, self.config, room, self.spec_stats)

    def _schedule_waiting(self, scheduled: dict[int, int], budget: int) -> None:
        while self.waiting and budget > 0 and len(self.running) < self.config.max_num_seqs:
            seq = self.waiting[0]
            if self._shifting(seq) and seq.num_tokens >= seq.limit and not self._shift(seq):  # preempted
                self._events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_LENGTH)))
                continue
            computed, num_hit = self.pool.get_computed_blocks(seq)
            n = min(seq.num_tokens - num_hit, budget)
            if not self.pool.allocate(seq, num_hit + n, computed):
                break  # FCFS: nobody overtakes the head of the queue
            self.waiting.pop(0)
            seq.num_computed_tokens = num_hit
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = num_hit
                seq.queue_time_s = time.monotonic() - seq.added_s
            seq.status = S.RUNNING
            bisect.insort(self.running, seq, key=lambda s: s.sort_key)
            scheduled[seq.seq_id] = n
            budget -= n

    def _limit(self, seq: Sequence) -> int:
        capacity = self.pool.num_blocks * self.pool.block_size
        return context_limit(self.config.max_model_len, seq.params.max_context, capacity)

    def _shifting(self, seq: Sequence) -> bool:
        return seq.params.context_shift and self.config.context_shift_ok

    def _shift(self, seq: Sequence) -> bool:
        """Context shift (context_shift.py) of a sequence at its limit; False when it cannot shift."""
        if not self._shifting(seq):
            return False
        keep = resolve_keep(seq.params.n_keep, self.config.anchor_tokens, seq.num_prompt_tokens)
        bs = self.pool.block_size
        running = seq.status is S.RUNNING
        plan = plan_shift(seq.num_tokens, seq.num_computed_tokens if running else seq.num_tokens - 1, keep, bs)
        if plan is None:
            return False
        kb, db = plan
        if running:  # the KV moves too; a waiting (preempted) sequence just recomputes the shorter context
            moved = self.pool.shift(seq.seq_id, kb, db)
            if moved is None:
                return False
            self._shifts.append(KVShift(seq.seq_id, tuple(moved[0]), -db * bs, tuple(moved[1])))
            seq.num_computed_tokens -= db * bs
            seq.table_array = None
        del seq.token_ids[kb * bs : (kb + db) * bs]
        seq.draft_context = True
        seq.num_dropped += db * bs
        self.num_context_shifts += 1
        return True

    def _preempt(self, seq: Sequence) -> None:
        assert not seq.num_inflight_tokens, "preempting a sequence whose blocks a plan in flight uses"
        self.running.remove(seq)
        self.pool.free(seq.seq_id)
        seq.status = S.WAITING
        seq.table_array = None
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        self.num_preemptions += 1
        bisect.insort(self.waiting, seq, key=lambda s: s.sort_key)

    def _build_plan(self, scheduled: dict[int, int]) -> BatchPlan:
        chunks = []
        draft_model = self.config.speculative == "draft"
        for seq_id, n in scheduled.items():
            seq = self._seqs[seq_id]
            start = seq.num_computed_tokens + seq.num_inflight_tokens
            k, drafts = self._spec.get(seq_id, (0, None))
            n -= k
            total = len(seq.token_ids) + seq.num_placeholders
            placeholder = start >= len(seq.token_ids)  # the token a plan in flight samples: a decode of one token
            if placeholder:
                assert n == 1 and seq.num_placeholders and not drafts
                ids = _PLACEHOLDER_IDS
            else:
                known = seq.token_ids[start : start + n]
                assert len(known) == n
                ids = _frozen_i32(known + drafts if drafts else known)
            sample = start + n == total
            num_draft = len(drafts) if drafts else 0
            draft_k = k if drafts is None else 0
            num_out = seq.num_output_tokens
            chunks.append(
                SeqChunk(
                    seq_id=seq_id,
                    token_ids=ids,  # (n + drafts,)
                    start_pos=start,
                    block_table=self._table_array(seq),  # (num_blocks,)
                    sample=sample,
                    params=seq.params,
                    prompt_len=max(0, len(seq.token_ids) - num_out),  # prompt tokens still in context
                    num_output_tokens=num_out + seq.num_placeholders,
                    is_new=not seq.engine_has_state,
                    num_draft=num_draft,
                    draft_k=draft_k,
                    context_ids=(
                        _frozen_i32(seq.token_ids[:start])
                        if draft_model and start and (not seq.engine_has_state or seq.draft_context)
                        else None
                    ),
                    placeholder=placeholder,
                )
            )
            seq.engine_has_state = True
            seq.draft_context = False
            seq.num_inflight_tokens += n
            seq.num_placeholders += sample and not num_draft and not draft_k  # _plain_sample(the chunk)
        freed, self._freed = tuple(self._freed), []
        # a sequence preempted after its shift recomputes instead: its moved pages may be another's now
        shifts = tuple(s for s in self._shifts if s.seq_id in scheduled) if self._shifts else ()
        self._shifts = []
        return BatchPlan(step_id=next(self._step_ids), chunks=tuple(chunks), freed_seq_ids=freed, kv_shifts=shifts)

    def _table_array(self, seq: Sequence) -> np.ndarray:
        """The block table as a read-only int32 array, rebuilt only when it grew (tables only
        grow between preemptions, and _preempt drops the cached array)."""
        table = self.pool.block_table(seq.seq_id)
        if seq.table_array is None or len(seq.table_array) != len(table):
            seq.table_array = _frozen_i32(table)
        return seq.table_array

    def _check_invariants(self, plan: BatchPlan) -> None:
        """After schedule() appended `plan` to the plans in flight. The per-sequence checks only with `debug`
        (the tests'): they cost a pass over the running set every step."""
        assert plan.num_tokens <= self.config.max_batch_tokens, "token budget exceeded"
        assert len(self.running) <= self.config.max_num_seqs, "too many running sequences"
        assert self.pool.num_free_blocks + self.pool.num_used_blocks == self.pool.num_blocks
        if not self.debug:
            return
        spec = self._flights[-1].spec
        for seq in self.running:
            assert seq.status is S.RUNNING
            assert 0 <= seq.num_placeholders <= len(self._flights) and seq.num_inflight_tokens >= 0
            in_use = seq.num_computed_tokens + seq.num_inflight_tokens + spec.get(seq.seq_id, (0, None))[0]
            assert self.pool.has_blocks(seq.seq_id, in_use), f"running sequence {seq.seq_id} lacks blocks"
        for seq in self.waiting:
            assert seq.status is S.WAITING and not self.pool.block_table(seq.seq_id)
        self.pool.check()

    # -- results -------------------------------------------------------------------------------

    def update(self, plan: BatchPlan, result: BatchResult) -> list[SeqEvent]:
        """Apply the engine's result for the oldest plan in flight: advance, append tokens, apply stop rules,
        free finished. A sequence that ended while this plan was in flight has its chunk dropped."""
        assert self._flights and plan is self._flights[0].plan, "result for another plan"
        assert result.step_id == plan.step_id, "result for another plan"
        self._flights.popleft()
        events: list[SeqEvent] = []
        live = []
        for chunk in plan.chunks:
            seq = self._seqs.get(chunk.seq_id)
            if seq is None:
                continue  # it ended (a stop, an abort) at an earlier update: this step's work for it is dropped
            seq.num_inflight_tokens -= len(chunk.token_ids) - chunk.num_draft
            seq.num_placeholders -= _plain_sample(chunk)
            live.append((seq, chunk))
        if result.error is not None:
            for seq, _ in live:
                events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ERROR, result.error)))
            return events
        bs = self.pool.block_size
        sampled: dict[int, list[SampledToken]] = {}
        for t in result.tokens:
            if t.seq_id in sampled:
                sampled[t.seq_id].append(t)
            else:
                sampled[t.seq_id] = [t]
        for seq, chunk in live:
            if chunk.num_draft or chunk.draft_k:  # verified drafts: nothing past the accepted ones is kept
                if seq.abort_requested:
                    events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ABORTED)))
                else:
                    events.extend(self._update_spec(seq, chunk, sampled.get(seq.seq_id, [])))
                continue
            done = seq.num_computed_tokens
            seq.num_computed_tokens += len(chunk.token_ids)
            if seq.num_computed_tokens // bs > done // bs:  # a block filled up: register it (prefix caching)
                self.pool.cache_blocks(seq, seq.num_computed_tokens)
            if seq.abort_requested:
                events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ABORTED)))
            elif chunk.sample:
                tokens = sampled.get(seq.seq_id)
                if not tokens:
                    error = f"the engine returned no token for sequence {seq.seq_id}"
                    events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ERROR, error)))
                else:
                    events.append(self._append_token(seq, tokens[0]))
        return events

    def _update_spec(self, seq: Sequence, chunk: SeqChunk, tokens: list[SampledToken]) -> list[SeqEvent]:
        """A verified chunk: append the accepted drafts and the target's next token (stop rules apply
        token by token), keep the KV of the last known token and the accepted drafts, roll the rest
        back: num_computed_tokens stops there and the blocks past it go back to the pool."""
        drafted = chunk.num_draft or chunk.draft_k
        accepted = len(tokens) - 1
        if not 0 <= accepted <= drafted:
            error = f"the engine returned {len(tokens)} tokens for {drafted} drafts of sequence {seq.seq_id}"
            return [SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ERROR, error))]
        seq.spec.record(drafted, accepted)
        self.spec_stats.add(drafted, accepted)
        computed = chunk.start_pos + len(chunk.token_ids) - chunk.num_draft + accepted
        events: list[SeqEvent] = []
        for token in tokens:
            ev = self._append_token(seq, token)
            events.append(ev)
            if ev.finish is not None:
                return events  # finished: its blocks are already free
        seq.num_computed_tokens = computed
        self.pool.cache_blocks(seq, computed)
        self.pool.truncate(seq.seq_id, computed)
        seq.table_array = None
        return events

    def _append_token(self, seq: Sequence, token: SampledToken) -> TokenEmitted:
        p = seq.params
        seq.token_ids.append(token.token_id)
        num_out = seq.num_output_tokens
        is_stop_id = (token.token_id in self.eos_ids and not p.ignore_eos) or token.token_id in p.stop_token_ids
        stop_token = is_stop_id and num_out > p.min_tokens
        # The model's, the request's and the pool's limit (as vLLM's max_model_len): prompt + output never
        # exceeds what the KV cache holds, so the last token is not one past it (a shifting sequence goes on).
        at_limit = seq.num_tokens >= seq.limit and not self._shifting(seq)
        if stop_token or token.constraint_done:
            status = S.FINISHED_STOPPED
        elif num_out >= p.max_tokens or at_limit:
            status = S.FINISHED_LENGTH
        else:
            return TokenEmitted(seq.seq_id, token)
        return TokenEmitted(seq.seq_id, token, stop_token, self._finish(seq, status))

    def _finish(self, seq: Sequence, status: SequenceStatus, error: str | None = None) -> Finished:
        assert status.is_finished
        if seq.status is S.RUNNING:
            self.running.remove(seq)
        elif seq.status is S.WAITING:
            self.waiting.remove(seq)
        seq.status = status
        self.pool.free(seq.seq_id)
        del self._seqs[seq.seq_id]
        if seq.engine_has_state:
            self._freed.append(seq.seq_id)
        return self._finish_info(seq, error)

    @staticmethod
    def _finish_info(seq: Sequence, error: str | None = None) -> Finished:
        return Finished(
            FINISH_REASONS[seq.status],
            seq.num_prompt_tokens,
            seq.num_output_tokens,
            seq.num_cached_tokens,
            error,
            seq.queue_time_s,
        )

    # -- engine restarts, stats ----------------------------------------------------------------

    def reset_engine_state(self) -> list[SeqEvent]:
        """The engine lost its KV pages and per-sequence state (it was rebuilt, and drops the plans still in
        flight unrun): recompute everything from scratch. Returns the ends of sequences whose abort waited
        for those plans."""
        events = []
        for flight in self._flights:
            for chunk in flight.plan.chunks:
                seq = self._seqs.get(chunk.seq_id)
                if seq is None:
                    continue
                seq.num_inflight_tokens, seq.num_placeholders = 0, 0
                if seq.abort_requested:
                    events.append(SequenceFinished(seq.seq_id, self._finish(seq, S.FINISHED_ABORTED)))
        self._flights.clear()
        for seq in list(self.running):
            self._preempt(seq)
        for seq in self.waiting:
            seq.engine_has_state = False
        self._freed.clear()
        self.pool.reset_prefix_cache()
        return events

    def stats(self) -> dict[str, int]:
        pool = self.pool.stats()
        return {
            "running": len(self.running),
            "waiting": len(self.waiting),
            "kv_blocks_used": pool.num_used_blocks,
            "kv_blocks_total": pool.num_blocks,
            "prefix_queries": pool.prefix_queries,
            "prefix_hits": pool.prefix_hits,
            "preemptions": self.num_preemptions,
            "context_shifts": self.num_context_shifts,
            **self.spec_stats.as_dict(),
        }

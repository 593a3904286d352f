"""BatchPlan (scheduler -> engine) and BatchResult (engine -> scheduler): frozen data, no logic.

NOTE: a plan is a flat token list built from per-sequence chunks. Chunk i computes
tokens [start_pos, start_pos + len(token_ids)) of sequence seq_id; its KV goes to the
slots given by its block table (slot = block_table[pos // block_size] * block_size +
pos % block_size). When `sample` is set the chunk ends at the sequence's last known
token and the engine samples the next one (with speculation: the last known token plus the drafts,
and the engine returns every accepted draft plus one more token).

NOTE: a plan made while an earlier one is still running (async scheduling) cannot know the token that
plan samples for a decoding sequence. Its chunk then has one token, PLACEHOLDER, and `placeholder` set:
the engine, which runs plans in order, puts there the token it sampled for that sequence last.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelc.request import SamplingParams

PLACEHOLDER = -1  # a token id no vocabulary has: an engine that did not fill it in refuses the chunk


@dataclass(frozen=True, slots=True)
class SeqChunk:
    seq_id: int
    token_ids: np.ndarray  # (n,) int32, read-only
    start_pos: int  # == the sequence's num_computed_tokens before this step
    block_table: np.ndarray  # (num_blocks,) int32, covers positions [0, start_pos + n)
    sample: bool
    params: SamplingParams
    prompt_len: int  # tokens of the prompt (penalties/min_tokens need the split)
    num_output_tokens: int  # output tokens already generated before this step
    is_new: bool = False  # first chunk ever scheduled for this seq (engine creates its state)
    # Speculative decoding (docs/speculative.md). num_draft: the last num_draft token_ids are
    # drafted (prompt lookup) and are verified; draft_k: the engine's draft model proposes up to
    # draft_k tokens after token_ids and the target verifies them. Either way the block table
    # covers start_pos + len(token_ids) + draft_k positions, `sample` is set, and the result holds
    # 1 + (accepted drafts) tokens for this sequence, in order.
    num_draft: int = 0
    draft_k: int = 0
    # tokens [0, start_pos) for the engine's draft model: on a sequence's first chunk, and after a context shift
    context_ids: np.ndarray | None = None
    # token_ids is (PLACEHOLDER,): the token this engine sampled for the sequence in the plan before
    placeholder: bool = False


@dataclass(frozen=True, slots=True)
class KVShift:
    """A context shift of one sequence: copy pages (src, dst) first (copy-on-write of shared pages),
    then re-rotate the keys of `pages` by `delta` positions (every row they hold moved by delta)."""

    seq_id: int
    pages: tuple[int, ...]
    delta: int
    copies: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class BatchPlan:
    step_id: int
    chunks: tuple[SeqChunk, ...]
    freed_seq_ids: tuple[int, ...] = ()  # sequences that ended: engines drop their per-seq state
    kv_shifts: tuple[KVShift, ...] = ()  # context shifts, applied before the forward

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


@dataclass(frozen=True, slots=True)
class SampledToken:
    seq_id: int
    token_id: int
    logprob: float  # raw (pre-temperature) log-probability of token_id; NaN unless the params ask for it
    top_logprobs: tuple[tuple[int, float], ...] = ()  # (token_id, logprob), best first
    constraint_done: bool = False  # the grammar accepts and allows nothing more


@dataclass(frozen=True, slots=True)
class BatchResult:
    step_id: int
    tokens: tuple[SampledToken, ...]
    forward_s: float = 0.0
    error: str | None = None  # the forward failed: every chunk's sequence fails with this

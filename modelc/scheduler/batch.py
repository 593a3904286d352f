"""BatchPlan (scheduler -> engine) and BatchResult (engine -> scheduler): frozen data, no logic.

NOTE: a plan is a flat token list built from per-sequence chunks. Chunk i computes
tokens [start_pos, start_pos + len(token_ids)) of sequence seq_id; its KV goes to the
slots given by its block table (slot = block_table[pos // block_size] * block_size +
pos % block_size). When `sample` is set the chunk ends at the sequence's last known
token and the engine samples the next one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelc.engine.params import SamplingParams


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


@dataclass(frozen=True, slots=True)
class BatchPlan:
    step_id: int
    chunks: tuple[SeqChunk, ...]
    freed_seq_ids: tuple[int, ...] = ()  # sequences that ended: engines drop their per-seq state

    @property
    def num_tokens(self) -> int:
        return sum(len(c.token_ids) for c in self.chunks)


@dataclass(frozen=True, slots=True)
class SampledToken:
    seq_id: int
    token_id: int
    logprob: float  # raw (pre-temperature) log-probability of token_id
    top_logprobs: tuple[tuple[int, float], ...] = ()  # (token_id, logprob), best first
    constraint_done: bool = False  # the grammar accepts and allows nothing more


@dataclass(frozen=True, slots=True)
class BatchResult:
    step_id: int
    tokens: tuple[SampledToken, ...]
    forward_s: float = 0.0
    error: str | None = None  # the forward failed: every chunk's sequence fails with this

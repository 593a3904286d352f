"""ForwardBatch: the flat token list of one forward pass (many sequences) and how to build it.

No maths here: positions, KV slots, block tables and per-sequence row ranges only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from modelc.cache.kv_pages import BLOCK_SIZE


@dataclass(frozen=True, slots=True)
class LoraRows:
    """Rows of the flat batch that run with one LoRA adapter (an engine.lora.LoraAdapter)."""

    adapter: object
    rows: np.ndarray  # (n,) int64


@dataclass(frozen=True, slots=True)
class ForwardBatch:
    token_ids: np.ndarray  # (T,) int32
    positions: np.ndarray  # (T,) int32
    slots: np.ndarray  # (T,) int64 KV slot of each token
    block_tables: np.ndarray  # (S, B) int32, padded with 0
    q_start: np.ndarray  # (S + 1,) int32, sequence s owns rows [q_start[s], q_start[s+1])
    pos_start: np.ndarray  # (S,) int32, position of each sequence's first row
    logit_rows: np.ndarray | None  # (R,) int64 rows whose logits are wanted; None = every row
    lora: tuple[LoraRows, ...] = ()
    # (S,) per sequence, the length that picks long-RoPE's factors: its prompt's (the engines), so every key
    # of a sequence rotates alike; None = the length after this pass (whole-sequence forwards)
    rope_lens: np.ndarray | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def num_seqs(self) -> int:
        return int(self.pos_start.shape[0])


def make_batch(
    seqs: Sequence[tuple[np.ndarray, int, np.ndarray]],
    *,
    logit_rows: np.ndarray | None = None,
    lora: tuple[LoraRows, ...] = (),
    rope_lens: Sequence[int] | None = None,
) -> ForwardBatch:
    """Flatten (token_ids, start_pos, block_table) per sequence into one ForwardBatch."""
    S = len(seqs)
    lens = [len(t) for t, _, _ in seqs]
    T = sum(lens)
    token_ids = np.empty(T, np.int32)
    positions = np.empty(T, np.int32)
    slots = np.empty(T, np.int64)
    B = max((len(bt) for _, _, bt in seqs), default=1)
    block_tables = np.zeros((S, max(B, 1)), np.int32)
    q_start = np.zeros(S + 1, np.int32)
    pos_start = np.empty(S, np.int32)
    row = 0
    for s, (ids, start, bt) in enumerate(seqs):
        n = lens[s]
        bt = np.asarray(bt, np.int32)
        block_tables[s, : len(bt)] = bt
        pos = np.arange(start, start + n, dtype=np.int32)
        token_ids[row : row + n] = ids
        positions[row : row + n] = pos
        slots[row : row + n] = bt[pos // BLOCK_SIZE].astype(np.int64) * BLOCK_SIZE + pos % BLOCK_SIZE
        pos_start[s] = start
        row += n
        q_start[s + 1] = row
    lens_arr = None if rope_lens is None else np.asarray(rope_lens, np.int64)
    return ForwardBatch(token_ids, positions, slots, block_tables, q_start, pos_start, logit_rows, lora, lens_arr)

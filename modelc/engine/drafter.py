"""Drafter: a small draft model (same tokenizer as the target) proposing tokens for verification.

It runs inside the engine step, before the target's forward: every speculating sequence's
missing draft KV is computed (catch-up), then k single-token draft forwards, batched over the
sequences, propose k tokens each.

NOTE: the draft's KV pages mirror the target's: same number of pages, indexed by the target's
block table, so the scheduler's BlockPool accounts for both and a rollback frees both. The draft
keeps its KV lazily: a sequence that does not speculate this step is not fed to the draft; when it
drafts again the draft catches up from `draft_pos` (its own count of valid positions, which the
runner keeps per sequence). Stale draft pages (a prefix hit on pages the draft never wrote, a
rollback) can only lower the acceptance rate: the target verifies every token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from modelc.cache.kv_pages import KVPages
from modelc.engine.sampler import _categorical
from modelc.engine.spec_verify import full_probs
from modelc.kernels.select import KernelSet
from modelc.models.batch import make_batch
from modelc.models.registry import build_model
from modelc.request import SamplingParams

# Draft catch-up tokens per forward, all sequences together: kept below the matmul prefill threshold
# (kernels/matmul/plan.py PREFILL_MIN_T = 32) so catch-up runs on the small-T kernels, as decoding does.
# On the shared 2-core VM the dequantize + BLAS path cost ~1 s per forward of the bundled model under
# load (OpenBLAS threads competing with other processes), against ~25 ms for 31 rows here.
CATCH_UP_TOKENS = 31


@dataclass(slots=True)
class DraftJob:
    history: list[int]  # the sequence's tokens, positions 0 .. len-1 (the last one not yet in any KV)
    draft_pos: int  # positions whose draft KV is valid
    block_table: np.ndarray  # (B,) int32, covers len(history) + k - 1 positions
    k: int
    params: SamplingParams
    rng: np.random.Generator


class Drafter:
    def __init__(
        self,
        source: Any,
        *,
        num_kv_blocks: int,
        target_vocab: int,
        kv_dtype: str = "float32",
        kernels: KernelSet | None = None,
    ):
        self.source = source
        self.model = build_model(source, kernels)
        L, K, D = self.model.kv_shape()
        self.kv = KVPages(L, num_kv_blocks, K, D, kv_dtype)
        self.vocab = min(int(self.model.vocab_size), int(target_vocab))  # tokens both models know
        self.target_vocab = int(target_vocab)

    def warmup(self) -> None:
        """The draft's decode path at T=1 and T=2, on a scratch page (never the mirrored pages)."""
        L, K, D = self.model.kv_shape()
        kv = KVPages(L, 2, K, D, self.kv.kv_dtype)
        one = np.zeros(1, np.int32)
        self.model.forward(make_batch([(one, 0, np.array([0], np.int32))]), kv)
        self.model.forward(make_batch([(one, 0, np.array([0], np.int32)), (one, 0, np.array([1], np.int32))]), kv)

    def propose(self, jobs: list[DraftJob]) -> list[tuple[list[int], list[np.ndarray] | None]]:
        """Per job: (k drafted tokens, their (V_target,) draft distributions or None when greedy).
        Sets job.draft_pos to the positions whose draft KV is now written (len(history) + k - 1)."""
        self._catch_up(jobs)
        out: list[tuple[list[int], list[np.ndarray] | None]] = [([], None if j.params.greedy else []) for j in jobs]
        # step 0 feeds each job's last history token; step s feeds the draft chosen at step s - 1
        feed = [j.history[-1] for j in jobs]
        for step in range(max(j.k for j in jobs)):
            live = [i for i, j in enumerate(jobs) if j.k > step]
            seqs = []
            for i in live:
                j = jobs[i]
                pos = len(j.history) - 1 + step
                seqs.append((np.array([feed[i]], np.int32), pos, j.block_table))
            logits = self.model.forward(make_batch(seqs), self.kv)  # (len(live), V_draft)
            for r, i in enumerate(live):
                j = jobs[i]
                tok, q = self._choose(logits[r, : self.vocab], j)
                out[i][0].append(tok)
                if q is not None:
                    out[i][1].append(q)
                feed[i] = tok
                j.draft_pos = len(j.history) + step
        return out

    def _catch_up(self, jobs: list[DraftJob]) -> None:
        """Compute the draft KV of every history token but the last (the first draft step feeds it)."""
        while True:
            seqs, room = [], CATCH_UP_TOKENS
            for j in jobs:
                end = min(len(j.history) - 1, j.draft_pos + room)
                if end > j.draft_pos:
                    seqs.append((np.asarray(j.history[j.draft_pos : end], np.int32), j.draft_pos, j.block_table))
                    room -= end - j.draft_pos
                    j.draft_pos = end
                if room == 0:
                    break
            if not seqs:
                return
            self.model.forward(make_batch(seqs, logit_rows=np.zeros(0, np.int64)), self.kv)

    def _choose(self, row: np.ndarray, job: DraftJob) -> tuple[int, np.ndarray | None]:
        if job.params.greedy:
            return int(np.argmax(row)), None
        q = full_probs(np.asarray(row, np.float32), job.params)
        dense = np.zeros(self.target_vocab, np.float64)  # (V_target,)
        if q is None:  # everything masked: a point mass on the argmax
            tok = int(np.argmax(row))
            dense[tok] = 1.0
            return tok, dense
        tok = _categorical(q, job.rng.random())
        dense[: q.shape[0]] = q
        return int(tok), dense

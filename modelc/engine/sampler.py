"""Sampler: next-token choice for a batch of sequences, each with its own SamplingParams and state.

Owns per-sequence sampler state (RNG, penalty counts, constraint matcher) and the order of
logit processing (docs/sampling.md). Pure numpy on one (S, V) logits array; no model, no
scheduling decisions (stop rules belong to the scheduler).

NOTE: reproducibility. Each sequence draws from its own numpy Generator, exactly one
uniform number per non-greedy step, and every step's processing depends only on that
row and that sequence's state, so a seeded sequence yields the same tokens whatever else
shares its batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol

import numpy as np

from modelc.errors import EngineError
from modelc.request import SamplingParams

_TOP_P_GUESS = 256  # top-p first tries the best 256 tokens (argpartition) before a full sort


class TokenMatcher(Protocol):
    """What the sampler needs from a constraint matcher (modelc.engine.constraint.Matcher)."""

    def allowed_mask(self, vocab_size: int) -> np.ndarray: ...

    def consume(self, token_id: int) -> bool: ...


@dataclass(slots=True)
class SeqSamplerState:
    """One sequence's sampler state: its RNG, penalty bookkeeping and optional constraint matcher.

    `seen` holds every token of prompt + output (repetition_penalty); `output_counts` counts
    output tokens only (presence/frequency penalties).
    """

    rng: np.random.Generator
    seen: set[int] = field(default_factory=set)
    output_counts: dict[int, int] = field(default_factory=dict)
    matcher: TokenMatcher | None = None
    _seen_ids: np.ndarray | None = None  # cached array of `seen`, dropped when it grows
    _count_arrays: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def create(
        cls,
        params: SamplingParams,
        prompt_token_ids: Iterable[int] = (),
        matcher: TokenMatcher | None = None,
    ) -> SeqSamplerState:
        """A fresh state; the RNG is seeded from params.seed, or from OS entropy when it is None."""
        # Any integer seed (OpenAI allows negative ones) maps to one uint64 numpy accepts.
        rng = np.random.default_rng(None if params.seed is None else params.seed % 2**64)
        return cls(rng=rng, seen={int(t) for t in prompt_token_ids}, matcher=matcher)

    def add_prompt_tokens(self, token_ids: Iterable[int]) -> None:
        """More prompt tokens (chunked prefill): they count for repetition_penalty only."""
        before = len(self.seen)
        self.seen.update(int(t) for t in token_ids)
        if len(self.seen) != before:
            self._seen_ids = None

    def append(self, token_id: int) -> bool:
        """Record a generated token; advance the matcher. False when the matcher rejects it."""
        token_id = int(token_id)
        if token_id not in self.seen:
            self.seen.add(token_id)
            self._seen_ids = None
        self.output_counts[token_id] = self.output_counts.get(token_id, 0) + 1
        self._count_arrays = None
        return self.matcher.consume(token_id) if self.matcher is not None else True

    def seen_ids(self) -> np.ndarray:
        if self._seen_ids is None:
            self._seen_ids = np.fromiter(self.seen, dtype=np.int64, count=len(self.seen))
        return self._seen_ids

    def count_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._count_arrays is None:
            n = len(self.output_counts)
            ids = np.fromiter(self.output_counts.keys(), dtype=np.int64, count=n)
            counts = np.fromiter(self.output_counts.values(), dtype=np.float32, count=n)
            self._count_arrays = (ids, counts)
        return self._count_arrays


@dataclass(frozen=True, slots=True)
class SampleOutput:
    token_ids: np.ndarray  # (S,) int64
    logprobs: np.ndarray  # (S,) float32, raw log-probability of each chosen token
    top_logprobs: list[tuple[tuple[int, float], ...]]  # per sequence, best first ((), when not asked)

    def __iter__(self):
        return iter((self.token_ids, self.logprobs, self.top_logprobs))


def sample(
    logits: np.ndarray,
    states: Sequence[SeqSamplerState],
    params: Sequence[SamplingParams],
    num_output_tokens: Sequence[int],
    eos_ids: frozenset[int],
) -> SampleOutput:
    """Choose one token per row of `logits` (S, V) float32; `logits` is not modified.

    Returns (token_ids (S,), logprobs (S,), top_logprobs) — unpackable as a tuple; a row's logprob is NaN
    unless its params ask for log-probabilities (wants_logprobs). Call `states[i].append(token_ids[i])`
    afterwards to advance each sequence.
    """
    logits = np.asarray(logits, dtype=np.float32)
    if logits.ndim != 2 or not (logits.shape[0] == len(states) == len(params) == len(num_output_tokens)):
        raise EngineError(f"sampler got logits {logits.shape} for {len(states)} states / {len(params)} params")
    num_seqs, vocab = logits.shape  # (S, V)
    scratch = np.empty(vocab, dtype=np.float32)  # (V,) reused: row-at-a-time stays in cache
    token_ids = np.empty(num_seqs, dtype=np.int64)  # (S,)
    logprobs = np.empty(num_seqs, dtype=np.float32)  # (S,)
    tops: list[tuple[tuple[int, float], ...]] = []
    for s in range(num_seqs):
        raw = logits[s]  # (V,)
        x = _process_row(raw, states[s], params[s], num_output_tokens[s], eos_ids)
        tok = _choose(x, params[s], states[s].rng, raw, eos_ids)
        token_ids[s] = tok
        lse = _logsumexp(raw, scratch) if wants_logprobs(params[s]) else np.nan
        logprobs[s] = raw[tok] - lse
        tops.append(_top_logprobs(raw, lse, params[s].top_logprobs))
    return SampleOutput(token_ids, logprobs, tops)


def wants_logprobs(p: SamplingParams) -> bool:
    """Whether a sequence's tokens carry their log-probabilities: the softmax's normalizer is a pass over the
    vocabulary with an exp each (~0.1 ms a token at 32k entries, ~0.5 ms at 152k), so it is computed only
    when asked (logprobs, top_logprobs; best_of asks for logprobs to rank its candidates)."""
    return p.logprobs or p.top_logprobs > 0


def _logsumexp(row: np.ndarray, scratch: np.ndarray) -> float:
    m = float(row.max())
    if not np.isfinite(m):
        return m
    np.subtract(row, np.float32(m), out=scratch)
    np.exp(scratch, out=scratch)
    return m + float(np.log(scratch.sum(dtype=np.float64)))


def _top_logprobs(row: np.ndarray, lse: float, n: int) -> tuple[tuple[int, float], ...]:
    if n <= 0:
        return ()
    n = min(n, row.shape[0])
    idx = np.argpartition(row, -n)[-n:]  # (n,)
    idx = idx[np.argsort(-row[idx])]
    return tuple((int(i), float(row[i] - lse)) for i in idx)


# ---------------------------------------------------------------- logit processing
def _process_row(
    row: np.ndarray, state: SeqSamplerState, p: SamplingParams, num_out: int, eos_ids: frozenset[int]
) -> np.ndarray:
    """logit_bias -> penalties -> constraint mask -> min_tokens mask. Copies only when something applies."""
    vocab = row.shape[0]
    need_min = num_out < p.min_tokens
    if not (
        p.logit_bias
        or p.repetition_penalty != 1.0
        or p.presence_penalty
        or p.frequency_penalty
        or state.matcher is not None
        or need_min
    ):
        return row
    x = row.copy()  # (V,)
    if p.logit_bias:
        ids, vals = _bias_arrays(p.logit_bias, vocab)
        x[ids] += vals
    if p.repetition_penalty != 1.0 and state.seen:
        ids = state.seen_ids()
        ids = ids[ids < vocab]
        vals = x[ids]
        x[ids] = np.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if (p.presence_penalty or p.frequency_penalty) and state.output_counts:
        ids, counts = state.count_arrays()
        keep = ids < vocab
        x[ids[keep]] -= p.frequency_penalty * counts[keep] + p.presence_penalty
    if state.matcher is not None:
        allowed = state.matcher.allowed_mask(vocab)  # (V,) bool
        x[~allowed] = -np.inf
    if need_min:
        stops = _min_tokens_ids(p, eos_ids, vocab)
        if stops.size:
            saved = x[stops].copy()
            x[stops] = -np.inf
            if not np.isfinite(x.max()):  # the constraint allows only a stop token: it wins
                x[stops] = saved
    return x


@lru_cache(maxsize=256)
def _bias_arrays(bias: tuple[tuple[int, float], ...], vocab: int) -> tuple[np.ndarray, np.ndarray]:
    merged: dict[int, float] = {}
    for tid, val in bias:
        if 0 <= int(tid) < vocab:
            merged[int(tid)] = merged.get(int(tid), 0.0) + float(val)
    ids = np.fromiter(merged.keys(), dtype=np.int64, count=len(merged))
    vals = np.fromiter(merged.values(), dtype=np.float32, count=len(merged))
    return ids, vals


def _min_tokens_ids(p: SamplingParams, eos_ids: frozenset[int], vocab: int) -> np.ndarray:
    stops = set(p.stop_token_ids)
    if not p.ignore_eos:
        stops |= eos_ids
    return np.array(sorted(t for t in stops if 0 <= t < vocab), dtype=np.int64)


# ---------------------------------------------------------------- choosing
def _choose(x: np.ndarray, p: SamplingParams, rng: np.random.Generator, raw: np.ndarray, eos_ids) -> int:
    if p.greedy:
        tok = int(np.argmax(x))
    else:
        tok = _draw(x, p, rng)
    if not np.isfinite(x[tok]):  # everything masked (a broken constraint): end the sequence
        return min(eos_ids) if eos_ids else int(np.argmax(raw))
    return tok


def _draw(x: np.ndarray, p: SamplingParams, rng: np.random.Generator) -> int:
    """temperature -> top_k -> top_p -> min_p -> typical_p -> one categorical draw."""
    dist = distribution(x, p)
    if dist is None:
        return int(np.argmax(x))
    idx, probs = dist
    j = _categorical(probs, rng.random())
    return int(idx[j]) if idx is not None else j


def distribution(x: np.ndarray, p: SamplingParams) -> tuple[np.ndarray | None, np.ndarray] | None:
    """The distribution a non-greedy draw samples from, after temperature, top_k, top_p, min_p and
    typical_p: (token ids or None for "all of them, in order", probabilities summing to 1), or None
    when every token is masked. Speculative verification (engine/spec_verify.py) uses it as p."""
    vocab = x.shape[0]
    scaled = x / np.float32(p.temperature) if p.temperature != 1.0 else x  # (V,)
    if 0 < p.top_k < vocab:
        idx = np.argpartition(scaled, -p.top_k)[-p.top_k :]  # (k,)
        vals = scaled[idx]
    else:
        idx = None
        vals = scaled
    m = vals.max()
    if not np.isfinite(m):
        return None
    probs = np.exp(vals - m, dtype=np.float64)  # (n,)
    probs /= probs.sum()
    if p.top_p < 1.0:
        idx, probs = _top_p(idx, probs, p.top_p)
    if p.min_p > 0.0:
        keep = probs >= p.min_p * probs.max()
        idx, probs = _subset(idx, probs, keep)
    if p.typical_p < 1.0:
        idx, probs = _typical(idx, probs, p.typical_p)
    return idx, probs


def _categorical(probs: np.ndarray, u: float) -> int:
    """Index j with P(j) = probs[j] / probs.sum() for u ~ U[0, 1).

    NOTE: a full cumsum over 152k entries costs ~3 ms; summing 1024-wide blocks first and
    scanning only the chosen block is ~5x cheaper and draws from the same distribution.
    """
    n = probs.shape[0]
    block = 1024
    if n <= 4 * block:
        cdf = np.cumsum(probs)
        j = int(np.searchsorted(cdf, u * cdf[-1], side="right"))
    else:
        nb = n // block
        sums = np.empty(nb + 1, dtype=np.float64)  # (nb + 1,)
        probs[: nb * block].reshape(nb, block).sum(axis=1, out=sums[:nb])
        sums[nb] = probs[nb * block :].sum()
        block_cdf = np.cumsum(sums)
        target = u * block_cdf[-1]
        b = min(int(np.searchsorted(block_cdf, target, side="right")), nb)
        start = b * block
        seg_cdf = np.cumsum(probs[start : start + block])
        before = block_cdf[b - 1] if b > 0 else 0.0
        j = start + int(np.searchsorted(seg_cdf, target - before, side="right"))
    j = min(j, n - 1)
    if probs[j] <= 0.0:  # rounding at a boundary: never land on a zero-probability (masked) token
        nz = np.flatnonzero(probs[: j + 1])
        j = int(nz[-1]) if nz.size else int(np.flatnonzero(probs)[0])
    return j


def _subset(idx: np.ndarray | None, probs: np.ndarray, keep: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sel = np.flatnonzero(keep)
    out = probs[sel]
    out /= out.sum()
    return (idx[sel] if idx is not None else sel), out


def _top_p(idx: np.ndarray | None, probs: np.ndarray, top_p: float) -> tuple[np.ndarray, np.ndarray]:
    """Keep the smallest most-probable set whose mass reaches top_p (at least one token)."""
    n = probs.shape[0]
    order = None
    k = _TOP_P_GUESS
    while order is None and 4 * k < n:  # grow a candidate set by argpartition; sort only that
        part = np.argpartition(probs, -k)[-k:]
        if probs[part].sum() >= top_p:
            order = part[np.argsort(-probs[part])]
        k *= 8
    if order is None:
        order = np.argsort(-probs)
    cum = np.cumsum(probs[order])
    n_keep = min(int(np.searchsorted(cum, top_p, side="left")) + 1, order.shape[0])
    sel = order[:n_keep]
    out = probs[sel]
    out /= out.sum()
    return (idx[sel] if idx is not None else sel), out


def _typical(idx: np.ndarray | None, probs: np.ndarray, mass: float) -> tuple[np.ndarray, np.ndarray]:
    """Locally typical sampling: keep tokens whose surprise is closest to the entropy, up to `mass`."""
    nz = probs > 0
    logp = np.where(nz, np.log(np.where(nz, probs, 1.0)), 0.0)
    entropy = -float(np.sum(probs * logp))
    dist = np.where(nz, np.abs(-logp - entropy), np.inf)
    order = np.argsort(dist)
    cum = np.cumsum(probs[order])
    n_keep = min(int(np.sum(cum < mass)) + 1, int(nz.sum()))
    sel = order[: max(n_keep, 1)]
    out = probs[sel]
    out /= out.sum()
    return (idx[sel] if idx is not None else sel), out

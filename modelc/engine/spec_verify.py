"""Speculative verification: accept the longest valid prefix of a sequence's drafted tokens.

Given the target's logits at the k+1 positions of a verified chunk (the last known token and the
k drafts), walk the drafts in order with the sequence's own sampler state:

- greedy: the target's choice at position i (the same logit processing and argmax as the plain
  sampler) is compared with draft i; equal -> accept and go on, else emit the target's choice and
  stop. So greedy output is the plain greedy output token for token.
- sampled: the standard rejection rule (Leviathan et al. 2023; Chen et al. 2023). p is the target's
  distribution at position i after every sampling step the plain sampler applies (logit_bias,
  penalties, min_tokens mask, temperature, top_k, top_p, min_p, typical_p: sampler.distribution);
  q is the draft's distribution (a point mass on the draft for prompt lookup). Accept draft d with
  probability min(1, p(d) / q(d)); on rejection emit a token drawn from norm(max(0, p - q)) and
  stop. When every draft is accepted, one more token is drawn from p at the last position. The
  emitted tokens are then distributed exactly as the target's own samples.

Penalties stay exact because position i is processed with the state after the accepted drafts
before it (the state is advanced token by token). Grammar constraints are never verified here:
the scheduler does not speculate for constrained sequences.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from modelc.engine.sampler import (
    SeqSamplerState,
    _categorical,
    _choose,
    _logsumexp,
    _process_row,
    _top_logprobs,
    distribution,
    wants_logprobs,
)
from modelc.request import SamplingParams


@dataclass(frozen=True, slots=True)
class Emitted:
    token_id: int
    logprob: float  # raw (pre-temperature) log-probability at its position (NaN unless asked: wants_logprobs)
    top_logprobs: tuple[tuple[int, float], ...]
    accepted: bool  # a draft the target accepted (False: the correction or the bonus token)


def full_probs(x: np.ndarray, params: SamplingParams) -> np.ndarray | None:
    """The sampler's distribution as a dense (V,) float64 vector, or None when everything is masked."""
    dist = distribution(x, params)
    if dist is None:
        return None
    idx, probs = dist
    if idx is None:
        return probs
    dense = np.zeros(x.shape[0], np.float64)  # (V,)
    dense[idx] = probs
    return dense


def verify(
    rows: np.ndarray,
    drafts: list[int],
    draft_probs: list[np.ndarray] | None,
    state: SeqSamplerState,
    params: SamplingParams,
    num_output_tokens: int,
    eos_ids: frozenset[int],
) -> list[Emitted]:
    """rows (k+1, V): target logits at the last known token and at each of the k drafts.
    draft_probs: per draft the draft's (V,) distribution it was drawn from, or None for point masses
    (prompt lookup, or any greedy draft). Advances `state` by every emitted token. Returns 1..k+1 tokens.
    """
    k = len(drafts)
    assert rows.shape[0] == k + 1, f"{rows.shape[0]} logit rows for {k} drafts"
    scratch = np.empty(rows.shape[1], np.float32)  # (V,)
    out: list[Emitted] = []
    for i in range(k + 1):
        raw = rows[i]  # (V,)
        x = _process_row(raw, state, params, num_output_tokens + i, eos_ids)
        accepted = False
        if i == k:
            tok = _choose(x, params, state.rng, raw, eos_ids)
        elif params.greedy:
            tok = _choose(x, params, state.rng, raw, eos_ids)
            accepted = tok == drafts[i]
        else:
            tok, accepted = _accept_or_resample(
                x, drafts[i], None if draft_probs is None else draft_probs[i], params, state, raw, eos_ids
            )
        lse = _logsumexp(raw, scratch) if wants_logprobs(params) else np.nan
        out.append(Emitted(tok, float(raw[tok] - lse), _top_logprobs(raw, lse, params.top_logprobs), accepted))
        state.append(tok)
        if not accepted:
            break
    return out


def _accept_or_resample(
    x: np.ndarray,
    draft: int,
    q: np.ndarray | None,
    params: SamplingParams,
    state: SeqSamplerState,
    raw: np.ndarray,
    eos_ids: frozenset[int],
) -> tuple[int, bool]:
    p = full_probs(x, params)
    if p is None:  # everything masked: the plain sampler's fallback, never a draft
        return _choose(x, params, state.rng, raw, eos_ids), False
    q_d = 1.0 if q is None else float(q[draft])
    u = state.rng.random()
    if q_d > 0.0 and u * q_d < p[draft]:  # u < min(1, p/q)
        return draft, True
    if q is None:
        resid = p.copy()
        resid[draft] = 0.0
    else:
        resid = np.maximum(p - q, 0.0)
    if not resid.sum() > 0.0:  # p == q up to rounding: the residual is empty, p itself is the answer
        resid = p
    return _categorical(resid, state.rng.random()), False

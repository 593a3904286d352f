"""Speculation policy, per sequence: how many tokens to draft this step, and what the last
verification says about the next one. Pure Python; the scheduler calls it, the runner verifies.

NOTE: adaptive gamma. A sequence's gamma follows its acceptance: every draft accepted -> one more
next time (up to the request's or the engine's maximum); otherwise the accepted length plus one.
A verification that accepts nothing also backs off: the sequence decodes plainly for 1, 2, 4, ...
32 steps before it drafts again (reset by any acceptance), so a poor draft costs a few percent.
With a draft model (which costs forwards) the back-off goes to 64 steps, and a new sequence starts
from what the engine's drafts have achieved so far (16+ drafted tokens): under 10% accepted -> fully
backed off (first probe, of one token, after 256 steps, instead of paying the draft's catch-up over
its prompt at once); else gamma starts near the expected accepted run, rate / (1 - rate) + 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from modelc.scheduler.prompt_lookup import propose

MAX_BACKOFF = 32
MAX_BACKOFF_MODEL = 64  # a draft model costs forwards: back off further
POOR_START_SKIP = 256  # a new sequence's first probe when the engine's draft model has been useless
POOR_RATE = 0.1  # engine-wide acceptance below this (once MIN_EVIDENCE tokens were drafted) = useless
MIN_EVIDENCE = 16


@dataclass(slots=True)
class SpecState:
    gamma: int | None = None  # None: start at the maximum
    skip: int = 0  # plain decode steps left before the next draft
    backoff: int = 1
    max_backoff: int = MAX_BACKOFF
    started: bool = False
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def start(self, engine_rate: float | None, *, costly: bool) -> None:
        """First draft opportunity: start backed off when a costly draft (a model) has been useless."""
        self.started = True
        if not costly:
            return
        self.max_backoff = MAX_BACKOFF_MODEL
        if engine_rate is None:
            return
        if engine_rate < POOR_RATE:
            self.skip, self.backoff, self.gamma = POOR_START_SKIP, self.max_backoff, 1
        elif engine_rate < 1.0:  # start near the run length the engine's drafts have been reaching
            self.gamma = max(1, round(engine_rate / (1.0 - engine_rate)) + 1)

    def next_k(self, max_gamma: int) -> int:
        """Tokens to draft this step (0 = plain decode); counts a skipped step."""
        if self.skip > 0:
            self.skip -= 1
            return 0
        return max_gamma if self.gamma is None else min(self.gamma, max_gamma)

    def record(self, drafted: int, accepted: int) -> None:
        """One verification: `drafted` tokens proposed, the first `accepted` of them kept."""
        if drafted <= 0:
            return
        self.num_drafts += 1
        self.num_draft_tokens += drafted
        self.num_accepted_tokens += accepted
        if accepted >= drafted:
            self.gamma = min(max(self.gamma or drafted, drafted) + 1, 32)
        else:
            self.gamma = max(1, accepted + 1)
        if accepted == 0:
            self.skip = self.backoff
            self.backoff = min(2 * self.backoff, self.max_backoff)
        else:
            self.backoff = 1


@dataclass(slots=True)
class SpecStats:
    """Engine-wide counters, named as vLLM names them (spec_decode_*)."""

    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

    def add(self, drafted: int, accepted: int) -> None:
        if drafted > 0:
            self.num_drafts += 1
            self.num_draft_tokens += drafted
            self.num_accepted_tokens += accepted

    def acceptance_rate(self) -> float | None:
        """Accepted / drafted tokens so far, None before MIN_EVIDENCE drafted tokens."""
        if self.num_draft_tokens < MIN_EVIDENCE:
            return None
        return self.num_accepted_tokens / self.num_draft_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
        }


def speculates(seq: Any, config: Any) -> bool:
    """Whether this sequence drafts at all (its request and the engine's mode); pure."""
    p = seq.params
    if p.constraint is not None or p.speculative is False:
        return False  # a grammar cannot be verified exactly: never speculate under one
    asked = p.speculative or bool(p.gamma)  # the seed spec: gamma > 0 turns it on
    if (config.speculative is None and not asked) or (p.seed is not None and not p.greedy and not asked):
        # (a seeded sampled sequence keeps its batch-independent output unless it asks: how many
        # tokens a step drafts depends on the other sequences, and so do its random draws)
        return False
    return (p.gamma if p.gamma is not None else config.spec_gamma) > 0


def plan_draft(seq: Any, config: Any, limit: int, stats: SpecStats) -> tuple[int, list[int] | None]:
    """(k, drafts) for a decoding sequence (a scheduler Sequence): drafts = k prompt-lookup tokens,
    or None when the engine's draft model proposes k; (0, None) = a plain decode step. `limit`: the
    most drafts this step has room for (budget, step size, context limit)."""
    p = seq.params
    if limit <= 0 or not speculates(seq, config):
        return 0, None
    mode = config.speculative
    gamma = p.gamma if p.gamma is not None else config.spec_gamma
    cap = min(gamma, limit, p.max_tokens - seq.num_output_tokens - 1)  # emitted <= k + 1 <= tokens left
    if seq.spec.num_drafts == 0 and not seq.spec.started:
        seq.spec.start(stats.acceptance_rate(), costly=mode == "draft")
    k = seq.spec.next_k(cap) if cap > 0 else 0
    if k <= 0:
        return 0, None
    if mode == "draft":
        return k, None
    drafts = propose(seq.token_ids, k)
    return len(drafts), drafts

"""Speculation policy, per sequence: how many tokens to draft this step, and what the last
verification says about the next one. Pure Python; the scheduler calls it, the runner verifies.

NOTE: adaptive gamma. A sequence's gamma follows its acceptance: every draft accepted -> one more
next time (up to the request's or the engine's maximum); otherwise the accepted length plus one.
A verification that accepts nothing also backs off: the sequence decodes plainly for 1, 2, 4, ...
32 steps before it drafts again (reset by any acceptance), so a poor draft costs a few percent.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_BACKOFF = 32


@dataclass(slots=True)
class SpecState:
    gamma: int | None = None  # None: start at the maximum
    skip: int = 0  # plain decode steps left before the next draft
    backoff: int = 1
    num_drafts: int = 0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0

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
            self.backoff = min(2 * self.backoff, MAX_BACKOFF)
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

    def as_dict(self) -> dict[str, int]:
        return {
            "spec_decode_num_drafts": self.num_drafts,
            "spec_decode_num_draft_tokens": self.num_draft_tokens,
            "spec_decode_num_accepted_tokens": self.num_accepted_tokens,
        }

"""What AsyncEngine.generate yields: TokenEvent per released token, then one Finished. Frozen data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token and the text it released (often "" while a character or a possible stop
    string is incomplete). logprob/top_logprobs are raw log-probabilities, None/() unless
    params.logprobs asked for them."""

    token_id: int
    text: str
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event. finish_reason: "stop" | "length" | "abort" | "error" (then `error` says why).
    completion_tokens counts every sampled token, a final EOS/stop token included."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    error: str | None = None
    queue_time_s: float | None = field(default=None, compare=False)  # time spent waiting before the scheduler first admitted it


GenerateEvent = TokenEvent | Finished

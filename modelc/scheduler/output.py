"""What Scheduler.update/abort report per sequence: a sampled token, a finish. Frozen data only.

The actors forward these unchanged to the request side (modelc.actors.messages re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from modelc.scheduler.batch import SampledToken


@dataclass(frozen=True, slots=True)
class Finish:
    reason: str  # "stop" | "length" | "abort" | "error"
    prompt_tokens: int
    completion_tokens: int  # every sampled token, a final EOS/stop token included
    cached_tokens: int  # prompt tokens served by the prefix cache
    error: str | None = None  # set when reason == "error"
    queue_time_s: float | None = field(default=None, compare=False)  # waiting time before the first admission; None if never admitted


@dataclass(frozen=True, slots=True)
class TokenEmitted:
    """One sampled token. `finish` is set when this token ends the sequence; `stop_token` when it
    is an EOS/EOT or stop_token_ids token, counted but not part of the text."""

    seq_id: int
    token: SampledToken
    stop_token: bool = False
    finish: Finish | None = None


@dataclass(frozen=True, slots=True)
class SequenceFinished:
    """A sequence ended without a final token (abort, error, max_tokens == 0, shutdown)."""

    seq_id: int
    finish: Finish


SeqEvent = TokenEmitted | SequenceFinished

"""What Scheduler.update/abort report per sequence: a sampled token, the end. Frozen data only.

The end is modelc.request.Finished, the very event AsyncEngine.generate yields last: one type from the
scheduler to the route. The actors forward these unchanged to the request side (modelc.actors.messages
re-exports them).
"""

from __future__ import annotations

from dataclasses import dataclass

from modelc.request import Finished
from modelc.scheduler.batch import SampledToken


@dataclass(frozen=True, slots=True)
class TokenEmitted:
    """One sampled token. `finish` is set when this token ends the sequence; `stop_token` when it
    is an EOS/EOT or stop_token_ids token, counted but not part of the text."""

    seq_id: int
    token: SampledToken
    stop_token: bool = False
    finish: Finished | None = None


@dataclass(frozen=True, slots=True)
class SequenceFinished:
    """A sequence ended without a final token (abort, error, max_tokens == 0, shutdown)."""

    seq_id: int
    finish: Finished


SeqEvent = TokenEmitted | SequenceFinished

"""Stop strings on streamed text: StopMatcher finds them in time linear in the text, TextStream turns
generated token ids into the text to release (what the RequestActor and the sync Engine both use).

NOTE: one KMP automaton per stop string (its prefix function is built once). Each new character
moves every automaton; a state equal to the stop's length is a match. The states are also what a
streamer must hold back: the longest tail of the text so far that is a proper prefix of some stop
may still grow into it, and nothing older can. So the caller keeps only that tail (at most the
longest stop minus one character), never the whole text, and no step rescans old text. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from modelc.tokenizer.incremental import IncrementalDecoder


def prefix_function(s: str) -> list[int]:
    """pi[i] = length of the longest proper prefix of s[: i + 1] that is also its suffix."""
    pi = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = pi[k - 1]
        if s[i] == s[k]:
            k += 1
        pi[i] = k
    return pi


class StopMatcher:
    """Feed text piece by piece; learn where the first stop string starts, or how much to hold back."""

    __slots__ = ("stops", "_pi", "_state")

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = tuple(s for s in stops if s)
        self._pi = [prefix_function(s) for s in self.stops]
        self._state = [0] * len(self.stops)

    def reset(self) -> None:
        """Forget the text so far (nothing fed before can be part of a match)."""
        self._state = [0] * len(self.stops)

    def feed(self, piece: str) -> int | None:
        """Advance over `piece`. Returns the offset, counted back from the end of `piece`, at which the
        first stop string to complete starts (the longest one when several complete at one
        character), or None. After a match the matcher must not be fed again."""
        stops, pis, state = self.stops, self._pi, self._state
        for j, ch in enumerate(piece):
            best = -1
            for k, s in enumerate(stops):
                q = state[k]
                while q and s[q] != ch:
                    q = pis[k][q - 1]
                if s[q] == ch:
                    q += 1
                if q == len(s):
                    best = max(best, q)
                    q = pis[k][q - 1]
                state[k] = q
            if best >= 0:
                return len(piece) - (j + 1) + best  # chars from the match start to the end of `piece`
        return None

    @property
    def held(self) -> int:
        """Characters at the end of the text fed so far that could still begin a stop string."""
        return max(self._state, default=0)


def first_stop(text: str, stops: Sequence[str]) -> int | None:
    """Index in `text` where the first stop string to complete starts, or None (one linear pass)."""
    back = StopMatcher(stops).feed(text)
    return None if back is None else len(text) - back


class TextStream:
    """Token ids -> released text. Holds back an incomplete character (IncrementalDecoder) and any
    tail that could still grow into a stop string; stops at the first stop string."""

    def __init__(self, tokenizer: Any, prompt_ids: Sequence[int], stop: tuple[str, ...]) -> None:
        self.stop = tuple(s for s in stop if s)
        self.decoder = None
        if tokenizer is not None:
            self.decoder = IncrementalDecoder(tokenizer, list(prompt_ids[-8:]))
        self.matcher = StopMatcher(self.stop)
        self.pending = ""  # decoded, not yet released: at most the longest stop string minus one char
        self.stopped = False

    def add(self, token_id: int, *, check_stop: bool = True) -> str:
        """Text released by this token; sets `stopped` when a stop string completes.
        check_stop=False (before min_tokens): release everything, match nothing."""
        if self.decoder is None:
            return ""
        piece = self.decoder.add(token_id)
        self.pending += piece
        if not self.stop or not check_stop:
            if self.stop:
                self.matcher.reset()
            out, self.pending = self.pending, ""
            return out
        back = self.matcher.feed(piece)  # linear in the piece, whatever the stop lengths
        if back is not None:
            self.stopped = True
            out, self.pending = self.pending[: len(self.pending) - back], ""
            return out
        cut = len(self.pending) - self.matcher.held
        out, self.pending = self.pending[:cut], self.pending[cut:]
        return out

    def flush(self) -> str:
        """At a natural end: whatever is still held back."""
        if self.decoder is None or self.stopped:
            return ""
        out, self.pending = self.pending + self.decoder.flush(), ""
        return out

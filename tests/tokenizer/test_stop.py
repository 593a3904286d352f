"""StopMatcher: the first stop string to complete, found in one pass over streamed pieces, and the
held-back tail equal to the longest proper stop prefix (what the old quadratic scan computed)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from modelc.engine.sampler import SeqSamplerState
from modelc.request import SamplingParams
from modelc.tokenizer.stop import StopMatcher, first_stop, prefix_function


def reference_first_stop(text: str, stops: list[str]) -> int | None:
    for end in range(1, len(text) + 1):
        done = [s for s in stops if text[:end].endswith(s)]
        if done:
            return end - max(len(s) for s in done)
    return None


def reference_held(text: str, stops: list[str]) -> int:
    return max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)


def test_prefix_function() -> None:
    assert prefix_function("aabaaab") == [0, 1, 0, 1, 2, 2, 3]


@pytest.mark.parametrize("seed", range(4))
def test_matches_the_reference_on_random_streams(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(500):
        stops = ["".join(rng.choice("ab") for _ in range(rng.randint(1, 6))) for _ in range(rng.randint(1, 3))]
        text = "".join(rng.choice("abc") for _ in range(rng.randint(0, 30)))
        assert first_stop(text, stops) == reference_first_stop(text, stops)
        m, pos, found = StopMatcher(stops), 0, None
        while pos < len(text):
            piece = text[pos : pos + rng.randint(1, 4)]
            pos += len(piece)
            back = m.feed(piece)
            if back is not None:
                found = pos - back
                break
            assert m.held == reference_held(text[:pos], stops)
        assert found == reference_first_stop(text, stops)


def test_long_stops_cost_no_rescans() -> None:
    # 4 stops of 200k characters that never match: the held tail stays bounded by the stop length
    stops = ["a" * 199_999 + "b", "c" * 200_000, "ab" * 100_000, "x" * 200_000]
    m = StopMatcher(stops)
    for _ in range(50):
        assert m.feed("a" * 1000) is None
    assert m.held == 50_000
    assert m.feed("b") is None and m.held == 2  # only "ab" (a prefix of "abab...") can still grow
    assert m.feed("c" * 200_000) == 200_000  # "c" * 200k completes at the last character


def test_negative_seed_is_accepted() -> None:
    a = SeqSamplerState.create(SamplingParams(seed=-5))
    b = SeqSamplerState.create(SamplingParams(seed=-5))
    assert np.array_equal(a.rng.integers(1 << 30, size=4), b.rng.integers(1 << 30, size=4))

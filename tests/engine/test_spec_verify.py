"""The rejection rule keeps the target's distribution: on a 5-token vocabulary, the first three tokens
sampled speculatively (point-mass drafts as prompt lookup makes them, and sampled drafts from a
different model) follow the exact joint distribution of plain sampling, penalties included
(chi-square, seeded). A wrong rule (always accept) fails the same check."""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

from modelc.engine.sampler import SeqSamplerState, _process_row
from modelc.engine.spec_verify import full_probs, verify
from modelc.request import SamplingParams

V = 5
PROMPT = (1, 3)
EOS: frozenset[int] = frozenset()
N = 4000
PARAMS = SamplingParams(temperature=0.9, top_k=4, repetition_penalty=1.3, presence_penalty=0.4,
                        logit_bias=((2, 0.7),), max_tokens=3)  # fmt: skip


@functools.cache
def _logits(context: tuple[int, ...], salt: int = 0) -> np.ndarray:
    rng = np.random.default_rng(abs(hash((context, salt))) % (1 << 32))
    return (rng.standard_normal(V) * 1.5).astype(np.float32)  # (V,)


@functools.cache
def _draft_q(ctx: tuple[int, ...]) -> np.ndarray:
    return full_probs(_logits(ctx, salt=7), PARAMS)


def _state(out: tuple[int, ...], seed: int = 0) -> SeqSamplerState:
    st = SeqSamplerState.create(PARAMS, PROMPT)
    st.rng = np.random.default_rng(seed)
    for t in out:
        st.append(t)
    return st


def _exact_joint() -> np.ndarray:
    """P(a, b, c) of plain sampling, from the sampler's own processing of each position."""
    joint = np.zeros((V, V, V))
    for out in itertools.product(range(V), repeat=3):
        prob = 1.0
        for i in range(3):
            x = _process_row(_logits(PROMPT + out[:i]), _state(out[:i]), PARAMS, i, EOS)
            prob *= full_probs(x, PARAMS)[out[i]]
        joint[out] = prob
    return joint


def _spec_sample(seed: int, drafter: str, always_accept: bool = False) -> tuple[int, ...]:
    st = _state((), seed)
    out: list[int] = []
    while len(out) < 3:
        k = min(2, 3 - len(out))
        ctx = PROMPT + tuple(out)
        drafts, qs = [], []
        for _ in range(k):
            if drafter == "lookup":
                drafts.append((ctx[-1] + 1) % V)  # a fixed guess: a point mass
            else:
                q = _draft_q(ctx)  # another model's distribution
                drafts.append(int(np.searchsorted(np.cumsum(q), st.rng.random() * q.sum(), side="right")))
                qs.append(q)
            ctx = ctx + (drafts[-1],)
        if always_accept:
            out.extend(drafts[: 3 - len(out)])
            continue
        rows = np.stack([_logits(PROMPT + tuple(out) + tuple(drafts[:i])) for i in range(k + 1)])  # (k+1, V)
        emitted = verify(rows, drafts, qs if drafter == "model" else None, st, PARAMS, len(out), EOS)
        assert 1 <= len(emitted) <= k + 1
        assert all(e.accepted for e in emitted[:-1]) and not emitted[-1].accepted
        out.extend(e.token_id for e in emitted)
    return tuple(out[:3])


def _chi2_pvalue(counts: np.ndarray, expected_p: np.ndarray) -> float:
    """Pearson chi-square over cells with expected count >= 5 (the rest pooled), Wilson-Hilferty p-value."""
    n = counts.sum()
    exp = expected_p.ravel() * n
    obs = counts.ravel().astype(np.float64)
    big = exp >= 5
    e = np.append(exp[big], exp[~big].sum())
    o = np.append(obs[big], obs[~big].sum())
    keep = e > 0
    e, o = e[keep], o[keep]
    stat = float(((o - e) ** 2 / e).sum())
    dof = len(e) - 1
    z = ((stat / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


@pytest.mark.parametrize("drafter", ["lookup", "model"])
def test_speculative_sampling_keeps_the_target_distribution(drafter):
    joint = _exact_joint()
    assert abs(joint.sum() - 1.0) < 1e-9
    counts = np.zeros((V, V, V))
    for seed in range(N):
        counts[_spec_sample(seed, drafter)] += 1
    tv = 0.5 * np.abs(counts / N - joint).sum()
    assert _chi2_pvalue(counts, joint) > 1e-3, tv
    assert tv < 0.07


def test_the_check_rejects_a_wrong_rule():
    joint = _exact_joint()
    counts = np.zeros((V, V, V))
    for seed in range(N // 3):
        counts[_spec_sample(seed, "model", always_accept=True)] += 1
    assert _chi2_pvalue(counts, joint) < 1e-6


def test_greedy_verification_is_the_argmax_walk():
    params = SamplingParams(temperature=0.0, logit_bias=((4, 0.5),))
    rows = np.stack([_logits((i,)) for i in range(4)])  # (4, V)
    x0 = rows[0].copy()
    x0[4] += 0.5
    first = int(np.argmax(x0))
    wrong = (first + 1) % V
    emitted = verify(rows, [wrong, 0, 0], None, _state(()), params, 0, EOS)
    assert [e.token_id for e in emitted] == [first]  # rejected at once: the target's own choice
    emitted = verify(rows[:2], [first], None, _state(()), params, 0, EOS)
    assert emitted[0].accepted and emitted[0].token_id == first and len(emitted) == 2

"""Sampler: processing order, each parameter against an obvious reference, reproducibility, batching."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.engine.sampler import SeqSamplerState, sample
from modelc.request import SamplingParams

EOS = frozenset({0})


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def states_for(params: list[SamplingParams], prompts=None) -> list[SeqSamplerState]:
    prompts = prompts or [()] * len(params)
    return [SeqSamplerState.create(p, pr) for p, pr in zip(params, prompts, strict=True)]


def run(logits, params, num_out=None, prompts=None, states=None):
    states = states or states_for(params, prompts)
    num_out = num_out if num_out is not None else [0] * len(params)
    return sample(logits, states, params, num_out, EOS), states


class AllowOnly:
    """A stand-in matcher: allows a fixed id set and records what it consumed."""

    def __init__(self, ids):
        self.ids = np.array(sorted(ids), dtype=np.int64)
        self.consumed = []

    def allowed_mask(self, vocab_size):
        m = np.zeros(vocab_size, dtype=bool)
        m[self.ids] = True
        return m

    def consume(self, token_id):
        self.consumed.append(token_id)
        return token_id in set(self.ids.tolist())


def test_greedy_logprobs_and_top_logprobs():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(3, 50)).astype(np.float32)
    params = [SamplingParams(temperature=0.0, top_logprobs=5), SamplingParams(temperature=0.0, logprobs=True),
              SamplingParams(top_k=1, logprobs=True)]  # fmt: skip
    (tok, lp, tops), _ = run(logits, params)
    assert tok.tolist() == logits.argmax(axis=1).tolist()
    for s in range(3):
        ref = log_softmax(logits[s])
        assert lp[s] == pytest.approx(ref[tok[s]], abs=1e-5)
    want = np.argsort(-logits[0])[:5]
    assert [t for t, _ in tops[0]] == want.tolist()
    assert [v for _, v in tops[0]] == pytest.approx(log_softmax(logits[0])[want].tolist(), abs=1e-5)
    assert tops[1] == () and tops[2] == ()
    assert logits.dtype == np.float32 and np.all(np.isfinite(logits))  # input untouched


def test_logprobs_are_raw_even_when_processed():
    logits = np.array([[0.0, 1.0, 2.0, 3.0]], dtype=np.float32)
    p = SamplingParams(temperature=0.0, logit_bias=((1, 100.0),), top_logprobs=2)
    (tok, lp, tops), _ = run(logits, [p])
    assert tok[0] == 1
    assert lp[0] == pytest.approx(log_softmax(logits[0])[1], abs=1e-6)
    assert [t for t, _ in tops[0]] == [3, 2]


def test_logprobs_only_where_asked():
    logits = np.array([[0.0, 1.0, 2.0, 3.0]] * 3, dtype=np.float32)
    ps = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.0, logprobs=True),
          SamplingParams(temperature=0.0, top_logprobs=1)]  # fmt: skip
    (tok, lp, tops), _ = run(logits, ps)
    assert tok.tolist() == [3, 3, 3] and np.isnan(lp[0]) and tops[0] == ()
    assert lp[1] == lp[2] == pytest.approx(log_softmax(logits[0])[3], abs=1e-6) and tops[2][0][0] == 3


def test_logit_bias_out_of_range_ignored_and_ban():
    logits = np.array([[5.0, 1.0, 0.0]], dtype=np.float32)
    p = SamplingParams(temperature=0.0, logit_bias=((0, -100.0), (99, 50.0)))
    (tok, _, _), _ = run(logits, [p])
    assert tok[0] == 1


def test_repetition_penalty_hf_style():
    logits = np.array([[2.0, -2.0, 1.5, 0.5]], dtype=np.float32)
    p = SamplingParams(temperature=0.0, repetition_penalty=2.0, top_logprobs=0)
    # prompt has 0 and 1: 0 -> 2/2=1.0 (below 1.5), 1 -> -4
    (tok, _, _), _ = run(logits, [p], prompts=[(0, 1)])
    assert tok[0] == 2
    # penalty over output tokens too
    st = states_for([p])
    st[0].append(2)
    (tok, _, _), _ = run(logits, [p], states=st)
    assert tok[0] == 0  # 2 -> 0.75 < 2.0


def test_presence_and_frequency_penalties_output_only():
    logits = np.array([[3.0, 2.5, 0.0]], dtype=np.float32)
    p = SamplingParams(temperature=0.0, presence_penalty=0.4, frequency_penalty=0.2)
    st = states_for([p], prompts=[(1, 1, 1)])  # prompt tokens do not count
    (tok, _, _), _ = run(logits, [p], states=st)
    assert tok[0] == 0
    st[0].append(0)
    st[0].append(0)  # 3.0 - (0.2*2 + 0.4) = 2.2 < 2.5
    (tok, _, _), _ = run(logits, [p], states=st)
    assert tok[0] == 1


def test_min_tokens_masks_eos_and_stop_ids():
    logits = np.array([[9.0, 8.0, 7.0, 1.0]], dtype=np.float32)  # EOS (0) best, stop id 1 next
    p = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=(1,))
    assert run(logits, [p], num_out=[0])[0].token_ids[0] == 2
    assert run(logits, [p], num_out=[2])[0].token_ids[0] == 0
    q = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=(1,), ignore_eos=True)
    assert run(logits, [q], num_out=[0])[0].token_ids[0] == 0  # EOS is never a stop: not masked


def test_constraint_mask_and_eos_when_only_eos_allowed():
    logits = np.array([[9.0, 8.0, 7.0, 1.0]], dtype=np.float32)
    p = SamplingParams(temperature=0.7, min_tokens=5)
    st = states_for([p])
    st[0].matcher = AllowOnly({3})
    assert run(logits, [p], states=st)[0].token_ids[0] == 3
    # the grammar is done (only EOS allowed): min_tokens must not leave nothing to pick
    st[0].matcher = AllowOnly({0})
    assert run(logits, [p], states=st)[0].token_ids[0] == 0
    st[0].matcher = AllowOnly(set())  # a broken matcher allows nothing: end with EOS
    assert run(logits, [p], states=st)[0].token_ids[0] == 0
    st[0].matcher = AllowOnly({2})
    assert st[0].append(2) and st[0].matcher.consumed == [2]


def reference_dist(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """HF-style warpers, written plainly with full sorts."""
    x = logits.astype(np.float64) / p.temperature
    probs = np.exp(x - x.max())
    probs /= probs.sum()
    if p.top_k:
        kth = np.sort(x)[-p.top_k]
        probs[x < kth] = 0
        probs /= probs.sum()
    if p.top_p < 1:
        order = np.argsort(-probs)
        cum = np.cumsum(probs[order])
        n = int(np.searchsorted(cum, p.top_p)) + 1
        mask = np.zeros_like(probs, dtype=bool)
        mask[order[:n]] = True
        probs[~mask] = 0
        probs /= probs.sum()
    if p.min_p > 0:
        probs[probs < p.min_p * probs.max()] = 0
        probs /= probs.sum()
    if p.typical_p < 1:
        nz = probs > 0
        ent = -np.sum(probs[nz] * np.log(probs[nz]))
        dist = np.full_like(probs, np.inf)
        dist[nz] = np.abs(-np.log(probs[nz]) - ent)
        order = np.argsort(dist)
        cum = np.cumsum(probs[order])
        n = int(np.sum(cum < p.typical_p)) + 1
        keep = np.zeros_like(probs, dtype=bool)
        keep[order[:n]] = True
        probs[~keep] = 0
        probs /= probs.sum()
    return probs


@pytest.mark.parametrize(
    "p",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.5),
        SamplingParams(temperature=1.5, top_k=4),
        SamplingParams(temperature=1.0, top_p=0.6),
        SamplingParams(temperature=0.8, min_p=0.2),
        SamplingParams(temperature=1.0, typical_p=0.5),
        SamplingParams(temperature=1.2, top_k=6, top_p=0.9, min_p=0.05, typical_p=0.9),
    ],
    ids=["t1", "t0.5", "topk", "topp", "minp", "typical", "all"],
)
def test_distribution_matches_reference(p):
    vocab, draws = 10, 6000
    logits = np.random.default_rng(42).normal(scale=1.5, size=vocab).astype(np.float32)
    ref = reference_dist(logits, p)
    batch = np.broadcast_to(logits, (draws, vocab))
    params = [SamplingParams(**{**_fields(p), "seed": i}) for i in range(draws)]
    (tok, _, _), _ = run(batch, params)
    freq = np.bincount(tok, minlength=vocab) / draws
    assert np.all(freq[ref == 0] == 0), (freq, ref)
    assert np.abs(freq - ref).max() < 0.03, (freq, ref)


def _fields(p: SamplingParams) -> dict:
    return {f: getattr(p, f) for f in p.__dataclass_fields__ if f != "extra"}


def test_top_p_partial_sort_equals_full_sort():
    from modelc.engine.sampler import _top_p

    rng = np.random.default_rng(5)
    for scale in (0.5, 3.0, 8.0):  # flat (full sort path) to peaked (argpartition path)
        x = rng.normal(scale=scale, size=50_000)
        probs = np.exp(x - x.max())
        probs /= probs.sum()
        for top_p in (0.5, 0.9, 0.99):
            idx, out = _top_p(None, probs.copy(), top_p)
            ref = reference_dist(np.log(probs), SamplingParams(top_p=top_p))
            assert set(idx.tolist()) == set(np.flatnonzero(ref).tolist())
            assert out.sum() == pytest.approx(1.0)


def test_seeded_reproducible_regardless_of_batch():
    rng = np.random.default_rng(9)
    vocab, steps = 300, 12
    target = SamplingParams(temperature=0.9, top_p=0.95, seed=1234, presence_penalty=0.3)

    def generate(batch_size: int, position: int) -> list[int]:
        others = [SamplingParams(temperature=1.0, seed=i, top_k=5) for i in range(batch_size - 1)]
        params = others[:position] + [target] + others[position:]
        states = states_for(params)
        out = []
        for step in range(steps):
            step_rng = np.random.default_rng(step)  # same logits row for the target each step
            logits = rng.normal(size=(batch_size, vocab)).astype(np.float32)
            logits[position] = step_rng.normal(size=vocab)
            tok, _, _ = sample(logits, states, params, [step] * batch_size, EOS)
            for st, t in zip(states, tok, strict=True):
                st.append(int(t))
            out.append(int(tok[position]))
        return out

    alone = generate(1, 0)
    assert generate(5, 3) == alone
    assert generate(17, 0) == alone
    unseeded = [SamplingParams(temperature=1.0)] * 2
    st = states_for(unseeded)
    flat = np.zeros((2, 1000), dtype=np.float32)
    draws = [tuple(sample(flat, st, unseeded, [0, 0], EOS).token_ids) for _ in range(3)]
    assert len(set(draws)) > 1  # no seed: fresh entropy


def test_large_vocab_batch_runs_and_respects_filters():
    rng = np.random.default_rng(3)
    vocab, seqs = 152_000, 8
    logits = rng.normal(scale=2.0, size=(seqs, vocab)).astype(np.float32)
    params = [
        SamplingParams(temperature=0.0),
        SamplingParams(temperature=0.7, top_k=40, seed=1),
        SamplingParams(temperature=1.0, top_p=0.9, seed=2),
        SamplingParams(temperature=1.0, min_p=0.1, seed=3),
        SamplingParams(temperature=1.0, typical_p=0.9, seed=4, top_k=100),
        SamplingParams(temperature=1.0, repetition_penalty=1.3, seed=5, logprobs=True, top_logprobs=20),
        SamplingParams(temperature=1.0, frequency_penalty=1.0, seed=6, logit_bias=((7, 5.0),)),
        SamplingParams(temperature=0.3, seed=7),
    ]
    (tok, lp, tops), _ = run(logits, params, prompts=[tuple(range(100))] * seqs)
    assert tok[0] == logits[0].argmax()
    assert tok[1] in np.argsort(-logits[1])[:40]
    assert logits[3, tok[3]] / 1.0 >= logits[3].max() + np.log(0.1) - 1e-4
    assert len(tops[5]) == 20 and all(a[1] >= b[1] for a, b in zip(tops[5], tops[5][1:], strict=False))
    assert lp[5] <= 0 and np.isfinite(lp[5]) and np.isnan(np.delete(lp, 5)).all()  # only where asked


def test_shape_mismatch_is_engine_error():
    from modelc.errors import EngineError

    p = [SamplingParams()]
    with pytest.raises(EngineError):
        sample(np.zeros((2, 5), dtype=np.float32), states_for(p), p, [0], EOS)
    with pytest.raises(EngineError):
        sample(np.zeros(5, dtype=np.float32), states_for(p), p, [0], EOS)

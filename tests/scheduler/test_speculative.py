"""Speculative decoding in continuous batching: greedy output equals plain greedy output token for
token (prompt lookup and a draft model, alone and in a batch of 8), rollback frees the blocks."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.cache.block_pool import BlockPool
from modelc.models.tiny import make_tiny_gpt2, make_tiny_llama
from modelc.request import Constraint, SamplingParams
from modelc.scheduler.prompt_lookup import propose
from modelc.scheduler.sequence import Sequence
from modelc.scheduler.speculation import SpecState
from tests.scheduler.spec_driver import drive, make_pair

PROMPT = [5, 17, 3, 88, 41, 9, 60, 5, 17, 3, 88, 41]
PROMPTS = [[(7 * i + j * j) % 90 + 3 for j in range(10 + 3 * i)] for i in range(8)]


def _greedy(max_tokens=30, **kw):
    return SamplingParams(temperature=0.0, max_tokens=max_tokens, **kw)


def test_prompt_lookup_proposes_the_latest_continuation():
    assert propose([1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3], 3) == [7, 8, 1]
    assert propose([1, 2, 3, 9, 4, 5], 3) == []
    assert propose([4, 4, 4], 2) == [4]  # 2-gram (4, 4) seen at 0: continues with position 2
    assert propose([1, 2, 1, 2], 0) == []


def test_gamma_adapts_and_backs_off():
    st = SpecState()
    assert st.next_k(4) == 4
    st.record(4, 4)
    assert st.next_k(8) == 5
    st.record(5, 1)
    assert st.next_k(8) == 2
    st.record(2, 0)  # nothing accepted: one plain step, then drafts again
    assert st.next_k(8) == 0 and st.next_k(8) == 1
    st.record(1, 0)
    assert [st.next_k(8) for _ in range(3)] == [0, 0, 1]
    assert (st.num_drafts, st.num_draft_tokens, st.num_accepted_tokens) == (4, 12, 5)
    # a draft model that has been useless engine-wide: new sequences start backed off
    late = SpecState()
    late.start(0.05, costly=True)
    assert [late.next_k(4) for _ in range(257)] == [0] * 256 + [1]
    fair = SpecState()
    fair.start(0.5, costly=True)  # half accepted so far: start near the expected run (1 + 1)
    assert fair.next_k(8) == 2
    cheap = SpecState()
    cheap.start(0.05, costly=False)  # prompt lookup costs no draft forwards: no prior
    assert cheap.next_k(4) == 4


def test_truncate_frees_the_tail_and_never_registers_it():
    pool = BlockPool(8, 4)
    seq = Sequence(1, list(range(10, 19)), _greedy())  # 9 tokens
    assert pool.allocate(seq, 9 + 6)  # 15 positions: 4 blocks
    pool.cache_blocks(seq, 8)
    pool.truncate(1, 9)
    assert len(pool.block_table(1)) == 3 and pool.num_used_blocks == 3
    pool.check()
    pool.free(1)
    assert pool.num_used_blocks == 0 and pool.stats().num_cached_blocks == 2


@pytest.mark.parametrize("make", [make_tiny_llama, make_tiny_gpt2])
def test_prompt_lookup_greedy_equals_plain_alone(make):
    src = make(3)
    outs = {}
    for mode in (None, "ngram"):
        runner, sched = make_pair(src, speculative=mode)
        outs[mode] = drive(runner, sched, [Sequence(1, PROMPT, _greedy(40))])[1]
        assert sched.pool.num_used_blocks == 0
    assert outs["ngram"] == outs[None]
    assert sched.spec_stats.num_accepted_tokens > 0  # it did speculate, and it paid off


def _batch(spec_every_other: bool = True) -> list[Sequence]:
    return [
        Sequence(i + 1, PROMPTS[i], _greedy(30, speculative=None if i % 2 == 0 or not spec_every_other else False))
        for i in range(8)
    ]


@pytest.mark.parametrize("draft", [None, "self", "other"])
def test_speculative_greedy_equals_plain_in_a_batch_of_8(draft):
    src = make_tiny_llama(3)
    runner, sched = make_pair(src, max_num_seqs=8, max_batch_tokens=64)
    base = drive(runner, sched, _batch())
    draft_src = {"self": src, "other": make_tiny_llama(9), None: None}[draft]
    runner, sched = make_pair(src, max_num_seqs=8, max_batch_tokens=64, draft=draft_src,
                              speculative="ngram" if draft is None else "draft", spec_gamma=5)  # fmt: skip

    def small_steps(s, plan, step):  # the running sequences' drafts keep their share of a step <= 31 tokens
        if any(c.num_draft or c.draft_k for c in plan.chunks):
            assert sum(len(c.token_ids) + c.draft_k for c in plan.chunks if not c.is_new) <= 31

    assert drive(runner, sched, _batch(), before_update=small_steps) == base
    stats = sched.stats()
    assert stats["kv_blocks_used"] == 0 and not runner.states
    assert stats["spec_decode_num_drafts"] > 0
    if draft == "self":  # a draft equal to the target: every draft is accepted
        assert stats["spec_decode_num_accepted_tokens"] == stats["spec_decode_num_draft_tokens"]


def test_per_request_switches():
    src = make_tiny_llama(3)
    runner, sched = make_pair(src)  # engine default: off
    seqs = [Sequence(1, PROMPT, _greedy(20, speculative=True, gamma=3)), Sequence(2, PROMPT, _greedy(20))]
    out = drive(runner, sched, seqs)
    assert out[1] == out[2]
    assert sched.spec_stats.num_drafts > 0
    assert sched.spec_stats.num_draft_tokens <= 3 * sched.spec_stats.num_drafts
    runner, sched = make_pair(src)
    drive(runner, sched, [Sequence(1, PROMPT, _greedy(20, gamma=2))])  # the seed spec: gamma > 0 turns it on
    assert 0 < sched.spec_stats.num_draft_tokens <= 2 * sched.spec_stats.num_drafts
    runner, sched = make_pair(src, speculative="ngram")
    json_only = Constraint("regex", "w[0-9]+")
    seqs = [Sequence(1, PROMPT, _greedy(20, speculative=False)), Sequence(2, PROMPT, _greedy(20, gamma=0))]
    drive(runner, sched, seqs)
    assert sched.spec_stats.num_drafts == 0
    # a seeded sampled sequence keeps its batch-independent draws unless it asks for speculation
    seeded = SamplingParams(temperature=0.7, seed=3, max_tokens=20)
    assert sched._draft(Sequence(4, PROMPT + PROMPT, seeded), 10) == (0, None)
    asked = SamplingParams(temperature=0.7, seed=3, max_tokens=20, gamma=2)
    assert sched._draft(Sequence(5, PROMPT + PROMPT, asked), 10)[0] > 0
    # a grammar-constrained sequence never speculates (its mask cannot be verified ahead)
    seq = Sequence(3, PROMPT, _greedy(5, constraint=json_only))
    assert sched._draft(seq, 10) == (0, None)


@pytest.mark.parametrize("draft", [False, True])
def test_cancel_mid_verification_returns_every_block(draft):
    src = make_tiny_llama(3)
    runner, sched = make_pair(src, max_num_seqs=8, max_batch_tokens=64, draft=src if draft else None,
                              speculative="draft" if draft else "ngram", spec_gamma=4)  # fmt: skip
    aborted = []

    def cancel(s, plan, step):
        for c in plan.chunks:
            if (c.num_draft or c.draft_k) and c.seq_id not in aborted and len(aborted) < 4:
                assert s.abort(c.seq_id) == []  # in flight: ends at update
                aborted.append(c.seq_id)

    drive(runner, sched, _batch(spec_every_other=False), before_update=cancel)
    assert len(aborted) == 4
    assert sched.pool.num_used_blocks == 0 and not runner.states
    sched.pool.check()


def test_sampled_speculation_runs_and_respects_max_tokens():
    src = make_tiny_llama(3)
    runner, sched = make_pair(src, speculative="draft", draft=make_tiny_llama(4), spec_gamma=4)
    params = SamplingParams(temperature=0.8, top_k=20, repetition_penalty=1.1, max_tokens=25, seed=1, speculative=True)
    out = drive(runner, sched, [Sequence(1, PROMPT, params)])[1]
    assert len(out) == 25 and all(0 <= t < 96 for t in out)
    assert sched.spec_stats.num_drafts > 0
    assert np.isfinite(sched.spec_stats.num_accepted_tokens)


def test_a_draft_with_another_tokenizer_is_refused():
    from modelc.api.async_engine import _check_draft
    from modelc.errors import InvalidRequestError

    _check_draft(make_tiny_llama(0), make_tiny_llama(1, num_layers=1))
    with pytest.raises(InvalidRequestError, match="tokenizer"):
        _check_draft(make_tiny_llama(0), make_tiny_llama(1, vocab_size=64))


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_speculation_under_block_pressure_and_preemption(mode):
    """A pool too small for everyone: drafts never preempt (they fall back to a plain decode) and
    preempted sequences recompute; the output is still the plain output."""
    src = make_tiny_llama(3)
    seqs = lambda: [Sequence(i + 1, PROMPTS[i] * 2, _greedy(24)) for i in range(4)]  # noqa: E731
    runner, sched = make_pair(src, blocks=64, max_num_seqs=4, max_batch_tokens=64)
    base = drive(runner, sched, seqs())
    runner, sched = make_pair(src, blocks=7, max_num_seqs=4, max_batch_tokens=64, speculative=mode,
                              draft=src if mode == "draft" else None, spec_gamma=6)  # fmt: skip
    assert drive(runner, sched, seqs()) == base
    assert sched.num_preemptions > 0 and sched.pool.num_used_blocks == 0


@pytest.mark.parametrize("mode", ["ngram", "draft"])
def test_speculation_across_context_shifts(mode):
    """Generating 3x a 48-token context with shifts: speculative greedy = plain greedy, and the draft
    model (= the target) is handed the shifted context again, so it still agrees with the target."""
    src = make_tiny_llama(3)
    p = _greedy(120, max_context=48, context_shift=True, n_keep=4, ignore_eos=True)
    runner, sched = make_pair(src, blocks=16)
    base = drive(runner, sched, [Sequence(1, PROMPT, p)])
    assert len(base[1]) == 120 and sched.num_context_shifts > 0
    runner, sched = make_pair(src, blocks=16, speculative=mode, draft=src if mode == "draft" else None, spec_gamma=4)
    resent = []  # chunks that hand the draft the (shifted) context again

    def watch(s, plan, step):
        for c in plan.chunks:
            if c.context_ids is not None:
                assert c.context_ids.tolist() == s._seqs[c.seq_id].token_ids[: c.start_pos]
                resent.append(c)

    assert drive(runner, sched, [Sequence(1, PROMPT, p)], before_update=watch) == base
    assert sched.num_context_shifts > 0 and sched.pool.num_used_blocks == 0
    if mode == "draft":
        assert len(resent) == sched.num_context_shifts
        st = sched.spec_stats
        assert st.num_draft_tokens > 40 and st.num_accepted_tokens == st.num_draft_tokens
    else:
        assert not resent


@pytest.mark.parametrize("kv_dtype", ["float16", "q8_0", "mixed"])
def test_speculation_with_every_kv_cache_type(kv_dtype):
    """The draft's pages take the target's KV type; rolled-back slots are rewritten, so greedy output
    still equals plain output on each type."""
    from modelc.cache.block_pool import BlockPool
    from modelc.config import SchedulerConfig
    from modelc.engine.runner import Runner
    from modelc.scheduler.scheduler import Scheduler

    src = make_tiny_llama(3)
    outs = []
    for mode in (None, "draft", "ngram"):
        runner = Runner(src, num_kv_blocks=64, kv_dtype=kv_dtype, draft_source=src if mode == "draft" else None)
        sched = Scheduler(SchedulerConfig(speculative=mode, max_num_seqs=8, max_batch_tokens=64), BlockPool(64))
        outs.append(drive(runner, sched, [Sequence(i + 1, PROMPTS[i], _greedy(24)) for i in range(4)]))
    assert outs[1] == outs[0] and outs[2] == outs[0]

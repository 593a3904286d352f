from __future__ import annotations

import numpy as np
import pytest

from modelc.engine.runner import Runner
from modelc.errors import InvalidRequestError
from modelc.models.tiny import make_tiny_gpt2, make_tiny_llama, reference_hidden, reference_logits
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, SeqChunk

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def _chunk(seq_id, ids, start, table, *, sample=True, params=GREEDY, prompt_len=None, num_out=0, is_new=False):
    ids = np.asarray(ids, np.int32)
    return SeqChunk(seq_id, ids, start, np.asarray(table, np.int32), sample, params,
                    prompt_len if prompt_len is not None else start + len(ids), num_out, is_new)  # fmt: skip


def _generate(runner, seq_id, prompt, n, table, params=GREEDY, chunk=None):
    """Drive the runner like a scheduler: (chunked) prefill, then n - 1 decode steps."""
    out, step = [], 0
    cuts = list(range(0, len(prompt), chunk or len(prompt))) + [len(prompt)]
    for a, b in zip(cuts, cuts[1:], strict=False):
        last = b == len(prompt)
        res = runner.execute(BatchPlan(step, (_chunk(seq_id, prompt[a:b], a, table, sample=last, params=params,
                                                     prompt_len=len(prompt), is_new=a == 0),)))  # fmt: skip
        step += 1
        assert res.error is None
    out.append(res.tokens[0].token_id)
    while len(out) < n:
        pos = len(prompt) + len(out) - 1
        c = _chunk(seq_id, [out[-1]], pos, table, params=params, prompt_len=len(prompt), num_out=len(out))
        res = runner.execute(BatchPlan(step, (c,)))
        step += 1
        out.append(res.tokens[0].token_id)
    return out


def _reference_greedy(src, prompt, n):
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(reference_logits(src, ids)[-1])))
    return ids[len(prompt) :]


@pytest.mark.parametrize("make", [make_tiny_llama, make_tiny_gpt2])
def test_greedy_generation_matches_reference(make):
    src = make(4)
    runner = Runner(src, num_kv_blocks=8)
    prompt = [5, 17, 3, 88, 41, 9, 60]
    got = _generate(runner, 1, prompt, 10, [3, 0])
    assert got == _reference_greedy(src, prompt, 10)
    # chunked prefill gives the same continuation
    assert _generate(Runner(src, num_kv_blocks=8), 1, prompt, 10, [3, 0], chunk=3) == got


def test_mixed_batch_equals_each_alone():
    src = make_tiny_llama(6)
    prompts = {
        10: [1, 2, 3],
        11: list(range(20, 60)),
        12: [7],
        13: [9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12, 13, 14, 15, 16, 17],
    }
    tables = {10: [0], 11: [1, 2, 3], 12: [4], 13: [5, 6]}
    alone = {s: _generate(Runner(src, num_kv_blocks=8), s, p, 6, tables[s]) for s, p in prompts.items()}
    runner = Runner(src, num_kv_blocks=8)
    plan = BatchPlan(0, tuple(_chunk(s, p, 0, tables[s], is_new=True) for s, p in prompts.items()))
    res = runner.execute(plan)
    got = {t.seq_id: [t.token_id] for t in res.tokens}
    for step in range(1, 6):
        chunks = tuple(_chunk(s, [got[s][-1]], len(p) + step - 1, tables[s], prompt_len=len(p), num_out=step)
                       for s, p in prompts.items())  # fmt: skip
        for t in runner.execute(BatchPlan(step, chunks)).tokens:
            got[t.seq_id].append(t.token_id)
    assert got == alone


def test_non_sampling_chunk_and_freed_state():
    runner = Runner(make_tiny_llama(0), num_kv_blocks=4)
    res = runner.execute(BatchPlan(0, (_chunk(5, [1, 2, 3], 0, [0], sample=False, is_new=True),)))
    assert res.tokens == () and res.error is None and 5 in runner.states
    res = runner.execute(BatchPlan(1, (), freed_seq_ids=(5,)))
    assert res.tokens == () and 5 not in runner.states


def test_errors_become_batch_errors():
    runner = Runner(make_tiny_llama(0), num_kv_blocks=4)
    res = runner.execute(BatchPlan(0, (_chunk(1, list(range(20)), 0, [0], is_new=True),)))
    assert res.error and "block table" in res.error
    res = runner.execute(BatchPlan(1, (_chunk(1, [3], 0, [4], is_new=True),)))
    assert res.error and "block id" in res.error
    res = runner.execute(BatchPlan(1, (_chunk(1, [500], 0, [0], is_new=True),)))
    assert res.error and "out of range" in res.error
    res = runner.execute(BatchPlan(2, (_chunk(1, [3], 0, [0], params=SamplingParams(adapter="nope")),)))
    assert res.error and "nope" in res.error


def test_seeded_sampling_is_reproducible_and_logprobs_are_raw():
    src = make_tiny_llama(2)
    p = SamplingParams(temperature=1.5, top_p=0.9, top_k=20, seed=123, logprobs=True, top_logprobs=3)
    a = _generate(Runner(src, num_kv_blocks=4), 1, [4, 5, 6], 12, [0], params=p)
    b = _generate(Runner(src, num_kv_blocks=4), 1, [4, 5, 6], 12, [0], params=p)
    assert a == b
    runner = Runner(src, num_kv_blocks=4)
    res = runner.execute(BatchPlan(0, (_chunk(1, [4, 5, 6], 0, [0], params=p, is_new=True),)))
    tok = res.tokens[0]
    ref = reference_logits(src, [4, 5, 6])[-1]
    lp = ref - ref.max() - np.log(np.exp(ref - ref.max()).sum())
    assert tok.logprob == pytest.approx(lp[tok.token_id], abs=1e-4)
    assert [t for t, _ in tok.top_logprobs] == list(np.argsort(-lp)[:3])
    assert tok.token_id in np.argsort(-ref)[:20]


def test_min_tokens_masks_eos():
    src = make_tiny_llama(0)
    runner = Runner(src, num_kv_blocks=4)
    logits = runner.logits([1, 2, 3])
    eos = int(np.argmax(logits[-1]))
    src.special_tokens["eos_token_ids"] = [eos]
    runner = Runner(src, num_kv_blocks=4)
    p = SamplingParams(temperature=0.0, min_tokens=2)
    res = runner.execute(BatchPlan(0, (_chunk(1, [1, 2, 3], 0, [0], params=p, is_new=True),)))
    assert res.tokens[0].token_id != eos


@pytest.mark.parametrize("make", [make_tiny_llama, make_tiny_gpt2])
def test_logits_and_embed_match_reference(make):
    src = make(1)
    runner = Runner(src, num_kv_blocks=2)
    ids = list(range(3, 40))
    np.testing.assert_allclose(runner.logits(ids), reference_logits(src, ids), rtol=1e-4, atol=1e-4)
    emb = runner.embed([ids, [5, 6]])
    assert emb.shape == (2, src.config["hidden_size"]) and emb.dtype == np.float32
    want = reference_hidden(src, ids).mean(0)
    np.testing.assert_allclose(emb[0], want / np.linalg.norm(want), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)
    with pytest.raises(InvalidRequestError):
        runner.embed([[]])


def test_constrained_sampling_follows_the_grammar():
    from modelc.models.tiny import with_tokenizer
    from modelc.request import Constraint

    runner = Runner(with_tokenizer(make_tiny_llama(0)), num_kv_blocks=4)
    p = SamplingParams(temperature=0.0, constraint=Constraint("regex", " w4 w5"))
    toks = _generate(runner, 1, [1, 9, 9], 2, [0], params=p)
    assert toks == [4, 5]
    res = runner.execute(BatchPlan(9, (_chunk(2, [1, 9, 9], 0, [1], params=p, is_new=True),)))
    assert res.tokens[0].token_id == 4 and not res.tokens[0].constraint_done
    res = runner.execute(BatchPlan(10, (_chunk(2, [4], 3, [1], params=p, prompt_len=3, num_out=1),)))
    assert res.tokens[0].token_id == 5 and res.tokens[0].constraint_done


@pytest.mark.parametrize("make", [make_tiny_llama, make_tiny_gpt2])
@pytest.mark.parametrize("kv_dtype", ["float32", "float16"])
def test_warmup_leaves_the_cache_and_states_alone(make, kv_dtype):
    runner = Runner(make(0), num_kv_blocks=4, kv_dtype=kv_dtype)
    assert runner.warmup() > 0
    assert not runner.kv.k.any() and not runner.states


def _kernel_signatures() -> dict[str, int]:
    """Compiled or loaded signatures per numba kernel of the modelc.kernels modules imported so far."""
    import sys

    from numba.core.registry import CPUDispatcher

    return {f"{n}.{a}": len(o.signatures) for n, m in list(sys.modules.items()) if n.startswith("modelc.kernels.")
            and m is not None for a, o in vars(m).items() if isinstance(o, CPUDispatcher)}  # fmt: skip


def new_signatures_after_requests(runner) -> dict[str, tuple[int, int]]:
    """Kernels that compile or load another signature when `runner` serves a 70-token prefill (BLAS matmuls,
    sgemm attention), single decodes and a 2-sequence decode batch: {name: (before, after)}."""
    before = _kernel_signatures()
    _generate(runner, 1, list(range(1, 71)), 3, list(range(6)))
    _generate(runner, 2, [4, 5], 2, [7])
    res = runner.execute(BatchPlan(99, (_chunk(1, [3], 72, list(range(6)), prompt_len=70, num_out=3),
                                        _chunk(2, [6], 3, [7], prompt_len=2, num_out=2))))  # fmt: skip
    assert res.error is None, res.error
    return {k: (before.get(k, 0), v) for k, v in _kernel_signatures().items() if v > before.get(k, 0)}


_WARMUP_PROBE = """
import sys
from modelc.engine.runner import Runner
from modelc.models.tiny import make_tiny_llama
sys.path.insert(0, sys.argv[2])
from test_runner import new_signatures_after_requests

src = make_tiny_llama(3)
if sys.argv[1] != "none":
    from modelc.artifact.transforms import plan
    src.tensors, _ = plan(src.tensors, prune=None, quantize=sys.argv[1], quantize_embeddings=True, quantize_output=True)
runner = Runner(src, num_kv_blocks=16)
runner.warmup()
print("GREW", new_signatures_after_requests(runner))
"""


@pytest.mark.parametrize("quantize", ["none", "q4_0"])
def test_warmup_reaches_every_kernel_a_request_uses(quantize):
    """After warmup, a long prefill, a 2-sequence decode batch and single decodes compile or load no further
    kernel signature (in a fresh process: in this one, earlier tests have loaded kernels already)."""
    import pathlib
    import subprocess
    import sys

    here = str(pathlib.Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", _WARMUP_PROBE, quantize, here], capture_output=True, text=True,
                         timeout=240)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "GREW {}" in out.stdout, out.stdout

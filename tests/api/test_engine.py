from __future__ import annotations

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.errors import InvalidRequestError
from modelc.models.tiny import make_tiny_llama, reference_hidden, reference_logits, with_tokenizer


def _model(seed=0):
    return with_tokenizer(make_tiny_llama(seed))


def _text(eng, ids, new):
    """The continuation text as decode(prompt + new) renders it past the prompt (leading space included)."""
    return eng.detokenize(list(ids) + list(new))[len(eng.detokenize(ids)) :]


def _greedy_ref(src, ids, n):
    ids = list(ids)
    start = len(ids)
    for _ in range(n):
        ids.append(int(np.argmax(reference_logits(src, ids)[-1])))
    return ids[start:]


def test_generate_matches_reference_greedy():
    src = _model()
    eng = Engine(src, kv_cache_tokens=256)
    prompt = "w5 w17 w33 w8"
    ids = eng.tokenize(prompt)
    assert ids == [1, 5, 17, 33, 8]
    want_ids = _greedy_ref(src, ids, 8)
    out = eng.generate(prompt, temperature=0.0, max_tokens=8, ignore_eos=True)
    assert out == _text(eng, ids, want_ids)
    assert "".join(eng.stream(prompt, temperature=0.0, max_tokens=8, ignore_eos=True)) == out
    assert (
        list(eng.generate_ids(ids, eng._params({"temperature": 0.0, "max_tokens": 8, "ignore_eos": True}))) == want_ids
    )


def test_stop_rules():
    src = _model()
    eng = Engine(src, kv_cache_tokens=256)
    ids = [1, 5, 17, 33, 8]
    want = _greedy_ref(src, ids, 6)
    full = _text(eng, ids, want)
    words = full.split()
    # a stop string cuts the text before it (and generation ends)
    stop = words[2]
    cut = eng.generate(ids, temperature=0.0, max_tokens=6, ignore_eos=True, stop=[stop])
    assert cut == full[: full.find(stop)]
    # a stop token id ends generation without being emitted
    assert (
        list(eng.generate_ids(ids, eng._params({"temperature": 0.0, "max_tokens": 6, "stop_token_ids": [want[3]]})))
        == want[: want.index(want[3])]
    )
    # EOS ends generation; ignore_eos keeps going; min_tokens masks EOS
    src.special_tokens["eos_token_ids"] = [want[0]]
    eng = Engine(src, kv_cache_tokens=256)
    assert eng.generate(ids, temperature=0.0, max_tokens=6) == ""
    assert eng.generate(ids, temperature=0.0, max_tokens=3, ignore_eos=True) == _text(eng, ids, want[:3])
    got = list(eng.generate_ids(ids, eng._params({"temperature": 0.0, "max_tokens": 3, "min_tokens": 2})))
    assert len(got) >= 2 and want[0] not in got[:2]


def test_chat_uses_template_and_kv_limit():
    src = _model(1)
    src.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}w9"
    eng = Engine(src, kv_cache_tokens=32)
    out = eng.chat([{"role": "user", "content": "w4 w5"}], temperature=0.0, max_tokens=4, ignore_eos=True)
    assert out == eng.generate("w4 w5 w9", temperature=0.0, max_tokens=4, ignore_eos=True)
    # generation stops when the KV cache is full instead of overflowing it
    assert (
        len(list(eng.generate_ids([1] * 30, eng._params({"temperature": 0.0, "max_tokens": 10, "ignore_eos": True}))))
        == 2
    )
    with pytest.raises(InvalidRequestError):
        list(eng.generate_ids([1] * 40))
    with pytest.raises(InvalidRequestError):
        eng.generate("w4", temperature=-1.0)
    with pytest.raises(InvalidRequestError):
        eng.generate("w4", bogus=1)


def test_logits_and_embed():
    src = _model(2)
    eng = Engine(src)
    np.testing.assert_allclose(eng.logits([1, 4, 5, 6]), reference_logits(src, [1, 4, 5, 6]), rtol=1e-4, atol=1e-4)
    emb = eng.embed(["w4 w5", "w6"])
    want = reference_hidden(src, [1, 4, 5]).mean(0)
    np.testing.assert_allclose(emb[0], want / np.linalg.norm(want), rtol=1e-4, atol=1e-5)
    assert emb.shape == (2, 64)


def test_load_artifact(tmp_path):
    from modelc.artifact.writer import write_artifact

    src = _model(3)
    path = tmp_path / "tiny.modelc"
    write_artifact(src, path)
    eng = Engine.load(path)
    assert eng.generate("w7 w8", temperature=0.0, max_tokens=5, ignore_eos=True) == Engine(src).generate(
        "w7 w8", temperature=0.0, max_tokens=5, ignore_eos=True
    )


@pytest.mark.shared
@pytest.mark.parametrize("name,weights", [("tiny-llama", "gguf/tiny-llama-F32.gguf"), ("tiny-gpt2", "gguf/tiny-gpt2-F32.gguf"),
                                          ("tiny-llama", "hf")])  # fmt: skip
def test_load_raw_weights_greedy_matches_transformers(shared_fixtures, name, weights):
    d = shared_fixtures / "models" / name
    eng = Engine.load(d / weights, kv_cache_tokens=64)
    prompt = (d / "ref" / "prompt.txt").read_text()
    ids = eng.tokenize(prompt)
    assert ids == np.load(d / "ref" / "prompt_ids.npy").tolist()
    greedy = np.load(d / "ref" / "greedy_ids.npy").tolist()
    got = list(eng.generate_ids(ids, eng._params({"temperature": 0.0, "max_tokens": 16, "ignore_eos": True})))
    assert got == greedy


def test_async_engine_with_real_runner_matches_sync_engine():
    """Continuous batching over the real Runner (3 concurrent requests) gives each the sync Engine's tokens."""
    import anyio

    from modelc.api.async_engine import AsyncEngine
    from modelc.request import SamplingParams

    src = _model(0)
    params = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    prompts = [[1, 5, 6, 7], [1, *range(10, 60)], [1, 9]]
    sync = Engine(src)
    want = [list(sync.generate_ids(p, params)) for p in prompts]
    got: dict[int, list[int]] = {}

    async def main() -> None:
        async with AsyncEngine.open(src) as eng:

            async def one(i: int) -> None:
                got[i] = [ev.token_id async for ev in eng.generate(prompts[i], params, request_id=f"r{i}")
                          if hasattr(ev, "token_id")]  # fmt: skip

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for i in range(len(prompts)):
                        tg.start_soon(one, i)

    anyio.run(main)
    assert [got[i] for i in range(len(prompts))] == want


def test_gpt2_generation_stops_at_its_position_table():
    from modelc.models.tiny import make_tiny_gpt2

    eng = Engine(make_tiny_gpt2(0, max_positions=20), kv_cache_tokens=256)
    got = list(eng.generate_ids([5] * 15, eng._params({"temperature": 0.0, "max_tokens": 50, "ignore_eos": True})))
    assert len(got) == 5
    with pytest.raises(InvalidRequestError):
        list(eng.generate_ids([5] * 20))


def test_load_by_store_name(tmp_path, monkeypatch):
    from modelc import store
    from modelc.artifact.writer import write_artifact
    from modelc.errors import NotFoundError

    monkeypatch.setenv("MODELC_HOME", str(tmp_path / "home"))
    src = _model(4)
    store.add("tiny", lambda p: write_artifact(src, p))
    eng = Engine.load("tiny")
    assert eng.generate("w3", temperature=0.0, max_tokens=3, ignore_eos=True) == Engine(src).generate(
        "w3", temperature=0.0, max_tokens=3, ignore_eos=True
    )
    with pytest.raises(NotFoundError):
        Engine.load("not-there")


@pytest.mark.parametrize(
    ("call", "words"),
    [
        (lambda e: e.generate(None, max_tokens=1), "prompt must be a string or a sequence of token ids"),
        (lambda e: e.generate(5, max_tokens=1), "prompt must be a string or a sequence of token ids"),
        (lambda e: e.generate(["w5"], max_tokens=1), "prompt must be a string or a sequence of token ids"),
        (lambda e: e.generate("w5 \ud800", max_tokens=1), "lone UTF-16 surrogate"),
        (lambda e: e.tokenize(None), "must be a string, got NoneType"),
        (lambda e: e.generate("w5", stop=5, max_tokens=1), "bad sampling argument"),
        (lambda e: e.generate("w5", logit_bias={"x": 1}, max_tokens=1), "bad sampling argument"),
        (lambda e: e.chat([], max_tokens=1), "messages must be a non-empty list"),
        (lambda e: e.embed(None), "texts must be a string or a list"),
        (lambda e: list(e.generate_ids([1, 5], "greedy")), "params must be a SamplingParams"),
    ],
)
def test_bad_arguments_are_invalid_request_errors(call, words):
    """Each was a TypeError, ValueError or AttributeError from deep inside (tokenizers' 'TextInputSequence must
    be str' for a lone surrogate), or for chat([]) a completion of nothing."""
    eng = Engine(_model(), kv_cache_tokens=64)
    with pytest.raises(InvalidRequestError, match=words):
        call(eng)


def test_load_of_something_that_is_not_a_path_or_name():
    from modelc.errors import ModelcError

    with pytest.raises(ModelcError, match="a model is a path or a store name, got NoneType"):
        Engine.load(None)

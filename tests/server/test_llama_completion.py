"""llama.cpp's native /completion, and llama.cpp's fields of /tokenize and /detokenize, on the fake engine
(byte tokenizer: id = byte + 3, BOS 0): the prompt forms, llama.cpp's sampling names and defaults, the answer
and stream shapes, completion_probabilities, and clear 400s. tests/server/test_infill.py checks /completion
against /v1/completions on a real model."""

from __future__ import annotations

import math

import pytest

from tests.server.conftest import error_of
from tests.server.fake_engine import BOS, OFFSET

pytestmark = pytest.mark.anyio


def ids(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode()]


async def test_plain_answer_shape_and_llama_defaults(client) -> None:
    resp = await client.post("/completion", {"prompt": "ab", "n_predict": 5, "seed": -1})
    assert resp.status_code == 200
    r = await resp.get_json()
    prompt, params = client.engine.calls[-1]
    assert prompt == [BOS, *ids("ab")]  # text first: the model's BOS, as llama-server adds it
    assert (params.temperature, params.top_k, params.top_p, params.min_p) == (0.8, 40, 0.95, 0.05)
    assert params.max_tokens == 5 and params.seed is None  # -1: a random seed
    assert len(r["content"]) == 5 and r["stop"] is True and r["stop_type"] == "limit"
    assert r["tokens_predicted"] == 5 and r["tokens_evaluated"] == 3 and r["tokens"] == []
    assert r["prompt"].endswith("ab") and r["model"] == "fake-model" and r["timings"]["predicted_n"] == 5
    assert "completion_probabilities" not in r


async def test_repeat_penalty_reaches_the_sampler(client) -> None:
    await client.post("/completion", {"prompt": "ab", "n_predict": 2, "repeat_penalty": 1.3})
    assert client.engine.calls[-1][1].repetition_penalty == 1.3  # was dropped: not among the passed names


async def test_operator_defaults_win_over_llama_ones(make_client) -> None:
    from modelc.server.state import GenerationDefaults

    c = make_client(defaults=GenerationDefaults(temperature=0.0))
    await c.post("/completion", {"prompt": "ab", "n_predict": 2})
    assert c.engine.calls[-1][1].temperature == 0.0
    await c.post("/completion", {"prompt": "ab", "n_predict": 2, "temperature": -1})  # llama.cpp: < 0 is greedy
    assert c.engine.calls[-1][1].temperature == 0.0


@pytest.mark.parametrize(
    "prompt,expected",
    [
        ([5, 6, 7], [5, 6, 7]),  # token ids as they are: no BOS
        ([5, "ab", 6], [5, *ids("ab"), 6]),  # mixed: later texts without BOS
        (["ab", 9], [BOS, *ids("ab"), 9]),  # starts with text: BOS
    ],
)
async def test_one_prompt_forms(client, prompt, expected) -> None:
    resp = await client.post("/completion", {"prompt": prompt, "n_predict": 1, "return_tokens": True})
    r = await resp.get_json()
    assert client.engine.calls[-1][0] == expected and isinstance(r, dict) and len(r["tokens"]) == 1


async def test_several_prompts_answer_an_array(client) -> None:
    resp = await client.post("/completion", {"prompt": ["ab", [5, 6]], "n_predict": 3, "temperature": 0})
    r = await resp.get_json()
    assert [x["index"] for x in r] == [0, 1] and [x["tokens_evaluated"] for x in r] == [3, 2]
    assert sorted(call[0] for call in client.engine.calls) == sorted([[BOS, *ids("ab")], [5, 6]])
    resp = await client.post("/completion", {"prompt": "ab", "n_predict": 2, "n_cmpl": 3, "seed": 4})
    r = await resp.get_json()
    assert len(r) == 3 and sorted(c[1].seed for c in client.engine.calls[-3:]) == [4, 5, 6]


async def test_n_probs_gives_completion_probabilities(client) -> None:
    r = await (await client.post("/completion", {"prompt": "ab", "n_predict": 4, "n_probs": 3})).get_json()
    probs = r["completion_probabilities"]
    assert len(probs) == 4 and client.engine.calls[-1][1].top_logprobs == 3
    for p, ch in zip(probs, r["content"], strict=True):
        assert p["token"] == ch and p["id"] == ord(ch) + OFFSET and p["bytes"] == list(ch.encode())
        assert [t["logprob"] for t in p["top_logprobs"]] == sorted(
            (t["logprob"] for t in p["top_logprobs"]), reverse=True
        )
        assert len(p["top_logprobs"]) == 3 and math.isfinite(p["logprob"])


async def test_stream_frames_then_final(client) -> None:
    body = {"prompt": "ab", "n_predict": 4, "temperature": 0, "n_probs": 2}
    whole = await (await client.post("/completion", body)).get_json()
    resp, events = await client.sse("/completion", {**body, "stream": True})
    assert resp.status_code == 200
    frames, last = events[:-1], events[-1]
    assert not any(f["stop"] for f in frames) and last["stop"] is True and last["stop_type"] == "limit"
    assert "".join(f["content"] for f in frames) == whole["content"] and last["content"] == ""
    assert all(len(f["tokens"]) == 1 and len(f["completion_probabilities"]) == 1 for f in frames)
    assert [f["completion_probabilities"][0] for f in frames] == whole["completion_probabilities"]


async def test_logit_bias_forms(client) -> None:
    a, b = ids("a")[0], ids("b")[0]
    await client.post("/completion", {"prompt": "x", "n_predict": 1, "logit_bias": [[a, 2.5], [b, False]]})
    assert dict(client.engine.calls[-1][1].logit_bias) == {a: 2.5, b: -100.0}
    await client.post("/completion", {"prompt": "x", "n_predict": 1, "logit_bias": [["ab", -1]]})
    assert dict(client.engine.calls[-1][1].logit_bias) == {a: -1.0, b: -1.0}  # every token of the text
    await client.post("/completion", {"prompt": "x", "n_predict": 1, "logit_bias": {str(a): 1}})
    assert dict(client.engine.calls[-1][1].logit_bias) == {a: 1.0}


@pytest.mark.parametrize(
    "body,param",
    [
        ({}, "prompt"),
        ({"prompt": {"a": 1}}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[1.5]]}, "prompt"),
        ({"prompt": [999999]}, "prompt"),
        ({"prompt": "a", "n_predict": 0}, "n_predict"),
        ({"prompt": "a", "post_sampling_probs": True, "n_probs": 2}, "post_sampling_probs"),
        ({"prompt": ["a", "b"], "stream": True}, "prompt"),
        ({"prompt": "a", "n_probs": 500}, "n_probs"),
        ({"prompt": "a", "logit_bias": [[1, "x"]]}, "logit_bias"),
        ({"prompt": "a", "logit_bias": 3}, "logit_bias"),
        ({"prompt": "a", "temperature": "hot"}, "temperature"),
    ],
)
async def test_bad_requests_are_400(client, body, param) -> None:
    await error_of(await client.post("/completion", body), 400, param)
    assert client.engine.calls == []


async def test_tokenize_llama_fields(client) -> None:
    r = await (await client.post("/tokenize", {"content": "ab"})).get_json()
    assert r["tokens"] == ids("ab")  # llama.cpp: add_special defaults to false
    r = await (await client.post("/tokenize", {"content": "ab", "add_special": True, "with_pieces": True})).get_json()
    assert r["tokens"] == [
        {"id": BOS, "piece": "<s>"},
        {"id": ids("a")[0], "piece": "a"},
        {"id": ids("b")[0], "piece": "b"},
    ]
    r = await (await client.post("/tokenize", {"content": "é", "with_pieces": True})).get_json()
    assert [t["piece"] for t in r["tokens"]] == [[0xC3], [0xA9]]  # not UTF-8 alone: the bytes
    r = await (await client.post("/tokenize", {"input": "ab"})).get_json()
    assert r["tokens"] == [BOS, *ids("ab")]  # the seed's field keeps its default
    await error_of(await client.post("/tokenize", {"content": 3}), 400, "content")
    r = await (await client.post("/detokenize", {"tokens": ids("ab")})).get_json()
    assert r["content"] == r["text"] == "ab"


async def test_apply_template_then_completion_is_the_chat_prompt(client) -> None:
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    r = await (await client.post("/apply-template", {"messages": messages})).get_json()
    assert r["prompt"] == "<|system|>be brief\n<|user|>hi\n<|assistant|>"  # the fake template's text
    await client.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1})
    await client.post("/completion", {"prompt": r["prompt"], "n_predict": 1})
    chat_ids, completion_ids = client.engine.calls[-2][0], client.engine.calls[-1][0]
    assert completion_ids == chat_ids  # the same prompt ids as chat completions ran
    await error_of(await client.post("/apply-template", {"messages": []}), 400, "messages")
    await error_of(await client.post("/apply-template", {}), 400, "messages")


async def test_template_kwargs_naming_the_requests_own_fields(client) -> None:
    """chat_template_kwargs holding add_generation_prompt, messages or tools made render() raise a TypeError
    ('got multiple values for keyword argument'), echoed in a 400. add_generation_prompt is honoured, as vLLM
    does; messages and tools are a clear 400."""
    messages = [{"role": "user", "content": "hi"}]
    r = await client.post(
        "/apply-template", {"messages": messages, "chat_template_kwargs": {"add_generation_prompt": False}}
    )
    assert (await r.get_json())["prompt"] == "<|user|>hi\n"  # no <|assistant|> turn opened
    for kwargs in ({"messages": "x"}, {"tools": []}, {"add_generation_prompt": 5}):
        for route in ("/apply-template", "/v1/chat/completions"):
            resp = await client.post(route, {"messages": messages, "max_tokens": 1, "chat_template_kwargs": kwargs})
            body = await error_of(resp, 400, "chat_template_kwargs")
            assert "TypeError" not in str(body)

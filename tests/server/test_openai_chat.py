from __future__ import annotations

import pytest

from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio

MSGS = [{"role": "user", "content": "Say something"}]


async def test_chat_completion_shape_and_usage(client) -> None:
    resp = await client.post(
        "/v1/chat/completions", {"model": "fake-model", "messages": MSGS, "max_tokens": 5, "temperature": 0}
    )
    assert resp.status_code == 200
    body = await resp.get_json()
    assert body["object"] == "chat.completion" and body["model"] == "fake-model"
    assert body["id"].startswith("chatcmpl-")
    (choice,) = body["choices"]
    assert choice["message"]["role"] == "assistant" and len(choice["message"]["content"]) == 5
    assert choice["finish_reason"] == "length" and choice["logprobs"] is None
    prompt_ids, params = client.engine.calls[0]
    assert body["usage"] == {
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": 5,
        "total_tokens": len(prompt_ids) + 5,
    }
    assert params.max_tokens == 5 and params.temperature == 0.0
    # the template rendered the conversation, and the prompt was encoded from it
    assert client.engine.tokenizer.decode(prompt_ids) == "<|user|>Say something\n<|assistant|>"


async def test_max_completion_tokens_wins(client) -> None:
    await client.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 9, "max_completion_tokens": 3})
    assert client.engine.calls[0][1].max_tokens == 3


async def test_sampling_params_mapped(client) -> None:
    body = {
        "messages": MSGS,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 40,
        "min_p": 0.05,
        "typical_p": 0.8,
        "seed": 7,
        "presence_penalty": 0.5,
        "frequency_penalty": -0.5,
        "repetition_penalty": 1.1,
        "logit_bias": {"65": -100, "66": 5.5},
        "ignore_eos": True,
        "min_tokens": 2,
        "stop": "x",
        "user": "u1",
    }
    resp = await client.post("/v1/chat/completions", body)
    assert resp.status_code == 200
    p = client.engine.calls[0][1]
    assert (p.temperature, p.top_p, p.top_k, p.min_p, p.typical_p, p.seed) == (0.7, 0.9, 40, 0.05, 0.8, 7)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.5, -0.5, 1.1)
    assert p.logit_bias == ((65, -100.0), (66, 5.5)) and p.ignore_eos and p.min_tokens == 2 and p.stop == ("x",)


async def test_stop_text_not_returned(client) -> None:
    client.engine.reply = "hello world. more"
    body = await (await client.post("/v1/chat/completions", {"messages": MSGS, "stop": [". ", "zz"]})).get_json()
    assert body["choices"][0]["message"]["content"] == "hello world"
    assert body["choices"][0]["finish_reason"] == "stop"


async def test_n_choices_distinct_with_seed(client) -> None:
    body = await (
        await client.post(
            "/v1/chat/completions", {"messages": MSGS, "n": 3, "seed": 1, "max_tokens": 6, "temperature": 1.0}
        )
    ).get_json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]
    seeds = [p.seed for _, p in client.engine.calls]
    assert sorted(seeds) == [1, 2, 3]
    assert body["usage"]["completion_tokens"] == 18
    assert body["usage"]["prompt_tokens"] == len(client.engine.calls[0][0])  # the prompt counted once


async def test_logprobs_shape(client) -> None:
    body = await (
        await client.post(
            "/v1/chat/completions", {"messages": MSGS, "max_tokens": 3, "logprobs": True, "top_logprobs": 2}
        )
    ).get_json()
    content = body["choices"][0]["logprobs"]["content"]
    assert len(content) == 3
    text = body["choices"][0]["message"]["content"]
    for entry, ch in zip(content, text, strict=True):
        assert entry["token"] == ch and entry["bytes"] == list(ch.encode())
        assert isinstance(entry["logprob"], float)
        assert len(entry["top_logprobs"]) == 2 and entry["top_logprobs"][0]["token"] == ch
        assert entry["top_logprobs"][0]["logprob"] >= entry["top_logprobs"][1]["logprob"]
        assert set(entry["top_logprobs"][0]) == {"token", "logprob", "bytes"}


async def test_stream_chunks(client) -> None:
    resp, events = await client.sse(
        "/v1/chat/completions",
        {"messages": MSGS, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert resp.status_code == 200 and resp.headers["Content-Type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert len(text) == 4
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4
    assert all(c["usage"] is None for c in chunks[:-1])
    assert len({c["id"] for c in chunks}) == 1


async def test_stream_without_usage_has_no_usage_key(client) -> None:
    _, events = await client.sse("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, "stream": True})
    assert all("usage" not in c for c in events[:-1])


async def test_stream_n2_logprobs(client) -> None:
    _, events = await client.sse(
        "/v1/chat/completions",
        {"messages": MSGS, "max_tokens": 3, "stream": True, "n": 2, "logprobs": True, "temperature": 0},
    )
    per = {0: "", 1: ""}
    for c in events[:-1]:
        ch = c["choices"][0]
        per[ch["index"]] += ch["delta"].get("content", "")
        if ch["delta"].get("content"):
            assert len(ch["logprobs"]["content"]) == 1
    assert per[0] == per[1] and len(per[0]) == 3


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
        ({"messages": MSGS, "temperature": -1}, "temperature"),
        ({"messages": MSGS, "temperature": "hot"}, "temperature"),
        ({"messages": MSGS, "top_p": 1.5}, "top_p"),
        ({"messages": MSGS, "n": 21}, "n"),
        ({"messages": MSGS, "n": 0}, "n"),
        ({"messages": MSGS, "max_tokens": -1}, "max_tokens"),
        ({"messages": MSGS, "top_logprobs": 21, "logprobs": True}, "top_logprobs"),
        ({"messages": MSGS, "top_logprobs": 2}, "top_logprobs"),
        ({"messages": MSGS, "presence_penalty": 3}, "presence_penalty"),
        ({"messages": MSGS, "logit_bias": {"999999": 1}}, "logit_bias"),
        ({"messages": MSGS, "logit_bias": {"5": 500}}, "logit_bias"),
        ({"messages": MSGS, "stop": [1, 2]}, "stop"),
        ({"messages": MSGS, "stream_options": {"include_usage": True}}, "stream_options"),
        ({"messages": MSGS, "response_format": {"type": "xml"}}, "response_format"),
        ({"messages": MSGS, "tool_choice": "required"}, "tool_choice"),
        ({"messages": MSGS, "tools": [{"type": "function", "function": {}}]}, "tools[0].function.name"),
        ({"messages": MSGS, "seed": 1.5}, "seed"),
        ({"messages": MSGS, "stream": "yes"}, "stream"),
    ],
)
async def test_bad_params_400(client, body, param) -> None:
    await error_of(await client.post("/v1/chat/completions", body), 400, param)
    assert client.engine.calls == []


async def test_invalid_json_and_non_object(client) -> None:
    resp = await client.http.post("/v1/chat/completions", data=b"{nope", headers={"Content-Type": "application/json"})
    await error_of(resp, 400)
    await error_of(await client.post("/v1/chat/completions", [1, 2]), 400)


async def test_unknown_model_404(client) -> None:
    err = await error_of(await client.post("/v1/chat/completions", {"model": "gpt-9", "messages": MSGS}), 404, "model")
    assert err["code"] == "model_not_found"


async def test_alias_accepted(make_client) -> None:
    c = make_client(model_aliases=("gpt-3.5-turbo",))
    body = await (
        await c.post("/v1/chat/completions", {"model": "gpt-3.5-turbo", "messages": MSGS, "max_tokens": 1})
    ).get_json()
    assert body["model"] == "gpt-3.5-turbo"


async def test_no_template_uses_role_lines(make_client) -> None:
    c = make_client(FakeEngine(chat_template=None))
    await c.post("/v1/chat/completions", {"messages": [{"role": "system", "content": "S"}, *MSGS], "max_tokens": 1})
    assert c.engine.tokenizer.decode(c.engine.calls[0][0]) == "system: S\nuser: Say something\nassistant:"


async def test_text_parts_joined(client) -> None:
    msgs = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    await client.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 1})
    assert "ab" in client.engine.tokenizer.decode(client.engine.calls[0][0])


async def test_engine_failure_is_500_and_server_keeps_serving(make_client) -> None:
    c = make_client(FakeEngine(fail_after_tokens=2))
    err = await error_of(await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 5}), 500)
    assert "injected engine failure" in err["message"]
    c.engine.fail_after_tokens = None
    assert (await c.post("/v1/chat/completions", {"messages": MSGS, "max_tokens": 5})).status_code == 200


async def test_stream_mid_failure_sends_error_event(make_client) -> None:
    c = make_client(FakeEngine(fail_after_tokens=2))
    resp, events = await c.sse("/v1/chat/completions", {"messages": MSGS, "max_tokens": 5, "stream": True})
    assert resp.status_code == 200
    assert events[-1] == "[DONE]" and "error" in events[-2]
    assert c.state.num_in_flight == 0

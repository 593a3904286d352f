"""The real server on the real AsyncEngine (tiny random llama, byte tokenizer) driven by the
official openai client. Random weights: the text is gibberish, the protocol and the numbers are real."""

from __future__ import annotations

import json
import time

import httpx
import jsonschema
import openai
import pytest

from tests.server.live import LiveServer

MSGS = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--tiny", timeout_s=120)
    yield s
    s.stop()


@pytest.fixture
def oai(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)


def test_chat_greedy_stream_matches_non_stream(oai) -> None:
    kw = {"model": "tiny-llama", "messages": MSGS, "max_tokens": 8, "temperature": 0}
    full = oai.chat.completions.create(**kw)
    chunks = list(oai.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == full.choices[0].message.content
    assert full.usage.completion_tokens == chunks[-1].usage.completion_tokens
    assert full.choices[0].finish_reason in ("stop", "length")


def test_completions_n_logprobs_stop(oai) -> None:
    r = oai.completions.create(model="tiny-llama", prompt="abc", max_tokens=6, n=2, temperature=1.0, seed=5, logprobs=3)
    assert len(r.choices) == 2
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) > 0
    assert all(v <= 0 for v in lp.token_logprobs)
    assert all(max(t.values()) >= lp.token_logprobs[i] - 1e-4 for i, t in enumerate(lp.top_logprobs))


def test_logit_bias_and_stop(oai, server) -> None:
    (x,) = httpx.post(server.url + "/tokenize", json={"input": "x", "add_special": False}).json()["tokens"]
    kw = {"model": "tiny-llama", "prompt": "abc", "max_tokens": 8, "temperature": 0, "logit_bias": {str(x): 100}}
    r = oai.completions.create(**kw)
    assert r.choices[0].text == "x" * 8 and r.choices[0].finish_reason == "length"
    r = oai.completions.create(**kw, stop=["xxx"])
    assert r.choices[0].text == "" and r.choices[0].finish_reason == "stop"
    r = oai.completions.create(**kw, echo=True)
    assert r.choices[0].text == "abc" + "x" * 8


def test_embeddings(oai) -> None:
    e = oai.embeddings.create(model="tiny-llama", input=["hello", "world"])
    v = e.data[0].embedding
    assert len(v) == 64 and abs(sum(x * x for x in v) - 1) < 1e-3
    assert e.usage.prompt_tokens > 0


def test_llama_embedding_is_v1_embeddings_vector(oai, server) -> None:
    e = oai.embeddings.create(model="tiny-llama", input=["hello", "world"])
    r = httpx.post(server.url + "/embedding", json={"content": ["hello", "world"]}, timeout=120).json()
    assert [x["index"] for x in r] == [0, 1]
    for x, d in zip(r, e.data, strict=True):
        assert len(x["embedding"]) == 1 and x["embedding"][0] == pytest.approx(d.embedding, abs=1e-6)
    # embd_normalize -1: the mean-pooled hidden state itself, through the actors (Embed(normalize=False))
    (raw,) = httpx.post(server.url + "/embedding", json={"content": "hello", "embd_normalize": -1}, timeout=120).json()
    v = raw["embedding"][0]
    norm = sum(x * x for x in v) ** 0.5
    assert abs(norm - 1) > 1e-3 and [x / norm for x in v] == pytest.approx(e.data[0].embedding, abs=1e-5)


def test_json_schema(oai) -> None:
    schema = {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green"]}, "ok": {"type": "boolean"}},
        "required": ["color", "ok"],
        "additionalProperties": False,
    }
    r = oai.chat.completions.create(
        model="tiny-llama",
        messages=MSGS,
        max_tokens=60,
        temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}},
    )
    assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
    jsonschema.validate(json.loads(r.choices[0].message.content), schema)


def test_bad_regex_is_400(oai) -> None:
    with pytest.raises(openai.BadRequestError):
        oai.completions.create(model="tiny-llama", prompt="x", extra_body={"grammar": "([a-z"})


def test_tool_choice_required_gives_valid_call(oai) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 8}},
                    "required": ["city"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    r = oai.chat.completions.create(
        model="tiny-llama", messages=MSGS, tools=tools, tool_choice="required", max_tokens=80, temperature=0
    )
    (call,) = r.choices[0].message.tool_calls[:1]
    assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    jsonschema.validate(json.loads(call.function.arguments), tools[0]["function"]["parameters"])


def test_disconnect_frees_engine_blocks(server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        body = {"prompt": "x", "max_tokens": 4000, "ignore_eos": True, "stream": True}
        with c.stream("POST", "/v1/completions", json=body) as resp:
            for i, _ in enumerate(resp.iter_lines()):
                if i > 6:
                    break  # hang up mid-stream
        text = ""
        for _ in range(300):
            text = c.get("/metrics").text
            if "modelc_num_requests_running 0.0" in text and "modelc_kv_blocks_used 0.0" in text:
                break
            time.sleep(0.02)
        assert "modelc_num_requests_running 0.0" in text and "modelc_kv_blocks_used 0.0" in text
        assert "modelc_engine_restarts_total 0.0" in text and "modelc_kv_blocks_total" in text


def test_streamed_tool_call(oai) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "ping",
                "parameters": {
                    "type": "object",
                    "properties": {"n": {"enum": [1, 2]}},
                    "required": ["n"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    chunks = list(
        oai.chat.completions.create(
            model="tiny-llama",
            messages=MSGS,
            tools=tools,
            tool_choice="required",
            max_tokens=60,
            temperature=0,
            stream=True,
        )
    )
    calls = [tc for c in chunks if c.choices and c.choices[0].delta.tool_calls for tc in c.choices[0].delta.tool_calls]
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "ping"
    assert calls[0].id.startswith("call_") and json.loads(calls[0].function.arguments)["n"] in (1, 2)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_regex_and_lark_grammars(oai) -> None:
    import re

    r = oai.completions.create(
        model="tiny-llama",
        prompt="x",
        max_tokens=20,
        temperature=0.8,
        seed=3,
        extra_body={"grammar": "[a-c]{3}-[0-9]{2}"},
    )
    assert re.fullmatch(r"[a-c]{3}-[0-9]{2}", r.choices[0].text) and r.choices[0].finish_reason == "stop"
    lark = 'start: "yes" | "no"'
    r = oai.chat.completions.create(
        model="tiny-llama",
        messages=MSGS,
        max_tokens=10,
        temperature=0,
        extra_body={"grammar": {"type": "lark", "grammar": lark}},
    )
    assert r.choices[0].message.content in ("yes", "no")

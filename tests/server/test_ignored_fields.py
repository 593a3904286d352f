"""Fields a route never reads are logged as a warning on every route (as vLLM does), not only on the
three OpenAI routes whose /openapi.json schema lists their fields: the body records what the route
read (modelc.server.fields.ReadFields)."""

from __future__ import annotations

import pytest

from modelc.server.fields import MAX_REPORTED, ReadFields

pytestmark = pytest.mark.anyio
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def warnings(client) -> list[dict]:
    return [r for r in client.log_lines() if r.get("event") == "ignored request fields"]


def test_read_fields_records_reads_and_whole_body_walks() -> None:
    body = ReadFields({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "user": "x"})
    assert body.get("a") == 1 and body["b"] == 2 and "c" in body and "zz" not in body
    assert isinstance(body, dict) and body == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5, "user": "x"}
    assert body.ignored() == ["d", "e"]  # `user` has no effect by design: never reported
    assert body.pop("d") == 4 and body.ignored() == ["e"]
    forwarded = ReadFields({"x": 1, "y": 2})
    assert {**forwarded} == {"x": 1, "y": 2} and forwarded.ignored() == []  # a copy reads every field
    nested = ReadFields({"options": {"seed": 1, "mirostat": 2}, "other": {"x": 1}})
    assert nested.ignored() == ["options", "other"]  # options never read: reported whole
    assert nested["options"].get("seed") == 1 and nested.ignored() == ["options.mirostat", "other"]
    many = ReadFields({f"f{i:03d}": i for i in range(50)})
    assert len(many.ignored()) == MAX_REPORTED and many.ignored()[0] == "f000"


async def test_every_route_warns_about_fields_it_ignores(client) -> None:
    cases = [
        (
            "/api/chat",
            {"model": "fake-model", "stream": False, **CHAT, "tools_mode": "x"},
            ["max_tokens", "tools_mode"],
        ),
        ("/api/generate", {"model": "fake-model", "prompt": "hi", "stream": False, "temprature": 1}, ["temprature"]),
        (
            "/api/generate",
            {"model": "fake-model", "prompt": "hi", "stream": False, "options": {"num_predict": 2, "mirostat": 1}},
            ["options.mirostat"],
        ),
        ("/tokenize", {"input": "hi", "add_special": True, "add_bos": True}, ["add_bos"]),
        ("/v1/messages", {"model": "fake-model", "max_tokens": 4, "messages": CHAT["messages"], "topk": 3}, ["topk"]),
    ]
    for path, body, fields in cases:
        before = len(warnings(client))
        resp = await client.post(path, body)
        assert resp.status_code == 200, (path, await resp.get_data())
        new = warnings(client)[before:]
        assert len(new) == 1 and new[0]["fields"] == fields and new[0]["path"] == path, (path, new)


async def test_no_warning_for_read_fields_no_effect_fields_or_refused_requests(client) -> None:
    assert (await client.post("/v1/chat/completions", {**CHAT, "user": "u1", "temperature": 0})).status_code == 200
    ollama = {"model": "fake-model", "stream": False, "messages": CHAT["messages"], "options": {"num_predict": 4}}
    assert (await client.post("/api/chat", ollama)).status_code == 200
    resp = await client.post("/v1/chat/completions", {**CHAT, "temperature": "hot", "later": 1})
    assert resp.status_code == 400  # refused before `later` would be read: not reported as ignored
    assert warnings(client) == []

from __future__ import annotations

import base64

import numpy as np
import pytest

from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio


async def test_completion_text_prompt(client) -> None:
    body = await (await client.post("/v1/completions", {"prompt": "Hi", "max_tokens": 4})).get_json()
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    (c,) = body["choices"]
    assert c["index"] == 0 and len(c["text"]) == 4 and c["finish_reason"] == "length" and c["logprobs"] is None
    ids, _ = client.engine.calls[0]
    assert ids == client.engine.tokenizer.encode("Hi")  # no chat template on completions
    assert body["usage"]["prompt_tokens"] == 3 and body["usage"]["total_tokens"] == 7


async def test_prompt_forms(client) -> None:
    body = await (await client.post("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2, "n": 2})).get_json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert body["usage"]["prompt_tokens"] == 4 and body["usage"]["completion_tokens"] == 8
    client.engine.calls.clear()
    await client.post("/v1/completions", {"prompt": [5, 6, 7], "max_tokens": 1})
    await client.post("/v1/completions", {"prompt": [[5, 6], [7]], "max_tokens": 1})
    assert [ids for ids, _ in client.engine.calls] == [[5, 6, 7], [5, 6], [7]]


async def test_echo(client) -> None:
    client.engine.reply = "XYZ"
    body = await (await client.post("/v1/completions", {"prompt": "Hi ", "echo": True})).get_json()
    assert body["choices"][0]["text"] == "Hi XYZ"
    _, events = await client.sse("/v1/completions", {"prompt": "Hi ", "echo": True, "stream": True})
    assert "".join(e["choices"][0]["text"] for e in events[:-1]) == "Hi XYZ"


async def test_legacy_logprobs(client) -> None:
    body = await (await client.post("/v1/completions", {"prompt": "Hi", "max_tokens": 3, "logprobs": 2})).get_json()
    lp = body["choices"][0]["logprobs"]
    text = body["choices"][0]["text"]
    assert lp["tokens"] == list(text) and len(lp["token_logprobs"]) == 3
    assert lp["text_offset"] == [0, 1, 2]
    assert all(len(t) == 2 for t in lp["top_logprobs"]) and list(lp["top_logprobs"][0])[0] == text[0]


async def test_best_of_ranks_by_cumulative_logprob(client) -> None:
    body = await (
        await client.post(
            "/v1/completions", {"prompt": "Hi", "n": 1, "best_of": 3, "temperature": 1, "seed": 3, "max_tokens": 5}
        )
    ).get_json()
    assert len(body["choices"]) == 1 and body["choices"][0]["logprobs"] is None
    assert all(p.logprobs for _, p in client.engine.calls) and len(client.engine.calls) == 3
    assert body["usage"]["completion_tokens"] == 15  # every candidate is generated


async def test_stop_and_stream(client) -> None:
    _, events = await client.sse(
        "/v1/completions",
        {"prompt": "x", "max_tokens": 50, "stream": True, "stop": ["fox"], "temperature": 0, "seed": 0},
    )
    text = "".join(e["choices"][0]["text"] for e in events[:-1])
    assert "fox" not in text and events[-2]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(e["object"] == "text_completion" for e in events[:-1])


async def test_stream_usage_chunk(client) -> None:
    _, events = await client.sse(
        "/v1/completions", {"prompt": "x", "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}}
    )
    assert events[-2]["choices"] == [] and events[-2]["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({}, "prompt"),
        ({"prompt": 5}, "prompt"),
        ({"prompt": [1, "a"]}, "prompt"),
        ({"prompt": [[1, 99999]]}, "prompt"),
        ({"prompt": "x", "best_of": 1, "n": 2}, "best_of"),
        ({"prompt": "x", "best_of": 3, "stream": True}, "best_of"),
        ({"prompt": "x", "echo": True, "logprobs": 1}, "echo"),
        ({"prompt": "x", "suffix": "tail"}, "suffix"),
        ({"prompt": "x", "logprobs": 21}, "logprobs"),
    ],
)
async def test_bad_completion_params(client, body, param) -> None:
    await error_of(await client.post("/v1/completions", body), 400, param)


class FimTokenizer(FakeEngine().tokenizer.__class__):
    SPECIAL = {"<|fim_prefix|>": 300, "<|fim_suffix|>": 301, "<|fim_middle|>": 302}
    vocab_size = 303

    def token_to_id(self, text: str) -> int | None:
        return self.SPECIAL.get(text)


async def test_suffix_with_fim_model(make_client) -> None:
    c = make_client(FakeEngine(tokenizer=FimTokenizer()))
    resp = await c.post("/v1/completions", {"prompt": "ab", "suffix": "cd", "max_tokens": 1})
    assert resp.status_code == 200
    ids = c.engine.calls[0][0]
    enc = c.engine.tokenizer.encode
    assert ids == [0, 300, *enc("ab", False), 301, *enc("cd", False), 302]


async def test_embeddings_float_base64_dimensions(client) -> None:
    body = await (await client.post("/v1/embeddings", {"input": ["a", "bc"], "model": "fake-model"})).get_json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    v = np.array(body["data"][0]["embedding"])
    assert v.shape == (8,) and abs(np.linalg.norm(v) - 1) < 1e-5
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    b = await (await client.post("/v1/embeddings", {"input": "a", "encoding_format": "base64"})).get_json()
    decoded = np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), "<f4")
    np.testing.assert_allclose(decoded, v, rtol=1e-6)
    d = await (await client.post("/v1/embeddings", {"input": "a", "dimensions": 3})).get_json()
    w = np.array(d["data"][0]["embedding"])
    assert w.shape == (3,) and abs(np.linalg.norm(w) - 1) < 1e-5
    np.testing.assert_allclose(w, v[:3] / np.linalg.norm(v[:3]), rtol=1e-5)
    await error_of(await client.post("/v1/embeddings", {"input": "a", "dimensions": 9}), 400, "dimensions")
    await error_of(
        await client.post("/v1/embeddings", {"input": "a", "encoding_format": "hex"}), 400, "encoding_format"
    )
    await error_of(await client.post("/v1/embeddings", {}), 400, "input")


async def test_models(client) -> None:
    body = await (await client.get("/v1/models")).get_json()
    assert body["object"] == "list" and body["data"][0]["id"] == "fake-model"
    assert (await (await client.get("/v1/models/fake-model")).get_json())["object"] == "model"
    await error_of(await client.get("/v1/models/nope"), 404)

"""The one bounds table (server/bounds.py): /openapi.json declares exactly the bounds the parsing
enforces, so a value the spec allows is never refused for its range, and one it forbids is a 400."""

from __future__ import annotations

import re

import pytest

from modelc.server.bounds import BOUNDS
from modelc.server.openapi import BOUNDED, below_pattern
from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "hi"}]
# the OpenAI routes' own minimum (OpenAI and vLLM refuse max_tokens 0); other routes keep the shared bound
OPENAI_BOUND = {"max_tokens": "openai_max_tokens", "max_completion_tokens": "openai_max_tokens"}


async def spec(client) -> dict:
    return await (await client.get("/openapi.json")).get_json()


def body_schema(doc: dict, path: str) -> dict:
    return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


def edges(name: str) -> tuple[list[float], list[float]]:
    """Values at the table's limits (accepted) and just beyond them (refused)."""
    b = BOUNDS[name]
    step = 1 if b.kind == "integer" else 0.001
    ok, bad = [], []
    if b.lo is not None:
        (bad if b.lo_open else ok).append(b.lo)
        bad.append(b.lo - step)
        if b.lo_open:
            ok.append(b.lo + step)
    if b.hi is not None:
        ok.append(b.hi)
        bad.append(b.hi + step)
    return ok, bad


async def test_sampling_bounds_in_the_spec_are_the_table(client) -> None:
    doc = await spec(client)
    chat = body_schema(doc, "/v1/chat/completions")["properties"]
    for name in BOUNDED:
        declared = {k: v for k, v in chat[name].items() if k != "description"}
        bound = BOUNDS[OPENAI_BOUND.get(name, name)]
        assert declared == {k: v for k, v in bound.schema().items() if k != "description"}, name
    assert chat["n"]["maximum"] == BOUNDS["n"].hi and chat["top_logprobs"]["maximum"] == BOUNDS["top_logprobs"].hi
    native = body_schema(doc, "/chat")["properties"]
    assert native["top_p"]["minimum"] == 0 and "exclusiveMinimum" not in native["top_p"]  # native: 0 = off
    options = body_schema(doc, "/api/chat")["properties"]["options"]["properties"]
    assert options["num_predict"]["minimum"] == BOUNDS["num_predict"].lo == -2
    assert options["repeat_penalty"] == BOUNDS["repetition_penalty"].schema()
    assert options["num_ctx"]["minimum"] == BOUNDS["max_context"].lo


@pytest.mark.parametrize("name", [n for n in BOUNDED if n not in ("max_context", "n_keep", "gamma")])
async def test_chat_enforces_exactly_the_table(client, name) -> None:
    ok, refused = edges(OPENAI_BOUND.get(name, name))
    for v in ok:
        body = {"messages": MSGS, "max_tokens": 1, "temperature": 0.5, name: v}  # sampling: the seed reaches the RNG
        if name == "min_tokens":
            body["max_tokens"] = max(int(v), 1)
        if name in ("max_tokens", "max_completion_tokens") and v > 10_000:
            continue
        resp = await client.post("/v1/chat/completions", body)
        assert resp.status_code == 200, (name, v, await resp.get_data())
    for v in refused:
        await error_of(await client.post("/v1/chat/completions", {"messages": MSGS, name: v}), 400, name)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/chat/completions"])
@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
async def test_openai_routes_refuse_max_tokens_zero_as_openai(client, path, name) -> None:
    body = {"messages": MSGS} if "chat" in path else {"prompt": "hi"}
    err = await error_of(await client.post(path, {**body, name: 0}), 400, name)
    assert err["message"] == f"'{name}' must be >= 1, got 0"
    native = await client.post("/chat", {"messages": MSGS, "max_tokens": 0})  # the seed spec's own route: 0 stays
    assert native.status_code == 200, await native.get_data()


async def test_ollama_num_predict_zero_is_no_limit_as_ollama(client) -> None:
    """Ollama's runner counts num_predict only when > 0: 0 generates as -1 does (modelc: up to 2048)."""
    base = {"model": "fake-model", "prompt": "hi", "stream": False}
    zero, unlimited = [
        await (await client.post("/api/generate", {**base, "options": {"num_predict": n, "temperature": 0}})).get_json()
        for n in (0, -1)
    ]
    assert zero["response"] == unlimited["response"] and zero["eval_count"] == unlimited["eval_count"] > 1


async def test_ollama_options_use_the_table(client) -> None:
    base = {"model": "fake-model", "prompt": "hi", "stream": False}
    assert (await client.post("/api/generate", {**base, "options": {"num_predict": -2}})).status_code == 200
    resp = await client.post("/api/generate", {**base, "options": {"num_predict": -3}})
    assert resp.status_code == 400 and "num_predict" in (await resp.get_json())["error"]
    resp = await client.post("/api/generate", {**base, "options": {"top_p": 0}})  # exclusiveMinimum 0
    assert resp.status_code == 400 and "top_p" in (await resp.get_json())["error"]


async def test_served_spec_leaves_out_what_the_model_cannot_do_and_bounds_token_ids(client) -> None:
    doc = await spec(client)  # the FakeEngine: a causal LM without FIM tokens, the only model
    assert "/infer" not in doc["paths"] and "/v1/rerank" not in doc["paths"] and "/infill" not in doc["paths"]
    vocab = client.engine.tokenizer.vocab_size
    tokens = body_schema(doc, "/detokenize")["properties"]["tokens"]["items"]
    assert tokens["minimum"] == 0 and tokens["maximum"] == vocab - 1
    bias = body_schema(doc, "/v1/chat/completions")["properties"]["logit_bias"]["propertyNames"]["pattern"]
    assert re.match(bias, str(vocab - 1)) and not re.match(bias, str(vocab))
    await error_of(await client.post("/detokenize", {"tokens": [vocab]}), 400, "tokens")
    assert (await client.post("/detokenize", {"tokens": [vocab - 1, 65.0]})).status_code == 200  # 65.0 is an integer


def test_below_pattern() -> None:
    for n in (1, 2, 9, 10, 11, 100, 101, 259, 1000, 32000, 151936):
        p = re.compile(below_pattern(n))
        hits = [str(i) for i in range(n + 300) if p.match(str(i))]
        assert hits == [str(i) for i in range(n)] and not p.match("01")


def test_queue_rules_bound_a_batch_of_prompts() -> None:
    """/v1/completions: a batch of prompts must fit the queue, as the spec says."""
    import jsonschema

    from modelc.server.openapi import queue_rules

    valid = jsonschema.Draft202012Validator({"allOf": queue_rules(10)}).is_valid
    assert valid({"prompt": ["a"] * 10}) and not valid({"prompt": ["a"] * 11})
    assert valid({"prompt": [7] * 50})  # one prompt of token ids


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [("max_tokens", 0, "'--max-tokens' must be >= 1, got 0"), ("temperature", 500.0, "'--temperature' must be <= 100")],
)
def test_server_defaults_out_of_range_are_refused_at_start(field, value, message) -> None:
    """`modelc run --max-tokens 0` was accepted, and every request without max_tokens then got an empty answer
    (a value the client never sent); an out-of-range default is a one-line error at start instead."""
    from modelc.errors import InvalidRequestError
    from modelc.server.state import GenerationDefaults

    with pytest.raises(InvalidRequestError, match=re.escape(message)):
        GenerationDefaults(**{field: value})
    assert GenerationDefaults(max_tokens=1, temperature=100.0).max_tokens == 1

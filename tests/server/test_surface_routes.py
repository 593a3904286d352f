"""The routes clients expect beside the /v1 ones: the OpenAI paths without /v1, /v1/responses/{id}/input_items
(OpenAI's paginated list), Cohere's /v2/rerank; capabilities on every model card (rerank its own, a
cross-encoder no embedding model); Ollama's /api/generate `think`; the whole usage in Anthropic's
message_delta."""

from __future__ import annotations

import json
import pathlib
from dataclasses import dataclass

import pytest

from modelc.api.engines import EncoderEngine
from modelc.artifact.reader import open_artifact
from modelc.pack import pack
from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine, FakeTemplate

pytestmark = pytest.mark.anyio
MSGS = [{"role": "user", "content": "hi"}]
RERANK = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rerank"


@pytest.mark.parametrize(
    ("alias", "v1", "body"),
    [
        ("/chat/completions", "/v1/chat/completions", {"messages": MSGS, "max_tokens": 5, "temperature": 0}),
        ("/completions", "/v1/completions", {"prompt": "hi", "max_tokens": 5, "temperature": 0}),
        ("/embeddings", "/v1/embeddings", {"model": "fake-model", "input": ["a", "b"]}),
        ("/embeddings", "/v1/embeddings", {"model": "fake-model", "input": "a", "encoding_format": "base64"}),
        ("/responses", "/v1/responses", {"input": "hi", "max_output_tokens": 16, "temperature": 0}),
    ],
)
async def test_openai_paths_without_v1_answer_as_the_v1_ones(client, alias, v1, body) -> None:
    a, b = await client.post(alias, body), await client.post(v1, body)
    assert a.status_code == b.status_code == 200, await a.get_data()
    ja, jb = await a.get_json(), await b.get_json()
    for volatile in ("id", "created", "created_at"):
        ja.pop(volatile, None), jb.pop(volatile, None)
    if "output" in ja:  # item ids differ
        for item in ja["output"] + jb["output"]:
            item.pop("id", None)
    assert ja == jb


async def test_embeddings_keeps_the_native_shapes(client) -> None:
    one = await (await client.post("/embeddings", {"input": "a"})).get_json()
    assert set(one) == {"embedding", "model"}
    many = await (await client.post("/embeddings", {"inputs": ["a", "b"]})).get_json()
    assert [e["index"] for e in many["embeddings"]] == [0, 1]
    openai = await (await client.post("/embeddings", {"input": "a", "model": "fake-model"})).get_json()
    assert openai["object"] == "list" and openai["data"][0]["embedding"] == one["embedding"]


async def test_models_and_stored_responses_without_v1(client) -> None:
    assert (await (await client.get("/models")).get_json()) == (await (await client.get("/v1/models")).get_json())
    assert (await (await client.get("/models/fake-model")).get_json())["id"] == "fake-model"
    await error_of(await client.get("/models/nope"), 404)
    rid = (await (await client.post("/responses", {"input": "hi", "max_output_tokens": 16})).get_json())["id"]
    assert (await (await client.get(f"/responses/{rid}")).get_json())["id"] == rid
    assert (await (await client.get(f"/v1/responses/{rid}")).get_json())["id"] == rid
    assert (await (await client.get(f"/responses/{rid}/input_items")).get_json())["object"] == "list"
    assert (await client.http.delete(f"/responses/{rid}")).status_code == 200
    assert (await client.get(f"/v1/responses/{rid}")).status_code == 404


async def test_openapi_describes_the_aliases(client) -> None:
    paths = (await (await client.get("/openapi.json")).get_json())["paths"]
    for alias, of in (
        ("/chat/completions", "/v1/chat/completions"),
        ("/completions", "/v1/completions"),
        ("/models", "/v1/models"),
        ("/models/{model_id}", "/v1/models/{model_id}"),
        ("/responses", "/v1/responses"),
        ("/responses/{response_id}/input_items", "/v1/responses/{response_id}/input_items"),
    ):
        for method, op in paths[alias].items():
            assert op["x-modelc-alias-of"] == of and f"alias of {of}" in op["summary"]
            assert op["requestBody"] == paths[of][method]["requestBody"] if "requestBody" in op else True
    assert "anyOf" in paths["/embeddings"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "/v1/responses/{response_id}/input_items" in paths


ITEMS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "input_text", "text": "weather?"}]},
    {"type": "function_call", "call_id": "c1", "name": "w", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "sun"},
    {"role": "user", "content": "thanks"},
]


async def test_input_items_list_and_pages_as_openai(client) -> None:
    rid = (await (await client.post("/v1/responses", {"input": ITEMS, "max_output_tokens": 16})).get_json())["id"]
    page = await (await client.get(f"/v1/responses/{rid}/input_items")).get_json()
    assert page["object"] == "list" and page["has_more"] is False
    data = page["data"]
    assert [d["type"] for d in data] == ["message", "function_call_output", "function_call", "message", "message"]
    assert data[0]["content"] == [{"type": "input_text", "text": "thanks"}]  # newest first (order desc)
    assert data[-1]["role"] == "system" and data[1]["output"] == "sun" and data[2]["call_id"] == "c1"
    assert len({d["id"] for d in data}) == 5 and page["first_id"] == data[0]["id"] and page["last_id"] == data[-1]["id"]
    asc = await (await client.get(f"/v1/responses/{rid}/input_items?order=asc&limit=2")).get_json()
    assert [d["id"] for d in asc["data"]] == [d["id"] for d in reversed(data)][:2] and asc["has_more"] is True
    rest = await (await client.get(f"/v1/responses/{rid}/input_items?order=asc&after={asc['last_id']}")).get_json()
    assert [d["id"] for d in rest["data"]] == [d["id"] for d in reversed(data)][2:] and rest["has_more"] is False
    before = await (await client.get(f"/v1/responses/{rid}/input_items?before={data[2]['id']}")).get_json()
    assert [d["id"] for d in before["data"]] == [d["id"] for d in data[:2]]
    plain = (await (await client.post("/v1/responses", {"input": "hi", "max_output_tokens": 16})).get_json())["id"]
    items = (await (await client.get(f"/v1/responses/{plain}/input_items")).get_json())["data"]
    assert items == [{"id": items[0]["id"], "type": "message", "role": "user", "status": "completed",
                      "content": [{"type": "input_text", "text": "hi"}]}]  # fmt: skip


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=101", "limit"), ("limit=x", "limit"), ("order=up", "order"), ("after=zz", "after")],
)
async def test_input_items_bad_queries_are_400(client, query, param) -> None:
    rid = (await (await client.post("/v1/responses", {"input": "hi", "max_output_tokens": 16})).get_json())["id"]
    await error_of(await client.get(f"/v1/responses/{rid}/input_items?{query}"), 400, param)
    await error_of(await client.get("/v1/responses/resp_nope/input_items"), 404, "response_id")
    unstored = {"input": "hi", "max_output_tokens": 16, "store": False}
    rid = (await (await client.post("/v1/responses", unstored)).get_json())["id"]
    await error_of(await client.get(f"/v1/responses/{rid}/input_items"), 404)


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("rerank") / "tiny_bert_ce.modelc"
    pack(RERANK / "tiny_bert_ce", out=out, name="tiny_bert_ce")
    return out


async def test_v2_rerank_is_coheres_shape(cross_encoder, make_client) -> None:
    c = make_client(EncoderEngine(open_artifact(cross_encoder)))
    docs = ["a cat sat", "dogs bark", "the weather is fine"]
    v1 = await (await c.post("/v1/rerank", {"query": "cats", "documents": docs})).get_json()
    v2 = await (
        await c.post("/v2/rerank", {"model": "tiny_bert_ce", "query": "cats", "documents": docs, "top_n": 2})
    ).get_json()
    assert set(v2) == {"id", "results", "meta"} and len(v2["results"]) == 2
    assert v2["results"] == [{"index": r["index"], "relevance_score": r["relevance_score"]} for r in v1["results"][:2]]
    assert v2["meta"]["tokens"]["input_tokens"] == v1["usage"]["prompt_tokens"]
    assert v2["meta"]["billed_units"]["search_units"] == 1 and v2["meta"]["api_version"]["version"] == "2"
    # Cohere cuts long documents (max_tokens_per_doc, then the pair to the context) instead of refusing
    long = ["word " * 5000, "cats"]
    assert (await c.post("/v1/rerank", {"query": "cats", "documents": long})).status_code == 400
    cut = await c.post("/v2/rerank", {"query": "cats", "documents": long})
    assert cut.status_code == 200, await cut.get_data()
    few = await (await c.post("/v2/rerank", {"query": "q", "documents": ["one two three four five six"]})).get_json()
    two = await (
        await c.post(
            "/v2/rerank", {"query": "q", "documents": ["one two three four five six"], "max_tokens_per_doc": 2}
        )
    ).get_json()
    assert two["meta"]["tokens"]["input_tokens"] == few["meta"]["tokens"]["input_tokens"] - 4  # 6 words, 2 kept
    bad = await c.post("/v2/rerank", {"query": "q", "documents": [{"text": "x"}]})
    assert bad.status_code == 400 and set(await bad.get_json()) == {"message"}  # Cohere's error shape
    assert "documents[0]" in (await bad.get_json())["message"]


async def test_a_cross_encoder_is_a_reranker_not_an_embedding_model(cross_encoder, make_client) -> None:
    c = make_client(EncoderEngine(open_artifact(cross_encoder)))
    card = (await (await c.get("/v1/models")).get_json())["data"][0]
    assert card["capabilities"] == ["rerank"]
    assert (await (await c.get(f"/v1/models/{card['id']}")).get_json())["capabilities"] == ["rerank"]
    err = await error_of(await c.post("/v1/embeddings", {"input": "hi"}), 400, "input")
    assert "/v1/rerank" in err["message"] and "embeddings" in err["message"]
    assert (await c.post("/api/embed", {"model": card["id"], "input": "hi"})).status_code == 400
    show = await (await c.post("/api/show", {"model": card["id"]})).get_json()
    assert show["capabilities"] == ["rerank"]


@dataclass
class ThinkTemplate(FakeTemplate):
    """The source shows <think>: the reasoning parser is on; render records the template kwargs."""

    seen: list | None = None

    @property
    def source(self) -> str:
        return "{{ '<think>' }}"

    def render(self, messages, tools=None, add_generation_prompt=True, **kw):
        self.seen.append(kw)
        return super().render(messages, tools, add_generation_prompt, **kw)


async def test_ollama_generate_honours_think(make_client) -> None:
    seen: list = []
    c = make_client(
        FakeEngine(chat_template=ThinkTemplate(seen=seen), reply="<think>\nTwo plus two.\n</think>\n\nIt is 4.")
    )
    body = {"model": "fake-model", "prompt": "2+2?", "stream": False, "think": True}
    one = await (await c.post("/api/generate", body)).get_json()
    assert one["thinking"].strip() == "Two plus two." and one["response"] == "It is 4."
    assert seen[-1]["enable_thinking"] is True
    raw = await (await c.post("/api/generate", {**body, "stream": True})).get_data()
    lines = [json.loads(x) for x in raw.split(b"\n") if x]
    assert "".join(x.get("thinking", "") for x in lines).strip() == "Two plus two."
    assert "".join(x["response"] for x in lines) == "It is 4."
    await c.post("/api/generate", {**body, "think": "high"})
    assert seen[-1] == {"reasoning_effort": "high"}
    bad = await c.post("/api/generate", {**body, "think": "very"})
    assert bad.status_code == 400 and "think" in (await bad.get_json())["error"]
    raw_prompt = await (await c.post("/api/generate", {**body, "raw": True})).get_json()
    assert "thinking" not in raw_prompt  # no template: the text is the answer as it came


async def test_anthropic_message_delta_carries_the_whole_usage(client) -> None:
    raw = await (await client.post("/v1/messages", {"max_tokens": 5, "messages": MSGS, "stream": True})).get_data()
    deltas = [json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")]
    usage = next(d for d in deltas if d["type"] == "message_delta")["usage"]
    start = next(d for d in deltas if d["type"] == "message_start")["message"]["usage"]
    assert usage["input_tokens"] == start["input_tokens"] > 0 and usage["output_tokens"] == 5
    assert "cache_read_input_tokens" in usage

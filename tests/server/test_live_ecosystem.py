"""The clients the issue-41 audit drove, unchanged, against `modelc run` (a real daemon process) serving
the tiny random llama, with a cross-encoder in its store loaded on the first request that names it:
Cohere's ClientV2 (/v2/rerank), LangChain's ChatOpenAI (a base URL without /v1) and ChatAnthropic
(input tokens in a stream's usage), and the ollama and openai clients on a reranker's card and its
refusal on the embedding routes. test_live_clients.py drives the openai and anthropic clients over the
Responses and Messages APIs; test_live_reasoning.py ollama's thinking on /api/chat and /api/generate.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import httpx
import pytest

from tests.server.live import ROOT, reap, serving_url

cohere = pytest.importorskip("cohere")
langchain_openai = pytest.importorskip("langchain_openai")
langchain_anthropic = pytest.importorskip("langchain_anthropic")
ollama = pytest.importorskip("ollama")
openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow  # one daemon start and LangChain's imports: ~15 s on two busy cores
RERANK = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "rerank"
KEY = "k3y"
DOCS = ["a cat sat on the mat", "dogs bark at night", "the weather is fine", "cats purr"]


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    from modelc.artifact.writer import write_artifact
    from modelc.pack import pack
    from tests.server.tiny_model import make_served_model

    home = tmp_path_factory.mktemp("home")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(home)}
    os.environ["MODELC_HOME"], old = str(home), os.environ.get("MODELC_HOME")
    try:
        pack(RERANK / "tiny_bert_ce", name="ranker")  # into the store: requests may name it
    finally:
        os.environ.pop("MODELC_HOME") if old is None else os.environ.update(MODELC_HOME=old)
    llama = home / "tiny.modelc"
    write_artifact(make_served_model(), llama)
    cmd = [sys.executable, "-m", "modelc", "run", str(llama), "--port", "0", "--api-key", KEY, "--kv-cache-mb", "8"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield serving_url(proc)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reap(proc)


def rerank_v1(url: str, **body) -> dict:
    r = httpx.post(url + "/v1/rerank", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_cohere_client_v2_reranks(url) -> None:
    co = cohere.ClientV2(api_key=KEY, base_url=url, timeout=60)
    got = co.rerank(model="ranker", query="cats", documents=DOCS, top_n=2)
    want = rerank_v1(url, model="ranker", query="cats", documents=DOCS, top_n=2)
    assert [(r.index, r.relevance_score) for r in got.results] == [
        (r["index"], r["relevance_score"]) for r in want["results"]
    ]
    assert got.meta.tokens.input_tokens == want["usage"]["prompt_tokens"] > 0
    with pytest.raises(cohere.BadRequestError):  # a chat model is no reranker
        co.rerank(model="tiny-llama", query="cats", documents=DOCS)
    with pytest.raises(cohere.NotFoundError):
        co.rerank(model="no-such-model", query="cats", documents=DOCS)


def test_a_reranker_is_refused_on_the_embedding_routes(url) -> None:
    oai = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    with pytest.raises(openai.BadRequestError) as e:
        oai.embeddings.create(model="ranker", input=["hi"])
    assert "/v1/rerank" in e.value.body["message"]
    card = oai.models.retrieve("ranker")
    assert card.capabilities == ["rerank"]  # an extra field on the client's Model, kept as sent
    assert {m.id: m.capabilities for m in oai.models.list()}["tiny-llama"] == ["completion", "chat", "tools"]
    ol = ollama.Client(host=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    with pytest.raises(ollama.ResponseError) as e:
        ol.embed(model="ranker", input="hi")
    assert e.value.status_code == 400
    assert list(ol.show("ranker").capabilities) == ["rerank"]
    r = httpx.post(
        url + "/api/embeddings", json={"model": "ranker", "prompt": "hi"}, headers={"Authorization": f"Bearer {KEY}"}
    )
    assert r.status_code == 400, r.text


def invoked_and_streamed_alike(llm) -> None:
    """invoke() and the chunks of stream() summed as LangChain sums them: the same text (temperature 0)
    and the same token counts, the input tokens included."""
    one = llm.invoke("hi")
    assert one.usage_metadata["output_tokens"] == 4 and one.usage_metadata["input_tokens"] > 0
    chunks = list(llm.stream("hi"))
    whole = chunks[0]
    for c in chunks[1:]:
        whole = whole + c
    assert whole.text == one.text
    for k in ("input_tokens", "output_tokens", "total_tokens"):  # the second prompt hits the prefix cache
        assert whole.usage_metadata[k] == one.usage_metadata[k], k


def test_langchain_chat_openai_with_a_base_url_without_v1(url) -> None:
    llm = langchain_openai.ChatOpenAI(
        base_url=url, api_key=KEY, model="tiny-llama", max_tokens=4, temperature=0, max_retries=0, stream_usage=True
    )
    invoked_and_streamed_alike(llm)


def test_langchain_chat_anthropic_stream_counts_input_tokens(url) -> None:
    llm = langchain_anthropic.ChatAnthropic(
        base_url=url, api_key=KEY, model="tiny-llama", max_tokens=4, temperature=0, max_retries=0
    )
    # the audit: message_delta carried only output_tokens, so the stream reported 0 input tokens
    invoked_and_streamed_alike(llm)

"""llama-server's non-OpenAI embeddings, POST /embedding and /embeddings with `content`, on the fake engine (byte
tokenizer: id = byte + 3, BOS 0): the input forms, the answer's shape, embd_normalize as llama.cpp's
common_embd_normalize (-1: the engine's pooled vector before its normalization), and clear 400s.
tests/server/test_live_tiny.py checks /embedding against /v1/embeddings on a real model."""

from __future__ import annotations

import numpy as np
import pytest

from modelc.server.llama_embedding import embd_normalize
from tests.server.conftest import error_of
from tests.server.fake_engine import BOS, OFFSET, FakeEngine

pytestmark = pytest.mark.anyio


def ids(text: str) -> list[int]:
    return [b + OFFSET for b in text.encode()]


async def fake_vector(client, token_ids: list[int]) -> np.ndarray:
    return (await client.engine.embed([token_ids]))[0]


async def test_one_string_answers_a_list_of_one_pooled_vector(client) -> None:
    resp = await client.post("/embedding", {"content": "hi"})
    assert resp.status_code == 200
    r = await resp.get_json()
    assert isinstance(r, list) and len(r) == 1 and set(r[0]) == {"index", "embedding"} and r[0]["index"] == 0
    (vec,) = r[0]["embedding"]  # one pooled vector per input (llama-server: one per token only for pooling none)
    assert vec == pytest.approx((await fake_vector(client, [BOS, *ids("hi")])).tolist(), abs=1e-6)
    assert np.linalg.norm(vec) == pytest.approx(1.0, abs=1e-6)  # embd_normalize 2 (the default)


@pytest.mark.parametrize(
    "content,expected",
    [
        ([5, 6, 7], [[5, 6, 7]]),  # token ids as they are
        ([5, "ab", 6], [[5, *ids("ab"), 6]]),  # mixed: one input, a later text without BOS
        (["ab", 9], [[BOS, *ids("ab"), 9]]),  # starts with text: the model's BOS
        (["ab", "c"], [[BOS, *ids("ab")], [BOS, *ids("c")]]),  # strings only: several inputs
        ([[5, 6], "c", ["d", 7]], [[5, 6], [BOS, *ids("c")], [BOS, *ids("d"), 7]]),
    ],
)
async def test_content_forms(client, content, expected) -> None:
    r = await (await client.post("/embedding", {"content": content})).get_json()
    assert [x["index"] for x in r] == list(range(len(expected)))
    for x, token_ids in zip(r, expected, strict=True):
        assert x["embedding"][0] == pytest.approx((await fake_vector(client, token_ids)).tolist(), abs=1e-6)


async def test_input_is_taken_too_and_wins(client) -> None:
    a = await (await client.post("/embedding", {"input": "ab", "content": "zz"})).get_json()
    b = await (await client.post("/embedding", {"content": "ab"})).get_json()
    assert a == b


async def test_native_embeddings_answers_llama_shape_for_content(client) -> None:
    llama = await (await client.post("/embeddings", {"content": ["ab", "c"], "embd_normalize": 1})).get_json()
    assert llama == await (await client.post("/embedding", {"content": ["ab", "c"], "embd_normalize": 1})).get_json()
    seed = await (await client.post("/embeddings", {"input": "ab"})).get_json()  # the seed spec's shape stays
    assert set(seed) == {"embedding", "model"}
    l2 = await (await client.post("/embeddings", {"content": "ab"})).get_json()
    assert seed["embedding"] == pytest.approx(l2[0]["embedding"][0], abs=1e-6)
    oai = await (await client.post("/embeddings", {"input": ["ab"], "model": "fake-model"})).get_json()
    assert oai["object"] == "list"


@pytest.mark.parametrize("p", [0, 1, 2, 3, 7])
def test_embd_normalize_is_llama_cpp_s_on_any_scale(p: int) -> None:
    rng = np.random.default_rng(p)
    raw = rng.standard_normal((3, 16)) * 5.0  # (S, C)
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    if p == 0:
        want = raw / (np.abs(raw).max(axis=1, keepdims=True) / 32760.0)
    else:
        want = raw / (np.abs(raw) ** p).sum(axis=1, keepdims=True) ** (1.0 / p)
    # the engines return unit vectors: every llama.cpp norm but -1 is scale-invariant, so the answer is exact
    np.testing.assert_allclose(embd_normalize(unit, p), want, rtol=1e-5)
    np.testing.assert_allclose(embd_normalize(raw, p), want, rtol=1e-5)
    assert not embd_normalize(np.zeros((1, 4)), p).any()  # a zero vector stays zero


async def test_embd_normalize_on_the_route(client) -> None:
    base = np.array((await (await client.post("/embedding", {"content": "ab"})).get_json())[0]["embedding"][0])
    for p, norm in ((0, lambda v: np.abs(v).max() / 32760.0), (1, lambda v: np.abs(v).sum())):
        r = await (await client.post("/embedding", {"content": "ab", "embd_normalize": p})).get_json()
        assert r[0]["embedding"][0] == pytest.approx((base / norm(base)).tolist(), rel=1e-5)


async def test_embd_normalize_minus_one_is_the_raw_pooled_vector(client) -> None:
    r = await (await client.post("/embedding", {"content": [[5, 6, 7]], "embd_normalize": -1})).get_json()
    unit = await fake_vector(client, [5, 6, 7])
    assert r[0]["embedding"][0] == pytest.approx((unit * 4).tolist(), rel=1e-6)  # the fake's raw length: 1 + 3


@pytest.mark.parametrize(
    "body,param",
    [
        ({}, "content"),
        ({"content": [[]]}, "content"),
        ({"content": []}, "content"),
        ({"content": [["a", "b"]]}, "content"),  # a list of strings inside a list is no input
        ({"content": 5}, "content"),
        ({"content": [999999]}, "content"),  # outside the vocabulary
        ({"content": "a", "embd_normalize": -2}, "embd_normalize"),
        ({"content": "a", "embd_normalize": "2"}, "embd_normalize"),
        ({"content": "a", "embd_normalize": True}, "embd_normalize"),
        ({"content": "a", "embd_normalize": 2.5}, "embd_normalize"),
    ],
)
async def test_bad_requests_are_400(client, body, param) -> None:
    await error_of(await client.post("/embedding", body), 400, param)


async def test_a_model_that_cannot_embed_is_a_400(make_client) -> None:
    class NoEmbed(FakeEngine):
        serves = frozenset({"generate"})

    c = make_client(NoEmbed())
    err = await error_of(await c.post("/embedding", {"content": "a"}), 400, "content")
    assert "does not produce embeddings" in err["message"]
    await error_of(await c.post("/embeddings", {"content": "a"}), 400, "content")


async def test_other_model_is_404(client) -> None:
    await error_of(await client.post("/embedding", {"content": "a", "model": "other"}), 404, "model")

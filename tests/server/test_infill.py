"""/infill (llama.cpp shape) and /v1/completions `suffix` on a real server whose tiny random llama has a
vocabulary with Qwen2.5-Coder's FIM and repo/file tokens; a clear 400 for a model without them. Also
llama.cpp's /completion against /v1/completions on that model (tests/server/test_llama_completion.py has
the rest of /completion, on the fake engine)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from modelc.server.fim import find_fim_tokens, infill_ids
from modelc.tokenizer.tokenizer import Tokenizer
from tests.server.live import LiveServer
from tests.server.tiny_model import byte_tokenizer_json

FIM = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")


@pytest.fixture(scope="module")
def server():
    s = LiveServer("--tiny", "--fim", timeout_s=120)
    yield s
    s.stop()


def test_layout_with_extra_files() -> None:
    tok = Tokenizer.from_json(byte_tokenizer_json(FIM), {"bos_token_id": 1, "add_bos_token": True})
    fim = find_fim_tokens(tok)
    assert fim is not None and fim.file_sep is not None
    ids = infill_ids(tok, fim, "def f(", "):\n", [("a.py", "x = 1")], "x")
    text = tok.decode(ids, skip_special=False)
    assert text == (
        "<s><|repo_name|>myproject\n<|file_sep|>a.py\nx = 1<|file_sep|>"
        "<|fim_prefix|>def f(<|fim_suffix|>):\n<|fim_middle|>x"
    )


def test_no_bos_when_the_model_adds_none() -> None:
    # Qwen2.5-Coder: a BOS id in the vocabulary, add_bos_token false: the FIM prompt starts with PRE
    tok = Tokenizer.from_json(byte_tokenizer_json(FIM), {"bos_token_id": 1, "add_bos_token": False})
    fim = find_fim_tokens(tok)
    ids = infill_ids(tok, fim, "a", "b")
    assert ids[0] == fim.prefix and tok.bos_id not in ids


def test_infill_plain_and_stream(server) -> None:
    body = {
        "input_prefix": "def add(a, b):\n    return ",
        "input_suffix": "\n\nprint(add(1, 2))\n",
        "input_extra": [{"filename": "util.py", "text": "X = 1\n"}],
        "n_predict": 6,
        "temperature": 0,
    }
    r = httpx.post(server.url + "/infill", json=body, timeout=120).json()
    assert r["stop"] is True and r["tokens_predicted"] == 6 and r["stop_type"] == "limit"
    assert r["prompt"].startswith("<s><|repo_name|>myproject\n<|file_sep|>util.py\nX = 1\n<|file_sep|><|fim_prefix|>")
    assert r["prompt"].endswith("<|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>")
    specials = sum(r["prompt"].count(t) * (len(t) - 1) for t in ("<s>", *FIM))  # one token each, the rest bytes
    assert r["tokens_evaluated"] == len(r["prompt"].encode()) - specials
    with httpx.stream("POST", server.url + "/infill", json={**body, "stream": True}, timeout=120) as s:
        lines = [ln for ln in s.iter_lines() if ln.startswith("data: ")]
    events = [json.loads(ln[6:]) for ln in lines]
    assert [e["stop"] for e in events][-1] is True and not any(e["stop"] for e in events[:-1])
    assert "".join(e["content"] for e in events) == r["content"]


def test_completions_suffix_is_the_same_prompt(server) -> None:
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    c = oai.completions.create(model="tiny-llama", prompt="ab", suffix="cd", max_tokens=5, temperature=0)
    r = httpx.post(
        server.url + "/infill", json={"input_prefix": "ab", "input_suffix": "cd", "n_predict": 5, "temperature": 0}
    ).json()
    assert c.choices[0].text == r["content"] and c.usage.prompt_tokens == r["tokens_evaluated"]


def test_completion_is_v1_completions_in_llama_shape(server) -> None:
    oai = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=120)
    c = oai.completions.create(model="tiny-llama", prompt="def f(", max_tokens=6, temperature=0, logprobs=3)
    body = {"prompt": "def f(", "n_predict": 6, "temperature": 0, "n_probs": 3, "return_tokens": True}
    r = httpx.post(server.url + "/completion", json=body, timeout=120).json()
    assert r["content"] == c.choices[0].text and r["tokens_evaluated"] == c.usage.prompt_tokens
    probs = r["completion_probabilities"]
    assert [p["id"] for p in probs] == r["tokens"] and len(probs) == 6
    for p, lp, top in zip(probs, c.choices[0].logprobs.token_logprobs, c.choices[0].logprobs.top_logprobs, strict=True):
        assert p["logprob"] == pytest.approx(lp, abs=1e-5)
        assert p["top_logprobs"][0]["id"] == p["id"]  # greedy: the most likely token
        assert len(p["top_logprobs"]) == 3  # OpenAI's legacy dict keeps one of the tokens that read alike
        assert all(any(abs(v - t["logprob"]) < 1e-5 for t in p["top_logprobs"]) for v in top.values())
    ids = httpx.post(server.url + "/tokenize", json={"content": "def f(", "add_special": True}).json()["tokens"]
    same = httpx.post(server.url + "/completion", json={**body, "prompt": ids}, timeout=120).json()
    assert same["content"] == r["content"]  # the text's BOS is the one /tokenize adds


@pytest.mark.parametrize("route", ["/completion", "/infill"])
def test_a_grammar_string_is_gbnf_as_in_llama_server(server, route) -> None:
    """llama-server's `grammar` is GBNF: it was read as modelc's regex string, so `root ::= "ab"` made the model
    write that literal text instead of "ab"."""
    body = {"prompt": "x", "input_prefix": "x", "n_predict": 8, "temperature": 0, "grammar": 'root ::= "ab"'}
    r = httpx.post(server.url + route, json=body, timeout=120)
    assert r.status_code == 200 and r.json()["content"] == "ab", r.text
    bad = httpx.post(server.url + route, json={**body, "grammar": "root ::= ("}, timeout=120)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "grammar"


@pytest.mark.anyio
async def test_no_fim_tokens_is_400(make_client) -> None:
    c = make_client()
    resp = await c.post("/infill", {"input_prefix": "a", "input_suffix": "b"})
    assert resp.status_code == 400
    err = (await resp.get_json())["error"]
    assert err["param"] == "input_suffix" and "fill-in-the-middle" in err["message"]

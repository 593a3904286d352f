"""Perplexity as llama-perplexity computes it, checked against a dense numpy forward scored here."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from modelc.api.engine import Engine
from modelc.artifact.writer import write_artifact
from modelc.cli.main import main
from modelc.engine.perplexity import num_chunks
from modelc.errors import InvalidRequestError
from modelc.models.tiny import make_tiny_llama, reference_logits, with_tokenizer


def _text(n_words: int, seed: int = 1, vocab: int = 96) -> tuple[str, list[int]]:
    rng = np.random.default_rng(seed)
    ids = [int(i) for i in rng.integers(3, vocab, n_words)]
    return " ".join(f"w{i}" for i in ids), ids


def _expected(model, tokens: list[int], ctx: int, stride: int | None) -> float:
    """llama.cpp's rule, written out independently: log-softmax in float64 over the dense reference."""
    nll, count = 0.0, 0
    if stride is None:
        starts, first = [i * ctx for i in range(len(tokens) // ctx)], ctx // 2
    else:
        starts, first = [i * stride for i in range((len(tokens) - ctx + stride - 1) // stride)], ctx - stride - 1
    for start in starts:
        chunk = list(tokens[start : start + ctx])
        if stride is None:
            chunk[0] = 1  # BOS replaces the first token of each chunk
        lg = reference_logits(model, np.array(chunk, np.int32)).astype(np.float64)  # (ctx, V)
        for j in range(first, ctx - 1):
            row = lg[j]
            lse = math.log(np.exp(row - row.max()).sum()) + row.max()
            nll += lse - row[tokens[start + j + 1]]
            count += 1
    return math.exp(nll / count)


@pytest.fixture(scope="module")
def model():
    return with_tokenizer(make_tiny_llama(3))


@pytest.mark.parametrize("stride", [None, 8])
def test_matches_dense_reference(model, stride):
    text, ids = _text(100)
    res = Engine(model, kv_cache_tokens=16).perplexity(text, ctx=32, stride=stride)
    tokens = [1, *ids]  # the tiny tokenizer adds BOS
    assert res.num_tokens == 101
    assert res.num_chunks == (3 if stride is None else (101 - 32 + 7) // 8)
    assert res.num_scored == res.num_chunks * (15 if stride is None else 8)
    assert res.ppl == pytest.approx(_expected(model, tokens, 32, stride), rel=1e-5)
    assert res.chunk_ppls[-1] == pytest.approx(res.ppl)
    assert res.ppl_stderr > 0


def test_too_short_text_and_bad_stride_are_clear_errors(model):
    eng = Engine(model, kv_cache_tokens=16)
    with pytest.raises(InvalidRequestError, match="at least 64"):
        eng.perplexity(_text(40)[0], ctx=32)
    with pytest.raises(InvalidRequestError, match="stride"):
        num_chunks(100, 32, 32)


def test_cli_perplexity_and_pack_eval(model, tmp_path, capsys):
    art = tmp_path / "tiny.modelc"
    write_artifact(model, art)
    txt = tmp_path / "text.txt"
    txt.write_text(_text(100)[0])
    assert main(["perplexity", str(art), str(txt), "--ctx", "32", "--json", "--threads", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["ppl"] == pytest.approx(_expected(model, [1, *_text(100)[1]], 32, None), rel=1e-5)
    assert res["num_chunks"] == 3 and res["ctx"] == 32
    assert main(["perplexity", str(art), str(tmp_path / "missing.txt")]) == 1
    assert "does not exist" in capsys.readouterr().err
    out = tmp_path / "q.modelc"
    assert main(["pack", str(art), "-o", str(out), "--quantize", "q8_0", "--eval", str(txt), "--eval-ctx", "32"]) == 0
    printed = capsys.readouterr().out
    before = float(printed.split("perplexity before: PPL = ")[1].split()[0])
    after = float(printed.split("perplexity after:  PPL = ")[1].split()[0])
    assert before == pytest.approx(res["ppl"], rel=1e-3)
    assert after == pytest.approx(before, rel=0.05) and "change:" in printed


@pytest.mark.shared
def test_scoring_equals_llamacpp_logits_on_the_f32_gguf(shared_fixtures):
    """The NLL of the fixture prompt from modelc's logits equals the one from llama.cpp's (F32 GGUF, F32 KV)."""
    from modelc.engine.perplexity import token_log_probs

    d = shared_fixtures / "models" / "tiny-llama"
    ids = np.load(d / "ref/prompt_ids.npy")
    theirs = np.load(d / "ref/llamacpp_F32_logits.npy")  # (T, V)
    mine = Engine.load(d / "gguf/tiny-llama-F32.gguf", kv_cache_tokens=64).logits(ids.tolist())
    a, b = (-token_log_probs(x[:-1], ids[1:]).mean() for x in (mine, theirs))
    assert math.exp(a) == pytest.approx(math.exp(b), rel=1e-5)

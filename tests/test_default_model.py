"""The bundled default model: small, valid, and modelc's greedy output equals torch's on it."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import modelc
from modelc.api.engine import Engine
from modelc.artifact import open_artifact
from modelc.server.fim import find_fim_tokens, infill_ids

DEFAULT = pathlib.Path(modelc.__file__).parent / "data" / "default.modelc"
REFERENCE = pathlib.Path(__file__).parent / "fixtures" / "default_model" / "greedy.json"
MIN_MARGIN = 0.01  # compare a greedy step only where torch's top-2 logits are this far apart


def test_bundled_model_is_small_and_verifies():
    assert DEFAULT.is_file()
    assert DEFAULT.stat().st_size <= 20 * 1024 * 1024
    art = open_artifact(DEFAULT, verify=True)
    assert art.architecture == "llama" and art.tokenizer_json and art.chat_template


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine.load(DEFAULT, kv_cache_tokens=1024)


def _prompt_ids(engine: Engine, case: dict) -> list[int]:
    """The case's prompt as modelc lays it out: plain text, a FIM prompt (/infill, `suffix`) or a chat prompt."""
    if "fim" in case:
        return infill_ids(engine.tokenizer, find_fim_tokens(engine.tokenizer), *case["fim"])
    if "messages" in case:
        return engine.tokenize(engine.chat_template.render(case["messages"], add_generation_prompt=True))
    return engine.tokenize(case["prompt"])


def test_fim_tokens_and_chat_end(engine):
    """The vocabulary has the FIM tokens /infill and `suffix` look for, and <|im_end|> ends a chat turn."""
    tok = engine.tokenizer
    fim = find_fim_tokens(tok)
    assert fim is not None and fim.prefix == tok.token_to_id("<|fim_prefix|>")
    assert tok.token_to_id("<|im_end|>") in engine.info.eos_ids
    assert "<|im_start|>assistant" in engine.chat_template.render(
        [{"role": "user", "content": "x"}], add_generation_prompt=True
    )


def test_greedy_matches_torch_reference(engine):
    """Teacher-forced on torch's greedy continuation: at every step where torch's top-2 logits are
    MIN_MARGIN apart, modelc picks the same token (its f16 matmuls differ from torch by ~1e-3)."""
    ref = json.loads(REFERENCE.read_text())
    checked = 0
    for case in ref["cases"]:
        prompt, new = case["prompt_ids"], case["greedy_ids"]
        assert _prompt_ids(engine, case) == prompt, case["prompt"]
        logits = engine.logits(prompt + new[:-1])  # (T, V): row t predicts token t + 1
        for i, (tok, margin) in enumerate(zip(new, case["margins"], strict=True)):
            if margin >= MIN_MARGIN:
                assert int(np.argmax(logits[len(prompt) - 1 + i])) == tok, (case["prompt"], i)
                checked += 1
    assert checked >= 60
    assert {"fim", "messages"} <= {k for case in ref["cases"] for k in case}


def test_continues_python(engine):
    """Sampled continuations of a function header look like Python (definitions, docstrings)."""
    texts = [engine.generate("def fibonacci(n):\n", max_tokens=60, temperature=0.7, seed=s) for s in range(3)]
    for text in texts:
        assert any(kw in text for kw in ("def ", '"""', "return", "self", "import ", "    ", " = ", "(")), text
    assert len(set(texts)) == 3  # seeds matter
    assert texts[0] == engine.generate("def fibonacci(n):\n", max_tokens=60, temperature=0.7, seed=0)

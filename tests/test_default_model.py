"""The bundled default model: small, valid, and modelc's greedy output equals torch's on it."""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

import modelc
from modelc.api.engine import Engine
from modelc.artifact import open_artifact

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


def test_greedy_matches_torch_reference(engine):
    """Teacher-forced on torch's greedy continuation: at every step where torch's top-2 logits are
    MIN_MARGIN apart, modelc picks the same token (its f16 matmuls differ from torch by ~1e-3)."""
    ref = json.loads(REFERENCE.read_text())
    checked = 0
    for case in ref["cases"]:
        prompt, new = case["prompt_ids"], case["greedy_ids"]
        assert engine.tokenize(case["prompt"]) == prompt
        logits = engine.logits(prompt + new[:-1])  # (T, V): row t predicts token t + 1
        for i, (tok, margin) in enumerate(zip(new, case["margins"], strict=True)):
            if margin >= MIN_MARGIN:
                assert int(np.argmax(logits[len(prompt) - 1 + i])) == tok, (case["prompt"], i)
                checked += 1
    assert checked >= 40


def test_continues_python(engine):
    """Sampled continuations of a function header look like Python (definitions, docstrings)."""
    texts = [engine.generate("def fibonacci(n):\n", max_tokens=60, temperature=0.7, seed=s) for s in range(3)]
    for text in texts:
        assert any(kw in text for kw in ("def ", '"""', "return", "self", "import ", "    ")), text
    assert len(set(texts)) == 3  # seeds matter
    assert texts[0] == engine.generate("def fibonacci(n):\n", max_tokens=60, temperature=0.7, seed=0)

"""tokenizer/build.py: a tokenizer.json text is built once per process (pack read an HF folder's twice)."""

from __future__ import annotations

import pytest
import tokenizers

from modelc.errors import FormatError
from modelc.tokenizer import build as build_mod
from tests.pull.models import tiny_hf_folder, tiny_model


@pytest.fixture
def builds(monkeypatch) -> list[str]:
    """Every tokenizers build from here on, with an empty memory of texts built."""
    monkeypatch.setattr(build_mod, "_built", {})
    seen: list[str] = []
    real = tokenizers.Tokenizer.from_str

    def counting(text: str):
        seen.append(text)
        return real(text)

    monkeypatch.setattr(tokenizers.Tokenizer, "from_str", counting)
    return seen


def test_pack_of_an_hf_folder_builds_its_tokenizer_once(tmp_path, builds) -> None:
    from modelc.pack import pack_model

    tiny_hf_folder(tmp_path / "hf")
    pack_model(tmp_path / "hf", out=tmp_path / "o.modelc")  # the reader's check, then the structure check
    assert len(builds) == 1


def test_a_text_that_fails_is_built_again_and_the_memory_is_bounded(builds, monkeypatch) -> None:
    with pytest.raises(Exception, match="expected"):
        build_mod.check_builds("not json")
    with pytest.raises(Exception, match="expected"):
        build_mod.check_builds("not json")  # a failure is not remembered
    text = tiny_model().tokenizer_json
    build_mod.build(text)
    build_mod.check_builds(text)
    assert len(builds) == 3
    monkeypatch.setattr(build_mod, "MAX_REMEMBERED", 1)
    build_mod.build(text.replace('"version"', '"version" ', 1))  # another text pushes the first out
    build_mod.check_builds(text)
    assert len(builds) == 5


def test_ollama_stop_tokens_of_a_bad_tokenizer_are_a_format_error(builds) -> None:
    from modelc.pull.ollama import add_stop_tokens

    model = tiny_model()
    model.tokenizer_json = '{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}}'
    with pytest.raises(FormatError, match="the model's tokenizer cannot be built"):
        add_stop_tokens(model, ["</s>"])

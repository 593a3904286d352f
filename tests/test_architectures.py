"""modelc/architectures.py is the one table of what modelc runs: every reader names architectures from it,
and every family in it has the code that runs it."""

from __future__ import annotations

import pytest

from modelc import architectures
from modelc.capabilities import capabilities
from modelc.errors import UnsupportedError
from modelc.formats import gguf, hf_config


def test_every_reader_names_a_known_architecture():
    named = set(hf_config.ARCHITECTURES.values()) | set(gguf._ARCH.values())
    assert named <= set(architectures.FAMILY), named - set(architectures.FAMILY)


def test_families_partition_what_modelc_serves():
    families = set(architectures.FAMILY.values())
    assert families == architectures.GENERATING | architectures.EMBEDDING | architectures.INFERRING


@pytest.mark.parametrize("arch", ["qwen3", "qwen3moe", "gemma2", "gemma3", "mixtral", "gpt-oss", "gpt2"])
def test_generating_architectures_complete_and_pack_accepts_them(arch):
    assert architectures.check(arch) == arch
    assert capabilities(arch, {}, None) == ["completion"]


def test_an_unknown_architecture_is_refused_with_the_known_ones():
    with pytest.raises(UnsupportedError, match="unknown architecture 'nope'; known: llama, mistral"):
        architectures.check("nope")
    assert architectures.family("nope") is None and not architectures.generates(None)

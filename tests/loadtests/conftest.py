"""A tiny random llama with a word-level tokenizer over the workload's words, packed once per session."""

from __future__ import annotations

import pathlib

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from loadtests.workload import WORDS
from modelc.artifact.writer import write_artifact
from modelc.models.tiny import make_tiny_llama

SPECIALS = ("<unk>", "<s>", "</s>")


def word_tokenizer_json() -> tuple[str, int]:
    """One token per workload word (the specials decode to "")."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for w in WORDS:
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(list(SPECIALS))
    return tok.to_str(), len(vocab)


@pytest.fixture(scope="session")
def tiny_artifact(tmp_path_factory) -> pathlib.Path:
    tokenizer_json, vocab_size = word_tokenizer_json()
    model = make_tiny_llama(3, vocab_size=vocab_size)
    model.name = "tiny-words"
    model.tokenizer_json = tokenizer_json
    model.special_tokens = {"bos_token_id": 1, "eos_token_ids": [2], "add_bos_token": True, "bos_token": "<s>",
                            "eos_token": "</s>"}  # fmt: skip
    path = tmp_path_factory.mktemp("loadtests") / "tiny.modelc"
    write_artifact(model, path)
    return path

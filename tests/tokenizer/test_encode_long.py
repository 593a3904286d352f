"""Long texts are encoded through `tokenizers`' encode_batch, which releases the GIL (encode holds it
for the whole text: a server's event loop would stand still meanwhile); the ids are the same."""

from __future__ import annotations

from typing import Any

from modelc.tokenizer.tokenizer import GIL_FREE_CHARS, Tokenizer
from tokenizer.tiny_tokenizers import CORPUS, SPM_SPECIAL, spm_json


class Spy:
    """A `tokenizers.Tokenizer` stand-in that records which encode method was used."""

    def __init__(self, tok: Any) -> None:
        self._tok = tok
        self.calls: list[str] = []

    def encode(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("encode")
        return self._tok.encode(*args, **kwargs)

    def encode_batch(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append("encode_batch")
        return self._tok.encode_batch(*args, **kwargs)


def test_long_texts_use_encode_batch_with_the_same_ids(monkeypatch) -> None:
    from modelc.tokenizer import tokenizer as module

    tok = Tokenizer.from_json(spm_json(), SPM_SPECIAL)
    text = " ".join(CORPUS) * (GIL_FREE_CHARS // len(" ".join(CORPUS)) + 2)
    spy = Spy(tok.backend)
    tok._tok = spy
    with monkeypatch.context() as m:
        m.setattr(module, "GIL_FREE_CHARS", 10**9)  # everything through encode(), as before
        expected = {add: tok.encode(text, add_special=add) for add in (True, False)}
    assert spy.calls == ["encode", "encode"] and expected[True][0] == tok.bos_id
    spy.calls.clear()
    assert {add: tok.encode(text, add_special=add) for add in (True, False)} == expected
    assert spy.calls == ["encode_batch", "encode_batch"]
    tok.encode("short")
    assert spy.calls[-1] == "encode"


def test_encoder_adapter_uses_encode_batch_for_long_texts() -> None:
    from modelc.api.engines import EncoderTokenizer
    from modelc.engine.embedder import truncating_tokenizer

    adapter = EncoderTokenizer(truncating_tokenizer(spm_json(), 10**6))
    inner = adapter._tok
    adapter._tok = spy = Spy(inner)
    text = "hello world " * GIL_FREE_CHARS
    assert adapter.encode(text) == list(inner.encode(text).ids)
    assert spy.calls == ["encode_batch"]

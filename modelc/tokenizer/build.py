"""Building a tokenizer.json text with the tokenizers library, once per text in a process.

NOTE: pack checks that the tokenizer it stores is one every load can build: formats/hf.py when it reads a
folder's tokenizer.json (to name the file in its error), artifact/structure.py for every model before it is
written, and an Ollama pull builds it to map stop strings. Building is the slow part (a 128k-vocab
tokenizer.json, 7 MB: ~470 ms; its digest: ~10 ms), so the digests of the last texts that built are kept
and a text built before is not built again. No model knowledge here.
"""

from __future__ import annotations

import hashlib
from typing import Any

from modelc.errors import FormatError

MAX_REMEMBERED = 16
_built: dict[bytes, None] = {}  # BLAKE2b digests of texts that built, oldest first


def build(text: str) -> Any:
    """tokenizers.Tokenizer.from_str(text) (raising what it raises), remembered as a text that builds."""
    import tokenizers  # lazy: only where a model has a tokenizer

    tok = tokenizers.Tokenizer.from_str(text)
    _remember(_digest(text))
    return tok


def model_tokenizer(text: str) -> Any:
    """build(text) for a model's stored tokenizer: a FormatError naming the cause where it does not build (pack
    refuses such a model: every load would fail)."""
    try:
        return build(text)
    except Exception as e:  # tokenizers raises plain Exception subclasses
        raise FormatError(f"the model's tokenizer cannot be built: {str(e).splitlines()[0]}") from None


def check_builds(text: str) -> None:
    """model_tokenizer's check of `text`; a text that built before in this process is not built again."""
    if _digest(text) not in _built:
        model_tokenizer(text)


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=32).digest()


def _remember(key: bytes) -> None:
    _built.pop(key, None)
    _built[key] = None
    while len(_built) > MAX_REMEMBERED:
        del _built[next(iter(_built))]

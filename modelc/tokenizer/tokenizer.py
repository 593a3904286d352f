"""Tokenizer: a `tokenizers` tokenizer.json plus the model's special tokens (BOS/EOS rules, raw token bytes).

Owns encode/decode and the byte string each token stands for (what constrained decoding needs).
No model knowledge beyond the `special_tokens` dict of the IR; no streaming (see incremental.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

import tokenizers

from modelc.errors import FormatError, InvalidRequestError

_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_SPM_SPACE = "\u2581"  # "▁", SentencePiece's word marker


@cache
def gpt2_byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, inverted: printable stand-in character -> raw byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = list(printable)
    shift = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + shift)
            shift += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def _components(node: Mapping | None, key: str) -> list[Mapping]:
    """Flatten a tokenizer.json decoder/normalizer/pre_tokenizer (possibly a Sequence) into its parts."""
    if not node:
        return []
    if node.get("type") == "Sequence":
        out: list[Mapping] = []
        for child in node.get(key, []):
            out.extend(_components(child, key))
        return out
    return [node]


class Tokenizer:
    """Encode/decode over `tokenizers`, with the model's BOS/EOS conventions.

    `special_tokens` is the IR dict: bos_token_id, eos_token_ids (list), eot_token_id,
    eom_token_id, pad_token_id, bos_token, eos_token, add_bos_token. Unknown keys are ignored.
    """

    def __init__(self, tok: tokenizers.Tokenizer, spec: Mapping, special_tokens: Mapping | None = None) -> None:
        self._tok = tok
        self._spec = spec
        st = dict(special_tokens or {})
        self.special_tokens = st
        vocab = tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values(), default=-1) + 1
        self._added = {i: a for i, a in tok.get_added_tokens_decoder().items()}

        self.bos_id: int | None = _first_int(st.get("bos_token_id"))
        if self.bos_id is None and isinstance(st.get("bos_token"), str):
            self.bos_id = tok.token_to_id(st["bos_token"])
        self.eos_ids: frozenset[int] = frozenset(self._collect_eos(st))
        self.pad_id: int | None = _first_int(st.get("pad_token_id"))
        self.special_ids: frozenset[int] = frozenset(
            {i for i, a in self._added.items() if a.special}
            | self.eos_ids
            | ({self.bos_id} if self.bos_id is not None else set())
        )
        self._add_bos: bool | None = st.get("add_bos_token")
        # generated text keeps special tokens (harmony's channel markers) when the model's format needs them
        self.keep_special_text: bool = bool(st.get("keep_special_text"))
        self._post_adds_bos = self._post_processor_adds_bos()
        self._token_bytes: list[bytes] | None = None

    # ---------------------------------------------------------------- building
    @classmethod
    def from_json(cls, tokenizer_json_text: str, special_tokens: Mapping | None = None) -> Tokenizer:
        """Build from tokenizer.json text (as stored in the artifact) and the IR special_tokens dict."""
        try:
            spec = json.loads(tokenizer_json_text)
            tok = tokenizers.Tokenizer.from_str(tokenizer_json_text)
        except Exception as exc:  # tokenizers raises plain Exception subclasses
            raise FormatError(f"invalid tokenizer.json: {str(exc).splitlines()[0] if str(exc) else exc!r}") from exc
        return cls(tok, spec, special_tokens)

    def _collect_eos(self, st: Mapping) -> set[int]:
        ids: set[int] = set()
        for key in ("eos_token_ids", "eos_token_id", "eot_token_id", "eom_token_id"):
            value = st.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                ids.add(value)
            elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
                ids.update(int(v) for v in value if v is not None)
        if not ids and isinstance(st.get("eos_token"), str):
            eos = self._tok.token_to_id(st["eos_token"])
            if eos is not None:
                ids.add(eos)
        return {i for i in ids if 0 <= i}

    def _post_processor_adds_bos(self) -> bool:
        if self.bos_id is None:
            return False
        probe = self._tok.encode("a", add_special_tokens=True).ids
        return bool(probe) and probe[0] == self.bos_id

    # ---------------------------------------------------------------- encode / decode
    @property
    def adds_bos(self) -> bool:
        """Whether encode(..., add_special=True) starts the ids with BOS."""
        if self.bos_id is None:
            return False
        return self._post_adds_bos if self._add_bos is None else bool(self._add_bos)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The wrapped `tokenizers.Tokenizer` (read-only use)."""
        return self._tok

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        """Token ids of `text`. With add_special, BOS is added once when the model adds one
        (a text that already starts with the BOS token, as rendered chat templates do, gets no second one)."""
        ids = encode_ids(self._tok, text, add_special)
        if not add_special or self.bos_id is None:
            return ids
        bos = self.bos_id
        if self.adds_bos and (not ids or ids[0] != bos):
            ids.insert(0, bos)
        elif not self.adds_bos and self._post_adds_bos and ids and ids[0] == bos:
            ids.pop(0)
        if len(ids) >= 2 and ids[0] == bos and ids[1] == bos and self.adds_bos:
            ids.pop(0)  # the text carried its own BOS: never a double BOS
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        """Text of `ids` (ids outside the vocabulary are dropped, as `tokenizers` does)."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def id_to_token(self, token_id: int) -> str | None:
        return self._tok.id_to_token(int(token_id))

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    # ---------------------------------------------------------------- raw bytes
    @property
    def token_strings(self) -> list[str]:
        """Every id's token string (the vocabulary's spelling; "" for holes)."""
        return [self._tok.id_to_token(i) or "" for i in range(self.vocab_size)]

    def token_bytes(self, token_id: int) -> bytes:
        """The raw bytes token `token_id` stands for in generated text.

        Byte-level BPE: the GPT-2 byte map undone. SentencePiece: "▁" -> b" ", <0xNN> -> one byte.
        WordPiece: "##x" -> b"x", any other piece -> b" " + piece. Added tokens: their content.
        """
        if self._token_bytes is None:
            self._token_bytes = self._build_token_bytes()
        if not 0 <= token_id < self.vocab_size:
            return b""
        return self._token_bytes[token_id]

    def all_token_bytes(self) -> list[bytes]:
        """token_bytes for every id 0..vocab_size-1 (built once)."""
        if self._token_bytes is None:
            self._token_bytes = self._build_token_bytes()
        return self._token_bytes

    def _build_token_bytes(self) -> list[bytes]:
        model = self._spec.get("model") or {}
        decoders = [d.get("type") for d in _components(self._spec.get("decoder"), "decoders")]
        byte_level = "ByteLevel" in decoders
        byte_fallback = bool(model.get("byte_fallback")) or "ByteFallback" in decoders
        spm = "Metaspace" in decoders or any(
            d.get("type") == "Replace" and (d.get("pattern") or {}).get("String") == _SPM_SPACE
            for d in _components(self._spec.get("decoder"), "decoders")
        )
        wordpiece = model.get("type") == "WordPiece" or "WordPiece" in decoders
        prefix = model.get("continuing_subword_prefix") or "##"
        byte_map = gpt2_byte_decoder()

        out: list[bytes] = []
        for i in range(self.vocab_size):
            tok = self._tok.id_to_token(i)
            if tok is None:
                out.append(b"")
            elif i in self._added:
                out.append(self._added[i].content.encode("utf-8"))
            elif byte_level:
                if all(c in byte_map for c in tok):
                    out.append(bytes(byte_map[c] for c in tok))
                else:
                    out.append(tok.encode("utf-8"))
            elif byte_fallback and (m := _BYTE_TOKEN.fullmatch(tok)):
                out.append(bytes([int(m.group(1), 16)]))
            elif spm:
                out.append(tok.replace(_SPM_SPACE, " ").encode("utf-8"))
            elif wordpiece:
                out.append(tok[len(prefix) :].encode("utf-8") if tok.startswith(prefix) else b" " + tok.encode("utf-8"))
            else:
                out.append(tok.encode("utf-8"))
        return out


def _first_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, list | tuple) and value and isinstance(value[0], int):
        return int(value[0])
    return None


GIL_FREE_CHARS = 4096  # texts longer than this are encoded with the GIL released


def encode_ids(tok: tokenizers.Tokenizer, text: str, add_special: bool) -> list[int]:
    """`tok.encode(text).ids`, but for long texts through encode_batch: `tokenizers` holds the GIL for
    the whole of encode() (570 ms for 600k characters, during which a server's event loop stands
    still) and releases it in encode_batch (same ids)."""
    try:
        if len(text) <= GIL_FREE_CHARS:
            return list(tok.encode(text, add_special_tokens=add_special).ids)
        return list(tok.encode_batch([text], add_special_tokens=add_special)[0].ids)
    except TypeError:  # tokenizers' answer to a non-str and to a str it cannot encode ("must be str")
        raise _not_text(text) from None


def _not_text(text: object) -> InvalidRequestError:
    if not isinstance(text, str):
        return InvalidRequestError(f"the text to tokenize must be a string, got {type(text).__name__}")
    # a lone UTF-16 surrogate (Python str allows it; it is not Unicode text): what tokenizers refuses
    return InvalidRequestError("the text holds a lone UTF-16 surrogate (such as \\ud800): not valid Unicode")

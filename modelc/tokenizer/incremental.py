"""IncrementalDecoder: turn a stream of token ids into a stream of complete UTF-8 text pieces.

NOTE: decoding one token at a time is wrong twice over: a multibyte character may span
tokens (byte-fallback and byte-level BPE), and SentencePiece decoders drop the leading
space of the first token decoded. So, like vLLM's detokenize_incrementally, we decode a
short sliding window [prefix_offset, len) and emit only what it adds beyond the window's
already-emitted part [prefix_offset, read_offset). A window whose text ends in U+FFFD is
an incomplete character: nothing is emitted until a later token completes it (or flush()).
"""

from __future__ import annotations

from modelc.tokenizer.tokenizer import Tokenizer

_REPLACEMENT = "\ufffd"


class IncrementalDecoder:
    """Feed token ids one at a time; get back only text that is final.

    `prompt_ids` (optional) give the context so the first generated token keeps its
    leading space exactly as decode(prompt + output) would render it.
    """

    __slots__ = ("_tok", "_ids", "_prefix_offset", "_read_offset", "_skip_special")

    def __init__(
        self, tokenizer: Tokenizer, prompt_ids: list[int] | None = None, *, skip_special: bool | None = None
    ) -> None:
        self._tok = tokenizer
        # default: skip special tokens unless the model's text format needs them (harmony's channel markers)
        self._skip_special = (
            not getattr(tokenizer, "keep_special_text", False) if skip_special is None else skip_special
        )
        self._ids: list[int] = list(prompt_ids or [])
        # Keep a few prompt tokens in the window (vLLM uses 5) so SentencePiece spacing is right.
        self._read_offset = len(self._ids)
        self._prefix_offset = self._char_start(max(self._read_offset - 5, 0))

    def _char_start(self, pos: int) -> int:
        """Step back so the window never opens inside a multibyte character's byte tokens
        (byte fallback decodes a run of byte tokens as one unit)."""
        while pos > 0:
            raw = self._tok.token_bytes(self._ids[pos])
            if not raw or not 0x80 <= raw[0] <= 0xBF:
                break
            pos -= 1
        return pos

    @property
    def token_ids(self) -> list[int]:
        return self._ids

    def _decode(self, start: int, stop: int) -> str:
        return self._tok.decode(self._ids[start:stop], skip_special=self._skip_special)

    def add(self, token_id: int) -> str:
        """Append one token; return the text that is now complete (often "", never a half character)."""
        self._ids.append(int(token_id))
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        new_text = self._decode(self._prefix_offset, len(self._ids))
        if len(new_text) > len(prefix_text) and not new_text.endswith(_REPLACEMENT):
            piece = new_text[len(prefix_text) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._ids)
            return piece
        return ""

    def flush(self) -> str:
        """Everything still held back (an incomplete character at the end becomes U+FFFD)."""
        prefix_text = self._decode(self._prefix_offset, self._read_offset)
        new_text = self._decode(self._prefix_offset, len(self._ids))
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._ids)
        return new_text[len(prefix_text) :] if len(new_text) > len(prefix_text) else ""

"""Fill-in-the-middle prompts: find a model's FIM tokens in its vocabulary and lay out
`[extra context] PRE prefix SUF suffix MID [prompt]` (prefix-suffix-middle order).

Extra context (llama.cpp's `input_extra`: other files) goes before the FIM prefix: with repo/file
separator tokens (Qwen2.5-Coder, StarCoder2) as `<repo_name>project\\n<file_sep>name\\ntext...`,
else as plain `--- snippet ---` blocks. Pure, no awaits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from modelc.server.served import ServedTokenizer

# (prefix, suffix, middle, repo name, file separator) as the vocabularies spell them; the last two may be absent.
FAMILIES = (
    ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"),  # Qwen2.5-Coder
    ("<fim_prefix>", "<fim_suffix>", "<fim_middle>", "<reponame>", "<file_sep>"),  # StarCoder(2)
    ("<PRE>", "<SUF>", "<MID>", None, None),  # CodeLlama
    ("▁<PRE>", "▁<SUF>", "▁<MID>", None, None),  # CodeLlama (sentencepiece spelling)
    ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>", None, None),  # DeepSeek-Coder
)
REPO_NAME = "myproject"
SNIPPET = "\n\n--- snippet ---\n\n"


@dataclass(frozen=True, slots=True)
class FimTokens:
    prefix: int
    suffix: int
    middle: int
    repo_name: int | None = None
    file_sep: int | None = None


def token_id(tokenizer: ServedTokenizer, text: str) -> int | None:
    """The id of `text` when it is one token of the vocabulary."""
    return tokenizer.token_to_id(text)


def find_fim_tokens(tokenizer: Any) -> FimTokens | None:
    """The first family whose prefix/suffix/middle tokens are all in the vocabulary, else None."""
    for pre, suf, mid, rep, sep in FAMILIES:
        ids = [token_id(tokenizer, t) for t in (pre, suf, mid)]
        if all(i is not None for i in ids):
            extra = [token_id(tokenizer, t) if t else None for t in (rep, sep)]
            return FimTokens(ids[0], ids[1], ids[2], extra[0], extra[1])
    return None


def extra_context_ids(tokenizer: Any, fim: FimTokens, extra: Sequence[tuple[str, str]]) -> list[int]:
    """(filename, text) chunks before the FIM prefix."""
    enc = lambda s: list(tokenizer.encode(s, add_special=False))  # noqa: E731
    out: list[int] = []
    if fim.repo_name is not None and fim.file_sep is not None and extra:
        out += [fim.repo_name, *enc(REPO_NAME + "\n")]
    for filename, text in extra:
        if fim.file_sep is not None:
            out += [fim.file_sep, *enc(filename + "\n")]
        else:
            out += enc(SNIPPET)
        out += enc(text)
    if extra and fim.file_sep is not None:
        out.append(fim.file_sep)
    return out


def infill_ids(
    tokenizer: Any,
    fim: FimTokens,
    prefix: str,
    suffix: str,
    extra: Sequence[tuple[str, str]] = (),
    prompt: str = "",
) -> list[int]:
    """The whole FIM prompt: BOS (when the model adds one to its prompts, as llama.cpp's infill does),
    extra context, PRE prefix SUF suffix MID prompt."""
    enc = lambda s: list(tokenizer.encode(s, add_special=False)) if s else []  # noqa: E731
    adds_bos = getattr(tokenizer, "adds_bos", tokenizer.bos_id is not None)
    bos = [tokenizer.bos_id] if tokenizer.bos_id is not None and adds_bos else []
    return [
        *bos,
        *extra_context_ids(tokenizer, fim, extra),
        fim.prefix,
        *enc(prefix),
        fim.suffix,
        *enc(suffix),
        fim.middle,
        *enc(prompt),
    ]

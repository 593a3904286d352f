"""A byte-level BPE tokenizer.json -> its llama.cpp pre-tokenizer name (tokenizer.ggml.pre).

convert_hf_to_gguf.py recognises a tokenizer by hashing the ids it gives a fixed text, so it only
knows the exact vocabularies it lists. The rule here depends on the pre-tokenizer alone, which is
all llama.cpp's pre name selects: the tokenizer.json split regexes, in order (a `Split` per regex,
`Isolated`, not inverted, then `ByteLevel`; a lone `ByteLevel` with use_regex is GPT-2's regex),
and `ignore_merges`, must equal an entry of llama.cpp's table (gguf_pretokenizer.PRE_TOKENIZERS,
the regexes as the models' tokenizer.json files spell them). The name convert_hf_to_gguf writes
for the family's best-known model is preferred (PREFERRED). A byte-level tokenizer that matches
no entry, or one with a normalizer llama.cpp lacks, is refused: a wrong name would split text
differently without any error.

NOTE: Qwen2's tokenizer.json has an NFC normalizer that llama.cpp does not apply (its own "qwen2"
conversions skip it too): text that is not already NFC may tokenize differently in llama.cpp.
"""

from __future__ import annotations

from typing import Any

from modelc.errors import UnsupportedError
from modelc.formats.gguf_pretokenizer import PRE_TOKENIZERS

GPT2_REGEX = PRE_TOKENIZERS["gpt-2"][0][0]  # what ByteLevel(use_regex=True) splits by
# the names convert_hf_to_gguf.py gives GPT-2, LLaMA 3, Qwen2, DBRX, StarCoder, ...: tried first
PREFERRED = ("gpt-2", "llama-bpe", "qwen2", "dbrx", "starcoder", "deepseek-coder", "deepseek-v3", "gpt-4o")
_NORMALIZERS_OK = (None, "NFC")


def byte_level_pre_name(doc: dict[str, Any]) -> str | None:
    """The pre name for a byte-level BPE tokenizer.json; None when its pre-tokenizer is not byte-level."""
    parts = _pre_tokenizers(doc.get("pre_tokenizer"))
    if not any(p.get("type") == "ByteLevel" for p in parts):
        return None
    normalizer = (doc.get("normalizer") or {}).get("type")
    if normalizer not in _NORMALIZERS_OK:
        raise UnsupportedError(f"GGUF export: llama.cpp has no {normalizer} normalizer for a byte-level BPE tokenizer")
    regexes = split_regexes(parts)
    ignore_merges = bool((doc.get("model") or {}).get("ignore_merges"))
    want = [_canonical(r) for r in regexes]
    for name in [*PREFERRED, *PRE_TOKENIZERS]:
        entry = PRE_TOKENIZERS.get(name)
        if entry is not None and [_canonical(r) for r in entry[0]] == want and entry[1] == ignore_merges:
            return name
    raise UnsupportedError(
        f"GGUF export: llama.cpp knows no pre-tokenizer splitting by {regexes!r} (ignore_merges={ignore_merges})"
    )


def _canonical(regex: str) -> str:
    """The regex without a final `|\\s+` after `\\s+(?!\\S)`, which splits nothing differently.

    The other alternatives of these regexes match every non-space character, so text the regex
    leaves unmatched is a lone whitespace character before a non-space one, and both llama.cpp and
    `tokenizers` keep unmatched text as a piece of its own: exactly what the `\\s+` would match.
    llama.cpp spells StarCoder's and Falcon's regexes without it; their tokenizer.json files have it.
    """
    return regex.removesuffix("|\\s+") if regex.endswith("\\s+(?!\\S)|\\s+") else regex


def _pre_tokenizers(node: dict[str, Any] | None) -> list[dict[str, Any]]:
    if not node:
        return []
    if node.get("type") == "Sequence":
        return [p for sub in node.get("pretokenizers") or [] for p in _pre_tokenizers(sub)]
    return [node]


def split_regexes(parts: list[dict[str, Any]]) -> list[str]:
    """The regexes a byte-level pre-tokenizer splits by, in order; UnsupportedError for other steps."""
    regexes: list[str] = []
    for i, p in enumerate(parts):
        kind = p.get("type")
        if kind == "Split":
            pattern = p.get("pattern") or {}
            if "Regex" not in pattern or p.get("behavior") != "Isolated" or p.get("invert"):
                raise UnsupportedError(f"GGUF export: llama.cpp has no pre-tokenizer step like {p!r}")
            regexes.append(pattern["Regex"])
        elif kind == "ByteLevel" and i == len(parts) - 1:
            if p.get("add_prefix_space"):
                raise UnsupportedError("GGUF export: llama.cpp cannot add a prefix space in a byte-level tokenizer")
            if p.get("use_regex", True):
                regexes.append(GPT2_REGEX)
        else:
            raise UnsupportedError(f"GGUF export: llama.cpp has no byte-level pre-tokenizer step {kind!r} here")
    return regexes

"""llama.cpp's BPE pre-tokenizers by tokenizer.ggml.pre name: split regexes, ignore_merges, BOS default.

Data only (src/llama-vocab.cpp's table); gguf_tokenizer.py turns an entry into `tokenizers`
Split pre-tokenizers. The regexes are the models' own tokenizer.json ones where llama.cpp
only rewrote them for its regex engine (Oniguruma, which `tokenizers` uses, takes the originals).
"""

from __future__ import annotations

from typing import Any

_CONTRACTIONS = "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
_GPT2 = ["'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"]
_LLAMA3 = [
    _CONTRACTIONS
    + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_QWEN2 = [
    _CONTRACTIONS
    + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_STARCODER = ["\\p{N}", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"]
_DEEPSEEK_LLM = [
    "[\r\n]",
    "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
    "\\s+$",
    "[一-龥ࠀ-一가-퟿]+",
    "\\p{N}+",
]
_DEEPSEEK_CODER = ["[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"]
_DEEPSEEK3 = [
    "\\p{N}{1,3}",
    "[一-龥぀-ゟ゠-ヿ]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+"
    "| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
_FALCON = [
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "[0-9][0-9][0-9]",
]
_BLOOM = [" ?[^(\\s|.,!?…。，、।۔،)]+"]
_VIKING = [*_BLOOM, "\\p{N}"]
_CHATGLM4 = _LLAMA3
_SEED_CODER = [
    _CONTRACTIONS
    + "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_BAILINGMOE = [
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
]
_QWEN35 = [
    _CONTRACTIONS
    + "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_UPPER = "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
_LOWER = "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
_TEKKEN = [
    f"[^\\r\\n\\p{{L}}\\p{{N}}]?{_UPPER}*{_LOWER}+|[^\\r\\n\\p{{L}}\\p{{N}}]?{_UPPER}+{_LOWER}*"
    "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_GPT4O = [
    f"[^\\r\\n\\p{{L}}\\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?|[^\\r\\n\\p{{L}}\\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
]
_DEFAULT = [
    "[\\p{P}\\$\\+<=>\\^~\\|]+",
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
    "\\p{N}+",
    "[0-9][0-9][0-9]",
]


def _names(names: str, regexes: list[str], ignore_merges: bool = False, add_bos: bool = False):
    return {n: (regexes, ignore_merges, add_bos) for n in names.split()}


# tokenizer.ggml.pre -> (regexes applied in sequence, ignore_merges, add_bos when the GGUF does not say).
# Mirrors llama.cpp's llama_vocab::load table (src/llama-vocab.cpp); regexes are the models' own
# tokenizer.json ones where llama.cpp only rewrote them for its regex engine.
PRE_TOKENIZERS: dict[str, tuple[list[str], bool, bool]] = {
    **_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", _LLAMA3, True, True),
    **_names("dbrx smaug-bpe", _LLAMA3),
    **_names("qwen2 stablelm2 hunyuan megrez grok-2", _QWEN2),
    **_names("starcoder refact command-r smollm codeshell exaone minerva-7b", _STARCODER),
    **_names(
        "gpt-2 gpt2 phi-2 jina-es jina-de gigachat jina-v1-en jina-v2-es jina-v2-de jina-v2-code roberta-bpe"
        " exaone4 mpt olmo jais trillion granite-docling",
        _GPT2,
    ),
    **_names("poro-chat bloom gpt3-finnish", _BLOOM),
    **_names("deepseek-v3 hunyuan-dense", _DEEPSEEK3),
    **_names("chatglm-bpe glm4", _CHATGLM4),
    **_names("gpt-4o minimax-m2", _GPT4O),
    "tekken": (_TEKKEN, True, True),
    "viking": (_VIKING, False, False),
    "seed-coder": (_SEED_CODER, False, False),
    "bailingmoe": (_BAILINGMOE, False, False),
    "qwen35": (_QWEN35, False, False),
    "deepseek-llm": (_DEEPSEEK_LLM, False, False),
    "deepseek-coder": (_DEEPSEEK_CODER, False, False),
    "falcon": (_FALCON, False, False),
    "default": (_DEFAULT, False, False),
}


def default_add_bos(fields: dict[str, Any]) -> bool:
    """llama.cpp's add_bos when tokenizer.ggml.add_bos_token is absent."""
    kind = fields.get("tokenizer.ggml.model")
    if kind == "gpt2":
        entry = PRE_TOKENIZERS.get(str(fields.get("tokenizer.ggml.pre") or "default"))
        return bool(entry and entry[2])
    return kind in ("llama", "bert")

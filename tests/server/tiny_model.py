"""A servable tiny model built in memory: modelc.models.tiny's random llama plus a byte-level BPE
tokenizer (no merges: one token per byte) and a ChatML template that takes tools."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from modelc.ir import Model

SPECIALS = ("<unk>", "<s>", "</s>")
FIM_SPECIALS = ("<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>")
CHATML_TOOLS = (
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def byte_tokenizer_json(extra_specials: tuple[str, ...] = ()) -> str:
    """Specials first, then one token per byte, then `extra_specials` (e.g. FIM tokens)."""
    vocab = {s: i for i, s in enumerate(SPECIALS)}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    for s in extra_specials:
        vocab[s] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([*SPECIALS, *extra_specials])
    return tok.to_str()


def make_served_model(seed: int = 0, *, fim: bool = False) -> Model:
    """fim: the vocabulary also has Qwen2.5-Coder's fill-in-the-middle and repo/file tokens."""
    from modelc.models.tiny import make_tiny_llama

    extra = FIM_SPECIALS if fim else ()
    m = make_tiny_llama(seed, vocab_size=len(SPECIALS) + 256 + len(extra))
    m.name = "tiny-llama"
    m.tokenizer_json = byte_tokenizer_json(extra)
    m.chat_template = CHATML_TOOLS
    m.special_tokens = {
        "bos_token_id": 1,
        "eos_token_ids": [2],
        "add_bos_token": True,
        "bos_token": "<s>",
        "eos_token": "</s>",
    }
    return m

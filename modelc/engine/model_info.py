"""ModelInfo: what the runtime derives from a model source once: its tokenizer, chat template, EOS ids,
context length and vocabulary size.

Built once per served model (by the front door) and handed to the Runner and the scheduler config, so
every part of one engine agrees on the EOS ids and shares one Tokenizer, and with it the grammar cache
of engine/constraint.py (a grammar compiled when a request arrives is found again by the runner).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from modelc import architectures
from modelc.errors import UnsupportedError
from modelc.models.llama_args import long_rope_after
from modelc.request import Constraint
from modelc.tokenizer.chat_template import ChatTemplate
from modelc.tokenizer.tokenizer import Tokenizer

_EOS_KEYS = ("eos_token_ids", "eos_token_id", "eot_token_id", "eom_token_id")


@dataclass(frozen=True, slots=True, eq=False)
class ModelInfo:
    name: str
    architecture: str
    special_tokens: dict[str, Any]
    tokenizer: Tokenizer | None  # None: the model has no tokenizer (callers pass token ids)
    chat_template: ChatTemplate | None  # the model's own; None when it ships none
    eos_ids: frozenset[int]  # EOS, EOT and EOM (end of message) ids: generation stops on any of them
    context_length: int | None  # max_position_embeddings, when the model says
    vocab_size: int
    # long-RoPE (Phi-3.5/Phi-4): prompts longer than this rotate with the long factors (0: not long-RoPE)
    rope_long_after: int
    # a context shift may re-rotate the keys: RoPE (the llama family), not learned positions, not long-RoPE
    context_shift_ok: bool

    @classmethod
    def of(cls, source: Any) -> ModelInfo:
        """Everything above, read from a model source (an IR Model or an Artifact)."""
        st = dict(getattr(source, "special_tokens", None) or {})
        text = getattr(source, "tokenizer_json", None)
        tokenizer = Tokenizer.from_json(text, st) if text else None
        template = None
        if getattr(source, "chat_template", None):
            bos, eos = st.get("bos_token") or "", st.get("eos_token") or ""
            template = ChatTemplate(source.chat_template, bos_token=bos, eos_token=eos)
        config = getattr(source, "config", None) or {}
        max_pos = config.get("max_position_embeddings")
        architecture = str(getattr(source, "architecture", "") or "")
        rope = architectures.family(architecture) == architectures.LLAMA
        long_after = long_rope_after(config) if rope else 0
        return cls(
            name=getattr(source, "name", "") or "",
            architecture=architecture,
            special_tokens=st,
            tokenizer=tokenizer,
            chat_template=template,
            eos_ids=eos_ids(st, tokenizer),
            context_length=int(max_pos) if max_pos else None,
            vocab_size=int(config.get("vocab_size") or (tokenizer.vocab_size if tokenizer else 0)),
            rope_long_after=long_after,
            context_shift_ok=rope and not long_after,
        )

    def compile(self, constraint: Constraint) -> Any:
        """The constraint's grammar compiled for this model's tokenizer. engine/constraint.py caches it per
        Tokenizer object, so the front door compiles it when the request arrives and the runner, which
        shares this ModelInfo, finds it there instead of compiling inside a batch step."""
        if self.tokenizer is None:
            raise UnsupportedError("structured output needs the model's tokenizer, and this model has none")
        # lazy: llguidance loads only for a constrained request
        from modelc.engine.constraint import compile_constraint

        return compile_constraint(constraint, self.tokenizer)


def eos_ids(special_tokens: dict[str, Any], tokenizer: Tokenizer | None = None) -> frozenset[int]:
    """The ids that end generation: eos_token_ids/eos_token_id, eot_token_id and eom_token_id from the
    special tokens, plus what the tokenizer resolved (the eos_token string when no id is given)."""
    ids: set[int] = set(tokenizer.eos_ids) if tokenizer is not None else set()
    for key in _EOS_KEYS:
        value = special_tokens.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            ids.add(value)
        elif isinstance(value, Iterable) and not isinstance(value, str | bytes):
            ids.update(int(v) for v in value if v is not None)
    return frozenset(i for i in ids if i >= 0)

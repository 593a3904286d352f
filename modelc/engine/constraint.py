"""Structured outputs: compile a Constraint (JSON schema, regex, Lark, GBNF, tool call) with llguidance
and give each sequence a Matcher that yields exact token masks.

Owns the llguidance tokenizer (built once per Tokenizer) and the grammar compile cache. No
sampling here: the sampler asks a Matcher for its mask and tells it the chosen token.
Special/control tokens are never allowed inside constrained text; EOS is allowed exactly
when the grammar accepts (llguidance's rules, with the model's EOS/EOT ids as its EOS set).
"""

from __future__ import annotations

import json
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import llguidance
import llguidance.numpy as llg_np
import numpy as np

from modelc.errors import InvalidRequestError
from modelc.request import Constraint
from modelc.tokenizer.tokenizer import Tokenizer

KINDS = ("json_schema", "json_object", "regex", "lark", "gbnf", "tool_call")

# Compact JSON with the separators models naturally write (json.dumps style); a schema's own
# "x-guidance" options override these.
JSON_DEFAULTS = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}

_CACHE_SIZE = 128
_lock = threading.Lock()
_ll_tokenizers: weakref.WeakKeyDictionary[Tokenizer, llguidance.LLTokenizer] = weakref.WeakKeyDictionary()
_grammars: weakref.WeakKeyDictionary[Tokenizer, OrderedDict[tuple[str, str], str]] = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class CompiledGrammar:
    """A validated llguidance grammar bound to one tokenizer; matcher() starts a sequence."""

    kind: str
    grammar: str  # llguidance's JSON grammar text
    ll_tokenizer: llguidance.LLTokenizer
    vocab_size: int  # the tokenizer's; model vocabularies may be larger (padding is disallowed)

    def matcher(self) -> Matcher:
        return Matcher(llguidance.LLMatcher(self.ll_tokenizer, self.grammar, log_level=0), self.vocab_size)


class Matcher:
    """One sequence's position in a grammar. Not thread-safe; owned by one sequence's sampler state."""

    __slots__ = ("_m", "_vocab", "_bits")

    def __init__(self, matcher: llguidance.LLMatcher, vocab_size: int) -> None:
        self._m = matcher
        self._vocab = vocab_size
        self._bits = llg_np.allocate_token_bitmask(1, vocab_size)  # (1, ceil(V/32)) int32

    def fill_bitmask(self, out: np.ndarray) -> None:
        """Write the allowed-token bitmask (bit i of word i // 32 = token i) into `out`: (1, W) int32."""
        llg_np.fill_next_token_bitmask(self._m, out, 0)

    def allowed_mask(self, vocab_size: int) -> np.ndarray:
        """(vocab_size,) bool: True where the next token may be that id. Ids the tokenizer does not
        have (a model's padded vocabulary) are never allowed."""
        self.fill_bitmask(self._bits)
        bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")  # (32 * W,) uint8 0/1
        mask = np.zeros(vocab_size, dtype=bool)  # (V,)
        n = min(vocab_size, self._vocab)
        mask[:n] = bits[:n].view(bool)
        return mask

    def mask(self, out: np.ndarray) -> None:
        """Fill `out` with the allowed set: a (V,) bool array, or an int32 bitmask of shape (W,) or (1, W)."""
        if out.dtype == np.bool_:
            out[:] = self.allowed_mask(out.shape[0])
        elif out.dtype == np.int32:
            self.fill_bitmask(out.reshape(1, -1))
        else:
            raise TypeError(f"mask target must be bool or int32, not {out.dtype}")  # caller bug

    def consume(self, token_id: int) -> bool:
        """Advance by the sampled token; False (and the matcher is in error) if it was not allowed."""
        return bool(self._m.consume_token(int(token_id)))

    def rollback(self, num_tokens: int) -> bool:
        return bool(self._m.rollback(num_tokens))

    def is_accepting(self) -> bool:
        """The text so far is a complete match (EOS may come now)."""
        return bool(self._m.is_accepting())

    def is_stopped(self) -> bool:
        """Nothing but EOS can follow (the grammar is finished, or the matcher is in error)."""
        return bool(self._m.is_stopped())

    def is_error(self) -> bool:
        return bool(self._m.is_error())

    @property
    def error(self) -> str:
        return self._m.get_error()


# ---------------------------------------------------------------- compiling
def ll_tokenizer_for(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance's view of `tokenizer`, built once per Tokenizer (about a second for 150k tokens)."""
    with _lock:
        ll = _ll_tokenizers.get(tokenizer)
    if ll is not None:
        return ll
    eos = sorted(tokenizer.eos_ids) or None
    try:
        ll = llguidance.LLTokenizer(tokenizer.backend.to_str(), n_vocab=tokenizer.vocab_size, eos_token=eos)
    except Exception:  # an HF tokenizer llguidance cannot read: give it the raw token bytes instead
        ll = byte_ll_tokenizer(tokenizer)
    with _lock:
        return _ll_tokenizers.setdefault(tokenizer, ll)


def byte_ll_tokenizer(tokenizer: Tokenizer) -> llguidance.LLTokenizer:
    """llguidance tokenizer from modelc's token bytes and special ids (encode via `tokenizers`)."""

    class _Source:
        eos_token_id = min(tokenizer.eos_ids) if tokenizer.eos_ids else 0
        bos_token_id = tokenizer.bos_id
        tokens = tokenizer.all_token_bytes()
        special_token_ids = sorted(tokenizer.special_ids)

        def __call__(self, text: str | bytes) -> list[int]:
            if isinstance(text, bytes):
                text = text.decode("utf-8", errors="replace")
            return tokenizer.encode(text, add_special=False)

    eos = sorted(tokenizer.eos_ids) or None
    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Source()), n_vocab=tokenizer.vocab_size, eos_token=eos)


def compile_constraint(constraint: Constraint, tokenizer: Tokenizer) -> CompiledGrammar:
    """Validate and compile `constraint` for `tokenizer`; InvalidRequestError says what is wrong."""
    if constraint.kind not in KINDS:
        raise InvalidRequestError(f"unknown constraint kind {constraint.kind!r}; expected one of {', '.join(KINDS)}")
    ll = ll_tokenizer_for(tokenizer)
    key = (constraint.kind, constraint.source)
    with _lock:
        cache = _grammars.setdefault(tokenizer, OrderedDict())
        grammar = cache.get(key)
        if grammar is not None:
            cache.move_to_end(key)
    if grammar is None:
        grammar = _grammar_text(constraint)
        is_error, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, ll)
        if is_error:
            raise InvalidRequestError(f"invalid {constraint.kind}: {_one_line(messages[0] if messages else '')}")
        start = CompiledGrammar(constraint.kind, grammar, ll, tokenizer.vocab_size).matcher()
        start.allowed_mask(tokenizer.vocab_size)  # the first mask: where a grammar matching nothing shows it
        if start.is_error():  # valid, yet matching nothing: {"$ref": "#"} (the sequence would end at once, empty)
            # (llguidance's own message is a parser-state dump)
            raise InvalidRequestError(f"invalid {constraint.kind}: no output satisfies it")
        with _lock:
            cache[key] = grammar
            while len(cache) > _CACHE_SIZE:
                cache.popitem(last=False)
    return CompiledGrammar(constraint.kind, grammar, ll, tokenizer.vocab_size)


def _grammar_text(c: Constraint) -> str:
    try:
        if c.kind == "json_schema":
            return llguidance.LLMatcher.grammar_from_json_schema(_json(c.source, "JSON schema"), defaults=JSON_DEFAULTS)
        if c.kind == "json_object":
            return llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=JSON_DEFAULTS)
        if c.kind == "regex":
            return llguidance.LLMatcher.grammar_from_regex(c.source)
        if c.kind == "lark":
            return llguidance.LLMatcher.grammar_from_lark(c.source)
        if c.kind == "gbnf":
            return llguidance.grammar_from("gbnf", c.source)
        schema = tool_call_schema(_json(c.source, "tools list"))
        return llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=JSON_DEFAULTS)
    except InvalidRequestError:
        raise
    except (ValueError, TypeError, KeyError) as exc:  # llguidance/GBNF conversion errors
        raise InvalidRequestError(f"invalid {c.kind}: {_one_line(str(exc))}") from exc


def tool_call_schema(spec: Any) -> dict[str, Any]:
    """The JSON schema of a valid call: {"name": <one tool name>, "arguments": <its parameters>}.

    `spec` is the OpenAI tools list, or {"tools": [...], "parallel": true} for a non-empty
    JSON array of calls.
    """
    parallel = False
    tools = spec
    if isinstance(spec, Mapping):
        tools, parallel = spec.get("tools"), bool(spec.get("parallel", False))
    if not isinstance(tools, list) or not tools:
        raise InvalidRequestError("tool_call constraint needs a non-empty list of tools", param="tools")
    variants = []
    for i, tool in enumerate(tools):
        fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidRequestError(f"tools[{i}] must have a function with a name", param="tools")
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        if not isinstance(params, Mapping):
            raise InvalidRequestError(f"tools[{i}].function.parameters must be a JSON schema object", param="tools")
        variants.append(
            {
                "type": "object",
                "properties": {"name": {"const": fn["name"]}, "arguments": dict(params)},
                "required": ["name", "arguments"],
                "additionalProperties": False,
            }
        )
    call = variants[0] if len(variants) == 1 else {"anyOf": variants}
    return {"type": "array", "items": call, "minItems": 1} if parallel else call


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise InvalidRequestError(f"{what} is not valid JSON: {exc}") from exc


def _one_line(msg: str) -> str:
    return " ".join(msg.split())[:400] or "rejected by the grammar compiler"

"""Constrained decoding: random sampling under llguidance masks always yields valid text; masks keep
special tokens out and allow EOS exactly when the grammar accepts."""

from __future__ import annotations

import importlib.util
import json
import pathlib

import jsonschema
import numpy as np
import pytest
import regex

from modelc.engine.constraint import (
    Matcher,
    byte_ll_tokenizer,
    compile_constraint,
    ll_tokenizer_for,
    tool_call_schema,
)
from modelc.engine.sampler import SeqSamplerState, sample
from modelc.errors import InvalidRequestError
from modelc.request import Constraint, SamplingParams
from modelc.tokenizer import Tokenizer


def _load_tiny():
    path = pathlib.Path(__file__).resolve().parents[1] / "tokenizer" / "tiny_tokenizers.py"
    spec = importlib.util.spec_from_file_location("modelc_test_tiny_tokenizers", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tiny = _load_tiny()

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        "ok": {"type": "boolean"},
        "kind": {"enum": ["cat", "dog", "llama 🦙"]},
    },
    "required": ["name", "age", "kind"],
    "additionalProperties": False,
}
REGEXES = [
    r"[a-z]{2,6}@[a-z]{2,5}\.(com|org)",
    r"\d{3}-\d{4}",
    r"(yes|no|maybe)!?",
    r"[A-Z][a-z]{0,5}( [A-Z][a-z]{0,5}){0,2}",
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 10}, "unit": {"enum": ["c", "f"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "now", "parameters": {"type": "object", "properties": {}, "additionalProperties": False}},
    },
]


@pytest.fixture(scope="module", params=["byte_level", "spm"])
def tok(request) -> Tokenizer:
    if request.param == "byte_level":
        return Tokenizer.from_json(tiny.byte_level_json(), tiny.BYTE_LEVEL_SPECIAL)
    return Tokenizer.from_json(tiny.spm_json(), tiny.SPM_SPECIAL)


@pytest.fixture(scope="module")
def llama_tok() -> Tokenizer:
    path = pathlib.Path(__file__).resolve().parents[3] / "shared/fixtures/models/tiny-llama/hf/tokenizer.json"
    if not path.is_file():
        pytest.skip("../shared/fixtures is not present")
    return Tokenizer.from_json(path.read_text(), {"bos_token_id": 1, "eos_token_ids": [2]})


@pytest.fixture(scope="module")
def gpt2_tok() -> Tokenizer:
    path = pathlib.Path(__file__).resolve().parents[3] / "shared/fixtures/tokenizer/ggml-vocab-gpt-2.gguf"
    if not path.is_file():
        pytest.skip("../shared/fixtures is not present")
    return Tokenizer.from_json(tiny.gpt2_json_from_gguf(path), tiny.GPT2_SPECIAL)


def walk(tok: Tokenizer, constraint: Constraint, seed: int, *, max_steps: int = 300, pad: int = 5) -> str:
    """Sample with random logits under the constraint until EOS; check the mask at every step."""
    matcher = compile_constraint(constraint, tok).matcher()
    params = SamplingParams(temperature=1.0, seed=seed)
    state = SeqSamplerState.create(params, matcher=matcher)
    rng = np.random.default_rng(seed)
    vocab = tok.vocab_size + pad  # the model's vocabulary may be padded beyond the tokenizer's
    specials = np.array(sorted(tok.special_ids - tok.eos_ids), dtype=np.int64)
    eos = np.array(sorted(tok.eos_ids), dtype=np.int64)
    out: list[int] = []
    for step in range(max_steps):
        mask = matcher.allowed_mask(vocab)
        assert not mask[tok.vocab_size :].any()
        assert not mask[specials].any(), "a special token is allowed inside constrained text"
        assert mask[eos].all() == matcher.is_accepting() and mask[eos].any() == matcher.is_accepting()
        logits = (rng.normal(size=(1, vocab)) * 3).astype(np.float32)
        tid = int(sample(logits, [state], [params], [step], tok.eos_ids).token_ids[0])
        assert mask[tid]
        if tid in tok.eos_ids:
            return tok.decode(out)
        assert state.append(tid), matcher.error
        out.append(tid)
    raise AssertionError(f"no EOS after {max_steps} steps: {tok.decode(out)!r}")


def check_all_kinds(tok: Tokenizer, trials: int) -> None:
    for seed in range(trials):
        text = walk(tok, Constraint("json_schema", json.dumps(PERSON)), seed)
        jsonschema.validate(json.loads(text), PERSON)
    for seed, pattern in enumerate(REGEXES * max(1, trials // 4)):
        text = walk(tok, Constraint("regex", pattern), seed)
        assert regex.fullmatch(pattern, text), (pattern, text)
    for seed in range(trials):
        call = json.loads(walk(tok, Constraint("tool_call", json.dumps(TOOLS)), seed))
        jsonschema.validate(call, tool_call_schema(TOOLS))
        assert call["name"] in {"get_weather", "now"}


def test_tiny_tokenizers_all_kinds(tok):
    check_all_kinds(tok, 8)


def test_tiny_llama_tokenizer(llama_tok):
    check_all_kinds(llama_tok, 8)


def test_gpt2_tokenizer(gpt2_tok):
    check_all_kinds(gpt2_tok, 8)


def test_json_object_lark_and_gbnf(tok):
    for seed in range(6):
        obj = walk(tok, Constraint("json_object"), seed, max_steps=2000)
        assert isinstance(json.loads(obj), dict)
    lark = 'start: "(" num ("," num)* ")"\nnum: /[0-9]{1,3}/'
    for seed in range(6):
        text = walk(tok, Constraint("lark", lark), seed, max_steps=2000)
        assert regex.fullmatch(r"\(\d{1,3}(,\d{1,3})*\)", text), text
    gbnf = 'root ::= "color: " ("red" | "green" | "blue")'
    for seed in range(4):
        assert walk(tok, Constraint("gbnf", gbnf), seed) in {"color: red", "color: green", "color: blue"}


def test_parallel_tool_calls(tok):
    spec = json.dumps({"tools": TOOLS, "parallel": True})
    for seed in range(6):
        calls = json.loads(walk(tok, Constraint("tool_call", spec), seed, max_steps=600))
        assert isinstance(calls, list) and calls
        jsonschema.validate(calls, tool_call_schema({"tools": TOOLS, "parallel": True}))


def test_byte_tokenizer_fallback_path(tok):
    """The path for tokenizers llguidance cannot read from tokenizer.json: raw token bytes."""
    compiled = compile_constraint(Constraint("regex", r"[a-c]{3}"), tok)
    ll = byte_ll_tokenizer(tok)
    m = Matcher(__import__("llguidance").LLMatcher(ll, compiled.grammar, log_level=0), tok.vocab_size)
    allowed = np.flatnonzero(m.allowed_mask(tok.vocab_size))
    assert allowed.size and all(set(tok.token_bytes(int(i))) <= set(b"abc") for i in allowed)
    assert not set(allowed.tolist()) & tok.special_ids


def test_ll_tokenizer_built_once(tok):
    assert ll_tokenizer_for(tok) is ll_tokenizer_for(tok)


def test_matcher_state_after_finish(tok):
    m = compile_constraint(Constraint("regex", "ab"), tok).matcher()
    by_bytes = {}
    for i in range(tok.vocab_size):
        by_bytes.setdefault(tok.token_bytes(i), i)
    assert not m.is_accepting()
    assert m.consume(by_bytes[b"a"]) and not m.is_accepting()
    assert m.consume(by_bytes[b"b"])
    assert m.is_accepting() and m.is_stopped()
    assert not m.consume(by_bytes[b"x"]) and m.is_error() and m.error


@pytest.mark.parametrize(
    ("constraint", "message"),
    [
        (Constraint("regex", "(ab"), "invalid regex"),
        (Constraint("json_schema", "{"), "not valid JSON"),
        (Constraint("json_schema", '{"type": "foo"}'), "invalid json_schema"),
        (Constraint("lark", "start: foo"), "invalid lark"),
        (Constraint("gbnf", "root ::= foo"), "invalid gbnf"),
        (Constraint("tool_call", "[]"), "non-empty list of tools"),
        (Constraint("tool_call", '[{"type": "function", "function": {}}]'), "must have a function with a name"),
        (Constraint("sql"), "unknown constraint kind"),
        # valid, yet matching nothing: the sequence ended at once with empty content and finish_reason "stop"
        (Constraint("json_schema", '{"$ref": "#"}'), "invalid json_schema: no output satisfies it"),
        (Constraint("json_schema", '{"anyOf": [{"$ref": "#"}]}'), "invalid json_schema"),
    ],
)
def test_invalid_constraints(tok, constraint, message):
    with pytest.raises(InvalidRequestError, match=message) as err:
        compile_constraint(constraint, tok)
    assert "\n" not in str(err.value)


def test_mask_into_bool_and_bitmask(tok):
    m = compile_constraint(Constraint("regex", r"[a-c]{2}"), tok).matcher()
    want = m.allowed_mask(tok.vocab_size + 3)
    as_bool = np.ones(tok.vocab_size + 3, dtype=bool)
    m.mask(as_bool)
    assert np.array_equal(as_bool, want)
    words = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)
    m.mask(words)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[: tok.vocab_size].astype(bool)
    assert np.array_equal(bits, want[: tok.vocab_size]) and bits.any()


def test_token_bytes_agree_with_llguidance(tok):
    """modelc's token_bytes and llguidance's reading of tokenizer.json agree (llguidance reserves 0xFF)."""
    ll = ll_tokenizer_for(tok)
    for i in range(tok.vocab_size):
        if i not in tok.special_ids and tok.token_bytes(i) != b"\xff":
            assert ll.decode_bytes([i]) == tok.token_bytes(i), i

"""modelc.tokenizer.reasoning: reasoning text apart from the answer, whole and streamed in any chunking."""

from __future__ import annotations

import pytest

from modelc.errors import InvalidRequestError
from modelc.tokenizer.reasoning import (
    GRANITE,
    HARMONY,
    THINK,
    ReasoningSplitter,
    check_reasoning_format,
    reasoning_syntax,
    split_reasoning,
    starts_in_reasoning,
)

CASES = [  # (generated text, syntax, prompt opened the reasoning, (reasoning, content))
    ("<think>\nLet me think.\n</think>\n\nThe answer is 4.", THINK, False, ("Let me think.", "The answer is 4.")),
    ("Let me think.\n</think>\n\nThe answer is 4.", THINK, True, ("Let me think.", "The answer is 4.")),
    ("The answer is 4.", THINK, False, (None, "The answer is 4.")),
    ("  indented answer", THINK, False, (None, "  indented answer")),
    ("<think>\n\n</think>\n\nNo thoughts.", THINK, False, (None, "No thoughts.")),
    ("<think>a < b and c</think>answer <b>bold</b>", THINK, False, ("a < b and c", "answer <b>bold</b>")),
    ("<think>\nabc</think><response>Hi there</response>", GRANITE, False, ("abc", "Hi there")),
    (
        "<|channel|>analysis<|message|>User asks. Easy.<|end|><|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
        HARMONY, False, ("User asks. Easy.", "Hello!"),
    ),
    ("<|channel|>final<|message|>Direct.", HARMONY, False, (None, "Direct.")),
    ("<thi", THINK, False, (None, "<thi")),  # a marker that never completes is text
    ("<think>cut short </thi", THINK, False, ("cut short </thi", "")),  # max_tokens inside the reasoning
]  # fmt: skip


def _streamed(text, syntax, opened, n):
    sp = ReasoningSplitter(syntax, in_reasoning=opened)
    parts = [sp.feed(text[i : i + n]) for i in range(0, len(text), n)] + [sp.finish()]
    return "".join(r for r, _ in parts), "".join(c for _, c in parts)


@pytest.mark.parametrize("text,syntax,opened,want", CASES)
def test_split_whole_and_streamed(text, syntax, opened, want):
    assert split_reasoning(text, syntax, in_reasoning=opened) == want
    for n in (1, 2, 3, 5, 8, 1000):  # every chunking gives the same split
        reasoning, content = _streamed(text, syntax, opened, n)
        assert (reasoning.strip() or None, content) == want, n


def test_streamed_deltas_hold_back_only_a_possible_marker():
    sp = ReasoningSplitter(THINK)
    assert sp.feed("<thi") == ("", "")
    assert sp.feed("nk>I am ") == ("I am ", "")
    assert sp.feed("thinking</th") == ("thinking", "")
    assert sp.feed("ink>\n\nDone") == ("", "Done")
    assert sp.feed(" now.") == ("", " now.")
    assert sp.finish() == ("", "")


def test_no_syntax_passes_text_through():
    sp = ReasoningSplitter(None)
    assert sp.feed("<think>x</think>y") == ("", "<think>x</think>y")
    assert split_reasoning("<think>x</think>y", None) == (None, "<think>x</think>y")


def test_syntax_detection_and_prompt_opening():
    assert reasoning_syntax("{%- if enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}") is THINK
    assert reasoning_syntax("Write your thoughts between <think></think> and ... <response></response>") is GRANITE
    assert reasoning_syntax("{{- '<|channel|>analysis<|message|>' }}") is HARMONY
    assert reasoning_syntax("{{ messages }}") is None
    assert reasoning_syntax(None, ["</think>"]) is THINK
    assert starts_in_reasoning(THINK, "<|im_start|>assistant\n<think>\n")
    assert not starts_in_reasoning(THINK, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not starts_in_reasoning(None, "<think>")


def test_reasoning_format_values():
    assert check_reasoning_format(None) == "deepseek"
    assert check_reasoning_format("none") == "none"
    with pytest.raises(InvalidRequestError, match="reasoning_format"):
        check_reasoning_format("yes")


def test_harmony_markers_survive_decoding(fixtures_dir):
    """gpt-oss's channel markers are special tokens: a model whose template is harmony keeps them in its
    generated text (special_tokens keep_special_text, set by the readers), so the analysis splits off."""
    import tokenizers

    from modelc.formats.hf import keep_special_text
    from modelc.tokenizer import IncrementalDecoder, Tokenizer

    template = (fixtures_dir / "templates" / "families" / "openai-gpt-oss-120b.jinja").read_text()
    assert keep_special_text(template) == {"keep_special_text": True} and keep_special_text("{{ x }}") == {}
    raw = tokenizers.Tokenizer.from_file(
        str(fixtures_dir / "models" / "variants" / "gpt-oss" / "hf" / "tokenizer.json")
    )
    raw.add_special_tokens(["<|channel|>", "<|message|>", "<|end|>", "<|start|>"])
    text = "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi!"
    for keep, want in ((True, ("Think.", "Hi!")), (False, (None, "analysisThink.assistantfinalHi!"))):
        tok = Tokenizer.from_json(raw.to_str(), {"keep_special_text": True} if keep else {})
        dec = IncrementalDecoder(tok, [])
        out = "".join(dec.add(i) for i in tok.encode(text, add_special=False))
        assert split_reasoning(out, HARMONY) == want

"""Reasoning text apart from the answer: `<think>...</think>` (Qwen3, DeepSeek-R1, SmolLM3, Granite) and
harmony's analysis channel (gpt-oss), whole or streamed.

`reasoning_syntax(template, vocab)` finds which syntax a model writes (None: it does not reason);
`ReasoningSplitter` takes generated text piece by piece and returns (reasoning, content) deltas,
holding back only what may be the start of a marker; `split_reasoning` does a whole text.
`reasoning_format` follows llama.cpp's server: "none" leaves the thoughts in the content,
"deepseek" (and "auto") moves them to `reasoning_content`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from modelc.errors import InvalidRequestError

REASONING_FORMATS = ("none", "deepseek", "auto")


@dataclass(frozen=True, slots=True)
class ReasoningSyntax:
    """Markers around the reasoning, and what to drop around the answer."""

    name: str  # "think" | "granite" | "harmony"
    start: str  # opens the reasoning
    end: str  # closes it; the answer follows
    answer_starts: tuple[str, ...] = ()  # dropped where the answer opens (Granite's <response>, harmony's header)
    answer_ends: tuple[str, ...] = ()  # dropped from the answer (</response>, <|return|>)


THINK = ReasoningSyntax("think", "<think>", "</think>")
GRANITE = ReasoningSyntax("granite", "<think>", "</think>", ("<response>",), ("</response>",))
HARMONY = ReasoningSyntax(
    "harmony",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    ("<|start|>assistant<|channel|>final<|message|>", "<|channel|>final<|message|>"),
    ("<|return|>", "<|end|>"),
)


def reasoning_syntax(template: str | None, vocab: Iterable[str] = ()) -> ReasoningSyntax | None:
    """The syntax a model with this chat template source (and vocabulary) reasons in, or None."""
    src = template or ""
    if "<|channel|>" in src and "analysis" in src:
        return HARMONY
    if "<think>" in src or "</think>" in src or "enable_thinking" in src:
        return GRANITE if "<response>" in src else THINK
    if "</think>" in set(vocab):
        return THINK
    return None


def check_reasoning_format(value: object, param: str = "reasoning_format") -> str:
    if value is None:
        return "deepseek"
    if value not in REASONING_FORMATS:
        raise InvalidRequestError(f"'{param}' must be one of {', '.join(REASONING_FORMATS)}", param=param)
    return str(value)


def starts_in_reasoning(syntax: ReasoningSyntax | None, prompt: str) -> bool:
    """True when the rendered prompt already opened the reasoning (DeepSeek-R1 style `...<think>\\n`)."""
    return syntax is not None and prompt.rstrip().endswith(syntax.start)


def _held(buf: str, markers: Iterable[str]) -> int:
    """Length of the longest tail of buf that is a proper prefix of a marker (it may yet become one)."""
    best = 0
    for m in markers:
        for k in range(min(len(m) - 1, len(buf)), best, -1):
            if buf.endswith(m[:k]):
                best = k
                break
    return best


class ReasoningSplitter:
    """Incremental split of generated text into (reasoning, content) deltas. Not thread-safe."""

    def __init__(self, syntax: ReasoningSyntax | None, *, in_reasoning: bool = False) -> None:
        self.syntax = syntax
        self._state = "reasoning" if in_reasoning and syntax else "start"  # start | reasoning | lead | answer
        self._buf = ""
        self._thought = False  # the reasoning has closed: whitespace before the answer is dropped

    def feed(self, text: str) -> tuple[str, str]:
        """(reasoning delta, content delta) for the next piece of generated text."""
        if self.syntax is None:
            return "", text
        self._buf += text
        return self._drain(final=False)

    def finish(self) -> tuple[str, str]:
        """The deltas still held back at the end of the generation."""
        if self.syntax is None:
            return "", ""
        return self._drain(final=True)

    def _drain(self, final: bool) -> tuple[str, str]:
        sx = self.syntax
        assert sx is not None
        reasoning, content = [], []
        while True:
            buf = self._buf
            if self._state == "start":  # is the text opening with the reasoning marker?
                stripped = buf.lstrip()
                if stripped.startswith(sx.start):
                    self._buf, self._state = stripped[len(sx.start) :], "reasoning"
                    continue
                if not final and sx.start.startswith(stripped):
                    break  # could still become the opening marker
                self._state = "lead"
                continue
            if self._state == "reasoning":
                i = buf.find(sx.end)
                if i >= 0:
                    reasoning.append(buf[:i])
                    self._buf, self._state, self._thought = buf[i + len(sx.end) :], "lead", True
                    continue
                keep = 0 if final else _held(buf, [sx.end])
                reasoning.append(buf[: len(buf) - keep])
                self._buf = buf[len(buf) - keep :]
                break
            if self._state == "lead":  # whitespace and the answer's opening marker are dropped
                stripped = buf.lstrip()
                opener = next((m for m in sx.answer_starts if stripped.startswith(m)), None)
                if opener is not None:
                    self._buf, self._state = stripped[len(opener) :], "answer"
                    continue
                if not final and (not stripped or any(m.startswith(stripped) for m in sx.answer_starts)):
                    break
                self._buf, self._state = (stripped if self._thought else buf), "answer"
                continue
            out = buf
            for m in sx.answer_ends:
                out = out.replace(m, "")
            keep = 0 if final else _held(out, sx.answer_ends)
            content.append(out[: len(out) - keep])
            self._buf = out[len(out) - keep :]
            break
        return "".join(reasoning), "".join(content)


def split_reasoning(text: str, syntax: ReasoningSyntax | None, *, in_reasoning: bool = False) -> tuple[str | None, str]:
    """(reasoning or None when there was none, content) of a whole generated text."""
    sp = ReasoningSplitter(syntax, in_reasoning=in_reasoning)
    r1, c1 = sp.feed(text)
    r2, c2 = sp.finish()
    reasoning = (r1 + r2).strip()
    return (reasoning or None), c1 + c2

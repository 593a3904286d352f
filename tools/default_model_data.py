"""Training data for the bundled default model: CPython's own stdlib sources as three kinds of rows.

- plain code: a window of the token stream (files joined by <|endoftext|>);
- fill-in-the-middle (context-level FIM, prefix-suffix-middle order as in Bavarian et al. 2022 and
  StarCoder): a window cut at two random token positions into prefix/middle/suffix and laid out
  `<|fim_prefix|>prefix<|fim_suffix|>suffix<|fim_middle|>middle<|endoftext|>`, the layout
  modelc.server.fim builds for /infill and `suffix`;
- chat: a documented function's docstring as the user message and the function as the answer,
  rendered through the chat template the model ships with (CHAT_TEMPLATE, ChatML-shaped).

Every file index i with i % 20 == 0 is held out (as for the first model). Dev-only (needs tokenizers, jinja2).
"""

from __future__ import annotations

import ast
import pathlib
import sysconfig
import textwrap

import numpy as np

EOS = "<|endoftext|>"
FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE = "<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"
NEW_SPECIALS = [FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE, IM_START, IM_END]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def stdlib_files() -> list[pathlib.Path]:
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" not in p.parts)
    return [p for p in files if 200 < p.stat().st_size < 400_000]


def split_files() -> tuple[list[pathlib.Path], list[pathlib.Path]]:
    """(training, held-out): every 20th non-test file is held out, as for the first model; the stdlib's
    own test suites (Lib/test, idle_test, ...: PSF-licensed Python too) only ever train."""
    files = stdlib_files()
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    tests = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and "test" in p.parts)
    tests = [p for p in tests if 200 < p.stat().st_size < 400_000]
    return [f for i, f in enumerate(files) if i % 20] + tests, files[::20]


def read_texts(files: list[pathlib.Path]) -> list[str]:
    out = []
    for p in files:
        try:
            out.append(p.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
    return out


def render_chat(messages: list[dict[str, str]], add_generation_prompt: bool = False) -> str:
    import jinja2

    return jinja2.Template(CHAT_TEMPLATE, keep_trailing_newline=True).render(
        messages=messages, add_generation_prompt=add_generation_prompt
    )


def documented_functions(text: str, max_lines: int = 40) -> list[tuple[str, str]]:
    """(docstring, dedented function source) for each documented function of at most max_lines lines."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or len(node.body) < 2:
            continue
        doc = ast.get_docstring(node)
        first, last = node.lineno - 1, node.end_lineno or node.lineno
        if not doc or len(doc) < 20 or last - first > max_lines:
            continue
        src = textwrap.dedent("".join(lines[first:last]))  # whole lines: the def line's indentation dedents
        out.append((doc.strip(), src.rstrip() + "\n"))
    return out


def chat_text(doc: str, code: str) -> str:
    return render_chat([{"role": "user", "content": doc}, {"role": "assistant", "content": code}])


def encode_stream(tok, texts: list[str], eos_id: int) -> tuple[np.ndarray, np.ndarray]:
    """All texts joined, each followed by EOS; and the start offset of each text."""
    parts = [np.array(e.ids + [eos_id], dtype=np.int64) for e in tok.encode_batch(texts)]
    starts = np.cumsum([0] + [len(p) for p in parts[:-1]]).astype(np.int64)
    return np.concatenate(parts), starts


class Batches:
    """Rows of seq + 1 tokens: plain windows, FIM windows (fim_rate of code rows), chat samples (chat_rate)."""

    def __init__(self, tok, arrays: dict[str, np.ndarray], seq: int, fim_rate: float, chat_rate: float) -> None:
        self.seq, self.fim_rate, self.chat_rate = seq, fim_rate, chat_rate
        self.eos = tok.token_to_id(EOS)
        self.pre, self.suf, self.mid = (tok.token_to_id(t) for t in (FIM_PREFIX, FIM_SUFFIX, FIM_MIDDLE))
        self.code, self.chat, self.chat_starts = arrays["code"], arrays["chat"], arrays["chat_starts"]
        self.n_chat = len(self.chat_starts)

    @staticmethod
    def arrays(tok, texts: list[str]) -> dict[str, np.ndarray]:
        """The token streams Batches samples from (cacheable with np.savez)."""
        eos = tok.token_to_id(EOS)
        code, _ = encode_stream(tok, texts, eos)
        pairs = [p for t in texts for p in documented_functions(t)]
        chat, starts = encode_stream(tok, [chat_text(d, c) for d, c in pairs], eos)
        return {"code": code, "chat": chat, "chat_starts": starts}

    def row(self, rng: np.random.Generator) -> np.ndarray:
        n = self.seq + 1
        if rng.random() < self.chat_rate:
            s = int(self.chat_starts[rng.integers(0, len(self.chat_starts))])
            s = min(s, len(self.chat) - n)
            return self.chat[s : s + n]
        if rng.random() < self.fim_rate:
            # half the FIM rows start with <|endoftext|>: modelc.server.fim puts the BOS id (here
            # <|endoftext|>) first whenever the model has one; llama.cpp only when add_bos_token says so
            lead = np.array([self.eos] if rng.random() < 0.5 else [], dtype=np.int64)
            s = int(rng.integers(0, len(self.code) - n))
            w = self.code[s : s + n - 4 - len(lead)]
            if self.eos not in w:
                i, j = sorted(rng.integers(0, len(w) + 1, size=2))
                return np.concatenate((lead, [self.pre], w[:i], [self.suf], w[j:], [self.mid], w[i:j], [self.eos]))
        s = int(rng.integers(0, len(self.code) - n))
        return self.code[s : s + n]

    def batch(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.stack([self.row(rng) for _ in range(size)])

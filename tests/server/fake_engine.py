"""FakeEngine: the AsyncEngine interface (docs/architecture.md), deterministic and instant, so the
server tests run without a model. Byte-level tokenizer: token id = byte + 3 (0 bos, 1 eos, 2 pad).

It yields modelc.request's own TokenEvent and Finished, so a change there that the server does not
follow fails the server tests. Output: greedy (temperature 0) continues a fixed text from an offset derived from the prompt; with
temperature > 0 the offset comes from a numpy Generator seeded by params.seed. A constraint makes it
emit `constraint_replies[kind]` instead. Stop strings are cut on text as the RequestActor does.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import anyio
import numpy as np

from modelc.config import EngineConfig
from modelc.engine.adapter_table import AdapterTable
from modelc.errors import OverloadedError
from modelc.request import Finished, GenerateEvent, SamplingParams, TokenEvent

TEXT = "The quick brown fox jumps over the lazy dog. "
BOS, EOS, PAD, OFFSET = 0, 1, 2, 3


class ByteTokenizer:
    vocab_size = 256 + OFFSET
    bos_id = BOS
    eos_ids = frozenset({EOS})

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        ids = [b + OFFSET for b in text.encode()]
        return [BOS, *ids] if add_special else ids

    def decode(self, ids: list[int], skip_special: bool = True) -> str:
        return bytes(i - OFFSET for i in ids if i >= OFFSET).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return bytes([token_id - OFFSET]) if token_id >= OFFSET else {BOS: b"<s>", EOS: b"</s>"}.get(token_id, b"")

    def all_token_bytes(self) -> list[bytes]:
        return [self.token_bytes(i) for i in range(self.vocab_size)]

    def token_to_id(self, token: str) -> int | None:
        raw = token.encode()
        specials = {b"<s>": BOS, b"</s>": EOS}
        return raw[0] + OFFSET if len(raw) == 1 else specials.get(raw)


@dataclass
class FakeTemplate:
    """A ChatML-like template; `takes_tools` decides whether `source` mentions `tools`."""

    takes_tools: bool = False
    bos_token: str = ""

    @property
    def source(self) -> str:
        return "{% for m in messages %}...{% endfor %}" + (" {{ tools }}" if self.takes_tools else "")

    def render(
        self, messages: list[dict], tools: list | None = None, add_generation_prompt: bool = True, **kw: Any
    ) -> str:
        out = "".join(f"<|{m['role']}|>{m.get('content') or ''}\n" for m in messages)
        if tools:
            out = f"<|tools|>{[t['function']['name'] for t in tools]}\n" + out
        return out + ("<|assistant|>" if add_generation_prompt else "")


@dataclass
class FakeEngine:
    name: str = "fake-model"
    architecture: str = "llama"
    serves: ClassVar[frozenset] = frozenset({"generate", "embed"})
    delay_s: float = 0.0  # per token
    max_waiting: int | None = None  # more concurrent generate() calls -> OverloadedError
    constraint_replies: dict[str, str] = field(
        default_factory=lambda: {"json_object": '{"answer": 42}', "json_schema": '{"answer": 42}'}
    )
    reply: str | None = None  # fixed output text (unconstrained)
    fail_after_tokens: int | None = None  # raise mid-generation (engine crash)
    embed_dim: int = 8
    chat_template: Any = field(default_factory=FakeTemplate)
    tokenizer: ByteTokenizer = field(default_factory=ByteTokenizer)
    config: EngineConfig | None = None  # tests give one for a context length or a queue capacity
    source: Any = None
    # observations for tests
    calls: list[tuple[list[int], Any]] = field(default_factory=list)
    aborted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)
    adapter_rows: AdapterTable = field(default_factory=AdapterTable)  # the engines' own bookkeeping (stable ids)
    num_active: int = 0
    num_slots: int = 4  # slots() reports this many (as an engine's max_num_seqs)
    active: dict[int, list] = field(default_factory=dict)  # generate() in flight: task -> [prompt len, params, decoded]

    @property
    def context_length(self) -> int | None:
        """As AsyncEngine's: the scheduler's max_model_len (tests set `config` to give one)."""
        return self.config.scheduler.max_model_len if self.config is not None else None

    @property
    def adapters(self) -> list[str]:
        return self.adapter_rows.names

    @property
    def loaded_adapters(self) -> dict[str, tuple[str, float]]:
        """name -> (path, alpha) of each loaded adapter."""
        return {r.name: (r.path, r.alpha) for r in self.adapter_rows.rows()}

    @property
    def global_scales(self) -> dict[str, float]:
        return self.adapter_rows.global_scales

    def output_text(self, prompt: list[int], params: SamplingParams) -> str:
        if params.constraint is not None and params.constraint.kind in self.constraint_replies:
            return self.constraint_replies[params.constraint.kind]
        if self.reply is not None:
            return self.reply
        if params.temperature == 0.0:
            start = int(hashlib.sha256(bytes(str(prompt), "utf8")).hexdigest(), 16) % len(TEXT)
        else:
            # As the real sampler: any integer seed (OpenAI allows negative ones) maps to a uint64.
            seed = None if params.seed is None else params.seed % 2**64
            start = int(np.random.default_rng(seed).integers(len(TEXT)))
        return (TEXT[start:] + TEXT + TEXT) * 4

    async def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[GenerateEvent]:
        if self.max_waiting is not None and self.num_active >= self.max_waiting:
            raise OverloadedError("engine queue is full", retry_after_s=2)
        self.calls.append((list(prompt_token_ids), params))
        self.num_active += 1
        task = len(self.calls)
        self.active[task] = [len(prompt_token_ids), params, 0]
        done = False
        try:
            text = self.output_text(prompt_token_ids, params)
            ends = params.constraint is not None or self.reply is not None  # EOS after the text
            n_max = params.max_tokens if not ends or params.ignore_eos else min(params.max_tokens, len(text))
            n_max = max(n_max, min(params.min_tokens, params.max_tokens))
            out = (text * (n_max // len(text) + 1))[:n_max]
            reason = "length" if n_max == params.max_tokens else "stop"
            cut = _first_stop(out, params.stop)  # as the RequestActor: stop text never shown
            if cut is not None:
                out, reason = out[:cut], "stop"
            for n, ch in enumerate(out, start=1):
                await anyio.sleep(self.delay_s)
                if self.fail_after_tokens is not None and n > self.fail_after_tokens:
                    raise RuntimeError("injected engine failure")
                lp = -0.25 * (n % 4) - 0.01 * n
                tops = tuple((ord(ch) + OFFSET + j, lp - j) for j in range(params.top_logprobs))
                self.active[task][2] = n
                yield TokenEvent(ord(ch) + OFFSET, ch, lp if params.logprobs else None, tops if params.logprobs else ())
            await anyio.sleep(0)
            done = True
            self.finished.append(request_id or "")
            yield Finished(reason, len(prompt_token_ids), len(out), queue_time_s=0.002)
        finally:
            self.num_active -= 1
            del self.active[task]
            if not done:
                self.aborted.append(request_id or "")

    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray:
        """Unit vectors; with normalize=False the same vectors at a length of 1 + len(ids) (a raw pooled vector)."""
        out = np.zeros((len(token_id_lists), self.embed_dim), np.float32)
        for i, ids in enumerate(token_id_lists):
            rng = np.random.default_rng(sum(ids) + len(ids))
            v = rng.standard_normal(self.embed_dim).astype(np.float32)
            out[i] = v / np.linalg.norm(v) * (1 if normalize else 1 + len(ids))
        return out

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> dict:
        self.adapter_rows.loaded(name, path, alpha, global_)
        return {"applied": 4, "skipped": 0}

    async def unload_adapter(self, name: str) -> None:
        from modelc.errors import NotFoundError

        if name not in self.loaded_adapters:
            raise NotFoundError(f"no LoRA adapter named {name!r} is loaded")
        self.adapter_rows.unloaded(name)

    async def scale_adapters(self, scales: dict[str, float]) -> None:
        from modelc.errors import NotFoundError

        for name in scales:
            if name not in self.loaded_adapters:
                raise NotFoundError(f"LoRA adapter {name!r} is not loaded")
        self.adapter_rows.scaled(scales)

    def adapter_table(self) -> list[tuple[int, str, str, float]]:
        return self.adapter_rows.describe()

    async def slots(self) -> list[Any] | None:
        from modelc.scheduler.slots import SlotState

        n_ctx = self.context_length or 2048
        out = [SlotState(i, 0, n_ctx) for i in range(self.num_slots)]
        for i, (task, (n_prompt, params, n_out)) in enumerate(self.active.items()):
            out[i] = SlotState(i, 0, n_ctx, task, params, n_prompt, 1, n_prompt + n_out, n_out)
        return out

    def stats(self) -> dict:
        return {
            "running": self.num_active,
            "waiting": 0,
            "kv_blocks_used": 3,
            "kv_blocks_total": 64,
            "prefix_queries": 10,
            "prefix_hits": 4,
            "preemptions": 0,
        }


def _first_stop(text: str, stops: tuple[str, ...]) -> int | None:
    hits = [text.find(s) for s in stops if s in text]
    return min(hits) if hits else None


class InferEngine(FakeEngine):
    """A fake MLP engine with the `infer` capability (doubles its input)."""

    serves: ClassVar[frozenset] = frozenset({"generate", "embed", "infer"})

    async def infer(self, payload: dict) -> dict:
        if "inputs" in payload:
            return {"outputs": [[2 * x for x in row] for row in payload["inputs"]]}
        return {"output": [2 * x for x in payload["input"]]}

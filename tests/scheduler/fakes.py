"""Test factories for the scheduler and actors: make_scheduler, make_sequence, fake_result, FakeRunner.

FakeRunner stands in for modelc.engine.runner.Runner. It keeps a paged "KV cache" of token ids,
writes each chunk's tokens to the slots its block table names, and samples the next token from a
hash of the context it READS BACK through the block table (prompt-lookup drafts are verified: each
accepted while it equals the token sampled at its place). So a wrong block table, a bad prefix
hit or a lost page changes the output, and "equal to the run alone" tests mean something.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from modelc.cache.block_pool import BlockPool
from modelc.config import SchedulerConfig
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, BatchResult, SampledToken
from modelc.scheduler.scheduler import Scheduler
from modelc.scheduler.sequence import Sequence

BLOCK = 16
GREEDY = SamplingParams(temperature=0.0, max_tokens=8)


def make_scheduler(num_blocks: int = 64, **cfg) -> Scheduler:
    return Scheduler(SchedulerConfig(**cfg), BlockPool(num_blocks, BLOCK), debug=True)


def make_sequence(seq_id: int, prompt_len: int = 20, *, start: int = 0, **params) -> Sequence:
    p = SamplingParams(**{"temperature": 0.0, "max_tokens": 8, **params})
    return Sequence(seq_id, [(start + i) % 997 + 3 for i in range(prompt_len)], p)


def next_token(context: np.ndarray, vocab_size: int = 1000, salt: str = "") -> int:
    """The fake model: a token from a hash of the whole context (and the adapter)."""
    return zlib.crc32(np.asarray(context, dtype=np.int64).tobytes() + salt.encode()) % (vocab_size - 3) + 3


def fake_result(plan: BatchPlan, token_fn: Callable[[int], int] | None = None, **token_kw) -> BatchResult:
    """A result sampling token_fn(seq_id) (default seq_id + 100) for every chunk that samples."""
    fn = token_fn or (lambda seq_id: seq_id + 100)
    toks = tuple(SampledToken(c.seq_id, fn(c.seq_id), -0.5, **token_kw) for c in plan.chunks if c.sample)
    return BatchResult(plan.step_id, toks)


class FakeRunner:
    """Deterministic runner over a checked paged token store. fail_steps: execute() call numbers
    (0-based, counted per runner) that raise; gate: an Event each execute waits on (tests)."""

    def __init__(
        self,
        num_kv_blocks: int = 256,
        *,
        vocab_size: int = 1000,
        fail_calls: tuple[int, ...] = (),
        gate: threading.Event | None = None,
    ) -> None:
        self.num_kv_blocks = num_kv_blocks
        self.vocab_size = vocab_size
        self.kv = np.full(num_kv_blocks * BLOCK, -1, dtype=np.int64)  # (P * Z,) token id per slot
        self.states: set[int] = set()
        self.last: dict[int, int] = {}  # seq id -> the token sampled last (fills a placeholder chunk)
        self.adapters: dict[str, float] = {}
        self.fail_calls = set(fail_calls)
        self.gate = gate
        self.num_calls = 0
        self.max_batch_tokens_seen = 0

    def _slots(self, block_table: np.ndarray, start: int, end: int) -> np.ndarray:
        pos = np.arange(start, end)
        assert len(block_table) * BLOCK >= end, "block table too short"
        return block_table[pos // BLOCK].astype(np.int64) * BLOCK + pos % BLOCK

    def execute(self, plan: BatchPlan) -> BatchResult:
        call, self.num_calls = self.num_calls, self.num_calls + 1
        if self.gate is not None:
            self.gate.wait(10)
        if call in self.fail_calls:
            raise RuntimeError(f"injected fault in call {call}")
        self.max_batch_tokens_seen = max(self.max_batch_tokens_seen, plan.num_tokens)
        for seq_id in plan.freed_seq_ids:
            self.states.remove(seq_id)
            self.last.pop(seq_id, None)
        toks = []
        for c in plan.chunks:
            if c.is_new:
                assert c.seq_id not in self.states, f"is_new twice for {c.seq_id}"
                self.states.add(c.seq_id)
            assert c.seq_id in self.states, f"no state for {c.seq_id}"
            end = c.start_pos + len(c.token_ids)
            ids = np.array([self.last[c.seq_id]]) if c.placeholder else c.token_ids
            assert (ids >= 0).all(), "a placeholder token reached the KV"
            self.kv[self._slots(c.block_table, c.start_pos, end)] = ids
            if c.sample:  # one token; with drafts, the accepted ones (each the token sampled at its place) + 1
                salt = c.params.adapter or ""
                for i in range(c.num_draft + 1):
                    context = self.kv[self._slots(c.block_table, 0, end - c.num_draft + i)]
                    assert (context >= 0).all(), "read an unwritten KV slot"
                    self.last[c.seq_id] = next_token(context, self.vocab_size, salt)
                    toks.append(SampledToken(c.seq_id, self.last[c.seq_id], -1.0))
                    if i < c.num_draft and ids[len(ids) - c.num_draft + i] != self.last[c.seq_id]:
                        break  # the draft is rejected: its KV slots past here are rolled back
        return BatchResult(plan.step_id, tuple(toks))

    def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray:
        out = np.stack([np.sin(np.arange(8) + next_token(np.array(ids))) for ids in token_id_lists])  # (S, 8)
        return (out / np.linalg.norm(out, axis=1, keepdims=True) if normalize else out).astype(np.float32)

    def load_adapter(self, name: str, path: str, alpha: float = 1.0, *, global_: bool = False) -> None:
        if path == "missing":
            raise FileNotFoundError(path)
        self.adapters[name] = alpha

    def unload_adapter(self, name: str) -> None:
        del self.adapters[name]

    def scale_adapters(self, scales: dict[str, float]) -> None:
        missing = [n for n in scales if n not in self.adapters]
        if missing:
            raise KeyError(missing[0])
        self.global_scales = {n: s for n, s in scales.items() if s}


def greedy_alone(prompt: list[int], max_tokens: int, vocab_size: int = 1000, salt: str = "") -> list[int]:
    """What FakeRunner generates for one prompt with nothing else running (no EOS)."""
    ctx = list(prompt)
    for _ in range(max_tokens):
        ctx.append(next_token(np.array(ctx), vocab_size, salt))
    return ctx[len(prompt) :]


def byte_tokenizer_json() -> str:
    """tokenizer.json of a byte-level BPE with no merges: ids 0-2 are <s> </s> <pad>, id b + 3 is byte b."""
    import json

    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()  # the 256 printable stand-ins, one per byte
    byte_char = {b: c for b, c in enumerate(sorted(alphabet, key=_byte_of))}
    vocab = {"<s>": 0, "</s>": 1, "<pad>": 2} | {byte_char[b]: b + 3 for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<s>", "</s>", "<pad>"])
    return json.dumps(json.loads(tok.to_str()))


def _byte_of(ch: str) -> int:
    """GPT-2's bytes_to_unicode inverse for one character."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(cs, bs, strict=True))[ord(ch)]


@dataclass
class FakeSource:
    """The model-source attributes AsyncEngine reads (no tensors: the FakeRunner needs none)."""

    name: str = "fake"
    architecture: str = "llama"
    config: dict = field(default_factory=lambda: {"max_position_embeddings": 4096})
    tokenizer_json: str | None = None
    chat_template: str | None = None
    special_tokens: dict = field(default_factory=lambda: {"bos_token_id": 0, "eos_token_ids": [1]})

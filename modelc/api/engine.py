"""Engine: the synchronous Python API (load, generate, stream, chat, tokenize, logits, embed).

Drives a Runner directly with single-sequence BatchPlans: no actors, no scheduler, one
request at a time. Stop rules mirror the scheduler's (EOS/EOT, stop ids, max_tokens,
min_tokens) plus stop strings on the decoded text.
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from modelc.artifact.reader import open_artifact
from modelc.cache.kv_pages import BLOCK_SIZE
from modelc.config import parse_kv_dtype
from modelc.engine.embedder import Embedder, supports_embeddings
from modelc.engine.infer import Inferencer, supports_infer
from modelc.engine.perplexity import perplexity
from modelc.engine.runner import Runner
from modelc.errors import EngineError, InvalidRequestError, UnsupportedError
from modelc.formats.detect import read_model
from modelc.request import SamplingParams
from modelc.scheduler.batch import BatchPlan, KVShift, SeqChunk
from modelc.scheduler.context_shift import context_limit, plan_shift, resolve_keep, truncate_prompt
from modelc.store import resolve
from modelc.tokenizer import ChatTemplate, IncrementalDecoder, Tokenizer
from modelc.tokenizer.stop import StopMatcher

ARTIFACT_MAGIC = b"MODELC\0\0"
PREFILL_CHUNK = 512  # tokens per prefill forward: bounds scratch memory on long prompts


def _is_artifact(p: pathlib.Path) -> bool:
    try:
        with open(p, "rb") as f:
            return f.read(8) == ARTIFACT_MAGIC
    except OSError:
        return False


def open_source(path_or_name: str | os.PathLike[str]) -> Any:
    """A model source: a .modelc artifact, raw weights (GGUF, HF folder, safetensors...) or a store name."""
    p = pathlib.Path(os.fspath(path_or_name)).expanduser()
    if p.is_file() and _is_artifact(p):
        return open_artifact(p)
    if p.exists():
        return read_model(p)

    art = resolve(os.fspath(path_or_name))

    return open_artifact(art)


class Engine:
    """One model, one request at a time. `Engine.load(...)` or `Engine(source)` for an in-memory model."""

    def __init__(self, source: Any, *, threads: int | None = None, kv_cache_tokens: int = 4096,
                 kv_dtype: str = "float32"):  # fmt: skip
        if kv_cache_tokens < 1:
            raise InvalidRequestError("kv_cache_tokens must be >= 1", param="kv_cache_tokens")
        self.source = source
        self.name = getattr(source, "name", "model")
        self.architecture = source.architecture
        self.special_tokens = dict(getattr(source, "special_tokens", None) or {})
        self._tokenizer = None
        self._template = None
        self._next_seq = 0
        self._step = 0
        # Encoders (embeddings) and MLP/ONNX graphs (/infer) run outside the causal-LM runner.
        self._embedder = self._inferencer = None
        if supports_embeddings(source):
            self._embedder = Embedder(source)
            return
        if supports_infer(source):
            self._inferencer = Inferencer(source)
            return
        num_blocks = (kv_cache_tokens + BLOCK_SIZE - 1) // BLOCK_SIZE
        self.runner = Runner(source, num_kv_blocks=num_blocks, kv_dtype=parse_kv_dtype(kv_dtype), threads=threads)
        # learned position tables (GPT-2) cap the sequence length too
        limit = getattr(self.runner.model, "max_positions", None)
        self.max_tokens_in_cache = min(num_blocks * BLOCK_SIZE, limit or num_blocks * BLOCK_SIZE)

    def __getattr__(self, name: str) -> Any:
        # Only reached for `runner` (and what hangs off it) on encoder / graph models.
        if name in ("runner", "max_tokens_in_cache"):
            self._require_generation()
        raise AttributeError(name)

    def _require_generation(self) -> None:
        if self._embedder is not None or self._inferencer is not None:
            raise UnsupportedError(f"model {self.name} ({self.architecture}) does not generate text")

    @classmethod
    def load(cls, path_or_store_name: str | os.PathLike[str], *, threads: int | None = None,
             kv_cache_tokens: int = 4096, kv_dtype: str = "float32") -> Engine:  # fmt: skip
        return cls(open_source(path_or_store_name), threads=threads, kv_cache_tokens=kv_cache_tokens,
                   kv_dtype=kv_dtype)  # fmt: skip

    # -- text ----------------------------------------------------------------------------------------

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            text = getattr(self.source, "tokenizer_json", None)
            if not text:
                raise UnsupportedError(f"model {self.name} has no tokenizer; pass token ids")

            self._tokenizer = Tokenizer.from_json(text, self.special_tokens)
        return self._tokenizer

    @property
    def chat_template(self):
        if self._template is None:
            st = self.special_tokens
            bos, eos = st.get("bos_token") or "", st.get("eos_token") or ""
            src = getattr(self.source, "chat_template", None)
            if src:
                self._template = ChatTemplate(src, bos_token=bos, eos_token=eos)
            else:
                chatml = self.tokenizer.token_to_id("<|im_start|>") is not None
                self._template = ChatTemplate.fallback(chatml=chatml, bos_token=bos, eos_token=eos)
        return self._template

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return self.tokenizer.encode(text, add_special=add_special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special=skip_special)

    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenize(prompt)
        return [int(t) for t in prompt]

    @staticmethod
    def _params(sampling: Mapping[str, Any]) -> SamplingParams:
        kw = dict(sampling)
        p = kw.pop("params", None)
        if p is not None and kw:
            raise InvalidRequestError("pass either params= or sampling keywords, not both")
        if p is not None:
            return p
        for k in ("stop", "stop_token_ids"):
            if isinstance(kw.get(k), str):
                kw[k] = (kw[k],)
            elif k in kw:
                kw[k] = tuple(kw[k])
        if "logit_bias" in kw and isinstance(kw["logit_bias"], Mapping):
            kw["logit_bias"] = tuple((int(a), float(b)) for a, b in kw["logit_bias"].items())
        try:
            return SamplingParams(**kw)
        except TypeError as e:
            raise InvalidRequestError(f"bad sampling argument: {e}") from None

    def generate(self, prompt: str | Sequence[int], **sampling: Any) -> str:
        """The completion text for `prompt` (text or token ids). Keywords are SamplingParams fields."""
        return "".join(self.stream(prompt, **sampling))

    def stream(self, prompt: str | Sequence[int], **sampling: Any) -> Iterator[str]:
        """Yield the completion as UTF-8-safe text pieces; stops on EOS, stop ids/strings, max_tokens."""
        self._require_generation()

        params = self._params(sampling)
        ids = self._prompt_ids(prompt)
        dec = IncrementalDecoder(self.tokenizer, ids)
        matcher = StopMatcher(params.stop)
        held = ""  # text not yet yielded because it may begin a stop string
        for tok in self.generate_ids(ids, params):
            piece = dec.add(tok)
            held += piece
            back = matcher.feed(piece)
            if back is not None:
                if held[: len(held) - back]:
                    yield held[: len(held) - back]
                return
            safe = len(held) - matcher.held
            if safe > 0:
                yield held[:safe]
                held = held[safe:]
        piece = dec.flush()
        held += piece
        back = matcher.feed(piece)
        held = held if back is None else held[: len(held) - back]
        if held:
            yield held

    def chat(self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping] | None = None,
             **sampling: Any) -> str:  # fmt: skip
        """The assistant's reply to OpenAI-style `messages`, rendered through the model's chat template."""
        text = self.chat_template.render(messages, tools=tools, add_generation_prompt=True)
        return self.generate(self.tokenize(text), **sampling)

    # -- token level ----------------------------------------------------------------------------------

    def generate_ids(self, prompt_ids: Sequence[int], params: SamplingParams | None = None) -> Iterator[int]:
        """Yield generated token ids (stop tokens excluded), applying the scheduler's stop rules."""
        p = params or SamplingParams()
        ids = np.asarray(list(prompt_ids), np.int32)
        n = len(ids)
        if n == 0:
            raise InvalidRequestError("the prompt has no tokens")
        limit = context_limit(None, p.max_context, self.max_tokens_in_cache)
        if n >= limit and p.truncate:
            ids = np.asarray(truncate_prompt(ids.tolist(), limit, resolve_keep(p.n_keep, 0, n)), np.int32)
            n = len(ids)
        if n >= limit:
            raise InvalidRequestError(f"prompt of {n} tokens does not fit the context ({limit} tokens)")
        eos = set() if p.ignore_eos else set(self.runner.eos_ids)
        stop_ids = eos | set(p.stop_token_ids)
        table = np.arange(self.runner.num_kv_blocks, dtype=np.int32)
        seq_id = self._next_seq
        self._next_seq += 1
        try:
            tok = self._prefill(seq_id, ids, table, p)
            num_out = dropped = 0
            while num_out < p.max_tokens:
                num_out += 1
                if tok in stop_ids and num_out > p.min_tokens:
                    return
                yield tok
                pos = n + num_out - 1 - dropped
                if num_out >= p.max_tokens:
                    return
                shifts: tuple[KVShift, ...] = ()
                if pos + 1 >= limit:  # the context is full: shift it (context_shift.py) or stop
                    shift = self._shift_plan(seq_id, p, table, pos, n)
                    if shift is None:
                        return
                    table, shifts = shift[0], (shift[1],)
                    dropped -= shift[1].delta
                    pos += shift[1].delta
                c = SeqChunk(seq_id, np.array([tok], np.int32), pos, table, True, p, max(0, pos + 1 - num_out), num_out)
                tok = self._run(BatchPlan(self._step, (c,), kv_shifts=shifts))
        finally:
            self.runner.execute(BatchPlan(self._step, (), freed_seq_ids=(seq_id,)))

    def _shift_plan(self, seq_id: int, p: SamplingParams, table: np.ndarray, pos: int,
                    num_prompt: int) -> tuple[np.ndarray, KVShift] | None:  # fmt: skip
        """The new block table and the KVShift of a context shift at position `pos`, or None (no shift)."""
        if not p.context_shift or not hasattr(self.runner.model, "shift_keys"):
            return None
        plan = plan_shift(pos + 1, pos, resolve_keep(p.n_keep, 0, num_prompt), BLOCK_SIZE)
        if plan is None:
            return None
        kb, db = plan
        used = (pos + BLOCK_SIZE - 1) // BLOCK_SIZE
        moved = tuple(int(b) for b in table[kb + db : used])
        new = np.concatenate([table[:kb], table[kb + db :], table[kb : kb + db]]).astype(np.int32)  # recycle
        return new, KVShift(seq_id, moved, -db * BLOCK_SIZE)

    def _prefill(self, seq_id: int, ids: np.ndarray, table: np.ndarray, p: SamplingParams) -> int:
        n = len(ids)
        tok = -1
        for a in range(0, n, PREFILL_CHUNK):
            b = min(n, a + PREFILL_CHUNK)
            c = SeqChunk(seq_id, ids[a:b], a, table, b == n, p, n, 0, is_new=a == 0)
            tok = self._run(BatchPlan(self._step, (c,)))
        return tok

    def _run(self, plan: BatchPlan) -> int:
        self._step += 1
        res = self.runner.execute(plan)
        if res.error is not None:
            raise EngineError(res.error)
        return res.tokens[0].token_id if res.tokens else -1

    def logits(self, token_ids: Sequence[int], *, adapter: str | None = None) -> np.ndarray:
        """(T, V) float32 logits at every position of `token_ids`."""
        return self.runner.logits(list(token_ids), adapter=adapter)

    def perplexity(self, text: str | Sequence[int], *, ctx: int = 512, stride: int | None = None,
                   progress: Any = None) -> Any:  # fmt: skip
        """llama-perplexity's figure for `text` (or token ids): a modelc.engine.perplexity.PerplexityResult."""
        self._require_generation()

        limit = getattr(self.runner.model, "max_positions", None)
        if limit and ctx > limit:
            raise InvalidRequestError(f"ctx {ctx} exceeds the model's {limit} positions", param="ctx")
        ids = self.tokenize(text) if isinstance(text, str) else [int(t) for t in text]
        bos = None  # llama.cpp replaces each chunk's first token by BOS when its vocab adds BOS
        if isinstance(text, str) or getattr(self.source, "tokenizer_json", None):
            bos = self.tokenizer.bos_id if self.tokenizer.adds_bos else None
        return perplexity(lambda chunk, first: self.runner.logits(chunk, first=first), ids, ctx=ctx, stride=stride,
                          bos_id=bos, progress=progress)  # fmt: skip

    def embed(self, texts: str | Sequence[str] | Sequence[Sequence[int]]) -> np.ndarray:
        """(S, C) mean-pooled, L2-normalized final hidden states of each text (or token id list)."""
        items = [texts] if isinstance(texts, str) else list(texts)
        if not items:
            raise InvalidRequestError("nothing to embed")
        if self._embedder is not None:  # an encoder: its own pooling (mean/cls, normalize)
            if all(isinstance(t, str) for t in items):
                return self._embedder.embed(items)
            return self._embedder.embed_token_ids([list(t) for t in items])
        return self.runner.embed([self._prompt_ids(t) for t in items])

    def infer(self, inputs: Any) -> Any:
        """MLP / ONNX models: the /infer payload ({"input": x} | {"inputs": [...]} | {"inputs": {name: x}})
        -> {"output": ...} | {"outputs": ...}; a bare list or array is taken as {"input": inputs}."""
        if self._inferencer is None:
            raise UnsupportedError(f"model {self.name} ({self.architecture}) does not take /infer inputs")
        payload = inputs if isinstance(inputs, Mapping) else {"input": np.asarray(inputs).tolist()}
        return self._inferencer.infer(dict(payload))

    def load_adapter(
        self, name: str, path_or_tensors: Any, alpha: float = 1.0, *, global_: bool = False
    ) -> dict[str, int]:
        return self.runner.load_adapter(name, path_or_tensors, alpha, global_=global_)

    def unload_adapter(self, name: str) -> None:
        self.runner.unload_adapter(name)

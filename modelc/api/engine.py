"""Engine: the synchronous Python API (load, generate, stream, chat, tokenize, logits, embed).

One request at a time on one EngineCore (engine/core.py): the same scheduler, stop rules, context
shift and truncation as the served engine, stepped in the caller's thread instead of by actors.
Stop strings are matched by the same TextStream as the RequestActor.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from modelc.cache.block_pool import BlockPool
from modelc.cache.budget import kv_bytes_per_block
from modelc.cache.kv_pages import BLOCK_SIZE
from modelc.config import SchedulerConfig, resolve_kv_dtype
from modelc.engine.core import EngineCore
from modelc.engine.embedder import Embedder, supports_embeddings
from modelc.engine.infer import Inferencer, supports_infer
from modelc.engine.model_info import ModelInfo
from modelc.engine.perplexity import perplexity
from modelc.engine.runner import Runner
from modelc.errors import EngineError, InvalidRequestError, UnsupportedError
from modelc.models import residency
from modelc.request import SamplingParams
from modelc.scheduler.output import SequenceFinished, TokenEmitted
from modelc.scheduler.scheduler import Scheduler
from modelc.scheduler.sequence import Sequence as SchedSequence
from modelc.source import open_model
from modelc.tokenizer import ChatTemplate
from modelc.tokenizer.stop import TextStream

PREFILL_CHUNK = 512  # tokens per forward (the step's token budget): bounds scratch memory on long prompts


class Engine:
    """One model, one request at a time. `Engine.load(...)` or `Engine(source)` for an in-memory model."""

    def __init__(
        self,
        source: Any,
        *,
        threads: int | None = None,
        kv_cache_tokens: int = 4096,
        kv_dtype: str = "auto",
        weights: str = "auto",
    ):
        """weights: "auto", "resident" or "streamed" (models/residency.py: streamed reads the layers from the file
        as the forward needs them, for a model larger than the memory left)."""
        if kv_cache_tokens < 1:
            raise InvalidRequestError("kv_cache_tokens must be >= 1", param="kv_cache_tokens")
        self.source = source
        self.name = getattr(source, "name", "model")
        self.architecture = source.architecture
        self.special_tokens = dict(getattr(source, "special_tokens", None) or {})
        self._info: ModelInfo | None = None  # built on first use: an encoder needs none of it
        self._template = None
        self._next_seq = 0
        # Encoders (embeddings) and MLP/ONNX graphs (/infer) run outside the causal-LM runner.
        self._embedder = self._inferencer = None
        if supports_embeddings(source):
            self._embedder = Embedder(source)
            return
        if supports_infer(source):
            self._inferencer = Inferencer(source)
            return
        num_blocks = (kv_cache_tokens + BLOCK_SIZE - 1) // BLOCK_SIZE
        info = self.info
        kv_bytes = num_blocks * kv_bytes_per_block(
            getattr(source, "config", None) or {}, BLOCK_SIZE, resolve_kv_dtype(kv_dtype, source)
        )
        self.weights = residency.decide(source, weights, kv_bytes=kv_bytes)
        residency.assign(source, self.weights)
        self.runner = Runner(source, num_kv_blocks=num_blocks, kv_dtype=kv_dtype, threads=threads, info=info)
        # learned position tables (GPT-2) cap the sequence length too
        limit = getattr(self.runner.model, "max_positions", None)
        self.max_tokens_in_cache = min(num_blocks * BLOCK_SIZE, limit or num_blocks * BLOCK_SIZE)
        # The context: the model's length, capped by this cache (prompt + output fit in it; never overflows).
        context = min(self.max_tokens_in_cache, info.context_length or self.max_tokens_in_cache)
        config = SchedulerConfig(
            max_num_seqs=1,
            max_batch_tokens=PREFILL_CHUNK,
            max_queue=1,
            eos_token_ids=tuple(sorted(info.eos_ids)),
            max_model_len=max(2, context),
            rope_long_after=info.rope_long_after,
            context_shift_ok=info.context_shift_ok and hasattr(self.runner.model, "shift_keys"),
        )
        # No prefix cache: one request at a time, each computed from its own prompt (as before the core).
        self.core = EngineCore(Scheduler(config, BlockPool(num_blocks, enable_prefix_caching=False)), self.runner)

    def __getattr__(self, name: str) -> Any:
        # Only reached for `runner` (and what hangs off it) on encoder / graph models.
        if name in ("runner", "core", "max_tokens_in_cache"):
            self._require_generation()
        raise AttributeError(name)

    def _require_generation(self) -> None:
        if self._embedder is not None or self._inferencer is not None:
            raise UnsupportedError(f"model {self.name} ({self.architecture}) does not generate text")

    @classmethod
    def load(
        cls,
        path_or_store_name: str | os.PathLike[str],
        *,
        threads: int | None = None,
        kv_cache_tokens: int = 4096,
        kv_dtype: str = "auto",
        weights: str = "auto",
    ) -> Engine:
        return cls(open_model(path_or_store_name), threads=threads, kv_cache_tokens=kv_cache_tokens, kv_dtype=kv_dtype,
                   weights=weights)  # fmt: skip

    # -- text ----------------------------------------------------------------------------------------

    @property
    def info(self) -> ModelInfo:
        """The model's tokenizer, template, EOS ids and context length (engine/model_info.py)."""
        if self._info is None:
            self._info = ModelInfo.of(self.source)
        return self._info

    @property
    def tokenizer(self):
        if self.info.tokenizer is None:
            raise UnsupportedError(f"model {self.name} has no tokenizer; pass token ids")
        return self.info.tokenizer

    @property
    def chat_template(self):
        if self._template is None:
            st = self.special_tokens
            bos, eos = st.get("bos_token") or "", st.get("eos_token") or ""
            if self.info.chat_template is not None:
                self._template = self.info.chat_template
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
        return _token_ids(prompt, "prompt")

    @staticmethod
    def _params(sampling: Mapping[str, Any]) -> SamplingParams:
        kw = dict(sampling)
        p = kw.pop("params", None)
        if p is not None and kw:
            raise InvalidRequestError("pass either params= or sampling keywords, not both")
        if p is not None:
            return p
        try:
            for k in ("stop", "stop_token_ids"):
                if isinstance(kw.get(k), str):
                    kw[k] = (kw[k],)
                elif k in kw:
                    kw[k] = tuple(kw[k])
            if "logit_bias" in kw and isinstance(kw["logit_bias"], Mapping):
                kw["logit_bias"] = tuple((int(a), float(b)) for a, b in kw["logit_bias"].items())
            return SamplingParams(**kw)
        except (TypeError, ValueError) as e:  # stop=5, logit_bias={"x": 1}, an unknown keyword...
            raise InvalidRequestError(f"bad sampling argument: {e}") from None

    def generate(self, prompt: str | Sequence[int], **sampling: Any) -> str:
        """The completion text for `prompt` (text or token ids). Keywords are SamplingParams fields."""
        return "".join(self.stream(prompt, **sampling))

    def stream(self, prompt: str | Sequence[int], **sampling: Any) -> Iterator[str]:
        """Yield the completion as UTF-8-safe text pieces; stops on EOS, stop ids/strings, max_tokens."""
        self._require_generation()

        params = self._params(sampling)
        ids = self._prompt_ids(prompt)
        text = TextStream(self.tokenizer, ids, params.stop)
        for tok, num_out in self._tokens(ids, params):
            piece = text.add(tok, check_stop=num_out > params.min_tokens)
            if piece:
                yield piece
            if text.stopped:
                return
        piece = text.flush()
        if piece:
            yield piece

    def chat(
        self, messages: Sequence[Mapping[str, Any]], *, tools: Sequence[Mapping] | None = None, **sampling: Any
    ) -> str:
        """The assistant's reply to OpenAI-style `messages`, rendered through the model's chat template."""
        if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
            raise InvalidRequestError("messages must be a non-empty list of {'role', 'content'} objects")
        text = self.chat_template.render(messages, tools=tools, add_generation_prompt=True)
        return self.generate(self.tokenize(text), **sampling)

    # -- token level ----------------------------------------------------------------------------------

    def generate_ids(self, prompt_ids: Sequence[int], params: SamplingParams | None = None) -> Iterator[int]:
        """Yield generated token ids (stop tokens excluded), under the scheduler's stop rules."""
        if params is not None and not isinstance(params, SamplingParams):
            raise InvalidRequestError(f"params must be a SamplingParams, got {type(params).__name__}")
        for tok, _ in self._tokens(_token_ids(prompt_ids, "prompt_ids"), params or SamplingParams()):
            yield tok

    def _tokens(self, prompt_ids: list[int], p: SamplingParams) -> Iterator[tuple[int, int]]:
        """(token id, tokens generated so far) for each generated token, stop tokens excluded: one sequence
        stepped through the EngineCore until it finishes. Leaving early aborts it."""
        if not prompt_ids:
            raise InvalidRequestError("the prompt has no tokens")
        if p.constraint is not None:
            self.info.compile(p.constraint)  # before the step, as the served engine does (and a bad one fails here)
        seq_id = self._next_seq
        self._next_seq += 1
        core = self.core
        for ev in core.add(SchedSequence(seq_id, prompt_ids, p)):
            if isinstance(ev, SequenceFinished):  # max_tokens == 0
                return
        num_out = 0
        try:
            while True:
                for ev in core.step():
                    if isinstance(ev, TokenEmitted):
                        num_out += 1
                        if not ev.stop_token:
                            yield ev.token.token_id, num_out
                    finish = ev.finish
                    if finish is not None:
                        if finish.finish_reason == "error":
                            raise EngineError(finish.error or "generation failed")
                        return
        finally:
            core.abort(seq_id)  # a no-op once it finished; else (the caller left) its blocks go back
            core.release()

    def logits(self, token_ids: Sequence[int], *, adapter: str | None = None) -> np.ndarray:
        """(T, V) float32 logits at every position of `token_ids`."""
        return self.runner.logits(list(token_ids), adapter=adapter)

    def perplexity(
        self, text: str | Sequence[int], *, ctx: int = 512, stride: int | None = None, progress: Any = None
    ) -> Any:
        """llama-perplexity's figure for `text` (or token ids): a modelc.engine.perplexity.PerplexityResult."""
        self._require_generation()

        limit = getattr(self.runner.model, "max_positions", None)
        if limit and ctx > limit:
            raise InvalidRequestError(f"ctx {ctx} exceeds the model's {limit} positions", param="ctx")
        ids = self.tokenize(text) if isinstance(text, str) else [int(t) for t in text]
        bos = None  # llama.cpp replaces each chunk's first token by BOS when its vocab adds BOS
        if isinstance(text, str) or getattr(self.source, "tokenizer_json", None):
            bos = self.tokenizer.bos_id if self.tokenizer.adds_bos else None
        return perplexity(
            lambda chunk, first: self.runner.logits(chunk, first=first),
            ids,
            ctx=ctx,
            stride=stride,
            bos_id=bos,
            progress=progress,
        )

    def embed(self, texts: str | Sequence[str] | Sequence[Sequence[int]]) -> np.ndarray:
        """(S, C) mean-pooled, L2-normalized final hidden states of each text (or token id list)."""
        if not isinstance(texts, str) and not isinstance(texts, Sequence | np.ndarray):
            raise InvalidRequestError(f"texts must be a string or a list of strings or token ids, not {texts!r:.40}")
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


def _token_ids(ids: Any, what: str) -> list[int]:
    """A prompt's token ids as ints; InvalidRequestError for anything else (None, a number, floats, text)."""
    try:
        return [operator.index(t) for t in ids]
    except TypeError:
        raise InvalidRequestError(f"{what} must be a string or a sequence of token ids (ints)") from None

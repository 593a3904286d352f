"""The request vocabulary every floor above shares: what one sequence asks for (SamplingParams,
Constraint) and what generating it yields (TokenEvent per released token, then one Finished).
Pure frozen data, checked once; below the scheduler, so the scheduler, engine, actors and the
front door all speak it without importing each other."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from modelc.errors import InvalidRequestError


@dataclass(frozen=True, slots=True)
class Constraint:
    """Structured-output request, compiled by modelc.engine.constraint (llguidance).

    kind: "json_schema" (source = schema JSON text), "json_object" (source ignored),
    "regex", "lark" (a Lark grammar), "gbnf"; "tool_call" (source = JSON of the tools list).
    """

    kind: str
    source: str = ""


@dataclass(frozen=True, slots=True)
class SamplingParams:
    max_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    min_p: float = 0.0
    typical_p: float = 1.0
    repetition_penalty: float = 1.0  # HF-style, over prompt + output tokens
    presence_penalty: float = 0.0  # OpenAI-style, over output tokens
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    seed: int | None = None
    logprobs: bool = False
    top_logprobs: int = 0  # 0..20, raw (pre-temperature) log-probabilities
    stop_token_ids: tuple[int, ...] = ()  # besides the model's EOS/EOT
    stop: tuple[str, ...] = ()  # stop strings: matched on text by the request side
    ignore_eos: bool = False
    min_tokens: int = 0
    constraint: Constraint | None = None
    adapter: str | None = None  # LoRA adapter name, None = base (or the global adapter)
    # llama-server's per-request `lora`: (adapter name, alpha multiplier) of the adapters this request runs,
    # sorted by name (a name given twice: the last one). The loaded adapters it does not list do not apply
    # to it; `adapter`, when set too, joins at its loaded alpha unless listed. None: no list (the global
    # scales, or `adapter` alone); () : the base model.
    lora: tuple[tuple[str, float], ...] | None = None
    priority: int = 0  # lower runs first; FCFS within a priority
    speculative: bool | None = None  # speculative decoding: None = the engine's default
    gamma: int | None = None  # the most drafted tokens per step; None = the engine's spec_gamma
    context_shift: bool = False  # at the context limit drop old tokens and go on, instead of finish "length"
    n_keep: int = 0  # tokens kept at the start on a shift or truncation (-1 = the whole prompt)
    max_context: int | None = None  # this request's context limit (<= the model's)
    truncate: bool = False  # a prompt longer than the context is cut (llama.cpp's rule) instead of a 400

    def __post_init__(self) -> None:
        def bad(name: str, why: str) -> None:
            raise InvalidRequestError(f"{name} {why}", param=name)

        if self.max_tokens < 0:
            bad("max_tokens", "must be >= 0")
        if not (self.temperature >= 0.0):
            bad("temperature", "must be >= 0")
        if not (0.0 < self.top_p <= 1.0):
            bad("top_p", "must be in (0, 1]")
        if self.top_k < 0:
            bad("top_k", "must be >= 0")
        if not (0.0 <= self.min_p <= 1.0):
            bad("min_p", "must be in [0, 1]")
        if not (0.0 < self.typical_p <= 1.0):
            bad("typical_p", "must be in (0, 1]")
        if not (self.repetition_penalty > 0.0):
            bad("repetition_penalty", "must be > 0")
        if not (-2.0 <= self.presence_penalty <= 2.0):
            bad("presence_penalty", "must be in [-2, 2]")
        if not (-2.0 <= self.frequency_penalty <= 2.0):
            bad("frequency_penalty", "must be in [-2, 2]")
        if not (0 <= self.top_logprobs <= 20):
            bad("top_logprobs", "must be in [0, 20]")
        if self.min_tokens < 0:
            bad("min_tokens", "must be >= 0")
        if self.gamma is not None and not 0 <= self.gamma <= 32:
            bad("gamma", "must be in [0, 32]")
        if self.n_keep < -1:
            bad("n_keep", "must be >= -1")
        if self.max_context is not None and self.max_context < 2:
            bad("max_context", "must be >= 2")
        if self.lora is not None:
            if not all(isinstance(n, str) and n and finite_number(s) for n, s in self.lora):
                bad("lora", "must pair adapter names with finite scales")
            object.__setattr__(self, "lora", tuple(sorted({n: float(s) for n, s in self.lora}.items())))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0 or self.top_k == 1

    @property
    def adapter_names(self) -> tuple[str, ...]:
        """Every adapter this request names (`adapter`, then `lora`'s): each must be loaded while it runs."""
        named = () if self.adapter is None else (self.adapter,)
        return named + tuple(n for n, _ in self.lora or () if n != self.adapter)

    @property
    def adapter_key(self) -> object:
        """What decides the weights this request runs on besides the loaded adapters and global scales: the
        adapter part of its prefix-cache blocks' keys (cache/block_pool.py)."""
        return self.adapter if self.lora is None else (self.adapter, self.lora)


def finite_number(x: object) -> bool:
    """An int or float (not a bool) that is finite: what a JSON scale, weight or bound may be."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One generated token and the text it released (often "" while a character or a possible stop
    string is incomplete). logprob/top_logprobs are raw log-probabilities, None/() unless
    params.logprobs asked for them."""

    token_id: int
    text: str
    logprob: float | None = None
    top_logprobs: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event. finish_reason: "stop" | "length" | "abort" | "error" (then `error` says why).
    completion_tokens counts every sampled token, a final EOS/stop token included."""

    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    error: str | None = None
    # time spent waiting before the scheduler first admitted it
    queue_time_s: float | None = field(default=None, compare=False)


GenerateEvent = TokenEvent | Finished

"""Engine, scheduler and KV-cache settings: frozen dataclasses, checked once in __post_init__.

Also the spelling of the KV cache types. The KV budget arithmetic (MiB or tokens -> number of
16-token blocks) is in modelc/cache/budget.py.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Any

from modelc.errors import InvalidRequestError
from modelc.ir import SCALE_SUFFIX

KV_DTYPES = ("float32", "float16", "q8_0", "mixed")  # the KV cache types (docs/scheduler.md)
KV_AUTO = "auto"  # f16 for a model with quantized matrices, f32 for a float one (resolve_kv_dtype)
_ALIASES = {"f32": "float32", "fp32": "float32", "f16": "float16", "fp16": "float16", "q8": "q8_0", "int8": "q8_0"}
MAX_GAMMA = 32  # the most drafted tokens one speculative step may verify


def _bad(name: str, why: str) -> None:
    raise InvalidRequestError(f"{name} {why}", param=name)


def parse_kv_dtype(name: str) -> str:
    """A user's KV cache type (auto, f32, f16, q8_0, mixed, or the canonical names) -> the canonical name."""
    canon = _ALIASES.get(str(name).lower(), str(name).lower())
    if canon not in KV_DTYPES and canon != KV_AUTO:
        raise InvalidRequestError(
            f"KV cache type must be one of auto, f32, f16, q8_0, mixed; got {name!r}", param="kv_cache_dtype"
        )
    return canon


def resolve_kv_dtype(name: str, source: Any) -> str:
    """The KV cache type a model gets for `name`: "auto" is float16 where the model's matrices are quantized
    (block types, or int8/int4 with scales: llama.cpp's default KV type; it halves decode attention's reads),
    float32 where they are float (its logits then match transformers' to 1e-4); any other name as parsed."""
    canon = parse_kv_dtype(name)
    if canon != KV_AUTO:
        return canon
    tensors = getattr(source, "tensors", None) or {}
    quantized = any(
        len(t.shape) >= 2 and (t.dtype.is_quantized or n + SCALE_SUFFIX in tensors) for n, t in tensors.items()
    )
    return "float16" if quantized else "float32"


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """KV budget: at most one of kv_cache_mb / kv_cache_tokens; neither = sized from free memory."""

    block_size: int = 16
    kv_cache_mb: float | None = None
    kv_cache_tokens: int | None = None
    kv_dtype: str = KV_AUTO  # resolved per model when an engine opens (resolve_kv_dtype)
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        if self.block_size != 16:
            _bad("block_size", "must be 16 (the KV page size of the kernels)")
        if self.kv_cache_mb is not None and self.kv_cache_tokens is not None:
            _bad("kv_cache_mb", "and kv_cache_tokens are exclusive: give one")
        if self.kv_cache_mb is not None and not 0 < self.kv_cache_mb < math.inf:  # inf: an OverflowError at load
            _bad("kv_cache_mb", "must be a finite number > 0")
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < self.block_size:
            _bad("kv_cache_tokens", f"must be >= {self.block_size}")
        if self.kv_dtype not in KV_DTYPES and self.kv_dtype != KV_AUTO:  # f32/f16/q8/... spellings are accepted
            object.__setattr__(self, "kv_dtype", parse_kv_dtype(self.kv_dtype))


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Per-step token budget, running-set cap, waiting-queue cap, and the model's stop ids.

    eos_token_ids: the model's EOS/EOT ids (AsyncEngine fills them from the model's special tokens).
    max_model_len: a sequence that reaches it ends with finish_reason "length" (None = no limit).
    """

    max_num_seqs: int = 64
    max_batch_tokens: int = 512
    max_queue: int = 256
    eos_token_ids: tuple[int, ...] = ()
    max_model_len: int | None = None
    anchor_tokens: int = 0  # context shift keeps at least this many first tokens (StreamingLLM's sinks)
    context_shift_ok: bool = True  # the model's keys can be re-rotated (RoPE); AsyncEngine sets it
    # long-RoPE models (Phi-3.5/Phi-4; AsyncEngine sets it): a prompt longer than this rotates with the long
    # factors, so its KV blocks are prefix-cached apart from shorter prompts' (0: not such a model)
    rope_long_after: int = 0
    # Speculative decoding (docs/speculative.md): None = off unless a request asks (then prompt
    # lookup), "ngram" = prompt lookup for every request, "draft" = the engine's draft model.
    # spec_gamma: the most drafted tokens per step (a request's `gamma` may lower or raise it).
    speculative: str | None = None
    spec_gamma: int = 4
    # Drafts ride only in steps of at most this many tokens in all: below the matmul kernels'
    # prefill threshold (kernels/matmul/plan.py PREFILL_MIN_T = 32) an extra row costs a fraction of a
    # decode; past it the step switches to dequantize + BLAS and every row costs a full share.
    spec_max_step_tokens: int = 31

    def __post_init__(self) -> None:
        if self.max_num_seqs < 1:
            _bad("max_num_seqs", "must be >= 1")
        if self.max_batch_tokens < 1:
            _bad("max_batch_tokens", "must be >= 1")
        if self.max_batch_tokens < self.max_num_seqs:
            _bad("max_batch_tokens", f"must be >= max_num_seqs ({self.max_num_seqs}) so every decode fits")
        if self.max_queue < 0:
            _bad("max_queue", "must be >= 0")
        if self.max_model_len is not None and self.max_model_len < 2:
            _bad("max_model_len", "must be >= 2")
        if self.anchor_tokens < 0:
            _bad("anchor_tokens", "must be >= 0")
        if self.speculative not in (None, "ngram", "draft"):
            _bad("speculative", "must be None, 'ngram' or 'draft'")
        if not 0 <= self.spec_gamma <= MAX_GAMMA:
            _bad("spec_gamma", f"must be in [0, {MAX_GAMMA}]")
        if self.spec_max_step_tokens < 1:
            _bad("spec_max_step_tokens", "must be >= 1")
        if not isinstance(self.eos_token_ids, tuple):
            object.__setattr__(self, "eos_token_ids", tuple(self.eos_token_ids))


WEIGHTS_MODES = ("auto", "resident", "streamed")  # EngineConfig.weights (models/residency.py)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """How AsyncEngine serves one model: `engines` runners, each with `threads` numba threads.

    engines x threads must not exceed the CPU cores (threads=None -> cores // engines).
    request_timeout_s bounds admin round trips (adapters, stats, embed, abort acks), not generation.
    The KV budget in `cache` is for all engines together; each engine gets an equal share.
    """

    engines: int = 1
    threads: int | None = None
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    request_timeout_s: float = 600.0
    max_engine_restarts: int = 5
    # Speculative decoding's draft model (a .modelc path, a store name or a model source) sharing the
    # target's tokenizer; AsyncEngine.open loads it next to the target and sets scheduler.speculative.
    draft: Any = field(default=None, compare=False)
    cpu_count: int = field(default_factory=lambda: usable_cpus(), compare=False)
    warmup: bool = True  # compile (or load from numba's cache) every kernel before the engine counts as open
    replicas: ReplicaConfig | None = None  # serve through Ray engine replicas (modelc/replicas/)
    # where the weights live (models/residency.py): "auto" picks at load; "resident" (repacked copies in memory) or
    # "streamed" (read layer by layer from the file, for models larger than the memory left)
    weights: str = "auto"

    def __post_init__(self) -> None:
        if self.engines < 1:
            _bad("engines", "must be >= 1")
        if self.engines > self.cpu_count:
            _bad("engines", f"must be <= the {self.cpu_count} CPU cores")
        if self.threads is not None:
            if self.threads < 1:
                _bad("threads", "must be >= 1")
            if self.engines * self.threads > self.cpu_count:
                _bad("threads", f"x engines must be <= the {self.cpu_count} CPU cores")
        if not self.request_timeout_s > 0:
            _bad("request_timeout_s", "must be > 0")
        if self.max_engine_restarts < 0:
            _bad("max_engine_restarts", "must be >= 0")
        if self.weights not in WEIGHTS_MODES:
            _bad("weights", f"must be one of {', '.join(WEIGHTS_MODES)}")

    @property
    def threads_per_engine(self) -> int:
        return self.threads if self.threads is not None else max(1, self.cpu_count // self.engines)


def usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


ROUTING_POLICIES = ("affinity", "least_loaded", "random")


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """Scale-out on Ray: `replicas` engine replicas, each a Ray actor with `cpus_per_replica` CPUs.

    address: a running Ray cluster ("auto" or "HOST:PORT"); None starts a local one on 127.0.0.1
    and stops it with the server. max_in_flight: requests the front sends one replica before it
    counts as full (None = its max_num_seqs + max_queue); all full -> 503.
    """

    replicas: int = 2
    cpus_per_replica: float = 1.0
    address: str | None = None
    policy: str = "affinity"
    max_in_flight: int | None = None
    registry: str | None = None  # where replicas on other nodes pull the artifact from
    registry_spec: str | None = None

    def __post_init__(self) -> None:
        if self.replicas < 1:
            _bad("replicas", "must be >= 1")
        if self.cpus_per_replica <= 0:
            _bad("cpus_per_replica", "must be > 0")
        if self.policy not in ROUTING_POLICIES:
            _bad("policy", f"must be one of {', '.join(ROUTING_POLICIES)}")
        if self.max_in_flight is not None and self.max_in_flight < 1:
            _bad("max_in_flight", "must be >= 1")

"""The serving contract: what the server needs of every model it serves.

Every engine kind is a ServedModel: `api.AsyncEngine` and the replicas' `ReplicaEngine` (causal LMs:
generate, embed), the encoder engines of api/engines.py (embed, and rerank for cross-encoders),
the MLP/ONNX engine (infer), and the daemon's per-request view of a loaded model
(server/manager/loaded.ModelView). `serves` says which of the capability calls a kind answers; a
route narrows it with `generating(engine)` / `embedding(engine)` / ... (a 400 naming the route the
model does serve otherwise) and calls the capability's method on the narrower protocol it gets back. No route probes an
engine's attributes.

The protocols are structural: the engines do not import this module (most sit on lower floors).
tests/server/test_served.py checks that each kind satisfies them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from modelc.config import EngineConfig
from modelc.errors import InvalidRequestError
from modelc.request import GenerateEvent, SamplingParams

GENERATE = "generate"  # generate(prompt_token_ids, params) -> TokenEvent..., Finished
EMBED = "embed"  # embed(token_id_lists) -> (S, C) unit vectors
RERANK = "rerank"  # rerank(query, documents) -> Ranking
INFER = "infer"  # infer(payload) -> outputs (MLP/ONNX)
CAPABILITIES = (GENERATE, EMBED, RERANK, INFER)


@runtime_checkable
class ServedTokenizer(Protocol):
    """What the routes use of a model's tokenizer: modelc.tokenizer.Tokenizer, and the encoders' subset
    (api/engines.EncoderTokenizer)."""

    vocab_size: int
    bos_id: int | None

    def encode(self, text: str, add_special: bool = True) -> list[int]: ...

    def decode(self, ids: list[int], skip_special: bool = True) -> str: ...

    def token_to_id(self, token: str) -> int | None: ...  # None when `token` is not one vocabulary entry

    def token_bytes(self, token_id: int) -> bytes: ...  # the raw bytes it stands for in generated text

    def all_token_bytes(self) -> list[bytes]: ...  # token_bytes of every id (built once)


@runtime_checkable
class ServedTemplate(Protocol):
    """What the routes use of a chat template: modelc.tokenizer.ChatTemplate."""

    source: str  # the Jinja text
    bos_token: str  # "" when the model has none
    takes_tools: bool  # the template reads `tools`

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        add_generation_prompt: bool = True,
        **extra: Any,
    ) -> str: ...


@runtime_checkable
class ModelSource(Protocol):
    """What the server reads of the model an engine serves: modelc.ir.Model and the .modelc Artifact
    both have it (the artifact's tensors are views of the mapped file)."""

    name: str
    architecture: str
    config: dict[str, Any]  # the normalized hyper-parameters (docs/architecture.md)
    tensors: Mapping[str, Any]  # name -> modelc.ir.TensorData
    chat_template: str | None  # the template's Jinja source as stored

    @property
    def num_params(self) -> int: ...  # weights only (no int8/int4 scale tensors)

    @property
    def total_bytes(self) -> int: ...  # the tensors' bytes as held


@runtime_checkable
class ServedModel(Protocol):
    """What every served model has: its names, its text side (None for MLP/ONNX), the settings it runs
    with, its LoRA adapters and its load."""

    name: str
    architecture: str
    tokenizer: ServedTokenizer | None  # None without one (MLP/ONNX)
    chat_template: ServedTemplate | None  # None without one (encoders, MLP/ONNX)
    source: ModelSource | None  # the model it serves, None when it has none (a test fake)
    context_length: int | None  # the most tokens one sequence may hold (prompt + output); None: no limit
    serves: frozenset[str]  # which of CAPABILITIES it answers
    config: EngineConfig | None  # the scheduler/cache settings a causal LM runs with; None for encoders, MLP, ONNX

    @property
    def adapters(self) -> list[str]: ...  # the LoRA adapters loaded (none for kinds that take none)

    async def load_adapter(self, name: str, path: str, alpha: float = 1.0, global_: bool = False) -> Any: ...

    async def unload_adapter(self, name: str) -> None: ...

    # llama.cpp's global scales: each named adapter's alpha multiplier for requests naming none; the others 0
    async def scale_adapters(self, scales: dict[str, float]) -> None: ...

    # (id, name, path loaded from, global scale) in load order; an id stays its adapter's while it is loaded
    def adapter_table(self) -> list[tuple[int, str, str, float]]: ...

    # modelc.scheduler.slots.SlotState of every slot (llama.cpp's GET /slots); None: this kind has no slots
    async def slots(self) -> list[Any] | None: ...

    def stats(self) -> dict[str, Any]: ...


@runtime_checkable
class Generating(ServedModel, Protocol):
    def generate(
        self, prompt_token_ids: list[int], params: SamplingParams, request_id: str | None = None
    ) -> AsyncIterator[GenerateEvent]: ...


@runtime_checkable
class Embedding(ServedModel, Protocol):
    # normalize=False: the pooled vectors before their L2 normalization (llama.cpp's embd_normalize -1)
    async def embed(self, token_id_lists: list[list[int]], normalize: bool = True) -> np.ndarray: ...


@runtime_checkable
class Reranking(ServedModel, Protocol):
    async def rerank(
        self,
        query: str,
        documents: Sequence[str],
        *,
        truncate: bool = False,  # cut a pair beyond the context (else a 400)
        max_tokens_per_doc: int | None = None,  # cut each document to this many tokens first
        max_total_tokens: int | None = None,  # more input tokens in all: a 400 before the model runs
    ) -> Any: ...


@runtime_checkable
class Inferring(ServedModel, Protocol):
    async def infer(self, payload: dict[str, Any]) -> dict[str, Any]: ...


PROTOCOLS: dict[str, type] = {GENERATE: Generating, EMBED: Embedding, RERANK: Reranking, INFER: Inferring}

_REFUSALS = {
    GENERATE: "does not generate text; use {other}",
    EMBED: "does not produce embeddings; use {other}",
    RERANK: "is not a reranker: /v1/rerank needs a cross-encoder (a BERT/XLM-R ...ForSequenceClassification model)",
    INFER: "is not an MLP or ONNX model: /infer needs one; use {other}",
}
_ROUTES = {GENERATE: "/v1/chat/completions", EMBED: "/v1/embeddings", RERANK: "/v1/rerank", INFER: "/infer"}


def check_serves(engine: ServedModel, capability: str, param: str | None = None) -> None:
    """A 400 that says what the model is and which route it does serve, unless it serves `capability`."""
    if capability in engine.serves:
        return
    other = next((_ROUTES[c] for c in CAPABILITIES if c in engine.serves and c != capability), "another route")
    why = _REFUSALS[capability].format(other=other)
    raise InvalidRequestError(f"model {engine.name!r} ({engine.architecture}) {why}", param=param)


def generating(engine: ServedModel, param: str | None = None) -> Generating:
    check_serves(engine, GENERATE, param)
    return cast(Generating, engine)


def embedding(engine: ServedModel, param: str | None = None) -> Embedding:
    check_serves(engine, EMBED, param)
    return cast(Embedding, engine)


def reranking(engine: ServedModel, param: str | None = None) -> Reranking:
    check_serves(engine, RERANK, param)
    return cast(Reranking, engine)


def inferring(engine: ServedModel, param: str | None = None) -> Inferring:
    check_serves(engine, INFER, param)
    return cast(Inferring, engine)

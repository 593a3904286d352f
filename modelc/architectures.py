"""Every architecture modelc runs, by the family of code that runs it: the one table that pack (`--arch`), the
readers, the model registry, the capabilities (GET /v1/models, /api/show, `modelc inspect`) and the server's
choice of engine read. Pure data: no weights, no numba.
"""

from __future__ import annotations

from modelc.errors import UnsupportedError

LLAMA = "llama"  # models/llama.py: decoders of the LLaMA shape, the variants as config switches (docs/models.md)
GPT2 = "gpt2"  # models/gpt2.py
BERT = "bert"  # models/bert.py: encoders (embeddings; cross-encoders also rerank)
MLP = "mlp"  # models/mlp.py: dense layers, served on /infer
ONNX = "onnx"  # onnx/: an ONNX graph, served on /infer

FAMILY: dict[str, str] = {
    "llama": LLAMA,
    "mistral": LLAMA,
    "qwen2": LLAMA,
    "phi3": LLAMA,
    "qwen3": LLAMA,
    "qwen3moe": LLAMA,
    "olmo2": LLAMA,
    "granite": LLAMA,
    "smollm3": LLAMA,
    "gemma2": LLAMA,
    "gemma3": LLAMA,
    "mixtral": LLAMA,
    "gpt-oss": LLAMA,
    "gpt2": GPT2,
    "bert": BERT,
    "mlp": MLP,
    "onnx": ONNX,
}
"""architecture name (the .modelc header's `architecture`) -> family."""

GENERATING = frozenset({LLAMA, GPT2})  # families that generate text (the causal LMs AsyncEngine serves)
EMBEDDING = frozenset({BERT})  # families the embedder runs
INFERRING = frozenset({MLP, ONNX})  # families the Inferencer runs


def family(architecture: str | None) -> str | None:
    """The family that runs `architecture`, or None for one modelc does not run."""
    return FAMILY.get(str(architecture or ""))


def in_families(families: frozenset[str]) -> tuple[str, ...]:
    """The architecture names of these families, in the table's order."""
    return tuple(a for a, f in FAMILY.items() if f in families)


def generates(architecture: str | None) -> bool:
    return family(architecture) in GENERATING


def check(architecture: str) -> str:
    """`architecture` if modelc runs it, else UnsupportedError naming the ones it runs."""
    if architecture not in FAMILY:
        raise UnsupportedError(f"unknown architecture {architecture!r}; known: {', '.join(FAMILY)}")
    return architecture

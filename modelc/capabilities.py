"""What a model can do, from its architecture, config, chat template and metadata: completion, chat, tools,
thinking, embedding, rerank. One answer for GET /v1/models, /api/show and `modelc inspect`; pure data, no
weights read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from modelc import architectures
from modelc.models.heads import is_cross_encoder
from modelc.tokenizer.reasoning import reasoning_syntax


def capabilities(
    architecture: str,
    config: Mapping[str, Any] | None,
    chat_template: str | None,
    metadata: Mapping[str, Any] | None = None,
) -> list[str]:
    """The capability names, in a fixed order: completion, chat, tools, thinking, embedding, rerank.
    A cross-encoder has `rerank` and not `embedding`."""
    cfg = config or {}
    out: list[str] = []
    if architectures.generates(architecture):
        out.append("completion")
        if chat_template:
            out.append("chat")
            if "tools" in chat_template:
                out.append("tools")
            if reasoning_syntax(chat_template) is not None:
                out.append("thinking")
    if is_cross_encoder(architecture, metadata):
        out.append("rerank")
    elif architectures.family(architecture) in architectures.EMBEDDING or cfg.get("pooling"):
        out.append("embedding")
    return out


def source_capabilities(source: Any) -> list[str]:
    """capabilities() of an IR Model, an Artifact or an artifact header (anything with these attributes)."""
    return capabilities(
        str(getattr(source, "architecture", "") or ""),
        getattr(source, "config", None),
        getattr(source, "chat_template", None),
        getattr(source, "metadata", None),
    )

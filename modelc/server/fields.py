"""Request fields a route ignores are logged as a warning (as vLLM does), so a misspelt
`temprature` or an OpenAI feature modelc does not have is visible in the log instead of silent.

The known fields of a route are the properties its /openapi.json request schema declares, plus the
extra fields the routes read that the spec leaves out. Pure, no awaits.
"""

from __future__ import annotations

import functools
from typing import Any

CHECKED_ROUTES = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
EXTRA = frozenset({"speculative", "gamma", "reasoning_format", "truncate", "chat_template_kwargs"})


@functools.cache
def known_fields(path: str) -> frozenset[str] | None:
    from modelc.server.openapi import server_spec

    op = server_spec()["paths"].get(path, {}).get("post") or {}
    schema = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get("schema", {})
    props = schema.get("properties")
    return None if props is None else frozenset(props) | EXTRA


def unknown_fields(path: str, body: dict[str, Any]) -> list[str]:
    """The top-level fields of `body` that route `path` does not read (empty for unchecked routes)."""
    if path not in CHECKED_ROUTES:
        return []
    known = known_fields(path)
    return [] if known is None else sorted(str(k)[:64] for k in body if k not in known)

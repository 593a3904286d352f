"""Server-sent events framing: `data: <json>\\n\\n` and the OpenAI terminator `data: [DONE]`."""

from __future__ import annotations

import json
from typing import Any

DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_event(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def parse_sse(body: bytes | str) -> list[dict[str, Any] | str]:
    """Parse an SSE body back into payloads (dicts, or the string '[DONE]'): for tests and the CLI client."""
    text = body.decode() if isinstance(body, bytes) else body
    out: list[dict[str, Any] | str] = []
    for block in text.split("\n\n"):
        data = "\n".join(line[5:].lstrip() for line in block.splitlines() if line.startswith("data:"))
        if not data:
            continue
        out.append(data if data == "[DONE]" else json.loads(data))
    return out

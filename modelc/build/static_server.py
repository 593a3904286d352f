"""A read-only static file server (ASGI, served by hypercorn) with HTTP Range support.

Used by `modelc registry serve DIR`: GET/HEAD of files under one folder, single byte ranges
(`bytes=A-B`, `bytes=A-`, `bytes=-N`) answered with 206, everything else 404/405/416.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote

CHUNK_BYTES = 1 << 20
_RANGE = re.compile(r"bytes=(\d*)-(\d*)$")


def parse_range(header: str, size: int) -> tuple[int, int] | None:
    """A single Range header -> inclusive (start, end), or None when it is unsatisfiable/unsupported."""
    m = _RANGE.match(header.strip())
    if not m or (not m[1] and not m[2]):
        return None
    if not m[1]:
        n = int(m[2])
        return (max(size - n, 0), size - 1) if n and size else None
    start = int(m[1])
    end = min(int(m[2]), size - 1) if m[2] else size - 1
    return (start, end) if start <= end and start < size else None


class StaticFiles:
    """ASGI app serving `root` read-only."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def resolve(self, url_path: str) -> Path | None:
        rel = unquote(url_path).lstrip("/")
        target = (self.root / rel).resolve()
        if target != self.root and self.root not in target.parents:
            return None
        return target if target.is_file() else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            return await _reply(send, 405, b"method not allowed\n")
        path = self.resolve(scope["path"])
        if path is None:
            return await _reply(send, 404, b"not found\n")
        size = path.stat().st_size
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        start, end, status = 0, size - 1, 200
        if "range" in headers:
            rng = parse_range(headers["range"], size)
            if rng is None:
                return await _reply(send, 416, b"", [(b"content-range", f"bytes */{size}".encode())])
            (start, end), status = rng, 206
        length = end - start + 1 if size else 0
        extra = [(b"accept-ranges", b"bytes"), (b"content-length", str(length).encode())]
        if status == 206:
            extra.append((b"content-range", f"bytes {start}-{end}/{size}".encode()))
        await send({"type": "http.response.start", "status": status, "headers": extra})
        if scope["method"] == "HEAD":
            return await send({"type": "http.response.body", "body": b""})
        with open(path, "rb") as f:
            f.seek(start)
            left = length
            while left > 0:
                chunk = f.read(min(CHUNK_BYTES, left))
                if not chunk:
                    break
                left -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
        if length == 0:
            await send({"type": "http.response.body", "body": b""})


async def _reply(send: Any, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    hdrs = [(b"content-length", str(len(body)).encode()), *(headers or [])]
    await send({"type": "http.response.start", "status": status, "headers": hdrs})
    await send({"type": "http.response.body", "body": body})


def serve(root: str | os.PathLike[str], *, host: str = "127.0.0.1", port: int = 8090) -> None:
    """Serve `root` until interrupted (blocking)."""
    import asyncio

    from hypercorn.asyncio import serve as hypercorn_serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    asyncio.run(hypercorn_serve(StaticFiles(root), config))  # type: ignore[arg-type]

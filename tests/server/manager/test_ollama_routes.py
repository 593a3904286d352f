"""The Ollama-shaped API on a FakeEngine default model plus store models loaded on demand."""

from __future__ import annotations

import contextlib
import io
import json

import anyio
import pytest

from modelc.server.app import create_app
from modelc.server.manager.models import ModelManager
from modelc.server.state import ServerConfig, ServerState
from tests.server.fake_engine import FakeEngine
from tests.server.manager.conftest import FakeOpener

pytestmark = pytest.mark.anyio
DETAIL_KEYS = {"format", "family", "parameter_size", "quantization_level"}


TOKEN = "control-token-for-tests"


class TokenClient:
    """The Quart test client sending the daemon's control token (as the CLI does), unless told otherwise."""

    def __init__(self, client, token: str | None) -> None:
        self._client, self._token = client, token

    def __getattr__(self, name):
        return getattr(self._client, name)

    def _headers(self, kw) -> dict:
        headers = dict(kw.pop("headers", None) or {})
        if self._token:
            headers.setdefault("Authorization", f"Bearer {self._token}")
        return headers

    async def get(self, *a, **kw):
        return await self._client.get(*a, headers=self._headers(kw), **kw)

    async def post(self, *a, **kw):
        return await self._client.post(*a, headers=self._headers(kw), **kw)

    async def delete(self, *a, **kw):
        return await self._client.delete(*a, headers=self._headers(kw), **kw)


@contextlib.asynccontextmanager
async def daemon_app(token: str | None = TOKEN, config: dict | None = None, **manager_kw):
    opener = FakeOpener()
    manager = ModelManager(opener=opener, tick_s=0.02, grace_s=0.05, **manager_kw)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            engine = FakeEngine(name="main")
            manager.set_default(engine, "main")
            state = ServerState(engine, ServerConfig(log_requests=False, control_token=TOKEN, **(config or {})))
            state.models = manager
            stopped = []
            state.request_shutdown = lambda: stopped.append(True)
            app = create_app(state, log_stream=io.StringIO())
            client = TokenClient(app.test_client(), token)
            client.opener, client.manager, client.stopped = opener, manager, stopped
            yield client
            tg.cancel_scope.cancel()


def ndjson(raw: bytes) -> list[dict]:
    return [json.loads(line) for line in raw.decode().splitlines() if line.strip()]


async def test_tags_lists_store_models_and_default(home) -> None:
    async with daemon_app() as c:
        body = await (await c.get("/api/tags")).get_json()
        names = [m["name"] for m in body["models"]]
        assert names == ["main", "alpha", "beta", "gamma"]
        alpha = body["models"][1]
        assert alpha["model"] == "alpha" and alpha["size"] > 0 and len(alpha["digest"]) == 64
        assert alpha["modified_at"].endswith("Z") and DETAIL_KEYS <= set(alpha["details"])
        assert alpha["details"]["family"] == "llama" and alpha["details"]["quantization_level"]


async def test_generate_streams_ndjson_and_ps_shows_loaded(home) -> None:
    async with daemon_app() as c:
        r = await c.post("/api/generate", json={"model": "alpha", "prompt": "hi", "options": {"num_predict": 5}})
        assert r.status_code == 200 and r.content_type.startswith("application/x-ndjson")
        lines = ndjson(await r.get_data())
        assert all(not x["done"] and x["model"] == "alpha" for x in lines[:-1])
        text = "".join(x["response"] for x in lines[:-1])
        final = lines[-1]
        assert len(text) == 5 and final["done"] and final["done_reason"] == "length" and final["eval_count"] == 5
        for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_duration"):
            assert isinstance(final[key], int)
        assert final["prompt_eval_count"] > 2 and final["context"]
        ps = (await (await c.get("/api/ps")).get_json())["models"]
        assert [m["name"] for m in ps] == ["main", "alpha"]
        row = ps[1]
        assert row["size_vram"] == 0 and row["expires_at"].endswith("Z") and len(row["digest"]) == 64
        assert DETAIL_KEYS <= set(row["details"]) and row["size"] >= row["size_bytes"] > 0
        assert (row["running"], row["waiting"], row["kv_blocks_total"]) == (0, 0, 64)
        assert ps[0]["expires_at"].startswith("9999") and ps[0]["default"] is True


async def test_generate_not_streamed_and_options(home) -> None:
    async with daemon_app() as c:
        r = await c.post(
            "/api/generate",
            json={"model": "main", "prompt": "x", "stream": False, "options": {"num_predict": 3, "temperature": 0}},
        )
        body = await r.get_json()
        assert body["done"] and len(body["response"]) == 3 and body["model"] == "main"
        params = c.manager.default.engine.calls[-1][1]
        assert params.max_tokens == 3 and params.temperature == 0 and params.top_k == 40
        bad = await c.post("/api/generate", json={"model": "main", "prompt": "x", "options": {"top_p": 7}})
        err = (await bad.get_json())["error"]
        assert bad.status_code == 400 and isinstance(err, str) and "options.top_p" in err  # Ollama's shape


async def test_chat_streams_messages(home) -> None:
    async with daemon_app() as c:
        msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
        r = await c.post("/api/chat", json={"model": "beta", "messages": msgs, "options": {"num_predict": 4}})
        lines = ndjson(await r.get_data())
        assert all(x["message"]["role"] == "assistant" for x in lines)
        assert len("".join(x["message"]["content"] for x in lines)) == 4
        assert lines[-1]["done"] and lines[-1]["eval_count"] == 4 and "context" not in lines[-1]
        one = await (await c.post("/api/chat", json={"model": "beta", "messages": msgs, "stream": False})).get_json()
        assert one["done"] and one["message"]["content"]


async def test_chat_format_json_uses_a_constraint(home, monkeypatch) -> None:
    from modelc.server import chat_plan

    monkeypatch.setattr(chat_plan, "precompile", lambda engine, c: None)  # the fake tokenizer has no grammar
    async with daemon_app() as c:
        msgs = [{"role": "user", "content": "answer"}]
        r = await c.post("/api/chat", json={"model": "main", "messages": msgs, "format": "json", "stream": False})
        assert json.loads((await r.get_json())["message"]["content"]) == {"answer": 42}


async def test_empty_prompt_loads_and_keep_alive_zero_unloads(home) -> None:
    async with daemon_app() as c:
        r = await (await c.post("/api/generate", json={"model": "gamma"})).get_json()
        assert r["done_reason"] == "load" and c.opener.opened == ["gamma"]
        r = await (await c.post("/api/chat", json={"model": "gamma", "messages": [], "keep_alive": 0})).get_json()
        assert r["done_reason"] == "unload" and c.opener.closed == ["gamma"]
        assert await (await c.post("/api/load", json={"model": "alpha", "keep_alive": "1m"})).get_json()
        unloaded = await (await c.post("/api/unload", json={"model": "alpha"})).get_json()
        assert unloaded == {"model": "alpha", "unloaded": True}


async def test_unknown_model_is_404_and_openai_routes_pick_models(home) -> None:
    async with daemon_app() as c:
        r = await c.post("/api/chat", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]})
        assert r.status_code == 404
        r = await c.post("/v1/chat/completions", json={"model": "alpha", "messages": [{"role": "user", "content": "x"}],
                                                       "max_tokens": 2})  # fmt: skip
        body = await r.get_json()
        assert r.status_code == 200 and body["model"] == "alpha" and c.opener.opened == ["alpha"]
        r = await c.post("/v1/completions", json={"model": "beta", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 200 and c.opener.opened == ["alpha", "beta"]


async def test_show_copy_delete(home) -> None:
    async with daemon_app() as c:
        show = await (await c.post("/api/show", json={"model": "alpha"})).get_json()
        assert show["details"]["family"] == "llama" and show["model_info"]["general.architecture"] == "llama"
        assert show["capabilities"] == ["completion", "chat"] and show["template"]  # modelc.capabilities
        assert (await c.post("/api/copy", json={"source": "alpha", "destination": "delta"})).status_code == 200
        await c.post("/api/load", json={"model": "delta"})
        assert (await c.delete("/api/delete", json={"model": "delta"})).status_code == 200
        assert c.opener.closed == ["delta"]
        assert (await c.delete("/api/delete", json={"model": "delta"})).status_code == 404
        names = [m["name"] for m in (await (await c.get("/api/tags")).get_json())["models"]]
        assert "delta" not in names


async def test_embed(home) -> None:
    async with daemon_app() as c:
        body = await (await c.post("/api/embed", json={"model": "alpha", "input": ["a", "bb"]})).get_json()
        assert len(body["embeddings"]) == 2 and len(body["embeddings"][0]) == 8 and body["prompt_eval_count"] == 5
        old = await (await c.post("/api/embeddings", json={"model": "alpha", "prompt": "a"})).get_json()
        assert len(old["embedding"]) == 8


async def test_lora_load_unload_and_adapter_model_name(home) -> None:
    async with daemon_app() as c:
        (home / "adapters").mkdir()
        (home / "adapters" / "style.safetensors").write_bytes(b"")  # the fake engine does not read it
        r = await c.post("/api/lora/load", json={"model": "alpha", "path": "style"})
        assert (await r.get_json())["adapter"] == "style"
        r = await c.post("/api/generate", json={"model": "alpha:style", "prompt": "x", "stream": False})
        assert r.status_code == 200 and (await r.get_json())["model"] == "alpha:style"
        ps = (await (await c.get("/api/ps")).get_json())["models"]
        assert ps[1]["adapters"] == ["style"]
        r = await c.post("/api/lora/unload", json={"model": "alpha", "adapter": "style"})
        assert (await r.get_json())["unloaded"] is True


async def test_shutdown_and_version(home) -> None:
    async with daemon_app() as c:
        assert (await (await c.get("/api/version")).get_json())["version"]
        r = await c.post("/api/shutdown")
        assert r.status_code == 200
        await anyio.sleep(0.1)
        assert c.stopped == [True]


async def test_shutdown_needs_the_api_key(home) -> None:
    app = create_app(ServerState(FakeEngine(), ServerConfig(api_key="k", log_requests=False)))
    assert (await app.test_client().post("/api/shutdown")).status_code == 401


async def test_openai_model_list_includes_store_models(home) -> None:
    async with daemon_app() as c:
        ids = [m["id"] for m in (await (await c.get("/v1/models")).get_json())["data"]]
        assert ids == ["main", "alpha", "beta", "gamma"]
        assert (await c.get("/v1/models/beta")).status_code == 200
        assert (await c.get("/v1/models/nope")).status_code == 404


async def test_pull_streams_progress_from_a_registry_folder(home, tmp_path) -> None:
    from modelc import registry, store

    reg = tmp_path / "registry"
    registry.add(reg, "beta", name="pulled")
    async with daemon_app(config={"registries": (str(reg),)}) as c:
        bad = await c.post("/api/pull", json={"model": "pulled", "registry": "http://169.254.169.254/latest"})
        assert bad.status_code == 403 and "169.254" not in (await bad.get_data()).decode()  # never fetched
        r = await c.post("/api/pull", json={"model": "pulled", "registry": str(reg)})
        assert r.content_type.startswith("application/x-ndjson")
        lines = ndjson(await r.get_data())
        statuses = [x["status"] for x in lines]
        assert statuses[0] == "pulling manifest" and statuses[-1] == "success"
        progress = [x for x in lines if "completed" in x]
        assert progress and progress[-1]["completed"] == progress[-1]["total"] > 0
        assert store.resolve("pulled").is_file()
        one = await c.post("/api/pull", json={"model": "pulled", "registry": str(reg), "stream": False})
        assert await one.get_json() == {"status": "success"}
        missing = await c.post("/api/pull", json={"model": "nope", "registry": str(reg)})
        assert missing.status_code == 404

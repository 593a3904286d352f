"""The app on the real AsyncEngine in-process (tiny random llama): HTTP gives exactly what the engine
gives, timeouts abort sequences and free their KV blocks, a full queue is a 503 with Retry-After."""

from __future__ import annotations

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
from modelc.request import SamplingParams
from modelc.server.app import create_app
from modelc.server.state import ServerConfig, ServerState
from tests.server.conftest import error_of
from tests.server.tiny_model import make_served_model

pytestmark = pytest.mark.anyio


def engine_config(**sched) -> EngineConfig:
    return EngineConfig(threads=1, cache=CacheConfig(kv_cache_tokens=2048), scheduler=SchedulerConfig(**sched))


async def test_http_equals_direct_engine() -> None:
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_served_model(), engine_config()) as eng:
            c = create_app(ServerState(eng, ServerConfig(log_requests=False))).test_client()
            ids = eng.tokenizer.encode("The cat")
            direct = []
            async for ev in eng.generate(ids, SamplingParams(max_tokens=6, temperature=0, logprobs=True)):
                direct.append(ev)
            r = await c.post("/v1/completions", json={"prompt": ids, "max_tokens": 6, "temperature": 0, "logprobs": 0})
            body = await r.get_json()
            choice = body["choices"][0]
            assert choice["text"] == "".join(e.text for e in direct[:-1])
            assert choice["logprobs"]["token_logprobs"] == pytest.approx([e.logprob for e in direct[:-1]], abs=1e-5)
            assert body["usage"]["completion_tokens"] == direct[-1].completion_tokens


async def test_timeout_aborts_and_frees_blocks() -> None:
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_served_model(), engine_config()) as eng:
            c = create_app(ServerState(eng, ServerConfig(request_timeout_s=0.3, log_requests=False))).test_client()
            r = await c.post("/v1/completions", json={"prompt": "x", "max_tokens": 2000, "ignore_eos": True})
            await error_of(r, 408)
            for _ in range(200):
                stats = eng.stats()
                if stats.get("running") == 0 and stats.get("kv_blocks_used") == 0:
                    break
                await anyio.sleep(0.02)
            assert stats["running"] == 0 and stats["kv_blocks_used"] == 0, stats


async def test_queue_full_is_503() -> None:
    cfg = engine_config(max_num_seqs=1, max_batch_tokens=64, max_queue=1)
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_served_model(), cfg) as eng:
            c = create_app(ServerState(eng, ServerConfig(log_requests=False))).test_client()
            done: list = []

            async def long() -> None:
                body = {"prompt": "x", "max_tokens": 100, "ignore_eos": True}
                done.append(await c.post("/v1/completions", json=body))

            async with anyio.create_task_group() as tg:
                tg.start_soon(long)  # runs
                tg.start_soon(long)  # waits: the queue (max_queue=1) is now full
                while (eng.stats().get("running"), eng.stats().get("waiting")) != (1, 1):
                    await anyio.sleep(0.01)
                r = await c.post("/v1/completions", json={"prompt": "y", "max_tokens": 2})
                await error_of(r, 503)
                assert int(r.headers["Retry-After"]) >= 1
                # llama-server's /slots from the real scheduler: its one slot runs the first request (the
                # waiting one holds none), so fail_on_no_slot answers 503
                (slot,) = await (await c.get("/slots")).get_json()
                assert slot["id"] == 0 and slot["is_processing"] and slot["n_ctx"] == eng.context_length
                assert slot["n_prompt_tokens"] == len(eng.tokenizer.encode("x")) and slot["params"]["n_predict"] == 100
                assert slot["params"]["ignore_eos"] is True and slot["next_token"][0]["n_remain"] <= 100
                assert slot["n_past"] >= slot["n_prompt_tokens"] - 1
                await error_of(await c.get("/slots?fail_on_no_slot=1"), 503)
            assert [d.status_code for d in done] == [200, 200]
            (slot,) = await (await c.get("/slots")).get_json()
            assert slot == {
                "id": 0,
                "n_ctx": eng.context_length,
                "speculative": False,
                "is_processing": False,
                "n_past": 0,
            }


def write_adapter(path, seed: int = 1, rank: int = 4) -> None:
    """A random PEFT-named LoRA for the tiny llama's q and down projections (C=64, F=128)."""
    import numpy as np
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    t = {}
    for i in (0, 1):
        for mod, proj, out_dim, in_dim in (("self_attn", "q", 64, 64), ("mlp", "down", 64, 128)):
            base = f"base_model.model.model.layers.{i}.{mod}.{proj}_proj"
            t[base + ".lora_A.weight"] = (rng.standard_normal((rank, in_dim)) * 0.5).astype(np.float32)
            t[base + ".lora_B.weight"] = (rng.standard_normal((out_dim, rank)) * 0.5).astype(np.float32)
    save_file(t, str(path))


async def test_lora_load_changes_output_and_unload_restores(tmp_path) -> None:
    write_adapter(tmp_path / "ad.safetensors")
    body = {"prompt": "The cat", "max_tokens": 4, "temperature": 0, "logprobs": 0}
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_served_model(), engine_config()) as eng:
            config = ServerConfig(log_requests=False, control_token="tok", adapters_dir=str(tmp_path))
            c = create_app(ServerState(eng, config)).test_client()
            auth = {"Authorization": "Bearer tok"}

            async def logprobs() -> list[float]:
                r = await (await c.post("/v1/completions", json=body)).get_json()
                return r["choices"][0]["logprobs"]["token_logprobs"]

            base = await logprobs()
            r = await c.post("/lora/load", json={"path": str(tmp_path / "ad.safetensors"), "alpha": 8.0}, headers=auth)
            assert r.status_code == 200, await r.get_data()
            assert (await r.get_json())["name"] == "ad"
            adapted = await logprobs()
            assert adapted != pytest.approx(base, abs=1e-4)
            # llama-server's /lora-adapters on the same hot-swap: a global scale of 0 is the base model again,
            # and setting the loaded alpha back gives the adapted output
            listed = await (await c.get("/lora-adapters")).get_json()
            assert listed == [{"id": 0, "path": "ad.safetensors", "scale": 8.0}]
            assert (await c.post("/lora-adapters", json=[{"id": 0, "scale": 0.0}], headers=auth)).status_code == 200
            assert await logprobs() == pytest.approx(base, abs=1e-5)
            assert (await c.post("/lora-adapters", json=[{"id": 0, "scale": 8.0}], headers=auth)).status_code == 200
            assert await logprobs() == pytest.approx(adapted, abs=1e-5)
            assert (await c.post("/lora/unload", json={"name": "ad"}, headers=auth)).status_code == 200
            assert await logprobs() == pytest.approx(base, abs=1e-5)
            missing = await c.post("/lora/load", json={"path": "missing.safetensors"}, headers=auth)
            await error_of(missing, 404)

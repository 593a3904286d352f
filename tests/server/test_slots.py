"""llama-server's GET /slots on the fake engine: idle slots, a running request's slot in llama-server's shape with
its sampling settings, ?fail_on_no_slot, and the 501 of a model without slots. tests/server/test_real_engine.py
reads a real scheduler's slots while it generates."""

from __future__ import annotations

import anyio
import pytest

from tests.server.conftest import error_of
from tests.server.fake_engine import FakeEngine

pytestmark = pytest.mark.anyio


async def test_idle_slots(client) -> None:
    r = await client.get("/slots")
    assert r.status_code == 200
    slots = await r.get_json()
    assert [s["id"] for s in slots] == [0, 1, 2, 3]
    assert slots[0] == {"id": 0, "n_ctx": 2048, "speculative": False, "is_processing": False, "n_past": 0}


async def _while_generating(c, body: dict, check) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(c.post, "/completion", body)
        with anyio.fail_after(10):
            while not c.engine.active:
                await anyio.sleep(0.01)
            while next(iter(c.engine.active.values()))[2] < 2:  # a few tokens decoded
                await anyio.sleep(0.01)
        await check()


async def test_a_running_request_in_llama_server_s_shape(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.02))
    body = {"prompt": "abc", "n_predict": 40, "temperature": 0.5, "top_k": 7, "seed": 11, "repeat_penalty": 1.1}

    async def check() -> None:
        slots = await (await c.get("/slots")).get_json()
        busy = [s for s in slots if s["is_processing"]]
        assert len(busy) == 1 and len(slots) == 4
        s = busy[0]
        assert s["id_task"] >= 1 and s["n_prompt_tokens"] == 4 and s["n_prompt_tokens_cache"] == 1
        assert s["n_prompt_tokens_processed"] == 3 and s["n_past"] >= 4 + 2
        p = s["params"]
        assert (p["n_predict"], p["temperature"], p["top_k"], p["seed"], p["repeat_penalty"]) == (40, 0.5, 7, 11, 1.1)
        assert p["lora"] == []  # no `lora` list: llama-server's empty one
        (nt,) = s["next_token"]
        assert nt["has_next_token"] and nt["n_decoded"] >= 2 and nt["n_remain"] == 40 - nt["n_decoded"]
        assert "prompt" not in s and "generated" not in s  # metrics only: never another client's text

    await _while_generating(c, body, check)


async def test_a_request_s_lora_by_the_ids_of_lora_adapters(make_client, tmp_path) -> None:
    """A slot shows its request's `lora` list as llama-server does, by the ids GET /lora-adapters lists (ids
    that stay the adapters' while they are loaded)."""
    auth = {"headers": {"Authorization": "Bearer tok"}}
    c = make_client(FakeEngine(delay_s=0.02), control_token="tok", adapters_dir=str(tmp_path))
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.safetensors").write_bytes(b"")
        assert (await c.post("/lora/load", {"path": f"{name}.safetensors", "global": False}, **auth)).status_code == 200
    await c.post("/lora/unload", {"name": "a"}, **auth)
    listed = {x["path"]: x["id"] for x in await (await c.get("/lora-adapters")).get_json()}
    assert listed == {"b.safetensors": 1, "c.safetensors": 2}
    lora = [{"id": 2, "scale": 0.5}, {"id": 1, "scale": 2.0}]

    async def check() -> None:
        (busy,) = [s for s in await (await c.get("/slots")).get_json() if s["is_processing"]]
        assert busy["params"]["lora"] == [{"id": 1, "scale": 2.0}, {"id": 2, "scale": 0.5}]

    await _while_generating(c, {"prompt": "abc", "n_predict": 40, "lora": lora}, check)


async def test_fail_on_no_slot(make_client) -> None:
    c = make_client(FakeEngine(delay_s=0.02, num_slots=1))
    assert (await c.get("/slots?fail_on_no_slot=1")).status_code == 200  # idle: fine

    async def check() -> None:
        err = await error_of(await c.get("/slots?fail_on_no_slot=1"), 503)
        assert err["type"] == "unavailable_error"
        assert (await c.get("/slots")).status_code == 200

    await _while_generating(c, {"prompt": "abc", "n_predict": 40, "seed": -1}, check)


async def test_a_model_without_slots_is_501(make_client) -> None:
    class Encoder(FakeEngine):
        async def slots(self):
            return None

    err = await error_of(await make_client(Encoder()).get("/slots"), 501)
    assert err["type"] == "not_supported_error" and "/slots" in err["message"]

"""GET /v1/models/{id} has `capabilities` for every model the daemon serves: the default, a loaded
one, a stored one (from its header), NAME:latest."""

from __future__ import annotations

import pytest

from tests.server.manager.test_ollama_routes import daemon_app

pytestmark = pytest.mark.anyio


async def test_every_model_card_has_capabilities(home) -> None:
    async with daemon_app() as c:
        cards = {m["id"]: m for m in (await (await c.get("/v1/models")).get_json())["data"]}
        assert set(cards) >= {"main", "alpha", "beta"}
        for name, card in cards.items():
            one = await (await c.get(f"/v1/models/{name}")).get_json()
            assert one["capabilities"] == card["capabilities"] and "completion" in one["capabilities"], name
        latest = await (await c.get("/v1/models/alpha:latest")).get_json()
        assert latest["capabilities"] == cards["alpha"]["capabilities"]
        await c.post("/api/generate", json={"model": "beta", "prompt": "hi", "stream": False})  # loaded now
        assert (await (await c.get("/v1/models/beta")).get_json())["capabilities"]

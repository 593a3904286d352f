"""llama-server's GET/POST /lora-adapters on the fake engine: stable ids, paths inside --adapters-dir only,
global scales set by id (the others 0), a control route for POST, clear 400s. tests/server/test_real_engine.py
checks that a scale set here changes and restores a real model's output."""

from __future__ import annotations

import pytest

from tests.server.conftest import error_of

pytestmark = pytest.mark.anyio
AUTH = {"headers": {"Authorization": "Bearer tok"}}


@pytest.fixture
async def loaded(make_client, tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("a.safetensors", "sub/b.safetensors"):
        (tmp_path / name).write_bytes(b"")  # the fake engine does not read them
    c = make_client(control_token="tok", adapters_dir=str(tmp_path))
    for path, alpha, glob in (("a.safetensors", 2.0, True), ("sub/b.safetensors", 1.0, False)):
        r = await c.post("/lora/load", {"path": path, "alpha": alpha, "global": glob}, **AUTH)
        assert r.status_code == 200, await r.get_data()
    return c


async def test_list_is_llama_server_s(loaded, tmp_path) -> None:
    r = await (await loaded.get("/lora-adapters")).get_json()
    assert r == [{"id": 0, "path": "a.safetensors", "scale": 2.0}, {"id": 1, "path": "sub/b.safetensors", "scale": 0.0}]
    assert str(tmp_path) not in str(r)  # nothing of the server's file system beyond the adapters directory


async def test_no_adapters_is_an_empty_list(client) -> None:
    assert await (await client.get("/lora-adapters")).get_json() == []


async def test_post_sets_global_scales_by_id_and_zeroes_the_rest(loaded) -> None:
    r = await loaded.post("/lora-adapters", [{"id": 1, "scale": 0.5}], **AUTH)
    assert r.status_code == 200 and await r.get_json() == {"success": True}
    assert loaded.engine.global_scales == {"b": 0.5}  # "a" was not listed: 0, no longer applied
    scales = [x["scale"] for x in await (await loaded.get("/lora-adapters")).get_json()]
    assert scales == [0.0, 0.5]
    await loaded.post("/lora-adapters", [{"id": 0, "scale": 1.5}, {"id": 1, "scale": 0.25}], **AUTH)
    assert loaded.engine.global_scales == {"a": 1.5, "b": 0.25}  # several at once: their deltas add up
    await loaded.post("/lora-adapters", [], **AUTH)
    assert loaded.engine.global_scales == {}


async def test_ids_do_not_move(loaded) -> None:
    """An id names its adapter while it is loaded: unloading one renumbers no other, a new adapter never takes
    an id given before, and loading a name again keeps its id."""
    await loaded.post("/lora/unload", {"name": "a"}, **AUTH)
    assert await (await loaded.get("/lora-adapters")).get_json() == [
        {"id": 1, "path": "sub/b.safetensors", "scale": 0.0}
    ]
    await loaded.post("/lora/load", {"path": "a.safetensors", "name": "c"}, **AUTH)
    await loaded.post("/lora/load", {"path": "sub/b.safetensors", "name": "b", "alpha": 3.0}, **AUTH)  # replaced
    listed = await (await loaded.get("/lora-adapters")).get_json()
    assert [(x["id"], x["path"]) for x in listed] == [(1, "sub/b.safetensors"), (2, "a.safetensors")]
    # POST speaks the same ids: 1 is still b; 0 is gone (a 400, not another adapter)
    assert (await loaded.post("/lora-adapters", [{"id": 1, "scale": 0.5}], **AUTH)).status_code == 200
    assert loaded.engine.global_scales == {"b": 0.5}
    await error_of(await loaded.post("/lora-adapters", [{"id": 0, "scale": 1.0}], **AUTH), 400, "id")


@pytest.mark.parametrize(
    "body,param",
    [
        ({"id": 0, "scale": 1.0}, "lora"),  # an object, not llama-server's array
        ([{"id": 2, "scale": 1.0}], "id"),  # no such adapter
        ([{"id": -1, "scale": 1.0}], "id"),
        ([{"id": "0", "scale": 1.0}], "id"),
        ([{"scale": 1.0}], "id"),
        ([5], "id"),
        ([{"id": 0, "scale": "1"}], "scale"),
        ([{"id": 0, "scale": True}], "scale"),
    ],
)
async def test_bad_bodies_are_400(loaded, body, param) -> None:
    await error_of(await loaded.post("/lora-adapters", body, **AUTH), 400, param)
    assert loaded.engine.global_scales == {"a": 2.0}  # unchanged


async def test_post_is_a_control_route(loaded) -> None:
    await error_of(await loaded.post("/lora-adapters", [{"id": 0, "scale": 1.0}]), 403)
    assert loaded.engine.global_scales == {"a": 2.0}

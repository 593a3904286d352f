"""ModelManager: load on first use (shared), keep-alive, max loaded (LRU, never busy), adapters, errors."""

from __future__ import annotations

import contextlib

import anyio
import pytest

from modelc.errors import ArtifactError, InvalidRequestError, ModelcError, NotFoundError, OverloadedError
from modelc.request import SamplingParams
from modelc.server.manager.models import ModelManager, parse_keep_alive
from tests.server.fake_engine import FakeEngine
from tests.server.manager.conftest import FakeOpener

pytestmark = pytest.mark.anyio


@contextlib.asynccontextmanager
async def running(opener: FakeOpener, **kw):
    manager = ModelManager(opener=opener, tick_s=0.02, grace_s=0.05, **kw)
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await tg.start(manager.run)
            manager.set_default(FakeEngine(), "main")
            yield manager
            tg.cancel_scope.cancel()


async def test_concurrent_first_requests_share_one_load(home) -> None:
    opener = FakeOpener(delay_s=0.1)
    async with running(opener) as m:
        views = []

        async def one() -> None:
            views.append(await m.get("alpha"))

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
        assert opener.opened == ["alpha"]
        assert {v.name for v in views} == {"alpha"} and views[0].engine is views[1].engine
        assert [e.name for e in m.loaded()] == ["main", "alpha"]
        assert (await m.get("alpha:latest")).engine is views[0].engine


async def test_default_model_by_name_and_pinned(home) -> None:
    opener = FakeOpener()
    async with running(opener) as m:
        view = await m.get("main")
        assert view.engine is m.default.engine and view.name == "main"
        assert (await m.get("fake-model")).engine is m.default.engine  # the engine's own name
        with pytest.raises(ModelcError, match="default model"):
            await m.unload("main")
        assert opener.opened == []


async def test_keep_alive_zero_unloads_after_use_and_minus_one_never(home) -> None:
    opener = FakeOpener()
    async with running(opener, keep_alive_s=0) as m:
        view = await m.get("alpha")
        async for _ in view.generate([1, 2], SamplingParams(max_tokens=2)):
            pass
        await m.get("beta", keep_alive_s=-1)
        for _ in range(100):
            if "alpha" in opener.closed:
                break
            await anyio.sleep(0.02)
        assert opener.closed == ["alpha"]
        await anyio.sleep(0.2)
        assert [e.name for e in m.loaded()] == ["main", "beta"]
        assert m.describe(m.find("beta"))["expires_at"] is None


async def test_max_loaded_unloads_least_recently_used_idle(home) -> None:
    opener = FakeOpener()
    async with running(opener, max_loaded_models=3) as m:
        await m.get("alpha")
        await m.get("beta")
        await m.get("alpha")  # alpha is now the more recent
        await m.get("gamma")
        assert opener.closed == ["beta"]
        assert sorted(e.name for e in m.loaded()) == ["alpha", "gamma", "main"]


async def test_busy_model_is_never_unloaded_for_room(home) -> None:
    opener = FakeOpener()
    async with running(opener, max_loaded_models=2) as m:
        view = await m.get("alpha")
        gen = view.generate([1, 2], SamplingParams(max_tokens=50))
        await anext(gen)  # one request in flight on alpha
        with pytest.raises(OverloadedError, match="busy"):
            await m.get("beta")
        await gen.aclose()
        await m.get("beta")
        assert opener.closed == ["alpha"]


async def test_explicit_unload_and_reload(home) -> None:
    opener = FakeOpener()
    async with running(opener) as m:
        await m.get("alpha")
        assert await m.unload("alpha") is True
        assert await m.unload("alpha") is False
        await m.get("alpha")
        assert opener.opened == ["alpha", "alpha"] and opener.closed == ["alpha"]


async def test_load_error_reaches_every_waiter_and_is_retried(home) -> None:
    opener = FakeOpener(fail={"alpha"}, delay_s=0.05)
    async with running(opener) as m:
        errors = []

        async def one() -> None:
            try:
                await m.get("alpha")
            except ArtifactError as e:
                errors.append(e)

        async with anyio.create_task_group() as tg:
            tg.start_soon(one)
            tg.start_soon(one)
        assert len(errors) == 2 and opener.opened == ["alpha"]
        assert m.find("alpha") is None
        opener.fail.clear()
        await m.get("alpha")
        assert opener.opened == ["alpha", "alpha"]


async def test_unknown_model_is_not_found(home) -> None:
    async with running(FakeOpener()) as m:
        with pytest.raises(NotFoundError, match="nope"):
            await m.get("nope")


async def test_adapter_name_maps_to_sampling_params(home) -> None:
    async with running(FakeOpener()) as m:
        with pytest.raises(NotFoundError, match="no LoRA adapter 'ad'"):
            await m.get("alpha:ad")
        await m.load_adapter("alpha", "ad", "/x/ad.safetensors", alpha=0.5)
        view = await m.get("alpha:ad")
        async for _ in view.generate([1, 2], SamplingParams(max_tokens=1)):
            pass
        assert view.engine.calls[-1][1].adapter == "ad" and view.name == "alpha:ad"
        assert m.describe(m.find("alpha"))["adapters"] == ["ad"]
        await m.unload_adapter("alpha", "ad")
        with pytest.raises(NotFoundError):
            await m.get("alpha:ad")


async def test_describe_reports_memory_and_requests(home) -> None:
    async with running(FakeOpener()) as m:
        view = await m.get("alpha")
        d = m.describe(m.find("alpha"))
        assert d["size_bytes"] == (home / "models" / "alpha.modelc").stat().st_size
        assert d["memory_bytes"] >= d["size_bytes"] and d["kv_blocks_total"] == 64
        assert d["running"] == 0 and d["expires_at"] is not None and not d["default"]
        gen = view.generate([1], SamplingParams(max_tokens=10))
        await anext(gen)
        assert m.describe(m.find("alpha"))["running"] == 1
        await gen.aclose()


def test_parse_keep_alive() -> None:
    assert parse_keep_alive(None) is None
    assert parse_keep_alive(0) == 0 and parse_keep_alive("0") == 0
    assert parse_keep_alive("5m") == 300 and parse_keep_alive("1h30m") == 5400 and parse_keep_alive("10s") == 10
    assert parse_keep_alive(-1) == -1 and parse_keep_alive("-1m") < 0
    for bad in ("soon", True, [1]):
        with pytest.raises(InvalidRequestError):
            parse_keep_alive(bad)


def test_max_loaded_models_checked() -> None:
    with pytest.raises(InvalidRequestError):
        ModelManager(max_loaded_models=0)

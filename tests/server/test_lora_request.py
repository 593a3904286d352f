"""llama-server's per-request `lora` ([{id, scale}]) on /completion, /infill, /v1/completions and
/v1/chat/completions: on the fake engine, what reaches the engine (the mix by adapter name) and the 400s; on the
real engine (tiny random llama), the tokens: scale 0 is the base model, scale 1 the adapter named, and
requests with different mixes sharing one batch each get what they get alone."""

from __future__ import annotations

import time

import anyio
import pytest

from modelc.api.async_engine import AsyncEngine
from modelc.engine.runner import Runner
from modelc.errors import InvalidRequestError
from modelc.request import SamplingParams, TokenEvent
from modelc.server.app import create_app
from modelc.server.state import ServerConfig, ServerState
from tests.server.conftest import error_of
from tests.server.test_real_engine import engine_config, write_adapter
from tests.server.tiny_model import make_served_model

pytestmark = pytest.mark.anyio
AUTH = {"headers": {"Authorization": "Bearer tok"}}
ROUTES = {
    "/completion": {"prompt": "ab", "n_predict": 2},
    "/v1/completions": {"prompt": "ab", "max_tokens": 2},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "ab"}], "max_tokens": 2},
}


@pytest.fixture
async def loaded(make_client, tmp_path):
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.safetensors").write_bytes(b"")  # the fake engine does not read them
    c = make_client(control_token="tok", adapters_dir=str(tmp_path))
    for name in ("a", "b", "c"):
        r = await c.post("/lora/load", {"path": f"{name}.safetensors", "global": False}, **AUTH)
        assert r.status_code == 200, await r.get_data()
    await c.post("/lora/unload", {"name": "a"}, **AUTH)  # ids 1 (b) and 2 (c) stay
    return c


@pytest.mark.parametrize("route", list(ROUTES))
async def test_the_mix_reaches_the_engine_by_name(loaded, route) -> None:
    lora = [{"id": 2, "scale": 0.5}, {"id": 1, "scale": 2}, {"id": 2, "scale": -1.5}]  # the last entry for 2 wins
    r = await loaded.post(route, {**ROUTES[route], "lora": lora})
    assert r.status_code == 200, await r.get_data()
    assert loaded.engine.calls[-1][1].lora == (("b", 2.0), ("c", -1.5))
    await loaded.post(route, {**ROUTES[route], "lora": [{"id": 1}]})  # llama-server's: a missing scale is 0
    assert loaded.engine.calls[-1][1].lora == (("b", 0.0),)
    await loaded.post(route, {**ROUTES[route], "lora": []})  # every adapter at 0: the base model
    assert loaded.engine.calls[-1][1].lora == ()
    await loaded.post(route, ROUTES[route])  # no list: the global scales
    assert loaded.engine.calls[-1][1].lora is None
    assert not any("lora" in line.get("ignored_fields", ()) for line in loaded.log_lines())


@pytest.mark.parametrize(
    "lora",
    [
        {"id": 1, "scale": 1.0},  # an object, not an array
        "b",
        [5],
        [{"id": 0, "scale": 1.0}],  # unloaded: ids are not reused
        [{"id": 3, "scale": 1.0}],  # never given
        [{"id": -1, "scale": 1.0}],
        [{"id": "1", "scale": 1.0}],
        [{"id": 1.0, "scale": 1.0}],
        [{"scale": 1.0}],
        [{"id": 1, "scale": "1"}],
        [{"id": 1, "scale": True}],
        [{"id": 1, "scale": None}],
    ],
)
@pytest.mark.parametrize("route", list(ROUTES))
async def test_bad_lora_is_400(loaded, route, lora) -> None:
    await error_of(await loaded.post(route, {**ROUTES[route], "lora": lora}), 400, "lora")
    assert loaded.engine.calls == []


def test_sampling_params_keep_one_canonical_mix() -> None:
    p = SamplingParams(lora=(("b", 1), ("a", 0.5), ("b", 2.0)))
    assert p.lora == (("a", 0.5), ("b", 2.0)) and p.adapter_names == ("a", "b")
    assert SamplingParams(adapter="a", lora=(("b", 1.0),)).adapter_names == ("a", "b")
    keys = {SamplingParams().adapter_key, SamplingParams(lora=()).adapter_key, SamplingParams(adapter="a").adapter_key}
    assert len(keys) == 3  # the global scales, the base model, an adapter: never one another's cached blocks
    for bad in ((("a", float("nan")),), (("", 1.0),), (("a", "1"),)):
        with pytest.raises(InvalidRequestError, match="lora"):
            SamplingParams(lora=bad)


async def test_tokens_of_mixes_alone_and_sharing_a_batch(tmp_path, monkeypatch) -> None:
    """Scale 0 is the base model (over a global scale), scale 1 the adapter named at its alpha 1; three requests
    (two mixes and the base model) that share batches each get the tokens they get alone."""
    write_adapter(tmp_path / "a.safetensors", seed=1, rank=2)
    write_adapter(tmp_path / "b.safetensors", seed=2, rank=2)
    batches: list[set] = []
    execute = Runner.execute

    def recording(self, plan):  # each step's mixes; a short sleep so that concurrent requests overlap
        batches.append({c.params.adapter_key for c in plan.chunks})
        time.sleep(0.002)
        return execute(self, plan)

    monkeypatch.setattr(Runner, "execute", recording)
    with anyio.fail_after(120):
        async with AsyncEngine.open(make_served_model(fim=True), engine_config()) as eng:
            config = ServerConfig(log_requests=False, control_token="tok", adapters_dir=str(tmp_path))
            c = create_app(ServerState(eng, config)).test_client()
            for name in ("a", "b"):
                r = await c.post("/lora/load", json={"path": f"{name}.safetensors", "global": False}, **AUTH)
                assert r.status_code == 200, await r.get_data()
            ids = eng.tokenizer.encode("The cat sat")

            async def direct(params: SamplingParams) -> list[int]:
                return [ev.token_id async for ev in eng.generate(ids, params) if isinstance(ev, TokenEvent)]

            async def http(route: str, lora: list | None) -> list[int]:
                body = {"prompt": ids, "n_predict": 12, "temperature": 0, "ignore_eos": True, "return_tokens": True}
                if route == "/infill":
                    body = {**body, "prompt": "", "input_prefix": "The cat", "input_suffix": " sat"}
                r = await c.post(route, json=body if lora is None else {**body, "lora": lora})
                assert r.status_code == 200, await r.get_data()
                return (await r.get_json())["tokens"]

            greedy = SamplingParams(max_tokens=12, temperature=0, ignore_eos=True)
            base = await direct(greedy)
            named = await direct(SamplingParams(max_tokens=12, temperature=0, ignore_eos=True, adapter="a"))
            assert named != base
            # a global scale for a: requests without `lora` run it; `lora` overrides it for its own request
            assert (await c.post("/lora-adapters", json=[{"id": 0, "scale": 1.0}], **AUTH)).status_code == 200
            assert await direct(greedy) == named
            assert await http("/completion", [{"id": 0, "scale": 0.0}]) == base
            assert await http("/completion", []) == base
            assert await (await c.post("/lora-adapters", json=[], **AUTH)).get_json() == {"success": True}
            assert await http("/completion", [{"id": 0, "scale": 1.0}]) == named
            assert await http("/infill", [{"id": 0, "scale": 1.0}]) != await http("/infill", None)
            mix = [{"id": 0, "scale": 0.5}, {"id": 1, "scale": 2.0}]
            alone = {"mix": await http("/completion", mix), "b": await http("/completion", [{"id": 1, "scale": 1}])}
            assert len({tuple(base), tuple(named), tuple(alone["mix"]), tuple(alone["b"])}) == 4
            batches.clear()
            together: dict[str, list[int]] = {}

            async def run(key: str, lora: list | None) -> None:
                together[key] = await http("/completion", lora)

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "mix", mix)
                tg.start_soon(run, "b", [{"id": 1, "scale": 1}])
                tg.start_soon(run, "base", None)
            assert together == {**alone, "base": base}
            assert max(len(keys) for keys in batches) == 3  # the three mixes shared a batch

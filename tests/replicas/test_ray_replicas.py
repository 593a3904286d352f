"""Engine replicas on a real Ray cluster of simulated nodes (ray.cluster_utils.Cluster, every socket
on 127.0.0.1): generation, routing, cancellation, backpressure, failover, LoRA broadcast, sha checks.

Marked `ray`: the default run deselects them; CI installs the extra and runs `pytest -m ray`.
"""

from __future__ import annotations

import json
import os

import anyio
import numpy as np
import pytest
from safetensors.numpy import save_file

from modelc.api.async_engine import AsyncEngine
from modelc.artifact.writer import write_artifact
from modelc.config import CacheConfig, EngineConfig, ReplicaConfig, SchedulerConfig
from modelc.errors import ChecksumError, OverloadedError
from modelc.replicas.replica import ModelRef, fetch_model, file_sha256
from modelc.request import Finished, SamplingParams, TokenEvent
from tests.server.tiny_model import make_served_model

pytestmark = [pytest.mark.ray, pytest.mark.anyio]
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # read when ray is imported: keeps Ray on 127.0.0.1
ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

NODE = {"num_cpus": 1, "object_store_memory": 80 * 2**20, "node_ip_address": "127.0.0.1"}
GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Ray's object refs are asyncio awaitables


@pytest.fixture(scope="module")
def cluster():
    c = cluster_utils.Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 0, "object_store_memory": 80 * 2**20, "include_dashboard": False,
                        "node_ip_address": "127.0.0.1"},
    )  # fmt: skip
    nodes = [c.add_node(**NODE) for _ in range(2)]
    ray.init(address=c.address, log_to_driver=False)
    try:
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


@pytest.fixture(scope="module")
def artifact(tmp_path_factory):
    path = tmp_path_factory.mktemp("replicas") / "tiny.modelc"
    write_artifact(make_served_model(), path)
    return path


def config(**kw) -> EngineConfig:
    return EngineConfig(
        threads=1,
        cache=CacheConfig(kv_cache_mb=4),
        scheduler=SchedulerConfig(max_num_seqs=8, max_queue=8),
        replicas=ReplicaConfig(replicas=2, cpus_per_replica=1, **kw),
    )


async def tokens(engine, prompt, params=GREEDY) -> list[int]:
    out = []
    async for ev in engine.generate(prompt, params):
        if isinstance(ev, TokenEvent):
            out.append(ev.token_id)
        else:
            assert ev.finish_reason == "length", ev
    return out


async def replica_stats(engine) -> list[dict]:
    return [await a.stats.remote() for a in engine._actors]


async def wait_for(predicate, timeout_s: float = 120.0) -> None:
    with anyio.fail_after(timeout_s):
        while not await predicate():
            await anyio.sleep(0.2)


async def test_replicas_generate_what_one_engine_generates_and_route_by_prefix(cluster, artifact):
    from modelc.replicas.engine import ReplicaEngine

    system = list(range(3, 3 + 64))
    prompts = [system + [100 + i, 101 + i] for i in range(4)]
    async with AsyncEngine.open(str(artifact), EngineConfig(threads=1, cache=CacheConfig(kv_cache_mb=4))) as local:
        want = [await tokens(local, p) for p in prompts]
    async with ReplicaEngine.open(artifact, config()) as engine:
        got = [await tokens(engine, p) for p in prompts]
        assert got == want
        rows = await replica_stats(engine)
        hits = sorted(r["prefix_hits"] for r in rows)
        assert hits[0] == 0 and hits[1] >= 3 * 64  # one replica got all four; three hit the cached system prompt
        assert engine.stats()["replicas"][0]["healthy"]


async def test_leaving_a_stream_cancels_it_on_the_replica_and_frees_its_kv(cluster, artifact):
    from modelc.replicas.engine import ReplicaEngine

    long = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    async with ReplicaEngine.open(artifact, config()) as engine:
        events = engine.generate(list(range(3, 40)), long)
        seen = 0
        async for ev in events:
            seen += isinstance(ev, TokenEvent)
            if seen == 3:
                break
        await events.aclose()

        async def freed() -> bool:
            return all(r["kv_blocks_used"] == 0 and r["running"] == 0 for r in await replica_stats(engine))

        await wait_for(freed, 30)


async def test_every_queue_full_is_overloaded(cluster, artifact):
    from modelc.replicas.engine import ReplicaEngine

    long = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    async with ReplicaEngine.open(artifact, config(max_in_flight=1)) as engine:
        streams = [engine.generate([5 + i] * 20, long) for i in range(2)]
        for s in streams:
            assert isinstance(await s.__anext__(), TokenEvent)  # each replica holds one request
        with pytest.raises(OverloadedError):
            await engine.generate([9] * 20, long).__anext__()
        for s in streams:
            await s.aclose()


async def test_a_dead_replica_loses_no_unstreamed_request_and_rejoins(cluster, artifact):
    from modelc.replicas.engine import ReplicaEngine

    prompt = list(range(3, 60))
    async with ReplicaEngine.open(artifact, config(policy="affinity")) as engine:
        want = await tokens(engine, prompt)
        owner = engine._router._owner[engine._router._owner.__iter__().__next__()]
        pid = await engine._actors[owner].ping.remote()
        os.kill(pid, 9)  # the replica's process dies; the front has not noticed yet
        assert await tokens(engine, prompt) == want  # routed to the dead one, retried on the other
        assert engine.num_failovers >= 1 and not engine._loads[owner].healthy

        async def back() -> bool:
            return engine._loads[owner].healthy

        await wait_for(back, 180)  # Ray restarted the actor; the watch task reloaded it
        assert await engine._actors[owner].ping.remote() != pid


async def test_a_replica_dying_mid_stream_ends_it_with_an_error_event(cluster, artifact):
    from modelc.replicas.engine import ReplicaEngine

    long = SamplingParams(max_tokens=400, temperature=0.0, ignore_eos=True)
    async with ReplicaEngine.open(artifact, config()) as engine:
        events = engine.generate(list(range(3, 30)), long)
        assert isinstance(await events.__anext__(), TokenEvent)
        rid = next(iter(engine._live.values()))[0]
        os.kill(await engine._actors[rid].ping.remote(), 9)
        last = None
        async for ev in events:
            last = ev
        assert isinstance(last, Finished) and last.finish_reason == "error" and "died" in last.error


def _write_adapter(folder, seed: int) -> None:
    """A PEFT LoRA adapter (rank 4, alpha 8) on the tiny model's q projections, in `folder`."""
    rng = np.random.default_rng(seed)
    t = {}
    for i in (0, 1):
        base = f"base_model.model.model.layers.{i}.self_attn.q_proj"
        t[base + ".lora_A.weight"] = (rng.standard_normal((4, 64)) * 0.5).astype(np.float32)
        t[base + ".lora_B.weight"] = (rng.standard_normal((64, 4)) * 0.5).astype(np.float32)
    save_file(t, str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "peft_type": "LORA"}))


async def test_lora_is_broadcast_to_every_replica(cluster, artifact, tmp_path):
    from modelc.replicas.engine import ReplicaEngine

    _write_adapter(tmp_path, seed=0)
    async with ReplicaEngine.open(artifact, config(policy="least_loaded")) as engine:
        prompt = [20] * 40
        base = await tokens(engine, prompt)
        await engine.load_adapter("a1", str(tmp_path))
        assert engine.adapters == ["a1"]
        with_adapter = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True, adapter="a1")
        outs: list[list[int]] = []
        async with anyio.create_task_group() as tg:  # two at once: one on each replica
            for _ in range(2):
                tg.start_soon(_collect, engine, prompt, with_adapter, outs)
        assert outs[0] == outs[1] != base
        await engine.unload_adapter("a1")
        assert engine.adapters == [] and await tokens(engine, prompt) == base


async def test_global_scales_slots_and_raw_embeddings_reach_every_replica(cluster, artifact, tmp_path):
    """llama-server's POST /lora-adapters, GET /slots and embd_normalize -1 on replicas: the scales apply on each
    replica, slots are every replica's, numbered one after the other. (A restarted replica's scales are not
    tested here.)"""
    from modelc.replicas.engine import ReplicaEngine

    _write_adapter(tmp_path, seed=1)
    async with ReplicaEngine.open(artifact, config(policy="least_loaded")) as engine:
        prompt = [21] * 40
        base = await tokens(engine, prompt)
        await engine.load_adapter("a1", str(tmp_path))
        named = await tokens(engine, prompt, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True,
                                                            adapter="a1"))  # fmt: skip
        assert named != base and await tokens(engine, prompt) == base
        await engine.scale_adapters({"a1": 1.0})  # every request naming no adapter now runs a1 at its alpha
        assert engine.adapter_table() == [(0, "a1", str(tmp_path), 1.0)]
        outs: list[list[int]] = []
        async with anyio.create_task_group() as tg:  # two at once: one on each replica
            for _ in range(2):
                tg.start_soon(_collect, engine, prompt, GREEDY, outs)
        assert outs == [named, named]
        slots = await engine.slots()
        assert [s.slot_id for s in slots] == list(range(16))  # 2 replicas x max_num_seqs 8
        await engine.scale_adapters({"a1": 0.0})
        assert engine.adapter_table()[0][3] == 0.0 and await tokens(engine, prompt) == base
        unit = np.asarray(await engine.embed([[5, 6, 7], [8, 9]]))
        raw = np.asarray(await engine.embed([[5, 6, 7], [8, 9]], normalize=False))
        np.testing.assert_allclose(raw / np.linalg.norm(raw, axis=1, keepdims=True), unit, rtol=1e-5, atol=1e-6)
        assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


async def _collect(engine, prompt, params, outs) -> None:
    outs.append(await tokens(engine, prompt, params))


async def test_a_replica_refuses_a_mismatched_artifact(cluster, artifact, tmp_path):
    from modelc.replicas.engine import ReplicaEngine

    good = file_sha256(artifact)
    assert fetch_model(ModelRef(sha256=good, path=str(artifact))) == artifact
    with pytest.raises(ChecksumError):
        fetch_model(ModelRef(sha256="0" * 64, path=str(artifact)))
    other = tmp_path / "other.modelc"
    write_artifact(make_served_model(seed=1), other)
    engine_cm = ReplicaEngine.open(artifact, config())
    # The front's sha256 is of its own file; a replica whose copy differs refuses to serve.
    import modelc.replicas.engine as front

    real = front.file_sha256
    front.file_sha256 = lambda p: real(other)
    try:
        with pytest.raises(ChecksumError):
            async with engine_cm:
                pass
    finally:
        front.file_sha256 = real


async def test_a_node_removed_mid_load_loses_no_unstreamed_request(cluster, artifact):
    """Runs last of the cluster tests: it takes a node away (and adds one for the restart)."""
    from modelc.replicas.engine import ReplicaEngine

    c, nodes = cluster
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    async with ReplicaEngine.open(artifact, config(policy="least_loaded")) as engine:
        nodes.append(c.add_node(**NODE))  # room for Ray to restart the replica that loses its node
        victim_id = await engine._actors[0].node_id.remote()
        victim = next(n for n in nodes if n.node_id == victim_id)
        results: list[tuple[int, Finished]] = []
        first_token = anyio.Event()

        async def one(i: int) -> None:
            n = 0
            async for ev in engine.generate([30 + i] * 24, params):
                if isinstance(ev, TokenEvent):
                    n += 1
                    first_token.set()
                else:
                    results.append((n, ev))

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(one, i)
            await first_token.wait()
            await anyio.to_thread.run_sync(c.remove_node, victim)
            nodes.remove(victim)
        assert len(results) == 6
        for n, fin in results:  # complete, or cut only after it had streamed tokens
            assert fin.finish_reason == "length" and n == 40 or fin.finish_reason == "error" and n > 0, (n, fin)
        assert engine.num_replica_deaths >= 1

        async def back() -> bool:
            return all(ld.healthy for ld in engine._loads)

        await wait_for(back, 180)
        assert await engine._actors[0].node_id.remote() != victim_id
        assert len(await tokens(engine, [7] * 24)) == 12


def test_modelc_run_with_a_local_ray_cluster_serves_and_stops_it(artifact, tmp_path):
    """The real CLI path: `modelc run --ray local` starts Ray on 127.0.0.1, serves through two
    replicas (per-replica metrics), and SIGTERM stops the server and the cluster it started."""
    import signal
    import subprocess
    import sys

    import httpx

    from tests.server.live import serving_url

    env = {**os.environ, "MODELC_HOME": str(tmp_path / "home"), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    cmd = [sys.executable, "-m", "modelc.cli.main", "run", str(artifact), "--port", "0", "--ray", "local",
           "--replicas", "2", "--kv-cache-mb", "4", "--threads", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        url = serving_url(proc, timeout_s=240)
        r = httpx.post(f"{url}/v1/completions", json={"prompt": "def f(", "max_tokens": 5, "temperature": 0},
                       timeout=120)  # fmt: skip
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
        metrics = httpx.get(f"{url}/metrics", timeout=30).text
        assert 'modelc_replica_up{replica="0"} 1.0' in metrics and 'modelc_replica_up{replica="1"} 1.0' in metrics
        ps = subprocess.run([sys.executable, "-m", "modelc.cli.main", "ps"], env=env, capture_output=True, text=True,
                            timeout=60)  # fmt: skip
        assert ps.returncode == 0 and "replica 0: up" in ps.stdout and "replica 1: up" in ps.stdout, ps.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise
        proc.stderr.close()
    assert proc.returncode == 0

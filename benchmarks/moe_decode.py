"""MoE decode throughput: one stream (Engine) and N concurrent streams (AsyncEngine, one batched step
for all of them), on a GGUF such as benchmarks/make_moe_model.py writes; optionally llama.cpp side by side.

    .venv/bin/python benchmarks/moe_decode.py /tmp/moe/qwen3moe-8x32e4-q8_0.gguf [--streams 8] [--tokens 32]
        [--llamacpp-python /path/to/venv-with-llama_cpp/bin/python [--llamacpp-passive]] [--rounds 3]

Prints decode tok/s for 1 stream and the aggregate for --streams streams (prompt time excluded: the
clock starts once every stream has its first token). With --llamacpp-python, llama.cpp (llama-cpp-python's
low-level API in a subprocess of that venv, never this repo's) decodes the same prompts the same way: one
sequence, then --streams sequences in one llama_batch per step (as llama.cpp's batched example and its
server do), greedy, F16 KV cache (its default), same thread count. The engines take turns for --rounds
rounds so machine noise hits both alike; the best and the median of each are reported. Both warm up first;
modelc's single stream for long enough to finish the thread tuner's first probe (_warm_tokens).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time

_ORIG_ENV = dict(os.environ)  # llama.cpp gets the environment as given (modelc sets OMP variables)

import modelc  # noqa: E402, F401, I001  (before numpy, as in the CLI: its OpenBLAS setting applies only then)
import numpy as np  # noqa: E402

_LLAMACPP = r"""
import ctypes, json, sys, time
import numpy as np
import llama_cpp as L
req = json.loads(sys.stdin.read())
L.llama_backend_init()
model = L.llama_model_load_from_file(req["path"].encode(), L.llama_model_default_params())
n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
out = {}
for streams in req["streams"]:
    cp = L.llama_context_default_params()
    cp.n_ctx = streams * (len(req["prompt"]) + req["tokens"] + 8)
    cp.n_batch = cp.n_ubatch = max(512, streams * len(req["prompt"]))
    cp.n_seq_max = streams
    cp.n_threads = cp.n_threads_batch = req["threads"]
    ctx = L.llama_init_from_model(model, cp)
    batch = L.llama_batch_init(cp.n_batch, 0, streams)

    def run(prompts, n_new):
        n, last = 0, []
        for s, p in enumerate(prompts):
            for j, t in enumerate(p):
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = t, j, 1
                batch.seq_id[n][0], batch.logits[n] = s, j == len(p) - 1
                n += 1
            last.append(n - 1)
        batch.n_tokens = n
        assert L.llama_decode(ctx, batch) == 0
        toks = [int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, i), (n_vocab,)))) for i in last]
        t0 = time.perf_counter()
        for step in range(n_new):
            for s in range(len(prompts)):
                batch.token[s], batch.pos[s], batch.n_seq_id[s] = toks[s], len(prompts[s]) + step, 1
                batch.seq_id[s][0], batch.logits[s] = s, True
            batch.n_tokens = len(prompts)
            assert L.llama_decode(ctx, batch) == 0
            toks = [int(np.argmax(np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, s), (n_vocab,))))
                    for s in range(len(prompts))]
        return len(prompts) * n_new / (time.perf_counter() - t0)

    prompts = [req["prompt"][:-1] + [(req["prompt"][-1] + i) % 300] for i in range(streams)]
    run(prompts, 4)  # warm-up
    L.llama_memory_clear(L.llama_get_memory(ctx), True)
    out[str(streams)] = run(prompts, req["tokens"])
    L.llama_batch_free(batch)
    L.llama_free(ctx)
print(json.dumps(out))
"""


def llamacpp(
    python: str, path: str, prompt: list[int], n: int, streams: list[int], threads: int, passive: bool = False
) -> dict[str, float]:
    env = dict(_ORIG_ENV, OMP_WAIT_POLICY="passive") if passive else _ORIG_ENV
    req = {"path": path, "prompt": [int(t) for t in prompt], "tokens": n, "streams": streams, "threads": threads}
    p = subprocess.run([python, "-c", _LLAMACPP], input=json.dumps(req), capture_output=True, text=True,
                       timeout=1800, env=env)  # fmt: skip
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return json.loads(p.stdout.strip().splitlines()[-1])


def _warm_tokens() -> int:
    """Warm-up tokens: 4, plus the thread tuner's first probe of a single stream (engine/thread_tuner.py: a
    served model has finished it long before; in a 32-token run it would be most of the run)."""
    from modelc.engine import thread_tuner

    return 4 + thread_tuner.WARM_STEPS


def one_stream(eng, prompt: list[int], n: int) -> float:
    from modelc.request import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    list(eng.generate_ids(prompt, SamplingParams(temperature=0.0, max_tokens=_warm_tokens(), ignore_eos=True)))
    it = eng.generate_ids(prompt, params)
    next(it)
    t0 = time.perf_counter()
    k = sum(1 for _ in it)
    return k / (time.perf_counter() - t0)


async def many_streams(path: str, prompt: list[int], n: int, streams: int, threads: int) -> float:
    import anyio

    from modelc.api.async_engine import AsyncEngine
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from modelc.formats.detect import read_model
    from modelc.request import SamplingParams, TokenEvent

    cfg = EngineConfig(
        engines=1, threads=threads, cpu_count=threads, request_timeout_s=600,
        cache=CacheConfig(kv_cache_tokens=8192), scheduler=SchedulerConfig(max_num_seqs=streams),
    )  # fmt: skip
    params = SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
    stamps: list[list[float]] = []

    async def one(eng, i):
        times = []
        async for ev in eng.generate([*prompt[:-1], (prompt[-1] + i) % 300], params):
            if isinstance(ev, TokenEvent):
                times.append(time.perf_counter())
        stamps.append(times)

    async with AsyncEngine.open(read_model(path), cfg) as eng:
        async with anyio.create_task_group() as tg:  # warm up
            tg.start_soon(one, eng, 99)
        stamps.clear()
        async with anyio.create_task_group() as tg:
            for i in range(streams):
                tg.start_soon(one, eng, i)
    start = max(s[0] for s in stamps)  # every stream decoding
    end = max(s[-1] for s in stamps)
    return sum(sum(1 for t in s if t > start) for s in stamps) / (end - start)


def main() -> None:
    import anyio

    from modelc.api.engine import Engine

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--llamacpp-python", help="a Python with llama-cpp-python: run llama.cpp side by side")
    ap.add_argument("--llamacpp-passive", action="store_true",
                    help="run llama.cpp with OMP_WAIT_POLICY=passive (its threads sleep at barriers, not spin)")  # fmt: skip
    a = ap.parse_args()
    prompt = [int(t) for t in np.random.default_rng(0).integers(4, 300, 32)]
    eng = Engine.load(a.gguf, threads=a.threads)
    res: dict[str, list[float]] = {}
    for r in range(a.rounds):
        row = {"modelc 1": one_stream(eng, prompt, a.tokens)}
        if a.llamacpp_python:
            row["llama.cpp 1"] = llamacpp(a.llamacpp_python, a.gguf, prompt, a.tokens, [1], a.threads,
                                          a.llamacpp_passive)["1"]  # fmt: skip
        row[f"modelc {a.streams}"] = anyio.run(many_streams, a.gguf, prompt, a.tokens, a.streams, a.threads)
        if a.llamacpp_python:
            got = llamacpp(a.llamacpp_python, a.gguf, prompt, a.tokens, [a.streams], a.threads, a.llamacpp_passive)
            row[f"llama.cpp {a.streams}"] = got[str(a.streams)]
        load = os.getloadavg()[0]
        print(f"round {r + 1}: " + ", ".join(f"{k}: {v:.2f}" for k, v in row.items()) + f" tok/s (load {load:.1f})",
              flush=True)  # fmt: skip
        for k, v in row.items():
            res.setdefault(k, []).append(v)
    for k, v in res.items():
        print(f"{k} stream(s): best {max(v):.2f} tok/s, median {statistics.median(v):.2f}")
    for s in ("1", str(a.streams)):
        if f"llama.cpp {s}" in res:
            best = max(res[f"modelc {s}"]) / max(res[f"llama.cpp {s}"])
            med = statistics.median(res[f"modelc {s}"]) / statistics.median(res[f"llama.cpp {s}"])
            print(f"{s} stream(s): modelc / llama.cpp = {best:.2f}x (best), {med:.2f}x (median)")


if __name__ == "__main__":
    main()

"""Continuous-batching benchmarks of modelc's server (in-process, 127.0.0.1), side by side with
llama.cpp's OpenAI-compatible server when a venv with llama-cpp-python is given.

    .venv/bin/python -m loadtests.bench_batching MODEL.gguf|.modelc [--what throughput,prefix,lag,curves]
        [--threads 2] [--levels 1,4,8,16] [--gen-tokens 16] [--prefix-tokens 1024] [--prefix-rounds 2]
        [--curve-levels 1,2,4,8,16] [--curve-requests 16] [--llamacpp-python /work/refvenv/bin/python]
        [--out results.json]

engine:     N sequences on the AsyncEngine without HTTP, and llama.cpp's batched llama_decode
  (loadtests/llamacpp_batched.py in --llamacpp-python) on the same GGUF: prefill time, decode tok/s.
throughput: N requests sent at once at N = each level (fixed output length, ignore_eos): output tok/s
  (tokens / wall) and decode tok/s (tokens after each stream's first / time any stream was decoding).
prefix:     TTFT of a request whose --prefix-tokens-token prefix is cached vs the same request uncached.
lag:        overshoot of a 1 ms sleep in a loop on the server's event loop, idle and while a steady load
  at the top level runs (the engine computes in its worker thread meanwhile).
curves:     the steady and shared-prefix scenarios swept over --curve-levels.
Everything goes only to 127.0.0.1; every run is bounded by its request count and --timeout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from typing import Any

import modelc  # noqa: F401  (before numpy, as in the CLI: its OpenBLAS setting applies only then)

# isort: split
import anyio
import httpx
import numpy as np

from loadtests.client import metric_total, scrape_metrics
from loadtests.server_thread import ServerThread
from loadtests.stats import percentile
from loadtests.sweep import parse_levels

SUMMARY_KEYS = ("concurrency", "requests", "ok", "output_tokens", "wall_s", "output_tokens_per_s",
                "decode_tokens_per_s")  # fmt: skip


def summary(run: dict) -> dict:
    out = {k: run[k] for k in SUMMARY_KEYS}
    out.update(ttft_p50_s=run["ttft_s"]["p50"], itl_p50_s=run["itl_s"]["p50"], e2e_p50_s=run["e2e_s"]["p50"],
               errors=run["errors"])  # fmt: skip
    # streams in lockstep each get a token per step: N / (median gap) is the steady decode rate
    streams = min(run["concurrency"] or run["requests"], run["requests"])
    out["itl_decode_tok_s"] = streams / run["itl_s"]["p50"] if run["itl_s"]["p50"] > 0 else float("nan")
    return out


def drive_subprocess(url: str, scenario: str, num_requests: int, levels: tuple[int, ...], *, seed: int,
                     prompt_words: tuple[int, int], gen_tokens: int, timeout_s: float) -> list[dict]:  # fmt: skip
    """`python -m loadtests run ...` in a child process (its CPU and GIL apart from the server's); the runs."""
    with tempfile.TemporaryDirectory(prefix="modelc-load-") as tmp:
        out = os.path.join(tmp, "runs.json")
        cmd = [sys.executable, "-m", "loadtests", "run", scenario, "--target", url, "--requests", str(num_requests),
               "--concurrency", ",".join(map(str, levels)), "--seed", str(seed),
               "--prompt-words", f"{prompt_words[0]},{prompt_words[1]}", "--output-tokens", f"{gen_tokens},{gen_tokens}",
               "--ignore-eos", "--timeout", str(timeout_s), "--out", out]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s * num_requests * len(levels))
        if proc.returncode != 0:
            raise SystemExit(f"load client failed: {proc.stderr[-2000:]}")
        with open(out) as f:
            return json.load(f)["runs"]


def warm_up(url: str) -> None:
    """Compile / load every kernel shape class once: a long prompt (prefill path), then short ones."""
    words = " ".join(["the model server token cache"] * 12)
    for prompt in (words, "hello world"):
        body = {"prompt": prompt, "max_tokens": 4, "temperature": 0.0, "ignore_eos": True}
        httpx.post(url + "/v1/completions", json=body, timeout=600).raise_for_status()


# -- targets ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaCppServer:
    """`python -m llama_cpp.server` from another venv, on 127.0.0.1; stopped by its pid."""

    def __init__(self, python: str, model: str, threads: int, n_ctx: int = 4096) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [python, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1", "--port", str(self.port),
               "--n_threads", str(threads), "--n_threads_batch", str(threads), "--n_ctx", str(n_ctx)]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"llama_cpp.server exited: {self.proc.stderr.read()[-2000:]}")
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit("llama_cpp.server did not start within 300 s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stderr:
            self.proc.stderr.close()


# -- measurements ------------------------------------------------------------------------------


def throughput(url: str, levels: tuple[int, ...], gen_tokens: int, timeout_s: float) -> list[dict]:
    """N short prompts sent at once, N = each level; every request generates exactly gen_tokens."""
    out = []
    for i, n in enumerate(levels):
        (run,) = drive_subprocess(url, "steady", n, (n,), seed=100 + i, prompt_words=(8, 16), gen_tokens=gen_tokens,
                                  timeout_s=timeout_s)  # fmt: skip
        out.append(summary(run))
        print(f"  throughput c={n}: {out[-1]['output_tokens_per_s']:.2f} out tok/s, "
              f"{out[-1]['decode_tokens_per_s']:.2f} decode tok/s (window), "
              f"{out[-1]['itl_decode_tok_s']:.2f} (N / ITL p50)", flush=True)  # fmt: skip
    return out


async def _ttft(client: httpx.AsyncClient, ids: list[int]) -> float:
    """Seconds from sending to the first SSE event (modelc answers only once the first token exists)."""
    body = {"prompt": ids, "max_tokens": 2, "temperature": 0.0, "ignore_eos": True, "stream": True}
    t0 = time.perf_counter()
    async with client.stream("POST", "/v1/completions", json=body) as resp:
        if resp.status_code != 200:
            await resp.aread()
            raise SystemExit(f"prefix request failed: HTTP {resp.status_code} {resp.text[:200]}")
        lines = resp.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                dt = time.perf_counter() - t0
                break
        else:
            raise SystemExit("prefix request: no SSE event")
        async for _ in lines:  # read to the end so the request completes normally
            pass
    return dt


async def _prefix(url: str, prefix_tokens: int, rounds: int, vocab: int, timeout_s: float) -> dict:
    rng = np.random.default_rng(7)
    lo = min(300, vocab // 2)  # skip control and byte tokens at the front of llama vocabularies
    uncached, cached = [], []
    async with httpx.AsyncClient(base_url=url, timeout=timeout_s) as client:
        await _ttft(client, rng.integers(lo, vocab, 8).tolist())  # warm-up
        before = await scrape_metrics(client)
        for _ in range(rounds):
            prefix = rng.integers(lo, vocab, prefix_tokens).tolist()
            uncached.append(await _ttft(client, prefix + rng.integers(lo, vocab, 8).tolist()))
            cached.append(await _ttft(client, prefix + rng.integers(lo, vocab, 8).tolist()))
            print(f"  prefix: uncached {uncached[-1]:.3f} s, cached {cached[-1]:.3f} s", flush=True)
        after = await scrape_metrics(client)
    hits = metric_total(after, "modelc_prefix_cache_hits_total") - metric_total(
        before, "modelc_prefix_cache_hits_total"
    )
    u, c = float(np.median(uncached)), float(np.median(cached))
    return {"prefix_tokens": prefix_tokens, "uncached_s": uncached, "cached_s": cached, "uncached_median_s": u,
            "cached_median_s": c, "speedup": u / c, "server_prefix_hit_tokens": hits}  # fmt: skip


async def _engine_level(engine: Any, levels: tuple[int, ...], prompt_tokens: int, gen_tokens: int) -> list[dict]:
    """N sequences of prompt_tokens random ids started together on the AsyncEngine (no HTTP): the
    prefill time (until every first token) and the decode rate once all N run in lockstep."""
    from modelc.engine import thread_tuner
    from modelc.request import SamplingParams, TokenEvent

    rng = np.random.default_rng(5)
    vocab = int(engine.tokenizer.vocab_size)
    params = SamplingParams(temperature=0.0, max_tokens=gen_tokens, ignore_eos=True)
    # warm-up: one sequence long enough for the thread tuner's first probe (a served model has done it long
    # before; at 16 tokens it would be the whole single-stream figure)
    warm = SamplingParams(temperature=0.0, max_tokens=4 + thread_tuner.WARM_STEPS, ignore_eos=True)
    async for _ in engine.generate(rng.integers(min(300, vocab // 2), vocab, 16).tolist(), warm):
        pass
    out = []
    for n in levels:
        stamps: list[list[float]] = [[] for _ in range(n)]

        async def one(i: int, ids: list[int], stamps=stamps) -> None:
            async for ev in engine.generate(ids, params):
                if isinstance(ev, TokenEvent):
                    stamps[i].append(time.perf_counter())

        t0 = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i, rng.integers(min(300, vocab // 2), vocab, prompt_tokens).tolist())
        all_first = max(st[0] for st in stamps)
        end = max(st[-1] for st in stamps)
        after = sum(sum(1 for x in st if x > all_first) for st in stamps)
        gaps = [b - a for st in stamps for a, b in zip(st, st[1:], strict=False) if a >= all_first]
        out.append({"concurrency": n, "prefill_s": all_first - t0, "decode_step_p50_s": float(np.median(gaps)),
                    "decode_tokens_per_s": after / (end - all_first) if end > all_first else float("nan"),
                    "tokens": sum(len(st) for st in stamps),
                    "output_tokens_per_s": sum(len(st) for st in stamps) / (end - t0)})  # fmt: skip
        print(f"  engine-level c={n}: prefill {out[-1]['prefill_s']:.2f} s, "
              f"decode {out[-1]['decode_tokens_per_s']:.2f} tok/s", flush=True)  # fmt: skip
    return out


def llamacpp_batched(python: str, model: str, levels: tuple[int, ...], prompt_tokens: int, gen_tokens: int,
                     threads: int, *, pythonpath: str | None = None, extra_bufts: bool = True) -> dict:  # fmt: skip
    """loadtests/llamacpp_batched.py in the llama-cpp-python venv; its JSON."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_batched.py")
    cmd = [python, script, model, "--levels", ",".join(map(str, levels)), "--prompt-tokens", str(prompt_tokens),
           "--gen-tokens", str(gen_tokens), "--threads", str(threads)]  # fmt: skip
    if not extra_bufts:
        cmd.append("--no-extra-bufts")
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"llama.cpp batched decode failed: {proc.stderr[-2000:]}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    for r in res["levels"]:
        print(f"  llama.cpp batched c={r['concurrency']}: prefill {r['prefill_s']:.2f} s, "
              f"decode {r['decode_tokens_per_s']:.2f} tok/s", flush=True)  # fmt: skip
    return res


async def _probe(stop: asyncio.Event, overshoot: list[float]) -> None:
    """Sleep 1 ms in a loop on the server's loop; record how late each wake-up is."""
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        overshoot.append(time.perf_counter() - t - 0.001)


def _lag_stats(xs: list[float]) -> dict:
    ms = [x * 1e3 for x in xs]
    return {"samples": len(ms), "p50_ms": percentile(ms, 50), "p99_ms": percentile(ms, 99), "max_ms": max(ms)}


def event_loop_lag(srv: ServerThread, concurrency: int, gen_tokens: int, timeout_s: float) -> dict:
    res: dict[str, Any] = {}
    for phase in ("idle", "load"):
        stop_box: list[asyncio.Event] = []
        overshoot: list[float] = []

        async def run_probe(stop_box=stop_box, overshoot=overshoot) -> None:
            stop_box.append(asyncio.Event())
            await _probe(stop_box[0], overshoot)

        fut = srv.run_in_loop(run_probe())
        if phase == "idle":
            time.sleep(2.0)
        else:
            (run,) = drive_subprocess(srv.url, "steady", 2 * concurrency, (concurrency,), seed=55,
                                      prompt_words=(8, 64), gen_tokens=gen_tokens, timeout_s=timeout_s)  # fmt: skip
            res["load_run"] = summary(run)
        srv.run_in_loop(_set(stop_box)).result(10)
        fut.result(10)
        res[phase] = _lag_stats(overshoot)
        print(f"  event-loop lag ({phase}): {res[phase]}", flush=True)
    return res


async def _set(box: list[asyncio.Event]) -> None:
    box[0].set()


def curves(url: str, levels: tuple[int, ...], num_requests: int, gen_tokens: int, timeout_s: float) -> dict:
    out = {}
    for scenario in ("steady", "shared-prefix"):
        runs = drive_subprocess(url, scenario, num_requests, levels, seed=11, prompt_words=(8, 64),
                                gen_tokens=gen_tokens, timeout_s=timeout_s)  # fmt: skip
        out[scenario] = [summary(r) for r in runs]
        for r in out[scenario]:
            print(f"  {scenario} c={r['concurrency']}: {r['output_tokens_per_s']:.2f} tok/s, "
                  f"TTFT p50 {r['ttft_p50_s']:.3f} s, e2e p50 {r['e2e_p50_s']:.2f} s", flush=True)  # fmt: skip
    return out


def _has_server(python: str) -> bool:
    """llama_cpp.server needs the [server] extras (fastapi, uvicorn, sse-starlette)."""
    probe = subprocess.run([python, "-c", "import llama_cpp.server.app"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        print("note: llama_cpp.server is not importable there; only the batched decode is compared", flush=True)
    return probe.returncode == 0


# -- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m loadtests.bench_batching", description=__doc__.splitlines()[0])
    ap.add_argument("model", help="a GGUF file or a .modelc artifact (llama.cpp needs a GGUF)")
    ap.add_argument("--what", default="engine,throughput,prefix,lag,curves")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--levels", default="1,4,8,16")
    ap.add_argument("--gen-tokens", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=16, help="engine: prompt length of each sequence")
    ap.add_argument("--prefix-tokens", type=int, default=1024)
    ap.add_argument("--prefix-rounds", type=int, default=2)
    ap.add_argument("--lag-concurrency", type=int, default=8)
    ap.add_argument("--curve-levels", default="1,2,4,8,16")
    ap.add_argument("--curve-requests", type=int, default=16)
    ap.add_argument("--kv-cache-tokens", type=int, default=16384)
    ap.add_argument("--llamacpp-python", default=None, help="a python with llama-cpp-python[server] installed")
    ap.add_argument("--llamacpp-pythonpath", default=None, help="prepended to PYTHONPATH for that python")
    ap.add_argument("--llamacpp-no-extra-bufts", action="store_true", help="llama.cpp without AMX/repacked weights")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--out", default=None)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from modelc.config import CacheConfig, EngineConfig, SchedulerConfig
    from modelc.kernels.runtime import hugepages
    from modelc.server.daemon import resolve_source

    a = parse_args(argv)
    what = set(a.what.split(","))
    levels = parse_levels(a.levels)
    result: dict[str, Any] = {"model": a.model, "threads": a.threads, "load_avg_before": list(os.getloadavg()),
                              "started": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    source = resolve_source(a.model)
    cfg = EngineConfig(threads=a.threads, cache=CacheConfig(kv_cache_tokens=a.kv_cache_tokens),
                       scheduler=replace(SchedulerConfig(), max_num_seqs=max(64, max(levels))))  # fmt: skip
    t0 = time.perf_counter()
    with ServerThread(source, engine_config=cfg) as srv:
        result["modelc_load_s"] = time.perf_counter() - t0
        print(f"modelc serving {a.model} on {srv.url} (loaded in {result['modelc_load_s']:.1f} s)", flush=True)
        t1 = time.perf_counter()
        hugepages.wait()  # the weights' move onto huge pages after the load: the figures are the steady state's
        result["modelc_move_s"] = time.perf_counter() - t1
        vocab = int(srv.engine.tokenizer.vocab_size)
        warm_up(srv.url)
        if "engine" in what:
            coro = _engine_level(srv.engine, levels, a.prompt_tokens, a.gen_tokens)
            result["engine_level_modelc"] = srv.run_in_loop(coro).result()
            if a.llamacpp_python:
                result["engine_level_llamacpp"] = llamacpp_batched(
                    a.llamacpp_python, a.model, levels, a.prompt_tokens, a.gen_tokens, a.threads,
                    pythonpath=a.llamacpp_pythonpath, extra_bufts=not a.llamacpp_no_extra_bufts)  # fmt: skip
        if "throughput" in what:
            result["throughput_modelc"] = throughput(srv.url, levels, a.gen_tokens, a.timeout)
        if "prefix" in what:
            result["prefix_modelc"] = anyio.run(_prefix, srv.url, a.prefix_tokens, a.prefix_rounds, vocab, a.timeout)
        if "lag" in what:
            result["lag_modelc"] = event_loop_lag(srv, a.lag_concurrency, a.gen_tokens, a.timeout)
        if "curves" in what:
            result["curves_modelc"] = curves(srv.url, parse_levels(a.curve_levels), a.curve_requests, a.gen_tokens,
                                             a.timeout)  # fmt: skip
        result["modelc_engine_stats"] = srv.engine_stats()
    if a.llamacpp_python and what & {"throughput", "curves"} and _has_server(a.llamacpp_python):
        print("llama.cpp server starting", flush=True)
        ref = LlamaCppServer(a.llamacpp_python, a.model, a.threads)
        try:
            warm_up(ref.url)
            if "throughput" in what:
                result["throughput_llamacpp"] = throughput(ref.url, levels, a.gen_tokens, a.timeout)
            if "curves" in what:
                result["curves_llamacpp"] = curves(ref.url, parse_levels(a.curve_levels), a.curve_requests,
                                                   a.gen_tokens, a.timeout)  # fmt: skip
        finally:
            ref.stop()
    result["load_avg_after"] = list(os.getloadavg())
    text = json.dumps(result, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

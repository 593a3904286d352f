"""HTTP overhead of modelc's server: p50 per non-streaming request, time per streamed token,
and /health requests/s under 64 concurrent clients.

    python -m loadtests.http_overhead                       # FakeEngine (repo checkout): pure server cost
    python -m loadtests.http_overhead --artifact M.modelc   # a real model via `modelc run`

With the FakeEngine the engine costs ~nothing, so the latencies ARE the HTTP + server overhead.
The server runs in a subprocess on 127.0.0.1 (a free port) and is stopped by pid at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import signal
import statistics
import subprocess
import sys
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def start_server(artifact: str | None) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if artifact is None:
        cmd = [sys.executable, "-m", "tests.server.serve_fake", "--port", "0"]
    else:
        cmd = [sys.executable, "-m", "modelc", "run", artifact, "--port", "0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stream = proc.stdout if artifact is None else proc.stderr
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = stream.readline()
        if line.startswith("READY"):
            return proc, f"http://127.0.0.1:{int(line.split()[1])}"
        if "serving" in line and "http://" in line:
            return proc, line.split("http://", 1)[1].split()[0].join(["http://", ""])
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"server did not start: {proc.stderr.read()[-2000:] if proc.stderr else ''}")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def non_streaming(url: str, n: int) -> list[float]:
    body = {"prompt": "Hello", "max_tokens": 1, "temperature": 0}
    out = []
    with httpx.Client(base_url=url, timeout=60) as c:
        for i in range(n + 10):
            t0 = time.perf_counter()
            r = c.post("/v1/completions", json=body)
            dt = time.perf_counter() - t0
            r.raise_for_status()
            if i >= 10:  # warm-up
                out.append(dt)
    return out


def streaming(url: str, n: int, tokens: int) -> tuple[list[float], int]:
    body = {"prompt": "Hello", "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    per_token, total_tokens = [], 0
    with httpx.Client(base_url=url, timeout=120) as c:
        for i in range(n + 1):
            t0 = time.perf_counter()
            count = 0
            with c.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {") and json.loads(line[6:])["choices"][0]["text"]:
                        count += 1
            dt = time.perf_counter() - t0
            if i and count:
                per_token.append(dt / count)
                total_tokens += count
    return per_token, total_tokens


async def health_rps(url: str, clients: int, duration_s: float) -> tuple[float, int]:
    done = 0
    stop = time.perf_counter() + duration_s
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as c:

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                r = await c.get("/health")
                r.raise_for_status()
                done += 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        return done / (time.perf_counter() - t0), done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--artifact", help="serve this model with `modelc run` instead of the FakeEngine")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--streams", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--duration", type=float, default=5.0)
    args = ap.parse_args()
    proc, url = start_server(args.artifact)
    try:
        lat = non_streaming(url, args.requests)
        per_tok, ntok = streaming(url, args.streams, args.tokens)
        rps, nh = asyncio.run(health_rps(url, args.clients, args.duration))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    engine = args.artifact or "FakeEngine (no model cost)"
    print(f"engine: {engine}; server pid {proc.pid}; cpus {os.cpu_count()}")
    print(
        f"non-streaming /v1/completions (max_tokens=1), {len(lat)} sequential requests: "
        f"p50 {statistics.median(lat) * 1e3:.2f} ms, p90 {pct(lat, 0.9) * 1e3:.2f} ms"
    )
    print(
        f"streamed /v1/completions, {ntok} tokens over {len(per_tok)} streams: "
        f"p50 {statistics.median(per_tok) * 1e6:.0f} us/token ({1 / statistics.median(per_tok):.0f} tokens/s)"
    )
    print(f"GET /health, {args.clients} concurrent clients for {args.duration:.0f}s: {rps:.0f} req/s ({nh} requests)")


if __name__ == "__main__":
    main()

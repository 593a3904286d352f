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
import threading
import time

import httpx  # streaming only (SSE parsing); the raw client below for the rest

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
        url = None
        if line.startswith("READY"):
            url = f"http://127.0.0.1:{int(line.split()[1])}"
        elif "serving" in line and "http://" in line:
            url = "http://" + line.split("http://", 1)[1].split()[0]
        if url is not None:
            # keep reading the server's output (one log line per request) so its pipes never fill up
            for pipe in (proc.stdout, proc.stderr):
                threading.Thread(target=pipe.read, daemon=True).start()
            return proc, url
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"server did not start: {proc.stderr.read()[-2000:] if proc.stderr else ''}")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class RawConnection:
    """A minimal keep-alive HTTP/1.1 client on asyncio streams: httpx costs more CPU per request than
    the server does, which would make this benchmark measure the client."""

    def __init__(self, url: str) -> None:
        host, port = url.split("//", 1)[1].split(":")
        self.host, self.port = host, int(port)

    async def __aenter__(self) -> RawConnection:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.writer.close()

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n"
        if body:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = next(int(ln.split(b":")[1]) for ln in lines if ln.lower().startswith(b"content-length"))
        return status, await self.reader.readexactly(length)


async def non_streaming(url: str, n: int) -> list[float]:
    body = json.dumps({"prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()
    out = []
    async with RawConnection(url) as c:
        for i in range(n + 10):
            t0 = time.perf_counter()
            status, _ = await c.request("POST", "/v1/completions", body)
            dt = time.perf_counter() - t0
            if status != 200:
                raise SystemExit(f"HTTP {status}")
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

    async def worker() -> None:
        nonlocal done
        async with RawConnection(url) as c:
            while time.perf_counter() < stop:
                status, _ = await c.request("GET", "/health")
                if status != 200:
                    raise SystemExit(f"HTTP {status}")
                done += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return done / (time.perf_counter() - t0), done


async def direct(artifact: str, n: int, streams: int, tokens: int) -> tuple[list[float], list[float]]:
    """The same requests on an in-process AsyncEngine (no HTTP): latency of max_tokens=1 and time per
    token of long generations, to subtract from the HTTP figures."""
    from modelc.api.async_engine import AsyncEngine
    from modelc.request import SamplingParams

    lat, per_tok = [], []
    async with AsyncEngine.open(artifact) as eng:
        ids = eng.tokenizer.encode("Hello")
        for i in range(n + 10):
            t0 = time.perf_counter()
            async for _ in eng.generate(ids, SamplingParams(max_tokens=1, temperature=0)):
                pass
            if i >= 10:
                lat.append(time.perf_counter() - t0)
        for i in range(streams + 1):
            t0 = time.perf_counter()
            count = 0
            async for ev in eng.generate(ids, SamplingParams(max_tokens=tokens, temperature=0, ignore_eos=True)):
                count += hasattr(ev, "token_id")
            if i and count:
                per_tok.append((time.perf_counter() - t0) / count)
    return lat, per_tok


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
        lat = asyncio.run(non_streaming(url, args.requests))
        per_tok, ntok = streaming(url, args.streams, args.tokens)
        rps, nh = asyncio.run(health_rps(url, args.clients, args.duration))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
    if args.artifact:
        d_lat, d_tok = asyncio.run(direct(args.artifact, args.requests, args.streams, args.tokens))
        print(
            f"direct AsyncEngine (no HTTP): max_tokens=1 p50 {statistics.median(d_lat) * 1e3:.2f} ms; "
            f"{statistics.median(d_tok) * 1e6:.0f} us/token"
        )
        print(
            f"HTTP overhead: {(statistics.median(lat) - statistics.median(d_lat)) * 1e3:.2f} ms per request, "
            f"{(statistics.median(per_tok) - statistics.median(d_tok)) * 1e6:.0f} us per streamed token"
        )
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

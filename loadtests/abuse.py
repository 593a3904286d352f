"""`python loadtests/abuse.py URL`: while clients send a 600k-character embedding input (with and without
`truncate`), four 1 MB stop strings and a 10 MB prompt, poll /health and run chat requests; print the
/health latencies and the chat latency before and during. Never run by CI."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time

import httpx

ABUSE = [
    ("embed_600k_chars", "/v1/embeddings", {"input": "hello world " * 50_000}),
    ("embed_truncated", "/v1/embeddings", {"input": "hello world " * 50_000, "truncate": True}),
    ("stop_4x1MB", "/v1/completions", {"prompt": "hi", "max_tokens": 30, "stop": ["x" * 1_000_000] * 4}),
    ("body_10MB", "/v1/completions", {"prompt": "word " * 2_000_000, "max_tokens": 5}),
]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}


def chat_s(url: str) -> float:
    t = time.perf_counter()
    httpx.post(url + "/v1/chat/completions", json=CHAT, timeout=120).raise_for_status()
    return time.perf_counter() - t


def main(url: str) -> None:
    results: dict[str, tuple[int, float]] = {}

    def send(name: str, path: str, body: dict) -> None:
        t = time.perf_counter()
        r = httpx.post(url + path, json=body, timeout=600)
        results[name] = (r.status_code, round(time.perf_counter() - t, 2))

    before = [chat_s(url) for _ in range(5)]
    threads = [threading.Thread(target=send, args=a) for a in ABUSE]
    for t in threads:
        t.start()
    health: list[float] = []
    during: list[float] = []
    while any(t.is_alive() for t in threads):
        t0 = time.perf_counter()
        httpx.get(url + "/health", timeout=60).raise_for_status()
        health.append(time.perf_counter() - t0)
        if len(health) % 10 == 0:
            during.append(chat_s(url))
        time.sleep(0.02)
    health.sort()
    print(f"chat before: median {statistics.median(before):.3f} s")
    print(f"chat during: median {statistics.median(during):.3f} s (n={len(during)})" if during else "chat during: -")
    p99 = health[int(0.99 * (len(health) - 1))]
    print(f"/health n={len(health)} median {1e3 * statistics.median(health):.1f} ms p99 {1e3 * p99:.1f} ms "
          f"max {1e3 * health[-1]:.1f} ms")  # fmt: skip
    print(results, "load average", os.getloadavg())


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080")

"""`python loadtests/abuse.py URL [ROUNDS [NAME,...]]`: while clients send a 600k-character embedding input (with
and without `truncate`), four 1 MB stop strings, a 10 MB prompt and 10 MB of small JSON values, poll
/health and run chat requests; print the /health latencies and the chat latency before and during.
Never run by CI.

The abusive clients run in a child process with their bodies encoded before they start, and /health
is polled over one kept-alive connection every 10 ms: so the figures are the server's, not the time
this script spends encoding 10 MB of JSON or opening connections (earlier versions measured both).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable

import httpx

ABUSE = [
    ("embed_600k_chars", "/v1/embeddings", {"input": "hello world " * 50_000}),
    ("embed_truncated", "/v1/embeddings", {"input": "hello world " * 50_000, "truncate": True}),
    ("stop_4x1MB", "/v1/completions", {"prompt": "hi", "max_tokens": 30, "stop": ["x" * 1_000_000] * 4}),
    ("body_10MB", "/v1/completions", {"prompt": "word " * 2_000_000, "max_tokens": 5}),
    ("values_10MB", "/v1/embeddings", {"input": [[1] * 1000] * 2500}),  # 2.5M small JSON values
]
CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0}
HEADERS = {"content-type": "application/json"}


def chat_s(client: httpx.Client, url: str) -> float:
    t = time.perf_counter()
    client.post(url + "/v1/chat/completions", json=CHAT, timeout=120).raise_for_status()
    return time.perf_counter() - t


def abuse(url: str, names: list[str], out: mp.Queue) -> None:
    """Child process: encode every body first, signal ready, then send them all at once."""
    bodies = [(name, path, json.dumps(body).encode()) for name, path, body in ABUSE if name in names]
    results: dict[str, tuple[int, float]] = {}

    def send(name: str, path: str, raw: bytes) -> None:
        t = time.perf_counter()
        r = httpx.post(url + path, content=raw, headers=HEADERS, timeout=600)
        results[name] = (r.status_code, round(time.perf_counter() - t, 2))

    out.put("ready")
    threads = [threading.Thread(target=send, args=b) for b in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(results)


def poll(url: str, busy: Callable[[], bool]) -> tuple[list[float], list[float]]:
    """/health latencies (one kept-alive connection, every 10 ms) and chat latencies (a second client,
    back to back) while busy() holds."""
    health: list[float] = []
    chat: list[float] = []
    done = threading.Event()

    def chats() -> None:
        with httpx.Client() as c:
            while not done.is_set():
                chat.append(chat_s(c, url))

    chatter = threading.Thread(target=chats)
    chatter.start()
    with httpx.Client() as c:
        while busy():
            t0 = time.perf_counter()
            c.get(url + "/health", timeout=60).raise_for_status()
            health.append(time.perf_counter() - t0)
            time.sleep(0.01)
    done.set()
    chatter.join()
    return health, chat


def one_round(url: str, names: list[str]) -> tuple[list[float], list[float], list[float], dict]:
    """/health latencies with chat only (3 s), then /health and chat latencies during the abuse."""
    end = time.monotonic() + 3
    quiet, _ = poll(url, lambda: time.monotonic() < end)
    out: mp.Queue = mp.get_context("spawn").Queue()
    child = mp.get_context("spawn").Process(target=abuse, args=(url, names, out))
    child.start()
    assert out.get(timeout=120) == "ready"
    health, during = poll(url, lambda: child.is_alive() and out.empty())
    results = out.get(timeout=600)
    child.join()
    return quiet, health, during, results


def summary(what: str, xs: list[float]) -> str:
    xs = sorted(xs)
    p99 = xs[int(0.99 * (len(xs) - 1))]
    return f"/health {what}: n={len(xs)} median {1e3 * statistics.median(xs):.1f} ms p99 {1e3 * p99:.1f} ms max {1e3 * xs[-1]:.1f} ms"


def main(url: str, rounds: int, names: list[str]) -> None:
    with httpx.Client() as c:
        before = [chat_s(c, url) for _ in range(5)]
    quiet: list[float] = []
    health: list[float] = []
    during: list[float] = []
    for _ in range(rounds):
        q, h, d, results = one_round(url, names)
        quiet += q
        health += h
        during += d
        print(results)
    print(f"chat before: median {statistics.median(before):.3f} s")
    print(f"chat during: median {statistics.median(during):.3f} s (n={len(during)})" if during else "chat during: -")
    print(summary("with chat only", quiet))
    print(summary("during the abuse", health))
    print("load average", os.getloadavg())


if __name__ == "__main__":
    args = sys.argv[1:]
    main(
        args[0] if args else "http://127.0.0.1:8080",
        int(args[1]) if len(args) > 1 else 3,
        args[2].split(",") if len(args) > 2 else [name for name, _, _ in ABUSE],
    )

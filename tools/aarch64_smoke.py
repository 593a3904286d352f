"""`modelc run` on the bundled model, then /v1/chat/completions: the aarch64 check's smoke test (any CPU).

Starts `python -m modelc run --port 0` (the bundled default model, a fresh MODELC_HOME), waits for its
"serving" line, asks one greedy chat completion, checks the OpenAI shape and a non-empty answer, then stops
the server with SIGTERM and wants exit status 0. With an empty numba cache the server answers on the numpy
reference kernels while it compiles (kernels/hybrid.py; /health says "compiling"): `--until-ready` waits
for "ready" and asks again, and the numba kernels' answer must be the reference kernels' (same greedy text).
Under qemu that compile takes many minutes, so the CI subset does not wait. Exit 0 when all checks pass.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parents[1]
QUESTION = [{"role": "user", "content": "Name three colors."}]


def _serving_url(proc: subprocess.Popen, timeout_s: float) -> str:
    """The http://HOST:PORT of `modelc run`'s "serving ..." stderr line."""
    deadline = time.monotonic() + timeout_s
    seen = []
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen.append(line)
        if "serving" in line and "http://" in line:
            return "http://" + line.split("http://", 1)[1].split()[0]
    raise SystemExit("smoke: no 'serving' line from modelc run:\n" + "".join(seen[-40:]))


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


def _chat(url: str, max_tokens: int, timeout_s: float) -> dict:
    body = {"messages": QUESTION, "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout_s) as r:
        assert r.status == 200, r.status
        return json.loads(r.read())


def _answer(resp: dict) -> str:
    """The answer's text, after checking the OpenAI chat.completion shape."""
    assert resp["object"] == "chat.completion", resp
    choice = resp["choices"][0]
    assert choice["finish_reason"] in ("stop", "length"), choice
    text = choice["message"]["content"]
    assert isinstance(text, str) and text.strip(), resp
    assert resp["usage"]["completion_tokens"] >= 1, resp
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--until-ready", action="store_true", help="also wait for the numba kernels and compare")
    ap.add_argument("--max-tokens", type=int, default=12)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds for each wait")
    args = ap.parse_args()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               "MODELC_HOME": home}  # fmt: skip
        cmd = [sys.executable, "-m", "modelc", "run", "--port", "0", "--kv-cache-mb", "16", "--threads", "2"]
        proc = subprocess.Popen(cmd, cwd=home, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            url = _serving_url(proc, args.timeout)
            health = _get(url + "/health")
            assert health["status"] == "ok", health
            first = _answer(_chat(url, args.max_tokens, args.timeout))
            print(f"smoke: serving after {time.monotonic() - t0:.0f}s, kernels {health.get('kernels')}: {first!r}")
            if args.until_ready:
                deadline = time.monotonic() + args.timeout
                while _get(url + "/health").get("kernels") != "ready":
                    assert time.monotonic() < deadline, "smoke: kernels still compiling"
                    time.sleep(2)
                again = _answer(_chat(url, args.max_tokens, args.timeout))
                print(f"smoke: numba kernels ready after {time.monotonic() - t0:.0f}s: {again!r}")
                assert again == first, f"numba kernels answered {again!r}, the first answer was {first!r}"
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=60)
            assert rc == 0, f"modelc run exited {rc}"
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()
    print(f"smoke: ok ({time.monotonic() - t0:.0f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

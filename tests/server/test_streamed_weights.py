"""Models larger than memory, served: `modelc run` in a memory cgroup whose limit is below the model file streams
the weights from the file (models/streaming.py) and answers the tokens it answers without a limit, never OOM-killed.

The run without a limit streams too (--weights streamed): the same kernels (those of the file layout), so the same
tokens to the bit. A resident run computes with the repacked kernels, whose int8 activation blocks differ (0.6% of
a logit after 2 random layers, and greedy tokens part after a few on this 24-layer random model: kernels' tests
bound each against its reference; tests/models/test_streaming.py compares resident and streamed on f32 weights).

The model is a random Q8_0 llama GGUF of ~500 MiB (24 layers of 21 MB); the group's limit is 448 MiB, which the
repacked (resident) weights alone would overrun. Needs root and a writable memory cgroup hierarchy (v1 or v2):
skipped with the reason otherwise. Slow: two servers load the model (the first packs it and compiles the kernels,
outside the group).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from loadtests.memcgroup import CgroupUnavailable, MemoryCgroup
from tests.formats.gguf_factory import write_large_vocab_llama
from tests.server.live import ROOT, reap, serving_url

LIMIT_BYTES = 448 << 20
PROMPT = "hello world"


def _serve(gguf, env: dict[str, str], extra: list[str], group: MemoryCgroup | None = None) -> tuple[list, dict, int]:
    """(the greedy completion's tokens, /props' weights, the peak anonymous memory of the group) of one server."""
    cmd = [sys.executable, "-m", "modelc", "run", str(gguf), "--port", "0", "--threads", "2", "--no-webui",
           "--ctx-size", "256", "--kv-cache-mb", "8", *extra]  # fmt: skip
    cmd = group.wrap(cmd) if group is not None else cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak, done = [0], threading.Event()

    def sample() -> None:  # memory.stat's anonymous bytes, every 20 ms while the server runs
        while group is not None and not done.is_set():
            peak[0] = max(peak[0], group.anon_bytes())
            time.sleep(0.02)

    threading.Thread(target=sample, daemon=True).start()
    try:
        url = serving_url(proc, timeout_s=1500)
        with httpx.Client(base_url=url, timeout=600) as c:
            weights = c.get("/props").json()["weights"]
            body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 1}
            r = c.post("/v1/completions", json=body)
            assert r.status_code == 200, r.text
            text = r.json()["choices"][0]["logprobs"]["tokens"]
    finally:
        done.set()
        proc.terminate()
        proc.wait(timeout=60)
        reap(proc)
    return text, weights, peak[0]


@pytest.mark.slow
def test_a_model_larger_than_its_memory_limit_is_served_streamed_with_the_same_tokens(tmp_path):
    try:
        group = MemoryCgroup.make(LIMIT_BYTES)
    except CgroupUnavailable as e:
        pytest.skip(f"no memory cgroup to run in: {e}")
    try:
        gguf = tmp_path / "big.gguf"
        write_large_vocab_llama(gguf, vocab=8192, hidden=1536, layers=24, ctx=1024)
        assert os.path.getsize(gguf) > LIMIT_BYTES + (32 << 20)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(tmp_path / "home"),
               "MODELC_REPACK_CACHE_DIR": str(tmp_path / "repacked"), "MODELC_COLD_START": "wait"}  # fmt: skip
        # without a limit (packs the model into the store, compiles the kernels of the file layout)
        want, unlimited, _ = _serve(gguf, env, ["--weights", "streamed"])
        assert unlimited["mode"] == "streamed" and want
        got, limited, peak_anon = _serve(gguf, env, [], group)
        assert limited["mode"] == "streamed", limited  # auto: resident would not fit the limit
        assert got == want
        assert group.oom_kills() == 0
        assert group.peak_bytes() <= LIMIT_BYTES
        assert 0 < peak_anon < LIMIT_BYTES - (64 << 20)  # the rest of the group's charge is page cache
    finally:
        group.remove()

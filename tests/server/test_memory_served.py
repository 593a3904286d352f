"""llama.cpp's memory, served: `modelc run` of a model with a large vocabulary (Gemma 3's 262k rows) and the
default settings keeps its RSS within the file, the KV cache and 300 MB, with an f16 KV cache.

The model is a random Q8_0 GGUF whose tied token-embedding table is most of its 150 MB: an f32 copy of that
table (537 MB: the output head's, or a cold start's numpy matmul's, engine/warm._keep_vocabulary_out) would
break the bound. RSS is read after the first requests: from an empty kernel cache (the reference kernels
serving while helper processes compile), and on numba (slow: where the cache lacks the kernels, they compile
first). What this does not bound: the minute of a cold start between the warmer's repack of the table (in this process,
to load the decode kernels the helpers compiled) and the flip to numba, when both the file's table (read by
the reference head at every token) and its repacked copy are resident (docs/benchmarks.md, issue 38).
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.formats.gguf_factory import write_large_vocab_llama
from tests.server.live import ROOT, reap, serving_url

OVERHEAD_BYTES = 300 << 20  # the bound: RSS <= file + KV + 300 MB


def _rss_bytes(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_a_large_vocabulary_served_cold_takes_the_file_the_kv_cache_and_300_mb(tmp_path):
    """From an empty kernel cache: the reference kernels serve (the head dequantized per call, never copied to
    f32) while helper processes compile."""
    _served_rss(tmp_path, {"NUMBA_CACHE_DIR": str(tmp_path / "numba"), "MODELC_KERNEL_PACKS": "0"})


@pytest.mark.slow  # compiles the model's kernels before serving where the cache lacks them (minutes on 2 cores)
def test_a_large_vocabulary_served_on_numba_takes_the_file_the_kv_cache_and_300_mb(tmp_path):
    """On the numba kernels (the state after a cold start's compile, and every restart's): the head runs on the
    quantized (repacked) table, and the file pages the repack read are not kept."""
    _served_rss(tmp_path, {"MODELC_COLD_START": "wait"})


def _served_rss(tmp_path, extra_env: dict[str, str]) -> None:
    gguf_path = tmp_path / "big-vocab.gguf"
    write_large_vocab_llama(gguf_path)
    file_bytes = os.path.getsize(gguf_path)
    assert 262144 * 512 * 4 > OVERHEAD_BYTES + file_bytes  # an f32 copy of the table would not fit
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_HOME": str(tmp_path / "home"),
           "MODELC_REPACK_CACHE_DIR": str(tmp_path / "repacked"), **extra_env}  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-m", "modelc", "run", str(gguf_path), "--port", "0", "--threads", "1"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        url = serving_url(proc, timeout_s=1200)
        with httpx.Client(base_url=url, timeout=300) as c:
            props = c.get("/props").json()
            assert props["kv_cache_dtype"] == "float16"  # llama.cpp's default KV type
            assert props["n_ctx"] == 32768  # the trained context: its f16 KV (1 KiB a token) fits any budget
            for prompt, n in (("hi", 8), ("hi " * 60, 4)):  # a decode, and a prompt's many-row embedding gather
                r = c.post("/v1/completions", json={"prompt": prompt, "max_tokens": n, "temperature": 0})
                assert r.status_code == 200, r.text
            kv = next(m["kv_bytes"] for m in c.get("/api/ps").json()["models"])
        rss = _rss_bytes(proc.pid)
        assert 0 < kv <= 64 << 20
        assert rss <= file_bytes + kv + OVERHEAD_BYTES, (rss >> 20, file_bytes >> 20, kv >> 20)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reap(proc)

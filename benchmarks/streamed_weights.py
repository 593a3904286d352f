"""Models larger than memory (issue 42 item 3): `modelc run` under a memory cgroup limit below the model file,
its weights streamed from the file, against the disk's sequential read rate and llama.cpp under the same limit.

    python benchmarks/streamed_weights.py MODEL --limit-mib 3072 [--tokens 16] [--gguf MODEL.gguf]
        [--llama default --llama "no mmap" --llama "mmap, no repack"] [--skip-unlimited] [--drop-caches]

Needs root (it makes a memory cgroup: loadtests/memcgroup.py). Steps, each printed as one JSON line:
  disk:      the file read once from disk with 8 MiB preads, and once as the streamer reads it (MADV_POPULATE_READ
             on a mapping, 32 MiB at a time), its page cache dropped first (posix_fadvise, or the whole machine's
             with --drop-caches), GB/s; the faster is the disk's rate;
  unlimited: `modelc run` without a limit (weights auto: resident), greedy tokens and decode tok/s;
  limited:   `modelc run` in a cgroup of --limit-mib (auto picks streamed), the same request: tokens (equal?), decode
             tok/s, the bytes the server read from disk per token (/proc/PID/io), that rate against the disk's,
             the group's peak charged and peak anonymous memory, OOM kills, /props' weights;
  llama.cpp: llama-bench (tg --tokens, 2 threads) of the GGUF in the same limit, per --llama load mode: tok/s, or
             how it ended (rc 137 with an OOM kill counted: killed);
  disk again: the disk's rate after the runs (the machine is shared: the two bracket the runs).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from loadtests.memcgroup import MemoryCgroup  # noqa: E402

LLAMA_BIN = Path("/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin")
PROMPT = "The history of the printing press begins"


def disk_rate(path: str, drop_caches: bool) -> float:
    """GB/s of one pass over `path` with 8 MiB preads, from disk (its page cache dropped first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _evict(fd, drop_caches)
        buf = memoryview(bytearray(8 << 20))
        t0, off = time.perf_counter(), 0
        while (n := os.preadv(fd, [buf], off)) > 0:
            off += n
        dt = time.perf_counter() - t0
        _evict(fd, drop_caches)
        return off / dt / 1e9
    finally:
        os.close(fd)


def populate_rate(path: str, drop_caches: bool) -> float:
    """GB/s of one pass over `path` as the streamer reads it: madvise(MADV_POPULATE_READ) on a read-only mapping,
    32 MiB at a time (its page cache dropped first)."""
    import ctypes
    import mmap

    import numpy as np

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fd = os.open(path, os.O_RDONLY)
    size = os.fstat(fd).st_size
    m = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    addr = np.frombuffer(m, np.uint8).ctypes.data
    try:
        _evict(fd, drop_caches)
        t0 = time.perf_counter()
        for off in range(0, size, 32 << 20):
            libc.madvise(addr + off, min(32 << 20, size - off), 22)
        dt = time.perf_counter() - t0
        libc.madvise(addr, size, 4)
        _evict(fd, drop_caches)
        return size / dt / 1e9
    finally:
        del addr
        os.close(fd)


def disk_rates(path: str, drop_caches: bool) -> dict:
    return {"pread_8mib_gb_s": round(disk_rate(path, drop_caches), 3),
            "mmap_populate_gb_s": round(populate_rate(path, drop_caches), 3)}  # fmt: skip


def uncache(path: str) -> None:
    """Drop `path`'s page cache. A page stays charged to the cgroup that read it first (or its parent, once that
    group is removed): a run in a fresh group that finds the file cached reads it without its limit applying."""
    fd = os.open(path, os.O_RDONLY)
    try:
        _evict(fd, False)
    finally:
        os.close(fd)


def _evict(fd: int, drop_caches: bool) -> None:
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    if drop_caches:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def serve(model: str, tokens: int, group: MemoryCgroup | None, extra: list[str]) -> dict:
    """Start `modelc run` (in `group` where given), ask one greedy completion streamed, time its tokens."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MODELC_COLD_START": "wait"}
    cmd = [sys.executable, "-m", "modelc", "run", model, "--port", "0", "--threads", "2", "--no-webui", *extra]
    cmd = group.wrap(cmd) if group is not None else cmd
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak_anon, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set() and group is not None:
            peak_anon[0] = max(peak_anon[0], group.anon_bytes())
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t_start = time.perf_counter()
    out: dict = {}
    try:
        url = _url(proc, 900)
        out["ready_s"] = round(time.perf_counter() - t_start, 1)
        with httpx.Client(base_url=url, timeout=1800) as c:
            out["weights"] = c.get("/props").json().get("weights")
            io0 = _io_read(proc.pid)
            stamps, ids = [], []
            body = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0, "stream": True, "ignore_eos": True}
            with c.stream("POST", "/v1/completions", json=body) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        stamps.append(time.perf_counter())
                        ids.append(json.loads(line[6:])["choices"][0]["text"])
            io1 = _io_read(proc.pid)
        decode_s = stamps[-1] - stamps[0]
        out["text"] = "".join(ids)
        out["tokens"] = len(stamps)
        out["decode_tok_s"] = round((len(stamps) - 1) / decode_s, 3) if decode_s > 0 else None
        out["disk_read_bytes_per_token"] = (io1 - io0) // max(1, len(stamps)) if io0 is not None else None
    except Exception as e:  # noqa: BLE001 - a benchmark reports how the server ended
        out["error"] = f"{type(e).__name__}: {str(e)[-400:]}"
    finally:
        done.set()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out["rc"] = proc.returncode
        if group is not None:
            out["peak_charged_mib"] = group.peak_bytes() >> 20
            out["peak_anon_mib"] = peak_anon[0] >> 20
            out["oom_kills"] = group.oom_kills()
    return out


def _url(proc: subprocess.Popen, timeout_s: float) -> str:
    deadline, line, seen = time.monotonic() + timeout_s, "", []
    while time.monotonic() < deadline and "serving" not in line:
        line = proc.stderr.readline()
        seen.append(line)
        if not line and proc.poll() is not None:
            raise RuntimeError(f"modelc run ended with {proc.returncode}: {''.join(seen)[-600:]}")
    threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()  # keep the pipe drained
    return "http://" + line.split("http://", 1)[1].split()[0]


def _io_read(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


LLAMA_MODES = {
    "default": [],  # load mode auto (mmap), Q4_K/Q4_0 repacked into anonymous memory
    "mmap, no repack": ["--repack", "0", "-lm", "mmap"],  # the file's pages only: the kernel's LRU pages them
    "no mmap": ["-lm", "none"],  # read into anonymous buffers
}


def llama_bench(model: str, tokens: int, group: MemoryCgroup, mode: str, timeout_s: float) -> dict:
    cmd = [str(LLAMA_BIN / "llama-bench"), "-m", model, "-p", "0", "-n", str(tokens), "-t", "2", "-r", "1",
           *LLAMA_MODES[mode], "-o", "json"]  # fmt: skip
    uncache(model)  # pages cached by an earlier run stay charged to its group: this run must read the disk
    t0 = time.perf_counter()
    try:
        p = subprocess.run(group.wrap(cmd), capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:  # subprocess.run kills it
        return {
            "mode": mode,
            "rc": f"still running after {timeout_s:.0f} s",
            "peak_charged_mib": group.peak_bytes() >> 20,
        }
    out = {"mode": mode, "rc": p.returncode, "wall_s": round(time.perf_counter() - t0, 1)}
    try:
        out["tok_s"] = round(json.loads(p.stdout)[0]["avg_ts"], 3)
    except (ValueError, LookupError, TypeError):
        out["tail"] = (p.stderr or p.stdout)[-300:]
    out["peak_charged_mib"] = group.peak_bytes() >> 20
    out["oom_kills"] = group.oom_kills()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--limit-mib", type=int, required=True)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--llama", action="append", choices=list(LLAMA_MODES), help="llama-bench in this mode, same limit")
    ap.add_argument("--gguf", help="the GGUF llama-bench reads (default: MODEL)")
    ap.add_argument("--llama-timeout", type=float, default=300.0, help="seconds before a llama-bench run is stopped")
    ap.add_argument("--drop-caches", action="store_true", help="drop the whole page cache before each disk read")
    ap.add_argument("--skip-unlimited", action="store_true")
    ap.add_argument("--weights", default="auto", help="modelc run --weights under the limit (auto)")
    a = ap.parse_args()
    limit = a.limit_mib << 20
    size = os.path.getsize(a.model)
    print(json.dumps({"model": a.model, "file_mib": size >> 20, "limit_mib": a.limit_mib, "uptime": os.getloadavg()}))
    rates = disk_rates(a.model, a.drop_caches)
    rate = max(rates.values())  # the faster way to read the disk is its sequential rate
    print(json.dumps({"step": "disk", **rates}), flush=True)
    base = None
    if not a.skip_unlimited:
        base = serve(a.model, a.tokens, None, [])
        print(json.dumps({"step": "unlimited", **base}), flush=True)
    group = MemoryCgroup.make(limit)
    uncache(a.model)
    try:
        got = serve(a.model, a.tokens, group, ["--weights", a.weights])
    finally:
        group.remove()
    per_token = got.get("disk_read_bytes_per_token")
    if per_token and got.get("decode_tok_s"):
        got["disk_gb_s_while_decoding"] = round(per_token * got["decode_tok_s"] / 1e9, 3)
        got["vs_disk"] = round(got["disk_gb_s_while_decoding"] / rate, 3)
    if base is not None:
        got["same_text_as_unlimited"] = got.get("text") == base.get("text")
    print(json.dumps({"step": "limited", **got}), flush=True)
    for mode in a.llama or ():
        group = MemoryCgroup.make(limit)
        try:
            print(
                json.dumps(
                    {"step": "llama.cpp", **llama_bench(a.gguf or a.model, a.tokens, group, mode, a.llama_timeout)}
                ),
                flush=True,
            )
        finally:
            group.remove()
    print(json.dumps({"step": "disk again", **disk_rates(a.model, a.drop_caches)}))
    print(json.dumps({"uptime_after": os.getloadavg()}))


if __name__ == "__main__":
    main()

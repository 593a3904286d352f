"""Write Llama-3.1-8B-shaped random-weight GGUFs (Q4_K_M, Q8_0) with llama.cpp's quantizer.

    .venv/bin/python benchmarks/make_llama8b.py [OUT_DIR=/tmp/modelc-bench] [--types Q4_K_M,Q8_0]
        [--keep-f16] [--threads 2] [--quantizer PATH]

Outside CI: it needs llama.cpp's `llama-quantize` (default: the reference build under
/work/llama/.../build/bin; --quantizer or $LLAMA_QUANTIZE elsewhere), about 16 GB of free
disk for the F16 intermediate and a few minutes per step on 2 cores.

Shape: 32 layers, hidden 4096, FFN 14336, 32 heads, 8 KV heads (head dim 128), vocab 128256,
rope theta 500000 with llama3 rope scaling (factor 8, low 1, high 4, original context 8192:
the `rope_freqs.weight` divisors, as llama.cpp's converter writes them), trained context 131072,
untied output.weight; the Llama 3 BPE tokenizer (tokenizer.ggml.* keys) is copied from
../shared/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf (the script stops with a message when
that fixture is absent). Weights are seeded N(0, 0.02) matrices and 1 + N(0, 0.1) norms, so
speed is real and text is gibberish.

Steps (each one skips what already exists, so a long build can be split into short jobs):
1. llama8b-F16.gguf, written tensor by tensor (header and tensor infos first, then each
   tensor's data as it is generated; peak memory ~1.5 GB, never the whole F32 model);
2. `llama-quantize` to each of --types (llama.cpp's own mixes: Q4_K_M keeps output.weight in
   Q6_K and bumps attn_v / ffn_down in some layers);
3. the F16 file is deleted unless --keep-f16 or F16 is one of --types.
Every file is written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import subprocess
import sys
import time

import gguf
import numpy as np

from modelc.formats.export_gguf_hf import llama3_rope_factors

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from make_tinyllama import _copy_tokenizer, add_llama_shape  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENIZER_GGUF = ROOT.parent / "shared" / "fixtures" / "tokenizer" / "ggml-vocab-llama-bpe.gguf"
QUANTIZER = pathlib.Path("/work/llama/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-quantize")

LAYERS, HIDDEN, FFN, HEADS, KV_HEADS, VOCAB, CTX = 32, 4096, 14336, 32, 8, 128256, 131072
HEAD_DIM = HIDDEN // HEADS
THETA = 500000.0
ROPE_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}
QUANT_TYPES = ("Q4_K_M", "Q8_0", "Q4_0", "Q6_K", "Q5_K_M")
SCALE = 0.02


def plan() -> list[tuple[str, tuple[int, ...]]]:
    """(name, row-major shape) of every tensor in file order; 1-D ones are F32, 2-D ones F16."""
    kv = KV_HEADS * HEAD_DIM
    ts: list[tuple[str, tuple[int, ...]]] = [
        ("rope_freqs.weight", (HEAD_DIM // 2,)),
        ("token_embd.weight", (VOCAB, HIDDEN)),
    ]
    for i in range(LAYERS):
        p = f"blk.{i}."
        ts += [
            (p + "attn_norm.weight", (HIDDEN,)),
            (p + "attn_q.weight", (HIDDEN, HIDDEN)),
            (p + "attn_k.weight", (kv, HIDDEN)),
            (p + "attn_v.weight", (kv, HIDDEN)),
            (p + "attn_output.weight", (HIDDEN, HIDDEN)),
            (p + "ffn_norm.weight", (HIDDEN,)),
            (p + "ffn_gate.weight", (FFN, HIDDEN)),
            (p + "ffn_up.weight", (FFN, HIDDEN)),
            (p + "ffn_down.weight", (HIDDEN, FFN)),
        ]
    ts += [("output_norm.weight", (HIDDEN,)), ("output.weight", (VOCAB, HIDDEN))]
    return ts


def _rope_freqs() -> np.ndarray:
    cfg = {"rope_scaling": ROPE_SCALING, "head_dim": HEAD_DIM, "rope_theta": THETA}
    return np.asarray(llama3_rope_factors(cfg), dtype=np.float32)


def _data(name: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    if name == "rope_freqs.weight":
        return _rope_freqs()
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    out = np.empty(shape, dtype=np.float16)
    step = max(1, (1 << 24) // shape[1])  # 16M values (64 MB of f32) at a time
    for r in range(0, shape[0], step):
        chunk = rng.standard_normal((min(step, shape[0] - r), shape[1]), dtype=np.float32)
        chunk *= SCALE
        out[r : r + chunk.shape[0]] = chunk
    return out


def write_f16(path: pathlib.Path, seed: int = 0) -> None:
    """The F16 model at `path` (via path.tmp + rename), one tensor in memory at a time."""
    rng = np.random.default_rng(seed)
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name("llama-3.1-8b-random")
    add_llama_shape(w, CTX, HIDDEN, LAYERS, FFN, HEADS, KV_HEADS, VOCAB, THETA)
    w.add_file_type(1)  # LLAMA_FTYPE_MOSTLY_F16
    _copy_tokenizer(w, TOKENIZER_GGUF)
    tensors = plan()
    for name, shape in tensors:
        if len(shape) == 1:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
        else:
            w.add_tensor_info(name, shape, np.dtype(np.float16), 2 * shape[0] * shape[1])
    try:
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for name, shape in tensors:
            w.write_tensor_data(_data(name, shape, rng))
        w.close()
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def quantize(quantizer: pathlib.Path, src: pathlib.Path, dst: pathlib.Path, mix: str, threads: int) -> None:
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        p = subprocess.run([str(quantizer), str(src), str(tmp), mix, str(threads)], capture_output=True, text=True)
        if p.returncode != 0:  # its log goes to stderr: show the end of it
            raise RuntimeError(f"llama-quantize {mix} failed (exit {p.returncode}): {p.stderr[-2000:]}")
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default="/tmp/modelc-bench", type=pathlib.Path)
    ap.add_argument("--types", default="Q4_K_M,Q8_0", help=f"F16 and/or {', '.join(QUANT_TYPES)}")
    ap.add_argument("--keep-f16", action="store_true", help="keep llama8b-F16.gguf after quantizing")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quantizer", type=pathlib.Path, default=pathlib.Path(os.environ.get("LLAMA_QUANTIZE", QUANTIZER)))
    a = ap.parse_args(argv)
    out_dir = a.out_dir.resolve()
    if out_dir == ROOT or ROOT in out_dir.parents:
        print("error: write benchmark models outside the repository", file=sys.stderr)
        return 1
    types = [t for t in a.types.split(",") if t]
    bad = [t for t in types if t != "F16" and t not in QUANT_TYPES]
    if bad or not types:
        print(f"error: unknown type {','.join(bad)!r} (choose from F16, {', '.join(QUANT_TYPES)})", file=sys.stderr)
        return 1
    if not TOKENIZER_GGUF.is_file():
        print(f"skipped: the Llama 3 tokenizer fixture {TOKENIZER_GGUF} is absent", file=sys.stderr)
        return 1
    quants = [t for t in types if t != "F16"]
    if quants and not os.access(a.quantizer, os.X_OK):
        print(f"error: llama.cpp's quantizer {a.quantizer} is not there (--quantizer PATH)", file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    f16 = out_dir / "llama8b-F16.gguf"
    todo = [t for t in quants if not (out_dir / f"llama8b-{t}.gguf").exists()]
    if (todo or "F16" in types) and not f16.exists():
        t0 = time.perf_counter()
        write_f16(f16)
        print(f"{f16}  {f16.stat().st_size / 2**30:.2f} GiB  {time.perf_counter() - t0:.0f} s", flush=True)
    for mix in todo:
        dst = out_dir / f"llama8b-{mix}.gguf"
        t0 = time.perf_counter()
        quantize(a.quantizer, f16, dst, mix, a.threads)
        print(f"{dst}  {dst.stat().st_size / 2**30:.2f} GiB  {time.perf_counter() - t0:.0f} s", flush=True)
    if not a.keep_f16 and "F16" not in types and f16.exists():
        f16.unlink()
        print(f"removed {f16}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

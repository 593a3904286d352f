"""Write TinyLlama-1.1B-shaped random-weight GGUF files for benchmarks (never into the repo).

    .venv/bin/python benchmarks/make_tinyllama.py [OUT_DIR=/tmp/modelc-bench] [--types Q4_0,Q8_0,Q4_K_M,F16]
        [--ctx 2048]

Shape: 22 layers, hidden 2048, FFN 5632, 32 heads, 4 KV heads, vocab 32000, llama
metadata (trained context 2048, or --ctx N: then the files are named tinyllama-1.1b-ctxN-TYPE.gguf,
for long-context benchmarks), and the SentencePiece tokenizer (tokenizer.ggml.* keys) copied from
the tiny-llama fixture. Weights are seeded random blocks with sane fp16 scales
(modelc.kernels.matmul.gemm_random), so speed is real and text is gibberish.
Type mixes follow llama.cpp: Q4_0 keeps output.weight in Q6_K; Q4_K_M uses
Q6_K for output.weight and for attn_v / ffn_down in its "more bits" layers; IQ4_XS
keeps output.weight in Q6_K and every other matrix in IQ4_XS (IQ4_NL alike) (llama.cpp's mix
bumps a few attn_v to other types at some shapes; not modelled); the grid i-quants and TQ1_0/TQ2_0
likewise (every matrix of that type, output.weight Q6_K: random valid blocks need no importance
matrix, which llama.cpp's quantizer wants for IQ2_*/IQ1_*/IQ3_XXS; its own mixes keep more tensors
at higher types).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import gguf
import numpy as np

from modelc.ir import DataType
from modelc.kernels.matmul.gemm_random import random_tensor

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOKENIZER_GGUF = ROOT.parent / "shared" / "fixtures" / "models" / "tiny-llama" / "gguf" / "tiny-llama-F32.gguf"

LAYERS, HIDDEN, FFN, HEADS, KV_HEADS, VOCAB, CTX = 22, 2048, 5632, 32, 4, 32000, 2048
HEAD_DIM = HIDDEN // HEADS
FILE_TYPE = {
    "F16": 1,
    "Q4_0": 2,
    "Q8_0": 7,
    "Q4_K_M": 15,
    "IQ4_XS": 30,
    "IQ4_NL": 25,
    "IQ2_XXS": 19,
    "IQ2_XS": 20,
    "IQ2_S": 28,
    "IQ3_XXS": 23,
    "IQ3_S": 26,
    "IQ1_S": 24,
    "IQ1_M": 31,
    "TQ1_0": 36,
    "TQ2_0": 37,
}  # llama_ftype; fmt: skip


def _more_bits(layer: int) -> bool:
    """llama.cpp's use_more_bits(i, n) for Q4_K_M's attn_v / ffn_down."""
    n = LAYERS
    return layer < n // 8 or layer >= 7 * n // 8 or (layer - n // 8) % 3 == 2


def plan(mix: str) -> list[tuple[str, tuple[int, ...], DataType]]:
    """(name, row-major shape, dtype) for every tensor, in file order."""
    base = {"F16": DataType.F16, "Q4_0": DataType.Q4_0, "Q8_0": DataType.Q8_0, "Q4_K_M": DataType.Q4_K}.get(mix)
    base = base or DataType[mix]
    out_t = {"F16": DataType.F16, "Q8_0": DataType.Q8_0}.get(mix, DataType.Q6_K)
    kv = KV_HEADS * HEAD_DIM
    ts: list[tuple[str, tuple[int, ...], DataType]] = [("token_embd.weight", (VOCAB, HIDDEN), base)]
    for i in range(LAYERS):
        big = DataType.Q6_K if mix == "Q4_K_M" and _more_bits(i) else base
        p = f"blk.{i}."
        ts += [
            (p + "attn_norm.weight", (HIDDEN,), DataType.F32),
            (p + "attn_q.weight", (HIDDEN, HIDDEN), base),
            (p + "attn_k.weight", (kv, HIDDEN), base),
            (p + "attn_v.weight", (kv, HIDDEN), big),
            (p + "attn_output.weight", (HIDDEN, HIDDEN), base),
            (p + "ffn_norm.weight", (HIDDEN,), DataType.F32),
            (p + "ffn_gate.weight", (FFN, HIDDEN), base),
            (p + "ffn_up.weight", (FFN, HIDDEN), base),
            (p + "ffn_down.weight", (HIDDEN, FFN), big),
        ]
    ts += [("output_norm.weight", (HIDDEN,), DataType.F32), ("output.weight", (VOCAB, HIDDEN), out_t)]
    return ts


def _data(shape: tuple[int, ...], dt: DataType, rng: np.random.Generator) -> np.ndarray:
    if len(shape) == 1:
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    t = random_tensor(dt, shape[0], shape[1], rng)
    if dt is DataType.F16:
        return t.data.view(np.float16).reshape(shape)
    return t.data.reshape(shape[0], -1)


def _copy_tokenizer(w: gguf.GGUFWriter, source: pathlib.Path = TOKENIZER_GGUF) -> None:
    """Every tokenizer.ggml.* key of the GGUF `source` into w (make_llama8b.py copies Llama 3's this way)."""
    r = gguf.GGUFReader(source)
    for key, field in r.fields.items():
        if not key.startswith("tokenizer.ggml."):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)


def add_llama_shape(w: gguf.GGUFWriter, ctx: int, hidden: int, layers: int, ffn: int, heads: int, kv_heads: int,
                    vocab: int, theta: float) -> None:  # fmt: skip
    """The llama.* hyper-parameters of a plain Llama shape (head dim hidden / heads, RMS eps 1e-5)."""
    w.add_context_length(ctx)
    w.add_embedding_length(hidden)
    w.add_block_count(layers)
    w.add_feed_forward_length(ffn)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_rope_dimension_count(hidden // heads)
    w.add_rope_freq_base(theta)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(vocab)


def write(path: pathlib.Path, mix: str, seed: int = 0, ctx: int = CTX) -> None:
    rng = np.random.default_rng(seed)
    tensors = plan(mix)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(f"tinyllama-1.1b-random-{mix}")
    add_llama_shape(w, ctx, HIDDEN, LAYERS, FFN, HEADS, KV_HEADS, VOCAB, 10000.0)
    w.add_file_type(FILE_TYPE[mix])
    w.add_quantization_version(2)
    _copy_tokenizer(w)
    for name, shape, dt in tensors:
        if len(shape) == 1:
            w.add_tensor_info(name, shape, np.dtype(np.float32), 4 * shape[0])
        elif dt is DataType.F16:
            w.add_tensor_info(name, shape, np.dtype(np.float16), 2 * shape[0] * shape[1])
        else:
            nbytes = dt.nbytes(shape)
            w.add_tensor_info(
                name,
                (shape[0], nbytes // shape[0]),
                np.dtype(np.uint8),
                nbytes,
                raw_dtype=gguf.GGMLQuantizationType[dt.value],
            )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _name, shape, dt in tensors:
        w.write_tensor_data(_data(shape, dt, rng))
    w.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", nargs="?", default="/tmp/modelc-bench", type=pathlib.Path)
    ap.add_argument("--types", default="Q4_0,Q8_0,Q4_K_M,F16")
    ap.add_argument("--ctx", type=int, default=CTX, help="trained context length written to the metadata")
    a = ap.parse_args(argv)
    out_dir = a.out_dir.resolve()
    if out_dir == ROOT or ROOT in out_dir.parents:
        print("error: write benchmark models outside the repository", file=sys.stderr)
        return 1
    out_dir.mkdir(parents=True, exist_ok=True)
    for mix in a.types.split(","):
        if mix not in FILE_TYPE:
            print(f"error: unknown type mix {mix} (choose from {', '.join(FILE_TYPE)})", file=sys.stderr)
            return 1
        tag = "" if a.ctx == CTX else f"ctx{a.ctx}-"
        path = out_dir / f"tinyllama-1.1b-{tag}{mix}.gguf"
        t0 = time.perf_counter()
        write(path, mix, ctx=a.ctx)
        print(f"{path}  {path.stat().st_size / 2**30:.2f} GiB  {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""modelc vs llama.cpp (llama-cpp-python) on the same GGUF at the same thread count.

    .venv/bin/python benchmarks/compare_llamacpp.py /tmp/modelc-bench/tinyllama-1.1b-Q4_0.gguf [...]
        [--threads 2] [--prompt-tokens 128] [--decode-tokens 32]
        [--llamacpp-python /work/refvenv/bin/python] [--skip-llamacpp] [--matmul-only]
        [--write docs/benchmarks.md]

Measures prefill tok/s (one prompt of --prompt-tokens tokens, time to the first
sampled token) and decode tok/s (greedy, the following --decode-tokens tokens)
with modelc's `Engine` in this process and llama.cpp in a subprocess of the
separate venv that has llama-cpp-python (never this repo's venv). Both get the
same token ids and warm up once first.

--matmul-only times only modelc's linear.matmul over every 2-D weight of the
file (T=1 and T=prompt), i.e. an upper bound that ignores attention, norms,
RoPE and sampling; the table labels it as such.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numba
import numpy as np

# The environment as given, before modelc.kernels.linear sets OMP_WAIT_POLICY:
# llama.cpp runs with its own defaults unless the user set something.
_ORIG_ENV = dict(os.environ)

_LLAMACPP_SCRIPT = r"""
import json, sys, time
from llama_cpp import Llama
path, threads, n_prompt, n_decode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ids = json.loads(sys.stdin.read())
llm = Llama(model_path=path, n_threads=threads, n_threads_batch=threads, n_ctx=n_prompt + n_decode + 16,
            n_batch=max(512, n_prompt), verbose=False, logits_all=False)
llm.eval(ids[:8]); llm.reset()  # warm-up
t0 = time.perf_counter(); llm.eval(ids); tok = int(llm.sample(temp=0.0)); t1 = time.perf_counter()
toks = 0
for _ in range(n_decode):
    llm.eval([tok]); tok = int(llm.sample(temp=0.0)); toks += 1
t2 = time.perf_counter()
print(json.dumps({"prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": toks / (t2 - t1)}))
"""


def prompt_ids(n: int, vocab: int = 32000, seed: int = 0) -> list[int]:
    """n deterministic ordinary token ids (BOS first): the same prompt for both engines."""
    rng = np.random.default_rng(seed)
    return [1, *rng.integers(100, vocab, n - 1).tolist()]


def run_modelc(path: str, threads: int, ids: list[int], n_decode: int) -> dict:
    from modelc.api.engine import Engine
    from modelc.request import SamplingParams

    t0 = time.perf_counter()
    eng = Engine.load(path, threads=threads, kv_cache_tokens=len(ids) + n_decode + 32)
    load_s = time.perf_counter() - t0
    greedy = SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True)
    # warm-up: load (or compile) every kernel variant: short and long prefill, decode
    list(eng.generate_ids(ids[:8], greedy))
    list(eng.generate_ids(ids[: min(len(ids), 48)], greedy))
    p = SamplingParams(max_tokens=n_decode + 1, temperature=0.0, ignore_eos=True)
    it = eng.generate_ids(ids, p)
    t0 = time.perf_counter()
    next(it)
    t1 = time.perf_counter()
    n = sum(1 for _ in it)
    t2 = time.perf_counter()
    return {"load_s": load_s, "prefill_tok_s": len(ids) / (t1 - t0), "decode_tok_s": n / (t2 - t1)}


def run_matmul_only(path: str, threads: int, n_prompt: int) -> dict:
    """linear.matmul over every 2-D weight (output.weight once), no other layer work."""
    import gguf

    from modelc.ir import DataType, TensorData
    from modelc.kernels import linear

    numba.set_num_threads(threads)
    r = gguf.GGUFReader(path)
    ws = []
    for t in r.tensors:
        if len(t.shape) != 2 or t.name == "token_embd.weight":
            continue
        dt = DataType.from_ggml(int(t.tensor_type))
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        ws.append(linear.prepare_weight(TensorData(shape, dt, np.asarray(t.data).reshape(-1).view(np.uint8))))
    res = {}
    for label, tokens in (("decode_tok_s", 1), ("prefill_tok_s", n_prompt)):
        x = {w.cols: np.random.default_rng(0).standard_normal((tokens, w.cols)).astype(np.float32) for w in ws}
        outs = [np.empty((tokens, w.rows), np.float32) for w in ws]
        seen = set()
        for w, o in zip(ws, outs, strict=True):  # warm-up: compile / load each kernel variant once
            if w.dtype not in seen:
                seen.add(w.dtype)
                linear.matmul(o, x[w.cols], w)
        reps = 3 if tokens == 1 else 1
        t0 = time.perf_counter()
        for _ in range(reps):
            for w, o in zip(ws, outs, strict=True):
                linear.matmul(o, x[w.cols], w)
        res[label] = tokens * reps / (time.perf_counter() - t0)
    return res


def run_llamacpp(python: str, path: str, threads: int, ids: list[int], n_decode: int, passive: bool = False) -> dict:
    cmd = [python, "-c", _LLAMACPP_SCRIPT, path, str(threads), str(len(ids)), str(n_decode)]
    env = dict(_ORIG_ENV, OMP_WAIT_POLICY="passive") if passive else _ORIG_ENV
    p = subprocess.run(cmd, input=json.dumps(ids), capture_output=True, text=True, timeout=1800, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"llama-cpp-python failed (exit {p.returncode}): {p.stderr.strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def to_markdown(rows: list[dict], threads: int, n_prompt: int, n_decode: int) -> str:
    load = os.getloadavg()
    lines = [
        "## modelc vs llama.cpp",
        "",
        f"`benchmarks/compare_llamacpp.py`, {threads} threads, prompt {n_prompt} tokens, {n_decode} greedy decode tokens;",
        f"{os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} at the end; "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        "| model | engine | prefill tok/s | decode tok/s |",
        "|---|---|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['model']} | {r['engine']} | {r['prefill_tok_s']:.1f} | {r['decode_tok_s']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("gguf", nargs="+")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--decode-tokens", type=int, default=32)
    ap.add_argument("--llamacpp-python", default="/work/refvenv/bin/python")
    ap.add_argument("--skip-llamacpp", action="store_true")
    ap.add_argument(
        "--llamacpp-passive",
        action="store_true",
        help="also run llama.cpp with OMP_WAIT_POLICY=passive (what modelc sets for its own OpenMP threads)",
    )
    ap.add_argument("--matmul-only", action="store_true", help="time modelc's matmuls only (upper bound)")
    ap.add_argument("--write", type=pathlib.Path, default=None)
    a = ap.parse_args(argv)
    ids = prompt_ids(a.prompt_tokens)
    rows = []
    for path in a.gguf:
        name = pathlib.Path(path).stem
        if a.matmul_only:
            r = run_matmul_only(path, a.threads, a.prompt_tokens)
            rows.append({"model": name, "engine": "modelc matmuls only (upper bound)", **r})
        else:
            r = run_modelc(path, a.threads, ids, a.decode_tokens)
            rows.append({"model": name, "engine": "modelc", **r})
        print(rows[-1], flush=True)
        if not a.skip_llamacpp:
            r = run_llamacpp(a.llamacpp_python, path, a.threads, ids, a.decode_tokens)
            rows.append({"model": name, "engine": "llama.cpp (default env)", **r})
            print(rows[-1], flush=True)
            if a.llamacpp_passive:
                r = run_llamacpp(a.llamacpp_python, path, a.threads, ids, a.decode_tokens, passive=True)
                rows.append({"model": name, "engine": "llama.cpp (OMP_WAIT_POLICY=passive)", **r})
                print(rows[-1], flush=True)
    md = to_markdown(rows, a.threads, a.prompt_tokens, a.decode_tokens)
    print(md)
    if a.write:
        sys.path.insert(0, str(pathlib.Path(__file__).parent))
        from kernels import write_section  # benchmarks/kernels.py

        write_section(a.write, md, "## modelc vs llama.cpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
